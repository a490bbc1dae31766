"""The words of a file path, a URL, a host, an e-mail address or a version are found on both
engines (pgfts26, migration 26).

SQLite's tokenizer cuts text at every character that is no letter, digit or mark
(store.textfold.WORD_CATEGORIES): ``store/lazy_queue.py`` is ``store``, ``lazy``, ``queue``,
``py``. PostgreSQL's ``english`` parser kept it as one token (a ``file``), ``recall.py`` as a
``host``, a URL as ``url``/``host``/``url_path``, ``alice@example.com`` as an ``email`` and
``1.2.3`` as a ``version``: a query, whose words are cut as SQLite cuts them, found none of them
there. The ``search`` columns are now generated from the words SQLite cuts (``rem_index_text``), and
a graph of schema 25 is re-indexed when opened."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from config import Settings
from pipelines.recall import RecallRequest, match_expression, query_terms, recall
from store.backend import open_database
from store.db import MIGRATIONS, WORD_SPLIT_VERSION
from store.graph import GraphStore, Node
from store.recall_index import RecallIndex, Scope, TurnRecord
from store.textfold import CASED_END, _word_ranges, index_text, index_words
from tests.migrations_support import rolled_back
from tests.test_searchfold_migration import _index_matches_rows

TURNS = {
    "path": "The bug is in store/lazy_queue.py, and recall.py calls it",
    "url": "Read https://docs.example.org/guides/deploy.html?ref=42",
    "mail": "Write to alice.smith@mailhost.net about the invoice",
    "version": "Upgraded to 1.2.3 yesterday",
    "plain": "Nothing technical here, only lunch plans",
}
# Each query and the turns it finds: the same on both engines.
TURN_QUERIES = {
    "recall.py": ["path"], "store/lazy_queue.py": ["path"], "lazy_queue": ["path"], "lazy": ["path"],
    "deploy": ["url"], "guides": ["url"], "docs.example.org": ["url"], "alice": ["mail"], "mailhost.net": ["mail"],
    "1.2.3": ["version"], "lunch": ["plain"],
}
SESSIONS = {
    "session:s1": {"title": "Fixing store/lazy_queue.py",
                   "summary": "Read https://wiki.example.org/rem/setup, mailed ops@team.example.com, shipped 2.0.1"},
    "session:s2": {"title": "Lunch", "summary": "Plans for Friday"},
}
SESSION_QUERIES = {"lazy_queue": ["session:s1"], "setup": ["session:s1"], "wiki.example.org": ["session:s1"],
                   "ops": ["session:s1"], "2.0.1": ["session:s1"], "friday": ["session:s2"]}
NODES = [Node("TOOL:queue", "TOOL", "store/lazy_queue.py", {}), Node("PERSON:bob", "PERSON", "Bob Jones", {})]
# (node, aliases, description) of one claim each.
CLAIMS = [("TOOL:queue", ["lazyq"], "Version 3.4.5, see https://code.example.org/rem/tasks"),
          ("PERSON:bob", ["bjones@corpmail.net"], "Maintains the build farm")]
NODE_QUERIES = {"lazy_queue.py": ["TOOL:queue"], "3.4.5": ["TOOL:queue"], "code.example.org": ["TOOL:queue"],
                "bjones": ["PERSON:bob"], "corpmail.net": ["PERSON:bob"]}


def _write(db: Any) -> None:
    RecallIndex(db).index_turns(TurnRecord(f"memory:{key}", "session:s1", i, "user", "2026-11-01T10:00:00.000Z", text, "carol")
                                for i, (key, text) in enumerate(TURNS.items()))
    graph = GraphStore(db)
    graph.upsert_nodes([Node(sid, "SESSION", sid, {**doc, "userId": "carol", "createdAt": "2026-11-01T10:00:00.000Z"})
                        for sid, doc in SESSIONS.items()] + NODES)
    with db.transaction() as conn:
        conn.executemany(
            "INSERT INTO node_points(node_id, anchor, memory_id, evidence, observed_at, extracted_for) VALUES (?, ?, ?, ?, ?, ?)",
            [(n.id, "session:s1", "memory:path", n.name, "2026-11-01T10:00:00.000Z", "test") for n in NODES])
        conn.executemany("INSERT INTO node_claims(node_id, anchor, extracted_for, description, aliases) VALUES (?, ?, ?, ?, ?)",
                         [(node, "session:s1", "test", description, json.dumps(aliases)) for node, aliases, description in CLAIMS])


def _match(query: str) -> str:
    match = match_expression(query_terms(query))
    assert match is not None, query
    return match


def _found(db: Any) -> dict[str, dict[str, list[str]]]:
    """What each query finds: turns by recall's keyword signal, sessions and nodes by the index."""
    index = RecallIndex(db)
    return {
        "turns": {q: [t["memory_id"].removeprefix("memory:") for t in recall(
            RecallRequest(query=q), source=index, signals=("keyword",)).as_dict()["turns"]] for q in TURN_QUERIES},
        "sessions": {q: index.keyword_sessions(_match(q), Scope(), limit=10) for q in SESSION_QUERIES},
        "nodes": {q: index.matching_nodes(_match(q), Scope(), limit=10) for q in NODE_QUERIES},
    }


EXPECTED = {"turns": TURN_QUERIES, "sessions": SESSION_QUERIES, "nodes": NODE_QUERIES}


def test_a_path_a_url_an_address_and_a_version_are_words_of_their_parts() -> None:
    assert index_words("see store/lazy_queue.py") == ["see", "store", "lazy", "queue", "py"]
    assert index_text("https://Docs.Example.org/a?b=1 — alice.smith@mailhost.net v1.2.3") == \
        "https docs example org a b 1 alice smith mailhost net v1 2 3"
    assert index_text("東京都, Café-au-lait ½") == "東 京 都 cafe au lait 1 2"
    assert index_text("  ...  ") == "" and index_text("\ue000\u0301") == "\ue000"  # private use and marks are word characters


@pytest.mark.both_backends
def test_recall_finds_the_words_of_paths_urls_hosts_addresses_and_versions_on_both_engines(settings: Settings) -> None:
    # Before: on PostgreSQL each of these queries found nothing (the index held `store/lazy_queue.py`,
    # `recall.py`, the URL, its host, the address and `1.2.3` whole); SQLite found them all.
    db = open_database(settings)
    try:
        _write(db)
        assert _found(db) == EXPECTED
    finally:
        db.close()


@pytest.mark.both_backends
def test_postgresql_cuts_every_character_as_the_rule_does(settings: Settings, backend: str) -> None:
    # rem_index_text (PostgreSQL) against index_text (Python), alone and in words: every character
    # with a case, and each end of every run of word characters in all of Unicode (the class is a
    # list of code point ranges, so it agrees everywhere when it agrees at every edge).
    if backend != "postgresql":
        pytest.skip("rem_index_text is PostgreSQL's; SQLite's tokenizer is given the categories")
    edges = {c for start, end in _word_ranges() for c in (start - 1, start, end, end + 1)}
    codes = sorted(c for c in set(range(1, CASED_END)) | edges if 0 < c <= sys.maxunicode and not 0xD800 <= c <= 0xDFFF)
    samples = [chr(c) for c in codes] + [f"a{chr(c)}b" for c in codes if c in edges] + [
        *TURNS.values(), "PLAIN ascii: x_y-z/1.2", "東京都に住む ÉCOLE-ΟΔΟΣ", "  \t\n", "ß.İ@ﬁ"]
    db = open_database(settings)
    try:
        rows = db.query("SELECT value, rem_index_text(value) FROM json_each(?)", (json.dumps(samples),))
    finally:
        db.close()
    assert len(rows) == len(samples)
    assert [(r[0], r[1], index_text(r[0])) for r in rows if r[1] != index_text(r[0])] == []


@pytest.mark.both_backends
def test_a_graph_of_schema_25_finds_them_once_opened(settings: Settings, backend: str) -> None:
    db = open_database(settings)
    try:
        _write(db)
        counts = RecallIndex(db).counts()
    finally:
        db.close()
    rolled_back(settings, backend, to=WORD_SPLIT_VERSION - 1)
    db = open_database(settings, readonly=True)  # as the release before: not migrated
    try:
        before = _found(db)
    finally:
        db.close()
    # What schema 25 found: everything on SQLite, on PostgreSQL only the plain words.
    if backend == "postgresql":
        assert before == {"turns": {q: ["plain"] if q == "lunch" else [] for q in TURN_QUERIES},
                          "sessions": {q: ["session:s2"] if q == "friday" else [] for q in SESSION_QUERIES},
                          "nodes": {q: [] for q in NODE_QUERIES}}
    else:
        assert before == EXPECTED

    db = open_database(settings)
    try:
        assert db.schema_version == len(MIGRATIONS) >= WORD_SPLIT_VERSION
        assert RecallIndex(db).counts() == counts  # nothing lost
        assert _found(db) == EXPECTED
        # Rows written, rewritten and deleted after the upgrade are indexed by the same rule.
        index = RecallIndex(db)
        index.index_turns([TurnRecord("memory:url", "session:s1", 1, "user", "2026-11-01T10:00:00.000Z",
                                      "Moved to https://handbook.example.org/ops/runbook.md", "carol"),
                           TurnRecord("memory:new", "session:s1", 9, "user", "2026-11-01T10:00:00.000Z",
                                      "Pinned numpy==2.1.0 in requirements-dev.txt", "carol")])
        with db.transaction() as conn:
            conn.execute("DELETE FROM recall_turns WHERE memory_id = ?", ("memory:mail",))
        turns = {q: [t["memory_id"].removeprefix("memory:") for t in recall(
            RecallRequest(query=q), source=index, signals=("keyword",)).as_dict()["turns"]]
            for q in ("deploy", "runbook", "handbook.example.org", "alice", "numpy", "requirements-dev.txt")}
        assert turns == {"deploy": [], "runbook": ["url"], "handbook.example.org": ["url"], "alice": [], "numpy": ["new"],
                         "requirements-dev.txt": ["new"]}
        if backend == "sqlite":
            _index_matches_rows(db)
    finally:
        db.close()
