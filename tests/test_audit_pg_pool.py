"""PostgreSQL connection pool under pressure: more openers in one process than the pool has
connections (a burst of ``/metrics`` and ``/healthz`` requests beside a cycle, many recall calls).
Needs REM_TEST_POSTGRES_URL."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

import store.postgres
from store.db import MIGRATIONS
from store.errors import DatabaseBusyError, StoreError
from store.postgres import PostgresDatabase, close_pools

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def opened(url: str, *, timeout: float) -> PostgresDatabase:
    return PostgresDatabase(url, timeout=timeout, readonly=True, known_versions=len(MIGRATIONS), sqlite_migrations=MIGRATIONS)


@pytest.fixture
def small_pool_url(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A URL whose pool (made on first open) has two connections."""
    PostgresDatabase(database_url, known_versions=len(MIGRATIONS), sqlite_migrations=MIGRATIONS).close()  # migrated
    monkeypatch.setattr(store.postgres, "POOL_MAX_SIZE", 2)
    yield f"{database_url}&application_name=pool-{uuid.uuid4().hex[:8]}"
    close_pools()


def test_an_exhausted_pool_is_busy_and_kept_for_those_waiting(small_pool_url: str) -> None:
    first, second = opened(small_pool_url, timeout=5), opened(small_pool_url, timeout=5)
    pool = store.postgres._pools[small_pool_url]
    waited: list[object] = []

    def wait_for_a_connection() -> None:
        try:
            db = opened(small_pool_url, timeout=10)
            waited.append(db.query("SELECT 1")[0][0])
            db.close()
        except StoreError as exc:
            waited.append(exc)

    waiter = threading.Thread(target=wait_for_a_connection)
    waiter.start()
    # Before: "cannot connect to the PostgreSQL database" (the server answered all along), and the
    # pool was closed under the waiter and the holders.
    with pytest.raises(DatabaseBusyError, match="stayed in use for 0.5 s \\(the server answers\\)"):
        opened(small_pool_url, timeout=0.5)
    assert store.postgres._pools[small_pool_url] is pool
    second.close()
    waiter.join(timeout=15)
    assert waited == [1]
    assert first.query("SELECT 1")[0][0] == 1
    first.close()
    again = opened(small_pool_url, timeout=5)
    again.close()
    assert store.postgres._pools[small_pool_url] is pool


@pytest.fixture
def limited_role_url(small_pool_url: str) -> Iterator[str]:
    """``small_pool_url`` as a role the server lets open two connections at most."""
    from tests.test_audit_pg_roles import as_user, grant_table_rights, login_role

    database_url = small_pool_url.split("&application_name=", 1)[0]
    with login_role(database_url, attributes="CONNECTION LIMIT 2") as role:
        grant_table_rights(database_url, role)
        yield as_user(small_pool_url, role)
        close_pools()


def test_a_server_refusing_more_connections_is_busy_says_why_and_keeps_the_pool(
    limited_role_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store.postgres, "POOL_MAX_SIZE", 8)  # the pool would grow: the role's limit stops it
    first, second = opened(limited_role_url, timeout=5), opened(limited_role_url, timeout=5)
    pool = store.postgres._pools[limited_role_url]
    # Before: "cannot connect …: couldn't get a connection after 1.00 sec", the reason left in the
    # pool's log, and the pool closed under the two holders.
    with pytest.raises(DatabaseBusyError, match="the server refuses more: .*too many connections for role"):
        opened(limited_role_url, timeout=1)
    assert store.postgres._pools[limited_role_url] is pool
    second.close()
    again = opened(limited_role_url, timeout=5)  # the freed connection serves the next opener
    assert again.query("SELECT 1")[0][0] == first.query("SELECT 1")[0][0] == 1
    again.close()
    first.close()
