"""Hostile input that SQLite takes and PostgreSQL refused (pghostile): the nastiest values a model
answer, a queue line or a transcript may legally carry, through the real cycle on both engines.

PostgreSQL keeps a btree index entry on one page (about 2,700 bytes after compression): a value
longer than that in an indexed text column fails its INSERT ("index row size exceeds maximum"),
where SQLite has no such limit. The values here are random characters outside the Basic
Multilingual Plane (4 bytes each in UTF-8, and nothing for compression to shorten)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from pipelines.extract.model import MAX_NAME_CHARS
from pipelines.enqueue import InvalidLazyEdgeError, enqueue_lazy_edges
from store.backend import open_database
from store.chroma import MAX_TURN_INDEX, MAX_USER_ID_CHARS, ChromaStore
from store.db import MIGRATIONS, REASON_DIGEST_VERSION, SEARCH_BOUND_VERSION
from store.graph import Edge, GraphStore, Node
from store.provenance import EdgePointRow, PointRow, ProvenanceStore
from store.lazy_queue import edge_line
from tests.conftest import run_cli, write_sessions
from tests.llm_server import LLMServer, ok
from tests.migrations_support import rolled_back
from tests.test_change_scan import _query
from tests.test_recall import ask
from tests.test_roundtrip_restore import _env
from worker.cycle import run_cycle

_RANDOM = random.Random(26)


def _noise(chars: int) -> str:
    """``chars`` random letters of CJK Extension B (U+20000-U+2A6DF): 4 UTF-8 bytes each, incompressible."""
    return "".join(chr(_RANDOM.randrange(0x20000, 0x2A6E0)) for _ in range(chars))


NAME_A, NAME_B, REASON = _noise(300), _noise(300), _noise(500)
TURN = f"{NAME_A} talks to {NAME_B} because {REASON}"


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    """An extraction at every limit the validation keeps: two 300-character names and a
    500-character justification, each quoted from the turn."""
    nodes = [{"id": n, "type": "CLASS", "name": n, "description": "", "confidence": 0.9,
              "evidence": [{"turn": 1, "quote": n}]} for n in (NAME_A, NAME_B)]
    edge = {"source": NAME_A, "target": NAME_B, "relationship": "DEPENDS_ON", "justification": REASON,
            "evidence": [{"turn": 1, "quote": REASON}]}
    return {"summary": "long names", "nodes": nodes, "edges": [edge]}


@pytest.mark.both_backends
async def test_an_edge_with_the_longest_names_and_justification_commits(settings: Settings, tmp_path: Path) -> None:
    """A model answer at every length the validation allows (two 300-character names, a
    500-character justification) commits on both engines. On PostgreSQL the edge point's
    ``edge_points_reason`` entry (source, target, relationship, justification) was ~4.4 kB, and the
    commit failed "index row size 4448 exceeds btree version 4 maximum 2704": the session was
    charged an attempt at every cycle and ended ``undigestible``, while SQLite digested it. Since
    migration 31 PostgreSQL's index leads with a digest of the edge's key (pgreason)."""
    sessions = write_sessions(tmp_path / "in.jsonl", [{
        "sessionId": "long", "createdAt": "2026-11-01T10:00:00Z", "userId": "u", "title": "T", "summary": "S",
        "turns": [{"id": "long-t0", "role": "user", "text": TURN}]}])
    await import_sessions(sessions, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)
    with LLMServer(default=ok(_answer)) as llm:
        result = await run_cycle(settings.model_copy(update={"llm_base_url": llm.url, "extractor": "openai"}))
    digest = result.phases.get("digest") or result.phases
    states = _query(settings, "SELECT state, defer_reason FROM session_digests")
    reasons = [r[0] for r in _query(settings, "SELECT justification FROM edge_points WHERE anchor = 'session:long'")]
    assert states == [("digested", None)], (states, digest)
    assert reasons == [REASON]


def _han(chars: int) -> str:
    """``chars`` random CJK Unified Ideographs (U+4E00-U+9FFF): 3 UTF-8 bytes each, incompressible."""
    return "".join(chr(_RANDOM.randrange(0x4E00, 0xA000)) for _ in range(chars))


@pytest.mark.both_backends
async def test_a_graph_of_the_schema_before_migration_31_keeps_its_edges_texts_and_takes_the_longest_edge(
    settings: Settings, tmp_path: Path, backend: str
) -> None:
    """A graph of schema ``REASON_DIGEST_VERSION - 1`` holding an edge with points of three
    sessions, opened again: migrated (PostgreSQL's ``edge_points_reason`` made anew on the edge's
    digest and ``edge_points_owner`` on its key alone, over the rows they hold), the edge's texts are found as before (``edge_texts``, by the
    index), and a session answering with the longest edge is digested."""
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes([Node("class:a", "CLASS", "a", {}), Node("class:b", "CLASS", "b", {})])
        GraphStore(db).link_nodes([Edge("class:a", "class:b", "DEPENDS_ON")])
        key = ("class:a", "class:b", "DEPENDS_ON")
        ProvenanceStore(db).add_edge_points([EdgePointRow(key, PointRow(f"session:{n}", "", f"{n}:chunk:0", ""), "class:a", "class:b",
                                                          justification=text) for n, text in (("x", "why"), ("y", "because"), ("z", None))])
    finally:
        db.close()
    rolled_back(settings, backend, to=REASON_DIGEST_VERSION - 1)
    db = open_database(settings)  # migrates it
    try:
        assert db.schema_version == len(MIGRATIONS)
        assert ProvenanceStore(db).edge_texts([key], besides="session:y") == {key: ("why",)}
        if backend == "postgresql":
            definitions = dict(db.query("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'edge_points'"))
            assert "md5(" in definitions["edge_points_reason"], definitions
            assert definitions["edge_points_owner"].endswith("(source, target, relationship)"), definitions
    finally:
        db.close()
    await test_an_edge_with_the_longest_names_and_justification_commits(settings, tmp_path)


# The longest type REM_SEMANTIC_TYPES accepts (config.settings._TYPE_NAME): 64 characters.
_LONGEST_TYPE = "T" * 64


@pytest.mark.both_backends
@pytest.mark.parametrize("noise", [_noise, _han], ids=["4-byte", "han"])
@pytest.mark.parametrize("node_type", ["ORGANIZATION", _LONGEST_TYPE], ids=["default-types", "longest-type"])
async def test_every_index_takes_the_longest_edge_from_two_sessions_of_the_longest_ids(
    settings: Settings, tmp_path: Path, noise: Any, node_type: str
) -> None:
    """Every btree index holding an edge's or a node's key takes its longest form: two sessions of
    200-character ids (their anchors), each answering with two nodes of 300-character names (of
    ORGANIZATION, the longest default type, or of a 64-character one), a CAUSES_ISSUE edge (the longest relationship) with a
    500-character justification and 500-character quotes, in 4-byte and in 3-byte characters. The
    second session's commit reads the first's texts of the edge (``edge_texts``, by
    ``edge_points_reason``); ``edge_points_owner``, ``edges``' key, ``node_points``, the aliases and
    the recall documents hold the rest. Both sessions are digested on both engines; the edge's
    justification is made of both sessions' texts. Under a type of 64 characters
    (REM_SEMANTIC_TYPES allows it), PostgreSQL's ``edge_points_owner`` (source, target,
    relationship, anchor) of 4-byte names was 2,776 bytes and refused the commit; since migration 31
    it holds the edge's key alone (the default types left it 2,672 bytes, 32 to spare)."""
    names, reasons = (noise(300), noise(300)), (noise(500), noise(500))
    turns = [f"{names[0]} {names[1]} {reason}" for reason in reasons]
    ids = [c * 200 for c in "pq"]
    sessions = write_sessions(tmp_path / "in.jsonl", [{
        "sessionId": sid, "createdAt": "2026-11-01T10:00:00Z", "userId": "u", "title": "T", "summary": "S",
        "turns": [{"id": f"{sid[:20]}-t0", "role": "user", "text": turn}]} for sid, turn in zip(ids, turns)])
    await import_sessions(sessions, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        reason = next(r for r in reasons if r in json.dumps(body, ensure_ascii=False))
        nodes = [{"id": n, "type": node_type, "name": n, "aliases": [n[::-1]], "description": reason,
                  "confidence": 0.9, "evidence": [{"turn": 1, "quote": n}]} for n in names]
        edge = {"source": names[0], "target": names[1], "relationship": "CAUSES_ISSUE", "justification": reason,
                "evidence": [{"turn": 1, "quote": reason}]}
        return {"summary": "long names", "nodes": nodes, "edges": [edge]}

    with LLMServer(default=ok(answer)) as llm:
        await run_cycle(settings.model_copy(update={"llm_base_url": llm.url, "extractor": "openai",
                                                    "semantic_types": (*settings.semantic_types, _LONGEST_TYPE)}))
    states = sorted(_query(settings, "SELECT state, defer_reason FROM session_digests"))
    edges = [json.loads(r[0]) for r in _query(settings, "SELECT properties FROM edges WHERE relationship = 'CAUSES_ISSUE'")]
    assert states == [("digested", None)] * 2
    assert [e.get("justification") for e in edges] == ["; ".join(sorted(reasons))]


@pytest.mark.both_backends
async def test_a_turn_index_past_32_bits_is_ingested_and_recalled(settings: Settings) -> None:
    """``turnIndex`` is any integer up to MAX_TURN_INDEX (2**53 - 1, what a JSON number holds
    exactly): SQLite's INTEGER took it, PostgreSQL's ``recall_turns.turn_index`` (INTEGER, 32 bits)
    refused it ("integer out of range"), so the session failed its sync at every cycle there.
    Recall's neighbouring turns (``adjacent_turns``: the index ± a radius) are found on both."""
    far = [2**31, MAX_TURN_INDEX - 1, MAX_TURN_INDEX]
    await ChromaStore(settings).upsert(settings.memory_collection, [f"big-t{n}" for n in range(3)],
                                       ["the osprey nests", "the heron waits", "the kestrel hovers"], [
        {"sessionId": "big", "turnIndex": index, "role": "user", "createdAt": "2026-11-01T10:00:00Z"} for index in far])
    result = await run_cycle(settings)
    ingest = result.phases["ingest"]
    assert result.outcome == "completed" and ingest["sessions_failed"] == 0, ingest.get("session_failures")
    stored = sorted(r[0] for r in _query(settings, "SELECT turn_index FROM recall_turns"))
    assert stored == far
    assert "the kestrel hovers" in [t["text"] for t in ask(settings, "heron")["turns"]]


@pytest.mark.both_backends
@pytest.mark.parametrize("queue", ["file", "database"])
async def test_a_queue_line_holding_a_nul_is_refused_alike(settings: Settings, queue: str) -> None:
    """A lazy edge whose property holds a NUL: the queue table on SQLite took it (and the drain
    linked it), on PostgreSQL the INSERT failed ("\\u0000 cannot be converted to text": the
    first-chunk index reads the line as ``jsonb``), and the call died on a DatabaseError. Now
    refused by the one rule of both queue forms (pipelines.lazy_edge.parse_line) on either engine:
    ``enqueue`` names it, and a line a producer wrote to the file anyway is a dead letter."""
    mine = settings.model_copy(update={"lazy_queue": queue})
    assert (await run_cycle(mine)).outcome == "completed"  # the data dir and the graph database made
    edge = {"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO", "properties": {"note": "a\x00b"}}
    with pytest.raises(InvalidLazyEdgeError, match="NUL"):
        enqueue_lazy_edges(mine.lazy_queue_target, [edge, {**edge, "properties": {}}])
    if queue == "file":  # a producer that wrote the line itself: the drain dead-letters it at once
        mine.queue_path.write_bytes(edge_line(edge) + edge_line({**edge, "properties": {}}))
    else:
        assert enqueue_lazy_edges(mine.lazy_queue_target, [{**edge, "properties": {}}]) == 1
    result = await run_cycle(mine)
    assert result.outcome == "completed", result.phases
    drained = result.phases["drain"]
    assert drained.get("dead_lettered", 0) == (1 if queue == "file" else 0), drained


@pytest.mark.parametrize("upgraded", [False, True], ids=["fresh", "upgraded"])
@pytest.mark.both_backends
async def test_a_turn_of_a_million_distinct_words_is_ingested(settings: Settings, backend: str, upgraded: bool) -> None:
    """A pasted log of 150,000 distinct words (1.6 MB; a turn may be 64 MB): SQLite's FTS5 indexes
    it; PostgreSQL's ``recall_turns.search`` (a ``tsvector`` of the turn's words, at most 1 MB)
    refused the row ("string is too long for tsvector (2098380 bytes, max 1048575 bytes)"), and the
    session failed its sync at every cycle. Now PostgreSQL indexes the first INDEXED_TEXT_MOST
    characters of a text (migration 30: ``upgraded``, a graph of schema 29 opened again): the
    session is ingested, a word of the log's start is found on both engines."""
    if upgraded:
        db = open_database(settings)
        db.close()
        rolled_back(settings, backend, to=SEARCH_BOUND_VERSION - 1)
    words = [f"{''.join(_RANDOM.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(9))}q" for _ in range(150_000)]
    await ChromaStore(settings).upsert(settings.memory_collection, ["log-t0", "log-t1"], [" ".join(words), "the osprey nests"], [
        {"sessionId": "log", "turnIndex": n, "role": "tool", "createdAt": "2026-11-01T10:00:00Z"} for n in range(2)])
    result = await run_cycle(settings)
    ingest = result.phases["ingest"]
    assert ingest["sessions_failed"] == 0, ingest.get("session_failures")
    assert "the osprey nests" in [t["text"] for t in ask(settings, "osprey")["turns"]]
    assert [t["text"][:10] for t in ask(settings, words[10], signals=("keyword",))["turns"]] == [words[0]]


@pytest.mark.both_backends
def test_a_notes_file_deep_under_long_directory_names_is_imported(settings: Settings, tmp_path: Path) -> None:
    """A notes file whose path is long (eleven directories of 60 characters outside the Basic
    Multilingual Plane: 2.7 kB, well inside PATH_MAX). Its NOTE node was named by the whole path,
    and PostgreSQL refused the node ("index row size 2744 exceeds btree version 4 maximum 2704 for
    index nodes_label_name"): the import failed there, not on SQLite. Now the name is the path's
    last MAX_NAME_CHARS characters on both engines, and the ``path`` property (export's
    ``file_sources``) the whole path."""
    folder = tmp_path
    for _ in range(11):
        folder = folder / _noise(60)
    folder.mkdir(parents=True)
    note = folder / "osprey.md"
    note.write_text("The LazyEdgeQueue feeds the GraphStore.\n\nThe osprey nests by the river.\n", encoding="utf-8")
    done = run_cli("import-notes", str(note), "--json", env=_env(settings))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    (name, properties), = _query(settings, "SELECT name, properties FROM nodes WHERE label = 'NOTE'")
    assert (name, json.loads(properties)["path"]) == ("…" + str(note)[1 - MAX_NAME_CHARS:], str(note))
    exported = json.loads(run_cli("export", env=_env(settings)).stdout or "{}")
    assert str(note) in json.dumps(exported, ensure_ascii=False), exported.keys()


@pytest.mark.both_backends
def test_a_queue_line_with_a_long_first_chunk_id_is_refused_alike(settings: Settings) -> None:
    """``properties.chunk_ids[0]`` is what the queue tables' first-chunk index holds: a producer's
    line whose first chunk id is 1,000 characters outside the Basic Multilingual Plane (4 kB) was
    written on SQLite and refused by PostgreSQL ("index row size 4024 exceeds btree version 4
    maximum 2704 for index lazy_edges_first_chunk"), a DatabaseError out of ``enqueue``. Now
    refused on both, by name, as every other line that can never be stored."""
    mine = settings.model_copy(update={"lazy_queue": "database"})
    open_database(mine).close()  # the graph database made, as a worker's first cycle does
    edge = {"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO"}
    for chunks in ([_noise(1000)], [{"chunk": _noise(1000)}], {"0": _noise(1000)}):
        with pytest.raises(InvalidLazyEdgeError, match="chunk_ids"):
            enqueue_lazy_edges(mine.lazy_queue_target, [{**edge, "properties": {"chunk_ids": chunks}}])
    assert enqueue_lazy_edges(mine.lazy_queue_target, [{**edge, "properties": {"chunk_ids": [_noise(250)]}}]) == 1


@pytest.mark.both_backends
async def test_a_session_with_a_long_title_is_ingested(settings: Settings) -> None:
    """A summary row's title of 1,000 characters outside the Basic Multilingual Plane (4 kB): the
    SESSION node was named by it, and PostgreSQL refused the node ("index row size 4024 exceeds
    btree version 4 maximum 2704 for index nodes_label_name"): the session failed its sync at every
    cycle there, not on SQLite. Now the node's name is the title's first MAX_NAME_CHARS characters
    on both; the ``title`` property and recall's session title keep it whole."""
    title = _noise(1000)
    await ChromaStore(settings).upsert(settings.memory_collection, ["t-t0"], ["the osprey nests"], [
        {"sessionId": "t", "turnIndex": 0, "role": "user", "createdAt": "2026-11-01T10:00:00Z"}])
    await ChromaStore(settings).upsert(settings.session_collection, ["summary_t"], ["Ospreys"], [
        {"sessionId": "t", "title": title, "createdAt": "2026-11-01T10:00:00Z"}])
    result = await run_cycle(settings)
    assert result.phases["ingest"]["sessions_failed"] == 0, result.phases["ingest"].get("session_failures")
    (name, properties), = _query(settings, "SELECT name, properties FROM nodes WHERE label = 'SESSION'")
    kept = [r[0] for r in _query(settings, "SELECT title FROM recall_sessions")]
    assert (name, json.loads(properties)["title"], kept) == (title[:MAX_NAME_CHARS], title, [title])
    assert (await run_cycle(settings)).phases["ingest"]["sessions_changed"] == 0


@pytest.mark.both_backends
async def test_a_long_user_id_is_read_as_missing_alike(settings: Settings) -> None:
    """A ``userId`` of 1,000 characters outside the Basic Multilingual Plane (4 kB): SQLite
    ingested the session under it; PostgreSQL refused it ("index row size 4016 exceeds btree
    version 4 maximum 2704 for index recall_sessions_user"), and the session failed its sync at
    every cycle. Recall is never asked for a user over MAX_USER_ID_CHARS, so such a value is a bad
    one on both engines, read as missing and counted: the session is ingested, no user's, and no
    user's recall shows it."""
    user = _noise(1000)
    await ChromaStore(settings).upsert(settings.memory_collection, ["u-t0"], ["the osprey nests"], [
        {"sessionId": "u", "turnIndex": 0, "role": "user", "userId": user, "createdAt": "2026-11-01T10:00:00Z"}])
    await ChromaStore(settings).upsert(settings.session_collection, ["summary_u"], ["Ospreys"], [
        {"sessionId": "u", "title": "T", "userId": user, "createdAt": "2026-11-01T10:00:00Z"}])
    result = await run_cycle(settings)
    ingest = result.phases["ingest"]
    assert ingest["sessions_failed"] == 0, ingest.get("session_failures")
    users = _query(settings, "SELECT (SELECT COUNT(*) FROM recall_session_users), "
                             "(SELECT COUNT(*) FROM recall_turns WHERE user_id IS NOT NULL)")
    assert users == [(0, 0)]
    assert [t["text"] for t in ask(settings, "osprey")["turns"]] == ["the osprey nests"]
    assert ask(settings, "osprey", user=user[:MAX_USER_ID_CHARS])["turns"] == []


@pytest.mark.both_backends
@pytest.mark.parametrize("queue", ["file", "database"])
async def test_a_lazy_edge_whose_key_is_over_a_page_is_refused_alike(settings: Settings, tmp_path: Path, queue: str) -> None:
    """A lazy edge between two nodes with 300-character names (outside the Basic Multilingual
    Plane) under a 128-character relationship: its ``edges`` key is ~2.9 kB. SQLite linked it;
    PostgreSQL failed every drain ("index row size 2952 exceeds btree version 4 maximum 2704 for
    index edges_pkey") until the line went dead as ``max-attempts``. Now refused at ``enqueue`` on
    both engines, naming the key's size; a shorter relationship between the same nodes links on both."""
    mine = settings.model_copy(update={"lazy_queue": queue})
    sessions = write_sessions(tmp_path / "in.jsonl", [{
        "sessionId": "long", "createdAt": "2026-11-01T10:00:00Z", "userId": "u", "title": "T", "summary": "S",
        "turns": [{"id": "long-t0", "role": "user", "text": TURN}]}])
    await import_sessions(sessions, chroma=ChromaStore(mine), memory_collection=mine.memory_collection,
                          summary_collection=mine.session_collection)
    with LLMServer(default=ok(lambda body: {**_answer(body), "edges": []})) as llm:
        assert (await run_cycle(mine.model_copy(update={"llm_base_url": llm.url, "extractor": "openai"}))).outcome == "completed"
    source, target = sorted(r[0] for r in _query(mine, "SELECT id FROM nodes WHERE label = 'CLASS'"))
    long_relationship, short_relationship = _noise(128), _noise(20)
    with pytest.raises(InvalidLazyEdgeError, match="bytes together"):
        enqueue_lazy_edges(mine.lazy_queue_target, [{"source": source, "target": target, "relationship": long_relationship}])
    assert enqueue_lazy_edges(mine.lazy_queue_target, [{"source": source, "target": target, "relationship": short_relationship}]) == 1
    drained = (await run_cycle(mine)).phases["drain"]
    linked = _query(mine, "SELECT source, target, relationship FROM edges WHERE relationship NOT IN "
                          "('MENTIONED_IN', 'DISCUSSED_IN', 'ORIGINATES_IN', 'PART_OF')")
    assert linked == [(source, target, short_relationship)], drained
