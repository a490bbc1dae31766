"""``status`` after a local worker was killed (SIGKILL): its run, lock and claims are shown as its
dead process left them — free to take — not as held until their lease runs out, and ``status``
writes nothing (a real ``rem-cycle --once`` against the loopback chat-completions server of
tests/llm_server.py, killed while its chunks are with the model)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import Settings, load_settings
from pipelines.importer import import_sessions
from store.backend import open_database
from store.runstate import RunStateStore
from tests.conftest import make_session, run_cli, write_sessions
from tests.test_forget import _env
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


def _gone_pid() -> int:
    """The pid of a process that ran here and is gone (reaped)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.mark.both_backends
def test_status_judges_owners_an_earlier_release_wrote_without_writing(settings: Settings) -> None:
    """Runs, locks and claims written before owners named their boot and PID namespace
    (``hostname:pid`` runs, ``hostname:pid:nonce`` leases): `status` showed every one alive or held,
    whatever had become of its process. One of this hostname whose pid is gone is dead; one whose
    pid exists (a reused pid, another PID namespace) or of another host is unknown; `status` changes
    no row."""
    host, gone = socket.gethostname(), _gone_pid()
    db = open_database(settings)
    try:
        runs = RunStateStore(db)
        runs.start_run("old-dead", reason="scheduled", mode="once", owner=f"{host}:{gone}")
        runs.start_run("old-live-pid", reason="scheduled", mode="once", owner=f"{host}:{os.getpid()}")
        runs.start_run("old-elsewhere", reason="scheduled", mode="once", owner=f"elsewhere:{gone}")
        later = "2999-01-01T00:00:00.000Z"
        with db.transaction() as conn:
            conn.execute("INSERT INTO rem_locks(name, owner, acquired_at, heartbeat_at, lease_expires_at) VALUES (?,?,?,?,?)",
                         ("cycle", f"{host}:{gone}:0a1b2c3d", later, later, later))
            conn.executemany(
                "INSERT INTO session_claims(session_id, owner, claimed_at, heartbeat_at, lease_expires_at) VALUES (?,?,?,?,?)",
                [("s1", f"{host}:{gone}:0a1b2c3d", later, later, later), ("s2", f"{host}:{os.getpid()}:0a1b2c3d", later, later, later),
                 ("s3", f"elsewhere:{gone}:0a1b2c3d", later, later, later)],
            )
        tables = ("rem_runs", "rem_locks", "session_claims")
        before = {t: sorted(map(tuple, db.query(f"SELECT * FROM {t}"))) for t in tables}  # noqa: S608 - fixed names
    finally:
        db.close()
    env = _env(settings)

    done = run_cli("status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dead_runs"] == ["old-dead"]  # before: [] (an earlier release's owner was never judged)
    states = {r["run_id"]: (r["process_state"], r["process_gone"]) for r in report["runs"]}
    assert states == {"old-dead": ("dead", True), "old-live-pid": ("unknown", False), "old-elsewhere": ("unknown", False)}
    (lock,) = report["leases"]["locks"]
    # Dead, but an earlier release's owner is not taken over before its lease runs out.
    assert (lock["owner_state"], lock["owner_gone"], lock["taken_at_once"]) == ("dead", True, False), lock
    assert {c["owner"].rsplit(":", 1)[0]: c["owner_state"] for c in report["leases"]["claims"]} == {
        f"{host}:{gone}": "dead", f"{host}:{os.getpid()}": "unknown", f"elsewhere:{gone}": "unknown"}

    text = run_cli("status", env={**env, "COLUMNS": "250"})
    assert text.returncode == 0, text.stderr
    assert "dead: its process is gone" in text.stdout, text.stdout
    assert "(named by an earlier release)" in text.stdout and "taken over when its lease runs out" in text.stdout, text.stdout
    assert "cannot be seen from this host" in text.stdout, text.stdout
    db = open_database(settings)
    try:
        assert {t: sorted(map(tuple, db.query(f"SELECT * FROM {t}"))) for t in tables} == before  # noqa: S608 - fixed names
    finally:
        db.close()
