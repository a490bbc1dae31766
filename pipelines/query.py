"""The query surface's pure core: what ``rem-cycle show`` and ``rem-cycle search`` report.

:func:`turn_memory_ids` says which memories (turns) a node came from — its provenance points and
its ``MENTIONED_IN`` edges; :func:`node_view` assembles the node, its aliases, its semantic edges,
the sessions/notes it came from and those turns with their text and evidence quotes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.vocabulary import (
    ANCHOR_LABELS,
    DISCUSSED_IN,
    MEMORY_LABEL,
    MENTIONED_IN,
    PROVENANCE_RELATIONSHIPS,
    SESSION_LABEL,
)
from store.chroma import MemoryRow
from store.graph import Edge, Node
from store.ids import InvalidIdError, normalize_graph_node_id


def _memory_id(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    candidate = value if value.lower().startswith("memory:") else f"memory:{value}"
    try:
        return normalize_graph_node_id(candidate)
    except InvalidIdError:
        return None


def turn_memory_ids(node: Node, edges: Iterable[Edge], points: Iterable[Mapping[str, Any]] = ()) -> list[str]:
    """The ``memory:`` ids of the turns ``node`` came from (its points and ``MENTIONED_IN`` edges; a
    turn's, itself), sorted."""
    found = {m for m in (_memory_id(p.get("memory")) for p in points) if m} | ({node.id} if node.label == MEMORY_LABEL else set())
    found.update(e.target for e in edges if e.source == node.id and e.relationship == MENTIONED_IN)
    return sorted(found)


@dataclass(frozen=True)
class ViewCounts:
    """What :func:`node_view` cannot count from inputs cut to what ``show`` prints: the turns to
    show (sorted ``memory:`` ids), the totals of semantic edges and turns, the (first, last)
    turn time of all the node's points and how many sessions / notes files it came from."""

    turn_ids: Sequence[str]
    edges_total: int
    turns_total: int
    seen: tuple[str | None, str | None]
    sources_total: int = 0


def node_view(
    node: Node,
    edges: Sequence[Edge],
    neighbours: Mapping[str, Node],
    turns: Mapping[str, MemoryRow],
    *,
    points: Sequence[Mapping[str, Any]] = (),
    merged_from: Sequence[Mapping[str, Any]] = (),
    limit: int | None = None,
    counted: ViewCounts | None = None,
) -> dict[str, Any]:
    """Everything ``show`` prints about ``node``. ``edges`` are the edges touching it, ``neighbours``
    the nodes at their other ends, ``points`` its provenance points, ``turns`` the Chroma rows of its memories (``memory:<id>`` keys;
    a missing one is shown without text). With ``limit``, at most that many semantic edges (the
    heaviest) and turns (the first of :func:`turn_memory_ids`); ``edges_total`` and ``turns_total``
    say how many there are. ``counted``: the inputs are already cut to what is shown (the heaviest
    edges, the sources and the points of the turns shown), and these are the totals and times of
    the whole node."""
    semantic: list[dict[str, Any]] = []
    anchors: set[str] = set()
    for edge in edges:
        outgoing = edge.source == node.id
        other_id = edge.target if outgoing else edge.source
        other = neighbours.get(other_id)
        # A knowledge node's provenance edges lead to its sources; an anchor's (a session, a turn, a
        # notes file) to what was said in it, which is what showing one is for.
        provenance = edge.relationship in PROVENANCE_RELATIONSHIPS and node.label not in ANCHOR_LABELS
        if provenance or (other is not None and other.label in ANCHOR_LABELS):
            if outgoing and edge.relationship == DISCUSSED_IN:
                anchors.add(other_id)
            continue
        semantic.append(
            {
                "direction": "out" if outgoing else "in",
                "relationship": edge.relationship,
                "node": other_id,
                "name": other.name if other else other_id,
                "label": other.label if other else None,
                "weight": edge.weight,
                "justification": edge.properties.get("justification"),
            }
        )
    # Quotes and chunks by turn; a point without a turn (a notes file's) by its source.
    evidence: dict[str, list[str]] = {}
    chunks: dict[str, set[str]] = {}
    for point in points:
        place = _memory_id(point.get("memory")) or point.get("session")
        if not isinstance(place, str) or not place:
            continue
        quote = point.get("evidence")
        if isinstance(quote, str) and quote and quote not in evidence.setdefault(place, []):
            evidence[place].append(quote)
        if isinstance(point.get("chunk_id"), str) and point["chunk_id"]:
            chunks.setdefault(place, set()).add(point["chunk_id"])
    turn_rows = []
    memories = list(counted.turn_ids) if counted else turn_memory_ids(node, edges, points)
    for memory in memories[:limit]:
        row = turns.get(memory)
        session = row.session_id if row else None
        if session:
            anchors.add(f"session:{session}")
        turn_rows.append(
            {
                "memory": memory,
                "session": f"session:{session}" if session else None,
                "turn_index": row.turn_index if row else None,
                "role": row.metadata.get("role") if row else None,
                "created_at": row.created_at if row else None,
                "text": row.document if row else None,
                "evidence": evidence.get(memory, []),
                "chunks": sorted(chunks.get(memory, ())),
            }
        )
    turn_rows.sort(key=lambda t: (t["session"] or "", t["turn_index"] if t["turn_index"] is not None else -1, t["memory"]))
    sources = [
        {"id": a, "label": neighbours[a].label if a in neighbours else SESSION_LABEL, "title": neighbours[a].name if a in neighbours else a,
         "evidence": evidence.get(a, []), "chunks": sorted(chunks.get(a, ()))}
        for a in sorted(anchors)
    ]
    properties = {k: v for k, v in node.properties.items() if k != "aliases"}
    seen = [t for t in counted.seen if t] if counted else sorted(t for t in (p.get("observed_at") for p in points) if isinstance(t, str))
    aliases = node.properties.get("aliases")
    return {
        "id": node.id,
        "label": node.label,
        "name": node.name,
        # A session says what it was about in its summary.
        "description": node.properties.get("summary" if node.label == SESSION_LABEL else "description"),
        "aliases": list(aliases) if isinstance(aliases, list) else [],
        "properties": properties,
        "edges": sorted(semantic, key=lambda e: (-e["weight"], e["direction"] != "out", e["relationship"], e["node"]))[:limit],
        "edges_total": counted.edges_total if counted else len(semantic),
        "sources": sources,
        # The sessions and notes files it came from; ``show`` prints the first ``limit``.
        "sources_total": max(counted.sources_total, len(sources)) if counted else len(sources),
        "turns": turn_rows,
        "turns_total": counted.turns_total if counted else len(memories),
        "merged_from": list(merged_from),
        "first_seen": seen[0] if seen else None,
        "last_seen": seen[-1] if seen else None,
    }


def search_row(node: Node) -> dict[str, Any]:
    """One ``search`` result."""
    aliases = node.properties.get("aliases")
    return {
        "id": node.id,
        "label": node.label,
        "name": node.name,
        "aliases": list(aliases) if isinstance(aliases, list) else [],
        "description": node.properties.get("description"),
    }
