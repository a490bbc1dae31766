"""Composition of the knowledge-quality features for the CLI and the cycle: snapshot export,
communities, the query surface (show/search) and unmerge."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from config import Settings
from pipelines.communities import Namer, name_communities, plan_communities, semantic_graph
from pipelines.export import build_snapshot
from pipelines.identity import Auditor
from pipelines.judge import ModelJudge
from pipelines.query import node_view, search_row, turn_memory_ids
from pipelines.resolver import GraphResolver, node_refs
from pipelines.vocabulary import ANCHOR_LABELS, PROVENANCE_RELATIONSHIPS
from store.chroma import ChromaStore, ChromaUnavailableError
from store.communities import CommunityStore
from store.db import Database
from store.graph import Edge, GraphStore, Node, utc_now
from store.ids import memory_node_id, normalize_graph_node_id, row_suffix
from store.lazy_queue import LazyEdgeQueue
from store.merges import MergeStore
from store.provenance import ProvenanceStore


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


def identity_resolver(db: Database, *, auditor: Auditor | None = None) -> GraphResolver:
    """The extraction commit's identity resolution over the graph in ``db``."""
    graph = GraphStore(db)
    return GraphResolver(
        load_nodes=lambda: node_refs(graph.node_names(exclude_labels=ANCHOR_LABELS)),
        load_blocked=MergeStore(db).blocked_pairs,
        existing=graph.existing_ids,
        auditor=auditor,
    )


class NoGraphError(FileNotFoundError):
    """The data dir has no graph database yet."""


@contextmanager
def open_graph_db(settings: Settings) -> Iterator[Database]:
    """The existing graph database (migrated); :class:`NoGraphError` when there is none, so a read
    command never creates an empty database as a side effect."""
    if not settings.graph_path.is_file():
        raise NoGraphError(f"no graph database at {settings.graph_path} (run a REM cycle first)")
    db = Database(settings.graph_path)
    try:
        yield db
    finally:
        db.close()


def snapshot_from_db(db: Database, *, include_anchors: bool = False) -> dict[str, Any]:
    """The export snapshot of the graph in ``db``."""
    graph = GraphStore(db)
    return build_snapshot(
        graph.all_nodes(),
        graph.all_edges(),
        CommunityStore(db).all(),
        generated_at=utc_now(),
        include_anchors=include_anchors,
        points={k: [p.as_dict() for p in v] for k, v in ProvenanceStore(db).points_by_node().items()},
    )


async def refresh_communities(db: Database, *, namer: Namer | None = None) -> dict[str, Any]:
    """Detect the graph's communities, keep ids/labels stable, optionally name new ones with the
    model, and store them. Returns counts for the run record."""
    graph, communities = GraphStore(db), CommunityStore(db)

    def load() -> tuple[list[Any], list[Any], list[Any]]:
        # Anchors and provenance never take part (semantic_graph drops them): leave them, and every
        # property document, in the database.
        nodes, edges = graph.skeleton(exclude_labels=ANCHOR_LABELS, exclude_relationships=PROVENANCE_RELATIONSHIPS)
        return nodes, edges, communities.all()

    nodes, edges, previous = await anyio.to_thread.run_sync(load)
    plan = plan_communities(nodes, edges, previous)
    records, named = plan.communities, 0
    if namer is not None and records:
        names = {n.id: n.name for n in nodes}
        records, named = await name_communities(
            records, names, namer=namer, only=plan.fresh, graph=semantic_graph(nodes, edges)
        )
    written = await anyio.to_thread.run_sync(communities.replace_all, records)
    return {
        "communities": len(records),
        "unchanged": plan.unchanged,
        "carried": plan.carried,
        "new": plan.new,
        "dropped": plan.dropped,
        "named": named,
        "written": written["written"],
    }


def search_graph(settings: Settings, text: str, *, limit: int = 50, label: str | None = None) -> list[dict[str, Any]]:
    """Knowledge nodes whose name or alias contains ``text`` (case-insensitive), best first."""
    with open_graph_db(settings) as db:
        nodes = GraphStore(db).search_nodes(text, limit=limit, exclude_labels=ANCHOR_LABELS, label=label)
    return [search_row(n) for n in nodes]


@dataclass
class _Loaded:
    node: Node | None = None
    edges: list[Edge] = field(default_factory=list)
    neighbours: dict[str, Node] = field(default_factory=dict)
    merged_from: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    redirected_from: str | None = None


def _load_node(settings: Settings, node_id: str) -> _Loaded:
    """The node (or, when it was merged away, the node it was merged into), its edges and merges."""
    with open_graph_db(settings) as db:
        graph, merges = GraphStore(db), MergeStore(db)
        loaded = _Loaded(node=graph.get_node(node_id))
        if loaded.node is None:
            onward = merges.records(merged_id=normalize_graph_node_id(node_id), active=True, limit=1)
            if not onward:
                return loaded
            loaded.node, loaded.redirected_from = graph.get_node(onward[0].into_id), onward[0].merged_id
            if loaded.node is None:
                return loaded
        loaded.edges = graph.edges_of(loaded.node.id)
        loaded.points = [p.as_dict() for p in ProvenanceStore(db).node_points(loaded.node.id)]
        loaded.neighbours = graph.get_nodes({e.source for e in loaded.edges} | {e.target for e in loaded.edges})
        loaded.merged_from = [
            {"merged_id": r.merged_id, "rule": r.rule, "score": r.score, "created_at": r.created_at, "evidence": r.evidence}
            for r in merges.records(into_id=loaded.node.id, active=True)
        ]
        return loaded


async def show_node(settings: Settings, node_id: str, *, limit: int | None = None) -> dict[str, Any] | None:
    """The ``show`` view of one node, with the text of the turns it came from (read from Chroma;
    at most ``limit`` edges and turns, see :func:`pipelines.query.node_view`); ``None`` when the
    graph has no such node. When Chroma cannot be read the view still comes back, without turn
    texts and with ``turns_error``."""
    loaded = await anyio.to_thread.run_sync(_load_node, settings, node_id)
    node, edges = loaded.node, loaded.edges
    if node is None:
        return None
    turns: dict[str, Any] = {}
    error = None
    memory_ids = turn_memory_ids(node, edges, loaded.points)[:limit]
    if memory_ids:
        try:
            rows = await ChromaStore(settings).memories_by_ids([row_suffix(m) for m in memory_ids])
        except ChromaUnavailableError as exc:
            rows, error = [], str(exc)
        turns = {memory_node_id(r.id): r for r in rows or []}
    view = node_view(node, edges, loaded.neighbours, turns, points=loaded.points, merged_from=loaded.merged_from, limit=limit)
    view["turns_error"] = error
    view["redirected_from"] = loaded.redirected_from
    return view


def unmerge_node(settings: Settings, node_id: str) -> list[dict[str, Any]]:
    """Undo the merges of ``node_id`` (see :meth:`store.merges.MergeStore.unmerge`)."""
    with open_graph_db(settings) as db:
        return MergeStore(db).unmerge(node_id)


def identity_candidates(settings: Settings, *, limit: int = 50) -> tuple[list[dict[str, Any]], int]:
    """The reported identity pairs to review (best score first, at most ``limit``) and how many
    there are in all."""
    with open_graph_db(settings) as db:
        merges = MergeStore(db)
        return merges.candidates(limit=limit), merges.candidate_count()


def merge_node(settings: Settings, merged_id: str, into_id: str) -> int:
    """Fold ``merged_id`` into ``into_id`` by hand (an operator confirming a reported candidate)."""
    with open_graph_db(settings) as db:
        return MergeStore(db).merge_nodes(merged_id, into_id, rule="manual", score=1.0, evidence={"by": "operator"})


async def import_notes(settings: Settings, paths: list[str]) -> dict[str, Any]:
    """``import-notes``: every Markdown/text file named or under the folders named, through the
    extraction path with the file as provenance anchor (see :mod:`pipelines.notes`)."""
    from datetime import UTC, datetime

    from pipelines.extract.llm import OpenAIExtractor
    from pipelines.extract.workflow import open_extractor
    from pipelines.notes import NotesEnv, find_note_files, import_note
    from store.chunks import ChunkResultStore

    files, errors = await anyio.to_thread.run_sync(find_note_files, paths)
    db = await anyio.to_thread.run_sync(Database, settings.graph_path)
    try:
        async with open_extractor(settings) as extractor:
            judge = ModelJudge(extractor) if settings.llm_judge and isinstance(extractor, OpenAIExtractor) else None
            env = NotesEnv(
                graph=GraphStore(db), chunks=ChunkResultStore(db), extractor=extractor,
                semantic_types=settings.semantic_types, budget_tokens=settings.chunk_budget_tokens,
                concurrency=settings.llm_concurrency, retry_base_seconds=settings.chunk_retry_base_seconds,
                retry_max_seconds=settings.chunk_retry_max_seconds, now=datetime.now(UTC),
                resolver=identity_resolver(db, auditor=judge.audit_identity if judge else None),
                queue=LazyEdgeQueue(settings.queue_path), merges=MergeStore(db),
            )
            results = [(await import_note(note, env)).as_dict() for note in files]
    finally:
        db.close()
    counts = {status: sum(1 for r in results if r["status"] == status) for status in ("imported", "unchanged", "failed")}
    return {"files": results, "errors": errors, **counts}
