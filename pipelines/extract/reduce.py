"""Reduce: a session's chunk extractions → one deduplicated extraction (pure, deterministic).

Chunks are read in order. Nodes are deduplicated by (TYPE, normalised name): the first occurrence
keeps its id and later ids remap to it; its facts combine with :func:`store.facts.combine_facts`
(the rule commit and merge use too), provenance to the union. Then the session's names that are
another of its nodes fold into it (:func:`pipelines.identity.session_folds`: a bare base name
beside the session's one full path of it, a METHOD beside the TEST of its name) — their points
and facts, not their spellings. Edges are remapped and keyed by (source, target, relationship).
Summaries are joined in chunk order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import Any

from pipelines.extract.model import ChunkExtraction, Evidence, identity_key
from pipelines.identity import QUOTES_PER_NODE, session_folds
from store.facts import NodeFacts, combine_facts


@dataclass(frozen=True, slots=True, order=True)
class Point:
    """One provenance point: where something was said (``memory``/``evidence`` empty when the
    extractor gave no grounded quote — then only the session and chunk are known)."""

    session: str
    memory: str
    chunk_id: str
    evidence: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "memory": self.memory or None,
            "chunk_id": self.chunk_id,
            "evidence": self.evidence or None,
        }


POINT_ORDER: Callable[[Point], tuple[str, ...]] = attrgetter(*(f.name for f in fields(Point)))
""":class:`Point`'s order (``order=True``'s) as a sort key read in C: the same order, without the
generated ``__lt__`` that builds two tuples in Python per comparison (a big session sorts millions)."""


@dataclass(frozen=True, slots=True)
class ReducedNode:
    id: str
    type: str
    name: str
    description: str
    aliases: tuple[str, ...]
    confidence: float
    tags: tuple[str, ...]
    provenance: tuple[Point, ...]


@dataclass(frozen=True, slots=True)
class ReducedEdge:
    source: str
    target: str
    relationship: str
    justification: str
    provenance: tuple[Point, ...]
    # Per point of ``provenance``, the justification of the chunk extractions that gave it
    # ("; "-joined): what an edge point keeps of its source, so a forget takes it back. Empty: every
    # point carries ``justification``.
    reasons: tuple[tuple[Point, str], ...] = ()

    def reason(self, point: Point) -> str:
        """The justification ``point`` came with."""
        return dict(self.reasons).get(point, self.justification) if self.reasons else self.justification


@dataclass(frozen=True, slots=True)
class ReducedReference:
    """``target`` (a ``memory:``/``session:`` id) is referenced by the turn ``memory_id``."""

    target: str
    memory_id: str
    quotes: tuple[str, ...]
    chunk_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReducedSession:
    session_id: str
    summary: str
    nodes: tuple[ReducedNode, ...]
    edges: tuple[ReducedEdge, ...]
    references: tuple[ReducedReference, ...]
    remapped: dict[str, str] = field(default_factory=dict)
    ungrounded: int = 0
    invalid_turn_refs: int = 0
    dropped_items: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    # The provenance anchor when it is not ``session:<session_id>`` (an imported notes file,
    # ``note:<hash>``): then points carry no memory and the anchor in their ``session`` field.
    anchor: str = ""

    @property
    def anchor_id(self) -> str:
        """The node the session's provenance points at: its SESSION node, or the notes file."""
        return self.anchor or f"session:{self.session_id}"


def points(session_id: str, chunk_id: str, evidence: Iterable[Evidence], *, anchor: str = "") -> list[Point]:
    """Provenance points of grounded evidence, or one chunk-level point when there is none. With an
    ``anchor`` (a notes file) the points name it and no memory (a file has no turns)."""
    if anchor:
        return [Point(anchor, "", chunk_id, e.quote) for e in evidence] or [Point(anchor, "", chunk_id, "")]
    found = [Point(f"session:{session_id}", f"memory:{e.memory_id}", chunk_id, e.quote) for e in evidence]
    return found or [Point(f"session:{session_id}", "", chunk_id, "")]


def said_texts(reduced: ReducedSession, turns: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """By node id, where the session says each of its nodes (pure): the texts of the first
    :data:`~pipelines.identity.QUOTES_PER_NODE` turns its points cite (``turns``: the session's
    turn texts by ``memory:`` id, in turn order), else the evidence of its points (a notes file's
    have no turn) — what the identity auditor is shown of an incoming node."""
    order = {memory: position for position, memory in enumerate(turns)}
    found: dict[str, tuple[str, ...]] = {}
    for node in reduced.nodes:
        cited = sorted({p.memory for p in node.provenance if p.memory in order}, key=order.__getitem__)[:QUOTES_PER_NODE]
        texts = [turns[memory] for memory in cited] or [p.evidence for p in node.provenance if p.evidence][:QUOTES_PER_NODE]
        found[node.id] = tuple(texts)
    return found


def reduce_session(session_id: str, extractions: Sequence[ChunkExtraction], *, anchor: str = "") -> ReducedSession:
    """Merge the extractions of a session's chunks (given in chunk order) into one; ``anchor``:
    see :attr:`ReducedSession.anchor`."""
    first_id: dict[tuple[str, str], str] = {}
    remap: dict[str, str] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for extraction in extractions:
        for node in extraction.nodes:
            key = identity_key(node.type, node.name)
            keeper = first_id.setdefault(key, node.id)
            if node.id != keeper:
                remap[node.id] = keeper
            new_points = points(session_id, extraction.unit_id, node.evidence, anchor=anchor)
            facts = NodeFacts.of(description=node.description, aliases=node.aliases, tags=node.tags, confidence=node.confidence)
            merged = nodes.setdefault(keeper, {"type": node.type, "name": node.name, "facts": facts, "provenance": set()})
            merged["facts"] = combine_facts(merged["facts"], facts)
            merged["provenance"].update(new_points)
    folds = session_folds((node_id, n["type"], n["name"]) for node_id, n in nodes.items())
    for node_id, into in sorted(folds.items()):
        folded, kept = nodes.pop(node_id), nodes[into]
        # Not its spellings: `options.py` as an alias of one repository's full path would link the
        # bare name of every later session to it (and bridge two full paths that both carry it).
        kept["facts"] = combine_facts(kept["facts"], replace(folded["facts"], aliases=()))
        kept["provenance"].update(folded["provenance"])
    remap = {node_id: folds.get(keeper, keeper) for node_id, keeper in remap.items()} | folds
    edges: dict[tuple[str, str, str], dict[str, Any]] = {}
    for extraction in extractions:
        for edge in extraction.edges:
            source, target = remap.get(edge.source, edge.source), remap.get(edge.target, edge.target)
            if source == target:
                continue
            key = (source, target, edge.relationship)
            merged = edges.setdefault(key, {"justifications": [], "provenance": set(), "reasons": {}})
            if edge.justification and edge.justification not in merged["justifications"]:
                merged["justifications"].append(edge.justification)
            found = points(session_id, extraction.unit_id, edge.evidence, anchor=anchor)
            merged["provenance"].update(found)
            for point in found:
                merged["reasons"].setdefault(point, set()).update({edge.justification} - {""})
    references: dict[tuple[str, str], dict[str, list[str]]] = {}
    for extraction in extractions:
        for ref in extraction.references:
            merged = references.setdefault((ref.target, ref.memory_id), {"quotes": [], "chunks": []})
            for bucket, value in (("quotes", ref.quote), ("chunks", extraction.unit_id)):
                if value not in merged[bucket]:
                    merged[bucket].append(value)
    return ReducedSession(
        session_id=session_id,
        summary="\n".join(e.summary for e in extractions if e.summary),
        nodes=tuple(
            ReducedNode(
                node_id, n["type"], n["name"], n["facts"].description, n["facts"].aliases, n["facts"].confidence,
                n["facts"].tags, _clean_points(n["provenance"]),
            )
            for node_id, n in sorted(nodes.items())
        ),
        edges=tuple(_reduced_edge(key, e) for key, e in sorted(edges.items())),
        references=tuple(
            ReducedReference(target, memory_id, tuple(r["quotes"]), tuple(r["chunks"]))
            for (target, memory_id), r in sorted(references.items())
        ),
        remapped=dict(sorted(remap.items())),
        ungrounded=sum(len(e.ungrounded) for e in extractions),
        invalid_turn_refs=sum(e.invalid_turn_refs for e in extractions),
        dropped_items=sum(e.dropped_items for e in extractions),
        anchor=anchor,
        rejected=_count_reasons(r for e in extractions for r in e.rejected),
    )


def _count_reasons(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason, count in pairs:
        counts[reason] = counts.get(reason, 0) + count
    return dict(sorted(counts.items()))


def _reduced_edge(key: tuple[str, str, str], merged: dict[str, Any]) -> ReducedEdge:
    """One session edge from its chunk edges: a chunk-level point :func:`_clean_points` drops (its
    chunk also gave a grounded point) hands its justification to the chunk's kept points."""
    kept = _clean_points(merged["provenance"])
    reasons: dict[Point, set[str]] = {p: set(merged["reasons"].get(p, ())) for p in kept}
    for point, said in merged["reasons"].items():
        if point not in reasons:
            for other in kept:
                if other.chunk_id == point.chunk_id:
                    reasons[other].update(said)
    return ReducedEdge(
        *key, "; ".join(merged["justifications"]), kept, tuple((p, "; ".join(sorted(reasons[p]))) for p in kept),
    )


def _clean_points(found: set[Point]) -> tuple[Point, ...]:
    """Sorted points; a chunk-level point is dropped when the chunk also gave a grounded one."""
    grounded_chunks = {p.chunk_id for p in found if p.memory}
    return tuple(sorted((p for p in found if p.memory or p.chunk_id not in grounded_chunks), key=POINT_ORDER))
