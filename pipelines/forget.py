"""Forgetting: a session, a turn or a notes file taken out of the graph as if it had never been
extracted (``rem-cycle forget``), and the retraction of sessions whose rows left Chroma.

- **A session or a notes file** is its anchor: forgetting it commits an *empty* extraction for that
  anchor (:func:`pipelines.extract.commit.commit_session` — the same rule that takes back what a
  re-extraction no longer says): its points and claims go, the facts and weights they fed are
  recomputed, nodes and edges left without points go. Then its anchor node, its MEMORY nodes (and
  every edge touching them), its digest, memory index, chunk results and the identity candidates
  it reported go too, and a tombstone keeps a later cycle from bringing it back while its rows are
  still in Chroma.
- **A turn** (``--memory``): its points, their quotes and the edge justifications they carry go now (weights and provenance edges
  recomputed, nodes and edges left without points removed), its MEMORY node goes, and so does what
  the session *said* from it, in the same transaction and without a model call: the session's
  claim on a node is rewritten to what its stored chunk extractions say without every chunk node
  that may come from the turn (quoting it, or unquoted in a chunk that quotes it), or withdrawn
  whole when the node has no point left from the session or those extractions are not the ones
  the claim was made of; the node's facts and name are recombined from its claims by the commit's
  rule (:func:`pipelines.extract.commit.recombine_node`), and the chunk results quoting the turn
  are deleted, with the session's failed attempts (an error message may quote the turn). A tombstone keeps extraction from ever reading the turn again, and the session is
  marked for re-extraction, which brings back what its other turns said of a withdrawn claim.
- **Either**: a merge record of a node it touched keeps nothing of the forgotten source (a merge
  only it gave reasons for goes, with a hand merge's alias), nor does a record near a node it
  removed (a saved edge to it); a node left whose id no remaining source gives takes one they
  give, everywhere the id is stored; and a stored community that listed a node it removed,
  renamed or re-keyed is rewritten with the members left and their default label
  (:func:`_forget_traces`), so a forgotten name outlives the forget nowhere in the graph.
- **A knowledge node** (``--node``, :func:`forget_node`): the node goes with every edge touching it,
  its points, claims, aliases and search-index rows (by cascade), the review-list pairs naming it;
  the merge records, communities and identity verdicts that name it are rewritten as for a node a
  forget of its last source removed (:func:`_forget_traces`, the same path). A suppression keyed
  by its type and the folded keys of its name, aliases and claimed spellings
  (:func:`pipelines.extract.model.suppression_names`) keeps every later commit from writing it again
  (:func:`pipelines.extract.commit.drop_suppressed`). :func:`lift_node` undoes that and marks the
  sessions that had said it for re-extraction (from their stored chunk results: no model call).
  An edit outside the commit that moves names between nodes (a hand ``merge``, an ``unmerge``)
  goes through :func:`refusing_kept_out`: it is rolled back, and refused, when it gives a node a
  name kept out of that node (under its type, or a type the ``named`` rule makes it one thing with).
- ``dry_run``: everything is done in one transaction that is rolled back, so the report says
  exactly what a real run removes.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pipelines.communities import without_members
from pipelines.extract.commit import TakeBack, commit_session, kept_out, recombine_node
from pipelines.extract.model import ChunkExtraction, ExtractedNode, identity_key, suppression_names
from pipelines.extract.reduce import ReducedNode, reduce_session
from pipelines.ports import Graph, UnitOfWork
from store.facts import NodeFacts, combine_all
from store.graph import Edge, Node
from store.ids import memory_node_id, row_kind, row_suffix, session_node_id
from store.provenance import DISCUSSED_IN, EdgeKey, anchor_edges, with_justification
from store.suppressions import Suppression
from store.tombstones import MEMORY, NOTE, SESSION

# The ``kind`` of a forget's report for a knowledge node.
NODE = "node"


class _Rollback(Exception):
    """Raised inside the transaction of a dry run, so that nothing it did is kept."""


@dataclass(frozen=True, slots=True)
class _RemovalCount:
    """Counts what a forget removes without counting a popular node's edges: every node it can
    remove is in ``small`` (its anchor, turns, and the nodes with no point from elsewhere, which
    alone can be left without support), and every edge it can remove touches one of them or is
    one of ``keys`` (the edges it gave points to between nodes that keep theirs, and for a turn
    its owners' ``DISCUSSED_IN`` edges)."""

    graph: Graph
    small: set[str]
    keys: set[EdgeKey]

    @classmethod
    def of(cls, graph: Graph, *, small: set[str], keys: Iterable[EdgeKey]) -> "_RemovalCount":
        return cls(graph, small, {k for k in keys if k[0] not in small and k[1] not in small})

    def now(self) -> tuple[int, int]:
        """(nodes of ``small`` that exist, edges that touch them + ``keys`` that exist)."""
        kept = len(self.graph.get_edges(self.keys))
        return len(self.graph.existing_ids(self.small)), self.graph.count_edges_touching(self.small) + kept


def forget_anchor(
    unit: UnitOfWork, *, kind: str, item_id: str, anchor: str, reduce_key: str, chunk_key: str,
    bury: bool = True, dry_run: bool = False,
) -> dict[str, Any]:
    """Forget one session (``kind`` ``session``, ``item_id`` its id) or notes file (``note``, its
    ``note:`` id): see the module docstring. ``reduce_key``/``chunk_key``: the key its extraction
    and its chunk results were written under. Returns what went (``already_forgotten``: a
    session's tombstone was there before, the same forget run again)."""
    graph, provenance, tombstones = unit.graph, unit.provenance, unit.tombstones
    report: dict[str, Any] = {"kind": kind, "id": item_id, "anchor": anchor, "dry_run": dry_run}
    try:
        with unit.transaction():
            _hold_commit_order(unit)
            rows = provenance.anchor_rows(anchor)
            touched = {r.node_id for r in rows.node_points} | {c.node_id for c in rows.claims}
            memories = tombstones.session_memories(item_id) if kind == SESSION else []
            small = (touched - provenance.pointed_elsewhere(touched, anchor)) | {memory_node_id(m) for m in memories} | {anchor}
            counter = _RemovalCount.of(graph, small=small, keys=(r.key for r in rows.edge_points))
            nodes_before, edges_before = counter.now()
            carried, names, near = unit.merges.carried(touched), _names(graph, touched), unit.merges.records_near(small)
            empty = reduce_session(reduce_key, [], anchor=anchor if kind == NOTE else "")
            commit_session(empty, unit=unit, graph_index=None, on_commit=lambda: None,
                           queue_append=lambda lines: 0, matcher=lambda candidates, index: {}, prune_saved_edges=False)
            for memory in memories:
                graph.delete_node(memory_node_id(memory))
            graph.delete_node(anchor)
            state = tombstones.forget_session_state(item_id if kind == SESSION else anchor, chunk_key)
            already_forgotten = bool(tombstones.buried(kind, [item_id])) if bury else False
            if bury:
                tombstones.bury(kind, item_id)
            removed = touched - graph.existing_ids(touched)
            # Counted before the ids change: a re-keyed node's edges are still there, under new keys.
            nodes_after, edges_after = counter.now()
            # Only a node whose id the forgotten rows gave can be left without a source of it.
            gave_id = {r.node_id for r in (*rows.node_points, *rows.claims) if r.extracted_for == r.node_id}
            traces = _forget_traces(unit, carried, names, near, removed=removed, gave_id=gave_id,
                                    session=item_id if kind == SESSION else None, anchor=anchor)
            report.update(
                **traces, points=len(rows.node_points) + len(rows.edge_points), claims=len(rows.claims),
                nodes_removed=nodes_before - nodes_after, edges_removed=edges_before - edges_after,
                knowledge_nodes_removed=sorted(removed), memories=len(memories),
                chunk_results=state["chunk_results"], digests=state["session_digests"],
                identity_candidates=state["identity_candidates"], tombstone=bury, already_forgotten=already_forgotten,
            )
            if dry_run:
                raise _Rollback
    except _Rollback:
        pass
    return report


def _forget_traces(
    unit: UnitOfWork, carried: set[int], names: dict[str, str], near: set[int], *, removed: set[str], gave_id: set[str],
    anchor: str | None, session: str | None = None, memory_id: str | None = None,
) -> dict[str, Any]:
    """Once a forget took its rows out: what the merge records held of them
    (:meth:`store.merges.MergeStore.forget_traces`; ``carried``: the merges into the touched nodes
    that carried rows before; ``near``: the records that may have saved an edge of a node it
    removed, read before), the ids of the nodes left that only the forgotten source spelled (of
    ``gave_id``, those whose id a forgotten row gave:
    :meth:`store.merges.MergeStore.rekey_unsupported`), and the stored communities that list a
    node it removed, renamed or re-keyed (``names``: the touched nodes' names before; a merged
    node whose record went, too), and the identity verdicts of sessions in flight whose answer is a
    node it removed or re-keyed. ``anchor`` ``None``: no source was forgotten (a node was), the
    records keep every source's points."""
    traces, merged_away = unit.merges.forget_traces(carried, removed=removed, touched=names.keys() | removed, near=near,
                                                    session=session, anchor=anchor, memory_id=memory_id)
    rekeyed = unit.merges.rekey_unsupported(gave_id - removed)
    changed = _renamed(unit.graph, names) | merged_away
    return {**traces, "nodes_rekeyed": rekeyed, "communities_rewritten": _rewrite_communities(unit, changed, rekeyed),
            "identity_verdicts_withdrawn": unit.verdicts.withdraw_targets(removed | rekeyed.keys())}


def _names(graph: Graph, node_ids: Iterable[str]) -> dict[str, str]:
    """The names of the nodes of ``node_ids`` that exist."""
    return {node_id: node.name for node_id, node in graph.get_nodes(node_ids).items()}


def _renamed(graph: Graph, names: dict[str, str]) -> set[str]:
    """The nodes of ``names`` (as they were named) that are gone or named otherwise now."""
    now = _names(graph, names)
    return {node_id for node_id, name in names.items() if now.get(node_id) != name}


def _rewrite_communities(unit: UnitOfWork, changed: set[str], rekeyed: dict[str, str]) -> int:
    """Rewrite the stored communities that hold a node of ``changed`` (removed, renamed or
    re-keyed by a forget; ``rekeyed``: old id → new id): their members as they are now, under
    their new ids, and the default label of them, or no community when too few are left
    (:func:`pipelines.communities.without_members`) — a label must not keep a forgotten name until
    the next detection. Reads only those communities' members and their edges. Returns how many
    were rewritten or removed."""
    graph = unit.graph
    communities = unit.communities.holding(changed) if changed else []
    for community in communities:
        now = replace(community, members=tuple(sorted(rekeyed.get(m, m) for m in community.members)))
        nodes = graph.get_nodes(now.members)
        edges = [edge for node_id in sorted(nodes) for edge in graph.edges_of(node_id)]
        unit.communities.rewrite(community, without_members(now, list(nodes.values()), edges))
    return len(communities)


def _hold_commit_order(unit: UnitOfWork) -> None:
    """Take the session commits' lock first in a forget's transaction (``RunStateStore.begin_commit``),
    before anything is read: a commit of the session in flight finishes first and is read whole,
    and one that starts meanwhile waits, then finds the session forgotten (and rolls back). On
    PostgreSQL, where writers do not exclude each other, a commit could otherwise land between
    the forget's reads and its deletes, and its rows outlived the forget."""
    unit.runstate.begin_commit()


def forget_session(unit: UnitOfWork, session_id: str, *, bury: bool = True, dry_run: bool = False) -> dict[str, Any]:
    """Forget a session (see :func:`forget_anchor`)."""
    return forget_anchor(unit, kind=SESSION, item_id=session_id, anchor=session_node_id(session_id), reduce_key=session_id,
                         chunk_key=session_id, bury=bury, dry_run=dry_run)


def forget_note(unit: UnitOfWork, note_id: str, note_key: str, *, dry_run: bool = False) -> dict[str, Any]:
    """Forget an imported notes file (see :func:`forget_anchor`); a later ``import-notes`` of the
    file brings it back (that is asking for it)."""
    return forget_anchor(unit, kind=NOTE, item_id=note_id, anchor=note_id, reduce_key=note_key, chunk_key=note_key,
                         bury=False, dry_run=dry_run)


def forget_memory(unit: UnitOfWork, memory_id: str, *, dry_run: bool = False) -> dict[str, Any]:
    """Forget one turn (see the module docstring). Returns what went (``already_forgotten``: its
    tombstone was there before, the same forget run again)."""
    graph, provenance, tombstones = unit.graph, unit.provenance, unit.tombstones
    node_id = memory_node_id(memory_id)
    report: dict[str, Any] = {"kind": MEMORY, "id": memory_id, "dry_run": dry_run}
    try:
        with unit.transaction():
            _hold_commit_order(unit)
            # Its index row or its points' anchor (a retracted turn keeps only the latter), else its
            # MEMORY node (a back-filled turn the model never quoted has neither).
            session = tombstones.session_of_memory(memory_id)
            memory = graph.get_node(node_id)
            if session is None and memory is not None and isinstance(memory.properties.get("sessionId"), str):
                session = memory.properties["sessionId"]
            anchor = session_node_id(session) if session else ""
            owners = provenance.turn_owners(anchor, node_id)
            small = (owners - provenance.pointed_elsewhere(owners, anchor, node_id)) | {node_id}
            keys = provenance.turn_edges(anchor, node_id) | {(owner, anchor, DISCUSSED_IN) for owner in owners}
            counter = _RemovalCount.of(graph, small=small, keys=keys)
            nodes_before, edges_before = counter.now()
            carried, names, near = unit.merges.carried(owners), _names(graph, owners), unit.merges.records_near(small)
            nodes, edges = provenance.delete_turn_points(anchor, node_id) if anchor else (set(), set())
            sourced_by_turn: set[str] = set()
            for owner in sorted(nodes):
                points = provenance.node_anchor_points(owner, anchor)
                graph.link_nodes(anchor_edges(owner, anchor, points))
                if not points:
                    graph.delete_edge(owner, anchor, DISCUSSED_IN)
                    sourced_by_turn.add(owner)
            claims, chunk_keys = _take_back_turn_claims(
                unit, session=session, anchor=anchor, memory_id=memory_id, owners=nodes, sourced_by_turn=sourced_by_turn,
            ) if session else (0, [])
            present = graph.get_edges(edges)
            for key in sorted(edges):
                places = provenance.edge_places(key)
                edge = present.get(key)
                if edge is not None and places:
                    # The turn's justification goes with its points (the edge's live sources').
                    graph.link_nodes([Edge(*key, float(places), with_justification(edge.properties, provenance.edge_reasons(key)))])
                elif edge is not None:
                    graph.delete_edges([key])
            orphans = sorted(nodes - provenance.supported(nodes))
            for orphan in orphans:
                graph.delete_node(orphan)
            graph.delete_node(node_id)
            nodes_after, edges_after = counter.now()  # before the ids change, as forget_anchor
            traces = _forget_traces(unit, carried, names, near, removed=set(orphans), gave_id=owners, anchor=anchor, memory_id=node_id)
            failed_chunks = tombstones.forget_memory_state(memory_id, session)
            already_forgotten = bool(tombstones.buried(MEMORY, [memory_id]))
            tombstones.bury(MEMORY, memory_id)
            report.update(
                **traces, session=session, points=len(nodes) + len(edges), claims=claims, chunk_results=len(chunk_keys) + failed_chunks, nodes_removed=nodes_before - nodes_after,
                edges_removed=edges_before - edges_after, knowledge_nodes_removed=orphans, tombstone=True,
                already_forgotten=already_forgotten,
            )
            if dry_run:
                raise _Rollback
    except _Rollback:
        pass
    return report


def forget_node(unit: UnitOfWork, node_id: str, *, dry_run: bool = False, carried_over: Suppression | None = None) -> dict[str, Any]:
    """Forget one knowledge node and keep it out (see the module docstring): the node goes as a
    node a forget left without support goes (:func:`_forget_traces`), and its suppression is
    recorded in the same transaction. ``carried_over``: a suppression of another copy of the graph
    (a restore's replaced database) recorded here too, whether or not the node is here. Returns what
    went (``already_forgotten``: its suppression was there before)."""
    graph, provenance = unit.graph, unit.provenance
    report: dict[str, Any] = {"kind": NODE, "id": node_id, "dry_run": dry_run}
    try:
        with unit.transaction():
            _hold_commit_order(unit)
            node = graph.get_node(node_id)
            anchors, spellings = provenance.node_sources(node_id)
            counter = _RemovalCount.of(graph, small={node_id}, keys=())
            nodes_before, edges_before = counter.now()
            carried, names, near = unit.merges.carried({node_id}), _names(graph, {node_id}), unit.merges.records_near({node_id})
            graph.delete_node(node_id)  # its edges, points, claims, aliases and review pairs by cascade
            nodes_after, edges_after = counter.now()
            removed = {node_id} if node is not None else set()
            traces = _forget_traces(unit, carried, names, near, removed=removed, gave_id=set(), anchor=None)
            keys, label, name, said_by = set(), "", node_id, set(anchors)
            held = unit.suppressions.holding(node_id)
            if node is None and carried_over is None and held:
                carried_over = held[0]  # forgotten before (this is that forget run again): kept out as it was
            if carried_over is not None:
                keys, label, name = set(carried_over.keys), carried_over.label, carried_over.name
                said_by |= set(carried_over.anchors)
            if node is not None:
                keys |= set(carried_names(node, spellings))
                label, name = node.label, node.name
            already = bool(held)
            if label:
                unit.suppressions.suppress(node_id, label=label, name=name, keys=keys, anchors=said_by,
                                           created_at=carried_over.created_at if carried_over else None)
            report.update(
                **traces, label=label, nodes_removed=nodes_before - nodes_after, edges_removed=edges_before - edges_after,
                knowledge_nodes_removed=sorted(removed), sessions=sorted(row_suffix(a) for a in anchors if row_kind(a) == SESSION),
                anchors=sorted(anchors), suppressed_keys=sorted(keys), points=0, suppressed=bool(label),
                already_forgotten=already,
            )
            if dry_run:
                raise _Rollback
    except _Rollback:
        pass
    return report


def carried_names(node: Node, spellings: Iterable[str]) -> dict[str, str]:
    """The keys ``node`` is known by under its type, each with a spelling
    (:func:`pipelines.extract.model.suppression_names` of its name, its aliases and the names its
    claims spelled, ``spellings``): those a ``forget --node`` of it keeps out, and those an edit
    must not give it while they are kept out. Pure."""
    aliases = [a for a in node.properties.get("aliases") or () if isinstance(a, str)]
    return suppression_names(node.label, [node.name, *aliases, *spellings])


class KeptOut(Exception):
    """An edit outside an extraction commit (a hand ``merge``, an ``unmerge``) would have given a
    node a name ``forget --node`` keeps out under the node's type; it was rolled back: nothing was
    changed. ``status`` 2: the command is refused for what it asks, as an ambiguous ``forget --node``."""

    status = 2

    def __init__(self, what: str, node_id: str, label: str, key: str, held: Sequence[Suppression], *, node_label: str) -> None:
        forgotten = ", ".join(f"{s.node_id} ({s.name!r})" for s in held)
        undo = "; ".join(f"rem-cycle forget --node {shlex.quote(s.node_id)} --undo" for s in held)
        # Kept out of another type: the ``named`` rule makes the two one thing (pipelines.identity.named_alike).
        also = f", and so of {node_label} nodes of that name (one thing across the two types)" if label != node_label else ""
        super().__init__(
            f"{what} refused: {node_id} would be named {key!r}, which rem-cycle forget --node keeps out of {label} nodes{also} "
            f"(forgotten: {forgotten}); nothing was changed. To let that name back first: {undo}"
        )
        self.node_id, self.label, self.key = node_id, label, key
        self.held = tuple(held)


T = TypeVar("T")


def refusing_kept_out(
    unit: UnitOfWork, node_ids: Iterable[str], edit: Callable[[], T], *, what: str, taking_from: Iterable[str] = (),
) -> T:
    """Run ``edit`` (a hand ``merge`` or an ``unmerge``, ``what``) in one transaction of ``unit``
    and keep it only when it gave none of ``node_ids`` (the nodes it writes names to) a key kept
    out of that node (:func:`pipelines.extract.commit.kept_out`: under its type, or a type the
    ``named`` rule makes it one thing with) that the node was not known by before
    (:func:`carried_names`); else roll it back and raise :class:`KeptOut`, naming the forgotten
    node and how to let it back. ``taking_from``: the nodes the edit takes names from (a merge's
    merged node, the nodes an unmerge takes its names back from); a name one of them held under
    the receiving node's type before the edit only moves within that type, which a cross-type
    suppression does not keep out (it kept out no node of that type known by the name). The one
    rule for every path that gives a node names outside an extraction commit (which drops such
    nodes itself: :func:`pipelines.extract.commit.drop_suppressed`)."""
    ids = sorted(set(node_ids))

    def known_by(node_id: str) -> tuple[str, dict[str, str]]:
        node = unit.graph.get_node(node_id)
        if node is None:
            return "", {}
        return node.label, carried_names(node, unit.provenance.claimed_names(node_id))

    with unit.transaction():
        before = {node_id: known_by(node_id)[1] for node_id in ids}
        known_before = {(label, key) for source in set(taking_from) - set(ids)
                        for label, names in [known_by(source)] for key in names}
        result = edit()
        gained: dict[str, tuple[str, dict[str, str]]] = {}
        for node_id in ids:
            label, names = known_by(node_id)
            if new := {key: name for key, name in names.items() if key not in before[node_id]}:
                gained[node_id] = (label, new)
        if held := kept_out(gained, unit.suppressions, unit.graph, gaining=True, known_before=known_before):
            node_id, (label, key) = min(held.items())
            raise KeptOut(what, node_id, label, key, [s for s in unit.suppressions.holding(key=key) if s.label == label],
                          node_label=gained[node_id][0])
    return result


def lift_node(unit: UnitOfWork, node_id: str) -> dict[str, Any]:
    """Undo ``forget --node`` of ``node_id``: its suppression goes, and the sessions that had said
    it are marked for re-extraction, which commits them again from their stored chunk results (the
    node comes back without a model call); a notes file says it again when it is imported again.
    Returns what was lifted (``lifted`` ``False``: nothing was suppressed under that id)."""
    with unit.transaction():
        lifted = unit.suppressions.lift(node_id)
        sessions = sorted(row_suffix(a) for a in (lifted.anchors if lifted else ()) if row_kind(a) == SESSION)
        unit.runstate.require_extraction(sessions)
    return {"kind": NODE, "id": node_id, "lifted": lifted is not None, "sessions_to_extract": sessions,
            "notes": sorted(a for a in (lifted.anchors if lifted else ()) if a.startswith("note:")),
            "suppressed_keys": list(lifted.keys) if lifted else []}


def _take_back_turn_claims(
    unit: UnitOfWork, *, session: str, anchor: str, memory_id: str, owners: set[str], sourced_by_turn: set[str],
) -> tuple[int, list[tuple[str, str]]]:
    """Take what the session said from the turn ``memory_id`` out of its claims, and the turn's
    quotes out of its stored chunk results; returns (claims rewritten or withdrawn, the chunk
    results deleted).

    A claim is rewritten to what the session's stored chunk extractions say without the chunk
    entities that may come from the turn (:func:`facts_without_turn`) when those extractions are
    the ones it was made of (they recombine to it exactly); otherwise, or when the node has no
    point left from the session, it is withdrawn whole (the re-extraction the session stays marked
    for brings back what its other turns say). Nodes' facts and names are then recombined with the
    commit's rule (:func:`pipelines.extract.commit.recombine_node`). No model call."""
    provenance = unit.provenance
    results = sorted(unit.chunks.session_results(session), key=lambda r: _chunk_order(r.chunk_id))
    extractions = [ChunkExtraction.from_payload(r.payload) for r in results if r.payload is not None]
    before, after = facts_without_turn(session, extractions, memory_id)
    changed = {node_id for node_id, facts in before.items() if after.get(node_id) != facts}
    revisit = set(owners) | {c.node_id for c in provenance.anchor_rows(anchor).claims if c.extracted_for in changed}
    rewritten = 0
    for node_id, rows in sorted(provenance.take_claims(anchor, revisit).items()):
        kept = [
            replace(row, facts=after[row.extracted_for]) for row in rows
            if node_id not in sourced_by_turn and before.get(row.extracted_for) == row.facts and row.extracted_for in after
        ]
        provenance.add_claims(kept)
        rewritten += len(set(rows) - set(kept))
        take_back = TakeBack(
            combine_all(r.facts for r in rows), combine_all(r.facts for r in kept),
            frozenset(r.name for r in rows if r.name), tuple(r.name for r in kept if r.name),
        )
        recombine_node(node_id, take_back, graph=unit.graph, provenance=provenance)
    tainted = [
        (r.content_hash, r.fingerprint) for r, e in zip((r for r in results if r.payload is not None), extractions)
        if _mentions_turn(e, memory_id)
    ]
    unit.chunks.delete_results(tainted)
    return rewritten, tainted


def facts_without_turn(
    session_id: str, extractions: Sequence[ChunkExtraction], memory_id: str,
) -> tuple[dict[str, NodeFacts], dict[str, NodeFacts]]:
    """What a session's chunk ``extractions`` (in chunk order) say of each node they reduce to (by
    reduced id, the claims' ``extracted_for``), and what they say once every chunk node that may
    come from the turn ``memory_id`` (raw id) is left out: one with evidence in the turn, or with no
    grounded evidence in a chunk that quotes the turn. Both reduced with
    :func:`pipelines.extract.reduce.reduce_session` (facts combined by the one rule,
    :func:`store.facts.combine_facts`); a node only such chunk nodes gave is absent from the
    second. Pure."""
    original = reduce_session(session_id, extractions)
    reduced_id = {identity_key(n.type, n.name): n.id for n in original.nodes}
    clean = [
        replace(e, nodes=tuple(n for n in e.nodes if not _from_turn(n, memory_id, chunk_quotes_turn=_mentions_turn(e, memory_id))))
        for e in extractions
    ]
    after: dict[str, NodeFacts] = {}
    for node in reduce_session(session_id, clean).nodes:
        node_id = reduced_id.get(identity_key(node.type, node.name))
        if node_id is not None:
            after[node_id] = _facts(node)
    return {n.id: _facts(n) for n in original.nodes}, after


def _facts(node: ReducedNode) -> NodeFacts:
    return NodeFacts.of(description=node.description, aliases=node.aliases, tags=node.tags, confidence=node.confidence)


def _from_turn(node: ExtractedNode, memory_id: str, *, chunk_quotes_turn: bool) -> bool:
    return any(e.memory_id == memory_id for e in node.evidence) or (chunk_quotes_turn and not node.evidence)


def _mentions_turn(extraction: ChunkExtraction, memory_id: str) -> bool:
    """Whether a chunk's extraction quotes the turn ``memory_id`` anywhere."""
    evidence = [e for item in (*extraction.nodes, *extraction.edges) for e in item.evidence]
    return any(e.memory_id == memory_id for e in evidence) or any(r.memory_id == memory_id for r in extraction.references)


def _chunk_order(chunk_id: str) -> list[tuple[int, str]]:
    """A chunk id's place in its session (``…:chunk:2`` before ``…:chunk:10``)."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in chunk_id.split(":")]


# A full scan that finds most of the graph's sessions gone from Chroma at once says far more likely
# that Chroma came back with the wrong or an empty volume (a path, a URL, a collection name) than
# that agents deleted them, and retracting them would wipe the graph: "most" is more than half of
# the sessions, and more than this many — so that deleting a few sessions (all of a small graph's
# included) works as ever. No setting: a real mass deletion is rare and is confirmed once
# (``rem-cycle --once --allow-mass-retraction``), while a standing setting would disarm the guard
# on the day the volume goes wrong.
MASS_RETRACTION_MIN_SESSIONS = 5


class MassRetractionRefused(Exception):
    """Retracting ``sessions`` of the graph's ``known`` sessions at once was refused (see
    :data:`MASS_RETRACTION_MIN_SESSIONS`); nothing was retracted."""

    def __init__(self, sessions: int, known: int) -> None:
        super().__init__(f"{sessions} of the graph's {known} sessions are gone from Chroma")
        self.sessions = sessions
        self.known = known


def sessions_to_retract(present: set[str], known: set[str], *, rows_scanned: int, allow_mass: bool) -> list[str]:
    """The ``known`` sessions a full scan that read ``rows_scanned`` rows and found the sessions
    ``present`` retracts: those no longer present — none when the scan saw no row at all (an empty
    or misnamed collection) — unless they are most of the graph (:class:`MassRetractionRefused`);
    with ``allow_mass`` (the operator's word) every one of them. Pure."""
    vanished = sorted(known - present)
    if allow_mass or not vanished:
        return vanished
    if len(vanished) > MASS_RETRACTION_MIN_SESSIONS and 2 * len(vanished) > len(known):
        raise MassRetractionRefused(len(vanished), len(known))
    return vanished if rows_scanned else []


def retract_vanished(unit: UnitOfWork, session_ids: list[str]) -> list[dict[str, Any]]:
    """Forget (without a tombstone) sessions whose rows left Chroma (see :func:`sessions_to_retract`),
    each recording in its own transaction that the lines its extraction queued are due to be
    withdrawn (``unit.withdrawals``: a kill before the withdrawal leaves them to the next cycle)."""
    reports = []
    for session_id in session_ids:
        with unit.transaction():
            reports.append(forget_session(unit, session_id, bury=False))
            unit.withdrawals.record(session_id)
    return reports
