"""``rem-cycle enqueue`` attacked as users feed it: huge lines, pipes and process substitution,
odd bytes. Each bad line is named and nothing is queued; memory stays bounded whatever the input."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

EDGE = {"source": "CONCEPT:a", "target": "memory:m1", "relationship": "MENTIONED_IN"}


def _queued(data: Path) -> list[dict[str, object]]:
    queue = data / "lazy-edges.jsonl"
    return [json.loads(line) for line in queue.read_text(encoding="utf-8").splitlines()] if queue.exists() else []


# Runs a command and writes its peak resident memory (KiB) to argv[1]. A child's ru_maxrss counts
# what it held when forked, before its exec: forked from pytest (hundreds of MB after a few
# tests) it would measure pytest, so the command is forked from this small process instead.
MEASURE = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run_measured(args: list[str], env: dict[str, str], peak_file: Path) -> tuple[int, str, int]:
    """``python -m worker ARGS``: (exit status, stderr, its peak resident memory in KiB)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", MEASURE, str(peak_file), sys.executable, "-m", "worker", *args], cwd=ROOT,
                          env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    return done.returncode, done.stderr.decode("utf-8", "replace"), int(peak_file.read_text())


def test_a_huge_line_is_refused_unread_and_memory_stays_bounded(tmp_path: Path) -> None:
    """A 50 MB line (a JSON array of 800,000 edges written on one line) was read whole and parsed:
    500 MB resident to refuse it (a 1 GB file: out of memory). It is read past in pieces now and
    named with its size; the lines around it are checked as before and nothing is queued."""
    data = tmp_path / "data"
    data.mkdir()
    edges = tmp_path / "edges.jsonl"
    one = json.dumps(EDGE)
    with edges.open("w", encoding="utf-8") as out:
        out.write(one + "\n")
        out.write("[" + ",".join([one] * 800_000) + "]\n")
        out.write(one + "\n{oops\n")
    size = len(one) * 800_000 + 800_000 + 1
    status, stderr, peak_kib = _run_measured(["enqueue", str(edges)], {"REM_DATA_DIR": str(data)}, tmp_path / "peak")
    assert status == 1, stderr
    assert stderr.splitlines() == [
        f"  line 2: line-too-long: line of {size} bytes, longer than any queue line can be (at most 1048576 bytes)",
        "  line 4: malformed-json: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "rem-cycle: 2 of 4 lines rejected; nothing was queued",
    ]
    assert _queued(data) == []
    assert peak_kib < 250 * 1024, f"{peak_kib // 1024} MiB resident"


def test_a_line_whose_escapes_make_it_long_is_checked_as_its_queue_line(tmp_path: Path) -> None:
    """The reading bound is not the queue's limit: a line of 1.5 MiB of ``\\u00e9`` escapes is a
    queue line of 0.5 MiB, and is queued."""
    data = tmp_path / "data"
    data.mkdir()
    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps({**EDGE, "properties": {"quote": "é" * 262_144}}) + "\n", encoding="ascii")
    assert edges.stat().st_size > 1024 * 1024
    done = run_cli("enqueue", str(edges), env={"REM_DATA_DIR": str(data)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert _queued(data)[0]["properties"] == {"quote": "é" * 262_144}


@pytest.mark.parametrize("how", ["dev-stdin", "fifo"])
def test_a_pipe_named_as_the_file_is_read_once_and_queued(tmp_path: Path, how: str) -> None:
    """``rem-cycle enqueue <(producer)``, ``enqueue /dev/stdin`` or a named pipe: the file is read
    twice (checked, then queued), which a pipe cannot be, so it is spooled like ``-``. Before, it
    failed with ``File or stream is not seekable.``"""
    data = tmp_path / "data"
    data.mkdir()
    lines = "".join(json.dumps({**EDGE, "target": f"memory:m{i}"}) + "\n" for i in range(3))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data)}
    if how == "dev-stdin":
        done = subprocess.run([sys.executable, "-m", "worker", "enqueue", "/dev/stdin"], input=lines, text=True,
                              capture_output=True, cwd=ROOT, env=env, timeout=120)
    else:
        fifo = tmp_path / "edges.fifo"
        os.mkfifo(fifo)
        proc = subprocess.Popen([sys.executable, "-m", "worker", "enqueue", str(fifo)], text=True, cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while True:  # the writer's open waits for the reader: never past the reader's exit
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                assert exc.errno == errno.ENXIO and proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.05)
        os.set_blocking(writer, True)
        with os.fdopen(writer, "w", encoding="utf-8") as out:
            out.write(lines)
        stdout, stderr = proc.communicate(timeout=120)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("queued 3 lazy edges")
    assert [edge["target"] for edge in _queued(data)] == ["memory:m0", "memory:m1", "memory:m2"]


def test_a_refused_enqueue_with_json_prints_its_report(tmp_path: Path) -> None:
    """``--json`` promises one JSON object on stdout; a refused enqueue printed none (only its
    lines on stderr), so a script parsing it failed on empty output."""
    data = tmp_path / "data"
    data.mkdir()
    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps(EDGE) + "\n" + json.dumps({"source": "CONCEPT:a"}) + "\n{oops\n", encoding="utf-8")
    done = run_cli("enqueue", str(edges), "--json", env={"REM_DATA_DIR": str(data)})
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "queued": 0, "queue": "file", "lines": 3,
        "rejected": ["line 2: invalid-edge: missing target, relationship",
                     "line 3: malformed-json: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"],
    }
    assert done.stderr.splitlines()[-1] == "rem-cycle: 2 of 3 lines rejected; nothing was queued"
    assert _queued(data) == []


@pytest.mark.both_backends
def test_enqueue_into_the_file_on_a_missing_data_dir_refuses_and_creates_nothing(tmp_path: Path, database_url: str | None) -> None:
    # Before, with a PostgreSQL graph: exit 0, "queued 1 lazy edges", and the mistyped data dir
    # created to hold a queue file no worker drains. SQLite refused: both engines refuse alike now.
    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps(EDGE) + "\n")
    data = tmp_path / "mistyped" / "data"
    env = {"REM_DATA_DIR": str(data)} | ({"REM_DATABASE_URL": database_url} if database_url else {})
    done = run_cli("enqueue", str(edges), env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"rem-cycle: no data dir at {data}, so no queue file (set REM_DATA_DIR or data_dir in --config; "
        "`rem-cycle --once` creates it)"
    ]
    assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edges.jsonl"]
    data.mkdir(parents=True)  # the data dir there: the line is queued in its file
    assert run_cli("enqueue", str(edges), env=env).returncode == 0
    assert _queued(data) == [{**EDGE, "timestamp": _queued(data)[0]["timestamp"]}]
