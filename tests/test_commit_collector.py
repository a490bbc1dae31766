"""The extraction commit runs with Python's garbage collector paused
(:func:`pipelines.extract.commit.collector_paused`, bench/RESULTS.md "The extraction commit's
collector"): the graph it writes is the graph the commit wrote with the collector running, the
collector runs again after it (ended well or not, alone or beside another), and the commit leaves
no cycle behind for the paused collector to have missed."""

from __future__ import annotations

import gc
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from config import load_settings
from pipelines.extract.commit import CommitStats, collector_paused, commit_session
from pipelines.extract.heuristic import extract_heuristic
from pipelines.extract.model import validate_extraction
from pipelines.extract.reduce import ReducedSession, reduce_session
from pipelines.extract.units import WorkUnit, plan_units
from pipelines.extract.workflow import source_turns, turn_times
from pipelines.ingest import plan_session_sync
from store.backend import canonical_dump, open_database_at
from store.chroma import MemoryRow
from store.graph import GraphStore
from store.unit_of_work import DatabaseUnitOfWork
from tests.conftest import replay_migrated_schema, schema_url
from worker.knowledge import identity_resolver

pytestmark = pytest.mark.both_backends

# The paused way (the product's) and the way before it: the same function, the collector running.
WAYS: dict[str, Callable[..., CommitStats]] = {"paused": commit_session, "running": commit_session.__wrapped__}  # type: ignore[attr-defined]
SETTINGS = load_settings(data_dir=Path("/nonexistent"))


def turns(sid: str, n: int, files: int) -> list[MemoryRow]:
    """The 100,000-turn test's texts (tests/test_bad_rows.py), over ``files`` files."""
    return [MemoryRow(f"{sid}-t{i:06d}", f"turn {i}: FooWidget calls bar_{i % 7}() in src/mod{i % files}.py",
                      {"sessionId": sid, "turnIndex": i, "createdAt": f"2026-11-01T10:{i // 60 % 60:02d}:{i % 60:02d}Z"})
            for i in range(n)]


def extracted(sid: str, rows: list[MemoryRow]) -> tuple[list[WorkUnit], ReducedSession]:
    units = plan_units(sid, source_turns(rows), budget_tokens=SETTINGS.chunk_budget_tokens)
    return units, reduce_session(sid, [validate_extraction(extract_heuristic(u), u, semantic_types=SETTINGS.semantic_types) for u in units])


# A session of 600 turns, a small one, and the big one again from its first 400 turns, which
# no longer name src/mod4.py: the re-extraction takes points back, drops provenance edges and
# removes a node no other session supports.
BIG, SMALL, AGAIN = turns("big", 600, 5), turns("small", 3, 5), turns("big", 400, 4)
EXTRACTED = {name: extracted(rows[0].metadata["sessionId"], rows) for name, rows in (("big", BIG), ("small", SMALL), ("again", AGAIN))}


@pytest.fixture
def two_databases(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[Any]]:
    """Two fresh graph databases of the test's engine: SQLite files, or PostgreSQL schemas."""
    if backend == "sqlite":
        databases = [open_database_at(path=tmp_path / f"{n}.sqlite3", url=None) for n in range(2)]
        yield databases
        for db in databases:
            db.close()
        return
    import psycopg

    from store.postgres import close_pools

    server = request.getfixturevalue("postgres_server_url")
    schemas = [f"test_{uuid.uuid4().hex[:16]}" for _ in range(2)]
    with psycopg.connect(server, autocommit=True) as conn:
        for schema in schemas:
            replay_migrated_schema(conn, request.getfixturevalue("migrated_schema_script"), schema)
    databases = [open_database_at(path=tmp_path / "unused", url=schema_url(server, schema)) for schema in schemas]
    yield databases
    for db in databases:
        db.close()
    close_pools()
    with psycopg.connect(server, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def ingest(db: Any, rows: list[MemoryRow]) -> None:
    """What the ingest phase writes for a session's rows: its SESSION and MEMORY nodes, their edges."""
    graph = GraphStore(db)
    sessions, memories, edges, _ = plan_session_sync(rows[0].metadata["sessionId"], rows, None, {})
    with db.transaction():
        graph.upsert_nodes(sessions + memories)
        graph.link_nodes(edges)


def commit(way: str, db: Any, name: str, rows: list[MemoryRow], **options: Any) -> CommitStats:
    """Commit the session as the extract phase does (identity resolution, merges, turn times)."""
    units, reduced = EXTRACTED[name]
    unit, resolver = DatabaseUnitOfWork(db), identity_resolver(db)

    async def prepare() -> None:
        await resolver.prepare(reduced.nodes, session=reduced.session_id)

    anyio.run(prepare)
    return WAYS[way](reduced, unit=unit, graph_index=None, on_commit=options.get("on_commit", lambda: None), queue_append=len,
                     matcher=resolver, merges=unit.merges, observed_at=turn_times(rows, units), on_begin=unit.runstate.begin_commit)


def counted(db: Any) -> dict[str, Any]:
    """The graph's counts as its count tables keep them, and as counting every row gives them."""
    nodes = {r[0]: r[1] for r in db.query("SELECT label, COUNT(*) FROM nodes GROUP BY label")}
    edges = {r[0]: r[1] for r in db.query("SELECT relationship, COUNT(*) FROM edges GROUP BY relationship")}
    return {"kept": GraphStore(db).counts(), "rows": {"nodes": nodes, "edges": edges}}


def test_the_paused_commit_writes_the_graph_the_running_one_wrote(two_databases: list[Any]) -> None:
    found = {}
    gc.collect()
    gc.freeze()  # the collections below walk what the test makes from here only (a whole heap's is ~0.4 s)
    try:
        for way, db in zip(WAYS, two_databases, strict=True):
            ingest(db, BIG)
            ingest(db, SMALL)
            stats = []
            for name, rows in (("big", BIG), ("small", SMALL), ("again", AGAIN)):
                stats.append(commit(way, db, name, rows))
                # Nothing the commit made is left for the collector it paused: pausing it kept no memory.
                assert way == "running" or gc.collect() == 0, name
            found[way] = (canonical_dump(db), counted(db), stats)
    finally:
        gc.unfreeze()
    assert found["paused"] == found["running"]
    dump, counts, stats = found["paused"]
    assert counts["kept"]["nodes"] == counts["rows"]["nodes"] and counts["kept"]["edges"] == counts["rows"]["edges"]
    assert counts["rows"]["edges"]["MENTIONED_IN"] == 3 * 400 + 3 * 3  # each turn names FooWidget, a bar_ and a file
    assert stats[2].nodes_removed == 1 and stats[2].edges_removed > 3 * 200
    assert not any(row[0] == "FILE:src/mod4.py" for row in dump["nodes"])


def test_the_collector_runs_again_after_a_commit_and_after_a_failed_one(two_databases: list[Any]) -> None:
    db = two_databases[0]
    ingest(db, SMALL)
    assert gc.isenabled()

    def refuse() -> None:
        assert not gc.isenabled()  # paused inside the commit
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        commit("paused", db, "small", SMALL, on_commit=refuse)
    assert gc.isenabled()
    commit("paused", db, "small", SMALL)
    assert gc.isenabled()
    gc.disable()  # a caller that paused it keeps it paused
    try:
        commit("paused", db, "small", SMALL)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_pauses_that_overlap_resume_the_collector_when_the_last_one_ends() -> None:
    entered, leave_first, first_left = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with collector_paused():
            entered.set()
            leave_first.wait(10)
        first_left.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)
    with collector_paused():
        leave_first.set()
        assert first_left.wait(10)
        assert not gc.isenabled()  # the other pause ended; this one still runs
    thread.join(10)
    assert gc.isenabled()
