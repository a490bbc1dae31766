"""A disk that fills up under a command, through the real CLI: ``RLIMIT_FSIZE`` makes every write
past a size fail as a full disk does (``SIGXFSZ`` ignored, so the write returns ``EFBIG``). The
command says so in one line, and leaves nothing behind that it did not finish — a failure for lack
of space must not keep taking space."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, make_session, run_cli, write_sessions

SAMPLE = ROOT / "examples" / "sessions.jsonl"


def _with_file_size_limit(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _run_cli_on_a_full_disk(*args: str, env: dict[str, str], limit: int) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "worker", *args], capture_output=True, text=True, timeout=120, env=full_env, cwd=ROOT,
        preexec_fn=lambda: _with_file_size_limit(limit),
    )


def test_a_backup_that_runs_out_of_space_leaves_no_partial_copy(tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    assert run_cli("import", str(SAMPLE), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    backups = tmp_path / "backups"
    good = backups / "graph.sqlite3"
    assert run_cli("backup", str(good), env=env).returncode == 0
    before = good.read_bytes()
    assert len(before) > 1_000_000

    done = _run_cli_on_a_full_disk("backup", str(good), env=env, limit=500_000)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == ["rem-cycle: backup failed: disk I/O error"]
    # The earlier backup is untouched and the failed copy took no space.
    assert good.read_bytes() == before
    assert sorted(p.name for p in backups.iterdir()) == ["graph.sqlite3"]

    # Space again: the same command completes.
    assert run_cli("backup", str(good), env=env).returncode == 0
    assert sorted(p.name for p in backups.iterdir()) == ["graph.sqlite3"]


def test_an_import_that_runs_out_of_space_says_how_far_it_got(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    sessions = [make_session(f"s-{i:03d}", 20, text="turn {i} of {sid}: " + "the drain loses lines " * 30) for i in range(60)]
    path = write_sessions(tmp_path / "s.jsonl", sessions)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = "not json\n"  # a rejected line before the disk fills up
    path.write_text("".join(lines), encoding="utf-8")
    # The first 30 sessions are stored already; then no file of Chroma's may grow past its size.
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_text("".join(lines[:30]), encoding="utf-8")
    assert run_cli("import", str(prefix), env=env).returncode == 1
    limit = max(p.stat().st_size for p in (data / "chroma").rglob("*") if p.is_file())

    done = _run_cli_on_a_full_disk("import", str(path), env=env, limit=limit)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    # What was done, the line rejected so far and how far it got, as when Chroma goes away.
    assert done.stdout.startswith("imported "), done.stdout
    assert "1 lines rejected" in done.stdout
    err = done.stderr.splitlines()
    assert err[0] == "  line 2: not JSON: Expecting value at column 1"
    assert err[-1].startswith("rem-cycle: import stopped: Chroma refused a call"), err
    assert re.search(r"; lines 1-\d+ are imported or listed as rejected, the rest is not; re-running the import is safe$", err[-1]), err

    # Space again: re-running imports the rest, and nothing is missing.
    again = run_cli("import", str(path), "--json", env=env)
    assert again.returncode == 1  # line 2 is still rejected
    report = json.loads(again.stdout)
    assert report["sessions"] == 59
    assert report["memories_written"] + report["memories_unchanged"] == 59 * 20
    assert report["memories_written"] > 0
