"""The back-filled MEMORY/SESSION nodes the metrics show (``rem_cycle_backfilled_nodes``) are
counted from ``backfill_counts`` and the changes its triggers record (migration 28, scrape-a), never
by reading the nodes: every ``/metrics`` scrape on PostgreSQL, and the first after each write on
SQLite, read every MEMORY and SESSION node (one per turn) to count them. The counts follow every
write (both engines), survive a fold, and a graph from before the migration starts with its
back-filled nodes counted. Real SQLite files and the test PostgreSQL server."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from bench.bench_metrics import backfill_before_28
from config import Settings
from store.backend import open_database
from store.db import BACKFILL_COUNTS_VERSION, MIGRATIONS
from store.graph import GraphStore, Node
from tests.migrations_support import rolled_back
from worker.metrics import _graph_families


def truth(db: Any) -> dict[str, dict[str, int]]:
    """What reading every MEMORY and SESSION node says (the reading before migration 28)."""
    counted = {label: {"backfilled": 0, "backfilled-minimal": 0} for label in ("MEMORY", "SESSION")}
    counted.update({r[0]: {"backfilled": int(r[1]), "backfilled-minimal": int(r[2])} for r in db.query(backfill_before_28(db.dialect))})
    return counted


BACKFILLED = {"backfilled": True}
MINIMAL = {"backfilled": True, "minimal": True}


def _first_nodes() -> list[Node]:
    return [
        *(Node(f"memory:s1-m{i}", "MEMORY", f"m{i}", BACKFILLED) for i in range(3)),
        Node("memory:s1-live", "MEMORY", "live", {"role": "user"}),
        Node("session:s1", "SESSION", "s1", MINIMAL),
        Node("session:s2", "SESSION", "s2", {**BACKFILLED, "summary": "x"}),
        Node("session:s3", "SESSION", "s3", {"backfilled": 1, "minimal": 1}),  # flags written as 1 count too
        Node("class:c", "CLASS", "c", BACKFILLED),  # not a MEMORY/SESSION node: never counted
        Node("memory:s1-false", "MEMORY", "f", {"backfilled": False, "minimal": True}),
    ]


@pytest.mark.both_backends
def test_the_backfill_counts_follow_every_write_and_every_fold(settings: Settings) -> None:
    db = open_database(settings)
    try:
        graph = GraphStore(db)
        steps = [
            lambda: graph.upsert_nodes(_first_nodes()),
            graph.fold_counts,
            # A live sync replaces a back-filled turn; a minimal session gets its summary row.
            lambda: graph.upsert_nodes([Node("memory:s1-m0", "MEMORY", "m0", {"role": "user"}),
                                        Node("session:s1", "SESSION", "s1", {**BACKFILLED, "summary": "y"})]),
            # A change that keeps the reason, a relabel out of and into the counted labels.
            lambda: graph.upsert_nodes([Node("memory:s1-m1", "MEMORY", "m1", {**BACKFILLED, "seen": 2})]),
            lambda: _relabel(db, "memory:s1-m2", "NOTE"),
            lambda: _relabel(db, "class:c", "SESSION"),
            lambda: _relabel(db, "session:s3", "MEMORY"),
            lambda: graph.delete_node("session:s2"),
            graph.fold_counts,
            lambda: graph.upsert_nodes([Node("memory:s1-live", "MEMORY", "live", MINIMAL)]),
            lambda: graph.delete_node("memory:s1-live"),
            # A NUL in another property (JSON ``\u0000``: PostgreSQL's jsonb refuses the document).
            lambda: graph.upsert_nodes([Node("memory:s1-nul", "MEMORY", "nul", {**BACKFILLED, "note": "a\x00b"})]),
        ]
        for number, step in enumerate(steps):
            step()
            assert graph.backfill_counts() == truth(db), f"after step {number}"
        assert graph.backfill_counts() == {"MEMORY": {"backfilled": 2, "backfilled-minimal": 1},
                                           "SESSION": {"backfilled": 2, "backfilled-minimal": 0}}
        graph.fold_counts()
        assert db.query("SELECT COUNT(*) FROM backfill_count_changes")[0][0] == 0
        assert graph.backfill_counts() == truth(db)
    finally:
        db.close()


def _relabel(db: Any, node_id: str, label: str) -> None:
    with db.transaction() as conn:
        conn.execute("UPDATE nodes SET label = ? WHERE id = ?", (label, node_id))


@pytest.mark.both_backends
def test_a_graph_from_before_the_migration_starts_with_its_backfilled_nodes_counted(settings: Settings) -> None:
    backend = "postgresql" if settings.database_url else "sqlite"
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes(_first_nodes())
    finally:
        db.close()
    rolled_back(settings, backend, to=BACKFILL_COUNTS_VERSION - 1)

    db = open_database(settings)  # migrates it
    try:
        assert db.schema_version == len(MIGRATIONS)
        graph = GraphStore(db)
        assert graph.backfill_counts() == truth(db) == {"MEMORY": {"backfilled": 3, "backfilled-minimal": 0},
                                                        "SESSION": {"backfilled": 1, "backfilled-minimal": 2}}
        assert db.query("SELECT COUNT(*) FROM backfill_count_changes")[0][0] == 0  # counted by the migration itself
        graph.delete_node("memory:s1-m0")
        assert graph.backfill_counts() == truth(db)
    finally:
        db.close()


def test_a_scrape_of_the_graph_counts_reads_no_node(settings: Settings) -> None:
    """The graph families of a scrape read the count tables only: the nodes table grows with every
    turn, and SQLite's authorizer sees each table a statement reads."""
    db = open_database(settings)
    try:
        graph = GraphStore(db)
        graph.upsert_nodes(_first_nodes())
        read: set[str] = set()

        def authorize(action: int, table: str | None, *_: Any) -> int:
            if action == sqlite3.SQLITE_READ and table:
                read.add(table)
            return sqlite3.SQLITE_OK

        db.conn.set_authorizer(authorize)
        try:
            families = _graph_families(graph)
        finally:
            db.conn.set_authorizer(None)
        backfilled = {tuple(s.labels.values()): s.value for f in families if f.name == "rem_cycle_backfilled_nodes" for s in f.samples}
        assert backfilled == {("MEMORY", "backfilled"): 3, ("MEMORY", "backfilled-minimal"): 0,
                              ("SESSION", "backfilled"): 1, ("SESSION", "backfilled-minimal"): 2}
        assert read and "nodes" not in read, sorted(read)
    finally:
        db.close()
