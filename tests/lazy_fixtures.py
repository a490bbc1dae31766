"""Helpers shared by the lazy-queue, drain and back-fill tests (real files, real embedded Chroma)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from config import Settings
from pipelines.drain import DrainStats, drain_queue
from pipelines.importer import import_sessions
from store.graph import GraphStore, Node
from store.lazy_queue import LazyEdgeQueue
from store.lazy_table import LazyEdgeTable
from tests.conftest import make_session, write_sessions
from worker.cycle import Stores


async def seed_chroma(stores: Stores, settings: Settings, sessions: list[dict[str, Any]], tmp: Path) -> None:
    """Import ``sessions`` (conftest ``make_session`` dicts) into the embedded Chroma."""
    path = write_sessions(tmp / "seed-sessions.jsonl", sessions)
    stats = await import_sessions(
        path,
        chroma=stores.chroma,
        memory_collection=settings.memory_collection,
        summary_collection=settings.session_collection,
    )
    assert not stats.bad_lines


async def seed_standard(stores: Stores, settings: Settings, tmp: Path) -> None:
    """Sessions s-1, s-2 (3 turns, with summaries) and s-nosum (2 turns, no summary row)."""
    await seed_chroma(
        stores,
        settings,
        [make_session("s-1"), make_session("s-2"), make_session("s-nosum", 2, summary=False)],
        tmp,
    )


def add_concepts(graph: GraphStore, *names: str) -> list[str]:
    """Create ``CONCEPT:<name>`` nodes; returns their ids."""
    nodes = [Node(f"CONCEPT:{name}", "CONCEPT", name) for name in names]
    graph.upsert_nodes(nodes)
    return [n.id for n in nodes]


def queue_of(settings: Settings) -> LazyEdgeQueue:
    return LazyEdgeQueue(settings.queue_path)


def table_of(stores: Stores) -> LazyEdgeTable:
    """The queue table of the stores' graph database."""
    return LazyEdgeTable(stores.db)


async def drain(settings: Settings, stores: Stores, **options: Any) -> DrainStats:
    """Drain the settings' queue with the stores and settings defaults."""
    options.setdefault("max_attempts", settings.lazy_max_attempts)
    options.setdefault("batch_size", settings.write_batch_size)
    options.setdefault("unit", stores.unit)
    options.setdefault("chroma", stores.chroma)
    queue = options.pop("queue", None) or queue_of(settings)
    return await drain_queue(queue, **options)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def edge_count(graph: GraphStore, relationship: str | None = None) -> int:
    if relationship is None:
        return graph.db.query("SELECT COUNT(*) FROM edges")[0][0]
    return graph.db.query("SELECT COUNT(*) FROM edges WHERE relationship = ?", (relationship,))[0][0]


def graph_dump(graph: GraphStore) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every node and edge row, for before/after comparisons."""
    nodes = [tuple(r) for r in graph.db.query("SELECT * FROM nodes ORDER BY id")]
    edges = [tuple(r) for r in graph.db.query("SELECT * FROM edges ORDER BY source, target, relationship")]
    return nodes, edges
