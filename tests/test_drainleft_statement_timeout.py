"""A drain whose statements run past PostgreSQL's ``statement_timeout`` charges no line unless one
line's statement alone times out: a lock another session holds on the table stops every statement
(the drain ends, exit 1, nothing charged), a lock on one line's edge stops only that line's (it alone
is charged, the rest link). Before, the batch was retried line by line and every line was charged
an attempt, so a stalled server dead-lettered good lines. Real PostgreSQL locks (drainleft)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import psycopg
import pytest

from config import Settings
from pipelines.drain import drain_queue
from pipelines.enqueue import enqueue_lazy_edges
from store.backend import open_database_at
from store.errors import QueryInterruptedError
from store.graph import Edge, GraphStore
from store.lazy_table import LazyEdgeTable
from store.unit_of_work import DatabaseUnitOfWork
from tests.conftest import run_cli
from tests.lazy_fixtures import add_concepts, edge_count, queue_of
from tests.test_drainstall_busy import dead_letters, queued_attempts
from worker.cycle import Stores

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)

EDGES = [{"source": f"CONCEPT:c{i}", "target": f"CONCEPT:c{i + 1}", "relationship": "NEXT"} for i in range(3)]
# Statements stopped after this long; the drain's wait for a lock (lock_timeout) stays 30 s.
STATEMENT_TIMEOUT_MS = 500


def timing_out(url: str) -> str:
    """``url`` with the server stopping each statement after :data:`STATEMENT_TIMEOUT_MS`."""
    return url + quote(f" -cstatement_timeout={STATEMENT_TIMEOUT_MS}")


@contextmanager
def held(url: str, statement: str) -> Iterator[None]:
    """Another session holds the lock ``statement`` takes until the block ends."""
    with psycopg.connect(url) as conn:
        conn.execute(statement)  # type: ignore[arg-type]  # fixed text
        yield
        conn.rollback()


@pytest.mark.parametrize("form", ["file", "database"])
async def test_a_table_lock_past_the_statement_timeout_ends_the_drain_and_charges_no_line(
    settings: Settings, stores: Stores, database_url: str, form: str
) -> None:
    settings = settings.model_copy(update={"lazy_queue": form})
    add_concepts(stores.graph, *(f"c{i}" for i in range(4)))
    enqueue_lazy_edges(settings.lazy_queue_target, EDGES)
    db = open_database_at(path=settings.graph_path, url=timing_out(database_url))
    try:
        options = {"unit": DatabaseUnitOfWork(db), "chroma": stores.chroma, "max_attempts": 1, "table": LazyEdgeTable(db)}
        with held(database_url, "LOCK TABLE edges IN EXCLUSIVE MODE"):
            # Before: the drain ended as a success with every line charged; one attempt allowed: all dead.
            with pytest.raises(QueryInterruptedError, match="no line was charged"):
                await drain_queue(queue_of(settings), **options)
        assert dead_letters(settings, db) == 0
        assert queued_attempts(settings, database_url) == [0] * len(EDGES)
        assert edge_count(GraphStore(db), "NEXT") == 0

        again = await drain_queue(queue_of(settings), **options)
        assert (again.succeeded, again.failed, again.dead_lettered) == (len(EDGES), 0, 0)
        assert queued_attempts(settings, database_url) == []
    finally:
        db.close()


async def test_the_cli_drain_exits_1_and_says_why(settings: Settings, stores: Stores, database_url: str) -> None:
    add_concepts(stores.graph, *(f"c{i}" for i in range(4)))
    enqueue_lazy_edges(settings.lazy_queue_target, EDGES)
    env = {"REM_DATA_DIR": str(settings.data_dir), "REM_DATABASE_URL": timing_out(database_url), "REM_LAZY_MAX_ATTEMPTS": "1"}
    with held(database_url, "LOCK TABLE edges IN EXCLUSIVE MODE"):
        done = run_cli("drain", env=env)
    assert done.returncode == 1, done.stdout
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("rem-cycle: drain stopped: the graph database stopped statements at its statement timeout"), message
    assert "canceling statement due to statement timeout" in message and "no queued edge was lost" in message
    assert queued_attempts(settings, database_url) == [0] * len(EDGES)
    assert not (settings.data_dir / "lazy-edges.dead.jsonl").exists()


@pytest.mark.parametrize("form", ["file", "database"])
@pytest.mark.parametrize("slow", [0, 1, 2])  # the first line (judged by the next), one between, the last (by those before)
async def test_a_line_whose_statement_alone_times_out_is_charged_and_the_rest_link(
    settings: Settings, stores: Stores, database_url: str, form: str, slow: int
) -> None:
    settings = settings.model_copy(update={"lazy_queue": form})
    add_concepts(stores.graph, *(f"c{i}" for i in range(4)))
    stores.graph.link_nodes([Edge(f"CONCEPT:c{slow}", f"CONCEPT:c{slow + 1}", "NEXT", 0.5)])  # that line's edge, linked before
    enqueue_lazy_edges(settings.lazy_queue_target, EDGES)
    db = open_database_at(path=settings.graph_path, url=timing_out(database_url))
    try:
        options = {"unit": DatabaseUnitOfWork(db), "chroma": stores.chroma, "max_attempts": 2, "table": LazyEdgeTable(db)}
        # Another session holds that edge's row: the line's upsert waits on it past the statement timeout.
        with held(database_url, f"SELECT 1 FROM edges WHERE source = 'CONCEPT:c{slow}' FOR UPDATE"):
            stats = await drain_queue(queue_of(settings), **options)
        assert (stats.succeeded, stats.failed, stats.requeued) == (2, 1, 1)
        assert stats.failure_reasons == {"statement-timeout": 1}
        assert queued_attempts(settings, database_url) == [1]
        weights = dict(db.query("SELECT source, weight FROM edges WHERE relationship = 'NEXT'"))
        assert weights == {f"CONCEPT:c{i}": 0.5 if i == slow else 1.0 for i in range(3)}  # the others linked
    finally:
        db.close()


@pytest.mark.parametrize("form", ["file", "database"])
async def test_a_lone_line_that_always_times_out_is_charged_until_dead_not_stuck_for_ever(
    settings: Settings, stores: Stores, database_url: str, form: str
) -> None:
    """The queue's only line: no other line can run in time beside it. Before, every drain ended
    with the database blamed (exit 1) and the line never charged: the queue was stuck for ever.
    After its timeout the drain asks, on the same connection, for the locks of the tables it
    writes: granted in time (a row lock stops one statement, not every writer), the line is at
    fault and charged (smallfixes)."""
    settings = settings.model_copy(update={"lazy_queue": form})
    add_concepts(stores.graph, "c0", "c1")
    stores.graph.link_nodes([Edge("CONCEPT:c0", "CONCEPT:c1", "NEXT", 0.5)])
    enqueue_lazy_edges(settings.lazy_queue_target, EDGES[:1])
    db = open_database_at(path=settings.graph_path, url=timing_out(database_url))
    try:
        options = {"unit": DatabaseUnitOfWork(db), "chroma": stores.chroma, "max_attempts": 2, "table": LazyEdgeTable(db)}
        with held(database_url, "SELECT 1 FROM edges WHERE source = 'CONCEPT:c0' FOR UPDATE"):
            first = await drain_queue(queue_of(settings), **options)
            assert (first.succeeded, first.failed, first.requeued, first.dead_lettered) == (0, 1, 1, 0)
            assert first.failure_reasons == {"statement-timeout": 1}
            assert queued_attempts(settings, database_url) == [1]
            second = await drain_queue(queue_of(settings), **options)
        assert (second.failed, second.dead_lettered) == (1, 1)
        assert queued_attempts(settings, database_url) == []
        assert dead_letters(settings, db) == 1
    finally:
        db.close()


@pytest.mark.parametrize("form", ["file", "database"])
async def test_a_lone_line_under_a_table_lock_still_ends_the_drain_and_is_not_charged(
    settings: Settings, stores: Stores, database_url: str, form: str
) -> None:
    """The probe of the tables' locks waits on the table lock as the line did: the database, not
    the line — exit 1, nothing charged, as with several lines."""
    settings = settings.model_copy(update={"lazy_queue": form})
    add_concepts(stores.graph, "c0", "c1")
    enqueue_lazy_edges(settings.lazy_queue_target, EDGES[:1])
    db = open_database_at(path=settings.graph_path, url=timing_out(database_url))
    try:
        options = {"unit": DatabaseUnitOfWork(db), "chroma": stores.chroma, "max_attempts": 1, "table": LazyEdgeTable(db)}
        with held(database_url, "LOCK TABLE edges IN EXCLUSIVE MODE"):
            with pytest.raises(QueryInterruptedError, match="for the locks of the tables it writes.*no line was charged"):
                await drain_queue(queue_of(settings), **options)
        assert queued_attempts(settings, database_url) == [0]
        assert dead_letters(settings, db) == 0
    finally:
        db.close()
