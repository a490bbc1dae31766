"""Migration 16: each identity verdict the model (``REM_LLM_JUDGE``) gives is kept as it is given, by
the question it answers (``identity_verdicts``), so a worker killed before the session's commit
never pays again for a verdict already given. The kill is a real SIGKILL of ``python -m worker
--once`` while its fourth of six questions is with the model (tests/llm_server.py, counting
requests); the restarted worker asks only the questions not answered. Real SQLite files and a real
PostgreSQL server."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from store.graph import GraphStore
from store.verdicts import VerdictStore
from tests.conftest import run_cli, write_sessions
from tests.llm_server import LLMServer, Reply, held, prompt_turns
from tests.migrations_support import IDENTITY_VERDICTS_VERSION, rolled_back
from tests.test_forget import _env, _session
from tests.test_migrations_community_names import killed_while_asked, once_log, worker_once
from worker.cycle import run_cycle

FILES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
_PATH = re.compile(r"[\w/]+\.py")


def model(body: dict[str, Any]) -> dict[str, Any]:
    """The model: an identity question is answered "the first existing node", a community is
    named, and an extraction gives a FILE node per path a turn names."""
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if '"existing"' in prompt:
        return {"verdict": "link", "target": json.loads(prompt)["existing"][0]["id"]}
    if '"members"' in prompt:
        return {"label": "Files"}
    nodes: dict[str, dict[str, Any]] = {}
    for number, text in prompt_turns(body):
        for path in _PATH.findall(text):
            nodes.setdefault(path, {"id": path, "type": "FILE", "name": path, "description": f"the file {path}",
                                    "confidence": 0.8, "evidence": [{"turn": number, "quote": path}]})
    return {"summary": "files", "nodes": list(nodes.values()), "edges": []}


def questions(server: LLMServer) -> list[str]:
    """The identity questions the model was asked, in order (a request the kill cut off before its
    body was sent has none)."""
    return [r.prompt for r in server.chat_requests if '"existing"' in r.prompt]


async def _import(settings: Settings, path: Any, sessions: list[dict[str, Any]]) -> None:
    await import_sessions(write_sessions(path, sessions), chroma=ChromaStore(settings),
                          memory_collection=settings.memory_collection, summary_collection=settings.session_collection)


@pytest.mark.both_backends
async def test_verdicts_given_before_a_kill_are_not_asked_for_again(settings: Settings, tmp_path: Any, database_url: str | None) -> None:
    """Session "full" names six files by their paths; session "bare" by their base names — six
    questions for the model (`file-basename` candidates). Before, the answers lived in the killed
    worker's memory: all six were asked again."""
    with LLMServer(default=Reply(model)) as server:
        mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": True, "llm_max_retries": 0})
        await _import(mine, tmp_path / "full.jsonl", [_session("full", "2026-11-01T10:00:00Z", [f"See store/{f}.py." for f in FILES])])
        assert (await run_cycle(mine)).outcome == "completed"
        assert questions(server) == []
        await _import(mine, tmp_path / "bare.jsonl", [_session("bare", "2026-11-02T10:00:00Z", [f"Then {f}.py changed." for f in FILES])])

        # Three verdicts answered, the fourth held: the kill lands while it is with the model, however
        # long the test takes to see it asked (a delay could run out first on a loaded machine).
        server.script(*[Reply(model)] * 3, held(Reply(model)), match='"existing"')
        killed_while_asked(settings, server, database_url, lambda: len(questions(server)), count=4)
        before = questions(server)
        assert len(before) == 4  # three answered, the fourth in flight at the kill
        extractions = server.chat_count - len(before)

        again = worker_once(settings, server, database_url)
        assert again.wait(120) == 0, once_log(settings).read_text()[-3000:]
        after = questions(server)[len(before):]
        asked_extractions = [r for r in server.chat_requests[extractions + len(before):] if '"existing"' not in r.prompt and '"members"' not in r.prompt]

    # Only what was not answered before the kill is asked: the one in flight and the two never asked.
    assert len(after) == len(FILES) - 3 and not set(after) & set(before[:3]), (before, after)
    assert len(set(before + after)) == len(FILES)
    assert asked_extractions == []  # the chunk's extraction was kept too (chunk_results)
    db = open_database(settings)
    try:
        graph = GraphStore(db)
        for name in FILES:  # each verdict linked the pair: one node (the least id) with both names
            node = graph.get_node(f"FILE:{name}.py")
            assert graph.get_node(f"FILE:store/{name}.py") is None and node is not None, name
            assert {f"{name}.py", f"store/{name}.py"} <= set(node.properties["aliases"]), node
        assert _all_questions(db) == []  # the commit used them and settled them (day400)
    finally:
        db.close()


def _forget_leaves_no_verdict(settings: Settings, env: dict[str, str], *what: str) -> None:
    forgot = run_cli("forget", *what, env=env)
    assert forgot.returncode == 0, forgot.stderr
    db = open_database(settings)
    try:
        assert _all_questions(db) == []
    finally:
        db.close()


def _all_questions(db: Any) -> list[str]:
    return [r[0] for r in db.query("SELECT question_hash FROM identity_verdicts")]


@pytest.mark.both_backends
def test_a_database_of_the_previous_schema_gets_the_verdict_table(settings: Settings, backend: str) -> None:
    """A database written before migration 16 is migrated; a verdict kept there is found by its
    question, "a new node" (no target) included, and the latest answer to a question wins."""
    rolled_back(settings, backend, to=IDENTITY_VERDICTS_VERSION - 1)
    db = open_database(settings)
    try:
        assert db.schema_version >= IDENTITY_VERDICTS_VERSION
        store = VerdictStore(db)
        store.keep("q-link", "FILE:store/alpha.py", session="s1")
        store.keep("q-new", None, session="s1")
        store.keep("q-link", "FILE:store/bravo.py", session="s2")
        assert store.given(["q-link", "q-new", "q-never"]) == {"q-link": "FILE:store/bravo.py", "q-new": None}
    finally:
        db.close()


async def test_a_question_the_model_could_not_answer_is_kept_by_nobody_and_asked_again(settings: Settings) -> None:
    """A failed call (HTTP 500, no retries) settles nothing and keeps nothing: the next resolver on
    the database asks again, and keeps the answer it then gets; a third asks nothing."""
    from pipelines.extract.commit import Candidate
    from pipelines.extract.llm import OpenAIExtractor
    from pipelines.identity import NodeRef
    from pipelines.judge import ModelJudge
    from pipelines.resolver import GraphResolver
    from tests.llm_server import ok, server_error
    from worker.knowledge import StoredVerdicts

    existing = [NodeRef("FILE:store/alpha.py", "FILE", "store/alpha.py")]
    bare = Candidate("FILE:alpha.py", "FILE", "alpha.py")
    db = open_database(settings)
    try:
        with LLMServer(default=ok({"verdict": "link", "target": "FILE:store/alpha.py"})) as server:
            server.script(server_error(500))
            model = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_max_retries": 0})
            async with OpenAIExtractor(model) as extractor:
                def resolver() -> GraphResolver:
                    return GraphResolver(load_nodes=lambda: existing, load_blocked=frozenset, existing=lambda ids: set(ids),
                                         auditor=ModelJudge(extractor).audit_identity, verdicts=StoredVerdicts(VerdictStore(db)))

                failed = resolver()
                assert await failed.prepare([bare]) == 1 and _all_questions(db) == []
                assert failed([bare]) == {}  # still a candidate: created, not linked
                answered = resolver()
                assert await answered.prepare([bare]) == 1 and len(_all_questions(db)) == 1
                assert answered([bare]) == {"FILE:alpha.py": "FILE:store/alpha.py"}
                assert await resolver().prepare([bare]) == 0
            assert server.chat_count == 2
    finally:
        db.close()


@pytest.mark.both_backends
async def test_verdicts_a_notes_import_asked_are_settled_by_its_commit(settings: Settings, tmp_path: Any) -> None:
    """A notes file's identity questions are kept under the file's ``note:<id>`` (as its chunk
    results and candidates are) while it is imported, and its commit settles them (day400: before,
    they stayed for good, and earlier still under no session at all)."""
    with LLMServer(default=Reply(model)) as server:
        mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": True, "llm_max_retries": 0})
        await _import(mine, tmp_path / "full.jsonl", [_session("full", "2026-11-01T10:00:00Z", [f"See store/{f}.py." for f in FILES[:2]])])
        assert (await run_cycle(mine)).outcome == "completed"
        notes = tmp_path / "notes.md"
        notes.write_text("".join(f"Then {f}.py changed.\n\n" for f in FILES[:2]), encoding="utf-8")
        env = {**_env(settings), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url, "REM_LLM_JUDGE": "true",
               "REM_LLM_MAX_RETRIES": "0"}
        done = run_cli("import-notes", str(notes), "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert len(questions(server)) == 2
    db = open_database(settings)
    try:
        assert _all_questions(db) == []
        graph = GraphStore(db)
        for name in FILES[:2]:  # the verdicts were used: each pair linked
            assert graph.get_node(f"FILE:store/{name}.py") is None and graph.get_node(f"FILE:{name}.py") is not None
    finally:
        db.close()
    note_id = json.loads(done.stdout)["files"][0]["note_id"]
    # A verdict of an import that never committed (a kill) goes with forget --note.
    db = open_database(settings)
    try:
        VerdictStore(db).keep("q-unfinished", None, session=note_id)
    finally:
        db.close()
    _forget_leaves_no_verdict(settings, env, "--note", note_id)
