"""``export`` while a cycle (or a merge, a forget) commits (operator audit).

The export reads the graph in several statements — nodes, edges, points, claims, communities, then
the provenance streamed as it is written. Each statement saw the latest commit, so a commit
between two of them gave a file that was no state of the graph: a merged-away node listed with
its edges and provenance gone, or a node without the edges of the same moment. The export now
reads in one snapshot (a read transaction, which never blocks the cycle's writer): racing a
commit, it is the graph of before that commit, byte for byte."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from store.backend import open_database
from store.graph import GraphStore
from store.merges import MergeStore
from tests.conftest import make_session
from tests.lazy_fixtures import seed_chroma
from worker.cycle import Stores, run_cycle
from worker.knowledge import export_graph

TEXT = "turn {i}: the LazyEdgeQueue feeds the GraphStore and the RetryBudget"


def _export(settings: Settings, **options: Any) -> dict[str, Any]:
    out = io.StringIO()
    export_graph(settings, out, fmt="json", **options)
    payload = json.loads(out.getvalue())
    payload.pop("generated_at")
    return payload


@pytest.mark.both_backends
@pytest.mark.parametrize("options", [{}, {"as_of": "9999-12-31T23:59:59.999Z"}], ids=["streamed", "as-of"])
async def test_an_export_racing_a_commit_is_the_graph_before_it(
    settings: Settings, stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    await seed_chroma(stores, settings, [make_session("s1", 4, text=TEXT), make_session("s2", 4, text=TEXT)], tmp_path)
    assert (await run_cycle(settings, stores=stores)).outcome == "completed"
    before = _export(settings, **options)
    assert "CLASS:RetryBudget" in {n["id"] for n in before["nodes"]}

    real_all_edges, raced = GraphStore.all_edges, []

    def edges_after_a_concurrent_merge(self: GraphStore) -> list:
        if not raced:  # another process commits between the export's reads of nodes and of edges
            raced.append(True)
            other = open_database(settings)
            try:
                MergeStore(other).merge_nodes("CLASS:RetryBudget", "CLASS:GraphStore")
            finally:
                other.close()
        return real_all_edges(self)

    monkeypatch.setattr(GraphStore, "all_edges", edges_after_a_concurrent_merge)
    raced_export = _export(settings, **options)
    assert raced
    monkeypatch.undo()
    after = _export(settings, **options)
    assert after != before  # the merge changed the graph …
    assert raced_export == before  # … but not the export that read across it
