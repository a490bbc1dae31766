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
