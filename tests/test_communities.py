"""Communities: Louvain over semantic edges only, stable ids, cached model labels, finalize phase."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from pipelines.communities import DetectionBasis, community_id, detection_due, member_hash, plan_communities
from pipelines.vocabulary import ANCHOR_LABELS, PROVENANCE_RELATIONSHIPS
from store.communities import CommunityStore
from store.backend import open_database
from store.graph import Edge, GraphStore, Node
from store.runstate import RunStateStore, SessionRevision
from tests.graph_fixtures import build_sample_graph
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.llm_server import ok
from worker.cycle import PHASES, run_cycle
from worker.knowledge import refresh_communities

QUEUE = ("CLASS:LazyEdgeQueue", "DECISION:Rename before drain", "FILE:store/lazy_queue.py", "METHOD:drain")
CHUNKER = ("CONCEPT:Quadratic join", "FILE:pipelines/chunker.py", "METHOD:chunk_session")


pytestmark = pytest.mark.both_backends


@pytest.fixture
def db(tmp_path: Path, open_graph_database):
    database = build_sample_graph(tmp_path / "graph.sqlite3", opener=open_graph_database)
    yield database
    database.close()


class CountingNamer:
    """A namer standing in for the model: records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def __call__(self, names: Sequence[str]) -> str | None:
        self.calls.append(list(names))
        return f"About {names[0]}"


def test_detects_semantic_communities_only(db) -> None:
    graph = GraphStore(db)
    plan = plan_communities(graph.all_nodes(), graph.all_edges(), [])
    assert [c.members for c in plan.communities] == [QUEUE, CHUNKER]
    assert plan.communities[0].id == community_id(QUEUE) and plan.communities[0].member_hash == member_hash(QUEUE)
    # Default label: highest-degree members first (drain() has 3 semantic neighbours).
    assert plan.communities[0].label.startswith("drain()")
    assert (plan.new, plan.unchanged, plan.carried) == (2, 0, 0)


def test_small_components_are_dropped(db) -> None:
    graph = GraphStore(db)
    graph.upsert_nodes([Node("CONCEPT:x", "CONCEPT", "x"), Node("CONCEPT:y", "CONCEPT", "y")])
    graph.link_nodes([Edge("CONCEPT:x", "CONCEPT:y", "RELATES_TO")])
    plan = plan_communities(graph.all_nodes(), graph.all_edges(), [])
    assert all("CONCEPT:x" not in c.members for c in plan.communities)


async def test_ids_stable_and_carried_over(db) -> None:
    store = CommunityStore(db)
    first = await refresh_communities(db)
    assert (first["communities"], first["new"], first["written"]) == (2, 2, 2)
    ids = [c.id for c in store.all()]
    again = await refresh_communities(db)
    assert (again["unchanged"], again["written"]) == (2, 0)
    assert [c.id for c in store.all()] == ids
    # One more member joins the queue community (Jaccard 4/5): same id, new member hash.
    graph = GraphStore(db)
    graph.upsert_node(Node("TEST:test_drain", "TEST", "test_drain"))
    graph.link_nodes([Edge("TEST:test_drain", "METHOD:drain", "RELATES_TO", 3.0), Edge("TEST:test_drain", "CLASS:LazyEdgeQueue", "RELATES_TO")])
    grown = await refresh_communities(db)
    assert (grown["carried"], grown["unchanged"]) == (1, 1)
    queue = next(c for c in store.all() if "METHOD:drain" in c.members)
    assert queue.id == community_id(QUEUE) and len(queue.members) == 5 and queue.member_hash != member_hash(QUEUE)


async def test_model_labels_cached(db) -> None:
    namer = CountingNamer()
    first = await refresh_communities(db, namer=namer)
    assert first["named"] == 2 and len(namer.calls) == 2
    assert namer.calls[0][0] == "drain()"  # highest degree first
    labels = {c.id: (c.label, c.label_source) for c in CommunityStore(db).all()}
    assert labels[community_id(QUEUE)] == ("About drain()", "model")
    second = await refresh_communities(db, namer=namer)
    assert second["named"] == 0 and len(namer.calls) == 2 and second["written"] == 0
    # A carried-over community keeps its model label: no new call.
    graph = GraphStore(db)
    graph.upsert_node(Node("TEST:test_drain", "TEST", "test_drain"))
    graph.link_nodes([Edge("TEST:test_drain", "METHOD:drain", "RELATES_TO", 3.0)])
    await refresh_communities(db, namer=namer)
    assert len(namer.calls) == 2
    assert {c.id: c.label for c in CommunityStore(db).all()}[community_id(QUEUE)] == "About drain()"


async def test_unrelated_membership_gets_new_id(db) -> None:
    await refresh_communities(db)
    graph = GraphStore(db)
    # Rewire: the chunker cluster dissolves into a new, larger cluster with other nodes.
    extra = [Node(f"CONCEPT:n{i}", "CONCEPT", f"n{i}") for i in range(6)]
    graph.upsert_nodes(extra)
    graph.link_nodes([Edge(a.id, b.id, "RELATES_TO", 5.0) for a in extra for b in extra if a.id < b.id])
    graph.link_nodes([Edge("CONCEPT:n0", "METHOD:chunk_session", "RELATES_TO", 5.0)])
    result = await refresh_communities(db)
    ids = {c.id for c in CommunityStore(db).all()}
    assert community_id(QUEUE) in ids and result["new"] >= 1


async def test_finalize_phase_computes_communities(settings) -> None:
    build_sample_graph(settings.graph_path, opener=lambda _: open_database(settings)).close()
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    assert result.phases["finalize"]["communities"]["communities"] == 2
    db = open_database(settings)
    try:
        assert [c.members for c in CommunityStore(db).all()] == [QUEUE, CHUNKER]
    finally:
        db.close()


async def test_model_namer_over_http(db, settings, llm_server) -> None:
    from worker.knowledge import model_judge

    model = settings.model_copy(update={"extractor": "openai", "llm_base_url": llm_server.url, "llm_max_retries": 0, "llm_judge": True})
    llm_server.script(ok({"label": "Lazy queue draining"}), match="drain()")
    llm_server.script(ok("not json at all"), match="chunk_session()")
    async with model_judge(model) as judge:
        assert judge is not None
        first = await refresh_communities(db, namer=judge.name_community)
    assert first["named"] == 1 and llm_server.chat_count == 2
    labels = {c.id: (c.label, c.label_source) for c in CommunityStore(db).all()}
    assert labels[community_id(QUEUE)] == ("Lazy queue draining", "model")
    assert labels[community_id(CHUNKER)][1] == "default"  # an unusable answer keeps the default label
    async with model_judge(model) as judge:
        await refresh_communities(db, namer=judge.name_community)
    assert llm_server.chat_count == 2  # unchanged communities are not asked again
    async with model_judge(settings) as judge:
        assert judge is None  # heuristic extractor: no model


async def test_refresh_reads_the_skeleton_and_finds_what_the_full_graph_gives(db) -> None:
    graph = GraphStore(db)
    nodes, edges = graph.skeleton(exclude_labels=ANCHOR_LABELS, exclude_relationships=PROVENANCE_RELATIONSHIPS)
    assert nodes and edges
    assert all(n.properties == {} and n.label not in ANCHOR_LABELS for n in nodes)
    assert all(e.properties == {} and e.relationship not in PROVENANCE_RELATIONSHIPS for e in edges)
    full = {(e.source, e.target, e.relationship): e.weight for e in graph.all_edges()}
    assert [(e.source, e.target, e.relationship, e.weight) for e in edges] == [
        (*key, weight) for key, weight in full.items() if key[2] not in PROVENANCE_RELATIONSHIPS
    ]
    await refresh_communities(db)
    expected = plan_communities(graph.all_nodes(), graph.all_edges(), [])
    assert CommunityStore(db).all() == expected.communities


def test_detection_is_due_after_a_share_of_the_sessions_digested_before() -> None:
    basis = DetectionBasis("2026-11-30T10:00:00.000Z", 1000)
    assert detection_due(None, 0)  # never detected
    assert not detection_due(basis, 99) and detection_due(basis, 100)
    assert detection_due(basis, 0, fraction=0)  # 0: every cycle
    assert detection_due(DetectionBasis("2026-11-30T10:00:00.000Z", 0), 1)  # a small graph: every new session
    assert not detection_due(DetectionBasis("2026-11-30T10:00:00.000Z", 3), 0)
    for damaged in (None, "x", {}, {"detected_at": 5, "digested": 1}, {"detected_at": "t", "digested": -1},
                    {"detected_at": "t", "digested": True}):
        assert DetectionBasis.from_record(damaged) is None
    assert DetectionBasis.from_record(basis.as_dict()) == basis


# The digest records below are written directly, with no row in Chroma: a cycle's ingest would
# take the graph's every session for gone and (rightly) refuse to retract them all.
NO_INGEST = tuple(p for p in PHASES if p[0] != "ingest")


def _digest(db: Database, sessions: range) -> None:
    runstate = RunStateStore(db)
    for n in sessions:
        runstate.mark_ingested(SessionRevision(f"s{n}", f"rev{n}", "2026-11-01T10:00:00Z"), "test")
        runstate.mark_digested(f"s{n}", f"rev{n}", "test")


async def test_finalize_detects_again_only_after_enough_new_sessions(settings) -> None:
    settings = settings.model_copy(update={"community_refresh_fraction": 0.5})
    db = build_sample_graph(settings.graph_path, opener=lambda _path: open_database(settings))
    try:
        _digest(db, range(10))
        # A run of an earlier release: its finalize record has no detection basis.
        RunStateStore(db).start_run("run-old", reason="manual", mode="once", owner="test")
        RunStateStore(db).finish_run("run-old", outcome="completed", phases={"finalize": {"state": "completed", "communities": {"communities": 2}}})
    finally:
        db.close()
    first = (await run_cycle(settings, phases=NO_INGEST)).phases["finalize"]["communities"]
    assert first["detected"] and first["communities"] == 2 and first["basis"]["digested"] == 10
    # The chunker cluster grows by a member: not seen until 5 (half of 10) sessions more are digested.
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes([Node("CONCEPT:Token budget", "CONCEPT", "Token budget")])
        GraphStore(db).link_nodes([Edge("CONCEPT:Token budget", member, "RELATES_TO", 5.0) for member in CHUNKER])
        _digest(db, range(10, 14))
    finally:
        db.close()
    second = (await run_cycle(settings, phases=NO_INGEST)).phases["finalize"]["communities"]
    assert not second["detected"] and second["digested_since"] == 4 and second["communities"] == 2
    assert second["basis"] == first["basis"]  # carried forward
    db = open_database(settings)
    try:
        assert "CONCEPT:Token budget" not in CommunityStore(db).all()[1].members
        _digest(db, range(14, 15))
    finally:
        db.close()
    third = (await run_cycle(settings, phases=NO_INGEST)).phases["finalize"]["communities"]
    assert third["detected"] and third["basis"]["digested"] == 15 and third["basis"]["detected_at"] > first["basis"]["detected_at"]
    db = open_database(settings)
    try:
        assert any("CONCEPT:Token budget" in c.members for c in CommunityStore(db).all())
    finally:
        db.close()
    fourth = (await run_cycle(settings, phases=NO_INGEST)).phases["finalize"]["communities"]
    assert not fourth["detected"] and fourth["digested_since"] == 0


def test_a_community_a_forget_left_a_member_without_edges_keeps_it_last_in_its_label() -> None:
    # A forget can take a member's last semantic edge and leave the member (it has other points):
    # the rewritten community keeps it, ranked with degree 0 (it was a networkx TypeError that
    # failed the cycle's retraction, or the forget).
    from pipelines.communities import without_members
    from store.communities import CommunityRecord

    members = ("CONCEPT:a", "CONCEPT:b", "CONCEPT:c", "CONCEPT:gone")
    old = CommunityRecord(id="c_1", label="a · gone", members=members, member_hash=member_hash(members))
    left = [Node("CONCEPT:a", "CONCEPT", "a"), Node("CONCEPT:b", "CONCEPT", "b"), Node("CONCEPT:c", "CONCEPT", "c")]
    rewritten = without_members(old, left, [Edge("CONCEPT:b", "CONCEPT:c", "RELATES_TO", weight=2.0)])
    assert rewritten is not None
    assert rewritten.members == ("CONCEPT:a", "CONCEPT:b", "CONCEPT:c") and rewritten.id == "c_1"
    assert rewritten.label.split(" · ")[-1] == "a" and "gone" not in rewritten.label
