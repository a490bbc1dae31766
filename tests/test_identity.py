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
    is_test_path,
    learn,
    normal_key,
    resolve,
    resolve_batch,
    tokens,
    words,
)
from store.graph import Edge, GraphStore, Node
from store.merges import MergeError, MergeStore
from store.provenance import ProvenanceStore
from tests.conftest import run_cli
from tests.graph_fixtures import add_knowledge, build_sample_graph, knowledge, point
from tests.llm_server import llm_server  # noqa: F401 - fixture

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
    add_knowledge(database, [knowledge("CLASS:LEQ", "LEQ", aliases=["LEQ"], points=[point("s2", "m3", "the LEQ")], description="The lazy edge queue, abbreviated, described at length")])
    graph.link_nodes(
        [
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
    assert len(ProvenanceStore(db).node_points("CLASS:LazyEdgeQueue")) == 2
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
    node = Node("CLASS:LEQs", "CLASS", "LEQs")
    first = merges.record_link(node, into_id="CLASS:LazyEdgeQueue", rule="acronym", score=0.9)
    again = merges.record_link(node, into_id="CLASS:LazyEdgeQueue", rule="acronym", score=0.95)
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


# --- in the REM cycle ----------------------------------------------------------------------------
async def _import(settings, tmp_path: Path, sessions: list[dict]) -> None:
    from pipelines.importer import import_sessions
    from store.chroma import ChromaStore
    from tests.conftest import write_sessions

    await import_sessions(
        write_sessions(tmp_path / "in.jsonl", sessions), chroma=ChromaStore(settings),
        memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )


def _session(sid: str, created: str, turns: list[str]) -> dict:
    return {
        "sessionId": sid, "title": f"Session {sid}", "createdAt": created, "summary": f"about {sid}",
        "turns": [{"id": f"{sid}-t{i}", "role": "user", "text": t} for i, t in enumerate(turns)],
    }


async def test_cycle_links_variants_records_the_merge_and_unmerge_sticks(settings, tmp_path: Path) -> None:
    from store.db import Database
    from worker.cycle import run_cycle

    await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The LazyEdgeQueue drops lines when DrainWorker crashes."])])
    assert (await run_cycle(settings)).outcome == "completed"
    await _import(settings, tmp_path, [_session("b", "2026-11-02T10:00:00Z", ["Two LazyEdgeQueues share one DrainWorker today."])])
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    assert result.phases["extract"]["merges_recorded"] == 1
    db = Database(settings.graph_path)
    try:
        graph, merges = GraphStore(db), MergeStore(db)
        queue = graph.get_node("CLASS:LazyEdgeQueue")
        assert graph.get_node("CLASS:LazyEdgeQueues") is None and "LazyEdgeQueues" in queue.properties["aliases"]
        assert graph.get_edge("CLASS:LazyEdgeQueue", "memory:b-t0", "MENTIONED_IN") is not None
        (record,) = merges.records(active=True)
        assert (record.merged_id, record.into_id, record.rule) == ("CLASS:LazyEdgeQueues", "CLASS:LazyEdgeQueue", "normalised")
        assert record.evidence["session"] == "b"

        merges.unmerge("CLASS:LazyEdgeQueues")
        restored = graph.get_node("CLASS:LazyEdgeQueues")
        points = ProvenanceStore(db)
        assert restored is not None and {p.anchor for p in points.node_points("CLASS:LazyEdgeQueues")} == {"session:b"}
        assert graph.get_edge("CLASS:LazyEdgeQueues", "memory:b-t0", "MENTIONED_IN") is not None
        assert graph.get_edge("CLASS:DrainWorker", "CLASS:LazyEdgeQueues", "RELATES_TO") is not None
        queue = graph.get_node("CLASS:LazyEdgeQueue")
        assert "LazyEdgeQueues" not in queue.properties["aliases"]
        assert {p.anchor for p in points.node_points("CLASS:LazyEdgeQueue")} == {"session:a"}
        assert graph.get_edge("CLASS:LazyEdgeQueue", "memory:b-t0", "MENTIONED_IN") is None
        shared = graph.get_edge("CLASS:DrainWorker", "CLASS:LazyEdgeQueue", "RELATES_TO")
        assert shared.weight == 1.0 and {r[0] for r in db.query(
            "SELECT anchor FROM edge_points WHERE source = 'CLASS:DrainWorker' AND target = 'CLASS:LazyEdgeQueue'")} == {"session:a"}
        # Re-extracting session b does not merge the pair again: the undone merge blocks it.
        db.conn.execute("UPDATE session_digests SET state = 'undigested' WHERE session_id = 'b'")
    finally:
        db.close()
    again = await run_cycle(settings)
    assert again.phases["extract"]["sessions_digested"] == 1 and again.phases["extract"]["merges_recorded"] == 0


async def test_model_auditor_settles_a_candidate(settings, llm_server) -> None:
    from pipelines.extract.commit import Candidate
    from pipelines.extract.llm import OpenAIExtractor
    from pipelines.judge import ModelJudge
    from pipelines.resolver import GraphResolver
    from tests.llm_server import ok

    model = settings.model_copy(update={"extractor": "openai", "llm_base_url": llm_server.url, "llm_max_retries": 0})
    llm_server.script(ok({"verdict": "link", "target": "CLASS:GraphStore"}), match="GraphStroe")
    llm_server.script(ok({"verdict": "link", "target": "CLASS:Invented"}), match="GraphStorr")
    async with OpenAIExtractor(model) as extractor:
        resolver = GraphResolver(
            load_nodes=lambda: EXISTING, load_blocked=frozenset, existing=lambda ids: set(ids),
            auditor=ModelJudge(extractor).audit_identity,
        )
        typo, other, plain = Candidate("CLASS:GraphStroe", "CLASS", "GraphStroe"), Candidate("CLASS:GraphStorr", "CLASS", "GraphStorr"), Candidate("CLASS:Brand", "CLASS", "BrandNewThing")
        assert await resolver.prepare([typo, other, plain]) == 2  # only the two ambiguous ones are asked
        resolution = resolver([typo, other, plain])
    assert resolution == {"CLASS:GraphStroe": "CLASS:GraphStore"}  # an unknown target is not trusted
    assert resolution.verdicts["CLASS:GraphStroe"].rule == "auditor"
    assert resolution.verdicts["CLASS:GraphStorr"].action == CANDIDATE
    assert llm_server.chat_count == 2
    body = llm_server.chat_requests[0].body
    assert body["response_format"]["json_schema"]["name"] == "identity_verdict"
    # The same question is never asked twice.
    async with OpenAIExtractor(model) as extractor:
        resolver.auditor = ModelJudge(extractor).audit_identity
        assert await resolver.prepare([typo]) == 0


async def test_ambiguous_pairs_are_kept_for_review_then_merged_by_hand(settings, tmp_path: Path) -> None:
    from worker.cycle import run_cycle

    env = {"REM_DATA_DIR": str(settings.data_dir)}
    await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The GraphStore writes rows for the DrainWorker."])])
    assert (await run_cycle(settings)).outcome == "completed"
    empty = run_cli("candidates", "--json", env=env)
    assert empty.returncode == 0 and json.loads(empty.stdout) == {"candidates": [], "total": 0}
    # A typo: near-identical spelling is a candidate (created, reported), never a silent merge.
    await _import(settings, tmp_path, [_session("b", "2026-11-02T10:00:00Z", ["The GraphStroe writes rows too."])])
    result = await run_cycle(settings)
    assert result.phases["extract"]["identity_candidates"] == 1
    listed = run_cli("candidates", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    (pair,) = json.loads(listed.stdout)["candidates"]
    assert (pair["node_id"], pair["candidate_id"], pair["rule"], pair["session_id"]) == (
        "CLASS:GraphStroe", "CLASS:GraphStore", "fuzzy", "b",
    )
    assert pair["node_name"] == "GraphStroe" and pair["candidate_name"] == "GraphStore" and pair["score"] >= 0.9
    text = run_cli("candidates", env={**env, "COLUMNS": "160"}).stdout
    assert "CLASS:GraphStroe" in text and "CLASS:GraphStore" in text and "rem-cycle merge NODE MAY_BE" in text
    status = run_cli("status", "--json", env=env)
    assert json.loads(status.stdout)["identity_candidates"] == 1
    # Re-running the session's extraction keeps one row per pair.
    again = await run_cycle(settings)
    assert again.outcome == "completed"
    assert json.loads(run_cli("candidates", "--json", env=env).stdout)["total"] == 1
    # Accepting it: the merged node is gone, and so is the pair; undoing blocks the pair for good.
    assert run_cli("merge", "CLASS:GraphStroe", "CLASS:GraphStore", env=env).returncode == 0
    assert json.loads(run_cli("candidates", "--json", env=env).stdout)["total"] == 0
    assert run_cli("unmerge", "CLASS:GraphStroe", env=env).returncode == 0
    assert json.loads(run_cli("candidates", "--json", env=env).stdout)["total"] == 0


@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("web/src/api/client.test.ts", True), ("tests/test_graph.py", True), ("pkg/graph_test.go", True),
        ("src/app.spec.js", True), ("test/fixtures/data.json", True), ("store/graph.py", False),
        ("web/src/api/client.ts", False), ("docs/testing.md", False), ("src/contest.py", False),
    ],
)
def test_is_test_path(path: str, is_test: bool) -> None:
    assert is_test_path(path) is is_test


def test_a_test_file_is_never_a_misspelt_source_file() -> None:
    panel = "web/src/components/GraphExplorerPanel.tsx"
    index = AliasIndex.build([NodeRef(f"FILE:{panel}", "FILE", panel)])
    test_file = "web/src/components/GraphExplorerPanel.test.tsx"
    assert resolve(NodeRef(f"FILE:{test_file}", "FILE", test_file), index).action == CREATE
    typo = "web/src/components/GraphExplorerPanl.tsx"
    verdict = resolve(NodeRef(f"FILE:{typo}", "FILE", typo), index)
    assert (verdict.action, verdict.rule) == (CANDIDATE, "fuzzy")


def test_code_identifiers_sharing_some_words_are_other_identifiers() -> None:
    index = AliasIndex.build([NodeRef("CLASS:ConfigLoader", "CLASS", "ConfigLoader"), NodeRef("CLASS:GraphPanelError", "CLASS", "GraphPanelError")])
    for name in ("ConfigLoaderError", "FakeConfigLoader", "FakeGraphPanel"):
        assert resolve(NodeRef(f"CLASS:{name}", "CLASS", name), index).action == CREATE, name
    # The same words in another order are still the same class; prose may still be a candidate.
    assert resolve(NodeRef("CLASS:LoaderConfig", "CLASS", "LoaderConfig"), index).target == "CLASS:ConfigLoader"
    prose = resolve(NodeRef("CONCEPT:config loader error", "CONCEPT", "config loader error"), AliasIndex.build([NodeRef("CONCEPT:config loader", "CONCEPT", "config loader")]))
    assert (prose.action, prose.rule) == (CANDIDATE, "token-set")
    # An identifier and its plural are two identifiers, not a typo; a real typo still is one.
    methods = AliasIndex.build([NodeRef("METHOD:get_node", "METHOD", "get_node")])
    assert resolve(NodeRef("METHOD:get_nodes", "METHOD", "get_nodes"), methods).action == CREATE
    assert resolve(NodeRef("METHOD:get_nodee", "METHOD", "get_nodee"), methods).rule == "fuzzy"


def test_merge_and_unmerge_refuse_while_a_cycle_runs(db, tmp_path: Path) -> None:
    from filelock import FileLock

    from config import load_settings

    env = {"REM_DATA_DIR": str(tmp_path)}
    before = _dump(GraphStore(db))
    with FileLock(load_settings(data_dir=tmp_path).lock_path):  # what a running cycle holds
        busy = run_cli("merge", "CLASS:LEQ", "CLASS:LazyEdgeQueue", env=env)
        assert busy.returncode == 3 and "merge when it has finished" in busy.stderr
        assert run_cli("unmerge", "CLASS:LEQ", env=env).returncode == 3
    assert _dump(GraphStore(db)) == before and MergeStore(db).records() == []
    assert run_cli("merge", "CLASS:LEQ", "CLASS:LazyEdgeQueue", env=env).returncode == 0
