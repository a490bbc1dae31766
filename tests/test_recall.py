"""Recall: FTS5 index kept by ingest and triggers, hybrid ranking, scope (user, session, as_of),
token budget, bad input — against real SQLite and a real embedded Chroma, through a real cycle."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.importer import import_sessions
from pipelines.recall import (
    COMMON_NODE_POINTS,
    MAX_QUERY_CHARS,
    SIGNALS,
    RecallInputError,
    RecallRequest,
    RecallWeights,
    fuse,
    item_tokens,
    match_expression,
    parse_as_of,
    query_terms,
    recall,
    informative_first,
    passage_ranking,
    selective_terms,
    session_matches,
    session_scores,
    specific_nodes,
    turn_words,
)
from store.backend import open_database
from store.chroma import ChromaStore
from store.db import MIGRATIONS, Database, _statements, register_functions
from store.graph import GraphStore
from store.recall_index import RecallIndex, TurnRecord
from tests.conftest import run_cli, write_sessions
from worker.cycle import run_cycle
from worker.recall import RecallTimeoutError, open_index, reindex, run_recall, search_nodes, show_node

# Two users whose sessions share entities (LazyEdgeQueue, drain()); each also says things only they know.
ALICE_ONLY = ("torn", "quarantined", "Drain torn lines", "alice-s1", "am1", "am2", "crashes", "Alice")
BOB_ONLY = ("Zephyr", "BLUEFIN", "payroll", "bob-s1", "bob-s2", "bm1", "bm2", "bm3", "Bob", "ordering", "Heron")
SESSIONS: list[dict[str, Any]] = [
    {
        "sessionId": "alice-s1", "title": "Drain torn lines", "createdAt": "2026-11-01T10:00:00Z", "userId": "alice",
        "summary": "Alice found that the LazyEdgeQueue drain leaves torn lines after a crash.",
        "turns": [
            {"id": "am1", "role": "user", "createdAt": "2026-11-01T10:00:00Z",
             "text": "The LazyEdgeQueue drain loses torn lines when the worker crashes mid-write."},
            {"id": "am2", "role": "assistant", "createdAt": "2026-11-01T10:01:00Z",
             "text": "Agreed: drain() must rename the queue file first, then read it, so a torn line is quarantined."},
        ],
    },
    {
        "sessionId": "bob-s1", "title": "Bob Zephyr planning", "createdAt": "2026-11-05T10:00:00Z", "userId": "bob",
        "summary": "Bob discussed Project Zephyr payroll exports on the LazyEdgeQueue.",
        "turns": [
            {"id": "bm1", "role": "user", "createdAt": "2026-11-05T10:00:00Z",
             "text": "Project Zephyr uses the LazyEdgeQueue for payroll exports, codename BLUEFIN."},
            {"id": "bm2", "role": "assistant", "createdAt": "2026-11-05T10:01:00Z",
             "text": "The BLUEFIN payroll export depends on LazyEdgeQueue ordering and drain() timing."},
        ],
    },
    {
        "sessionId": "bob-s2", "title": "Heron review", "createdAt": "2026-11-20T10:00:00Z", "userId": "bob",
        "summary": "Bob reviewed Heron and the drain.",
        "turns": [
            {"id": "bm3", "role": "user", "createdAt": "2026-11-20T10:00:00Z",
             "text": "Heron calls drain() before every payroll export of the LazyEdgeQueue."},
        ],
    },
]


async def build(settings: Settings, tmp_path: Path, sessions: list[dict[str, Any]] = SESSIONS) -> None:
    await import_sessions(
        write_sessions(tmp_path / "in.jsonl", sessions), chroma=ChromaStore(settings),
        memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )
    result = await run_cycle(settings)
    assert result.outcome == "completed", result


@pytest.fixture
async def graph(settings: Settings, tmp_path: Path) -> Settings:
    await build(settings, tmp_path)
    return settings


def ask(settings: Settings, query: str, *, signals: tuple[str, ...] = SIGNALS, weights: RecallWeights = RecallWeights(), **options: Any) -> dict[str, Any]:
    db = open_database(settings, readonly=True)
    try:
        return recall(RecallRequest(query=query, **options), source=RecallIndex(db), signals=signals, weights=weights).as_dict()
    finally:
        db.close()


def strings(value: Any) -> list[str]:
    """Every string in a JSON value (keys too)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def answer_strings(answer: dict[str, Any]) -> str:
    """Everything an answer says, except the echo of the caller's own query terms."""
    echoed = {**answer, "signals": {k: v for k, v in answer["signals"].items() if k != "terms"}}
    return "\n".join(strings(echoed)).casefold()


# --- index ---------------------------------------------------------------------------------
async def test_ingest_indexes_turns_and_sessions_in_the_same_transaction(graph: Settings) -> None:
    db = Database(graph.graph_path)
    counts = RecallIndex(db).counts()
    assert counts["recall_turns"] == 5 and counts["recall_sessions"] == 3
    row = db.query("SELECT * FROM recall_turns WHERE memory_id = 'memory:am2'")[0]
    assert (row["session_id"], row["user_id"], row["turn_index"], row["role"]) == ("session:alice-s1", "alice", 1, "assistant")
    assert "quarantined" in row["text"]
    # Node names and claims are indexed by triggers: every semantic node has its name row.
    names = {r[0] for r in db.query("SELECT node_id FROM recall_node_docs WHERE kind = 'name'")}
    semantic = {n.id for n in GraphStore(db).all_nodes() if n.label not in ("MEMORY", "SESSION")}
    assert names == semantic and "CLASS:LazyEdgeQueue" in names
    db.close()


async def test_deleting_a_node_takes_it_out_of_the_index(graph: Settings) -> None:
    db = Database(graph.graph_path)
    graph_store = GraphStore(db)
    assert ask(graph, "quarantined")["turns"][0]["memory_id"] == "memory:am2"
    graph_store.delete_node("memory:am2")
    graph_store.delete_node("CLASS:LazyEdgeQueue")
    assert not db.query("SELECT 1 FROM recall_node_docs WHERE node_id = 'CLASS:LazyEdgeQueue'")
    assert "memory:am2" not in [t["memory_id"] for t in ask(graph, "quarantined")["turns"]]
    # The FTS index agrees with its content table (an external-content index can drift silently).
    db.conn.execute("INSERT INTO recall_turns_fts(recall_turns_fts, rank) VALUES ('integrity-check', 1)")
    db.conn.execute("INSERT INTO recall_node_docs_fts(recall_node_docs_fts, rank) VALUES ('integrity-check', 1)")
    db.conn.execute("INSERT INTO recall_sessions_fts(recall_sessions_fts, rank) VALUES ('integrity-check', 1)")
    db.close()


async def test_reindex_fills_turn_text_for_a_graph_made_before_the_index(graph: Settings) -> None:
    db = Database(graph.graph_path)
    with db.transaction() as conn:
        conn.execute("DELETE FROM recall_turns")
    db.close()
    assert ask(graph, "quarantined")["turns"] == []
    counts = await reindex(graph, page_size=2)
    assert counts["scanned"] == 5 and counts["written"] == 5 and counts["recall_turns"] == 5
    assert ask(graph, "quarantined")["turns"][0]["memory_id"] == "memory:am2"
    assert (await reindex(graph))["written"] == 0  # idempotent


def test_migration_indexes_existing_sessions_and_nodes(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    register_functions(conn)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY)")
    recall_version = next(v for v, script in enumerate(MIGRATIONS, start=1) if "recall_turns" in script)
    for version, script in enumerate(MIGRATIONS[: recall_version - 1], start=1):
        for statement in _statements(script):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
    conn.execute(
        "INSERT INTO nodes VALUES ('session:s1', 'SESSION', 'Old one', ?, 't', 't')",
        (json.dumps({"sessionId": "s1", "userId": "u", "summary": "kestrel migration notes", "title": "Old one"}),),
    )
    conn.execute("INSERT INTO nodes VALUES ('CONCEPT:kestrel', 'CONCEPT', 'kestrel', '{}', 't', 't')")
    conn.execute("INSERT INTO node_claims(node_id, anchor, extracted_for, description) VALUES ('CONCEPT:kestrel', 'session:s1', 'CONCEPT:kestrel', 'a falcon')")
    conn.close()
    db = Database(path)
    assert db.schema_version == len(MIGRATIONS)
    hit = db.query("SELECT session_id FROM recall_sessions_fts JOIN recall_sessions ON id = recall_sessions_fts.rowid WHERE recall_sessions_fts MATCH 'kestrel'")
    assert hit[0][0] == "session:s1"
    kinds = db.query("SELECT kind FROM recall_node_docs_fts JOIN recall_node_docs ON id = recall_node_docs_fts.rowid WHERE recall_node_docs_fts MATCH 'falcon OR kestrel'")
    assert {r[0] for r in kinds} == {"name", "claim"}
    db.close()


# --- ranking -------------------------------------------------------------------------------
@pytest.mark.both_backends
async def test_recall_reports_facts_turns_sessions_and_each_signal(graph: Settings) -> None:
    answer = ask(graph, "what do we know about the drain's torn lines?")
    turns = answer["turns"]
    assert turns[0]["memory_id"] in {"memory:am1", "memory:am2"}
    first = turns[0]
    assert set(first) >= {"memory_id", "session_id", "turn_index", "role", "created_at", "text", "score", "signals"}
    assert "keyword" in first["signals"] and "entities" in first["signals"]
    # Keyword's first turns hold the first places (the keyword anchor); the rest are by fused score.
    anchored = answer["signals"]["keyword_anchor"]
    assert all("keyword" in t["signals"] for t in turns[:anchored])
    rest = [t["score"] for t in turns[anchored:]]
    assert rest == sorted(rest, reverse=True)
    assert answer["signals"]["keyword"]["turns"] >= 2 and answer["signals"]["entities"]["turns"] >= 1
    assert answer["sessions"][0]["id"] == "session:alice-s1" and answer["sessions"][0]["summary"].startswith("Alice")
    fact = next(f for f in answer["facts"] if f["id"] == "METHOD:drain")
    assert fact["memory_id"].startswith("memory:") and fact["evidence"]
    assert answer["used_tokens"] <= answer["budget_tokens"]


@pytest.mark.both_backends
async def test_entities_reach_turns_that_share_no_word_with_the_query(graph: Settings) -> None:
    # Every turn that grounds the node is found through it, whatever words the turn uses.
    answer = ask(graph, "LazyEdgeQueue")
    entity_turns = {t["memory_id"] for t in answer["turns"] if "entities" in t["signals"]}
    assert {"memory:am1", "memory:bm1"} <= entity_turns


def test_fuse_is_weighted_reciprocal_rank() -> None:
    weights = RecallWeights(keyword=1.0, entities=2.0, rrf_k=10)
    fused = fuse({"keyword": ["a", "b"], "entities": ["b", "c"]}, weights)
    scores = {i: s for i, s, _ in fused}
    assert scores["b"] == pytest.approx(1 / 12 + 2 / 11)
    assert scores["a"] == pytest.approx(1 / 11) and scores["c"] == pytest.approx(2 / 12)
    assert [i for i, _, _ in fused] == ["b", "c", "a"]
    assert dict((i, f) for i, _, f in fused)["b"] == ["keyword", "entities"]


def test_the_keyword_anchor_keeps_keywords_first_turns_in_place() -> None:
    rankings = {"keyword": ["a", "b", "c", "d"], "entities": ["d", "c", "x"], "context": ["d", "x"]}
    weights = RecallWeights(rrf_k=20)
    plain = [i for i, _, _ in fuse(rankings, weights)]
    assert plain[:2] == ["d", "c"]  # plain RRF: two weak signals agreeing outvote keyword's first turns
    anchored = [i for i, _, _ in fuse(rankings, weights, anchor=["a", "b", "gone"])]
    # The anchor's turns first, in keyword's order (an id no ranking holds is skipped); fusion orders the rest.
    assert anchored == ["a", "b", *[i for i in plain if i not in {"a", "b"}]]


def test_a_node_cited_everywhere_grounds_no_turns_and_grounding_is_bounded() -> None:
    points = {"PERSON:Ross": COMMON_NODE_POINTS + 1, "CONCEPT:lobster": 3, "CONCEPT:prom": 40, "CONCEPT:video": 10}
    kept, common = specific_nodes(["PERSON:Ross", "CONCEPT:lobster", "CONCEPT:prom", "CONCEPT:video"], points, budget=50)
    # The speaker of every turn is too common to say which turns answer; the budget skips what does not fit.
    assert common == ["PERSON:Ross"] and kept == ["CONCEPT:lobster", "CONCEPT:prom"]
    assert specific_nodes(["CONCEPT:video", "CONCEPT:unknown"], points) == (["CONCEPT:video", "CONCEPT:unknown"], [])


async def test_recall_keeps_keywords_first_turns_when_bm25_ranks(graph: Settings) -> None:
    query = "drain torn lines"
    keyword = [t["memory_id"] for t in ask(graph, query, limit=20, signals=("keyword",))["turns"]]
    fused = ask(graph, query, limit=20, weights=RecallWeights(keyword_anchor=5))
    anchored = fused["signals"]["keyword_anchor"]
    assert fused["signals"]["terms"]["bm25"] and anchored == min(5, len(keyword)) > 0
    assert [t["memory_id"] for t in fused["turns"][:anchored]] == keyword[:anchored]
    plain = ask(graph, query, limit=20)  # the default since the session signal: plain RRF
    assert plain["signals"]["keyword_anchor"] == 0


async def test_recency_is_an_explicit_option(graph: Settings) -> None:
    plain = ask(graph, "drain payroll", user="bob")
    recent = ask(graph, "drain payroll", user="bob", recency=True)
    assert plain["signals"]["recency"]["enabled"] is False
    assert recent["signals"]["recency"]["enabled"] is True
    assert all("recency" in t["signals"] for t in recent["turns"])


async def test_vector_signal_uses_the_collections_own_embedding(graph: Settings, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("REM_RECALL_VECTOR", "true")
    settings = load_settings()
    answer = await run_recall(settings, RecallRequest(query="payroll export codename", user="bob"))
    assert answer["signals"]["vector"]["enabled"] and answer["signals"]["vector"]["turns"] >= 1
    vector_found = {t["memory_id"] for t in answer["turns"] if "vector" in t["signals"]}
    assert vector_found and vector_found <= {"memory:bm1", "memory:bm2", "memory:bm3"}


# --- scope ---------------------------------------------------------------------------------
QUERIES = (
    "LazyEdgeQueue", "drain()", "drain torn lines", "payroll export Zephyr BLUEFIN", "Heron", "what did Bob decide",
    "Alice crashes quarantined", "queue", "ordering timing",
)


@pytest.mark.both_backends
@pytest.mark.parametrize("vector", [False, True])
async def test_nothing_of_one_user_leaks_into_the_others_recall(graph: Settings, clean_env: pytest.MonkeyPatch, vector: bool) -> None:
    clean_env.setenv("REM_RECALL_VECTOR", "true" if vector else "false")
    settings = load_settings()
    for me, other_only in (("alice", BOB_ONLY), ("bob", ALICE_ONLY)):
        for query in QUERIES:
            answer = await run_recall(settings, RecallRequest(query=query, user=me, budget_tokens=20_000, limit=50))
            said = answer_strings(answer)
            leaked = [word for word in other_only if word.casefold() in said]
            assert not leaked, (me, query, leaked)
            for turn in answer["turns"]:
                assert turn["session_id"].startswith(f"session:{me}-")
        # The shared entity is found for both, each through their own turns only.
        found = await run_recall(settings, RecallRequest(query="LazyEdgeQueue", user=me))
        assert found["turns"] and found["facts"]
    for me, other_only in (("alice", BOB_ONLY), ("bob", ALICE_ONLY)):
        hits = search_nodes(settings, "LazyEdgeQueue drain Zephyr Heron payroll", user=me)
        assert hits["nodes"]
        said = "\n".join(strings(hits["nodes"])).casefold()
        assert not [w for w in other_only if w.casefold() in said]
        shown = show_node(settings, "CLASS:LazyEdgeQueue", user=me)
        assert shown is not None
        said = "\n".join(strings(shown)).casefold()
        assert not [w for w in other_only if w.casefold() in said], shown
    # A node only the other user grounds does not exist for me.
    zephyr = search_nodes(settings, "Zephyr", user="bob")["nodes"]
    assert zephyr
    assert show_node(settings, zephyr[0]["id"], user="alice") is None
    assert search_nodes(settings, "Zephyr", user="alice")["nodes"] == []


@pytest.mark.both_backends
async def test_unknown_user_and_foreign_session_get_an_empty_answer(graph: Settings) -> None:
    # A session the graph does not hold (a mistyped id) too: it said sessions_visible 1 (userwalk3).
    for options in ({"user": "mallory"}, {"user": "alice", "session": "bob-s1"}, {"session": "bob-s9"}):
        answer = ask(graph, "LazyEdgeQueue drain payroll", **options)
        assert answer["turns"] == answer["facts"] == answer["sessions"] == []
        assert answer["signals"]["scope"]["sessions_visible"] == 0
    only = ask(graph, "LazyEdgeQueue drain payroll", session="bob-s2")
    assert {t["session_id"] for t in only["turns"]} == {"session:bob-s2"}


@pytest.mark.both_backends
async def test_as_of_hides_what_was_not_known_yet(graph: Settings) -> None:
    before = ask(graph, "Heron payroll drain LazyEdgeQueue", as_of=parse_as_of("2026-11-10"), budget_tokens=20_000, limit=50)
    said = answer_strings(before)
    assert "heron" not in said and "memory:bm3" not in said and "session:bob-s2" not in said
    assert {t["memory_id"] for t in before["turns"]} >= {"memory:bm1"}
    nothing = ask(graph, "LazyEdgeQueue", as_of=parse_as_of("2020-01-01"))
    assert nothing["turns"] == nothing["facts"] == nothing["sessions"] == []


# --- budget --------------------------------------------------------------------------------
@pytest.mark.both_backends
async def test_answer_is_packed_into_the_budget_and_says_what_was_left_out(graph: Settings) -> None:
    full = ask(graph, "LazyEdgeQueue drain payroll", budget_tokens=50_000, limit=50)
    small = ask(graph, "LazyEdgeQueue drain payroll", budget_tokens=120, limit=50)
    assert small["used_tokens"] <= 120
    cost = sum(item_tokens(i) for kind in ("facts", "turns", "sessions") for i in small[kind])
    assert cost == small["used_tokens"]
    assert small["omitted"] and all({"kind", "id", "tokens"} <= set(o) for o in small["omitted"])
    assert len(small["turns"]) + len(small["facts"]) + len(small["sessions"]) + len(small["omitted"]) == (
        len(full["turns"]) + len(full["facts"]) + len(full["sessions"])
    )


async def test_a_long_turn_is_cut_to_the_room_left(settings: Settings, tmp_path: Path) -> None:
    long_text = "The osprey protocol " + "needs a long explanation " * 2_000
    await build(settings, tmp_path, [{"sessionId": "long", "createdAt": "2026-11-01T10:00:00Z", "userId": "u",
                                      "turns": [{"id": "l1", "role": "user", "text": long_text}]}])
    answer = ask(settings, "osprey", budget_tokens=300)
    assert answer["used_tokens"] <= 300
    turn = answer["turns"][0]
    assert turn["truncated"] is True and turn["text"].startswith("The osprey") and turn["text"].endswith("…")


# --- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "query",
    ['"', '""', "*", "NEAR", "NEAR(a b)", "-drain", "drain -queue", "a AND OR NOT b", "col:drain", "^drain", "drain*",
     "(", ")", "{queue}", "'; DROP TABLE recall_turns; --", "\x00drain", "\udc00", "🦜 émoji", "drain" * 700],
)
@pytest.mark.both_backends
async def test_fts_syntax_in_a_query_is_text_never_an_error(graph: Settings, query: str) -> None:
    answer = ask(graph, query)
    assert isinstance(answer["turns"], list)


async def test_bad_requests_get_a_clear_error(graph: Settings) -> None:
    for query, message in (("", "empty"), ("   \n", "empty"), ("x" * (MAX_QUERY_CHARS + 1), "at most"), ("y" * 100_000, "at most")):
        with pytest.raises(RecallInputError, match=message):
            ask(graph, query)
    for options, message in (({"limit": 0}, "limit"), ({"limit": 10_000}, "limit"), ({"budget_tokens": 0}, "budget"),
                             ({"session": "bad id!"}, "session id"), ({"user": ""}, "user"), ({"user": "u" * 500}, "user")):
        with pytest.raises(RecallInputError, match=message):
            ask(graph, "drain", **options)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-10", "2026-11-10T23:59:59.999Z"),
        ("2026-11-10T08:00:00Z", "2026-11-10T08:00:00.000Z"),
        ("2026-11-10T10:00:00+02:00", "2026-11-10T08:00:00.000Z"),
        ("2026-11-10 08:00", "2026-11-10T08:00:00.000Z"),
        ("10 November 2026", "2026-11-10T23:59:59.999Z"),
        ("Nov 10 2026 8:00", "2026-11-10T08:00:00.000Z"),
        ("2026/11/10", "2026-11-10T23:59:59.999Z"),
        ("1794297600", "2026-11-10T08:00:00.000Z"),
        ("1794297600000", "2026-11-10T08:00:00.000Z"),
    ],
)
def test_as_of_accepts_dates_in_many_formats(text: str, expected: str) -> None:
    assert parse_as_of(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "2026-13-45", "9" * 30, "x" * 1_000, "-99999999999999999"])
def test_as_of_that_is_not_a_date_is_a_clear_error(text: str) -> None:
    with pytest.raises(RecallInputError):
        parse_as_of(text)


def test_common_words_are_left_out_within_the_match_budget() -> None:
    counts = {"joey": 3_000, "sandwich": 40, "the": 90_000, "ate": 1_500}
    assert selective_terms(["joey", "ate", "the", "sandwich"], counts, 5_000) == (["joey", "ate", "sandwich"], True)
    assert selective_terms(["joey", "ate", "sandwich"], counts, 2_000) == (["ate", "sandwich"], True)
    # Only common words: the rarest alone, listed newest first rather than scored.
    assert selective_terms(["the", "joey"], counts, 1_000) == (["joey"], False)


def test_query_terms_are_bounded_and_quoted() -> None:
    assert query_terms("What do we know about the drain's torn lines?") == ["drain", "torn", "lines"]
    assert query_terms("the and of") == []  # stop words only: PostgreSQL's index holds none of them either
    assert query_terms("C and R") == ["c", "r"]
    assert len(query_terms(" ".join(f"w{i}" for i in range(500)))) == 24
    assert match_expression(['near', 'and']) == '"near" OR "and"'
    assert match_expression([]) is None


# --- CLI -----------------------------------------------------------------------------------
async def test_cli_recall_json_and_errors(graph: Settings) -> None:
    env = {"REM_DATA_DIR": str(graph.data_dir)}
    done = run_cli("recall", "torn lines", "--user", "alice", "--json", env=env)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer) >= {"facts", "turns", "sessions", "signals", "omitted"}
    assert answer["turns"][0]["session_id"] == "session:alice-s1"
    text = run_cli("recall", "torn lines", "--as-of", "1 Nov 2026", env=env)
    assert text.returncode == 0 and "memory:am1" in text.stdout
    for args, message in ((("",), "empty"), (("x", "--as-of", "someday"), "not a date"), (("x" * 5000,), "at most")):
        bad = run_cli("recall", *args, env=env)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr


def test_a_rewritten_turn_is_found_by_its_new_words_only(tmp_path: Path) -> None:
    from store.recall_index import Scope, TurnRecord

    db = Database(tmp_path / "g.sqlite3")
    index = RecallIndex(db)
    turn = TurnRecord("memory:t1", "session:s", 0, "user", "2026-11-01T00:00:00.000Z", "the heron flies", "u")
    assert index.index_turns([turn, TurnRecord("memory:t2", "session:s", 1, "user", None, "a heron waits", "u")]) == 2
    assert index.index_turns([turn]) == 0  # unchanged: nothing written
    assert index.index_turns([TurnRecord(**{**{f: getattr(turn, f) for f in turn.__slots__}, "text": "the osprey dives"})]) == 1
    assert index.keyword_turns('"heron"', Scope(), limit=10) == ["memory:t2"]
    assert index.keyword_turns('"osprey"', Scope(), limit=10) == ["memory:t1"]
    assert index.keyword_turns('"heron" OR "osprey"', Scope(), limit=10, ranked=False) == ["memory:t2", "memory:t1"]
    db.conn.execute("INSERT INTO recall_turns_fts(recall_turns_fts, rank) VALUES ('integrity-check', 1)")
    db.close()


@pytest.mark.both_backends
async def test_context_finds_the_reply_next_to_a_keyword_hit(graph: Settings) -> None:
    # Only am1 says "crashes"; the reply am2 shares no word with the query but is the turn after it.
    answer = ask(graph, "crashes", user="alice")
    by_id = {t["memory_id"]: t["signals"] for t in answer["turns"]}
    assert by_id["memory:am1"][0] == "keyword"
    assert "context" in by_id["memory:am2"] and "keyword" not in by_id["memory:am2"]
    assert answer["signals"]["context"]["turns"] >= 1


def test_session_bm25_ranks_a_session_whose_turns_share_the_query_words_between_them() -> None:
    per_word = {"lisbon": {"s:a": 1, "s:b": 1}, "agent": {"s:a": 1, "s:c": 1}, "visa": {"s:c": 1}}  # word → session → turns
    matches = session_matches(per_word, sessions_total=100)
    assert matches.frequencies == {"s:a": {"lisbon": 1, "agent": 1}, "s:b": {"lisbon": 1}, "s:c": {"agent": 1, "visa": 1}}
    rough = session_scores(matches, ["s:a", "s:b", "s:c"])
    assert rough["s:c"] > rough["s:a"] > rough["s:b"] > 0  # visa is rarer than lisbon
    # At equal matches the shorter session ranks higher (BM25's length normalisation, b 0.75).
    exact = session_scores(matches, ["s:a", "s:c"], lengths={"s:a": 5, "s:c": 200}, average_length=20.0)
    assert exact["s:a"] > exact["s:c"]
    # Within a session, the turn holding the rarer words first, then by place.
    rows = {"lisbon": [("m:a1", "s:a", 1), ("m:a4", "s:a", 4)], "visa": [("m:a4", "s:a", 4), ("m:c1", "s:c", 1)]}
    assert informative_first(rows, turn_words(rows, {"lisbon": 50, "visa": 5}, turns_total=1_000)) == {"s:a": ["m:a4", "m:a1"], "s:c": ["m:c1"]}


TRIP = [  # the answer (cm3) shares no word with the question; the words are spread over its session
    {"sessionId": "carol-trip", "title": "t", "createdAt": "2026-11-02T10:00:00Z", "userId": "carol", "turns": [
        {"id": "cm1", "role": "user", "createdAt": "2026-11-02T10:00:00Z", "text": "We fly to Lisbon in March."},
        {"id": "cm2", "role": "assistant", "createdAt": "2026-11-02T10:01:00Z", "text": "Then ask the travel agent about a visa."},
        {"id": "cm3", "role": "user", "createdAt": "2026-11-02T10:02:00Z", "text": "She said none is required for us."},
        {"id": "cm4", "role": "assistant", "createdAt": "2026-11-02T10:03:00Z", "text": "Good, one thing less."},
    ]},
    *[{"sessionId": f"dave-{i}", "title": "t", "createdAt": "2026-11-03T10:00:00Z", "userId": "dave", "turns": [
        {"id": f"dm{i}a", "role": "user", "createdAt": "2026-11-03T10:00:00Z", "text": f"The travel agent sold {i} visa forms and a Lisbon visa guide."},
        {"id": f"dm{i}b", "role": "assistant", "createdAt": "2026-11-03T10:01:00Z", "text": "Noted."},
    ]} for i in range(3)],
]


@pytest.mark.both_backends
async def test_the_session_signal_finds_the_answer_in_the_session_that_matches_as_a_whole(settings: Settings, tmp_path: Path) -> None:
    await build(settings, tmp_path, TRIP)
    query = "Does Carol need a visa for the March trip to Lisbon, says the travel agent?"
    alone = ask(settings, query, signals=("session",), limit=20)
    # Dave's turns each hold four of the words in one turn; Carol's session holds five, over two
    # turns, so BM25 over sessions ranks it first and lists its turns holding a word (the one with
    # the most informative words first), then their neighbours — the answer among them.
    assert alone["signals"]["session"]["sessions"][0] == "session:carol-trip"
    found = [t["memory_id"] for t in alone["turns"]]
    assert found[:3] == ["memory:cm1", "memory:cm2", "memory:cm3"]  # March is the rarest word
    keyword = [t["memory_id"] for t in ask(settings, query, signals=("keyword",), limit=20)["turns"]]
    assert "memory:cm3" not in keyword
    fused = ask(settings, query, limit=20)
    assert any(t["memory_id"] == "memory:cm3" and t["signals"] == ["context", "session"] for t in fused["turns"])
    assert fused["signals"]["session"]["enabled"] and fused["signals"]["weights"]["session"] == 1.0
    # The scope holds: for Dave, Carol's session is neither ranked nor counted.
    dave = ask(settings, query, user="dave", signals=("session",), limit=20)
    assert dave["signals"]["session"]["sessions"] and all(s.startswith("session:dave-") for s in dave["signals"]["session"]["sessions"])
    assert all(t["session_id"].startswith("session:dave-") for t in dave["turns"])


async def test_a_forgotten_session_is_never_recalled_again(graph: Settings) -> None:
    env = {"REM_DATA_DIR": str(graph.data_dir)}
    before = json.loads(run_cli("recall", "BLUEFIN payroll Zephyr", "--json", env=env).stdout)
    assert any(t["session_id"] == "session:bob-s1" for t in before["turns"])
    forgot = run_cli("forget", "--session", "bob-s1", "--json", env=env)
    assert forgot.returncode == 0, forgot.stderr
    # Nor after the next cycle, while its rows are still in Chroma (the tombstone keeps it out).
    assert (await run_cycle(graph)).outcome == "completed"
    after = json.loads(run_cli("recall", "BLUEFIN payroll Zephyr", "--json", env=env).stdout)
    said = answer_strings(after)
    assert "bluefin" not in said and "zephyr" not in said and "bob-s1" not in said, after


async def test_a_recall_past_its_deadline_is_stopped_with_a_clear_error(graph: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store stops the read (an interrupted query, whatever the engine) and recall says why."""
    monkeypatch.setattr("worker.recall.RECALL_DEADLINE_SECONDS", 0.0)
    many_rows = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) SELECT i FROM n"
    with pytest.raises(RecallTimeoutError, match="was stopped; ask something narrower"):
        with open_index(graph) as index:
            index.db.conn.execute(many_rows).fetchall()


def test_the_scene_vote_adds_keyword_and_session_rrf_over_sessions() -> None:
    rankings = {"keyword": ["a1", "b1", "a2"], "session": ["b1", "b2", "b3"], "context": ["a3", "c1"]}
    scene_of = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B", "b3": "B"}  # c1's session unknown
    weights = RecallWeights(keyword=1.0, session=1.0, context=0.5, rrf_k=10)
    plain = {i: s for i, s, _ in fuse(rankings, weights)}
    voted = fuse(rankings, weights, scene_of=scene_of)
    scores = {i: s for i, s, _ in voted}
    # Keyword ranks A then B, the session signal B alone; context's sessions (keyword's neighbours) do not vote.
    vote = {"A": 1 / 11, "B": 1 / 12 + 1 / 11}
    for item, session in scene_of.items():
        assert scores[item] == pytest.approx(plain[item] + vote[session])
    assert scores["c1"] == pytest.approx(plain["c1"])
    # B, which both views rank, holds the first places: its third turn now comes before keyword's first hit.
    order, before = [i for i, _, _ in voted], [i for i, _, _ in fuse(rankings, weights)]
    assert order[:3] == ["b1", "b2", "b3"] and order.index("b3") < order.index("a1") and before.index("a1") < before.index("b3")
    # Weight 0 switches the vote off: plain turn-level RRF.
    assert fuse(rankings, RecallWeights(keyword=1.0, session=1.0, context=0.5, rrf_k=10, scene_vote=0), scene_of=scene_of) == fuse(rankings, weights)


@pytest.mark.both_backends
async def test_recall_adds_each_turns_session_vote_to_its_fused_score(settings: Settings, tmp_path: Path) -> None:
    await build(settings, tmp_path, TRIP)
    query = "Does Carol need a visa for the March trip to Lisbon, says the travel agent?"
    signals = ("keyword", "context", "session")
    votes: dict[str, float] = {}
    for signal in ("keyword", "session"):  # the voters: each ranks sessions by their first turn in its list
        alone = ask(settings, query, signals=(signal,), limit=50)["turns"]
        for rank, session in enumerate(dict.fromkeys(t["session_id"] for t in alone), start=1):
            votes[session] = votes.get(session, 0.0) + 1.0 / (20 + rank)
    plain = ask(settings, query, signals=signals, limit=50, weights=RecallWeights(scene_vote=0))
    voted = ask(settings, query, signals=signals, limit=50)
    assert voted["signals"]["weights"]["scene_vote"] == 1.0
    before = {t["memory_id"]: t["score"] for t in plain["turns"]}
    assert {t["memory_id"] for t in voted["turns"]} == set(before)
    for turn in voted["turns"]:
        assert turn["score"] == pytest.approx(before[turn["memory_id"]] + votes[turn["session_id"]], abs=1e-5)
    # Every session either voter lists gets a vote (keyword's order differs between FTS5 and PostgreSQL).
    assert set(votes) == {"session:carol-trip", "session:dave-0", "session:dave-1", "session:dave-2"}
    scores = [t["score"] for t in voted["turns"]]
    assert scores == sorted(scores, reverse=True)


def test_a_passage_scores_its_turns_words_and_half_its_neighbours() -> None:
    def turn(memory_id: str, session_id: str, index: int | None) -> TurnRecord:
        return TurnRecord(memory_id, session_id, index, "user", None, "")

    records = {t.memory_id: t for t in [turn("a0", "A", 0), turn("a1", "A", 1), turn("a2", "A", 2), turn("a3", "A", 3),
                                        turn("b0", "B", 0), turn("b1", "B", 1), turn("b2", "B", 2),
                                        turn("c0", "C", 0), turn("x", "A", None)]}
    words = {"a0": {"march": 1.0}, "a2": {"visa": 3.0}, "a3": {"agent": 2.0},
             "b0": {"visa": 3.0}, "b1": {"visa": 3.0}, "c0": {"visa": 9.0}, "x": {"visa": 9.0}}
    ranked = passage_ranking(words, records, ["A", "B"])
    scores = {"a2": 3 + 0.5 * 2, "a3": 2 + 0.5 * 3, "b0": 3.0, "b1": 3.0, "b2": 0.5 * 3, "a1": 0.5 * 1 + 0.5 * 3, "a0": 1.0}
    # A word counts once, at its best (b0's neighbour b1 holds visa too: b0 scores 3, not 4.5); ties by
    # the session's place, then the turn's; a turn of a session not ranked (c0) or without a place (x) is not listed.
    assert ranked == sorted(scores, key=lambda m: (-scores[m], "AB".index(records[m].session_id), records[m].turn_index))
    assert ranked[:4] == ["a2", "a3", "b0", "b1"]
    assert passage_ranking(words, records, ["B", "A"])[:3] == ["a2", "a3", "b0"]
    assert passage_ranking({}, records, ["A"]) == []


@pytest.mark.both_backends
async def test_the_passage_anchor_puts_the_best_passage_of_the_best_sessions_first(settings: Settings, tmp_path: Path) -> None:
    await build(settings, tmp_path, TRIP)
    query = "Does Carol need a visa for the March trip to Lisbon, says the travel agent?"
    anchored = ask(settings, query, limit=20)
    plain = ask(settings, query, limit=20, weights=RecallWeights(passage_anchor=0))
    first = anchored["signals"]["passage_anchor"]
    assert anchored["signals"]["weights"]["passage_anchor"] == 1 and plain["signals"]["passage_anchor"] == []
    # Carol's session is the session signal's first; its turns hold the rarest words (March, Lisbon),
    # with the travel agent's visa next to them.
    assert len(first) == 1 and first[0] in {"memory:cm1", "memory:cm2"}
    order = [t["memory_id"] for t in plain["turns"]]
    assert [t["memory_id"] for t in anchored["turns"]] == [*first, *(m for m in order if m not in first)]
    assert anchored["turns"][0]["signals"][-1] == "session"
    # The scope holds: Dave's best passage is one of his turns; without the session signal there is no passage.
    dave = ask(settings, query, user="dave", limit=20)
    assert dave["signals"]["passage_anchor"][0].startswith("memory:dm") and dave["turns"][0]["memory_id"] == dave["signals"]["passage_anchor"][0]
    assert ask(settings, query, signals=("keyword", "context"), limit=20)["signals"]["passage_anchor"] == []


@pytest.mark.both_backends
async def test_a_node_is_common_by_the_points_the_scope_shows(graph: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a node is too common to ground turns is counted in the caller's scope, as the terms
    are: Bob's citations of the LazyEdgeQueue made it "common" in Alice's recall (her answer lost
    its grounding and told her, through ``signals.entities.common``, how much others cite it)."""
    db = open_database(graph, readonly=True)
    try:
        by_anchor = dict(db.query("SELECT anchor, COUNT(*) FROM node_points WHERE node_id = ? GROUP BY anchor", ("CLASS:LazyEdgeQueue",)))
    finally:
        db.close()
    alices = by_anchor["session:alice-s1"]
    assert sum(by_anchor.values()) > alices > 0
    monkeypatch.setattr("pipelines.recall.COMMON_NODE_POINTS", alices)  # common in the whole graph, not in her scope
    everyone = ask(graph, "LazyEdgeQueue")
    assert "CLASS:LazyEdgeQueue" in everyone["signals"]["entities"]["common"]
    hers = ask(graph, "LazyEdgeQueue", user="alice")
    assert "CLASS:LazyEdgeQueue" not in hers["signals"]["entities"]["common"]
    assert "CLASS:LazyEdgeQueue" in hers["signals"]["entities"]["nodes"]
    assert {t["memory_id"] for t in hers["turns"] if "entities" in t["signals"]} >= {"memory:am1"}
    assert {t["session_id"] for t in hers["turns"]} == {"session:alice-s1"}
