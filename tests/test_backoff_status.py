"""``status`` after a local worker was killed (SIGKILL): its run, lock and claims are shown as its
dead process left them — free to take — not as held until their lease runs out, and ``status``
writes nothing (a real ``rem-cycle --once`` against the loopback chat-completions server of
tests/llm_server.py, killed while its chunks are with the model)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from config import load_settings
from pipelines.importer import import_sessions
from tests.conftest import make_session, write_sessions
from tests.llm_server import LLMServer, slow
from worker.cycle import open_stores

ROOT = Path(__file__).resolve().parent.parent


def rows(data: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(data / "graph.sqlite3")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def worker(data: Path, server: LLMServer, *args: str) -> subprocess.Popen[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("REM_")}, "REM_DATA_DIR": str(data),
           "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url, "REM_LLM_MAX_RETRIES": "0",
           "REM_LOG_LEVEL": "error", "REM_LEASE_TIMEOUT_SECONDS": "600"}
    return subprocess.Popen([sys.executable, "-m", "worker", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def test_status_shows_a_killed_local_workers_run_lock_and_claims_as_dead(tmp_path: Path) -> None:
    """Found by the audit: after `kill -9` of a local `--once`, `status` showed its run `running`
    (not even stalled, for `REM_LEASE_TIMEOUT_SECONDS`) and its lock and claims held until their
    lease ran out, though its process was gone and the next worker takes them at once."""
    data = tmp_path / "data"
    stores = await open_stores(load_settings(data_dir=data))
    try:
        path = write_sessions(tmp_path / "in.jsonl", [make_session("s1", 2)])
        await import_sessions(path, chroma=stores.chroma, memory_collection="neo-agent-memory",
                              summary_collection="neo-agent-sessions")
    finally:
        stores.close()
    with LLMServer(default=slow(20)) as server:
        cycle = worker(data, server, "--once")
        deadline = time.monotonic() + 30
        while server.chat_count == 0 and cycle.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cycle.poll() is None, cycle.communicate()
        assert rows(data, "SELECT COUNT(*) FROM session_claims") == [(1,)]
        os.kill(cycle.pid, signal.SIGKILL)
        cycle.wait()

        status = worker(data, server, "status", "--json")
        out, err = status.communicate(timeout=60)
        assert status.returncode == 0, err
        report = json.loads(out)
        (run,) = report["runs"]
        assert run["outcome"] == "running" and run["process_gone"] is True, run
        assert report["dead_runs"] == [run["run_id"]]
        (lock,) = report["leases"]["locks"]
        assert lock["name"] == "cycle" and lock["owner_gone"] is True, lock
        (claims,) = report["leases"]["claims"]
        assert claims["owner_gone"] is True, claims

        text = worker(data, server, "status")
        out, err = text.communicate(timeout=60)
        assert text.returncode == 0, err
        assert "process gone" in out and "free to take" in out, out
        # A read command: the dead run, its lock and its claims are left for the next cycle to take.
        assert rows(data, "SELECT outcome FROM rem_runs") == [("running",)]
        assert rows(data, "SELECT COUNT(*) FROM session_claims") == [(1,)]
        assert rows(data, "SELECT COUNT(*) FROM rem_locks") == [(1,)]
