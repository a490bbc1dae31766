"""``/healthz`` on PostgreSQL when the process's own connections are all in use (its cycle and a
burst of slow scrapes): a liveness probe must not restart a daemon whose database merely is busy.
The real endpoint in-process, real PostgreSQL (REM_TEST_POSTGRES_URL); the pool's connections
are held by real open databases of this process, as a cycle and scrapes hold them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psycopg
import pytest
from pydantic import SecretStr

from config import Settings
from store.backend import open_database
from store.postgres import POOL_MAX_SIZE, close_pools
from worker.http import serve_http

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@contextmanager
def every_connection_in_use(settings: Settings) -> Iterator[None]:
    """Hold all of this process's pooled connections to the graph database (readers that have not
    finished), as a cycle plus slow ``/metrics`` scrapes do."""
    held = [open_database(settings, readonly=True) for _ in range(POOL_MAX_SIZE)]
    try:
        yield
    finally:
        for db in held:
            db.close()


async def test_healthz_is_ok_and_says_busy_while_the_process_uses_every_connection(settings: Settings) -> None:
    """Before, the probe waited 2 s for a connection and answered ``503 database-unreadable``,
    although the server answered and the daemon was at work."""
    open_database(settings).close()  # the daemon creates the schema before it serves
    async with serve_http(settings) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=20) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        with every_connection_in_use(settings):
            health = await client.get("/healthz")
        assert (health.status_code, health.json()) == (200, {"status": "ok", "database": "busy"})
        assert (await client.get("/healthz")).json() == {"status": "ok"}


async def test_connections_in_use_for_longer_than_the_lease_timeout_are_unhealthy(settings: Settings) -> None:
    """Connections that never come back (leaked, or held by a wedged thread) are cured by a
    restart: once every probe has found them in use for longer than the lease timeout, 503."""
    open_database(settings).close()
    short = settings.model_copy(update={"lease_timeout_seconds": 1.0})
    async with serve_http(short) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=20) as client:
        with every_connection_in_use(settings):
            first = await client.get("/healthz")  # waits 2 s for a connection: the busy spell begins
            assert (first.status_code, first.json()) == (200, {"status": "ok", "database": "busy"})
            time.sleep(0.1)
            later = await client.get("/healthz")  # found so again, more than 1 s after the first
        assert (later.status_code, later.json()) == (503, {"status": "unhealthy", "reason": "connections-exhausted"})
        again = await client.get("/healthz")  # given back: healthy, and the spell is over
        assert (again.status_code, again.json()) == (200, {"status": "ok"})


async def test_healthz_is_ok_and_says_busy_while_the_server_refuses_more_connections(settings: Settings, database_url: str) -> None:
    """The role's connection limit reached by its other sessions (another host's workers, a
    pooler): a restart would not get this process a connection either. Before: 503."""
    from tests.test_audit_pg_roles import as_user, grant_table_rights, login_role

    open_database(settings).close()
    with login_role(database_url, attributes="CONNECTION LIMIT 2") as role:
        grant_table_rights(database_url, role)
        url = as_user(database_url, role)
        limited = settings.model_copy(update={"database_url": SecretStr(url)})
        async with serve_http(limited) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=20) as client:
            with psycopg.connect(url), psycopg.connect(url):  # the role's two, held elsewhere
                health = await client.get("/healthz")
            assert (health.status_code, health.json()) == (200, {"status": "ok", "database": "busy"})
            assert (await client.get("/healthz")).json() == {"status": "ok"}
        close_pools()


async def test_a_server_that_is_down_is_still_unreadable(settings: Settings) -> None:
    """Busy is only this process's own connections: a server that refuses connections stays
    ``database-unreadable`` at once (as before)."""
    down = settings.model_copy(update={"database_url": SecretStr("postgresql://rem@127.0.0.1:1/none")})
    async with serve_http(down) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=20) as client:
        health = await client.get("/healthz")
    assert (health.status_code, health.json()) == (503, {"status": "unhealthy", "reason": "database-unreadable"})
