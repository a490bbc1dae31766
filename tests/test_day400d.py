"""What a commit reads grows with what it commits, not with the graph's history (day400d).

A session's commit reads its MEMORY nodes once (``commit_session`` passes what it read to
``link_nodes``), counted with SQLite's trace callback on the real file. The read by which a
re-extraction's queue lines stand in for the earlier ones seeks the anchor's lines through the
first-chunk index (migration 27): its plan is checked on both engines."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipelines.extract.commit import commit_session
from pipelines.extract.heuristic import extract_heuristic
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
from pipelines.extract.reduce import reduce_session
from pipelines.lazy_edge import ExtractionLines
from store.db import Database
from store.graph import Edge, GraphStore, Node
from store.lazy_queue import edge_line
from store.lazy_table import APPEND_BATCH_ROWS, LazyEdgeTable, holding_read
from store.provenance import ProvenanceStore
from store.semantic_index import SemanticIndex
from store.unit_of_work import DatabaseUnitOfWork

TYPES = ("CLASS", "CONCEPT")


def _commit(db: Database, sid: str, *texts: str) -> None:
    """Commit the heuristic extraction of a session of ``texts`` (its session and memory nodes exist)."""
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, tuple(UnitTurn(n, f"{sid}-m{n}", t) for n, t in enumerate(texts, 1)), "h")
    reduced = reduce_session(sid, [validate_extraction(extract_heuristic(work), work, semantic_types=TYPES)])
    commit_session(reduced, unit=DatabaseUnitOfWork(db), graph_index=SemanticIndex(db), on_commit=lambda: None, queue_append=len)


def test_a_commit_reads_its_memory_nodes_once(tmp_path: Path) -> None:
    db = Database(tmp_path / "g.sqlite3")
    try:
        texts = ("The LazyEdgeQueue feeds GraphStore.", "DrainWorker runs the LazyEdgeQueue.")
        GraphStore(db).upsert_nodes([Node("session:a", "SESSION", "a"), Node("memory:a-m1", "MEMORY", "m"), Node("memory:a-m2", "MEMORY", "m")])
        _commit(db, "a", *texts)
        statements: list[str] = []
        db.conn.set_trace_callback(statements.append)
        _commit(db, "a", *texts)  # again: its provenance edges to the memory nodes are linked again
        db.conn.set_trace_callback(None)
        reads = [s for s in statements if re.match(r"\s*SELECT\b.*\bFROM nodes\b", s, re.S) and "'memory:a-m1'" in s]
        assert len(reads) == 1, reads
        assert GraphStore(db).get_edge("CLASS:LazyEdgeQueue", "memory:a-m2", "MENTIONED_IN") is not None
    finally:
        db.close()


def _removed_by_filter(plan: Any) -> int:
    """Rows a PostgreSQL plan (``EXPLAIN (ANALYZE, FORMAT JSON)``'s node) read and its filters dropped."""
    return int(plan.get("Rows Removed by Filter", 0)) + sum(_removed_by_filter(p) for p in plan.get("Plans", ()))


@pytest.mark.both_backends
def test_the_superseding_read_seeks_only_the_anchors_lines(tmp_path: Path, open_graph_database: Callable[..., Any], backend: str) -> None:
    db = open_graph_database(tmp_path / "g.sqlite3")
    try:
        table = LazyEdgeTable(db)
        others = 500
        table.append_lines(edge_line({"source": f"CLASS:T{n}", "target": f"memory:o{n % 7}-m{n}", "relationship": "MENTIONED_IN",
                                      "properties": {"chunk_ids": [f"o{n % 7}:chunk:0"]}}) for n in range(others))
        table.append([{"source": "CLASS:Q", "target": "memory:s-again-m1", "relationship": "MENTIONED_IN",
                       "properties": {"chunk_ids": ["s-again:chunk:0"]}}])
        statement, patterns = holding_read("lazy_edges", ExtractionLines({"s-again": None}).filters, db.dialect)
        statement, params = statement.format(line="line"), (0, *patterns, APPEND_BATCH_ROWS)
        if backend == "sqlite":
            plan = [row[-1] for row in db.query(f"EXPLAIN QUERY PLAN {statement}", params)]
            # The primary key's range from id 0 walks every row; a seek names another index.
            assert not any(step.startswith("SCAN") or "(rowid>?)" in step for step in plan), plan
        else:
            with db.transaction() as conn:
                (document,) = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params).fetchone()
            found = json.loads(document) if isinstance(document, str) else document
            assert _removed_by_filter(found[0]["Plan"]) < others, found
    finally:
        db.close()


@pytest.mark.both_backends
def test_an_edges_texts_are_sought_not_sorted_out_of_all_its_points(tmp_path: Path, open_graph_database: Callable[..., Any], backend: str) -> None:
    """``edge_texts`` (every commit, for each edge it touches) seeks an edge's least texts through
    ``edge_points_reason``; PostgreSQL estimated each correlated seek at one row and, when the
    other index on the edge's key (``edge_points_target``) was the smaller, took it and sorted every
    point of the edge to keep one: a popular edge's whole history per text (46,864 points, 20 keys:
    16,715 buffers instead of 140). Here the reason index is made the larger by its fill factor."""
    db = open_graph_database(tmp_path / "g.sqlite3")
    try:
        rng = random.Random(3)
        keys: set[tuple[str, str]] = set()
        rows = []
        for s in range(300):
            mine = {("CLASS:S0", "CLASS:T0")} | {(f"CLASS:S{rng.randrange(40)}", f"CLASS:T{rng.randrange(1, 2000)}") for _ in range(19)}
            keys |= mine
            rows += [(a, b, "RELATES_TO", f"session:s{s}", f"memory:s{s}-m1", f"s{s}:chunk:0", "e", a, b, "mentioned together in one turn")
                     for a, b in sorted(mine)]
        GraphStore(db).upsert_nodes(Node(n, "CLASS", n) for n in sorted({k[0] for k in keys} | {k[1] for k in keys}))
        GraphStore(db).link_nodes(Edge(a, b, "RELATES_TO", 1.0, {}) for a, b in sorted(keys))
        with db.transaction() as conn:
            conn.executemany("INSERT INTO edge_points(source, target, relationship, anchor, memory_id, chunk_id, evidence, "
                             "extracted_source, extracted_target, justification) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            if backend == "postgresql":
                conn.execute("ALTER INDEX edge_points_reason SET (fillfactor = 10)")
                conn.execute("REINDEX INDEX edge_points_reason")
        db.query("ANALYZE edge_points" if backend == "postgresql" else "ANALYZE")
        key = ("CLASS:S0", "CLASS:T0", "RELATES_TO")
        with db.transaction() as conn:
            texts = ProvenanceStore(db).edge_texts([key], besides="session:s0")
            if backend == "postgresql":
                (fetched,) = conn.execute("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables "
                                          "WHERE relname = 'edge_points' AND schemaname = current_schema()").fetchone()
                assert fetched <= 2, f"{fetched} of the edge's 300 points read for its {len(texts[key])} text"
        assert texts == {key: ("mentioned together in one turn",)}
    finally:
        db.close()
