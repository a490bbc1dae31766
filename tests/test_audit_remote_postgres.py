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
