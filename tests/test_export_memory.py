"""``export`` (JSON) of a node with a hundred thousand points: the points are written as they are
read from SQLite, never held, and the text is the one the whole snapshot renders to. Same graphs as
tests/test_show_memory.py (built through the stores), at 10,000 and 100,000 points. The export
still holds the graph's nodes and edges (here, a MEMORY node and a ``MENTIONED_IN`` edge per point),
so its peak is compared with the peak of loading just those: the points must add nothing to it."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from config import Settings
from pipelines.export import render
from store.graph import GraphStore
from tests.test_show_memory import HOT, built
from worker.knowledge import export_graph, open_graph_db, snapshot_from_db


def peak_of_export(settings: Settings, out: Path) -> int:
    """The export's Python heap peak above the peak of loading the graph's nodes and edges."""
    tracemalloc.start()
    try:
        with open_graph_db(settings) as db:
            graph = GraphStore(db)
            loaded = (graph.all_nodes(), graph.all_edges())
        del loaded
        graph_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        with out.open("w", encoding="utf-8") as file:
            export_graph(settings, file, fmt="json")
        return tracemalloc.get_traced_memory()[1] - graph_peak
    finally:
        tracemalloc.stop()


def without_time(text: str) -> dict:
    return {k: v for k, v in json.loads(text).items() if k != "generated_at"}


@pytest.mark.slow
def test_streamed_export_is_the_rendered_snapshot_and_its_memory_is_flat(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                                                         clean_env) -> None:
    small, large = built(tmp_path_factory, tmp_path / "small", 10_000), built(tmp_path_factory, tmp_path / "large", 100_000)
    streamed = tmp_path / "small.json"
    peak_small = peak_of_export(small, streamed)
    with open_graph_db(small) as db:
        whole = render(snapshot_from_db(db), "json")
    # The same text as the snapshot built whole (its generation time aside), key order and indent included.
    stamp = json.loads(whole)["generated_at"]
    assert streamed.read_text(encoding="utf-8") == whole.replace(stamp, json.loads(streamed.read_text())["generated_at"])
    peak_large = peak_of_export(large, tmp_path / "large.json")
    exported = without_time((tmp_path / "large.json").read_text(encoding="utf-8"))
    assert len(exported["provenance"][HOT]) == 100_000
    hot = next(n for n in exported["nodes"] if n["id"] == HOT)
    assert (hot["first_seen"], hot["last_seen"]) == ("2026-01-01T10:00:00Z", "2026-01-28T10:00:00Z")
    assert len(exported["node_sessions"][HOT]) == 10_000
    print(f"export peak above the graph's: {peak_small / 1e6:.2f} MB at 10k points, {peak_large / 1e6:.2f} MB at 100k")
    # Holding the points as the whole snapshot does costs ~66 MB more at 100,000 (0.6 kB a point).
    assert peak_large < 2_000_000 and peak_small < 2_000_000, (peak_small, peak_large)
