"""Small defects of the local journey, through the real CLI: read commands that must create
nothing, output whose reader went away, a terminal that cannot show every character, and the
words of a refused argument."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, copy_digested_sample, make_session, run_cli, write_sessions


@pytest.fixture(scope="module")
def sample_data(tmp_path_factory: pytest.TempPathFactory, digested_sample: Path) -> Path:
    return copy_digested_sample(digested_sample, tmp_path_factory.mktemp("polish") / "data")


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith(("-wal", "-shm")))


def test_status_on_a_data_dir_without_a_graph_says_so_and_creates_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    imported = tmp_path / "imported"  # an import made the data dir (its embedded Chroma), no cycle yet
    sessions = write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])
    assert run_cli("import", str(sessions), env={"REM_DATA_DIR": str(imported)}).returncode == 0
    for data in (empty, imported):
        before = _tree(data)
        for args in (["status"], ["status", "--json"]):
            done = run_cli(*args, env={"REM_DATA_DIR": str(data)})
            assert done.returncode == 1, (args, done.stdout, done.stderr[-2000:])
            assert done.stdout == ""
            assert done.stderr.splitlines() == [
                f"rem-cycle: no graph database at {(data / 'graph.sqlite3').resolve()} "
                "(run a REM cycle first: rem-cycle --once)"
            ]
            assert _tree(data) == before


def _cli_process(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "worker", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=ROOT
    )


@pytest.mark.parametrize("args", [
    ["export"], ["export", "--format", "graphml"], ["status"], ["status", "--json"], ["show", "CLASS:LazyEdgeQueue"],
    ["search", "queue"], ["recall", "queue"], ["recall", "queue", "--json"], ["candidates"], ["drain", "--dry-run"],
])
def test_every_command_whose_reader_went_away_stops_quietly_with_141(sample_data: Path, args: list[str]) -> None:
    # `rem-cycle export | head -c 100`: the reader takes what it wants and goes; for the others it
    # goes before the command writes anything (their output fits the pipe's buffer).
    before = _tree(sample_data)
    process = _cli_process(*args, env={"REM_DATA_DIR": str(sample_data)})
    assert process.stdout is not None and process.stderr is not None
    if args[0] == "export":  # about 1 MB (GraphML: in one piece): far past the pipe's buffer
        assert len(process.stdout.read(100)) == 100
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, stderr[-2000:]
    assert stderr == ""
    assert _tree(sample_data) == before


def test_the_reader_gone_exit_status_is_documented() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^\| `141` \| the output's reader went away", readme, re.MULTILINE)
    assert "141  the output's reader went away" in run_cli("--help").stdout


def _run_encoded(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "worker", *args], capture_output=True, env=full_env, cwd=ROOT, timeout=300)


_JSON_READERS = (("status", "--json"), ("recall", "queue", "--json"), ("show", "CLASS:LazyEdgeQueue", "--json"))


@pytest.fixture(scope="module")
def utf8_answers(sample_data: Path) -> dict[tuple[str, ...], bytes]:
    """What a UTF-8 terminal is given by the JSON readers and ``export``: the reference every
    encoding's answer is compared with (read once, the sample graph being the same for each)."""
    env = {"REM_DATA_DIR": str(sample_data), "PYTHONIOENCODING": "utf-8"}
    return {args: _run_encoded(*args, env=env).stdout for args in (*_JSON_READERS, ("export",))}


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_cannot_show_every_character_gets_escapes_not_a_crash(
    sample_data: Path, utf8_answers: dict[tuple[str, ...], bytes], encoding: str,
) -> None:
    env = {"REM_DATA_DIR": str(sample_data), "PYTHONIOENCODING": encoding}
    shown: dict[tuple[str, ...], str] = {}
    for args in (("status",), ("show", "CLASS:LazyEdgeQueue"), ("recall", "queue"), ("search", "queue"), ("candidates",)):
        done = _run_encoded(*args, env=env)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        assert b"Traceback" not in done.stderr
        shown[args] = done.stdout.decode(encoding)  # all of it in the terminal's encoding
    # status's separator (U+00B7) and its cut cells' ellipsis (U+2026): escaped where not encodable.
    status = shown[("status",)]
    assert "\\u2026" in status and ("\\xb7" in status) == (encoding == "ascii")
    # One JSON object, ASCII (escaped in JSON's own way), the same data as on a UTF-8 terminal.
    for args in _JSON_READERS:
        done = _run_encoded(*args, env=env)
        assert done.returncode == 0 and done.stdout.isascii(), args
        answer, reference = json.loads(done.stdout), json.loads(utf8_answers[args])
        if args[0] == "status":
            assert answer["graph"] == reference["graph"]
        else:
            assert answer == reference
    # export writes its file format's encoding (UTF-8), as --out does, whatever the terminal's.
    done = _run_encoded("export", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not done.stdout.isascii()
    assert json.loads(done.stdout.decode("utf-8"))["nodes"] == json.loads(utf8_answers[("export",)])["nodes"]


@pytest.mark.parametrize(("option", "value", "accepted"), [
    ("--budget-tokens", "-5", "1 to 200000"), ("--budget-tokens", "0", "1 to 200000"),
    ("--budget-tokens", "200001", "1 to 200000"), ("--limit", "-1", "1 to 100"), ("--limit", "0", "1 to 100"),
])
def test_a_refused_recall_count_says_what_is_accepted(sample_data: Path, option: str, value: str, accepted: str) -> None:
    done = run_cli("recall", "queue", option, value, env={"REM_DATA_DIR": str(sample_data)})
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"rem-cycle recall: error: argument {option}: must be {accepted}, not {value}"


_PEAK_RSS = """\
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, capture_output=True)
sys.stderr.buffer.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def _enqueue_peak(path: Path, data: Path) -> tuple[int, int]:
    """(exit status, peak resident bytes) of ``rem-cycle enqueue PATH``, a fresh process's only child."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {
        "REM_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS, sys.executable, "-m", "worker", "enqueue", str(path)],
                          capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=300)
    status, peak = done.stdout.split()
    return int(status), int(peak)


def _edge_line(number: int) -> str:
    return json.dumps({"source": f"CONCEPT:concept {number}", "target": f"memory:s-{number // 50}-t{number % 50}",
                       "relationship": "MENTIONED_IN", "properties": {"justification": f"named in turn {number}"}}) + "\n"


def test_enqueue_of_a_large_file_holds_a_batch_not_the_file_and_is_still_all_or_none(tmp_path: Path) -> None:
    from store.lazy_table import APPEND_BATCH_ROWS

    data = tmp_path / "data"
    data.mkdir()
    # A bad line in the last batch: nothing of the earlier batches is queued. Five batches show it
    # as the big file's ninety-five would (the check reads a batch at a time either way), at a
    # twentieth of the reading.
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(_edge_line(number) for number in range(5 * APPEND_BATCH_ROWS)) + '{"source": "CONCEPT:a"}\n',
                   encoding="utf-8")
    assert _enqueue_peak(bad, data)[0] == 1
    assert list(data.iterdir()) == []
    edges = tmp_path / "edges.jsonl"
    with edges.open("w", encoding="utf-8") as out:
        number = 0
        while out.tell() < 30_000_000:  # about 190,000 edges: many batches
            out.write(_edge_line(number))
            number += 1
    size = edges.stat().st_size
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    baseline = _enqueue_peak(empty, data)[1]
    status, peak = _enqueue_peak(edges, data)
    assert status == 0
    assert sum(1 for _ in (data / "lazy-edges.jsonl").open("rb")) == number
    # It held about nine times the file (270 MB over the command's own); now a batch of edges.
    assert peak - baseline < size // 4, (peak - baseline, size)


def test_enqueue_from_standard_input_reads_it_once_and_numbers_lines_as_an_editor(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    edge = '{"source": "CONCEPT:%s", "target": "memory:m1", "relationship": "R"}'
    text = (edge % "a") + "\r\n\r\n" + (edge % "b") + "\r{oops\n" + '{"source": "CONCEPT:c"}\n'
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"REM_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "worker", "enqueue", "-"], input=text, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines()[:2] == [
        "  line 4: malformed-json: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "  line 5: invalid-edge: missing target, relationship",
    ]
    assert done.stderr.splitlines()[-1] == "rem-cycle: 2 of 4 lines rejected; nothing was queued"
    assert list(data.iterdir()) == []
    good = text.split("{oops")[0]
    done = subprocess.run([sys.executable, "-m", "worker", "enqueue", "-", "--json"], input=good, capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert json.loads(done.stdout) == {"queue": "file", "queued": 2}
    assert [json.loads(line)["source"] for line in (data / "lazy-edges.jsonl").open(encoding="utf-8")] == ["CONCEPT:a", "CONCEPT:b"]


def test_text_with_emoji_codes_is_printed_as_written(tmp_path: Path) -> None:
    """audit31: every command's console turned `:name:` into an emoji — a turn saying `Fix the
    :bug: label` was shown `Fix the 🐛 label`, and `show` named the session `session:two` as
    `session2️⃣` (its `session:two: Session two` line), an id no one could copy back."""
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    session = make_session("two", 1, text="Fix the :bug: label in GraphStore :thumbs_up:")
    assert run_cli("import", str(write_sessions(tmp_path / "s.jsonl", [session])), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    for args in (["show", "CLASS:GraphStore"], ["show", "session:two"]):
        done = run_cli(*args, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "🐛" not in done.stdout and "2️⃣" not in done.stdout, (args, done.stdout)
        assert ":bug:" in done.stdout or "session:two" in done.stdout, (args, done.stdout)


def test_the_progress_bar_shows_emoji_codes_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """la32out: the progress bar (`sync`, `drain`: stderr on a terminal) had a console of its own
    that still turned `:bug:` into 🐛 — the one console left after audit31. It is now
    ``output_console``'s, so one rule holds for every console. A real pseudo-terminal stands for the
    user's, so the bar is drawn as there."""
    from worker.cli import _progress_bar

    main, side = os.openpty()
    terminal = os.fdopen(side, "w", encoding="utf-8")
    with monkeypatch.context() as patched:
        patched.setattr(sys, "stderr", terminal)
        with _progress_bar(argparse.Namespace(), "fixing the :bug: label") as on_progress:
            assert on_progress is not None, "no bar on a terminal"
            on_progress(1, 2)
    terminal.close()
    drawn = b""
    with os.fdopen(main, "rb", buffering=0) as screen:
        while True:
            try:
                chunk = screen.read(1 << 16)
            except OSError:  # EIO: the terminal's other end is closed and all it wrote was read
                break
            if not chunk:
                break
            drawn += chunk
    assert "fixing the :bug: label" in drawn.decode() and "🐛" not in drawn.decode(), drawn
