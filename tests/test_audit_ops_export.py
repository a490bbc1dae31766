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

    def edges_after_a_concurrent_merge(self: GraphStore, **reading: Any) -> list:
        if not raced:  # another process commits between the export's reads of nodes and of edges
            raced.append(True)
            other = open_database(settings)
            try:
                MergeStore(other).merge_nodes("CLASS:RetryBudget", "CLASS:GraphStore")
            finally:
                other.close()
        return real_all_edges(self, **reading)

    monkeypatch.setattr(GraphStore, "all_edges", edges_after_a_concurrent_merge)
    raced_export = _export(settings, **options)
    assert raced
    monkeypatch.undo()
    after = _export(settings, **options)
    assert after != before  # the merge changed the graph …
    assert raced_export == before  # … but not the export that read across it


def test_graphml_of_text_with_terminal_colours_is_well_formed_xml() -> None:
    """Turn text from tool output carries control characters (ANSI colours: ESC ``\\x1b``, a bell);
    XML 1.0 cannot hold them, and GraphML of a node named or described with one was no XML at all
    (``export --include-anchors --format graphml`` of a session with coloured test output: Gephi and
    every XML parser refuse the file). They are written as their escape, ``\\x1b``."""
    import xml.etree.ElementTree as ET

    import networkx as nx

    from pipelines.export import build_snapshot, graphml_text
    from store.graph import Edge, Node

    name = "Running tests: \x1b[31mFAILED\x1b[0m \x07 in LazyEdgeQueue \ufffe"
    nodes = [
        Node("memory:t0", "MEMORY", name, {"sessionId": "s"}),
        Node("CLASS:LazyEdgeQueue", "CLASS", "LazyEdgeQueue", {"description": name, "aliases": [name]}),
    ]
    edges = [Edge("CLASS:LazyEdgeQueue", "memory:t0", "MENTIONED_IN", 1.0, {"quote": name})]
    text = graphml_text(build_snapshot(nodes, edges, include_anchors=True))
    ET.fromstring(text)  # well-formed
    graph = nx.parse_graphml(text)
    assert graph.nodes["memory:t0"]["name"] == "Running tests: \\x1b[31mFAILED\\x1b[0m \\x07 in LazyEdgeQueue \\ufffe"
    assert graph.nodes["CLASS:LazyEdgeQueue"]["description"].startswith("Running tests: \\x1b[31m")


def test_graphml_says_its_as_of_time_and_its_communities() -> None:
    """A GraphML snapshot of the past said nothing of the time it shows (the JSON says ``as_of``),
    and a node's ``community`` named an id whose label was nowhere in the file."""
    import networkx as nx

    from pipelines.export import build_snapshot, graphml_text
    from store.communities import CommunityRecord
    from store.graph import Node

    nodes = [Node(f"CLASS:C{n}", "CLASS", f"C{n}", {}) for n in range(3)]
    community = CommunityRecord(id="c_1", label="C0 · C1 · C2", members=tuple(n.id for n in nodes), member_hash="h")
    snapshot = build_snapshot(nodes, [], [community])
    snapshot["as_of"] = "2026-11-15T23:59:59.999Z"
    graph = nx.parse_graphml(graphml_text(snapshot))
    assert graph.graph["as_of"] == "2026-11-15T23:59:59.999Z"
    assert json.loads(graph.graph["communities"]) == snapshot["communities"]
    assert graph.nodes["CLASS:C0"]["community"] == "c_1"


def test_an_export_lists_no_community_without_a_member_in_it() -> None:
    """Communities are stored as the last detection found them. An export lists only members that
    still exist (README), but listed every community: ``export --as-of`` a date before the graph
    held anything gave 0 nodes and 8 communities of size 0, each labelled with the names of nodes
    that came later; a community whose members were all forgotten or merged stayed listed too."""
    from pipelines.export import build_snapshot
    from store.communities import CommunityRecord
    from store.graph import Node

    nodes = [Node(f"CLASS:C{n}", "CLASS", f"C{n}", {}) for n in range(3)]
    kept = CommunityRecord(id="c_kept", label="C0 · C1 · C2", members=tuple(n.id for n in nodes), member_hash="h1")
    gone = CommunityRecord(id="c_gone", label="Later · Names", members=("CLASS:Later", "CLASS:Names"), member_hash="h2")
    snapshot = build_snapshot(nodes, [], [kept, gone])
    assert [c["id"] for c in snapshot["communities"]] == ["c_kept"]
    assert snapshot["counts"]["communities"] == 1
    assert build_snapshot([], [], [kept, gone])["communities"] == []
