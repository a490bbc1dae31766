"""``as_of`` of recall, ``show``, export and the MCP tools (asof26, twenty-fourth session): a
year alone, a session's summary written after the date, a name several nodes share, and the MCP
``show_node`` of a session or a turn. Real SQLite files (and PostgreSQL where marked), embedded
Chroma, real cycles, real ``rem-cycle`` processes and the real ``rem-cycle mcp`` process."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from config import Settings
from pipelines.asof import AsOfError
from pipelines.asof import parse_as_of as show_as_of
from pipelines.recall import RecallInputError, parse_as_of
import worker.recall
from store.backend import open_database
from store.db import MIGRATIONS
from store.graph import GraphStore, Node
from store.recall_index import RecallIndex, Scope, TurnRecord, term_match
from tests.conftest import run_cli
from tests.test_mcp import stdio_params, text_of
from tests.migrations_support import rolled_back
from tests.test_forget import _env
from tests.test_recall import ask, build
from worker.recall import RecallTimeoutError, show_entity

pytestmark = pytest.mark.timeout(120)

# One session whose summary (written at its end) says what only its last turn, two days after the
# first, said: KAFKAPLAN. Its first turns name a class and a method one name holds.
SECRET_LATER = "KAFKAPLAN"
SESSIONS: list[dict[str, Any]] = [
    {"sessionId": "s1", "title": "Queue work", "createdAt": "2026-11-01T10:00:00Z", "userId": "alice",
     "summary": f"Alice decided to replace the LazyEdgeQueue with {SECRET_LATER}.",
     "turns": [{"id": "t1", "role": "user", "createdAt": "2026-11-01T10:00:00Z", "text": "The LazyEdgeQueue drain loses lines."},
               {"id": "t2", "role": "assistant", "createdAt": "2026-11-01T10:05:00Z", "text": "Call lazyEdgeQueue() once a cycle."},
               {"id": "t3", "role": "user", "createdAt": "2026-11-03T10:00:00Z", "text": f"We replace it with {SECRET_LATER}."}]},
]


@pytest.fixture
async def graph(settings: Settings, tmp_path: Path) -> Settings:
    await build(settings, tmp_path, SESSIONS)
    return settings


# --- a year alone ----------------------------------------------------------------------------
@pytest.mark.parametrize("year", ["2026", "1970", " 1000 ", "9999"])
def test_a_year_alone_is_refused_by_both_readings_of_as_of(year: str) -> None:
    """Recall read ``2026`` as epoch seconds (1970-01-01T00:33:46Z) and answered from the first
    half hour of 1970: nothing, and no word why. ``show`` refused it as no ISO 8601 time."""
    with pytest.raises(RecallInputError, match=r"is a year, not a date: name its day \(\d{4}-01-01 for its start"):
        parse_as_of(year)
    with pytest.raises(AsOfError, match="is a year, not a date"):
        show_as_of(year)
    assert parse_as_of("1700000000") == "2023-11-14T22:13:20.000Z"  # ten digits are still epoch seconds
    assert parse_as_of("999") == "1970-01-01T00:16:39.000Z"


def test_a_year_alone_is_one_line_on_every_command_and_tool(settings: Settings, tmp_path: Path) -> None:
    open_database(settings).close()  # an empty graph: the date is read before anything is
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    for command in (["recall", "drain"], ["show", "CLASS:X"], ["export"]):
        done = run_cli(*command, "--as-of", "2026", env=env)
        assert done.returncode == 2, (command, done.stderr[-2000:])
        assert done.stderr.strip().splitlines()[-1].endswith(
            "'2026' is a year, not a date: name its day (2026-01-01 for its start, 2026-12-31 for all of it)"), done.stderr


async def test_a_year_alone_is_refused_by_the_mcp_tools(settings: Settings) -> None:
    open_database(settings).close()
    async with Client(stdio_params(settings)) as client:
        for tool, arguments in (("recall", {"query": "drain"}), ("search_nodes", {"query": "drain"}),
                                ("show_node", {"node_id": "session:s1"})):
            result = await client.call_tool(tool, {**arguments, "as_of": "2026"})
            assert result.is_error and "'2026' is a year, not a date" in text_of(result), (tool, text_of(result))


# --- a summary written after the date ------------------------------------------------------------
@pytest.mark.both_backends
async def test_a_summary_is_not_served_as_of_a_time_before_the_turns_it_speaks_of(graph: Settings) -> None:
    """As of the 2nd, ``s1`` had said nothing of KAFKAPLAN (its last turn is of the 3rd), but its
    summary, written after that turn, was served whole: by recall (listed, and matched by its
    words: ``keyword_sessions`` asked only the session's start), by ``show``, ``export`` and MCP
    ``show_node``. Now one rule (``RecallIndex.sessions``) decides for all of them."""
    env = _env(graph)
    then, later = "2026-11-02", "2026-11-04"
    for as_of, summary in ((then, False), (later, True)):
        answer = run_cli("recall", "decided", "--as-of", as_of, "--json", env=env)
        assert answer.returncode == 0, answer.stderr
        sessions = json.loads(answer.stdout)["sessions"]
        assert [s["id"] for s in sessions] == (["session:s1"] if summary else []), (as_of, sessions)
        listed = ask(graph, "lazyedgequeue", as_of=parse_as_of(as_of))["sessions"]
        assert [(s["id"], SECRET_LATER in s["summary"]) for s in listed] == [("session:s1", summary)], as_of
        shown = run_cli("show", "session:s1", "--as-of", as_of, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        assert (SECRET_LATER in shown.stdout) is summary, as_of
        exported = run_cli("export", "--as-of", as_of, "--include-anchors", env=env)
        assert exported.returncode == 0, exported.stderr
        session = next(n for n in json.loads(exported.stdout)["nodes"] if n["id"] == "session:s1")
        assert (SECRET_LATER in json.dumps(session)) is summary, as_of
    async with Client(stdio_params(graph, **env)) as client:
        for as_of, summary in ((then, False), (later, True)):
            shown = await client.call_tool("show_node", {"node_id": "session:s1", "as_of": as_of})
            assert not shown.is_error, text_of(shown)
            assert (SECRET_LATER in text_of(shown)) is summary, as_of
            recalled = await client.call_tool("recall", {"query": "lazyedgequeue decided", "as_of": as_of})
            assert (SECRET_LATER in text_of(recalled)) is summary, as_of


@pytest.mark.both_backends
def test_sessions_whose_summary_is_not_known_yet_give_their_places_to_the_next_ones(settings: Settings) -> None:
    """``keyword_sessions`` ranks first and asks the summaries' turns after, of the best ones only:
    a session passed over for its summary leaves its place to the next one that matches."""
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes([
            Node(f"session:{sid}", "SESSION", sid, {"createdAt": "2026-11-01T10:00:00.000Z", "summary": summary})
            for sid, summary in (("early", "queue"), ("late", "queue queue queue, the queue"))])
        index = RecallIndex(db)
        index.index_turns(TurnRecord(f"memory:{sid}-{i}", f"session:{sid}", i, "user", at, "words")
                          for sid, times in (("early", ["2026-11-01T10:00:00.000Z"]),
                                             ("late", ["2026-11-01T10:00:00.000Z", "2026-11-05T10:00:00.000Z"]))
                          for i, at in enumerate(times))
        match = term_match("queue")
        assert index.keyword_sessions(match, Scope(), limit=1) == ["session:late"]
        assert index.keyword_sessions(match, Scope(as_of="2026-11-02T00:00:00.000Z"), limit=1) == ["session:early"]
        assert index.keyword_sessions(match, Scope(as_of="2026-11-06T00:00:00.000Z"), limit=2) == ["session:late", "session:early"]
        then = index.sessions(["session:early", "session:late"], Scope(as_of="2026-11-02T00:00:00.000Z"))
        assert {k: v.summary for k, v in then.items()} == {"session:early": "queue", "session:late": ""}
    finally:
        db.close()


# --- a name several nodes hold ------------------------------------------------------------------
def test_show_as_of_lists_the_nodes_a_name_holds_when_none_was_known_yet(graph: Settings) -> None:
    """``show LazyEdgeQueue`` (a class and a method hold the name) lists both; with ``--as-of`` a
    date before either said ``no node 'LazyEdgeQueue'``, as of a name nothing ever held."""
    env = {"REM_DATA_DIR": str(graph.data_dir)}
    now = run_cli("show", "LazyEdgeQueue", env=env)
    before = run_cli("show", "LazyEdgeQueue", "--as-of", "2026-10-01", env=env)
    both = run_cli("show", "LazyEdgeQueue", "--as-of", "2026-11-02", env=env)
    one = run_cli("show", "LazyEdgeQueue", "--as-of", "2026-11-01T10:02:00Z", env=env)

    assert now.stderr.strip() == "rem-cycle: no node 'LazyEdgeQueue'; did you mean: CLASS:LazyEdgeQueue, METHOD:lazyEdgeQueue"
    assert (before.returncode, before.stderr.strip()) == (1, (
        "rem-cycle: no node 'LazyEdgeQueue' was known yet as of 2026-10-01T23:59:59.999Z; 2 have that name now: "
        "CLASS:LazyEdgeQueue (first seen 2026-11-01T10:00:00.000Z), METHOD:lazyEdgeQueue (first seen 2026-11-01T10:05:00.000Z)"))
    assert (both.returncode, both.stderr.strip()) == (1, now.stderr.strip())
    assert one.returncode == 0 and "CLASS:LazyEdgeQueue" in one.stdout, one.stderr  # the one known by then
    unknown = run_cli("show", "NoSuchName", "--as-of", "2026-10-01", env=env)
    assert (unknown.returncode, unknown.stderr.strip()) == (1, "rem-cycle: no node 'NoSuchName'")


# --- MCP show_node of a session or a turn --------------------------------------------------------
@pytest.mark.both_backends
async def test_mcp_show_node_of_a_session_or_a_turn_never_migrates_the_graph(graph: Settings, backend: str) -> None:
    """The tools are read-only (recall opens the graph ``readonly``); ``show_node`` of a
    ``session:``/``memory:`` id went through ``rem-cycle show``'s reader, which opens the graph to
    write and migrates it: a graph a release before this one wrote was upgraded by a read."""
    rolled_back(graph, backend, to=len(MIGRATIONS) - 1)
    async with Client(stdio_params(graph, **_env(graph))) as client:
        for node_id in ("session:s1", "memory:t1"):
            shown = await client.call_tool("show_node", {"node_id": node_id})
            assert not shown.is_error, text_of(shown)
            assert _schema_version(graph) == len(MIGRATIONS) - 1, node_id
        assert [t["memory_id"] for t in shown.structured_content["turns"]] == ["memory:t1"]


@pytest.mark.both_backends
async def test_mcp_show_node_of_a_session_stops_at_recalls_deadline(graph: Settings, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recall's reads stop at ``RECALL_DEADLINE_SECONDS``; ``show_node`` of a session had no
    deadline: behind a lock (PostgreSQL: a migration's, an operator's ``LOCK TABLE``) it waited
    for the lock's own 30 s, holding a worker thread."""
    if backend != "postgresql":
        pytest.skip("a SQLite reader is never held by a lock (WAL); its deadline is the same set_deadline")
    monkeypatch.setattr(worker.recall, "RECALL_DEADLINE_SECONDS", 1.0)
    holder = open_database(graph)
    try:
        with holder.transaction() as conn:
            conn.execute("LOCK TABLE nodes IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(RecallTimeoutError, match="more than 1 s"):
                await show_entity(graph, "session:s1")
            assert time.monotonic() - started < 5
    finally:
        holder.close()


def _schema_version(settings: Settings) -> int:
    db = open_database(settings, readonly=True)
    try:
        return db.schema_version
    finally:
        db.close()
