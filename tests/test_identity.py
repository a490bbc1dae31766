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
    files_of,
    learn,
    normal_key,
    resolve,
    resolve_batch,
    tokens,
    words,
)
from store.graph import Edge, GraphStore, Node
from store.merges import MergeError, MergeStore
from store.provenance import EdgePointRow, PointRow, ProvenanceStore
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
    assert normal_key("ISSUE", "Issue #123") == normal_key("ISSUE", "GH-123") == "#123"
    assert normal_key("FILE", "./Store\\lazy_queue.py") == normal_key("FILE", "a/Store/lazy_queue.py") == "Store/lazy_queue.py"


@pytest.mark.parametrize(
    ("name", "node_type", "action", "rule", "target"),
    [
        ("lazy edge queue", "CLASS", LINK, "alias", "CLASS:LazyEdgeQueue"),
        ("Lazy Edge Queues", "CLASS", LINK, "normalised", "CLASS:LazyEdgeQueue"),
        ("lazy_edge_queue", "CLASS", LINK, "normalised", "CLASS:LazyEdgeQueue"),
        ("LEQ", "CLASS", LINK, "acronym", "CLASS:LazyEdgeQueue"),
        ("QueueEdgeLazy", "CLASS", CREATE, "", None),
        ("issue 123", "ISSUE", LINK, "issue-number", "ISSUE:#123"),
        ("Map-Reduce", "CONCEPT", LINK, "normalised", "CONCEPT:map reduce"),
        ("drain()", "METHOD", LINK, "alias", "METHOD:drain"),
        ("GraphService", "CLASS", CREATE, "", None),
        ("#124", "ISSUE", CREATE, "", None),
        ("ChromaStoreV3", "CLASS", CREATE, "", None),
        ("LazyEdgeQueue", "TOOL", CANDIDATE, "cross-type", None),
        ("lazy_queue.py", "FILE", CANDIDATE, "file-basename", None),
        ("CI", "CONCEPT", CANDIDATE, "acronym-short", None),
        ("GraphStroe", "CLASS", CREATE, "", None),
        ("map reduec", "CONCEPT", CANDIDATE, "fuzzy", None),
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
def db(tmp_path: Path, open_graph_database):
    database = build_sample_graph(tmp_path / "graph.sqlite3", opener=open_graph_database)
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


@pytest.mark.both_backends
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


@pytest.mark.both_backends
def test_unmerge_brings_back_an_edge_with_points_between_the_two_nodes(db) -> None:
    """The edge between M and I vanishes with M (it would be a self-loop); its points come back with
    it on unmerge — the edge first, so the points have an owner."""
    graph, merges, provenance = GraphStore(db), MergeStore(db), ProvenanceStore(db)
    key = ("CLASS:LEQ", "CLASS:LazyEdgeQueue", "RELATES_TO")
    provenance.add_edge_points([EdgePointRow(key, PointRow("session:s2", "memory:m3", "s2:chunk:0", "LEQ is the queue"), *key[:2])])
    before = _dump(graph)
    merges.merge_nodes("CLASS:LEQ", "CLASS:LazyEdgeQueue")
    assert graph.get_edge(*key) is None
    merges.unmerge("CLASS:LEQ")
    assert _dump(graph) == before
    assert provenance.edge_places(key) == 1


@pytest.mark.both_backends
def test_record_link_extends_one_record_per_pair(db) -> None:
    merges = MergeStore(db)
    node = Node("CLASS:LEQs", "CLASS", "LEQs")
    first = merges.record_link(node, into_id="CLASS:LazyEdgeQueue", rule="acronym", score=0.9)
    again = merges.record_link(node, into_id="CLASS:LazyEdgeQueue", rule="acronym", score=0.95)
    assert first == again and len(merges.records()) == 1


@pytest.mark.both_backends
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


@pytest.mark.both_backends
async def test_cycle_links_variants_records_the_merge_and_unmerge_sticks(settings, tmp_path: Path) -> None:
    from store.backend import open_database
    from worker.cycle import run_cycle

    await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The LazyEdgeQueue drops lines when DrainWorker crashes."])])
    assert (await run_cycle(settings)).outcome == "completed"
    await _import(settings, tmp_path, [_session("b", "2026-11-02T10:00:00Z", ["Two LazyEdgeQueues share one DrainWorker today."])])
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    assert result.phases["extract"]["merges_recorded"] == 1
    db = open_database(settings)
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
    llm_server.script(ok({"verdict": "link", "target": "FILE:store/lazy_queue.py"}), match="lazy_queue.py")
    llm_server.script(ok({"verdict": "link", "target": "CONCEPT:Invented"}), match="map reduc")
    async with OpenAIExtractor(model) as extractor:
        resolver = GraphResolver(
            load_nodes=lambda: EXISTING, load_blocked=frozenset, existing=lambda ids: set(ids),
            auditor=ModelJudge(extractor).audit_identity,
        )
        typo = Candidate("FILE:lazy_queue.py", "FILE", "lazy_queue.py")
        other, plain = Candidate("CONCEPT:map reduc", "CONCEPT", "map reduc"), Candidate("CLASS:Brand", "CLASS", "BrandNewThing")
        assert await resolver.prepare([typo, other, plain]) == 2  # only the two ambiguous ones are asked
        resolution = resolver([typo, other, plain])
    assert resolution == {"FILE:lazy_queue.py": "FILE:store/lazy_queue.py"}  # an unknown target is not trusted
    assert resolution.verdicts["FILE:lazy_queue.py"].rule == "auditor"
    assert resolution.verdicts["CONCEPT:map reduc"].action == CANDIDATE
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
    await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The GraphStore in store/graph_store.py writes rows for the DrainWorker."])])
    assert (await run_cycle(settings)).outcome == "completed"
    empty = run_cli("candidates", "--json", env=env)
    assert empty.returncode == 0 and json.loads(empty.stdout) == {"candidates": [], "total": 0}
    # A file named by its base name may be that path: a candidate (created, reported), never a silent merge.
    await _import(settings, tmp_path, [_session("b", "2026-11-02T10:00:00Z", ["Then graph_store.py writes rows too."])])
    result = await run_cycle(settings)
    assert result.phases["extract"]["identity_candidates"] == 1
    listed = run_cli("candidates", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    (pair,) = json.loads(listed.stdout)["candidates"]
    assert (pair["node_id"], pair["candidate_id"], pair["rule"], pair["session_id"]) == (
        "FILE:graph_store.py", "FILE:store/graph_store.py", "file-basename", "b",
    )
    assert pair["node_name"] == "graph_store.py" and pair["candidate_name"] == "store/graph_store.py" and pair["score"] >= 0.6
    text = run_cli("candidates", env={**env, "COLUMNS": "160"}).stdout
    assert "FILE:graph_store.py" in text and "FILE:store/graph_store.py" in text and "rem-cycle merge NODE MAY_BE" in text
    status = run_cli("status", "--json", env=env)
    assert json.loads(status.stdout)["identity_candidates"] == 1
    # Re-running the session's extraction keeps one row per pair.
    again = await run_cycle(settings)
    assert again.outcome == "completed"
    assert json.loads(run_cli("candidates", "--json", env=env).stdout)["total"] == 1
    # Accepting it: the merged node is gone, and so is the pair; undoing blocks the pair for good.
    assert run_cli("merge", "FILE:graph_store.py", "FILE:store/graph_store.py", env=env).returncode == 0
    assert json.loads(run_cli("candidates", "--json", env=env).stdout)["total"] == 0
    assert run_cli("unmerge", "FILE:graph_store.py", env=env).returncode == 0
    assert json.loads(run_cli("candidates", "--json", env=env).stdout)["total"] == 0


# --- code identifiers: the families of wrong links found on real sessions (bench/RESULTS.md) ------
def _verdict(existing: list[tuple[str, str]], node_type: str, name: str):
    index = AliasIndex.build([NodeRef(f"{t}:{n}", t, n) for t, n in existing])
    return resolve(NodeRef(f"{node_type}:{name}#new", node_type, name), index)


@pytest.mark.parametrize(
    ("node_type", "existing", "incoming"),
    [
        # case: a class and a function, a constant and a variable
        ("METHOD", "f", "F"), ("METHOD", "now", "Now"), ("CLASS", "InvalidURL", "InvalidUrl"), ("METHOD", "count", "COUNT"),
        # leading underscores and dunders
        ("METHOD", "get_choices", "_get_choices"), ("METHOD", "copy", "__copy__"), ("METHOD", "self.clone", "self._clone"),
        ("METHOD", "my_func", "myfunc"), ("TEST", "test_unicode_file_name", "test_unicode_filename"),
        # the same words in another order
        ("CLASS", "FileField", "FieldFile"), ("CLASS", "UtilsTests", "TestUtils"),
        # an identifier extending another
        ("CLASS", "NoHeader", "NoHeaderHeader"), ("CLASS", "ModelAdmin", "ModelAdminInline"),
        # blobs that differ in case only
        ("CLASS", "QmFzZTY0U3RyaW5n", "Qmfzzty0U3RyaW5N"),
        # a builtin is not the method of the same name
        ("METHOD", "A.min", "min"),
        # a bare call named like a stdlib module is its function (`copy.copy`), not `attrs.copy`
        ("METHOD", "attrs.copy", "copy"), ("METHOD", "clock.time", "time"),
        # a qualifier with no lower case keeps its case: two variables, a constant and a variable
        ("METHOD", "X.max", "x.max"), ("METHOD", "PRECEDENCE.copy", "precedence.copy"),
    ],
)
def test_code_identifiers_never_link_across_case_underscores_or_word_order(node_type: str, existing: str, incoming: str) -> None:
    verdict = _verdict([(node_type, existing)], node_type, incoming)
    assert verdict.action == CREATE, (verdict.action, verdict.rule)


@pytest.mark.parametrize(
    ("node_type", "existing", "incoming", "rule"),
    [
        ("CLASS", "LazyEdgeQueue", "lazy edge queue", "normalised"),  # prose ↔ identifier
        ("CLASS", "ModelAdmin", "ModelAdmins", "normalised"),  # a class named in the plural
        ("METHOD", "drain()", "drain", "alias"),
        ("METHOD", "QuerySet.iterator", "queryset.iterator", "qualified"),  # class or instance
        ("METHOD", "query.clone", "clone.query.clone", "qualified"),
        ("METHOD", "timezone.get_current_timezone", "get_current_timezone", "qualified"),
        ("METHOD", "copy.copy", "copy", "qualified"),  # the stdlib module's own function
        ("METHOD", "time.time", "time", "qualified"),
        ("METHOD", "ProjectState.clone", "project_state.clone", "qualified"),  # a class and its instance
        ("FILE", "django/forms/models.py", "a/django/forms/models.py", "normalised"),
        ("FILE", "django/forms/models.py", "b/django/forms/models.py", "normalised"),
        ("FILE", "django/forms/models.py", "./django/forms/models.py", "normalised"),
        ("ISSUE", "#123", "issue 123", "issue-number"),
        ("CONCEPT", "Accessing the UserAdmin", "Accessing UserAdmin", "normalised"),  # "the" inside a name
    ],
)
def test_what_still_links(node_type: str, existing: str, incoming: str, rule: str) -> None:
    verdict = _verdict([(node_type, existing)], node_type, incoming)
    assert (verdict.action, verdict.rule, verdict.target) == (LINK, rule, f"{node_type}:{existing}")


def test_a_name_a_word_longer_is_only_a_candidate() -> None:
    # On real sessions the same shape was the same thing 12 times and another thing 42 times
    # (`DigiCert Global Root` / `Global Root`, `New York` / `New York Office`): never a link.
    for existing, incoming in (("Camerfirma Global Chambersign Root", "Global Chambersign Root"), ("New York Office", "New York")):
        verdict = _verdict([("CONCEPT", existing)], "CONCEPT", incoming)
        assert verdict.action == CANDIDATE and verdict.candidates[0].node_id == f"CONCEPT:{existing}"
    # "a" inside a name is a letter, not an article
    assert _verdict([("CONCEPT", "Type A Error")], "CONCEPT", "Type Error").action != LINK


def test_a_colour_or_a_leading_zero_is_no_issue_number() -> None:
    assert _verdict([("ISSUE", "#0")], "ISSUE", "#000").action == CREATE
    assert _verdict([("ISSUE", "#42")], "ISSUE", "#0042").action == CREATE


def test_paths_keep_case_and_two_full_paths_are_never_candidates() -> None:
    assert _verdict([("FILE", "README.md")], "FILE", "readme.md").action == CREATE
    assert _verdict([("FILE", "django/db/backends/base/schema.py")], "FILE", "django/db/backends/oracle/schema.py").action == CREATE
    assert _verdict([("FILE", "lib/matplotlib/tests/test_table.py")], "FILE", "lib/matplotlib/tests/test_image.py").action == CREATE
    assert _verdict([("FILE", "http://example.com/a/")], "FILE", "https://pypi.org/project/a/").action == CREATE
    bare = _verdict([("FILE", "sympy/stats/drv.py")], "FILE", "drv.py")
    assert (bare.action, bare.rule) == (CANDIDATE, "file-basename")


def test_review_list_skips_a_base_name_many_files_share() -> None:
    inits = [("FILE", f"pkg{i}/__init__.py") for i in range(5)]
    assert _verdict(inits, "FILE", "__init__.py").action == CREATE
    assert _verdict([("FILE", "__init__.py"), *inits], "FILE", "pkg9/__init__.py").action == CREATE


def test_a_bare_base_name_beside_two_files_of_it_is_no_candidate() -> None:
    # Two files of the name: the bare name says neither (review list only).
    two = [("FILE", "django/db/models/query.py"), ("FILE", "django/db/models/sql/query.py")]
    assert _verdict(two, "FILE", "query.py").action == CREATE
    # One file written from two directories (one path ends the other, `../` aside) is one file.
    one = [("FILE", "tests/migrations/test_autodetector.py"), ("FILE", "migrations/test_autodetector.py")]
    assert _verdict(one, "FILE", "test_autodetector.py").action == CANDIDATE
    assert files_of(["../tests/runtests.py", "tests/runtests.py"]) == 1
    assert files_of(["a/x/f.py", "b/x/f.py", "x/f.py"]) == 2  # `x/f.py` may be either


def test_file_nodes_drop_diff_prefixes_and_identifiers_keep_case_in_a_session() -> None:
    from pipelines.extract.heuristic import find_mentions
    from pipelines.extract.model import identity_key, semantic_node_id

    names = {m.name for m in find_mentions("diff --git a/src/x.py b/src/x.py and ./src/x.py") if m.node_type == "FILE"}
    assert names == {"src/x.py"}
    assert semantic_node_id("FILE", "b/src/X.py") == "FILE:src/X.py"
    assert identity_key("METHOD", "F") != identity_key("METHOD", "f")
    assert identity_key("CONCEPT", "Map Reduce") == identity_key("CONCEPT", "map reduce")


def test_review_list_caps_what_one_name_can_be() -> None:
    # Forty locales' formats.py in one session: none is a candidate for a bare formats.py.
    index = AliasIndex.build([NodeRef("FILE:formats.py", "FILE", "formats.py")])
    batch = [NodeRef(f"FILE:locale/{code}/formats.py", "FILE", f"locale/{code}/formats.py") for code in ("de", "fr", "it", "nl", "pl")]
    assert [v.action for v in resolve_batch(batch, index)] == [CREATE] * 5
    # A bare method name shared by many qualified ones names none of them.
    saves = [("METHOD", f"{owner}.save") for owner in ("user", "form", "obj", "model")]
    assert _verdict(saves, "METHOD", "save").action == CREATE
    # An alias taken from an earlier link is no bridge between two receivers.
    index = AliasIndex.build([NodeRef("METHOD:annotations.items", "METHOD", "annotations.items", ("items",))])
    assert resolve(NodeRef("METHOD:sequence.items", "METHOD", "sequence.items"), index).action == CREATE


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


@pytest.mark.both_backends
def test_unmerge_after_later_sessions_moves_back_only_the_merged_rows(db) -> None:
    from pipelines.extract.commit import commit_session
    from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
    from pipelines.extract.reduce import reduce_session
    from store.semantic_index import SemanticIndex
    from store.unit_of_work import DatabaseUnitOfWork

    graph, merges, points = GraphStore(db), MergeStore(db), ProvenanceStore(db)
    original = graph.get_node("CLASS:LazyEdgeQueue")
    merges.merge_nodes("CLASS:LEQ", "CLASS:LazyEdgeQueue")
    assert graph.get_node("CLASS:LazyEdgeQueue").properties["description"].startswith("The lazy edge queue, abbreviated")
    # a later session names the merged form: identity links it to the target (LEQ is its alias now)
    work = WorkUnit("s9:chunk:0", "s9", 0, (UnitTurn(1, "m9", "LEQ drains"),), "h")
    raw = {"summary": "", "nodes": [{"id": "q", "type": "CLASS", "name": "LEQ", "description": "short",
                                     "evidence": [{"turn": 1, "quote": "LEQ"}]}], "edges": []}
    graph.upsert_nodes([Node("session:s9", "SESSION", "s9"), Node("memory:m9", "MEMORY", "m9")])
    commit_session(reduce_session("s9", [validate_extraction(raw, work, semantic_types=("CLASS",))]),
                   unit=DatabaseUnitOfWork(db), graph_index=SemanticIndex(db), on_commit=lambda: None, queue_append=len)
    assert {p.anchor for p in points.node_points("CLASS:LazyEdgeQueue")} == {"session:s1", "session:s2", "session:s9"}

    merges.unmerge("CLASS:LEQ")
    queue = graph.get_node("CLASS:LazyEdgeQueue")
    # the later session's point stays on the target; the merged node gets exactly its own rows back
    assert {p.anchor for p in points.node_points("CLASS:LazyEdgeQueue")} == {"session:s1", "session:s9"}
    assert {(p.anchor, p.memory) for p in points.node_points("CLASS:LEQ")} == {("session:s2", "memory:m3")}
    # and the target says what it would without the merge (plus what s9 said), not LEQ's description
    assert queue.properties["description"] == original.properties["description"]
    assert set(queue.properties["aliases"]) == set(original.properties["aliases"]) | {"LEQ"}
    assert graph.get_edge("CLASS:LazyEdgeQueue", "session:s9", "DISCUSSED_IN") is not None
    assert graph.get_edge("CLASS:LazyEdgeQueue", "memory:m3", "MENTIONED_IN") is None
