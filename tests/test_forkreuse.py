"""The same turns in another session are not paid again (forkreuse): a coding agent that forks,
resumes or rewrites a conversation copies its history into a new session — new session id, new
memory ids, the same roles and texts. Each chunk whose words (turn numbers, roles, texts, part) an
earlier session's chunk already had is reused with no request, its evidence on the new session's
memories, and copied into the new session's own row. Real cycles, embedded Chroma, SQLite and
PostgreSQL, the loopback chat-completions server counting requests."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.extract.model import (
    UnitTurn,
    WorkUnit,
    answer_moved_to,
    names_its_session,
    unit_content_hash,
    validate_extraction,
)
from pipelines.importer import import_sessions
from pipelines.recall import RecallRequest
from store.backend import backup as store_backup
from store.backend import open_database
from store.chroma import ChromaStore
from store.db import CHUNK_TEXT_VERSION
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, Reply, auto_extraction
from tests.migrations_support import rolled_back
from tests.test_recall import answer_strings, strings
from tests.test_extract_cycle import llm_settings
from tests.test_upgradecost_restore import _cli
from worker.cycle import run_cycle
from worker.knowledge import forget
from worker.recall import run_recall, search_nodes, show_node

# Two turns a chunk under the 48-token budget of llm_settings: 6 turns are 3 chunks, 8 are 4.
HISTORY = [("user" if i % 2 == 0 else "assistant", f"turn {i} names the Part{chr(65 + i)}Item class and filler")
           for i in range(6)]
NEW_TURNS = [("user", "turn 6 adds the PartXItem class and filler"), ("assistant", "turn 7 adds the PartYItem class too")]


def conversation(sid: str, turns: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "sessionId": sid, "title": f"Session {sid}", "createdAt": "2026-11-01T10:00:00Z", "summary": f"about {sid}",
        "turns": [{"id": f"{sid}-t{i}", "role": role, "text": text} for i, (role, text) in enumerate(turns)],
    }


async def cycle(settings: Settings, tmp_path: Path, *sessions: dict[str, Any]) -> dict[str, Any]:
    """Import ``sessions`` and run one cycle; its extract phase's counts."""
    if sessions:
        source = write_sessions(tmp_path / f"in-{sessions[0]['sessionId']}.jsonl", list(sessions))
        await import_sessions(source, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                              summary_collection=settings.session_collection)
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result.phases["extract"]


def points(settings: Settings, sid: str) -> set[tuple[str, str, str, str]]:
    """The node points of session ``sid``: (node, memory, chunk, evidence), the session's name
    taken out of the memory and chunk ids (so two sessions' points compare)."""
    db = open_database(settings, readonly=True)
    try:
        rows = db.query("SELECT node_id, memory_id, chunk_id, evidence FROM node_points WHERE anchor = ?", (f"session:{sid}",))
        return {(r[0], r[1].replace(f"memory:{sid}-", "memory:"), r[2].removeprefix(f"{sid}:"), r[3]) for r in rows}
    finally:
        db.close()


def rows(settings: Settings, sid: str) -> list[tuple[Any, ...]]:
    """The session's chunk results: (chunk, status, tokens in, attempts), by chunk."""
    db = open_database(settings, readonly=True)
    try:
        found = db.query("SELECT chunk_id, status, tokens_in, attempts FROM chunk_results WHERE session_id = ? ORDER BY chunk_id", (sid,))
        return [tuple(r) for r in found]
    finally:
        db.close()


def unit(sid: str, texts: list[str]) -> WorkUnit:
    turns = tuple(UnitTurn(n, f"{sid}{n}", text, "user") for n, text in enumerate(texts, start=1))
    return WorkUnit(f"{sid}:chunk:0", sid, 0, turns, unit_content_hash(sid, turns))


def test_a_moved_answer_cites_the_memories_at_the_same_places_and_finds_its_own_references() -> None:
    texts = ["The GraphStore keeps nodes.", "See memory:b2 about the GraphStore."]
    a, b = unit("a", texts), unit("b", texts)
    assert a.text_hash == b.text_hash and a.content_hash != b.content_hash
    answer = validate_extraction({"summary": "", "nodes": [
        {"id": "g", "type": "CLASS", "name": "GraphStore", "evidence": [{"turn": 1, "quote": "GraphStore keeps"},
                                                                       {"turn": 2, "quote": "about the GraphStore"}]}],
        "edges": []}, a, semantic_types=["CLASS"])
    assert [r.target for r in answer.references] == ["memory:b2"]

    moved = answer_moved_to(answer, b, a.memory_ids, session_id="a")
    assert moved is not None and moved.unit_id == "b:chunk:0"
    assert [(e.memory_id, e.quote) for e in moved.nodes[0].evidence] == [("b1", "GraphStore keeps"), ("b2", "about the GraphStore")]
    assert moved.references == ()  # in b, turn 2 names its own memory: no reference
    # A stored answer whose evidence is on a memory its row does not list is not moved.
    assert answer_moved_to(answer, b, ("a1", "x"), session_id="a") is None
    assert answer_moved_to(answer, b, ("a1",), session_id="a") is None



def test_an_answer_names_its_session_only_where_its_turns_do_not() -> None:
    texts = ["The GraphStore keeps nodes.", "Resumed from s-77 and the original plan."]
    a = unit("s-1", texts)
    answer = validate_extraction({"summary": "", "nodes": [
        {"id": "g", "type": "CLASS", "name": "GraphStore", "description": "discussed in Session S-1, part chunk:0",
         "evidence": [{"turn": 1, "quote": "GraphStore keeps"}]}], "edges": []}, a, semantic_types=["CLASS"])
    assert names_its_session(answer, "s-1", a)  # any case, as the header spells it or not
    assert not names_its_session(answer, "graph", a)  # a part of a word is not the id
    assert answer_moved_to(answer, unit("b", texts), a.memory_ids, session_id="s-1") is None
    # Within its own session (the same words twice) it names the session it is in.
    assert answer_moved_to(answer, unit("s-1", texts), a.memory_ids, session_id="s-1") is not None
    # An id the turns say themselves is the words': every copy says it too.
    quoted = replace(answer, nodes=(replace(answer.nodes[0], description="resumed from s-77"),))
    assert not names_its_session(quoted, "s-77", unit("s-77", texts))
    assert not names_its_session(answer, "s-1", unit("s-1", [*texts[:1], "Resumed from s-1."]))

@pytest.mark.both_backends
async def test_a_forked_session_pays_only_for_its_new_chunk(settings: Settings, tmp_path: Path) -> None:
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        first = await cycle(mine, tmp_path, conversation("orig", HISTORY))
        assert first["chunks_total"] == llm.chat_count == 3
        llm.reset()

        fork = await cycle(mine, tmp_path, conversation("fork", [*HISTORY, *NEW_TURNS]))
        # Before: 4 requests, the copied history paid again.
        (asked,) = [r.prompt for r in llm.chat_requests]
        assert "PartXItem" in asked and "PartYItem" in asked and "PartAItem" not in asked
        assert (fork["chunks_total"], fork["chunks_reused"], fork["chunks_ok"]) == (4, 3, 1)
        # The reused answers point at the fork's own memories and chunks, as an extraction of it would.
        forked = points(mine, "fork")
        assert {p for p in forked if p[2] != "chunk:3"} == points(mine, "orig")
        assert {p[1] for p in forked} == {f"memory:t{i}" for i in range(8)}
        # Each reused answer is the fork's own row, which cost nothing and no attempt.
        stored = rows(mine, "fork")
        assert stored[:3] == [(f"fork:chunk:{i}", "ok", 0, 0) for i in range(3)] and stored[3][::3] == ("fork:chunk:3", 1)

        llm.reset()
        again = await cycle(mine, tmp_path)
        assert (llm.chat_count, again["sessions_attempted"]) == (0, 0)


@pytest.mark.both_backends
async def test_forgetting_the_original_leaves_a_duplicate_whole_and_pays_nothing(settings: Settings, tmp_path: Path) -> None:
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        await cycle(mine, tmp_path, conversation("orig", HISTORY))
        llm.reset()
        copy = await cycle(mine, tmp_path, conversation("copy", HISTORY))
        # Before: 3 requests.
        assert (llm.chat_count, copy["chunks_reused"]) == (0, 3)
        kept = points(mine, "copy")
        assert kept == points(mine, "orig")

        report = forget(mine, session="orig")
        assert report["chunk_results"] == 3
        again = await cycle(mine, tmp_path)
        assert llm.chat_count == 0 and again["chunks_total"] == 0
        assert points(mine, "copy") == kept and rows(mine, "copy") == [(f"copy:chunk:{i}", "ok", 0, 0) for i in range(3)]

        # The copy's rows are its own: it grows and pays for its new chunk only.
        grown = await cycle(mine, tmp_path, conversation("copy", [*HISTORY, *NEW_TURNS]))
        assert (llm.chat_count, grown["chunks_reused"]) == (1, 3)

        # Forgetting a turn of the copy takes its quotes out of the copy's stored answers (their
        # evidence names the copy's memories, not the forgotten session's).
        turn = forget(mine, memory="memory:copy-t2")
        assert turn["chunk_results"] == 1 and turn["points"] >= 1
        assert not any(p[1] == "memory:t2" for p in points(mine, "copy"))


async def test_other_texts_roles_or_extractors_are_never_reused(settings: Settings, tmp_path: Path) -> None:
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm)
        await cycle(mine, tmp_path, conversation("orig", HISTORY))
        llm.reset()
        retyped = [*HISTORY[:2], (HISTORY[2][0], HISTORY[2][1] + "."), *HISTORY[3:]]  # chunk 1: one character more
        recast = [*HISTORY[:4], ("assistant", HISTORY[4][1]), *HISTORY[5:]]  # chunk 2: another speaker
        counts = await cycle(mine, tmp_path, conversation("retyped", retyped), conversation("recast", recast))
        assert (llm.chat_count, counts["chunks_reused"]) == (2, 4)
        asked = sorted(r.prompt.split("Turns:")[1] for r in llm.chat_requests)
        assert "PartCItem class and filler." in asked[0] + asked[1] and "(assistant) turn 4" in asked[0] + asked[1]

        # Another model is another fingerprint: nothing of the first model's is reused.
        llm.reset()
        other = llm_settings(settings.data_dir, llm, llm_model="another-model")
        counts = await cycle(other, tmp_path, conversation("remodelled", HISTORY))
        assert (llm.chat_count, counts["chunks_reused"]) == (3, 0)


async def test_a_heuristic_fork_reuses_what_a_fresh_extraction_gives(settings: Settings, tmp_path: Path) -> None:
    budget = {"chunk_limit_tokens": 48, "prompt_envelope_tokens": 0}
    mine = settings.model_copy(update=budget)
    await cycle(mine, tmp_path, conversation("orig", HISTORY))
    fork = await cycle(mine, tmp_path, conversation("fork", [*HISTORY, *NEW_TURNS]))
    # Before: 0 reused.
    assert (fork["chunks_total"], fork["chunks_reused"]) == (4, 3)

    alone = load_settings(data_dir=tmp_path / "alone", **budget)
    await cycle(alone, tmp_path, conversation("fork", [*HISTORY, *NEW_TURNS]))
    assert points(mine, "fork") == points(alone, "fork") != set()


@pytest.mark.both_backends
async def test_answers_written_before_migration_19_are_reused_in_their_own_session_only(
    settings: Settings, tmp_path: Path
) -> None:
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        await cycle(mine, tmp_path, conversation("orig", HISTORY))
        rolled_back(mine, "postgresql" if mine.database_url else "sqlite", to=CHUNK_TEXT_VERSION - 1)
        llm.reset()
        # The first cycle migrates: orig's rows lack a text hash. orig grows: 1 request; the fork
        # of its history pays for it (3 + 1), and is reused by the next fork.
        grown = await cycle(mine, tmp_path, conversation("orig", [*HISTORY, *NEW_TURNS]))
        assert (llm.chat_count, grown["chunks_reused"]) == (1, 3)
        llm.reset()
        fork = await cycle(mine, tmp_path, conversation("fork", HISTORY))
        assert (llm.chat_count, fork["chunks_reused"]) == (3, 0)
        llm.reset()
        second = await cycle(mine, tmp_path, conversation("second", [*HISTORY, *NEW_TURNS]))
        assert (llm.chat_count, second["chunks_reused"]) == (0, 4)


@pytest.mark.both_backends
async def test_a_restore_over_a_graph_written_before_migration_19_keeps_its_answers(settings: Settings, tmp_path: Path) -> None:
    """``restore`` reads the graph it replaces without migrating it: one a release before schema 19
    wrote has no text hash to read. Its answers are kept all the same (they are reused in their own
    session), and so are its tombstones."""
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        await cycle(mine, tmp_path, conversation("before", HISTORY))
        backup = tmp_path / "backups" / "graph.backup"
        store_backup(mine, backup)
        since = await cycle(mine, tmp_path, conversation("since", [(role, text.replace("turn", "step")) for role, text in HISTORY]))
        assert since["chunks_ok"] == 3
        forget(mine, session="before")
        rolled_back(mine, "postgresql" if mine.database_url else "sqlite", to=CHUNK_TEXT_VERSION - 1)
        paid = llm.chat_count

        restored = json.loads(_cli(mine, "restore", str(backup), "--json"))
        assert (restored["answers_kept"], restored["forgotten_again"]) == (3, {"sessions": 1, "memories": 0, "nodes": 0})
        again = await cycle(mine, tmp_path)
        assert (llm.chat_count, again["chunks_reused"]) == (paid, 3)


def header_echoed(body: dict[str, Any]) -> dict[str, Any]:
    """:func:`tests.llm_server.auto_extraction`, each description and justification naming the
    prompt's header (``Session <id>, part chunk:<N>. Turns:``) as a model may: "… in session X"."""
    header = next(m["content"] for m in body["messages"] if m["role"] == "user").splitlines()[0]
    answer = auto_extraction(body)
    for node in answer["nodes"]:
        node["description"] = f"{node['name']}, from {header}"
    for edge in answer["edges"]:
        edge["justification"] = f"said together in {header}"
    return answer


@pytest.mark.both_backends
async def test_an_answer_that_names_its_session_is_not_reused_in_another_users_session(
    settings: Settings, tmp_path: Path,
) -> None:
    # The header is the one thing shown that the text hash leaves out; an answer that repeats it
    # is not an answer for the words alone. Copied, it showed alice's session id in bob's recall,
    # search and show scoped to bob, where an extraction of bob's session names bob's.
    turns = [("user", "The GraphStore keeps nodes in LedgerTable rows."), ("assistant", "Noted: GraphStore, LedgerTable.")]
    alice, bob = conversation("alice-private-plan", turns), conversation("bob-s1", turns)
    for session, user in ((alice, "alice"), (bob, "bob")):
        session["userId"] = user
    with LLMServer(default=Reply(header_echoed)) as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        await cycle(mine, tmp_path, alice)
        extracted = await cycle(mine, tmp_path, bob)
        # Before: 1 request, bob's chunk reused from alice's.
        assert (llm.chat_count, extracted["chunks_ok"], extracted["chunks_reused"]) == (2, 1, 0)
        answer = await run_recall(mine, RecallRequest(query="GraphStore LedgerTable", user="bob", budget_tokens=20_000))
        found = search_nodes(mine, "GraphStore LedgerTable", user="bob")
        shown = show_node(mine, "CLASS:GraphStore", user="bob")
        said = "\n".join([answer_strings(answer), *strings(found), *strings(shown)]).casefold()
        assert "alice-private-plan" not in said and "session bob-s1" in said
        # An answer that names no session is still reused everywhere (the tests above).
