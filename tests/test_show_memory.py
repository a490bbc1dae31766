"""``show`` of a node with a hundred thousand points runs in bounded memory: it reads the edges,
sources, turns and points it prints (``--limit``) and counts the rest in SQL. The node is built
directly through the stores (points, the ``MENTIONED_IN``/``DISCUSSED_IN`` edges commits derive
from them, the sessions and turns they point at), at 10,000 and 100,000 points; the Python heap's
peak while showing it (tracemalloc) must not grow with the point count."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import pytest
from filelock import FileLock

from config import Settings, load_settings
from store.db import Database
from store.graph import Edge, GraphStore, Node
from store.provenance import NodePointRow, PointRow, ProvenanceStore, anchor_edges
from tests.conftest import run_temp_dir
from worker.knowledge import show_node

HOT = "CLASS:GraphStore"
TURNS_PER_SESSION = 10


def build(data: Path, points: int) -> Settings:
    """A graph whose node ``HOT`` has ``points`` points, one per turn, ten turns per session, and a
    few semantic edges."""
    settings = load_settings(data_dir=data)
    data.mkdir(parents=True)
    db = Database(settings.graph_path)
    graph, provenance = GraphStore(db), ProvenanceStore(db)
    try:
        with db.transaction():
            graph.upsert_nodes([Node(HOT, "CLASS", "GraphStore", {"description": "keeps the graph"}),
                                *[Node(f"CLASS:Peer{i}", "CLASS", f"Peer{i}") for i in range(30)]])
            graph.link_nodes([Edge(HOT, f"CLASS:Peer{i}", "DEPENDS_ON", float(i + 1), {"justification": f"peer {i}"}) for i in range(30)])
            for first in range(0, points, TURNS_PER_SESSION):
                session = f"session:s{first // TURNS_PER_SESSION:06d}"
                rows = [PointRow(session, f"memory:s{first // TURNS_PER_SESSION:06d}-t{t}", f"s{first:06d}:chunk:0", "GraphStore keeps it",
                                 f"2026-01-{1 + (first // 1000) % 28:02d}T10:00:00Z") for t in range(TURNS_PER_SESSION)]
                graph.upsert_nodes([Node(session, "SESSION", session), *[Node(r.memory, "MEMORY", r.memory) for r in rows]])
                provenance.add_node_points(NodePointRow(HOT, r, HOT) for r in rows)
                graph.link_nodes(anchor_edges(HOT, session, rows))
    finally:
        db.close()
    return settings


def built(factory: pytest.TempPathFactory, data: Path, points: int) -> Settings:
    """A copy at ``data`` of ``build(..., points)``, built once a test run (the first of
    pytest-xdist's workers to need it builds it, another waits for it): this file and
    tests/test_export_memory.py read the same two graphs, which take seconds to build (the
    100,000-point one ~10 s of CPU), and xdist seldom gives both files to one worker."""
    template = run_temp_dir(factory.getbasetemp()) / f"hot-{points}"
    with FileLock(f"{template}.lock"):
        if not (template / "ready").exists():
            shutil.rmtree(template, ignore_errors=True)
            build(template / "data", points)
            (template / "ready").touch()
    shutil.copytree(template / "data", data)
    return load_settings(data_dir=data)


async def peak_of_show(settings: Settings) -> tuple[int, dict]:
    tracemalloc.start()
    try:
        view = await show_node(settings, HOT, limit=20)
        return tracemalloc.get_traced_memory()[1], view
    finally:
        tracemalloc.stop()


async def test_show_of_a_node_with_100k_points_runs_in_bounded_memory(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                                                       clean_env) -> None:
    small, large = built(tmp_path_factory, tmp_path / "small", 10_000), built(tmp_path_factory, tmp_path / "large", 100_000)
    await show_node(small, HOT, limit=20)  # warm-up: first imports and the Chroma client
    peak_small, view_small = await peak_of_show(small)
    peak_large, view = await peak_of_show(large)
    assert view["turns_total"] == 100_000 and view_small["turns_total"] == 10_000
    assert len(view["turns"]) == 20 and view["edges_total"] == 30 and len(view["edges"]) == 20
    assert [e["node"] for e in view["edges"][:2]] == ["CLASS:Peer29", "CLASS:Peer28"]  # the heaviest first
    assert view["first_seen"] == "2026-01-01T10:00:00Z" and view["last_seen"] == "2026-01-28T10:00:00Z"
    assert len(view["sources"]) <= 20 and view["turns"][0]["evidence"] == ["GraphStore keeps it"]
    print(f"show peak: {peak_small / 1e6:.2f} MB at 10k points, {peak_large / 1e6:.2f} MB at 100k")
    assert peak_large < 1.5 * peak_small + 1_000_000, (peak_small, peak_large)
