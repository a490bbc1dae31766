"""A drain that meets a busy database — a write lock held past the timeout (a DBA's ``LOCK TABLE``,
a long writer on SQLite), or PostgreSQL refusing more connections when the drain reconnects — ends
and charges no line: busy is no line's fault. Before, the batch was retried line by line and every
line was charged an attempt, so a busy server dead-lettered good lines. Real SQLite and PostgreSQL
locks, real files and table (drainstall audit)."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import anyio
import psycopg
import pytest

from config import Settings
from pipelines.drain import drain_queue
from pipelines.enqueue import enqueue_lazy_edges
from store.backend import open_database_at
from store.errors import ConnectionsExhaustedError, DatabaseBusyError
from store.graph import GraphStore
from store.lazy_table import LazyEdgeTable
from store.postgres import pool_for
from store.unit_of_work import DatabaseUnitOfWork
from tests.lazy_fixtures import add_concepts, edge_count, queue_of
from tests.test_audit_pg_roles import as_user, grant_table_rights, login_role
from tests.test_audit_remote_postgres import app_name
from tests.test_pgops_drain import wait_until_waiting_on_a_lock
from worker.cycle import Stores

EDGES = [{"source": f"CONCEPT:c{i}", "target": f"CONCEPT:c{i + 1}", "relationship": "NEXT"} for i in range(3)]


@contextmanager
def writes_locked(settings: Settings, url: str | None) -> Iterator[None]:
    """Another client holds the graph's write lock until the block ends (SQLite: an open write
    transaction; PostgreSQL: ``LOCK TABLE edges``, as a DBA's maintenance does)."""
    if url is None:
        conn = sqlite3.connect(settings.graph_path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    with psycopg.connect(url) as conn:
        conn.execute("LOCK TABLE edges IN EXCLUSIVE MODE")
        yield
        conn.rollback()


def queued_attempts(settings: Settings, url: str | None) -> list[int]:
    """The ``attempts`` of every line still queued: the files (live or ``.draining``) or the table."""
    if settings.lazy_queue == "database":
        db = open_database_at(path=settings.graph_path, url=url)
        try:
            return [row[0] for row in db.query("SELECT attempts FROM lazy_edges ORDER BY id")]
        finally:
            db.close()
    return [json.loads(line).get("attempts", 0) for path in sorted(settings.data_dir.glob("lazy-edges.jsonl*"))
            if not path.name.endswith((".lock", ".dead.jsonl")) for line in path.read_text().splitlines() if line.strip()]


def dead_letters(settings: Settings, db: object) -> int:
    if settings.lazy_queue == "database":
        return db.query("SELECT COUNT(*) FROM lazy_edges_dead")[0][0]  # type: ignore[attr-defined]
    dead = settings.data_dir / "lazy-edges.dead.jsonl"
    return len(dead.read_text().splitlines()) if dead.exists() else 0


@pytest.mark.both_backends
@pytest.mark.parametrize("form", ["file", "database"])
async def test_a_drain_that_meets_a_held_lock_ends_and_charges_no_line(
    settings: Settings, stores: Stores, database_url: str | None, form: str
) -> None:
    settings = settings.model_copy(update={"lazy_queue": form})
    add_concepts(stores.graph, *(f"c{i}" for i in range(4)))
    enqueue_lazy_edges(settings.lazy_queue_target, EDGES)
    # The drain's own database with a short wait for locks (the CLI's waits 30 s: the same path).
    db = open_database_at(path=settings.graph_path, url=database_url, timeout=0.5)
    try:
        unit = DatabaseUnitOfWork(db)
        options = {"unit": unit, "chroma": stores.chroma, "max_attempts": 1, "table": LazyEdgeTable(db)}
        with writes_locked(settings, database_url):
            # Before: exit as a success with every line charged; with one attempt allowed, all dead.
            with pytest.raises(DatabaseBusyError):
                await drain_queue(queue_of(settings), **options)
        assert dead_letters(settings, db) == 0
        assert queued_attempts(settings, database_url) == [0] * len(EDGES)
        assert edge_count(GraphStore(db), "NEXT") == 0

        again = await drain_queue(queue_of(settings), **options)
        assert (again.succeeded, again.failed, again.dead_lettered) == (len(EDGES), 0, 0)
        assert edge_count(GraphStore(db), "NEXT") == len(EDGES)
        assert queued_attempts(settings, database_url) == []
    finally:
        db.close()


def backends(admin: psycopg.Connection[Any], url: str) -> list[tuple[int, str | None]]:
    """The ``(pid, wait_event_type)`` of every backend of ``url``'s application name."""
    return admin.execute(
        "SELECT pid, wait_event_type FROM pg_stat_activity WHERE application_name = %s", (app_name(url),)
    ).fetchall()


def gone(admin: psycopg.Connection[Any], url: str, *, but: int | None = None) -> None:
    """Wait until no backend of ``url``'s application name is left (a terminated one exits soon
    after), ``but`` the one of that pid."""
    deadline = time.monotonic() + 30
    while any(pid != but for pid, _ in backends(admin, url)):
        assert time.monotonic() < deadline, "the cut backends never exited"
        time.sleep(0.05)


def pool_at_rest(url: str, *, held: int) -> None:
    """Wait until this process's pool for ``url`` opens no connection in the background: each it
    counts is one of the ``held`` ones or idle in it (opening the database grows the pool by one
    in the background, which may still be connecting when the drain starts)."""
    deadline = time.monotonic() + 30
    while (stats := pool_for(url, timeout=5.0).get_stats())["pool_size"] != stats["pool_available"] + held:
        assert time.monotonic() < deadline, f"the pool never came to rest: {stats}"
        time.sleep(0.05)


def cut_the_idle_then_the_waiting(server_url: str, url: str) -> None:
    """Terminate every backend of ``url``'s application name, the one waiting on a lock (the
    drain's, mid-batch) last, once the others (the pool's idle ones) have exited: the drain's
    reconnect then finds the pool's idle connections already dead. Cut in one statement, the
    drain's could go first, and its reconnect take an idle one not yet cut, which is cut then,
    mid-batch: a second loss, not the connection limit this test is about."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        waiting = [pid for pid, wait in backends(admin, url) if wait == "Lock"]
        assert len(waiting) == 1, f"not one backend waiting on the lock: {backends(admin, url)}"
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s AND pid <> %s",
            (app_name(url), waiting[0]),
        )
        gone(admin, url, but=waiting[0])
        assert admin.execute("SELECT pg_terminate_backend(%s)", (waiting[0],)).fetchone()[0]
        gone(admin, url)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_too_many_connections_when_a_drain_reconnects_charges_no_line(
    settings: Settings, stores: Stores, database_url: str, postgres_server_url: str
) -> None:
    """A restart cuts the drain's connection mid-batch, and the server then refuses the role more
    connections (its ``CONNECTION LIMIT``, as a busy server's ``max_connections``): the drain ends
    with :class:`ConnectionsExhaustedError` and every line waits uncharged. Before, the batch was
    retried line by line and each line was charged an attempt (here: all dead-lettered).

    Deterministic: no connection of the role is being opened when the limit is set (the pool is at
    rest), and the pool's idle connections have exited before the drain's is cut, so its reconnect
    can only meet dead ones and the limit. (Once it flaked on a loaded machine: all were cut in one
    statement, the drain's first, and its reconnect took an idle one not yet cut — a second loss.)"""
    add_concepts(stores.graph, *(f"c{i}" for i in range(4)))
    enqueue_lazy_edges(settings.lazy_queue_target, EDGES)
    with login_role(database_url) as role:
        grant_table_rights(database_url, role)
        with psycopg.connect(postgres_server_url, autocommit=True) as admin:
            admin.execute(f"GRANT {role} TO CURRENT_USER")  # to see its backends wait, and to cut them
        url = f"{as_user(database_url, role)}&application_name=drainstall-{uuid.uuid4().hex[:12]}"
        db = open_database_at(path=settings.graph_path, url=url, timeout=5.0)
        try:
            options = {"unit": DatabaseUnitOfWork(db), "chroma": stores.chroma, "max_attempts": 1, "table": LazyEdgeTable(db)}
            pool_at_rest(url, held=1)  # so no connection of the role opens after the limit is set

            def refuse_and_cut() -> None:
                wait_until_waiting_on_a_lock(postgres_server_url, url)
                with psycopg.connect(postgres_server_url, autocommit=True) as admin:
                    admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT 0")
                cut_the_idle_then_the_waiting(postgres_server_url, url)
                locker.rollback()  # the batch's transaction is gone: its reconnect meets the limit

            with psycopg.connect(database_url) as locker:
                locker.execute("LOCK TABLE edges IN EXCLUSIVE MODE")
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(partial(anyio.to_thread.run_sync, refuse_and_cut))
                    with pytest.raises(ConnectionsExhaustedError, match="too many connections"):
                        await drain_queue(queue_of(settings), **options)
            assert dead_letters(settings, stores.db) == 0
            assert queued_attempts(settings, database_url) == [0] * len(EDGES)

            with psycopg.connect(postgres_server_url, autocommit=True) as admin:
                admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1")
            again = await drain_queue(queue_of(settings), **options)
            assert (again.succeeded, again.failed, again.dead_lettered) == (len(EDGES), 0, 0)
            assert edge_count(stores.graph, "NEXT") == len(EDGES)
        finally:
            db.close()
