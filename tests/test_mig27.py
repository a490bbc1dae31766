"""An anchor's lines in the queue table are found through an index on their first chunk id
(migration 27, mig27): a graph written before it gets the index, and the reads that select an
anchor's lines — a re-extraction's superseding, a forget's or retraction's withdrawal — select the
same lines as the ``LIKE`` over every row did, whoever inserted them. Real SQLite files and the
test PostgreSQL server."""

from __future__ import annotations

from typing import Any

import pytest

from config import Settings
from pipelines.lazy_edge import ExtractionLines
from store.backend import open_database
from store.db import FIRST_CHUNK_VERSION, MIGRATIONS
from store.lazy_queue import CHUNK_IDS_TEXT, LineFilter, edge_line
from store.lazy_table import LazyEdgeTable
from tests.migrations_support import rolled_back


def _line(anchor: str, chunk: str = "0", *, target: str | None = None, relationship: str = "MENTIONED_IN") -> str:
    return edge_line({"source": "CLASS:LazyEdgeQueue", "target": target or f"memory:{anchor}-m1", "relationship": relationship,
                      "properties": {"chunk_ids": [f"{anchor}:chunk:{chunk}", f"{anchor}:chunk:1"]}},
                     timestamp="2026-12-04T00:00:00.000Z").decode().rstrip("\n")


# What a queue table holds: rem-cycle's extraction lines of several anchors (one whose id holds
# ``:chunk:`` and one of a character outside ASCII), an agent's lines, lines no JSON reads, and an
# extraction-looking line whose chunk ids are not its first field's.
LINES = [
    _line("s1"), _line("s1", "3:part:2"), _line("s2"), _line("s1:chunk:7"), _line("sé"), _line("s10"),
    '{"source":"memory:x","target":"memory:y","relationship":"NOTED_IN"}',
    '{"source":"CLASS:A","target":"memory:s1-m1","relationship":"MENTIONED_IN","properties":{"chunk_ids":"s1:chunk:0"}}',
    '{"properties":{"evidence":{"chunk_ids":["s1:chunk:0"]}},"source":"CLASS:B","target":"memory:s1-m1","relationship":"MENTIONED_IN"}',
    "not json at all",
    '["s1:chunk:0"]',
]


def _table_lines(db: Any, table: str) -> list[str]:
    return [text for (text,) in db.query(f"SELECT line FROM {table} ORDER BY id")]


@pytest.mark.both_backends
def test_a_graph_from_before_the_index_gets_it_and_withdraws_exactly_the_anchors_lines(settings: Settings) -> None:
    backend = "postgresql" if settings.database_url else "sqlite"
    db = open_database(settings)
    try:
        LazyEdgeTable(db).append_lines(LINES)
        with db.transaction() as conn:  # a dead copy of each line, as a drain would have left them
            conn.execute("INSERT INTO lazy_edges_dead(line, reason, detail, attempts, enqueued_at, dead_lettered_at) "
                         "SELECT line, 'max-attempts', '', 5, enqueued_at, enqueued_at FROM lazy_edges")
    finally:
        db.close()
    rolled_back(settings, backend, to=FIRST_CHUNK_VERSION - 1)

    db = open_database(settings)  # migrates it
    try:
        assert db.schema_version == len(MIGRATIONS)
        indexes = {"lazy_edges_first_chunk", "lazy_edges_dead_first_chunk"}
        if backend == "sqlite":
            found = {name for (name,) in db.query("SELECT name FROM sqlite_master WHERE type = 'index'")}
        else:
            found = {name for (name,) in db.query("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")}
        assert indexes <= found
        table = LazyEdgeTable(db)
        for taken in (ExtractionLines.of("s1"), ExtractionLines.union([ExtractionLines.of("s2"), ExtractionLines.of("sé")]),
                      ExtractionLines.of("s1", turn="memory:s1-m1"), ExtractionLines.of("s1:chunk:7")):
            assert taken.filters.first_chunk_prefixes and not taken.filters.texts
            # What the read of every row (the text every extraction line holds) selects, taken whole.
            every = LineFilter(texts=(CHUNK_IDS_TEXT,))
            expected = table.withdraw(every, taken.matches, dry_run=True)
            assert expected > 0
            assert table.withdraw(taken.filters, taken.matches, dry_run=True) == expected
        withdrawn = table.withdraw(ExtractionLines.of("s1").filters, ExtractionLines.of("s1").matches)
        assert withdrawn == 4  # s1's two lines, live and dead; s1:chunk:7's and s10's stay
        kept = [line for line in LINES if line not in (_line("s1"), _line("s1", "3:part:2"))]
        assert _table_lines(db, "lazy_edges") == kept and _table_lines(db, "lazy_edges_dead") == kept
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_producers_plain_insert_is_indexed_and_a_malformed_line_still_goes_in(settings: Settings) -> None:
    """A producer inserts rows with SQL of its own (store/lazy_table.py): the index is an expression
    of the line, so its rows are found as rem-cycle's are, and a line that is no JSON — which a
    drain dead-letters — is not refused by the index."""
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            for line in (_line("p1"), "{not json", '{"properties":{"chunk_ids":[7]}}'):
                conn.execute("INSERT INTO lazy_edges(line, enqueued_at) VALUES (?, ?)", (line, "2026-12-04T00:00:00.000Z"))
        table = LazyEdgeTable(db)
        taken = ExtractionLines.of("p1")
        assert table.withdraw(taken.filters, taken.matches) == 1
        assert _table_lines(db, "lazy_edges") == ["{not json", '{"properties":{"chunk_ids":[7]}}']
    finally:
        db.close()
