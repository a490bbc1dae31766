"""A disk that fills up under a command, through the real CLI: ``RLIMIT_FSIZE`` makes every write
past a size fail as a full disk does (``SIGXFSZ`` ignored, so the write returns ``EFBIG``). The
command says so in one line, and leaves nothing behind that it did not finish — a failure for lack
of space must not keep taking space."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, run_cli

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
