"""Identity resolution (pure rules) and merges recorded in SQLite, undone by `rem-cycle unmerge`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.identity import (
    CANDIDATE,
    CREATE,
    LINK,
    AliasIndex,
    NodeRef,
    learn,
    normal_key,
    resolve,
    resolve_batch,
    tokens,
    words,
)
from store.graph import Edge, GraphStore, Node
from store.merges import MergeError, MergeStore
from tests.conftest import run_cli
from tests.graph_fixtures import build_sample_graph, knowledge, point

EXISTING = [
    NodeRef("CLASS:LazyEdgeQueue", "CLASS", "LazyEdgeQueue", ("lazy edge queue",)),
    NodeRef("CLASS:GraphStore", "CLASS", "GraphStore"),
    NodeRef("ISSUE:#123", "ISSUE", "#123"),
    NodeRef("CONCEPT:map reduce", "CONCEPT", "map reduce"),
    NodeRef("FILE:store/lazy_queue.py", "FILE", "store/lazy_queue.py"),
    NodeRef("CONCEPT:continuous integration", "CONCEPT", "continuous integration"),
    NodeRef("METHOD:drain", "METHOD", "drain()"),
    NodeRef("CLASS:ChromaStore", "CLASS", "ChromaStore"),
    NodeRef("CLASS:ChromaStoreV2", "CLASS", "ChromaStoreV2"),
]


@pytest.fixture
def index() -> AliasIndex:
    return AliasIndex.build(EXISTING)


def test_normal_forms() -> None:
    assert words("LazyEdgeQueue.drain()") == ["lazy", "edge", "queue", "drain"]
    assert words("HTTPServerError") == ["http", "server", "error"]
    assert tokens("Lazy-Edge Queues") == ("lazy", "edge", "queue")
    assert normal_key("ISSUE", "Issue #0123") == normal_key("ISSUE", "GH-123") == "#123"
    assert normal_key("FILE", "./Store\\lazy_queue.py") == "store/lazy_queue.py"


@pytest.mark.parametrize(
    ("name", "node_type", "action", "rule", "target"),
    [
        ("lazy edge queue", "CLASS", LINK, "alias", "CLASS:LazyEdgeQueue"),
        ("Lazy Edge Queues", "CLASS", LINK, "normalised", "CLASS:LazyEdgeQueue"),
        ("lazy_edge_queue", "CLASS", LINK, "normalised", "CLASS:LazyEdgeQueue"),
        ("LEQ", "CLASS", LINK, "acronym", "CLASS:LazyEdgeQueue"),
        ("QueueEdgeLazy", "CLASS", LINK, "token-set", "CLASS:LazyEdgeQueue"),
        ("issue 123", "ISSUE", LINK, "issue-number", "ISSUE:#123"),
        ("Map-Reduce", "CONCEPT", LINK, "normalised", "CONCEPT:map reduce"),
        ("drain()", "METHOD", LINK, "alias", "METHOD:drain"),
        ("GraphService", "CLASS", CREATE, "", None),
        ("#124", "ISSUE", CREATE, "", None),
        ("ChromaStoreV3", "CLASS", CREATE, "", None),
        ("LazyEdgeQueue", "TOOL", CANDIDATE, "cross-type", None),
        ("lazy_queue.py", "FILE", CANDIDATE, "file-basename", None),
        ("CI", "CONCEPT", CANDIDATE, "acronym-short", None),
        ("GraphStroe", "CLASS", CANDIDATE, "fuzzy", None),
        ("edge queue", "CLASS", CANDIDATE, "token-set", None),
    ],
)
def test_rules(index: AliasIndex, name: str, node_type: str, action: str, rule: str, target: str | None) -> None:
    verdict = resolve(NodeRef(f"{node_type}:{name}", node_type, name), index)
    assert (verdict.action, verdict.rule, verdict.target) == (action, rule, target)


def test_same_name_other_type_is_never_linked(index: AliasIndex) -> None:
    verdict = resolve(NodeRef("CONCEPT:graph store", "CONCEPT", "graph store"), index)
    assert verdict.action == CANDIDATE and verdict.candidates[0].type == "CLASS"


def test_ambiguous_and_blocked(index: AliasIndex) -> None:
    twin = AliasIndex.build([*EXISTING, NodeRef("CLASS:LazyEventQueue", "CLASS", "LazyEventQueue")])
    verdict = resolve(NodeRef("CLASS:LEQ", "CLASS", "LEQ"), twin)
    assert verdict.action == CANDIDATE and verdict.rule == "ambiguous-acronym" and len(verdict.candidates) == 2
    blocked = frozenset({("CLASS:lazy edge queues", "CLASS:LazyEdgeQueue")})
    assert resolve(NodeRef("CLASS:lazy edge queues", "CLASS", "lazy edge queues"), index, blocked=blocked).action == CREATE
    assert resolve(NodeRef("CLASS:GraphStore", "CLASS", "GraphStore"), index).rule == "exact-id"


def test_batch_links_within_itself_and_leaves_index_until_learn(index: AliasIndex) -> None:
    batch = [
        NodeRef("CLASS:SemanticIndex", "CLASS", "SemanticIndex"),
        NodeRef("CLASS:semantic indexes", "CLASS", "semantic indexes"),
    ]
    verdicts = resolve_batch(batch, index)
    assert [v.action for v in verdicts] == [CREATE, LINK] and verdicts[1].target == "CLASS:SemanticIndex"
    assert "CLASS:SemanticIndex" not in index.nodes
    learn(index, batch, verdicts)
    assert resolve(NodeRef("CLASS:SI2", "CLASS", "semantic index"), index).target == "CLASS:SemanticIndex"


# --- merges in SQLite ---------------------------------------------------------------------------
def _dump(graph: GraphStore) -> tuple[list, list]:
    return (
        [(n.id, n.label, n.name, json.dumps(n.properties, sort_keys=True)) for n in graph.all_nodes()],
        [(e.source, e.target, e.relationship, e.weight, json.dumps(e.properties, sort_keys=True)) for e in graph.all_edges()],
    )


@pytest.fixture
def db(tmp_path: Path):
    database = build_sample_graph(tmp_path / "graph.sqlite3")
    graph = GraphStore(database)
    graph.upsert_node(knowledge("CLASS:LEQ", "LEQ", aliases=["LEQ"], points=[point("s2", "m3", "the LEQ")], description="The lazy edge queue, abbreviated, described at length"))
    graph.link_nodes(
        [
            Edge("CLASS:LEQ", "memory:m3", "MENTIONED_IN"),
            Edge("CLASS:LEQ", "session:s2", "DISCUSSED_IN"),
            Edge("METHOD:drain", "CLASS:LEQ", "IMPLEMENTS", 5.0, {"justification": "LEQ drains"}),  # I has it too
            Edge("CLASS:LEQ", "METHOD:chunk_session", "DEPENDS_ON", 1.0),  # new for I
            Edge("CLASS:LEQ", "CLASS:LazyEdgeQueue", "RELATES_TO", 1.0),  # becomes a self-loop
        ]
    )
    yield database
    database.close()


def test_merge_then_unmerge_restores_the_graph_exactly(db) -> None:
    graph, merges = GraphStore(db), MergeStore(db)
    before = _dump(graph)
    merge_id = merges.merge_nodes("CLASS:LEQ", "CLASS:LazyEdgeQueue", rule="acronym", score=0.9, evidence={"form": "LEQ"})
    assert graph.get_node("CLASS:LEQ") is None
    into = graph.get_node("CLASS:LazyEdgeQueue")
    assert into is not None and {"LEQ", "lazy edge queue"} <= set(into.properties["aliases"])
    assert into.properties["description"].startswith("The lazy edge queue, abbreviated")
    assert len(into.properties["provenance"]) == 2
    assert graph.get_edge("CLASS:LazyEdgeQueue", "METHOD:chunk_session", "DEPENDS_ON") is not None
    assert graph.get_edge("METHOD:drain", "CLASS:LazyEdgeQueue", "IMPLEMENTS").weight == 5.0
    assert graph.get_edge("CLASS:LazyEdgeQueue", "CLASS:LazyEdgeQueue", "RELATES_TO") is None
    assert [r.merge_id for r in merges.records(into_id="CLASS:LazyEdgeQueue", active=True)] == [merge_id]

    undone = merges.unmerge("CLASS:LEQ")
    assert undone[0]["edges_deleted"] == 3 and undone[0]["edges_culled"] == 0
    assert _dump(graph) == before
    assert merges.blocked_pairs() == frozenset({("CLASS:LEQ", "CLASS:LazyEdgeQueue")})
    with pytest.raises(MergeError, match="no active merge"):
        merges.unmerge("CLASS:LEQ")


def test_record_link_extends_one_record_per_pair(db) -> None:
    merges = MergeStore(db)
    node = Node("CLASS:LEQs", "CLASS", "LEQs", {"aliases": ["LEQs"], "provenance": []})
    first = merges.record_link(node, [], into_id="CLASS:LazyEdgeQueue", rule="acronym", score=0.9)
    again = merges.record_link(node, [Edge("CLASS:LEQs", "METHOD:drain", "RELATES_TO")], into_id="CLASS:LazyEdgeQueue", rule="acronym", score=0.9)
    assert first == again and len(merges.records()) == 1


def test_chained_merge_must_be_undone_in_order(db) -> None:
    merges = MergeStore(db)
    merges.merge_nodes("CLASS:LEQ", "CLASS:LazyEdgeQueue")
    merges.merge_nodes("CLASS:LazyEdgeQueue", "FILE:store/lazy_queue.py")
    with pytest.raises(MergeError, match="unmerge CLASS:LazyEdgeQueue first"):
        merges.unmerge("CLASS:LEQ")
    merges.unmerge("CLASS:LazyEdgeQueue")
    merges.unmerge("CLASS:LEQ")
    assert GraphStore(db).get_node("CLASS:LEQ") is not None


def test_cli_merge_show_unmerge(db, tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path)}  # the fixture's graph.sqlite3 lives in tmp_path
    done = run_cli("merge", "CLASS:LEQ", "CLASS:LazyEdgeQueue", env=env)
    assert done.returncode == 0, done.stderr
    shown = run_cli("show", "CLASS:LEQ", "--json", env=env)
    view = json.loads(shown.stdout)
    assert view["id"] == "CLASS:LazyEdgeQueue" and view["redirected_from"] == "CLASS:LEQ"
    assert view["merged_from"][0]["merged_id"] == "CLASS:LEQ"
    undone = run_cli("unmerge", "CLASS:LEQ", "--json", env=env)
    assert undone.returncode == 0, undone.stderr
    assert json.loads(undone.stdout)["undone"][0]["into"] == "CLASS:LazyEdgeQueue"
    again = run_cli("unmerge", "CLASS:LEQ", env=env)
    assert again.returncode == 1 and "no active merge" in again.stderr
