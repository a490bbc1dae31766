"""A small, realistic knowledge graph written through the real stores, shared by the export,
communities and query tests."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable
from typing import Any

from store.db import Database
from store.graph import Edge, GraphStore, Node
from store.provenance import NodePointRow, PointRow, ProvenanceStore, anchor_edges


def point(session: str, memory: str, evidence: str, chunk: int = 0) -> dict[str, Any]:
    return {"session": f"session:{session}", "memory": f"memory:{memory}", "chunk_id": f"{session}:chunk:{chunk}", "evidence": evidence}


def knowledge(node_id: str, name: str, *, aliases: list[str], points: list[dict[str, Any]], description: str = "") -> tuple[Node, list[dict[str, Any]]]:
    """A semantic node and its provenance points (write them with :func:`add_knowledge`)."""
    label = node_id.partition(":")[0]
    properties = {"description": description or f"{name} as discussed", "aliases": aliases, "confidence": 0.9, "tags": ["t"]}
    return Node(node_id, label, name, properties), points


def add_knowledge(db: Database, items: list[tuple[Node, list[dict[str, Any]]]]) -> None:
    """Write semantic nodes with their points and the provenance edges derived from them."""
    graph, provenance = GraphStore(db), ProvenanceStore(db)
    graph.upsert_nodes([node for node, _ in items])
    edges = []
    for node, points in items:
        rows = [PointRow(p["session"], p["memory"] or "", p["chunk_id"], p["evidence"] or "") for p in points]
        provenance.add_node_points(NodePointRow(node.id, r, node.id) for r in rows)
        for anchor in sorted({r.anchor for r in rows}):
            edges.extend(anchor_edges(node.id, anchor, [r for r in rows if r.anchor == anchor]))
    graph.link_nodes(edges)


def build_sample_graph(path: Path, *, opener: Callable[[Path], Any] = Database) -> Database:
    """Two sessions with memories, two clusters of semantic nodes joined by one weak edge, provenance
    edges to memories and sessions. Returns the open database."""
    db = opener(path)
    graph = GraphStore(db)
    rows = [
        Node("session:s1", "SESSION", "Fix the lazy edge queue drain", {"sessionId": "s1", "liveIngested": True}),
        Node("session:s2", "SESSION", "Chunker performance", {"sessionId": "s2", "liveIngested": True}),
        Node("memory:m1", "MEMORY", "The LazyEdgeQueue drain loses lines", {"sessionId": "s1", "turnIndex": 0, "liveIngested": True}),
        Node("memory:m2", "MEMORY", "drain() must rename the queue first", {"sessionId": "s1", "turnIndex": 1, "liveIngested": True}),
        Node("memory:m3", "MEMORY", "chunk_session is quadratic", {"sessionId": "s2", "turnIndex": 0, "liveIngested": True}),
    ]
    q1, q2, q3 = point("s1", "m1", "The LazyEdgeQueue drain loses lines"), point("s1", "m2", "drain() must rename"), point("s2", "m3", "chunk_session is quadratic")
    semantic = [
        knowledge("CLASS:LazyEdgeQueue", "LazyEdgeQueue", aliases=["LazyEdgeQueue", "lazy edge queue"], points=[q1]),
        knowledge("METHOD:drain", "drain()", aliases=["drain()"], points=[q2]),
        knowledge("FILE:store/lazy_queue.py", "store/lazy_queue.py", aliases=["store/lazy_queue.py"], points=[q1, q2]),
        knowledge("DECISION:Rename before drain", "Rename before drain", aliases=["rename the queue first"], points=[q2]),
        knowledge("METHOD:chunk_session", "chunk_session()", aliases=["chunk_session"], points=[q3]),
        knowledge("CONCEPT:Quadratic join", "Quadratic join", aliases=["quadratic"], points=[q3]),
        knowledge("FILE:pipelines/chunker.py", "pipelines/chunker.py", aliases=["pipelines/chunker.py"], points=[q3]),
    ]
    graph.upsert_nodes(rows)
    add_knowledge(db, semantic)
    provenance = [
        Edge("memory:m1", "session:s1", "ORIGINATES_IN"),
        Edge("memory:m2", "session:s1", "ORIGINATES_IN"),
        Edge("memory:m3", "session:s2", "ORIGINATES_IN"),
    ]
    links = [
        Edge("METHOD:drain", "CLASS:LazyEdgeQueue", "IMPLEMENTS", 2.0, {"justification": "drain is a method of the queue"}),
        Edge("CLASS:LazyEdgeQueue", "FILE:store/lazy_queue.py", "RELATES_TO", 1.0),
        Edge("METHOD:drain", "FILE:store/lazy_queue.py", "RELATES_TO", 1.0),
        Edge("DECISION:Rename before drain", "METHOD:drain", "SUPPORTS", 1.0),
        Edge("METHOD:chunk_session", "CONCEPT:Quadratic join", "CAUSES_ISSUE", 1.0),
        Edge("METHOD:chunk_session", "FILE:pipelines/chunker.py", "RELATES_TO", 1.0),
        Edge("CONCEPT:Quadratic join", "FILE:pipelines/chunker.py", "RELATES_TO", 1.0),
        Edge("FILE:pipelines/chunker.py", "FILE:store/lazy_queue.py", "RELATES_TO", 0.1),
    ]
    graph.link_nodes(provenance + links)
    return db
