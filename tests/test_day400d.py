"""What a commit reads grows with what it commits, not with the graph's history (day400d).

A session's commit reads its MEMORY nodes once (``commit_session`` passes what it read to
``link_nodes``), counted with SQLite's trace callback on the real file."""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.extract.commit import commit_session
from pipelines.extract.heuristic import extract_heuristic
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
from pipelines.extract.reduce import reduce_session
from store.db import Database
from store.graph import GraphStore, Node
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
