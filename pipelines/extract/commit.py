"""Commit: a reduced session → graph writes, in one transaction with the session's digest record.

:func:`plan_commit` is pure: given the reduced session, the matching existing nodes and edges, it
decides every node, edge and lazy-queue line. :func:`commit_session` does the I/O.

- Identity against the existing graph (:func:`match_existing`, swappable): a node whose
  (type, normalised name) or alias already exists links to that node.
- Merging with what other sessions said is idempotent: longest description, union of aliases and
  tags, max confidence; this session's provenance points *replace* its earlier ones, so re-running
  a session changes nothing and an edge's weight (its distinct provenance points) never creeps.
- Provenance edges: node → ``memory:`` ``MENTIONED_IN``, node → ``session:`` ``DISCUSSED_IN``;
  an explicit reference ``memory:x`` written in turn ``m`` gives ``memory:x REFERENCED_BY memory:m``.
  One of those whose ``memory:``/``session:`` endpoint is not in the graph goes to the lazy-edge
  queue; any other edge with a missing endpoint is dropped, counted and logged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from pipelines.extract.model import identity_key
from pipelines.identity import CANDIDATE, Verdict
from pipelines.extract.reduce import Point, ReducedEdge, ReducedNode, ReducedReference, ReducedSession
from pipelines.vocabulary import DISCUSSED_IN, MENTIONED_IN, REFERENCED_BY
from store.graph import Edge, GraphStore, Node
from store.ids import row_kind
from store.merges import CandidatePair

log = structlog.get_logger(__name__)

# Candidate pairs kept for review per ambiguous node (the strongest ones; the rest are noise).
CANDIDATES_KEPT = 5


@dataclass(frozen=True, slots=True)
class Candidate:
    """A reduced node looking for an existing twin in the graph."""

    id: str
    type: str
    name: str
    aliases: tuple[str, ...] = ()


class MergeRecorder(Protocol):
    """Where identity decisions are recorded (:class:`store.merges.MergeStore`): a link of a
    candidate to a *different* existing node, undoably, and the ambiguous pairs left unmerged."""

    def record_link(
        self, merged: Node, merged_edges: Sequence[Edge], *, into_id: str, rule: str, score: float,
        evidence: Mapping[str, Any] | None = None,
    ) -> int: ...

    def record_candidates(self, pairs: Iterable[CandidatePair]) -> int: ...


class GraphIndex(Protocol):
    """What identity resolution needs from the graph (see :class:`store.semantic_index.SemanticIndex`)."""

    def find(self, label: str, *, ids: Sequence[str], names: Sequence[str]) -> list[Node]: ...


def match_existing(candidates: Sequence[Candidate], graph_index: GraphIndex) -> dict[str, str]:
    """Candidate id → id of the existing node it is (itself when its own id exists).

    A candidate matches an existing node of its type with the same id, the same normalised name,
    or an alias equal (case-insensitively) to the candidate's name or one of its aliases. Several
    matches: the smallest id wins (deterministic). Unmatched candidates are absent.
    """
    by_type: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        by_type.setdefault(candidate.type, []).append(candidate)
    mapping: dict[str, str] = {}
    for label, group in sorted(by_type.items()):
        names = sorted({n for c in group for n in (c.name, *c.aliases) if n})
        existing = graph_index.find(label, ids=[c.id for c in group], names=names)
        ids = {node.id for node in existing}
        for candidate in group:
            if candidate.id in ids:
                mapping[candidate.id] = candidate.id
                continue
            wanted = {n.casefold() for n in (candidate.name, *candidate.aliases) if n}
            key = identity_key(candidate.type, candidate.name)
            for node in existing:  # sorted by id
                aliases = node.properties.get("aliases")
                known = {a.casefold() for a in aliases if isinstance(a, str)} if isinstance(aliases, list) else set()
                if identity_key(node.label, node.name) == key or wanted & (known | {node.name.casefold()}):
                    mapping[candidate.id] = node.id
                    break
    return mapping


@dataclass(slots=True)
class CommitPlan:
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    lazy: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[Edge] = field(default_factory=list)
    linked_existing: int = 0


def plan_commit(
    reduced: ReducedSession,
    *,
    matches: Mapping[str, str],
    existing_nodes: Mapping[str, Node],
    existing_edges: Mapping[tuple[str, str, str], Edge],
) -> CommitPlan:
    """Every write of one session's commit (pure). ``existing_nodes`` holds whatever exists among
    the matched nodes, the session's memories and session, and the referenced rows."""
    plan = CommitPlan()
    session = reduced.anchor_id
    target_of = {node.id: matches.get(node.id, node.id) for node in reduced.nodes}
    plan.linked_existing = sum(1 for old, new in target_of.items() if old != new)
    written: set[str] = set()
    for node in reduced.nodes:
        merged = _merge_node(existing_nodes.get(target_of[node.id]), node, target_of[node.id], session)
        plan.nodes.append(merged)
        written.add(merged.id)
    present = set(existing_nodes) | written

    def place(edge: Edge) -> None:
        if edge.source in present and edge.target in present:
            plan.edges.append(edge)
        elif all(e in present or row_kind(e) is not None for e in (edge.source, edge.target)):
            plan.lazy.append(
                {"source": edge.source, "target": edge.target, "relationship": edge.relationship,
                 "weight": edge.weight, "properties": edge.properties}
            )
        else:
            plan.dropped.append(edge)

    for node in reduced.nodes:
        node_id = target_of[node.id]
        for edge in _provenance_edges(node_id, node.provenance, session):
            place(edge)
    for edge in reduced.edges:
        source, target = target_of.get(edge.source, edge.source), target_of.get(edge.target, edge.target)
        if source != target:
            place(_merge_edge(existing_edges.get((source, target, edge.relationship)), edge, source, target, session))
    for ref in reduced.references:
        place(
            Edge(
                ref.target, referrer(reduced, ref), REFERENCED_BY, float(len(ref.quotes)),
                {"sessionId": reduced.session_id, "chunk_ids": sorted(ref.chunk_ids), "evidence": sorted(ref.quotes)},
            )
        )
    return plan


def referrer(reduced: ReducedSession, ref: ReducedReference) -> str:
    """Who wrote a reference: the turn's memory, or the notes file (its paragraphs are no memories)."""
    return reduced.anchor or f"memory:{ref.memory_id}"


def linked_payloads(
    reduced: ReducedSession, matches: Mapping[str, str], existing_nodes: Mapping[str, Node]
) -> dict[str, tuple[Node, list[Edge]]]:
    """For every candidate linked to a *different* node: the node and the edges (provenance and
    semantic, in its own terms, other endpoints resolved as committed) this session would have
    written for it had it not been linked — what undoing the link restores (pure)."""
    payloads: dict[str, tuple[Node, list[Edge]]] = {}
    for merged_id in sorted(old for old, new in matches.items() if old != new):
        others = {k: v for k, v in matches.items() if k != merged_id}
        unlinked = plan_commit(reduced, matches=others, existing_nodes=existing_nodes, existing_edges={})
        lazy = [Edge(x["source"], x["target"], x["relationship"], x["weight"], x["properties"]) for x in unlinked.lazy]
        node = next(n for n in unlinked.nodes if n.id == merged_id)
        edges = [e for e in (*unlinked.edges, *lazy) if merged_id in (e.source, e.target)]
        payloads[merged_id] = (node, edges)
    return payloads


def needed_ids(reduced: ReducedSession, matches: Mapping[str, str]) -> set[str]:
    """Every node id :func:`plan_commit` needs to know about (existing or not)."""
    ids = {matches.get(n.id, n.id) for n in reduced.nodes} | {reduced.anchor_id}
    for node in reduced.nodes:
        ids.update(p.memory for p in node.provenance if p.memory)
    for ref in reduced.references:
        ids.update((ref.target, referrer(reduced, ref)))
    return ids


def _merge_node(existing: Node | None, node: ReducedNode, node_id: str, session: str) -> Node:
    old = existing.properties if existing is not None else {}
    description = old.get("description") if isinstance(old.get("description"), str) else ""
    # The longer one; between equally long ones the larger, so the result never depends on which
    # session committed first.
    description = max(description, node.description, key=lambda text: (len(text), text))
    properties = {
        **old,
        "description": description,
        "aliases": sorted(set(_strings(old.get("aliases"))) | set(node.aliases)),
        "tags": sorted(set(_strings(old.get("tags"))) | set(node.tags)),
        "confidence": max(node.confidence, _number(old.get("confidence"))),
        "provenance": _replace_session_points(old.get("provenance"), node.provenance, session),
    }
    if existing is not None:
        return Node(existing.id, existing.label, existing.name, properties)
    return Node(node_id, node.type, node.name, properties)


def _merge_edge(existing: Edge | None, edge: ReducedEdge, source: str, target: str, session: str) -> Edge:
    old = existing.properties if existing is not None else {}
    provenance = _replace_session_points(old.get("provenance"), edge.provenance, session)
    previous = old.get("justification") if isinstance(old.get("justification"), str) else ""
    justifications = {j for j in (*previous.split("; "), *edge.justification.split("; ")) if j}
    properties = {**old, "justification": "; ".join(sorted(justifications)), "provenance": provenance}
    return Edge(source, target, edge.relationship, float(_distinct_points(provenance)), properties)


def _provenance_edges(node_id: str, provenance: Iterable[Point], session: str) -> list[Edge]:
    by_memory: dict[str, list[Point]] = {}
    chunks: set[str] = set()
    own = [p for p in provenance if p.session == session]
    for point in own:
        chunks.add(point.chunk_id)
        if point.memory:
            by_memory.setdefault(point.memory, []).append(point)
    edges = [
        Edge(
            node_id, memory, MENTIONED_IN, float(len(found)),
            {"chunk_ids": sorted({p.chunk_id for p in found}), "evidence": sorted({p.evidence for p in found})},
        )
        for memory, found in sorted(by_memory.items())
    ]
    edges.append(Edge(node_id, session, DISCUSSED_IN, float(max(1, len(own))), {"chunk_ids": sorted(chunks)}))
    return edges


def _replace_session_points(old: Any, new: Iterable[Point], session: str) -> list[dict[str, Any]]:
    """Other sessions' points kept, this session's replaced by ``new``; sorted, unique."""
    kept = [dict(p) for p in old if isinstance(p, Mapping) and p.get("session") != session] if isinstance(old, list) else []
    merged = {_point_key(p): p for p in [*kept, *(p.as_dict() for p in new)]}
    return [merged[k] for k in sorted(merged)]


def _point_key(point: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return tuple(str(point.get(k) or "") for k in ("session", "memory", "chunk_id", "evidence"))  # type: ignore[return-value]


def _distinct_points(provenance: Sequence[Mapping[str, Any]]) -> int:
    """An edge's strength: the distinct places (session, turn or chunk) that asserted it."""
    return max(1, len({(p.get("session"), p.get("memory") or p.get("chunk_id")) for p in provenance}))


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


@dataclass(slots=True)
class CommitStats:
    """What one commit wrote (and what it queued, dropped or linked to the existing graph)."""

    nodes_written: int = 0
    edges_written: int = 0
    lazy_edges_queued: int = 0
    edges_dropped: int = 0
    linked_existing: int = 0
    merges_recorded: int = 0
    identity_candidates: int = 0

    def add(self, other: "CommitStats") -> None:
        """Add ``other``'s counts to these (a phase sums its sessions' commits)."""
        for name in CommitStats.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def candidate_pairs(verdicts: Iterable[Verdict], session_id: str) -> list[CandidatePair]:
    """The pairs of the ``candidate`` verdicts (created, not merged), strongest few per node."""
    return [
        CandidatePair(verdict.node_id, match.node_id, match.rule, match.score, match.form, session_id)
        for verdict in verdicts
        if verdict.action == CANDIDATE
        for match in verdict.candidates[:CANDIDATES_KEPT]
    ]


def commit_session(
    reduced: ReducedSession,
    *,
    graph: GraphStore,
    graph_index: GraphIndex,
    on_commit: Callable[[], None],
    queue_append: Callable[[list[dict[str, Any]]], int],
    matcher: Callable[[Sequence[Candidate], GraphIndex], Mapping[str, str]] = match_existing,
    merges: MergeRecorder | None = None,
) -> CommitStats:
    """Write ``reduced`` in one transaction; ``on_commit`` (the digest record, chunk-result
    pruning) runs inside it, and the lazy-queue lines are appended as its last step so a failed
    commit can at worst leave a line that the drain retries, never lose one. Blocking: call from
    a worker thread."""
    stats = CommitStats()
    with graph.db.transaction():
        candidates = [Candidate(n.id, n.type, n.name, n.aliases) for n in reduced.nodes]
        matches = matcher(candidates, graph_index)
        existing_nodes = graph.get_nodes(needed_ids(reduced, matches))
        existing_edges: dict[tuple[str, str, str], Edge] = {}
        for edge in reduced.edges:
            key = (matches.get(edge.source, edge.source), matches.get(edge.target, edge.target), edge.relationship)
            found = graph.get_edge(*key) if key[0] in existing_nodes and key[1] in existing_nodes else None
            if found is not None:
                existing_edges[key] = found
        plan = plan_commit(reduced, matches=matches, existing_nodes=existing_nodes, existing_edges=existing_edges)
        verdicts = getattr(matches, "verdicts", {})
        stats.identity_candidates = sum(1 for v in verdicts.values() if v.action == CANDIDATE)
        if merges is not None:
            # Recorded before the writes below: the record must see the target as it was.
            for merged_id, (node, edges) in linked_payloads(reduced, matches, existing_nodes).items():
                verdict = verdicts.get(merged_id)
                merges.record_link(
                    node, edges, into_id=matches[merged_id], rule=verdict.rule if verdict else "exact-key",
                    score=verdict.score if verdict else 1.0,
                    evidence={"session": reduced.session_id, "form": verdict.candidates[0].form if verdict and verdict.candidates else node.name},
                )
                stats.merges_recorded += 1
        stats.nodes_written = graph.upsert_nodes(plan.nodes)
        stats.edges_written = graph.link_nodes(plan.edges).linked
        if merges is not None and stats.identity_candidates:
            merges.record_candidates(candidate_pairs(verdicts.values(), reduced.session_id))
        stats.edges_dropped = len(plan.dropped)
        stats.linked_existing = plan.linked_existing
        on_commit()
        stats.lazy_edges_queued = queue_append(plan.lazy) if plan.lazy else 0
    for edge in plan.dropped[:20]:
        log.warning("edge dropped: endpoint missing", session_id=reduced.session_id, source=edge.source,
                    target=edge.target, relationship=edge.relationship)
    return stats
