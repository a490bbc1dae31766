"""Snapshot export: JSON shape and GraphML (read back with networkx) from a real graph database
(SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from pipelines.export import build_snapshot, graphml_text, render
from store.communities import CommunityRecord, CommunityStore
from store.graph import GraphStore, Node
from tests.conftest import run_cli
from tests.graph_fixtures import build_sample_graph
from worker.knowledge import snapshot_from_db

QUEUE = ("CLASS:LazyEdgeQueue", "DECISION:Rename before drain", "FILE:store/lazy_queue.py", "METHOD:drain")


pytestmark = pytest.mark.both_backends


@pytest.fixture
def db(tmp_path: Path, open_graph_database):
    database = build_sample_graph(tmp_path / "graph.sqlite3", opener=open_graph_database)
    CommunityStore(database).replace_all([CommunityRecord("c_queue", "LazyEdgeQueue · drain()", QUEUE, "h1")])
    yield database
    database.close()


def test_snapshot_shape(db) -> None:
    snap = snapshot_from_db(db)
    ids = [n["id"] for n in snap["nodes"]]
    assert ids == sorted(ids) and len(ids) == 7
    assert not any(i.startswith(("memory:", "session:")) for i in ids)
    assert {e["relationship"] for e in snap["edges"]} == {"IMPLEMENTS", "RELATES_TO", "SUPPORTS", "CAUSES_ISSUE"}
    assert snap["sessions"] == {"session:s1": "Fix the lazy edge queue drain", "session:s2": "Chunker performance"}
    assert snap["file_sources"] == {}
    assert snap["node_sessions"]["CLASS:LazyEdgeQueue"] == ["session:s1"]
    assert snap["node_sessions"]["FILE:pipelines/chunker.py"] == ["session:s2"]
    queue = next(n for n in snap["nodes"] if n["id"] == "CLASS:LazyEdgeQueue")
    assert queue["community"] == "c_queue"
    assert "provenance" not in queue["properties"] and queue["properties"]["aliases"] == ["LazyEdgeQueue", "lazy edge queue"]
    assert snap["provenance"]["CLASS:LazyEdgeQueue"][0]["evidence"] == "The LazyEdgeQueue drain loses lines"
    assert snap["communities"] == [
        {"id": "c_queue", "label": "LazyEdgeQueue · drain()", "label_source": "default", "members": list(QUEUE), "size": 4}
    ]
    assert snap["counts"] == {"nodes": 7, "edges": 8, "communities": 1}
    json.dumps(snap)  # JSON-ready


def test_empty_properties_skip_the_decoder_and_export_the_same_text(db, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``{}`` properties document is read without ``json.loads`` (``store.graph.read_properties``),
    and an export without the anchors reads no provenance edge's document: the export is, byte for
    byte, the one of the decoder reading every row of both tables, and each row's empty dict is its
    own (a caller changing one changes no other row's)."""
    import store.graph
    from store.graph import Edge

    graph = GraphStore(db)
    graph.upsert_nodes([Node("CONCEPT:Bare", "CONCEPT", "Bare", {}), Node("CONCEPT:Nested", "CONCEPT", "Nested", {"empty": {}, "text": "{}"})])
    graph.link_nodes([Edge("CONCEPT:Bare", "CONCEPT:Nested", "RELATES_TO", 1.0, {"note": "{}", "nested": {"a": {}}, "é": []}),
                      Edge("CONCEPT:Nested", "METHOD:drain", "RELATES_TO")])
    empties = [e.properties for e in graph.all_edges() if not e.properties]
    assert len(empties) >= 3  # ORIGINATES_IN, RELATES_TO without properties
    empties[0]["changed"] = True
    assert all(p == {} for p in empties[1:]) and all(not n.properties for n in graph.all_nodes() if n.id == "CONCEPT:Bare")
    read_whole = GraphStore.all_edges
    for anchors in (False, True):
        fast = snapshot_from_db(db, include_anchors=anchors)
        with monkeypatch.context() as patched:
            patched.setattr(store.graph, "read_properties", json.loads)  # the decoder for every row, as before
            # and every edge's document read (the export leaves the provenance edges' unread)
            patched.setattr(GraphStore, "all_edges", lambda self, bare_relationships=(): read_whole(self))
            decoded = snapshot_from_db(db, include_anchors=anchors)
        decoded["generated_at"] = fast["generated_at"]
        assert render(fast, "json") == render(decoded, "json")
        assert render(fast, "graphml") == render(decoded, "graphml")


def test_include_anchors_and_sessions_from_memory_only(db) -> None:
    snap = snapshot_from_db(db, include_anchors=True)
    assert {"memory:m1", "session:s2"} <= {n["id"] for n in snap["nodes"]}
    assert any(e["relationship"] == "ORIGINATES_IN" for e in snap["edges"])
    # A node known only through a MENTIONED_IN memory edge still maps to that memory's session.
    graph = GraphStore(db)
    graph.upsert_node(Node("CONCEPT:Orphan", "CONCEPT", "Orphan", {}))
    from store.graph import Edge

    graph.link_nodes([Edge("CONCEPT:Orphan", "memory:m3", "MENTIONED_IN")])
    assert snapshot_from_db(db)["node_sessions"]["CONCEPT:Orphan"] == ["session:s2"]


def test_graphml_reads_back_with_networkx(db, tmp_path: Path) -> None:
    snap = snapshot_from_db(db)
    path = tmp_path / "g.graphml"
    path.write_text(graphml_text(snap), encoding="utf-8")
    graph = nx.read_graphml(path, force_multigraph=True)
    assert graph.number_of_nodes() == 7 and graph.number_of_edges() == 8
    node = graph.nodes["CLASS:LazyEdgeQueue"]
    assert node["label"] == "CLASS" and node["community"] == "c_queue"
    assert json.loads(node["aliases"]) == ["LazyEdgeQueue", "lazy edge queue"]
    assert json.loads(node["sessions"]) == ["session:s1"]
    assert json.loads(node["provenance"])[0]["memory"] == "memory:m1"
    edge = graph.get_edge_data("METHOD:drain", "CLASS:LazyEdgeQueue")
    (attrs,) = edge.values()
    assert attrs["relationship"] == "IMPLEMENTS" and attrs["weight"] == 2.0
    assert attrs["justification"] == "drain is a method of the queue"


def test_graphml_mixed_types_and_reserved_names() -> None:
    nodes = [
        Node("CONCEPT:a", "CONCEPT", "a", {"x": 1, "label": "shadow", "flag": True, "gone": None}),
        Node("CONCEPT:b", "CONCEPT", "b", {"x": "one", "flag": False}),
    ]
    text = graphml_text(build_snapshot(nodes, []))
    graph = nx.parse_graphml(text)
    assert graph.nodes["CONCEPT:a"]["label"] == "CONCEPT"
    assert graph.nodes["CONCEPT:a"]["property.label"] == "shadow"
    # "x" mixes a number and a string: both JSON-encoded, so one declared type.
    assert [json.loads(graph.nodes[n]["x"]) for n in ("CONCEPT:a", "CONCEPT:b")] == [1, "one"]
    assert graph.nodes["CONCEPT:b"]["flag"] is False
    assert "gone" not in graph.nodes["CONCEPT:a"]


def test_render_rejects_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown export format"):
        render(build_snapshot([], []), "csv")


def test_cli_export(tmp_path: Path, open_graph_database, database_url: str | None) -> None:
    data = tmp_path / "data"
    build_sample_graph(data / "graph.sqlite3", opener=open_graph_database).close()
    env = {"REM_DATA_DIR": str(data), **({"REM_DATABASE_URL": database_url} if database_url else {})}
    out = tmp_path / "snap.graphml"
    done = run_cli("export", "--format", "graphml", "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert nx.read_graphml(out).number_of_nodes() == 7
    done = run_cli("export", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["nodes"] == 7
    missing = run_cli("export", env={"REM_DATA_DIR": str(tmp_path / "nothing")})
    assert missing.returncode == 1 and "no graph database" in missing.stderr
    assert not (tmp_path / "nothing" / "graph.sqlite3").exists()


async def test_snapshot_of_a_real_cycle_over_sample_sessions(settings, tmp_path: Path) -> None:
    from pipelines.importer import import_sessions
    from store.chroma import ChromaStore
    from store.backend import open_database
    from tests.conftest import SAMPLE
    from worker.cycle import run_cycle

    sample = tmp_path / "four.jsonl"
    sample.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:4]), encoding="utf-8")
    await import_sessions(sample, chroma=ChromaStore(settings), memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    db = open_database(settings)
    try:
        snap = snapshot_from_db(db)
    finally:
        db.close()
    ids = {n["id"] for n in snap["nodes"]}
    assert len(snap["sessions"]) == 4 and len(ids) > 10 and snap["edges"]
    assert all(e["source"] in ids and e["target"] in ids for e in snap["edges"])
    # every extracted node traces back to the sessions it came from, with evidence quotes
    assert set(snap["node_sessions"]) == ids
    assert all(set(s) <= set(snap["sessions"]) for s in snap["node_sessions"].values())
    assert all(p["evidence"] for points in snap["provenance"].values() for p in points if p.get("memory"))
    assert snap["communities"] and all(set(c["members"]) <= ids and c["size"] >= 3 for c in snap["communities"])
    graph = nx.parse_graphml(graphml_text(snap), force_multigraph=True)
    assert (graph.number_of_nodes(), graph.number_of_edges()) == (len(ids), len(snap["edges"]))
