"""Composition of the knowledge-quality features for the CLI and the cycle: snapshot export,
communities, the query surface (show/search) and unmerge."""

from __future__ import annotations

import copy
import itertools
import json
import os
import time
import unicodedata
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from config import Settings
from pipelines.asof import graph_as_of
from pipelines.communities import (
    REFRESH_FRACTION,
    DetectionBasis,
    Namer,
    detection_due,
    name_communities,
    plan_communities,
    semantic_graph,
)
from pipelines.export import build_snapshot, render, write_json
from pipelines.identity import NAMED_RULE, AliasIndex, AuditUnanswered, Auditor, NodeRef
from pipelines.judge import ModelJudge
from pipelines.lazy_edge import ExtractionLines
from pipelines.query import ViewCounts, node_view, search_row, turn_memory_ids
from pipelines.resolver import GraphResolver, KeptIndex, node_refs
from pipelines.review import LinkRefused, ReviewSweep, judge_review_list, with_graph_extensions
from pipelines.vocabulary import ANCHOR_LABELS, DISCUSSED_IN, MEMORY_LABEL, NOTE_LABEL, ORIGINATES_IN, PROVENANCE_RELATIONSHIPS, SESSION_LABEL
from store.chroma import ChromaStore, ChromaStoreError
from store.communities import CommunityStore
from store.backend import database_exists, database_location, open_database
from store.db import SUPPRESSIONS_VERSION, Database
from store.erasure import EraseDueStore
from store.errors import DatabaseError
from store.graph import Edge, GraphStore, Node, utc_now
from store.held_file import HeldAnswersFile, held_answers_file
from store.ids import memory_node_id, normalize_graph_node_id, row_id_given, row_kind, row_suffix
from store.lazy_queue import LazyEdgeQueue, QueueBusyError
from store.lazy_table import LazyEdgeTable, lazy_edge_sink
from store.library_log import get_logger
from store.merges import JUDGE, MergeStore
from store.provenance import ProvenanceStore
from store.recall_index import RecallIndex, Scope, SessionRecord
from store.runstate import RunStateStore
from store.suppressions import Suppression, SuppressionStore
from store.unit_of_work import DatabaseUnitOfWork
from store.verdicts import VerdictStore
from store.withdrawals import SESSION_UNKNOWN, WHOLE_ANCHOR, QueueWithdrawalStore

log = get_logger(__name__)

if TYPE_CHECKING:  # imported where used: the notes pipeline loads the extraction modules
    from pipelines.extract.model import Extractor
    from pipelines.notes import NoteResult


@asynccontextmanager
async def model_judge(settings: Settings) -> AsyncIterator[ModelJudge | None]:
    """The model namer/auditor when ``REM_EXTRACTOR=openai`` and ``REM_LLM_JUDGE`` (its own HTTP
    client), else ``None``."""
    if settings.extractor != "openai" or not settings.llm_judge:
        yield None
        return
    from pipelines.extract.llm import OpenAIExtractor

    async with OpenAIExtractor(settings) as extractor:
        yield ModelJudge(extractor)


# The judge's check by (server URL, model), once a process: a model answers as it answers, and a
# daemon asks it once, not every cycle. A check that went unanswered is not kept (asked again).
_JUDGE_CHECKS: dict[tuple[str, str], str | None] = {}


async def judge_checked(settings: Settings, extractor: Extractor) -> tuple[ModelJudge | None, str | None]:
    """The model judge over ``extractor`` as identity may trust it: the judge when it passed its
    check (:meth:`ModelJudge.failed_check`), else ``None`` and why — identity candidates then stay
    for a person's review, as with no judge, instead of being settled by rote (a small model
    answering "a new node" to every question took true pairs off the review list). ``(None, None)``
    with no judge (``REM_LLM_JUDGE`` off, or an extractor that is no model). Logged once a process
    for a model that failed."""
    from pipelines.extract.llm import OpenAIExtractor

    if not settings.llm_judge or not isinstance(extractor, OpenAIExtractor):
        return None, None
    judge = ModelJudge(extractor)
    key = (settings.llm_base_url, settings.llm_model)
    if key in _JUDGE_CHECKS:
        failed = _JUDGE_CHECKS[key]
    else:
        try:
            failed = _JUDGE_CHECKS[key] = await judge.failed_check()
        except AuditUnanswered as exc:
            failed = f"its check went unanswered ({str(exc)[:200]})"
        if failed is not None:
            log.warning("the model judge failed its check: identity candidates stay for review, as without it "
                        "(a stronger REM_LLM_MODEL passes it)", model=settings.llm_model, reason=failed)
    return (judge, None) if failed is None else (None, failed)


# How long a forget or a cycle's withdrawal waits for a running drain to let go of the queue files
# before it leaves them, recorded, to the next cycle (as the erase's wait).
_QUEUE_WAIT_SECONDS = 30.0
# Identity indexes kept between the extract phases of this process, by graph database location:
# a daemon builds its index once, and each phase takes it up if the graph's identity epoch is still
# the one it was built in (pipelines/resolver.py).
_KEPT_INDEXES: dict[str, KeptIndex] = {}


def identity_resolver(db: Database, *, auditor: Auditor | None = None, keep_as: str | None = None) -> GraphResolver:
    """The extraction commit's identity resolution over the graph in ``db``; ``keep_as`` (the
    database's location): take up the index a previous phase kept under that name (see
    :func:`keep_identity_index`). The model is never asked about a node ``forget --node`` keeps out."""
    from pipelines.extract.commit import suppressed_ids  # the extraction modules: loaded where used

    graph, runstate, provenance = GraphStore(db), RunStateStore(db), ProvenanceStore(db)

    def knowledge_nodes(ids: Iterable[str] | None = None) -> list[NodeRef]:
        """The graph's knowledge nodes (of those among ``ids``, when given), as identity reads them."""
        return node_refs(graph.node_names(exclude_labels=ANCHOR_LABELS, ids=ids))

    def committed_since(seq: int | None) -> tuple[int, list[NodeRef]]:
        latest, sessions = runstate.commits_since(seq)
        if not sessions:
            return latest, []
        return latest, knowledge_nodes(provenance.claimed_by(f"session:{sid}" for sid in sessions))

    return GraphResolver(
        load_nodes=knowledge_nodes,
        load_named=knowledge_nodes,
        load_blocked=MergeStore(db).blocked_pairs,
        # A `named` fold is found again by its rule at every mention (and only while it names one node).
        load_redirects=partial(MergeStore(db).redirects, besides=(NAMED_RULE,)),
        existing=graph.existing_ids,
        committed_since=committed_since,
        auditor=auditor,
        verdicts=StoredVerdicts(VerdictStore(db)) if auditor is not None else None,
        epoch=runstate.identity_epoch,
        kept=_KEPT_INDEXES.pop(keep_as, None) if keep_as else None,
        kept_out=partial(suppressed_ids, suppressions=SuppressionStore(db), graph=graph),
    )


def keep_identity_index(resolver: GraphResolver, *, keep_as: str) -> None:
    """Keep the resolver's index for the next extract phase on the same database (call after a
    phase in which every commit went through: a rolled-back commit may have taught it a name)."""
    kept = resolver.kept()
    if kept is not None:
        _KEPT_INDEXES[keep_as] = kept


def kept_identity_index(settings: Settings) -> KeptIndex | None:
    """A copy of the identity index this process keeps for the graph of ``settings`` (the one its
    next extract phase would take up), or ``None`` when it keeps none. With
    :func:`install_identity_index`, a benchmark that restores a graph from a copy hands it the
    index kept at that copy, as a daemon that never stopped would have it."""
    kept = _KEPT_INDEXES.get(database_location(settings))
    return copy.deepcopy(kept) if kept is not None else None


def install_identity_index(settings: Settings, kept: KeptIndex) -> None:
    """Keep a copy of ``kept`` (from :func:`kept_identity_index`) for the graph of ``settings``.
    The next extract phase takes it up only if the graph is still in the identity epoch it was
    built in and holds at least the commits the index has seen (pipelines/resolver.py), else it
    rebuilds the index as if nothing had been installed; a copy, because a phase that takes it up
    learns its commits into it."""
    _KEPT_INDEXES[database_location(settings)] = copy.deepcopy(kept)


class NoGraphError(FileNotFoundError):
    """The data dir has no graph database yet."""


# How a read opens the graph: ``open_graph_db`` (the commands), or read-only within a deadline
# (the MCP tools: worker.recall.open_bounded).
GraphOpener = Callable[[Settings], AbstractContextManager[Database]]


@contextmanager
def open_graph_db(settings: Settings) -> Iterator[Database]:
    """The existing graph database (migrated); :class:`NoGraphError` when there is none, so a read
    command never creates an empty database as a side effect."""
    if not database_exists(settings):
        raise NoGraphError(f"no graph database at {database_location(settings)} (run a REM cycle first)")
    db = open_database(settings)
    try:
        yield db
    finally:
        db.close()


def snapshot_from_db(db: Database, *, include_anchors: bool = False, as_of: str | None = None, stream_points: bool = False) -> dict[str, Any]:
    """The export snapshot of the graph in ``db`` (as known at ``as_of``, see :mod:`pipelines.asof`);
    ``stream_points`` (not with ``as_of``): without the points themselves, for
    :func:`pipelines.export.write_json`."""
    graph, provenance = GraphStore(db), ProvenanceStore(db)
    # Provenance edges are not exported without the anchors: their documents are not read.
    unread = PROVENANCE_RELATIONSHIPS if not include_anchors and as_of is None else ()
    nodes, edges = graph.all_nodes(), graph.all_edges(bare_relationships=unread)
    points = provenance.point_places_by_node() if stream_points else provenance.points_by_node()
    edge_seen = provenance.edge_seen()
    if as_of is not None:
        edge_points = provenance.points_by_edge()
        view = graph_as_of(nodes, edges, node_points=points, edge_points=edge_points,
                           claims=provenance.claims_by_node(), sessions=_sessions_as_of(db, nodes, as_of), as_of=as_of)
        nodes, edges, points = view.nodes, view.edges, view.points
        edge_seen = {k: _first_last(p.observed_at for p in v if p.observed_at and p.observed_at <= as_of) for k, v in edge_points.items()}
    snapshot = build_snapshot(
        nodes,
        edges,
        CommunityStore(db).all(),
        generated_at=utc_now(),
        include_anchors=include_anchors,
        points={k: [p.as_dict() for p in v] for k, v in points.items()},
        edge_seen=edge_seen,
        list_points=not stream_points,
    )
    snapshot["as_of"] = as_of
    return snapshot


def export_graph(settings: Settings, out: TextIO, *, fmt: str, include_anchors: bool = False, as_of: str | None = None) -> dict[str, int]:
    """``export``: write the snapshot in ``fmt`` to ``out``; returns its counts. JSON of the graph
    as it is now is streamed: the points are listed as they are read, never held (see
    :func:`pipelines.export.write_json`); GraphML and ``as_of`` build the whole snapshot first."""
    # One snapshot: a cycle committing between the export's reads must not make it mix two states.
    with open_graph_db(settings) as db, db.read_snapshot():
        if fmt == "json" and as_of is None:
            snapshot = snapshot_from_db(db, include_anchors=include_anchors, stream_points=True)
            write_json(snapshot, ((n, p.as_dict()) for n, p in ProvenanceStore(db).iter_node_points()), out)
        else:
            snapshot = snapshot_from_db(db, include_anchors=include_anchors, as_of=as_of)
            out.write(render(snapshot, fmt))
    return dict(snapshot["counts"])


def _first_last(times: Any) -> tuple[str | None, str | None]:
    known = sorted(times)
    return (known[0], known[-1]) if known else (None, None)


def _as_of_subgraph(db: Database, nodes: list[Node], edges: list[Edge], as_of: str) -> tuple[list[Node], list[Edge], dict[str, list[Any]]]:
    """``nodes`` and ``edges`` as known at ``as_of`` (their own rows only)."""
    provenance = ProvenanceStore(db)
    ids = [n.id for n in nodes]
    view = graph_as_of(
        nodes, edges, node_points=provenance.points_by_node(ids),
        edge_points=provenance.points_by_edge((e.source, e.target, e.relationship) for e in edges),
        claims=provenance.claims_by_node(ids), sessions=_sessions_as_of(db, nodes, as_of), as_of=as_of,
    )
    return view.nodes, view.edges, view.points


def _sessions_as_of(db: Database, nodes: list[Node], as_of: str) -> dict[str, SessionRecord]:
    """The sessions among ``nodes`` as recall reads them at ``as_of`` (one rule for every reader)."""
    return RecallIndex(db).sessions([n.id for n in nodes if n.label == SESSION_LABEL], Scope(as_of=as_of))


@dataclass(frozen=True, slots=True)
class StoredVerdicts:
    """:class:`pipelines.resolver.GivenVerdicts` over ``identity_verdicts`` and, for the texts the
    auditor reads, the provenance of the same database, off the event loop."""

    store: VerdictStore

    async def given(self, questions: Collection[str]) -> dict[str, str | None]:
        return await anyio.to_thread.run_sync(self.store.given, questions)

    async def keep(self, question: str, target: str | None, *, session: str) -> None:
        await anyio.to_thread.run_sync(partial(self.store.keep, question, target, session=session))

    async def first_texts(self, node_ids: Collection[str], *, points: int) -> dict[str, list[str]]:
        provenance = ProvenanceStore(self.store.db)

        def read() -> dict[str, list[str]]:
            return {node_id: provenance.first_texts(node_id, points=points) for node_id in node_ids}

        return await anyio.to_thread.run_sync(read)


@dataclass(frozen=True, slots=True)
class StoredLabels:
    """:class:`pipelines.communities.GivenLabels` over ``community_names``, off the event loop."""

    store: CommunityStore

    async def given(self, hashes: Collection[str]) -> dict[str, str]:
        return await anyio.to_thread.run_sync(self.store.given_labels, hashes)

    async def keep(self, member_hash: str, label: str) -> None:
        await anyio.to_thread.run_sync(self.store.keep_label, member_hash, label)


async def refresh_communities(db: Database, *, namer: Namer | None = None, unit: DatabaseUnitOfWork | None = None) -> dict[str, Any]:
    """Detect the graph's communities, keep ids/labels stable, optionally name new ones with the
    model, and store them — in a transaction of ``unit`` when given (finalize's, fenced with the
    single-flight lock). Returns counts for the run record."""
    graph, communities = GraphStore(db), CommunityStore(db)
    unit = unit or DatabaseUnitOfWork(db)

    def load() -> tuple[list[Any], list[Any], list[Any]]:
        # Anchors and provenance never take part (semantic_graph drops them): leave them, and every
        # property document, in the database.
        nodes, edges = graph.skeleton(exclude_labels=ANCHOR_LABELS, exclude_relationships=PROVENANCE_RELATIONSHIPS)
        return nodes, edges, communities.all()

    nodes, edges, previous = await anyio.to_thread.run_sync(load)
    plan = plan_communities(nodes, edges, previous)
    records, named, reused = plan.communities, 0, 0
    if namer is not None and records:
        names = {n.id: n.name for n in nodes}
        records, named, reused = await name_communities(
            records, names, namer=namer, only=plan.fresh, graph=semantic_graph(nodes, edges),
            labels=StoredLabels(communities),
        )
    written = await anyio.to_thread.run_sync(unit.apply, partial(communities.replace_all, records))
    return {
        "communities": len(records),
        "unchanged": plan.unchanged,
        "carried": plan.carried,
        "new": plan.new,
        "dropped": plan.dropped,
        "named": named,
        "labels_reused": reused,
        "written": written["written"],
    }


async def refresh_communities_when_due(
    db: Database, *, namer: Namer | None = None, fraction: float = REFRESH_FRACTION, unit: DatabaseUnitOfWork | None = None
) -> dict[str, Any]:
    """Finalize's communities: :func:`refresh_communities` when :func:`pipelines.communities.detection_due`
    says enough sessions were digested since the last detection (whose basis the previous finalize
    recorded), else only the stored count; ``unit`` as :func:`refresh_communities`'. The returned ``basis`` is what the next cycle compares
    with: it is carried forward until a detection replaces it."""
    runstate = RunStateStore(db)

    def since_last() -> tuple[DetectionBasis | None, int]:
        record = runstate.last_phase_record("finalize")
        communities = record.get("communities") if isinstance(record, dict) else None
        basis = DetectionBasis.from_record(communities.get("basis") if isinstance(communities, dict) else None)
        return basis, runstate.digested_since(basis.detected_at) if basis else 0

    basis, digested_since = await anyio.to_thread.run_sync(since_last)
    if basis is not None and not detection_due(basis, digested_since, fraction=fraction):
        stored = await anyio.to_thread.run_sync(CommunityStore(db).count)
        return {"detected": False, "communities": stored, "digested_since": digested_since, "basis": basis.as_dict()}
    moment, digested = utc_now(), (await anyio.to_thread.run_sync(runstate.digest_counts))["digested"]
    counts = await refresh_communities(db, namer=namer, unit=unit)
    return {"detected": True, **counts, "basis": DetectionBasis(moment, digested).as_dict()}


def search_graph(settings: Settings, text: str, *, limit: int | None = 50, label: str | None = None,
                 as_of: str | None = None) -> list[dict[str, Any]]:
    """Knowledge nodes whose name or alias contains ``text`` (case and accents folded by
    :mod:`store.textfold`'s rule, ``e`` + U+0301 as ``é``), best first, at most ``limit`` (``None``:
    all); with ``as_of``, those known then, as they were then (their aliases of then are not searched)."""
    with open_graph_db(settings) as db:
        nodes = GraphStore(db).search_nodes(text, limit=limit, exclude_labels=ANCHOR_LABELS, label=label)
        if as_of is not None:
            known = {n.id: n for n in _as_of_subgraph(db, nodes, [], as_of)[0]}
            nodes = [known[n.id] for n in nodes if n.id in known]
    return [search_row(n) for n in nodes]


def knowledge_types(settings: Settings) -> list[str]:
    """The types of the graph's knowledge nodes (not its anchors), from its counts: ``search
    --label`` says them when no node has the type asked for."""
    with open_graph_db(settings) as db:
        return sorted(set(GraphStore(db).counts()["nodes"]) - set(ANCHOR_LABELS))


@dataclass
class _Loaded:
    node: Node | None = None
    edges: list[Edge] = field(default_factory=list)
    neighbours: dict[str, Node] = field(default_factory=dict)
    merged_from: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    redirected_from: str | None = None
    counted: ViewCounts | None = None


def _load_shown(db: Database, loaded: _Loaded, node_id: str, limit: int | None) -> None:
    """Into ``loaded``, only what ``show`` prints of node ``node_id`` — its ``limit`` heaviest semantic edges, its
    first ``limit`` sources and turns with those turns' points — plus the totals, counted in SQL:
    a node with a hundred thousand points shows in the memory of ``limit`` of them."""
    graph, provenance = GraphStore(db), ProvenanceStore(db)
    # A session, turn or notes file (an anchor) has no semantic edges: its edges are the knowledge
    # nodes said in it, a turn's source is its session and its own text is its turn.
    label = loaded.node.label if loaded.node else None
    anchor = label in ANCHOR_LABELS
    semantic, edges_total = graph.heaviest_edges_of(
        node_id, exclude_relationships=frozenset() if anchor else PROVENANCE_RELATIONSHIPS, exclude_labels=ANCHOR_LABELS, limit=limit
    )
    anchors, sources_total = graph.edge_targets(node_id, ORIGINATES_IN if anchor else DISCUSSED_IN, limit=limit)
    turn_ids, turns_total = ([node_id], 1) if label == MEMORY_LABEL else provenance.turn_memories(node_id, limit=limit)
    loaded.edges = semantic + [Edge(node_id, a, DISCUSSED_IN, 1.0) for a in anchors]
    loaded.neighbours = graph.get_nodes({e.source for e in semantic} | {e.target for e in semantic} | set(anchors))
    # A notes file has no turns: its quotes are shown under it, from its points (the file's size bounds them).
    notes = [a for a in anchors if a in loaded.neighbours and loaded.neighbours[a].label == NOTE_LABEL]
    file_points = [p for a in notes for p in provenance.node_anchor_points(node_id, a) if not p.memory]
    loaded.points = [p.as_dict() for p in [*provenance.node_turn_points(node_id, turn_ids), *file_points]]
    loaded.counted = ViewCounts(turn_ids, edges_total, turns_total, provenance.node_seen(node_id), sources_total)


def _load_node(settings: Settings, node_id: str, as_of: str | None = None, limit: int | None = None,
               open_db: GraphOpener = open_graph_db) -> _Loaded:
    """The node (or, when it was merged away, the node it was merged into), its edges and merges."""
    with open_db(settings) as db:
        graph, merges = GraphStore(db), MergeStore(db)
        loaded = _Loaded(node=graph.get_node(node_id))
        if loaded.node is None:
            onward = merges.records(merged_id=normalize_graph_node_id(node_id), active=True, limit=1)
            if not onward:
                return loaded
            loaded.node, loaded.redirected_from = graph.get_node(onward[0].into_id), onward[0].merged_id
            if loaded.node is None:
                return loaded
        if as_of is None:
            _load_shown(db, loaded, loaded.node.id, limit)
        else:
            loaded.edges = graph.edges_of(loaded.node.id)
            loaded.neighbours = graph.get_nodes({e.source for e in loaded.edges} | {e.target for e in loaded.edges})
            nodes, loaded.edges, known = _as_of_subgraph(db, [loaded.node, *loaded.neighbours.values()], loaded.edges, as_of)
            by_id = {n.id: n for n in nodes}
            if loaded.node.id not in by_id:
                return _Loaded(redirected_from=loaded.redirected_from)
            loaded.node, loaded.neighbours = by_id[loaded.node.id], by_id
            loaded.edges = [e for e in loaded.edges if loaded.node.id in (e.source, e.target)]
            loaded.points = [p.as_dict() for p in known.get(loaded.node.id, [])]
        loaded.merged_from = [
            {"merged_id": r.merged_id, "rule": r.rule, "score": r.score, "created_at": r.created_at, "evidence": r.evidence}
            for r in merges.records(into_id=loaded.node.id, active=True)
        ]
        return loaded


async def show_node(settings: Settings, node_id: str, *, limit: int | None = None, as_of: str | None = None,
                    open_db: GraphOpener = open_graph_db, chroma_seconds: float | None = None) -> dict[str, Any] | None:
    """The ``show`` view of one node, with the text of the turns it came from (read from Chroma;
    at most ``limit`` edges, sources and turns, see :func:`pipelines.query.node_view`); ``None`` when the
    graph has no such node. When Chroma cannot be read (within ``chroma_seconds``, when given) the
    view still comes back, without turn texts and with ``turns_error``. ``open_db`` opens the graph."""
    loaded = await anyio.to_thread.run_sync(_load_node, settings, node_id, as_of, limit, open_db)
    node, edges = loaded.node, loaded.edges
    if node is None:
        return None
    turns: dict[str, Any] = {}
    error = None
    memory_ids = list(loaded.counted.turn_ids) if loaded.counted else turn_memory_ids(node, edges, loaded.points)[:limit]
    if memory_ids:
        try:
            with anyio.fail_after(chroma_seconds):
                rows = await ChromaStore(settings).memories_by_ids([row_suffix(m) for m in memory_ids])
        except ChromaStoreError as exc:
            rows, error = [], str(exc)
        except TimeoutError:
            rows, error = [], f"Chroma did not answer within {chroma_seconds:g} s"
        turns = {memory_node_id(r.id): r for r in rows or []}
    view = node_view(node, edges, loaded.neighbours, turns, points=loaded.points, merged_from=loaded.merged_from, limit=limit,
                     counted=loaded.counted)
    view["turns_error"] = error
    view["redirected_from"] = loaded.redirected_from
    return view


def unmerge_node(settings: Settings, node_id: str) -> list[dict[str, Any]]:
    """Undo the merges of ``node_id`` (see :meth:`store.merges.MergeStore.unmerge`), unless the node
    it brings back is named as ``forget --node`` keeps out (:class:`pipelines.forget.KeptOut`:
    nothing changed)."""
    from pipelines.forget import refusing_kept_out

    node_id = normalize_graph_node_id(node_id)
    with open_graph_db(settings) as db:
        unit = DatabaseUnitOfWork(db)
        # The names it takes back are those of the nodes it was merged into.
        into = [record.into_id for record in unit.merges.records(merged_id=node_id, active=True)]
        return refusing_kept_out(unit, [node_id], lambda: unit.merges.unmerge(node_id), what="unmerge", taking_from=into)


def identity_candidates(settings: Settings, *, limit: int | None = 50) -> tuple[list[dict[str, Any]], int]:
    """The reported identity pairs to review (best score first, at most ``limit``; ``None``: all)
    and how many there are in all."""
    with open_graph_db(settings) as db:
        merges = MergeStore(db)
        return merges.candidates(limit=limit), merges.candidate_count()


def merge_node(settings: Settings, merged_id: str, into_id: str) -> int:
    """Fold ``merged_id`` into ``into_id`` by hand (an operator confirming a reported candidate),
    unless ``into_id`` would take a name ``forget --node`` keeps out of its type
    (:class:`pipelines.forget.KeptOut`: nothing changed)."""
    from pipelines.forget import refusing_kept_out

    merged_id, into_id = normalize_graph_node_id(merged_id), normalize_graph_node_id(into_id)
    with open_graph_db(settings) as db:
        unit = DatabaseUnitOfWork(db)
        return refusing_kept_out(unit, [into_id], lambda: unit.merges.merge_nodes(
            merged_id, into_id, rule="manual", score=1.0, evidence={"by": "operator"}, anchor_labels=ANCHOR_LABELS
        ), what="merge", taking_from=[merged_id])


def keep_apart(settings: Settings, node_id: str, other_id: str) -> bool:
    """Record by hand that two knowledge nodes are different things (an operator answering a
    reported candidate "not the same"): off the review list, and identity resolution never links,
    pairs or asks about them again (:meth:`store.merges.MergeStore.keep_apart`). Returns whether
    it was new."""
    with open_graph_db(settings) as db:
        return DatabaseUnitOfWork(db).merges.keep_apart(node_id, other_id, anchor_labels=ANCHOR_LABELS) == 1


def undo_apart(settings: Settings, node_id: str, other_id: str) -> bool:
    """Take back :func:`keep_apart` (:meth:`store.merges.MergeStore.undo_apart`)."""
    with open_graph_db(settings) as db:
        return DatabaseUnitOfWork(db).merges.undo_apart(node_id, other_id)


def kept_apart(settings: Settings, *, limit: int | None = 50) -> tuple[list[dict[str, Any]], int]:
    """The pairs kept apart, newest first, with who said so (at most ``limit``; ``None``: all),
    and how many there are in all."""
    with open_graph_db(settings) as db:
        merges = MergeStore(db)
        return merges.kept_apart(limit=limit), merges.kept_apart_count()


@dataclass(frozen=True, slots=True)
class GraphReviewDesk:
    """:class:`pipelines.review.ReviewDesk` over the graph database, off the event loop."""

    unit: DatabaseUnitOfWork

    async def nodes(self, node_ids: Collection[str]) -> dict[str, NodeRef]:
        graph = GraphStore(self.unit.db)
        rows = await anyio.to_thread.run_sync(lambda: graph.node_names(exclude_labels=ANCHOR_LABELS, ids=node_ids))
        return {ref.id: ref for ref in node_refs(rows)}

    async def first_texts(self, node_ids: Collection[str], *, points: int) -> dict[str, list[str]]:
        return await StoredVerdicts(VerdictStore(self.unit.db)).first_texts(node_ids, points=points)

    async def link(self, node_id: str, into_id: str, *, score: float, options: Sequence[str]) -> int:
        from pipelines.forget import KeptOut, refusing_kept_out
        from store.merges import MergeError

        def merge() -> int:
            return refusing_kept_out(self.unit, [into_id], lambda: self.unit.merges.merge_nodes(
                node_id, into_id, rule="auditor", score=score, evidence={"by": JUDGE, "options": list(options)},
                anchor_labels=ANCHOR_LABELS,
            ), what="merge", taking_from=[node_id])

        try:
            return await anyio.to_thread.run_sync(merge)
        except (MergeError, KeptOut) as exc:
            raise LinkRefused(str(exc)) from exc

    async def keep_apart(self, node_id: str, others: Sequence[str]) -> None:
        await anyio.to_thread.run_sync(partial(self.unit.merges.keep_apart, node_id, *others, anchor_labels=ANCHOR_LABELS, decided_by=JUDGE))


async def settle_review_list(
    settings: Settings, judge: Auditor, *, limit: int | None = 50, across: bool = False, cross_type: bool = False,
    sweep: ReviewSweep | None = None,
) -> ReviewSweep:
    """Settle the review list with ``judge`` (a :meth:`pipelines.judge.ModelJudge.audit_identity`),
    and with ``across`` the graph's names beside longer ones of their type
    (:func:`pipelines.review.with_graph_extensions`: the graph's knowledge nodes read whole), and
    with ``cross_type`` the pairs across types:
    at most ``limit`` questions (``None``: all), each
    answer applied before the next is asked, the figures kept in ``sweep`` as they come
    (:func:`pipelines.review.judge_review_list`). The caller holds the cycle's single-flight lock."""
    with open_graph_db(settings) as db:
        unit = DatabaseUnitOfWork(db)
        pairs = await anyio.to_thread.run_sync(lambda: unit.merges.candidates(limit=None))
        if across:
            provenance = ProvenanceStore(db)
            # A node's sessions and notes files, read once however many crowded names it extends.
            anchors_of = cache(lambda node_id: provenance.node_sources(node_id)[0])

            def said_with(short: str, longer: Collection[str]) -> list[set[str]]:
                # Session by session (or notes file), the longer names said where the short one is.
                together: dict[str, set[str]] = {}
                for node_id in longer:
                    for anchor in anchors_of(node_id) & anchors_of(short):
                        together.setdefault(anchor, set()).add(node_id)
                return list(together.values())

            def across_pairs() -> list[Mapping[str, Any]]:
                index = AliasIndex.build(node_refs(GraphStore(db).node_names(exclude_labels=ANCHOR_LABELS)))
                return with_graph_extensions(pairs, index, blocked=unit.merges.blocked_pairs(), said_with=said_with)

            pairs = await anyio.to_thread.run_sync(across_pairs)
        return await judge_review_list(pairs, GraphReviewDesk(unit), judge, limit=limit, cross_type=cross_type, sweep=sweep)


class NodeNotChosen(Exception):
    """``forget --node`` named no single knowledge node: ``status`` 1 (no such node) or 2 (several
    nodes have that name, or it is a session, turn or notes file); nothing was changed."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def exactly_named(rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The search rows (:func:`pipelines.query.search_row`) whose name or an alias is ``name``, case
    folded and NFC (``e`` + U+0301 is ``é``): the look-up ``show NAME`` and ``forget --node NAME`` share."""
    named = unicodedata.normalize("NFC", name).casefold()
    return [r for r in rows if named in {a.casefold() for a in [r["name"], *r["aliases"]]}]


def choose_node(db: Database, given: str) -> str:
    """The knowledge node ``given`` names: its id (``TYPE:name`` as ``show`` prints it), else the one
    node whose name or alias it is (:func:`exactly_named`), else the one forgotten node it names
    (:func:`forgotten_under`: the forget run again). :class:`store.ids.InvalidIdError` for
    an id too long or with forbidden characters; :class:`NodeNotChosen` otherwise."""
    kind = row_kind(given) or ("note" if given.partition(":")[0].lower() == "note" and ":" in given else None)
    if kind is not None:
        raise NodeNotChosen(f"{given} is a {'turn' if kind == 'memory' else kind}, not a knowledge node: use forget --{kind}", 2)
    node_id = normalize_graph_node_id(given)
    graph = GraphStore(db)
    node = graph.get_node(node_id)
    if node is not None and node.label in ANCHOR_LABELS:
        flag = {MEMORY_LABEL: "memory", SESSION_LABEL: "session", NOTE_LABEL: "note"}[node.label]
        raise NodeNotChosen(f"{node_id} is a {node.label} node, not a knowledge node: use forget --{flag}", 2)
    if node is not None:
        return node.id
    named = exactly_named([search_row(n) for n in graph.search_nodes(given, limit=None, exclude_labels=ANCHOR_LABELS)], given)
    if not named and len(held := forgotten_under(SuppressionStore(db), given)) == 1:
        return held[0].node_id  # forgotten already: the forget run again, which keeps it out as it was
    if not named:
        raise NodeNotChosen(f"no knowledge node {given!r} (an id as show prints it, or a name or alias): nothing was changed", 1)
    if len(named) > 1:
        raise NodeNotChosen(f"{len(named)} nodes are named {given!r}: {', '.join(sorted(r['id'] for r in named))}; "
                            "forget one by its id (nothing was changed)", 2)
    return str(named[0]["id"])


def forgotten_under(suppressions: SuppressionStore, given: str) -> list[Suppression]:
    """The forgotten nodes ``given`` names: by its id, else by a name or alias it was kept out
    under (case and NFC folded): what ``forget --node`` (run again) and ``--undo`` take."""
    return suppressions.holding(given) or suppressions.holding(key=unicodedata.normalize("NFC", given.strip()).casefold())


def forgotten_nodes(settings: Settings, given: str) -> list[str]:
    """The ids of the forgotten nodes ``given`` names (:func:`forgotten_under`): ``show`` of one
    says it is kept out rather than never there."""
    with open_graph_db(settings) as db:
        return [s.node_id for s in forgotten_under(SuppressionStore(db), given)]


def unforget_node(settings: Settings, given: str) -> dict[str, Any]:
    """``forget --node … --undo``: lift the suppression of the node ``given`` names (its id, or a
    name or alias it was kept out under) and mark the sessions that had said it for re-extraction
    (:func:`pipelines.forget.lift_node`). :class:`NodeNotChosen` when none or several are suppressed
    under it."""
    from pipelines.forget import lift_node

    normalize_graph_node_id(given)  # validated as an id is
    with open_graph_db(settings) as db:
        unit = DatabaseUnitOfWork(db)
        held = forgotten_under(unit.suppressions, given)
        if not held:
            raise NodeNotChosen(f"no forgotten node {given!r} (rem-cycle forget --node took none out under that id or name)", 1)
        if len(held) > 1:
            raise NodeNotChosen(f"{len(held)} forgotten nodes were named {given!r}: {', '.join(s.node_id for s in held)}; "
                                "undo one by its id (nothing was changed)", 2)
        return lift_node(unit, held[0].node_id)


def forget(settings: Settings, *, session: str | None = None, memory: str | None = None, note: str | None = None,
           node: str | None = None, dry_run: bool = False) -> dict[str, Any]:
    """``forget``: one session, turn, imported notes file or knowledge node (``node``: an id, name or
    alias, :func:`choose_node`) out of the graph (see :mod:`pipelines.forget`),
    then the lines its extraction queued out of the lazy-edge queue and its text out of the
    database's files as far as the engine allows. The forget records both as due in its own
    transaction (``queue_withdrawals``, ``rem_counters`` ``erase_due``), then does them
    (:func:`withdraw_retracted`, :func:`erase_when_due`), which clears the records: a kill, a busy
    queue or a held-back erase in between leaves them to the next cycle or ``rem-cycle drain``.
    The report's ``erased`` says whether the erase completed. A dry run counts this forget's lines
    and changes nothing."""
    from pipelines.forget import forget_memory, forget_node, forget_note, forget_session
    from pipelines.notes import note_anchor

    with open_graph_db(settings) as db:
        unit = DatabaseUnitOfWork(db)
        chosen = choose_node(db, node) if node is not None else None

        def forget_one() -> tuple[dict[str, Any], tuple[str, str]]:
            if chosen is not None:
                report = forget_node(unit, chosen, dry_run=dry_run)
                return report, _forget_record(report)
            if session is not None:
                report = forget_session(unit, row_id_given(session, "session"), dry_run=dry_run)
                return report, _forget_record(report)
            if memory is not None:
                report = forget_memory(unit, row_id_given(memory, "memory"), dry_run=dry_run)
                return report, _forget_record(report)
            note_id, key = note_anchor(note or "")
            return forget_note(unit, note_id, key, dry_run=dry_run), (key, WHOLE_ANCHOR)

        if dry_run:  # it rolls its own transaction back: inside one of this function's, its work would be kept
            report, (key, turn) = forget_one()
            report.update(withdraw_queued_lines(db, _lines_of(key, turn), queue=LazyEdgeQueue(settings.queue_path), dry_run=True))
            return report
        with unit.transaction():
            report, (key, turn) = forget_one()
            unit.withdrawals.record(key, None if turn == WHOLE_ANCHOR else [turn], extraction_stands=False)
        # The forget has committed, and what is left is recorded: the database failing now (locked
        # past the wait, gone, its disk full) is said beside the report, as a busy queue and a
        # held-back erase are — the forget is done, and the next cycle or drain finishes the rest.
        withdrawn = withdraw_retracted_despite_failure(db, queue=LazyEdgeQueue(settings.queue_path), held=held_answers_file(settings))
        del withdrawn["retractions_withdrawn"]  # the records read: this forget's, and any a killed process left
        report.update(withdrawn)
        try:
            # {} only when another process's erase, begun after this commit, completed meanwhile (it took this mark off).
            report.update(erase_when_due(db, at_once=True) or {"erased": True})
        except DatabaseError as exc:
            report.update(erased=False, erase_error=str(exc))
        return report


def _forget_record(report: Mapping[str, Any]) -> tuple[str, str]:
    """The ``queue_withdrawals`` row ``(chunk key, turn)`` of what the forget of a session, a turn
    or a knowledge node (``report``) took out. A turn's session is unknown (:data:`store.withdrawals.SESSION_UNKNOWN`)
    when a forget of it committed before (this is that forget run again) or the graph never had it;
    a node's row has no anchor and the node's id as its turn (:func:`_lines_of`)."""
    from pipelines.forget import NODE
    from store.tombstones import MEMORY

    if report["kind"] == NODE:
        return SESSION_UNKNOWN, report["id"]
    if report["kind"] != MEMORY:
        return report["id"], WHOLE_ANCHOR
    return report.get("session") or SESSION_UNKNOWN, memory_node_id(report["id"])


def _lines_of(chunk_key: str, turn: str) -> ExtractionLines:
    """The queue lines a ``queue_withdrawals`` row ``(chunk_key, turn)`` stands for: the anchor's
    (``turn`` :data:`store.withdrawals.WHOLE_ANCHOR`), or the turn's of it, or of no known session;
    a knowledge node's id in place of a turn (``forget --node``): the lines from that node."""
    if turn == WHOLE_ANCHOR:
        return ExtractionLines.of(chunk_key)
    if row_kind(turn) != "memory":
        return ExtractionLines({}, sources=frozenset({turn}))
    return ExtractionLines.of(None if chunk_key == SESSION_UNKNOWN else chunk_key, turn=turn)


def withdraw_retracted(
    db: Database, *, queue: LazyEdgeQueue, held: HeldAnswersFile | None = None, wait_seconds: float | None = None,
) -> dict[str, Any]:
    """``{"queue_lines_withdrawn": n, "retractions_withdrawn": m}``: the queue lines the extraction
    of every retraction, forget and rewrite recorded in ``queue_withdrawals`` queued
    (store/withdrawals.py: this process's, and any a process killed before its withdrawal left) are
    withdrawn in one pass (:func:`withdraw_queued_lines`), then those ``m`` records deleted. With
    ``queue_error`` (a drain held the files past ``wait_seconds`` (None:
    :data:`_QUEUE_WAIT_SECONDS`), an unsafe file) the records stay, for the next cycle. Given
    ``held`` (the data dir's file of paid answers the database refused), the answers quoting what
    the records name leave it first (``held_answers_error`` when the file refuses; the records
    settle all the same: an extract phase drops a taken-out turn's answers itself, and a rewritten
    turn's old answer once its session is digested again). None recorded: one look at an empty
    table, no file read."""
    records = QueueWithdrawalStore(db)
    due = records.pending()
    if not due:
        return {"queue_lines_withdrawn": 0, "retractions_withdrawn": 0}
    scrubbed = {} if held is None else _scrub_held_answers(held, due)
    lines = ExtractionLines.union(_lines_of(key, turn) for key, turn in due)
    done = withdraw_queued_lines(db, lines, queue=queue, wait_seconds=wait_seconds)
    if "queue_error" in done:
        return {**done, **scrubbed, "retractions_withdrawn": 0}
    records.settle(due)
    return {**done, **scrubbed, "retractions_withdrawn": len(due)}


def _scrub_held_answers(held: HeldAnswersFile, due: Collection[tuple[str, str]]) -> dict[str, str]:
    """The answers of the held answers' file ``held`` that quote what the withdrawal records
    ``due`` name — a whole anchor, or a turn (``memory:<id>``) — out of it; ``held_answers_error``
    when the file refused (logged)."""
    from worker.held_answers import drop_withdrawn_from_file

    try:
        drop_withdrawn_from_file(held, sessions={key for key, turn in due if turn == WHOLE_ANCHOR},
                                 memories={row_suffix(turn) for _, turn in due if row_kind(turn) == "memory"})
    except OSError as exc:
        log.error("held answers file not scrubbed of what was taken out or rewritten: the next extract phase drops "
                  "what was taken out; a rewritten turn's old answer stays until its session is digested again",
                  path=str(held.path), error=str(exc))
        return {"held_answers_error": str(exc)}
    return {}


def _forgets_left_unfinished(settings: Settings, db: Database) -> tuple[set[str], str]:
    """The anchors (a notes file's key) whose recorded queue lines are still due once this process
    has withdrawn what is recorded (:func:`withdraw_retracted`): a forget killed, or one whose
    drain held the queue files, left them; the files refuse the withdrawal still (a drain holds
    them, a link planted at a file's name, a full disk) — and why. An import of such a file would
    queue lines the record names and a later withdrawal would take (``import-notes`` extracts
    without a session's claim, which keeps a cycle from extracting a session in that state)."""
    done = withdraw_retracted(db, queue=LazyEdgeQueue(settings.queue_path), held=held_answers_file(settings))
    if "queue_error" not in done:
        return set(), ""
    return {key for key, _ in QueueWithdrawalStore(db).pending()}, done["queue_error"]


def withdraw_retracted_despite_failure(db: Database, *, queue: LazyEdgeQueue, held: HeldAnswersFile | None = None) -> dict[str, Any]:
    """:func:`withdraw_retracted` while what runs it is failing or stopping (a cycle's ingest phase,
    a backfill a signal or Chroma stopped), or after what it finishes has committed (a forget): an
    error of the withdrawal is returned as ``queue_error`` beside zero counts, never raised, so the
    caller's own error (or report) is the one it ends with. The records stay: the next cycle
    withdraws their lines."""
    try:
        return withdraw_retracted(db, queue=queue, held=held)
    except Exception as exc:  # noqa: BLE001 - the caller's error is being raised; this one is reported beside it
        return {"queue_lines_withdrawn": 0, "retractions_withdrawn": 0, "queue_error": f"{type(exc).__name__}: {exc}"}


def withdraw_queued_lines(
    db: Database, lines: ExtractionLines, *, queue: LazyEdgeQueue | None, dry_run: bool = False,
    wait_seconds: float | None = None,
) -> dict[str, Any]:
    """``{"queue_lines_withdrawn": n}``: the lines rem-cycle's own extraction queued for what a
    forget or a cycle's retraction took out (``lines``; they name what it said, which no drain can
    link any more) leave the queue table of ``db`` and, given ``queue``, the queue files, with
    their dead letters — the table's rows deleted, the files' lines blanked in place under the
    drain's lock (:meth:`store.lazy_queue.LazyEdgeQueue.blank`), each table and file read once
    however many sessions and turns ``lines`` holds. An agent's lines stay. With ``queue_error``
    when a running drain held the lock past ``wait_seconds`` (None: :data:`_QUEUE_WAIT_SECONDS`, read
    when called, so that a test can shorten it): the table's are gone, the files' stay (their
    record too: :func:`withdraw_retracted`).
    ``lines`` empty: nothing is read. ``dry_run``: counts them, changing nothing."""
    if not lines:
        return {"queue_lines_withdrawn": 0}
    withdrawn = LazyEdgeTable(db).withdraw(lines.filters, lines.matches, dry_run=dry_run)
    if queue is None or not queue.path.parent.is_dir():  # no queue file was ever written there
        return {"queue_lines_withdrawn": withdrawn}
    deadline = time.monotonic() + (_QUEUE_WAIT_SECONDS if wait_seconds is None else wait_seconds)
    while True:
        try:
            if dry_run:
                return {"queue_lines_withdrawn": withdrawn + queue.blank(lines.matches, lines.matches_dead_letter, dry_run=True)}
            with queue.exclusive():
                return {"queue_lines_withdrawn": withdrawn + queue.blank(lines.matches, lines.matches_dead_letter)}
        except QueueBusyError as exc:
            if time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            return {"queue_lines_withdrawn": withdrawn, "queue_error": str(exc)}
        except OSError as exc:  # a link planted at a queue file's name (UnsafePathError), a full disk
            return {"queue_lines_withdrawn": withdrawn, "queue_error": str(exc)}


def erase_when_due(db: Database, *, now: float | None = None, at_once: bool = False) -> dict[str, Any]:
    """Erase deleted text from the database's files when a deletion made that due (store/erasure.py:
    a forget, a retraction, or the commit that replaced what the model said of a retracted turn —
    this process's, one a killed process left, another worker's), as a forget, a cycle's
    ``finalize``, a backfill and a drain do. Only then: the erase rewrites the full-text indexes;
    otherwise one read of three counter rows. ``{}`` when none is due;
    ``erase_due``/``erase_failures``/``erase_retry_at`` when the last erase did not complete and its
    retry is not yet (``now``, Unix seconds: the clock by
    default); else :func:`erase_deleted_text`'s report, with the failures and the retry time when
    this erase did not complete either (the counter stays, for the retry). ``at_once``: try even
    before that retry time (an operator's command that has just deleted text: a forget, a backfill)."""
    erasures = EraseDueStore(db)
    now = time.time() if now is None else now
    state = erasures.state()
    if not state.due:
        return {}
    if state.waiting(now) and not at_once:
        return state.as_dict()
    done = erase_deleted_text(db)
    if done["erased"]:
        erasures.settle(state.due)
        return done
    state = erasures.failed(now)
    log.warning("deleted text that was asked to be forgotten may stay in the database's files until an erase completes",
                reason=done.get("erase_error", "another process kept reading an older snapshot"), **state.as_dict())
    return {**done, **state.as_dict()}


def erase_deleted_text(db: Database) -> dict[str, Any]:
    """``{"erased": …}`` after ``db.erase_deleted()`` (and ``erase_error``, why not, when the
    database refused it: busy past the wait, a lock): what deleted the text has committed either
    way, and the erase stays due (:func:`erase_when_due`'s retry)."""
    try:
        return {"erased": db.erase_deleted()}
    except DatabaseError as exc:
        return {"erased": False, "erase_error": str(exc)}


def forgotten_and_paid_in_place(settings: Settings, answers: TextIO) -> tuple[list[tuple[str, str]], list[Suppression], str | None]:
    """The tombstones ``(kind, id)`` and the node suppressions (``forget --node``) of the graph
    database a restore is about to replace — what ``forget`` took out, which a backup made before
    must not bring back — and, when that database cannot be read (damaged: the reason to
    restore), why not, with neither. Its chunk
    extractions the model was paid for are written to ``answers`` (JSON lines, for
    :func:`keep_answers`): a backup made before them would have the model asked again."""
    from store.chunks import ChunkResultStore
    from store.errors import StoreError
    from store.tombstones import MEMORY, SESSION, TombstoneStore

    if not database_exists(settings):
        return [], [], None
    try:
        db = open_database(settings, readonly=True)
        try:
            for row in ChunkResultStore(db).answers():
                answers.write(json.dumps(row) + "\n")
            store = TombstoneStore(db)
            # A database this code never opened (opened read-only: not migrated) has no suppressions.
            suppressions = SuppressionStore(db).all() if db.schema_version >= SUPPRESSIONS_VERSION else []
            return sorted((kind, item_id) for kind in (SESSION, MEMORY) for item_id in store.buried(kind)), suppressions, None
        finally:
            db.close()
    except StoreError as exc:
        answers.seek(0)
        answers.truncate()
        return [], [], str(exc)


def keep_answers(db: Database, answers: TextIO, *, batch: int = 500) -> int:
    """Write into ``db`` (a restored backup, before anything reads it) the extractions of
    ``answers`` (:func:`forgotten_and_paid_in_place`) it has no answer for; returns how many."""
    from store.chunks import ChunkResultStore

    store = ChunkResultStore(db)
    answers.seek(0)
    kept = 0
    while lines := list(itertools.islice(answers, batch)):
        kept += store.keep_answers(json.loads(line) for line in lines)
    return kept


def forget_again(db: Database, tombstones: list[tuple[str, str]], suppressions: Collection[Suppression] = ()) -> dict[str, int]:
    """Forget in ``db`` (a restored backup before anything reads it) every session and turn of
    ``tombstones`` it has no tombstone for, and every node of ``suppressions`` it does not keep
    out (recording the suppression whether or not the backup has the node), as ``rem-cycle
    forget`` would (the lines its queue table holds of their extraction too); returns how many of
    each kind."""
    from pipelines.forget import forget_memory, forget_node, forget_session
    from store.tombstones import MEMORY, SESSION, TombstoneStore

    carried = {"sessions": 0, "memories": 0, "nodes": 0}
    if not tombstones and not suppressions:
        return carried
    unit = DatabaseUnitOfWork(db)
    for suppression in suppressions:
        if unit.suppressions.holding(suppression.node_id):
            continue
        report = forget_node(unit, suppression.node_id, carried_over=suppression)
        carried["nodes"] += 1
        withdraw_queued_lines(db, _lines_of(*_forget_record(report)), queue=None)
    buried = {kind: TombstoneStore(db).buried(kind, [i for k, i in tombstones if k == kind]) for kind in (SESSION, MEMORY)}
    for kind, item_id in tombstones:
        if item_id in buried[kind]:
            continue
        if kind == SESSION:
            report = forget_session(unit, item_id)
            carried["sessions"] += 1
        else:
            report = forget_memory(unit, item_id)
            carried["memories"] += 1
        # The backup's queue table may hold what its extraction queued (the queue files are not in it).
        withdraw_queued_lines(db, _lines_of(*_forget_record(report)), queue=None)
    if any(carried.values()):
        db.erase_deleted()  # the backup's copy of the text must not stay in the restored files either
    return carried


async def import_notes(settings: Settings, paths: list[str], *, results: list[NoteResult] | None = None) -> dict[str, Any]:
    """``import-notes``: every Markdown/text file named or under the folders named, through the
    extraction path with the file as provenance anchor (see :mod:`pipelines.notes`), holding the
    graph's single-flight lock (:class:`worker.cycle.CycleBusyError` when a cycle runs). ``results``,
    when given, gets each file's result as it begins, filled as it goes (a command stopped by a
    signal says from it what was imported)."""
    from pipelines.notes import find_note_paths

    files, errors = await anyio.to_thread.run_sync(find_note_paths, paths)
    if not files and not await anyio.to_thread.run_sync(database_exists, settings):
        # Nothing to import and no graph whose notes could be gone: a mistyped path creates none.
        return {"files": [], "errors": errors, "imported": 0, "unchanged": 0, "failed": 0, "gone": []}
    from worker.cycle import graph_single_flight  # worker.cycle imports this module

    async with graph_single_flight(settings):
        return await _import_note_files(settings, paths, files, errors, [] if results is None else results)


async def _import_note_files(
    settings: Settings, paths: list[str], files: list[tuple[Path, str]], errors: list[str], done: list[NoteResult]
) -> dict[str, Any]:
    """:func:`import_notes` once the files are found and the graph's single-flight lock is held;
    each file's result goes into ``done`` as it begins."""
    from datetime import UTC, datetime

    from pipelines.extract.workflow import open_extractor
    from pipelines.notes import NOT_IMPORTED, NoteReadError, NotesEnv, NoteResult, import_note, read_note, vanished

    db = await anyio.to_thread.run_sync(open_database, settings)
    try:
        unfinished, why = await anyio.to_thread.run_sync(_forgets_left_unfinished, settings, db)
        async with open_extractor(settings) as extractor:
            judge, _ = await judge_checked(settings, extractor)
            env = NotesEnv(
                unit=DatabaseUnitOfWork(db), extractor=extractor,
                semantic_types=settings.semantic_types, budget_tokens=settings.chunk_budget_tokens,
                concurrency=settings.llm_concurrency, retry_base_seconds=settings.chunk_retry_base_seconds,
                retry_max_seconds=settings.chunk_retry_max_seconds, now=datetime.now(UTC),
                resolver=identity_resolver(db, auditor=judge.audit_identity if judge else None),
                queue=lazy_edge_sink(settings, db), merges=MergeStore(db),
            )
            for path, shown in files:  # one file's text held at a time
                try:
                    note = await anyio.to_thread.run_sync(read_note, path, shown)
                except NoteReadError as exc:
                    errors.append(str(exc))
                    continue
                if note.key in unfinished:
                    done.append(NoteResult(note.note_id, note.shown, "failed", error=(
                        "its forget is not finished: the lines its old extraction queued are still in the queue "
                        f"files, which refused their withdrawal ({why}), and it would take this import's with "
                        "them; run import-notes again once a withdrawal gets through (rem-cycle drain says)")))
                    continue
                done.append(NoteResult(note.note_id, note.shown, NOT_IMPORTED))
                await import_note(note, env, done[-1])
            folders = [Path(p).resolve() for p in paths if Path(p).is_dir()]
            notes = await anyio.to_thread.run_sync(GraphStore(db).nodes_by_label, NOTE_LABEL) if folders else []
    finally:
        db.close()
    counts = {status: sum(1 for r in done if r.status == status) for status in ("imported", "unchanged", "failed")}
    return {"files": [r.as_dict() for r in done], "errors": errors, **counts, "gone": vanished(notes, folders, (path for path, _ in files), exists=os.path.lexists)}

