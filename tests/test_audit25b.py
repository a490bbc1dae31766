"""The agent-facing read path, attacked (audit25, twenty-third session): recall, ``search_nodes``
and ``show_node`` as a hostile or careless agent and a busy system meet them. Real SQLite files
(and PostgreSQL where marked), embedded Chroma, real cycles, the real ``rem-cycle mcp`` process
driven by the official SDK client over stdio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from config import Settings
from pipelines.importer import import_sessions
from pipelines.chunker import estimate_tokens
from pipelines.recall import RecallInputError, item_tokens, parse_as_of
from store.chroma import ChromaStore
from tests.conftest import run_cli, write_sessions
from tests.test_mcp import stdio_params, text_of
from tests.test_recall import build, strings
from worker.knowledge import merge_node, open_graph_db
from store.recall_index import Scope
from worker.recall import open_index, show_entity

pytestmark = pytest.mark.timeout(120)

BOB_SECRET = "KINGFISHER42"


async def test_a_turn_an_import_moved_into_another_users_session_is_not_shown_with_their_words(
    settings: Settings, tmp_path: Path,
) -> None:
    """Alice's turn ``am1`` is moved by ``import --allow-move`` into a session of Bob's, with Bob's
    words, and no cycle has digested it yet: the graph still holds it as Alice's, in her session.
    A server pinned to Alice shows it as the graph holds it (as recall does), never Chroma's row."""
    await build(settings, tmp_path)
    moved = [{"sessionId": "bob-s9", "title": "Bob private", "createdAt": "2026-11-25T10:00:00Z", "userId": "bob",
              "summary": "Bob's pay.", "turns": [{"id": "am1", "role": "user", "createdAt": "2026-11-25T10:00:00Z",
                                                 "text": f"Bob's salary is {BOB_SECRET} dollars."}]}]
    stats = await import_sessions(write_sessions(tmp_path / "moved.jsonl", moved), chroma=ChromaStore(settings),
                                  memory_collection=settings.memory_collection,
                                  summary_collection=settings.session_collection, allow_move=True)
    assert stats.moves and not stats.bad_lines
    async with Client(stdio_params(settings, REM_MCP_USER="alice")) as client:
        shown = await client.call_tool("show_node", {"node_id": "memory:am1"})
        assert not shown.is_error
        said = "\n".join(strings(shown.structured_content))
        assert BOB_SECRET not in said and "session:bob-s9" not in said
        assert [t["text"] for t in shown.structured_content["turns"]] == [
            "The LazyEdgeQueue drain loses torn lines when the worker crashes mid-write."]
        recalled = await client.call_tool("recall", {"query": "torn lines"})
        assert BOB_SECRET not in "\n".join(strings(recalled.structured_content))


async def test_recall_reads_a_date_as_show_reads_it(settings: Settings, tmp_path: Path) -> None:
    """``20261101`` (ISO 8601's basic form) is the 1st of November to ``show --as-of``; recall read
    it as epoch seconds, 1970-08-23, and answered nothing: the same date, two answers."""
    await build(settings, tmp_path)
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    shown = run_cli("show", "memory:am1", "--as-of", "20261101", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    recalled = run_cli("recall", "torn lines", "--as-of", "20261101", "--json", env=env)
    assert recalled.returncode == 0, recalled.stderr
    answer = json.loads(recalled.stdout)
    assert answer["signals"]["scope"]["as_of"] == "2026-11-01T23:59:59.999Z"
    assert "memory:am1" in [t["memory_id"] for t in answer["turns"]]
    assert parse_as_of("2026-W44") == "2026-10-26T23:59:59.999Z"  # show's reading of an ISO week date


@pytest.mark.parametrize("text", ["2026-11", "Nov 2026", "10:00", "2026-11-01 10:00 PST"])
def test_an_as_of_that_names_no_whole_date_or_an_unknown_zone_is_refused(text: str) -> None:
    """dateutil took what the text left out from today (``2026-11`` was the 3rd of November on the
    3rd of December, the 20th on the 20th) and read ``PST`` as UTC, with a warning on stderr."""
    with pytest.raises(RecallInputError, match="no whole date|time zone not understood"):
        parse_as_of(text)


async def test_the_text_a_model_reads_is_the_json_its_budget_was_packed_by(settings: Settings, tmp_path: Path) -> None:
    """A tool's text content is what most clients put in the model's context. The SDK wrote it as
    JSON indented by two spaces, a quarter more than the compact JSON each item's tokens are
    estimated on: the facts, turns and sessions of a full answer took more than ``budget_tokens``."""
    await build(settings, tmp_path)
    async with Client(stdio_params(settings)) as client:
        for name, arguments in (("recall", {"query": "LazyEdgeQueue drain torn payroll", "budget_tokens": 600}),
                                ("search_nodes", {"query": "LazyEdgeQueue drain Zephyr"}),
                                ("show_node", {"node_id": "CLASS:LazyEdgeQueue"})):
            result = await client.call_tool(name, arguments)
            assert not result.is_error, text_of(result)
            body = result.structured_content
            assert json.loads(text_of(result)) == body
            packed = {k: body[k] for k in ("facts", "turns", "sessions", "nodes") if k in body}
            unpacked = {k: v for k, v in body.items() if k not in packed}
            # The items cost what the packing counted, and the brackets and commas between them a few tokens more.
            assert item_tokens(packed) <= body["used_tokens"] + 30, name
            assert estimate_tokens(text_of(result)) <= item_tokens(packed) + item_tokens(unpacked), name


@pytest.mark.both_backends
async def test_an_id_merged_away_is_no_entity_to_a_user_who_never_saw_it(settings: Settings, tmp_path: Path) -> None:
    """``CONCEPT:project zephyr`` is said only in Bob's session; merged by hand into
    ``CLASS:LazyEdgeQueue``, which Alice sees. ``show_node`` of the old id answered Alice with
    LazyEdgeQueue, ``redirected_from`` the id, where an id never in the graph is no entity: any id
    she guessed told her whether Bob's memory held it."""
    await build(settings, tmp_path)
    merge_node(settings, "CONCEPT:project zephyr", "CLASS:LazyEdgeQueue")
    merge_node(settings, "METHOD:drain", "CLASS:LazyEdgeQueue")  # said in Alice's session and Bob's
    assert await show_entity(settings, "CONCEPT:project zephyr", user="alice", budget_tokens=5000) is None
    for user in ("bob", None):
        seen = await show_entity(settings, "CONCEPT:project zephyr", user=user, budget_tokens=5000)
        assert seen is not None and seen["redirected_from"] == "CONCEPT:project zephyr", user
    drain = await show_entity(settings, "METHOD:drain", user="alice", budget_tokens=5000)
    assert drain is not None and drain["id"] == "CLASS:LazyEdgeQueue" and drain["redirected_from"] == "METHOD:drain"


@pytest.mark.both_backends
async def test_the_reads_of_one_recall_see_one_state_of_the_graph(settings: Settings, tmp_path: Path) -> None:
    """A recall reads the index in a dozen statements (the words' counts, the hits, the turns' text,
    the facts, the sessions), each of which saw the newest commit: a cycle or a forget committing
    between them put part of its change in an answer — a turn ranked whose text was then gone,
    ``turns_total`` counting turns the list no longer held. Here a turn's deletion commits between
    two reads of one index."""
    await build(settings, tmp_path)
    wanted = ["memory:am1", "memory:am2"]
    with open_index(settings) as index:
        before = index.turns(wanted, Scope())
        with open_graph_db(settings) as writer, writer.transaction() as conn:  # another connection
            conn.execute("DELETE FROM nodes WHERE id = ?", ("memory:am1",))
        assert index.turns(wanted, Scope()) == before and set(before) == set(wanted)
    with open_index(settings) as index:  # the next recall sees the deletion
        assert set(index.turns(wanted, Scope())) == {"memory:am2"}
