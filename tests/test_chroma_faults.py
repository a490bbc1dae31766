"""Chroma going away: a `chroma run` server killed under a running daemon, then brought back; an
embedded store damaged on disk."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, free_port, run_cli, start_chroma_server
from tests.daemon_support import read_runs, start_worker, stop, wait_for, worker_env


def outcomes(graph_path: Path) -> list[tuple[str, str | None]]:
    return [(run["outcome"], run["reason_code"]) for run in read_runs(graph_path)]


@pytest.mark.slow
def test_daemon_survives_chroma_outage(tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "chroma"
    server = start_chroma_server(store, port)
    data_dir = tmp_path / "d"
    env = worker_env(data_dir, chroma_url=f"http://127.0.0.1:{port}", interval_seconds="1")
    graph = data_dir / "graph.sqlite3"
    assert run_cli("import", str(SAMPLE), env=env).returncode == 0
    daemon = start_worker(env=env, log_path=tmp_path / "daemon.log")
    try:
        wait_for(lambda: ("completed", None) in outcomes(graph), timeout=120, what="a completed cycle")
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        wait_for(lambda: ("failed", "chroma-unavailable") in outcomes(graph), timeout=120, what="a chroma-unavailable failure")
        assert daemon.poll() is None, "the daemon must survive a failed cycle"
        completed_before = outcomes(graph).count(("completed", None))
        server = start_chroma_server(store, port)
        wait_for(lambda: outcomes(graph).count(("completed", None)) > completed_before, timeout=120,
                 what="a completed cycle after recovery")
        assert daemon.poll() is None
    finally:
        assert stop(daemon) == 0, (tmp_path / "daemon.log").read_text()[-3000:]
        server.kill()
        server.wait(10)
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["graph"]["nodes"]["SESSION"] == 26


def test_a_damaged_embedded_chroma_is_chroma_error_and_an_unreachable_server_chroma_unavailable(tmp_path: Path) -> None:
    """An embedded store whose database file is junk cannot get better by waiting: it is reported
    as damaged (``chroma-error``), not as a Chroma to try again later; a server nobody answers at
    stays ``chroma-unavailable``."""
    data_dir = tmp_path / "d"
    env = worker_env(data_dir)
    sessions = tmp_path / "two.jsonl"
    sessions.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:2]))
    assert run_cli("import", str(sessions), env=env).returncode == 0
    (data_dir / "chroma" / "chroma.sqlite3").write_bytes(b"not a database " * 10_000)
    damaged = run_cli("--once", "--json", env=env)
    assert damaged.returncode != 0
    run = json.loads(damaged.stdout)
    assert (run["reason_code"], run["failure_phase"]) == ("chroma-error", "provider-ready")
    assert "embedded Chroma store is damaged" in run["message"]
    assert outcomes(data_dir / "graph.sqlite3") == [("failed", "chroma-error")]

    unreachable = run_cli("--once", "--json", env=worker_env(tmp_path / "e", chroma_url=f"http://127.0.0.1:{free_port()}", chroma_timeout_seconds="5"))
    assert unreachable.returncode != 0
    assert json.loads(unreachable.stdout)["reason_code"] == "chroma-unavailable"
