"""PostgreSQL going away under a worker: the server drops every connection (``pg_ctl restart -m
fast`` does this; so do a failover and an idle-connection reaper). The test server is shared by
other tests, so it is not restarted: the worker's own backends are terminated, which is what its
connections see of a restart ("terminating connection due to administrator command").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from config import load_settings
from store.backend import open_database
from store.errors import DatabaseError
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


def test_the_failure_recorder_reconnects_after_the_server_dropped_its_connection(
    data_dir: Path, app_url: str, postgres_server_url: str
) -> None:
    settings = load_settings(data_dir=data_dir, database_url=app_url)
    recorder = FailureRecorder(settings)
    recorder.open()
    try:
        assert cut_connections(postgres_server_url, app_url) >= 1
        # The first write may meet the dead connection; it must never raise anything but keep the
        # row, and the next chance writes it.
        if not recorder.record(failure("run-after-restart")):
            assert recorder.flush() is True
        assert recorder.pending == []
    finally:
        recorder.close()
    db = open_database(settings)
    try:
        rows = db.query("SELECT outcome, reason_code FROM rem_runs WHERE run_id = 'run-after-restart'")
        assert [tuple(r) for r in rows] == [("failed", "database-error")]
    finally:
        db.close()


def test_a_closed_connection_is_a_store_error(data_dir: Path, app_url: str, postgres_server_url: str) -> None:
    db = open_database(load_settings(data_dir=data_dir, database_url=app_url))
    try:
        cut_connections(postgres_server_url, app_url)
        for _ in range(2):  # the first statement finds it broken, the second finds it closed
            with pytest.raises(DatabaseError):
                with db.transaction() as conn:
                    conn.execute("SELECT 1")
    finally:
        db.close()
