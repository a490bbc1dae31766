"""PostgreSQL going away under a worker: the server drops every connection (``pg_ctl restart -m
fast`` does this; so do a failover and an idle-connection reaper). The test server is shared by
other tests, so it is not restarted: the worker's own backends are terminated, which is what its
connections see of a restart ("terminating connection due to administrator command").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from config import load_settings
from pipelines.importer import import_sessions
from store.backend import open_database
from store.claims import ClaimStore, worker_owner
from store.postgres import POOL_MAX_SIZE
from store.errors import DatabaseError, DatabaseUnreadableError
from tests.conftest import SAMPLE, make_session, run_cli, write_sessions
from tests.daemon_support import start_worker, stop, wait_for, worker_env
from worker.cycle import PHASES, open_stores, run_cycle
from worker.failures import FailureRecorder, RunFailure

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@pytest.fixture
def app_url(database_url: str) -> Iterator[str]:
    """The test's database URL, its connections named so that they alone can be cut."""
    yield f"{database_url}&application_name=audit-{uuid.uuid4().hex[:12]}"


def app_name(url: str) -> str:
    return url.rsplit("application_name=", 1)[1]


def cut_connections(server_url: str, url: str) -> int:
    """Terminate every backend of ``url``'s application name (what a restart does to them)."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app_name(url),)
        ).fetchall()
    return len(rows)


def failure(run_id: str) -> RunFailure:
    return RunFailure(
        run_id=run_id, reason="scheduled", mode="daemon", owner="test", started_at="2026-12-01T00:00:00.000Z",
        finished_at="2026-12-01T00:00:01.000Z", reason_code="database-error", failure_phase="setup",
        last_successful_phase=None, phases={}, row_started=False,
    )


def refused(settings: object) -> None:
    raise DatabaseUnreadableError("connection refused")


def test_a_connection_the_server_dropped_while_pooled_is_never_handed_out(
    data_dir: Path, app_url: str, postgres_server_url: str
) -> None:
    settings = load_settings(data_dir=data_dir, database_url=app_url)
    open_database(settings).close()  # its connection goes back to the pool, idle
    assert cut_connections(postgres_server_url, app_url) >= 1
    db = open_database(settings)  # the next cycle's open: must get a live connection
    try:
        assert db.query("SELECT 1")[0][0] == 1
    finally:
        db.close()


def test_a_pool_of_connections_the_server_all_dropped_gives_a_live_one_at_once(
    data_dir: Path, app_url: str, postgres_server_url: str
) -> None:
    """A restart drops every idle connection of the pool at once. Before, the pool's own check
    tried them one by one, pausing 1, 2, 4 … s between them: the next open after a restart of a
    process holding 8 idle connections waited past its timeout and failed (five took 15 s). Now the
    first dead one makes the pool test all of them, and a live one comes at once."""
    settings = load_settings(data_dir=data_dir, database_url=app_url)
    held = [open_database(settings) for _ in range(POOL_MAX_SIZE)]
    for db in held:
        db.close()  # all idle in the pool
    assert cut_connections(postgres_server_url, app_url) >= POOL_MAX_SIZE
    db = open_database(settings, timeout=5.0)  # before: DatabaseBusyError after 5 s (1 + 2 + 4 s of pauses)
    try:
        assert db.query("SELECT 1")[0][0] == 1
    finally:
        db.close()


def test_the_failure_recorder_reconnects_after_the_server_dropped_its_connection(
    data_dir: Path, app_url: str, postgres_server_url: str
) -> None:
    settings = load_settings(data_dir=data_dir, database_url=app_url)
    recorder = FailureRecorder(settings)
    recorder.open()
    try:
        assert cut_connections(postgres_server_url, app_url) >= 1
        assert recorder.record(failure("run-after-restart")) is True  # on a new connection
        assert cut_connections(postgres_server_url, app_url) >= 1
        # The server is still down when the recorder reconnects (the test server is shared, so its
        # refusal is played by open_database, and by the pool its kept database reconnects from):
        # the row is kept, and written at the next chance.
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("worker.failures.open_database", refused)
            patch.setattr("store.postgres.pool_for", lambda url, timeout: refused(url))
            assert recorder.record(failure("run-while-down")) is False
        assert [f.run_id for f in recorder.pending] == ["run-while-down"]
        assert recorder.flush() is True and recorder.pending == []
        assert recorder._db is not None and not recorder._db.broken  # a connection is kept again
    finally:
        recorder.close()
    db = open_database(settings)
    try:
        rows = db.query("SELECT run_id, outcome, reason_code FROM rem_runs ORDER BY run_id")
        assert [tuple(r) for r in rows] == [("run-after-restart", "failed", "database-error"),
                                            ("run-while-down", "failed", "database-error")]
    finally:
        db.close()


def test_a_closed_connection_is_a_store_error(data_dir: Path, app_url: str, postgres_server_url: str) -> None:
    """Cut inside a transaction: the StoreError family, never a bare psycopg error (what the
    transaction wrote is gone). The next transaction runs on a new connection (pgops: a holder
    that outlives a restart goes on), and so does one begun on a connection cut while it idled."""
    db = open_database(load_settings(data_dir=data_dir, database_url=app_url))
    try:
        with pytest.raises(DatabaseUnreadableError):
            with db.transaction() as conn:
                conn.execute("SELECT 1")
                cut_connections(postgres_server_url, app_url)
                conn.execute("SELECT 1")
        assert db.broken
        for _ in range(2):
            with db.transaction() as conn:
                assert conn.execute("SELECT 1").fetchone()[0] == 1
            cut_connections(postgres_server_url, app_url)
    finally:
        db.close()


def runs(url: str) -> list[tuple[str, str | None]]:
    """``(outcome, reason_code)`` of every run so far (none before the schema exists)."""
    with psycopg.connect(url) as conn:
        try:
            return [tuple(r) for r in conn.execute("SELECT outcome, reason_code FROM rem_runs ORDER BY rowid").fetchall()]
        except psycopg.errors.UndefinedTable:
            return []


def test_the_daemon_lives_through_the_server_dropping_its_connections(
    tmp_path: Path, app_url: str, database_url: str, postgres_server_url: str
) -> None:
    data_dir = tmp_path / "d"
    env = worker_env(data_dir, database_url=app_url, interval_seconds="0.3")
    assert run_cli("import", str(SAMPLE), env=env).returncode == 0
    daemon = start_worker(env=env, log_path=tmp_path / "daemon.log")
    try:
        wait_for(lambda: ("completed", None) in runs(database_url), timeout=120, what="a completed cycle")
        for _ in range(4):  # between cycles and inside them
            cut_connections(postgres_server_url, app_url)
            time.sleep(0.4)
        cut_at = len(runs(database_url))
        wait_for(lambda: daemon.poll() is not None or runs(database_url)[cut_at:].count(("completed", None)) >= 2,
                 timeout=120, what="two completed cycles after the cuts")
        assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
    finally:
        assert stop(daemon) == 0, (tmp_path / "daemon.log").read_text()[-3000:]
    # every cycle is recorded, and a failed one says the database failed it; the last may be one
    # the test's own stop interrupted (the daemon starts a cycle every 0.3 s: on a loaded machine
    # the SIGTERM can land inside one, which then ends `interrupted`, as a stop should)
    recorded = runs(database_url)
    if recorded and recorded[-1] == ("interrupted", "stop-requested"):
        recorded = recorded[:-1]
    unexpected = [(i, run) for i, run in enumerate(recorded) if run not in {("completed", None), ("failed", "database-error")}]
    assert not unexpected, (unexpected, recorded)
    assert "could not be recorded" not in (tmp_path / "daemon.log").read_text()


async def test_claims_a_daemons_earlier_cycle_could_not_release_are_its_own_again(data_dir: Path, app_url: str, tmp_path: Path) -> None:
    """A daemon's cycles share one lease owner; when the server dropped the connection before a
    cycle released its session claims, the daemon's next cycle digests those sessions — its
    heartbeat would otherwise keep them claimed, by nobody at work on them, for its whole life."""
    settings = load_settings(data_dir=data_dir, database_url=app_url)
    sessions = write_sessions(tmp_path / "in.jsonl", [make_session(f"s{i}") for i in range(3)])
    stores = await open_stores(settings)
    try:
        await import_sessions(sessions, chroma=stores.chroma, memory_collection=settings.memory_collection,
                              summary_collection=settings.session_collection)
        owner = worker_owner()
        first = await run_cycle(settings, stores=stores, lease_owner=owner, phases=tuple(p for p in PHASES if p[0] != "extract"))
        assert first.outcome == "completed"
        # the earlier cycle claimed them, and its release never reached the server
        assert len(ClaimStore(stores.db, owner=owner, lease_seconds=300).claim(10)) == 3
        second = await run_cycle(settings, stores=stores, lease_owner=owner)
        assert second.outcome == "completed" and second.phases["extract"]["sessions_digested"] == 3, second.phases["extract"]
    finally:
        stores.close()
