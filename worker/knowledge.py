"""Composition of the knowledge-quality features for the CLI and the cycle: snapshot export,
communities, the query surface (show/search) and unmerge."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from config import Settings
from pipelines.communities import Namer, name_communities, plan_communities, semantic_graph
from pipelines.export import build_snapshot
from store.communities import CommunityStore
from store.db import Database
from store.graph import GraphStore, utc_now


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
    )


async def refresh_communities(db: Database, *, namer: Namer | None = None) -> dict[str, Any]:
    """Detect the graph's communities, keep ids/labels stable, optionally name new ones with the
    model, and store them. Returns counts for the run record."""
    graph, communities = GraphStore(db), CommunityStore(db)

    def load() -> tuple[list[Any], list[Any], list[Any]]:
        return graph.all_nodes(), graph.all_edges(), communities.all()

    nodes, edges, previous = await anyio.to_thread.run_sync(load)
    plan = plan_communities(nodes, edges, previous)
    records, named = plan.communities, 0
    if namer is not None and records:
        names = {n.id: n.name for n in nodes}
        records, named = await name_communities(records, names, namer=namer, graph=semantic_graph(nodes, edges))
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
