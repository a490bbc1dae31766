"""SQLite's transactions when the ``COMMIT`` or a statement fails at the database (sqlitecommit):
the transaction is rolled back and the connection is usable again, and a full disk is an outage
(:class:`DatabaseFullError`), charged to no session. Real SQLite files; the session test runs the
extract phase's ``extract_session`` with embedded Chroma and the loopback model server. A full disk
is SQLite's own ``SQLITE_FULL``, reached through ``PRAGMA max_page_count``; the drain test drains
the file-form queue and the table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from config import Settings
from pipelines.drain import drain_queue
from pipelines.enqueue import enqueue_lazy_edges
from store.backend import open_database_at
from store.db import Database
from store.errors import ConstraintError, DatabaseFullError, QueryInterruptedError, is_database_outage
from store.graph import GraphStore
from store.lazy_table import LazyEdgeTable
from store.unit_of_work import DatabaseUnitOfWork
from tests.lazy_fixtures import add_concepts, edge_count, queue_of
from tests.llm_server import LLMServer
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_drainstall_busy import dead_letters, queued_attempts
from tests.test_extract_cycle import llm_settings, load, session
from tests.test_pgcut_sessions import charged, extract_one, stores_on
from worker.cycle import PHASES, Stores, run_cycle


def committed_elsewhere(path: Path, sql: str) -> list[tuple]:
    """What another connection reads: only what was committed."""
    with sqlite3.connect(path) as other:
        return other.execute(sql).fetchall()


def fill_the_disk(db: Database) -> None:
    """Let the file grow no further: SQLite refuses any new page with ``SQLITE_FULL``."""
    db.query(f"PRAGMA max_page_count = {db.query('PRAGMA page_count')[0][0]}")


def free_space(db: Database) -> None:
    db.query("PRAGMA max_page_count = 1073741823")


def test_a_commit_refused_by_a_deferred_foreign_key_rolls_back_and_the_next_transaction_commits(tmp_path: Path) -> None:
    """``COMMIT`` itself fails (a deferred foreign key with no parent row, in a table of this test's
    own): the block's write is rolled back, the connection is out of any transaction, and the next
    transaction commits on its own. Before, SQLite's transaction stayed open after the failed
    ``COMMIT``: the next ``BEGIN IMMEDIATE`` failed ("cannot start a transaction within a
    transaction"), so every later write of the process failed, and the file's write lock stayed held."""
    path = tmp_path / "graph.sqlite3"
    db = Database(path)
    try:
        db.conn.execute("CREATE TABLE test_parent (id INTEGER PRIMARY KEY)")
        db.conn.execute("CREATE TABLE test_child (id INTEGER PRIMARY KEY, "
                        "parent INTEGER REFERENCES test_parent(id) DEFERRABLE INITIALLY DEFERRED)")
        with pytest.raises(ConstraintError, match="FOREIGN KEY"), db.transaction() as conn:
            conn.execute("INSERT INTO test_child VALUES (1, 99)")  # passes: checked at COMMIT
        assert not db.conn.in_transaction
        with db.transaction() as conn:
            conn.execute("INSERT INTO test_parent VALUES (7)")
        assert committed_elsewhere(path, "SELECT id FROM test_parent") == [(7,)]
        assert committed_elsewhere(path, "SELECT id FROM test_child") == []
    finally:
        db.close()


def test_a_write_that_fills_the_disk_raises_database_full_and_succeeds_once_space_is_back(tmp_path: Path) -> None:
    """A statement hits ``SQLITE_FULL`` (SQLite then rolls the transaction back itself): the block
    raises :class:`DatabaseFullError`, an outage, with SQLite's own words; nothing of it is kept and
    the same write commits once the file may grow. Before, the adapter's ``ROLLBACK`` of the
    transaction SQLite had already ended raised a plain ``DatabaseError`` ("cannot rollback - no
    transaction is active") in place of the full disk, and ``SQLITE_FULL`` was no outage anyway."""
    path = tmp_path / "graph.sqlite3"
    db = Database(path)
    try:
        db.conn.execute("CREATE TABLE test_blobs (b BLOB)")

        def write() -> None:
            with db.transaction() as conn:
                conn.execute("INSERT INTO test_blobs VALUES (1)")
                conn.executemany("INSERT INTO test_blobs VALUES (randomblob(4000))", [()] * 50)

        fill_the_disk(db)
        with pytest.raises(DatabaseFullError, match="database or disk is full") as raised:
            write()
        assert is_database_outage(raised.value)
        assert not db.conn.in_transaction
        assert committed_elsewhere(path, "SELECT COUNT(*) FROM test_blobs") == [(0,)]
        free_space(db)
        write()
        assert committed_elsewhere(path, "SELECT COUNT(*) FROM test_blobs") == [(51,)]
    finally:
        db.close()


def test_a_write_stopped_at_its_deadline_raises_query_interrupted(tmp_path: Path) -> None:
    """A write inside a transaction stopped by the deadline's progress handler: SQLite rolls the
    transaction back itself, and the block raises :class:`QueryInterruptedError`. Before, the
    adapter's ``ROLLBACK`` raised ``cannot rollback - no transaction is active`` in its place."""
    db = Database(tmp_path / "graph.sqlite3")
    try:
        db.conn.execute("CREATE TABLE test_rows (x INTEGER)")
        db.conn.execute("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 100000) "
                        "INSERT INTO test_rows SELECT i FROM r")
        db.set_deadline(0.0)
        with pytest.raises(QueryInterruptedError, match="interrupted"), db.transaction() as conn:
            conn.execute("UPDATE test_rows SET x = x + 1")
        assert not db.conn.in_transaction
    finally:
        db.close()


# A session whose commit needs new pages of the file: a node per CamelCase word (the loopback
# server's extraction), 120 of them, where the usual four-turn session fits in the pages' free space.
WORDY_TURNS = [" ".join(f"Component{turn}Part{word}" for word in range(40)) for turn in range(3)]


async def test_a_session_whose_commit_finds_the_disk_full_is_deferred_charged_nothing(
    settings: Settings, llm_server: LLMServer, tmp_path: Path
) -> None:
    """The graph's file may not grow just before session s1's commit: the commit fails with
    ``database or disk is full``. The session is deferred (``outage``), its attempts stay 0 and no
    chunk is recorded as failed; once space is back the next extraction digests it from its stored
    answers, with no model call paid again. Before, the session was charged an attempt per cycle
    (undigestible after ``max_session_attempts``) for the disk."""
    mine = llm_settings(settings.data_dir, llm_server, chunk_limit_tokens=50_000)
    with stores_on(mine, timeout=1.0) as stores:
        await load(mine, stores, tmp_path, [session("s1", WORDY_TURNS)])
        assert (await run_cycle(mine, stores=stores, phases=PHASES[:2])).outcome == "completed"  # provider-ready, ingest

        async def full_disk() -> None:
            fill_the_disk(stores.db)

        assert await extract_one(mine, stores, before_commit=full_disk) == "outage"
        assert charged(stores) == ("undigested", 0, 0)
        paid = llm_server.chat_count
        free_space(stores.db)
        assert await extract_one(mine, stores) == "digested"
        assert llm_server.chat_count == paid  # its answer was stored before the commit: not paid again
        assert charged(stores) == ("digested", 0, 0)
        assert stores.db.query("SELECT COUNT(*) FROM nodes WHERE label = 'CLASS'")[0][0] == 120


# Enough edges that linking them needs new pages of the file (three fit in the pages' free space).
MANY_EDGES = [{"source": f"CONCEPT:c{i}", "target": f"CONCEPT:c{i + 1}", "relationship": "NEXT"} for i in range(300)]


@pytest.mark.parametrize("form", ["file", "database"])
async def test_a_drain_that_finds_the_disk_full_ends_and_charges_no_line(settings: Settings, stores: Stores, form: str) -> None:
    """The drain's database may not grow: linking the batch fails with ``database or disk is full``.
    The drain ends with :class:`DatabaseFullError`, no line is charged or dead-lettered (one attempt
    allowed), nothing is linked; once space is back the next drain links every line. Before, the
    batch was retried line by line and each line that did not fit was charged: dead-lettered."""
    settings = settings.model_copy(update={"lazy_queue": form})
    add_concepts(stores.graph, *(f"c{i}" for i in range(len(MANY_EDGES) + 1)))
    enqueue_lazy_edges(settings.lazy_queue_target, MANY_EDGES)
    db = open_database_at(path=settings.graph_path, url=None)
    try:
        options = {"unit": DatabaseUnitOfWork(db), "chroma": stores.chroma, "max_attempts": 1, "table": LazyEdgeTable(db)}
        fill_the_disk(db)
        with pytest.raises(DatabaseFullError):
            await drain_queue(queue_of(settings), **options)
        assert dead_letters(settings, db) == 0
        assert queued_attempts(settings, None) == [0] * len(MANY_EDGES)
        assert edge_count(GraphStore(db), "NEXT") == 0
        free_space(db)
        again = await drain_queue(queue_of(settings), **options)
        assert (again.succeeded, again.failed, again.dead_lettered) == (len(MANY_EDGES), 0, 0)
        assert edge_count(GraphStore(db), "NEXT") == len(MANY_EDGES)
    finally:
        db.close()
