"""A Chroma server that stops answering: a real `chroma run` frozen with SIGSTOP (a hung process, a
network black hole, an overloaded host) accepts connections and never replies."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, make_session, run_cli, start_chroma_server, write_sessions
from tests.daemon_support import read_runs, worker_env


@pytest.fixture
def chroma(tmp_path: Path) -> Iterator[tuple[str, object]]:
    port = free_port()
    server = start_chroma_server(tmp_path / "chroma", port)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait(10)


def test_a_chroma_server_that_stops_answering_fails_the_cycle_within_the_timeout(
    tmp_path: Path, chroma: tuple[str, object]
) -> None:
    url, server = chroma
    env = worker_env(tmp_path / "d", chroma_url=url, chroma_timeout_seconds="2")
    sessions = write_sessions(tmp_path / "in.jsonl", [make_session(f"s{i}", 3) for i in range(5)])
    assert run_cli("import", str(sessions), env=env).returncode == 0

    server.send_signal(signal.SIGSTOP)  # type: ignore[attr-defined]
    started = time.monotonic()
    frozen = run_cli("--once", "--json", env=env, timeout=60)
    assert time.monotonic() - started < 30
    assert frozen.returncode == 1, frozen.stderr[-2000:]
    result = json.loads(frozen.stdout)
    assert (result["outcome"], result["reason_code"]) == ("failed", "chroma-unavailable")
    assert "did not answer within 2 s" in result["message"]

    server.send_signal(signal.SIGCONT)  # type: ignore[attr-defined]
    healed = run_cli("--once", "--json", env=env, timeout=120)
    assert healed.returncode == 0, healed.stderr[-2000:]
    assert json.loads(healed.stdout)["phases"]["extract"]["sessions_digested"] == 5
    assert [r["outcome"] for r in read_runs(tmp_path / "d" / "graph.sqlite3")] == ["failed", "completed"]
