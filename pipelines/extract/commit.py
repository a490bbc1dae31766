"""Commit: a reduced session → graph writes, in one transaction with the session's digest record.

A commit costs what its session costs, whatever the graph's history (DESIGN §3):

- Identity against the existing graph (:func:`match_existing` or the resolver): a node whose
  (type, normalised name) or alias already exists links to that node. The linked group keeps the
  **least id** (:func:`pipelines.identity.survivors`): an existing node whose id comes after an incoming one is folded
  into it, and a node that links several existing nodes by a spelling rule joins them
  (:func:`pipelines.identity.bridges`), so the result does not depend on which session committed first.
- The session's *anchor* (``session:<id>`` or ``note:<hash>``) owns rows: the provenance points of
  the nodes and edges it yielded (``node_points``/``edge_points``) and what it said of each node
  (``node_claims``). A commit **replaces this anchor's rows**: re-running a session changes
  nothing, and a node or edge a re-extraction no longer yields loses this anchor's points.
- A node's facts are the combination (:func:`store.facts.combine_facts`) of its claims; a new claim
  that only adds is combined with the node's current facts (no other claim is read), one that takes
  something back asks the node's other claims only about what the old claim may have been alone
  to say (:func:`store.facts.without_claim`), never reading them all for a popular node.
  Its name is the least spelling its claims used (:func:`store.facts.least_name`), kept per claim
  (``node_claims.name``).
- Weights are derived from points, recomputed only for what this anchor touched: a semantic edge's
  weight is its distinct places (an anchor's turns, or chunks without a turn) — the change is this
  anchor's old places out, its new places in; provenance edges (node → ``memory:`` ``MENTIONED_IN``,
  node → anchor ``DISCUSSED_IN``) are rebuilt from this anchor's points only. An explicit
  reference ``memory:x`` written in turn ``m`` gives ``memory:x REFERENCED_BY memory:m``.
- A semantic edge left with no points is deleted; a node left with no points is removed with its
  edges (nothing supports it any more).
- A provenance edge whose ``memory:``/``session:`` endpoint is not in the graph goes to the lazy-edge
  queue; any other edge with a missing endpoint is dropped, counted and logged.
- A node ``rem-cycle forget --node`` keeps out — its name or an alias folds to a suppressed key of
  its type, or of a type the ``named`` rule makes it one thing with (:func:`kept_out`) — is left
  out first, with the edges touching it, before identity resolution sees it, so no merge or alias
  brings it back (counted ``suppressed``).

:func:`plan_commit` is pure: given the reduced session, the matches, the anchor's old rows and the
current state of what they touch, it decides every write. :func:`commit_session` does the I/O.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pipelines.extract.model import identity_key, ids_before_cut, semantic_node_id, suppression_names
from pipelines.hubs import Checked
from pipelines.identity import CANDIDATE, CANDIDATES_KEPT, LINK, NAMED_RULE, Verdict, batch_groups, folded_concepts, named_alike
from pipelines.resolver import CandidateLike
from pipelines.ports import Graph, MergeRecorder, Provenance, Suppressions, UnitOfWork
from pipelines.extract.reduce import POINT_ORDER, Point, ReducedReference, ReducedSession
from pipelines.vocabulary import DISCUSSED_IN, MENTIONED_IN, REFERENCED_BY
from store.facts import NodeFacts, combine_all, combine_facts, facts_of, least_name, with_facts, without_claim
from store.graph import Edge, Node
from store.ids import row_kind
from store.library_log import get_logger
from store.merges import CandidatePair
from store.provenance import (
    AnchorRows,
    ClaimRow,
    EdgeKey,
    EdgePointRow,
    NodePointRow,
    POINT_ROW_ORDER,
    PointRow,
    anchor_edges,
    first_claim,
    justification_of,
    justification_parts,
    justification_text,
    place_count,
)

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A reduced node looking for an existing twin in the graph."""

    id: str
    type: str
    name: str
    aliases: tuple[str, ...] = ()


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


def before_cut(
    candidates: Sequence[Candidate], graph: Graph, *, blocked: Callable[[], Container[tuple[str, str]]],
) -> dict[str, list[str]]:
    """Candidate id → the existing nodes of its type under an id its names made before audit28
    cut semantic ids to ``MAX_SEMANTIC_ID_BYTES`` bytes (:func:`pipelines.extract.model.ids_before_cut`):
    they are the candidate (its exact id, as the graph stored it), whatever identity resolution
    finds by name — the commit joins them to it, and its least id, the cut one, survives. Several
    such ids share one cut form when names differed past it. A pair whose merge an operator
    undid (``blocked``: (merged, into) pairs, read only when such a node exists) stays apart. No
    look-up when no candidate's id was cut (never under the default types)."""
    wanted = {
        old: candidate for candidate in candidates
        for old in ids_before_cut(candidate.type, candidate.id, (candidate.name, *candidate.aliases))
    }
    found = sorted(old for old, node in graph.get_nodes(wanted).items() if node.label == wanted[old].type) if wanted else []
    kept_apart = blocked() if found else frozenset()
    joins: dict[str, list[str]] = {}
    for old in found:
        new = wanted[old].id
        if (old, new) not in kept_apart and (new, old) not in kept_apart:
            joins.setdefault(new, []).append(old)
    return joins


def kept_out(
    wanted: Mapping[str, tuple[str, Mapping[str, str]]], suppressions: Suppressions, graph: Graph, *, gaining: bool = False,
    known_before: Collection[tuple[str, str]] = frozenset(),
) -> dict[str, tuple[str, str]]:
    """Of ``wanted`` (a node's id → its type and the keys it has or would take, each with its
    spelling: :func:`pipelines.extract.model.suppression_names`), the nodes ``forget --node`` keeps
    out, each with the suppressed ``(type, key)`` that keeps it out: a key suppressed under the
    node's own type; or a name the ``named`` rule makes one thing across types
    (:func:`pipelines.identity.named_alike`: `Jane Doe` kept out of PERSON keeps the CONCEPT `Jane
    Doe` out, which that rule would have merged into the person) — unless a node of the node's own
    type is known by that name (its id, :func:`pipelines.extract.model.semantic_node_id`, or an
    alias of that key), which the forget left or an operator kept: another thing. ``gaining``: the nodes of
    ``wanted`` are in the graph and have just taken these keys (a hand edit), so their own holding
    does not count, but a name another node of the same type held before the edit does
    (``known_before``: its ``(type, key)`` pairs; the edit moved the name within the type, as
    merging a CONCEPT into another CONCEPT does). One look-up of these keys
    (:meth:`store.suppressions.SuppressionStore.suppressed`, whatever was ever forgotten); the
    graph is read only for such a cross-type hit. The one rule of
    every path: an extraction commit (:func:`suppressed_ids`), the commit's split of a short name
    (:func:`commit_session`), and an edit by hand (:func:`pipelines.forget.refusing_kept_out`)."""
    own = {node_id: {(kind, key) for key in keys} for node_id, (kind, keys) in wanted.items()}
    alike = {node_id: {(other, key) for key in keys for other in named_alike(kind, key)} for node_id, (kind, keys) in wanted.items()}
    found = suppressions.suppressed(set().union(*own.values(), *alike.values())) if wanted else set()
    if not found:
        return {}
    held = {node_id: min(pairs & found) for node_id, pairs in own.items() if pairs & found}
    crossed = {node_id: sorted(pairs & found) for node_id, pairs in alike.items() if node_id not in held and pairs & found}
    if crossed:
        # Each cross-type hit's name under the node's own type, and the nodes of that type known by it.
        asked = {(wanted[node_id][0], key) for node_id, pairs in crossed.items() for _, key in pairs}
        by_id = {
            found_id: (wanted[node_id][0], key) for node_id, pairs in crossed.items() for _, key in pairs
            if (found_id := semantic_node_id(wanted[node_id][0], wanted[node_id][1][key]))
        }
        holders: dict[tuple[str, str], set[str]] = {}
        for node_id in graph.existing_ids(by_id) if by_id else ():
            holders.setdefault(by_id[node_id], set()).add(node_id)
        # An alias is compared by the key a name is kept out by (``Jane-Doe`` is the CONCEPT ``jane
        # doe``), read from the alias index by the key's words, which such an alias holds in order.
        for node_id, label, alias in graph.aliases_with_words({(kind, tuple(key.split(" "))) for kind, key in asked}):
            for key in suppression_names(label, (alias,)).keys() & {key for kind, key in asked if kind == label}:
                holders.setdefault((label, key), set()).add(node_id)
        for node_id, pairs in crossed.items():
            itself = {node_id} if gaining else set()
            kind = wanted[node_id][0]
            # Each name on its own: one the type still knows does not let in another it does not.
            unheld = [(other, key) for other, key in pairs
                      if not holders.get((kind, key), set()) - itself and (kind, key) not in known_before]
            if unheld:
                held[node_id] = unheld[0]
    return held


def suppressed_ids(nodes: Iterable[CandidateLike], suppressions: Suppressions, graph: Graph) -> set[str]:
    """The ids of ``nodes`` (an extraction's candidates) that ``forget --node`` keeps out
    (:func:`kept_out` of the keys of their names and aliases). The commit (:func:`drop_suppressed`)
    and the resolver's model questions (:meth:`pipelines.resolver.GraphResolver.prepare`) both ask
    it, so no question is paid for about a node the commit drops."""
    return set(kept_out({node.id: (node.type, suppression_names(node.type, (node.name, *node.aliases))) for node in nodes},
                        suppressions, graph))


def drop_suppressed(reduced: ReducedSession, suppressions: Suppressions, graph: Graph) -> tuple[ReducedSession, int]:
    """``reduced`` without the nodes ``forget --node`` keeps out (:func:`suppressed_ids`) nor the
    edges touching them; and how many nodes went."""
    gone = suppressed_ids(reduced.nodes, suppressions, graph)
    if not gone:
        return reduced, 0
    return replace(
        reduced, nodes=tuple(n for n in reduced.nodes if n.id not in gone),
        edges=tuple(e for e in reduced.edges if e.source not in gone and e.target not in gone),
    ), len(gone)


@dataclass(frozen=True, slots=True)
class CommitState:
    """What :func:`plan_commit` needs to know of the graph: ``nodes`` — whatever exists among the
    matched nodes, the session's memories and anchor, the referenced rows and the nodes the anchor's
    old rows touch; ``edges`` — the existing edges among the semantic edge keys the anchor touches
    (old and new); ``edge_places`` — each such edge's distinct places before this commit;
    ``claimed`` — the existing nodes that have at least one claim; ``edge_texts`` — for each such
    edge, the least texts the other anchors' points carry
    (:meth:`store.provenance.ProvenanceStore.edge_texts`)."""

    nodes: Mapping[str, Node]
    edges: Mapping[EdgeKey, Edge] = field(default_factory=dict)
    edge_places: Mapping[EdgeKey, int] = field(default_factory=dict)
    claimed: frozenset[str] = frozenset()
    edge_texts: Mapping[EdgeKey, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TakeBack:
    """What an anchor said of a node before (``withdrawn``, ``withdrawn_names``) and says now."""

    withdrawn: NodeFacts
    said: NodeFacts
    withdrawn_names: frozenset[str] = frozenset()
    said_names: tuple[str, ...] = ()



def recombine_node(node_id: str, take_back: TakeBack, *, graph: Graph, provenance: Provenance) -> int:
    """Rewrite ``node_id``'s facts and name once an anchor's claim on it changed from
    ``take_back.withdrawn`` to ``take_back.said`` (the claim rows already rewritten): the node's
    facts combined all its claims, the old one included, so only what that claim may have been
    alone to say is looked up in the others (:func:`store.facts.without_claim`). Returns the
    nodes written (0 when the node is gone)."""
    node = graph.get_node(node_id)
    if node is None:
        return 0
    lookup = provenance.claim_lookup(node_id)
    facts = combine_facts(without_claim(facts_of(node.properties), take_back.withdrawn, lookup), take_back.said)
    name = node.name
    if name in take_back.withdrawn_names and not lookup.says_name(name):
        name = least_name(lookup.names(), node_id=node_id) or name
    name = least_name([name, *take_back.said_names], node_id=node_id) or name
    return graph.upsert_nodes([Node(node.id, node.label, name, with_facts(node.properties, facts))])


@dataclass(slots=True)
class CommitPlan:
    nodes: list[Node] = field(default_factory=list)
    claims: list[ClaimRow] = field(default_factory=list)
    node_points: list[NodePointRow] = field(default_factory=list)
    edge_points: list[EdgePointRow] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    removed_edges: list[EdgeKey] = field(default_factory=list)
    lazy: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[Edge] = field(default_factory=list)
    # Nodes whose facts or name lose something this anchor took back (for store.facts.without_claim),
    # and nodes that lost this anchor's points (removed if nothing else supports them).
    recombine: dict[str, TakeBack] = field(default_factory=dict)
    orphans: set[str] = field(default_factory=set)
    linked_existing: int = 0
    # The nodes that exist once ``nodes`` are written (those read, and those written): every
    # endpoint of ``edges`` is one — an edge to any other is queued or dropped.
    present: set[str] = field(default_factory=set)


def plan_commit(
    reduced: ReducedSession,
    *,
    matches: Mapping[str, str],
    state: CommitState,
    old: AnchorRows = AnchorRows([], [], []),
    merge_of: Mapping[str, int] = {},
    observed_at: Mapping[str, str] = {},
) -> CommitPlan:
    """Every write of one session's commit (pure): this anchor's new rows replacing ``old``, the
    nodes whose facts change, the edges whose weight changes. ``merge_of``: candidate id → the merge
    record of its link to another node; ``observed_at``: memory or chunk id → the turn's time."""
    plan = CommitPlan()
    anchor = reduced.anchor_id
    target_of = {node.id: matches.get(node.id, node.id) for node in reduced.nodes}
    plan.linked_existing = sum(1 for old_id, new_id in target_of.items() if old_id != new_id)

    # A point without a turn (a notes file's: its time is the import's) that this anchor already
    # had — the same node or edge, the same quote — keeps the time it was first observed, so that
    # re-importing an edited file does not move what the file said before to now (``--as-of``).
    earlier: dict[tuple[object, str], str] = {}
    for owner, old_point in [*((r.node_id, r.point) for r in old.node_points), *((r.key, r.point) for r in old.edge_points)]:
        if not old_point.memory and old_point.observed_at:
            at = (owner, old_point.evidence)
            earlier[at] = min(earlier.get(at, old_point.observed_at), old_point.observed_at)

    def row(point: Point, owner: object) -> PointRow:
        time = observed_at.get(point.memory) or observed_at.get(point.chunk_id)
        if not point.memory:
            time = earlier.get((owner, point.evidence), time)
        return PointRow(anchor, point.memory, point.chunk_id, point.evidence, time)

    # --- nodes: claims, points, facts
    new_claims: dict[str, list[NodeFacts]] = {}
    spellings: dict[str, list[str]] = {}
    for node in reduced.nodes:
        target = target_of[node.id]
        facts = NodeFacts.of(description=node.description, aliases=node.aliases, tags=node.tags, confidence=node.confidence)
        plan.claims.append(ClaimRow(target, anchor, node.id, facts, merge_of.get(node.id), node.name))
        new_claims.setdefault(target, []).append(facts)
        spellings.setdefault(target, []).append(node.name)
        plan.node_points.extend(
            NodePointRow(target, point, node.id, merge_of.get(node.id)) for point in sorted({row(p, target) for p in node.provenance}, key=POINT_ROW_ORDER)
        )
    labels = {target_of[node.id]: node.type for node in reduced.nodes}
    old_claims: dict[str, list[NodeFacts]] = {}
    old_names: dict[str, set[str]] = {}
    for claim in old.claims:
        old_claims.setdefault(claim.node_id, []).append(claim.facts)
        if claim.name:
            old_names.setdefault(claim.node_id, set()).add(claim.name)
    for target, claims in sorted(new_claims.items()):
        mine = combine_all(claims)
        existing = state.nodes.get(target)
        if existing is None:
            plan.nodes.append(Node(target, labels[target], least_name(spellings[target], node_id=target) or target, with_facts({}, mine)))
            continue
        current = facts_of(existing.properties)
        if target not in state.claimed:
            # Written by hand or before claims existed: what it says now, and its name, is its first claim.
            first = first_claim(existing)
            plan.claims.append(first)
            current = first.facts
        withdrawn = combine_all(old_claims.get(target, ()))
        withdrawn_names = old_names.get(target, set())
        if combine_facts(mine, withdrawn) == mine and set(spellings[target]) >= withdrawn_names:
            facts = combine_facts(current, mine)
            name = least_name([existing.name, *spellings[target]], node_id=target) or existing.name
            plan.nodes.append(Node(existing.id, existing.label, name, with_facts(existing.properties, facts)))
        else:
            plan.recombine[target] = TakeBack(withdrawn, mine, frozenset(withdrawn_names), tuple(spellings[target]))
    for node_id in sorted(set(old_claims) - set(new_claims)):
        if node_id in state.nodes:
            plan.recombine[node_id] = TakeBack(combine_all(old_claims[node_id]), NodeFacts(), frozenset(old_names.get(node_id, ())))

    # --- provenance edges of every node this anchor touches, old or new
    present = plan.present = set(state.nodes) | {n.id for n in plan.nodes}
    new_points: dict[str, set[PointRow]] = {}
    for point_row in plan.node_points:
        new_points.setdefault(point_row.node_id, set()).add(point_row.point)
    old_memories: dict[str, set[str]] = {}
    for point_row in old.node_points:
        old_memories.setdefault(point_row.node_id, set()).add(point_row.point.memory)
    plan.orphans = {n for n in old_memories if n not in new_points and n in state.nodes}

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

    for node_id in sorted(set(new_points) | set(old_memories)):
        for edge in anchor_edges(node_id, anchor, new_points.get(node_id, ())):
            place(edge)
        if node_id in state.nodes and node_id in old_memories:
            kept = {p.memory for p in new_points.get(node_id, ())}
            plan.removed_edges.extend((node_id, m, MENTIONED_IN) for m in sorted(old_memories[node_id] - kept) if m)
            if node_id not in new_points:
                plan.removed_edges.append((node_id, anchor, DISCUSSED_IN))

    # --- semantic edges: this anchor's places out, its new places in
    new_edge_points: dict[EdgeKey, list[EdgePointRow]] = {}
    for edge in reduced.edges:
        key = (target_of.get(edge.source, edge.source), target_of.get(edge.target, edge.target), edge.relationship)
        if key[0] == key[1]:
            continue
        merge_id = merge_of.get(edge.source) or merge_of.get(edge.target)
        new_edge_points.setdefault(key, []).extend(
            EdgePointRow(key, row(p, key), edge.source, edge.target, merge_id, edge.reason(p)) for p in sorted(set(edge.provenance), key=POINT_ORDER)
        )
    old_edge_points: dict[EdgeKey, list[PointRow]] = {}
    for edge_row in old.edge_points:
        old_edge_points.setdefault(edge_row.key, []).append(edge_row.point)
    for key in sorted(set(new_edge_points) | set(old_edge_points)):
        existing_edge = state.edges.get(key)
        places = state.edge_places.get(key, 0) - place_count(old_edge_points.get(key, ())) + place_count(
            r.point for r in new_edge_points.get(key, ())
        )
        props = dict(existing_edge.properties) if existing_edge is not None else {}
        # The edge's justification is its live sources' (store.provenance.justification_of): the
        # other anchors' least texts and this anchor's new ones — its old text goes with its old
        # points. Text no point carries (written before schema 15, or by a lazy edge's producer)
        # stays only while no anchor's points for the edge are replaced.
        others = state.edge_texts.get(key, ())
        parts = justification_of([*others, *(r.justification for r in new_edge_points.get(key, ()))])
        if key not in old_edge_points:
            parts |= justification_parts(props.get("justification")) - justification_of(others)
        props["justification"] = justification_text(parts)
        if key not in new_edge_points:
            if existing_edge is None:
                continue
            if places <= 0:
                plan.removed_edges.append(key)
            else:
                plan.edges.append(Edge(*key, float(places), props))
            continue
        edge = Edge(*key, float(max(1, places)), props)
        if key[0] in present and key[1] in present:
            plan.edges.append(edge)
            plan.edge_points.extend(new_edge_points[key])
        else:
            plan.dropped.append(edge)
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


def needed_ids(reduced: ReducedSession, matches: Mapping[str, str]) -> set[str]:
    """Every node id :func:`plan_commit` needs to know about (existing or not), besides the nodes
    the anchor's old rows touch."""
    ids = {matches.get(n.id, n.id) for n in reduced.nodes} | {reduced.anchor_id}
    for node in reduced.nodes:
        ids.update(p.memory for p in node.provenance if p.memory)
    for ref in reduced.references:
        ids.update((ref.target, referrer(reduced, ref)))
    return ids


def edge_keys(reduced: ReducedSession, matches: Mapping[str, str], old: AnchorRows) -> set[EdgeKey]:
    """The semantic edge keys a commit touches: those it yields and those the anchor had."""
    keys = {r.key for r in old.edge_points}
    for edge in reduced.edges:
        key = (matches.get(edge.source, edge.source), matches.get(edge.target, edge.target), edge.relationship)
        if key[0] != key[1]:
            keys.add(key)
    return keys


_pauses = 0
_pauses_lock = threading.Lock()
_resume_collector = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector paused, process-wide: it runs again
    when the last of the blocks running at once (in any thread) ends, if it ran before the first.

    Why: a commit builds objects by the hundred thousand for a big session (its provenance
    edges, their properties, the point rows) that all live until it ends, and each time they grow
    the heap by a quarter the collector walks the whole heap for cycles they never form — a third
    to a half of a 20,000-turn commit's CPU (bench/RESULTS.md, "The extraction commit's
    collector"). Reference counting frees them as before; a cycle something else makes meanwhile
    waits for the next collection."""
    global _pauses, _resume_collector
    with _pauses_lock:
        if _pauses == 0:
            _resume_collector = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0 and _resume_collector:
                gc.enable()


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
    edges_removed: int = 0
    nodes_removed: int = 0
    nodes_folded: int = 0
    names_split: int = 0
    # Nodes left out because ``forget --node`` keeps them out (:func:`drop_suppressed`).
    suppressed: int = 0
    # Short names a namesake split would have brought back under a name ``forget --node`` keeps
    # out: left on the node holding them (:func:`pipelines.hubs.check`'s splits, ``kept_out``).
    splits_kept_out: int = 0

    def add(self, other: "CommitStats") -> None:
        """Add ``other``'s counts to these (a phase sums its sessions' commits)."""
        for name in CommitStats.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def candidate_pairs(verdicts: Iterable[Verdict], session_id: str) -> list[CandidatePair]:
    """The pairs of the ``candidate`` verdicts (created, not merged), strongest few per node — never
    a CONCEPT the node folds into itself (:func:`pipelines.identity.folded_concepts`: joined, not a
    question)."""
    return [
        CandidatePair(verdict.node_id, match.node_id, match.rule, match.score, match.form, session_id)
        for verdict in verdicts
        if verdict.action == CANDIDATE
        for match in [m for m in verdict.candidates if m.node_id not in folded_concepts(verdict)][:CANDIDATES_KEPT]
    ]


# As a decorator, so that the commit's objects are freed (its frame gone) before the collector runs
# again, not walked by it once more.
@collector_paused()
def commit_session(
    reduced: ReducedSession,
    *,
    unit: UnitOfWork,
    graph_index: GraphIndex,
    on_commit: Callable[[], None],
    queue_append: Callable[[list[dict[str, Any]]], int],
    matcher: Callable[[Sequence[Candidate], GraphIndex], Mapping[str, str]] = match_existing,
    merges: MergeRecorder | None = None,
    observed_at: Mapping[str, str] = {},
    on_begin: Callable[[], None] | None = None,
    prune_saved_edges: bool = True,
) -> CommitStats:
    """Write ``reduced`` in one transaction of ``unit``, replacing its anchor's earlier rows; ``on_commit`` (the
    digest record, chunk-result pruning) runs inside it, and the lazy-queue lines are appended as
    its last step so a failed commit can at worst leave a line that the drain retries, never lose
    one. ``on_begin`` runs first in the transaction, before anything is read (the commit-order lock
    of several workers, ``RunStateStore.begin_commit``). ``observed_at``: memory or chunk id → the
    turn's time. ``prune_saved_edges``: take the edges to a node it removes out of the merge
    records near it (a forget does that itself, with the rest of what it removes). Blocking: call
    from a worker thread."""
    stats = CommitStats()
    graph, provenance = unit.graph, unit.provenance
    with unit.transaction():
        if on_begin is not None:
            on_begin()
        reduced, stats.suppressed = drop_suppressed(reduced, unit.suppressions, graph)
        candidates = [Candidate(n.id, n.type, n.name, n.aliases) for n in reduced.nodes]
        resolved = matcher(candidates, graph_index)
        verdicts = dict(getattr(resolved, "verdicts", {}))
        checked: Checked | None = getattr(resolved, "hubs", None)
        matches = dict(resolved)
        incoming = {n.id for n in reduced.nodes}
        folded: dict[str, str] = {}
        pairs: list[CandidatePair] = []
        bridged: dict[str, Verdict] = {}
        if merges is not None:
            # Order-independent groups: a node that links several existing nodes joins them, and a
            # target whose id comes after an incoming one is folded into it below — as if the
            # names had been committed in any other order.
            bridged, moved = batch_groups(incoming, matches, verdicts.values(), shorts=checked.shorts if checked is not None else frozenset(),
                                          joins=before_cut(candidates, graph, blocked=merges.blocked_pairs))
            verdicts.update(bridged)
            folded = {target: least for target, least in moved.items() if target not in incoming}
            matches = {node_id: moved.get(node_id, node_id) for node_id in incoming if moved.get(node_id, node_id) != node_id or node_id in matches}
            # A short name that stopped naming one thing leaves the node it joined (pipelines.hubs):
            # before anything is read, so this commit plans against the split graph. Not when it
            # would come back as a node of a name forget --node keeps out (forgotten, by the id of
            # another node known by it, while the link stood): it stays on the node holding it.
            splits = checked.splits if checked is not None else ()
            labels = {split.merged_id: split.merged_id.partition(":")[0] for split in splits}
            staying = kept_out({split.merged_id: (labels[split.merged_id], suppression_names(labels[split.merged_id], (split.short,)))
                                for split in splits}, unit.suppressions, graph)
            for split in splits:
                if split.merged_id in staying:
                    stats.splits_kept_out += 1
                    continue
                undone = merges.split(split.merged_id, rules=split.rules, evidence={
                    "session": reduced.session_id, "short": split.short, "ambiguous_with": split.ambiguous_with})
                if undone:
                    stats.names_split += undone
                    pairs.append(CandidatePair(split.merged_id, split.into_id, f"ambiguous-{split.rule}", 0.9, split.short, reduced.session_id))
        old = provenance.anchor_rows(reduced.anchor_id)
        touched = {r.node_id for r in old.node_points} | {c.node_id for c in old.claims}
        nodes = graph.get_nodes(needed_ids(reduced, matches) | touched)
        keys = sorted(edge_keys(reduced, matches, old))
        found = graph.get_edges(key for key in keys if key[0] in nodes and key[1] in nodes)
        edges = {key: found[key] for key in keys if key in found}
        places = {key: _places(edge, provenance) for key, edge in edges.items()}
        state = CommitState(nodes, edges, places, frozenset(provenance.with_claims(set(nodes) & (touched | set(matches.values()) | {n.id for n in reduced.nodes}))),
                            edge_texts=provenance.edge_texts(sorted(edges), besides=reduced.anchor_id))
        stats.identity_candidates = sum(1 for v in verdicts.values() if v.action == CANDIDATE)
        merge_of: dict[str, int] = {}
        if merges is not None:
            for node in reduced.nodes:
                into = matches.get(node.id, node.id)
                if into == node.id:
                    continue
                # A node another one linked to, moved because its id is not the least, was joined
                # by that link: its record names that link's rule, not its own "a new node".
                own = verdicts.get(node.id)
                verdict = own if own is None or own.action == LINK else _link_to(node.id, verdicts) or own
                merge_of[node.id] = merges.record_link(
                    Node(node.id, node.type, node.name), into_id=into, rule=verdict.rule if verdict else "exact-key",
                    score=verdict.score if verdict else 1.0,
                    evidence={"session": reduced.session_id, "form": verdict.candidates[0].form if verdict and verdict.candidates else node.name},
                )
                stats.merges_recorded += 1
        plan = plan_commit(reduced, matches=matches, state=state, old=old, merge_of=merge_of, observed_at=observed_at)
        # A merge record near a node this commit may remove (no point elsewhere) may have saved an
        # edge to it: read before its edges go, as a forget does; once the node has gone nothing
        # would lead a later forget of the source that named it to that record.
        removable: set[str] = set()
        if prune_saved_edges and plan.orphans:
            removable = plan.orphans - provenance.pointed_elsewhere(plan.orphans, reduced.anchor_id)
        near = unit.merges.records_near(removable) if removable else set()
        provenance.delete_anchor(reduced.anchor_id)
        stats.nodes_written = graph.upsert_nodes(plan.nodes)
        provenance.add_claims(plan.claims)
        provenance.add_node_points(plan.node_points)
        for node_id, take_back in sorted(plan.recombine.items()):
            stats.nodes_written += recombine_node(node_id, take_back, graph=graph, provenance=provenance)
        stats.edges_removed = graph.delete_edges(plan.removed_edges)
        # The edges' endpoints were read above or written just now: not looked up again.
        stats.edges_written = graph.link_nodes(plan.edges, present=plan.present).linked
        provenance.add_edge_points(plan.edge_points)
        orphans = sorted(plan.orphans - provenance.supported(plan.orphans))
        for node_id in orphans:
            graph.delete_node(node_id)
        if near:
            unit.merges.drop_saved_edges(near, orphans)
        stats.nodes_removed = len(orphans)
        for target, least in sorted(folded.items()):
            if merges is not None and graph.get_node(target) is not None:
                verdict = _link_to(target, verdicts)
                evidence = {"session": reduced.session_id, "survivor": "least-id"}
                if verdict is not None and verdict.node_id in bridged:
                    evidence["bridge"] = verdict.node_id
                merges.merge_nodes(
                    target, least, rule=verdict.rule if verdict else "exact-key", score=verdict.score if verdict else 1.0,
                    evidence=evidence, name_as_alias=False,
                )
                stats.nodes_folded += 1
        if merges is not None and (stats.identity_candidates or pairs):
            merges.record_candidates([*pairs, *candidate_pairs(verdicts.values(), reduced.session_id)])
        stats.edges_dropped = len(plan.dropped)
        stats.linked_existing = plan.linked_existing
        on_commit()
        stats.lazy_edges_queued = queue_append(plan.lazy) if plan.lazy else 0
    for edge in plan.dropped[:20]:
        log.warning("edge dropped: endpoint missing", session_id=reduced.session_id, source=edge.source,
                    target=edge.target, relationship=edge.relationship)
    return stats


def _link_to(node_id: str, verdicts: Mapping[str, Verdict]) -> Verdict | None:
    """The link verdict that joined ``node_id`` to its group from the other side: one whose target
    is ``node_id``, else (a bridge: it links the least of its candidates) one of whose candidates
    it is (pure). What a merge record of a node the least id moved (it did not link: another
    node linked to it) names as its rule."""
    links = [v for v in verdicts.values() if v.action == LINK]
    folded = next((v for v in verdicts.values() if node_id in folded_concepts(v)), None)
    if folded is not None:  # a CONCEPT a question's node absorbed (named35): its rule is the fold's
        return Verdict(folded.node_id, LINK, node_id, NAMED_RULE, 0.95, tuple(m for m in folded.candidates if m.node_id == node_id))
    return next((v for v in links if v.target == node_id), None) or next((v for v in links if node_id in {m.node_id for m in v.candidates}), None)


def _places(edge: Edge, provenance: Provenance) -> int:
    """An existing edge's distinct places, read from its weight (``max(1, places)``): only a weight
    of 1 needs a look at whether it has any point at all — never a count of its points."""
    if edge.weight > 1:
        return round(edge.weight)
    return 1 if provenance.edge_has_points((edge.source, edge.target, edge.relationship)) else 0
