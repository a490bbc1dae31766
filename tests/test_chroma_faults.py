"""Chroma going away: a `chroma run` server stopped under a running daemon, then brought back."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE, free_port, run_cli, start_chroma_server


def runs(data_dir: Path) -> list[tuple[str, str | None]]:
    path = data_dir / "graph.sqlite3"
    if not path.exists():
        return []
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT outcome, reason_code FROM rem_runs ORDER BY started_at, rowid").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_daemon_survives_chroma_outage(tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "chroma"
    server = start_chroma_server(store, port)
    data_dir = tmp_path / "d"
    env = {"REM_DATA_DIR": str(data_dir), "REM_CHROMA_URL": f"http://127.0.0.1:{port}", "REM_INTERVAL_SECONDS": "1"}
    assert run_cli("import", str(SAMPLE), env=env).returncode == 0
    daemon_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    daemon = subprocess.Popen([sys.executable, "-m", "worker"], env=daemon_env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: ("completed", None) in runs(data_dir), 120, "a completed cycle")
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        wait_for(lambda: ("failed", "chroma-unavailable") in runs(data_dir), 120, "a cycle failed for chroma-unavailable")
        assert daemon.poll() is None, "the daemon must survive a failed cycle"
        completed_before = runs(data_dir).count(("completed", None))
        server = start_chroma_server(store, port)
        wait_for(lambda: runs(data_dir).count(("completed", None)) > completed_before, 120, "a completed cycle after recovery")
        assert daemon.poll() is None
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        server.kill()
        server.wait(10)
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["graph"]["nodes"]["SESSION"] == 26
