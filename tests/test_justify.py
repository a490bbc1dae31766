"""An edge's ``justification`` is its live sources': each edge point keeps the justification the
extraction that gave it wrote (schema 15), and the property is recomputed from the points left when
a source's points go — ``forget --session``, ``forget --memory``, a re-extraction that no longer
says the edge. Real cycles with the model extractor against the loopback OpenAI-protocol server,
real Chroma (embedded), the real CLI, both engines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.extract.model import ChunkExtraction, Evidence, ExtractedEdge, ExtractedNode
from pipelines.extract.reduce import reduce_session
from pipelines.importer import import_sessions
from store.backend import open_database
from store.graph import GraphStore
from store.chroma import ChromaStore
from tests.conftest import run_cli, write_sessions
from tests.llm_server import LLMServer, auto_extraction, ok, prompt_turns
from tests.migrations_support import EDGE_JUSTIFICATIONS_VERSION, rolled_back
from tests.test_forget import _env, _session
from worker.cycle import run_cycle

SECRET = "hunter2"
EDGE = ("CLASS:GraphStore", "CLASS:DrainWorker", "DEPENDS_ON")
KEPT = "GraphStore hands every write to DrainWorker."
TOLD = f"GraphStore gives DrainWorker the {SECRET} password."
BOTH = "; ".join(sorted([f"said: {KEPT}", f"said: {TOLD}"]))
SESSIONS = [
    _session("kept", "2026-11-01T10:00:00Z", [KEPT]),
    _session("told", "2026-11-02T10:00:00Z", [TOLD, "RetryPolicy backs off."]),
]


class Model:
    """The model's extraction of a chunk: :func:`auto_extraction`, each node cited in every turn
    naming it, each edge justified by quoting
    its turn (what a model's paraphrase of the turn amounts to); ``silent`` — text whose turns
    this model no longer reads an edge from."""

    def __init__(self) -> None:
        self.silent: set[str] = set()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        extraction = auto_extraction(body)
        turns = dict(prompt_turns(body))
        edges = []
        for edge in extraction["edges"]:
            text = turns[edge["evidence"][0]["turn"]]
            if not any(s in text for s in self.silent):
                edges.append({**edge, "justification": f"said: {text}"})
        # Each node cited in every turn naming it (auto_extraction cites the first only).
        nodes = [{**n, "evidence": [{"turn": k, "quote": n["name"]} for k, text in turns.items() if n["name"] in text]}
                 for n in extraction["nodes"]]
        return {**extraction, "nodes": nodes, "edges": edges}


async def _built(settings: Settings, tmp_path: Path, llm: LLMServer, sessions: list[dict[str, Any]]) -> Settings:
    settings = settings.model_copy(update={"extractor": "openai", "llm_base_url": llm.url, "llm_model": "test-model"})
    await import_sessions(
        write_sessions(tmp_path / "in.jsonl", sessions), chroma=ChromaStore(settings),
        memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )
    assert (await run_cycle(settings)).outcome == "completed"
    return settings


def _cli_json(env: dict[str, str], *args: str) -> Any:
    done = run_cli(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _justification(settings: Settings) -> str:
    db = open_database(settings)
    try:
        rows = db.query("SELECT properties FROM edges WHERE source = ? AND target = ? AND relationship = ?", EDGE)
        assert rows, "the edge is gone"
        return json.loads(rows[0][0]).get("justification", "")
    finally:
        db.close()


def _served(env: dict[str, str], node_id: str = "CLASS:GraphStore") -> dict[str, Any]:
    """What ``show`` (of ``node_id``), ``recall`` and ``export`` serve about GraphStore, by command."""
    return {
        "show": _cli_json(env, "show", node_id), "recall": _cli_json(env, "recall", "GraphStore DrainWorker"),
        "export": _cli_json(env, "export"),
    }


def _shown_justification(shown: dict[str, Any]) -> str:
    """The justification ``show CLASS:GraphStore`` gives its edge to DrainWorker."""
    return next(e["justification"] for e in shown["edges"] if e["node"] == "CLASS:DrainWorker")


@pytest.fixture
def model_server() -> Iterator[tuple[LLMServer, Model]]:
    model = Model()
    with LLMServer(default=ok(model)) as llm:
        yield llm, model


@pytest.mark.both_backends
@pytest.mark.parametrize("forget", [("--session", "told"), ("--memory", "memory:told-t0")])
async def test_forgetting_takes_its_justification_off_a_shared_edge(
    settings: Settings, tmp_path: Path, clean_env, model_server: Any, forget: tuple[str, str],
) -> None:
    llm, _ = model_server
    settings = await _built(settings, tmp_path, llm, SESSIONS)
    env = _env(settings)
    assert _shown_justification(_cli_json(env, "show", "CLASS:GraphStore")) == BOTH
    _cli_json(env, "forget", *forget)
    served = _served(env)
    assert SECRET not in json.dumps(served)
    assert _shown_justification(served["show"]) == f"said: {KEPT}"
    exported = [e for e in served["export"]["edges"] if (e["source"], e["target"], e["relationship"]) == EDGE]
    assert [e["properties"]["justification"] for e in exported] == [f"said: {KEPT}"]


@pytest.mark.both_backends
async def test_a_reextraction_that_no_longer_says_the_edge_takes_its_justification_back(
    settings: Settings, tmp_path: Path, clean_env, model_server: Any,
) -> None:
    llm, model = model_server
    settings = await _built(settings, tmp_path, llm, SESSIONS)
    assert SECRET in _justification(settings)
    model.silent.add(SECRET)
    told = _session("told", "2026-11-02T10:00:00Z", [TOLD, "RetryPolicy backs off.", "RetryPolicy waits."])
    await import_sessions(
        write_sessions(tmp_path / "more.jsonl", [told]), chroma=ChromaStore(settings),
        memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )
    asked = llm.chat_count
    assert (await run_cycle(settings)).outcome == "completed"
    assert llm.chat_count > asked  # "told" was extracted again
    assert _justification(settings) == f"said: {KEPT}"


@pytest.mark.both_backends
async def test_justifications_written_before_migration_15_stay_until_the_edge_loses_a_source(
    settings: Settings, tmp_path: Path, clean_env, backend: str, model_server: Any,
) -> None:
    """A database of schema 14 is migrated: its edge points have no known justification (NULL), so
    the edge's text stays as it was; once a source's points for the edge go, only known sources
    count — the forgotten session's text cannot survive, whoever wrote it."""
    llm, _ = model_server
    settings = await _built(settings, tmp_path, llm, SESSIONS)
    rolled_back(settings, backend, to=EDGE_JUSTIFICATIONS_VERSION - 1)
    db = open_database(settings)
    try:
        assert db.schema_version >= EDGE_JUSTIFICATIONS_VERSION
        assert {r[0] for r in db.query("SELECT justification FROM edge_points WHERE source = ? AND target = ? AND relationship = ?", EDGE)} == {None}
    finally:
        db.close()
    env = _env(settings)
    assert _shown_justification(_cli_json(env, "show", "CLASS:GraphStore")) == BOTH  # unknown sources: kept as written
    _cli_json(env, "forget", "--session", "told")
    served = _served(env)
    assert SECRET not in json.dumps(served)
    assert _shown_justification(served["show"]) == ""


@pytest.mark.both_backends
async def test_forgetting_a_turn_keeps_what_the_same_session_said_of_the_edge_elsewhere(
    settings: Settings, tmp_path: Path, clean_env, model_server: Any,
) -> None:
    """Within one session (one chunk), each turn's justification stays with that turn's points."""
    llm, _ = model_server
    said = "GraphStore batches writes for DrainWorker."
    settings = await _built(settings, tmp_path, llm, [_session("one", "2026-11-04T10:00:00Z", [TOLD, said])])
    assert _justification(settings) == "; ".join(sorted([f"said: {TOLD}", f"said: {said}"]))
    _cli_json(_env(settings), "forget", "--memory", "memory:one-t0")
    assert SECRET not in json.dumps(_served(_env(settings)))
    assert _justification(settings) == f"said: {said}"


@pytest.mark.both_backends
async def test_an_unmerge_after_a_forget_does_not_bring_the_forgotten_justification_back(
    settings: Settings, tmp_path: Path, clean_env, model_server: Any,
) -> None:
    """The merge record saves the edge as it was (the secret in its text); the unmerge rebuilds
    the edge's justification from the points it gets back, not from that copy."""
    llm, _ = model_server
    sessions = [_session("kept", "2026-11-01T10:00:00Z", [KEPT, "RetryPolicy waits."]), SESSIONS[1]]
    settings = await _built(settings, tmp_path, llm, sessions)
    env = _env(settings)
    assert run_cli("merge", "CLASS:GraphStore", "CLASS:RetryPolicy", env=env).returncode == 0
    _cli_json(env, "forget", "--session", "told")
    done = run_cli("unmerge", "CLASS:GraphStore", env=env)
    assert done.returncode == 0, done.stderr
    assert SECRET not in json.dumps(_served(env))
    assert _justification(settings) == f"said: {KEPT}"


def test_each_point_of_a_session_edge_keeps_the_justification_it_came_with() -> None:
    """Pure (reduce): a point keeps its chunk edge's justification; a chunk-level point dropped
    because its chunk also quoted the edge hands its justification to that chunk's quoted points."""
    def node(name: str) -> ExtractedNode:
        return ExtractedNode(f"CLASS:{name}", "CLASS", name, evidence=(Evidence("s-t0", name),))

    def edge(justification: str, *evidence: Evidence) -> ExtractedEdge:
        return ExtractedEdge("CLASS:A", "CLASS:B", "DEPENDS_ON", justification, evidence)

    reduced = reduce_session("s", [
        ChunkExtraction("s:chunk:0", nodes=(node("A"), node("B")), edges=(edge("first", Evidence("s-t0", "A")), edge("unquoted"))),
        ChunkExtraction("s:chunk:1", nodes=(node("A"), node("B")), edges=(edge("second", Evidence("s-t1", "A")),)),
    ])
    (found,) = reduced.edges
    assert {(p.memory, found.reason(p)) for p in found.provenance} == {
        ("memory:s-t0", "first; unquoted"), ("memory:s-t1", "second"),
    }


RETRY = "RetryPolicy gives DrainWorker the hunter2 password."
MERGED_INTO = ("CLASS:GraphStore", "CLASS:DrainWorker", "DEPENDS_ON")
MERGED_AWAY = ("CLASS:RetryPolicy", "CLASS:DrainWorker", "DEPENDS_ON")


def _edge_justification(settings: Settings, key: tuple[str, str, str]) -> str | None:
    """The edge's ``justification`` (``None`` when there is no such edge)."""
    db = open_database(settings)
    try:
        rows = db.query("SELECT properties FROM edges WHERE source = ? AND target = ? AND relationship = ?", key)
        return json.loads(rows[0][0]).get("justification", "") if rows else None
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_merge_keeps_every_sources_justification_and_an_unmerge_gives_each_back(
    settings: Settings, tmp_path: Path, clean_env, model_server: Any,
) -> None:
    """`merge RetryPolicy GraphStore`: both nodes' edges to DrainWorker become one, which says what
    both said (before: only GraphStore's text; RetryPolicy's was lost, and stayed lost after an
    unmerge); `unmerge` gives each edge its own text back."""
    llm, _ = model_server
    sessions = [SESSIONS[0], _session("retry", "2026-11-02T10:00:00Z", [RETRY])]
    settings = await _built(settings, tmp_path, llm, sessions)
    env = _env(settings)
    assert _edge_justification(settings, MERGED_AWAY) == f"said: {RETRY}"
    assert run_cli("merge", "CLASS:RetryPolicy", "CLASS:GraphStore", env=env).returncode == 0
    assert _edge_justification(settings, MERGED_AWAY) is None
    assert _edge_justification(settings, MERGED_INTO) == "; ".join(sorted([f"said: {KEPT}", f"said: {RETRY}"]))
    assert f"said: {RETRY}" in json.dumps(_cli_json(env, "export"))

    done = run_cli("unmerge", "CLASS:RetryPolicy", env=env)
    assert done.returncode == 0, done.stderr
    assert _edge_justification(settings, MERGED_INTO) == f"said: {KEPT}"
    assert _edge_justification(settings, MERGED_AWAY) == f"said: {RETRY}"


@pytest.mark.both_backends
@pytest.mark.parametrize("forgotten", ["retry", "kept"])
async def test_a_forget_after_a_merge_takes_the_sources_text_out_and_an_unmerge_does_not_bring_it_back(
    settings: Settings, tmp_path: Path, clean_env, model_server: Any, forgotten: str,
) -> None:
    """The merged edge holds both sources' text; forgetting either (the merged-in node's session or
    the surviving node's) takes its text out of the merged edge and of every edge the unmerge gives
    back (before: the surviving node's edge came back whole, its forgotten text in it). Either way
    the merge is gone: with the merged-in node's session, or dissolved when the surviving node's
    own session goes (the node, left with what RetryPolicy's session said, is RetryPolicy again)."""
    llm, _ = model_server
    kept_secret = f"GraphStore hands DrainWorker the {SECRET} password."
    sessions = [_session("kept", "2026-11-01T10:00:00Z", [kept_secret, "GraphStore waits."]),
                _session("retry", "2026-11-02T10:00:00Z", [RETRY, "RetryPolicy waits."])]
    settings = await _built(settings, tmp_path, llm, sessions)
    env = _env(settings)
    assert run_cli("merge", "CLASS:RetryPolicy", "CLASS:GraphStore", env=env).returncode == 0
    report = _cli_json(env, "forget", "--session", forgotten)
    left = f"said: {kept_secret if forgotten == 'retry' else RETRY}"
    gone = f"said: {RETRY if forgotten == 'retry' else kept_secret}"
    mine = MERGED_INTO if forgotten == "retry" else MERGED_AWAY
    assert _edge_justification(settings, mine) == left
    assert gone not in json.dumps(_served(env, mine[0]))

    done = run_cli("unmerge", "CLASS:RetryPolicy", env=env)
    if forgotten == "retry":
        # RetryPolicy was the forgotten session's alone: the merge, which held its name, went with
        # it (forgetrest), so there is nothing to undo.
        assert report["merges_dropped"] == 1
    else:
        # GraphStore was the forgotten session's alone: the node is RetryPolicy's (forgetids).
        assert report["nodes_rekeyed"] == {"CLASS:GraphStore": "CLASS:RetryPolicy"}
    assert done.returncode == 1 and "no active merge" in done.stderr, done.stderr
    assert gone not in json.dumps(_cli_json(env, "export"))
    assert gone not in (_edge_justification(settings, MERGED_INTO) or "") + (_edge_justification(settings, MERGED_AWAY) or "")
    assert _edge_justification(settings, mine) == left


@pytest.mark.both_backends
async def test_unmerging_a_name_a_commit_linked_gives_each_edge_its_own_justification(
    settings: Settings, tmp_path: Path, clean_env, model_server: Any,
) -> None:
    """`GraphStores` (session "plural") is linked into `GraphStore` by its commit: their edges to
    DrainWorker are one, saying both; `unmerge CLASS:GraphStores` leaves each edge its own session's
    text (before: the re-created edge got the merged edge's text, the other session's included)."""
    llm, _ = model_server
    plural = "GraphStores give DrainWorker the hunter2 password."
    settings = await _built(settings, tmp_path, llm, [SESSIONS[0], _session("plural", "2026-11-02T10:00:00Z", [plural])])
    assert _edge_justification(settings, MERGED_INTO) == "; ".join(sorted([f"said: {KEPT}", f"said: {plural}"]))
    done = run_cli("unmerge", "CLASS:GraphStores", env=_env(settings))
    assert done.returncode == 0, done.stderr
    assert _edge_justification(settings, MERGED_INTO) == f"said: {KEPT}"
    assert _edge_justification(settings, ("CLASS:GraphStores", "CLASS:DrainWorker", "DEPENDS_ON")) == f"said: {plural}"


@pytest.mark.both_backends
async def test_a_merge_of_edges_written_before_migration_15_keeps_and_gives_back_their_text(
    settings: Settings, tmp_path: Path, clean_env, backend: str, model_server: Any,
) -> None:
    """Edge points of schema 14 carry no justification: the merged edge keeps both edges' text as
    written, and the unmerge gives each edge the text it had (kept in the merge record)."""
    llm, _ = model_server
    settings = await _built(settings, tmp_path, llm, [SESSIONS[0], _session("retry", "2026-11-02T10:00:00Z", [RETRY])])
    rolled_back(settings, backend, to=EDGE_JUSTIFICATIONS_VERSION - 1)
    open_database(settings).close()  # migrated again: the points' justifications are unknown (NULL)
    env = _env(settings)
    assert run_cli("merge", "CLASS:RetryPolicy", "CLASS:GraphStore", env=env).returncode == 0
    assert _edge_justification(settings, MERGED_INTO) == "; ".join(sorted([f"said: {KEPT}", f"said: {RETRY}"]))
    assert run_cli("unmerge", "CLASS:RetryPolicy", env=env).returncode == 0
    assert _edge_justification(settings, MERGED_INTO) == f"said: {KEPT}"
    assert _edge_justification(settings, MERGED_AWAY) == f"said: {RETRY}"
