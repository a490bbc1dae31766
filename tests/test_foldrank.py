"""BM25 ranks the folded words the full-text index holds (foldrank, migration 21).

SQLite's turn and node-document indexes kept no positions (``detail='column'``), so FTS5 counted a
word in a row by tokenizing the row's own text, not the folded text it had indexed: "Café" counted
0 for ``cafe`` and ranked last, and every Chinese or Japanese match counted 0 (ordered by id
alone). PostgreSQL's ``ts_rank`` reads the positions of the folded ``search`` column: the same
order. A graph of schema 20 is re-indexed when opened."""

from __future__ import annotations

from typing import Any

import pytest

from config import Settings
from pipelines.recall import RecallRequest, recall
from store.backend import open_database
from store.db import FOLD_RANK_VERSION, MIGRATIONS
from store.graph import GraphStore, Node
from store.recall_index import RecallIndex, TurnRecord, term_match
from tests.migrations_support import rolled_back
from tests.test_searchfold_migration import _index_matches_rows

# Each query's matches in the order BM25 must give: the more of the word, the better (a fold
# counts as the word), the first written last, so that an order by id alone is the wrong one.
FILLER = ["the weather is mild", "invoices are due", "the meeting moved", "lunch was late",
          "a quiet afternoon", "the printer jammed", "天気がいい", "会議は明日"]
RANKED = {
    "cafe": [("cafe-once", "the cafe is open today"), ("cafe-twice", "CAFÉ and Café: open today")],
    "東京": [("tokyo-once", "東京に行きます"), ("tokyo-thrice", "京都と東京と東京都")],
}
EXPECTED = {"cafe": ["cafe-twice", "cafe-once"], "東京": ["tokyo-thrice", "tokyo-once"]}


def _turns() -> list[TurnRecord]:
    texts = [(f"filler-{i}", t) for i, t in enumerate(FILLER)] + [row for rows in RANKED.values() for row in rows]
    return [TurnRecord(f"memory:{key}", "session:s1", i, "user", "2026-11-01T10:00:00.000Z", text, "carol")
            for i, (key, text) in enumerate(texts)]


def _found(db: Any, query: str) -> list[str]:
    answer = recall(RecallRequest(query=query), source=RecallIndex(db), signals=("keyword",)).as_dict()
    return [t["memory_id"].removeprefix("memory:") for t in answer["turns"]]


def _node_scores(db: Any, word: str) -> dict[str, float]:
    """SQLite: each node document's BM25 score for ``word`` (0: the word counted nowhere)."""
    rows = db.query("SELECT d.node_id, bm25(recall_node_docs_fts) FROM recall_node_docs_fts "
                    "JOIN recall_node_docs AS d ON d.id = recall_node_docs_fts.rowid WHERE recall_node_docs_fts MATCH ?",
                    (term_match(word),))
    return {r[0]: r[1] for r in rows}


@pytest.mark.both_backends
def test_recall_ranks_a_folded_word_and_chinese_characters_by_how_often_they_occur(settings: Settings, backend: str) -> None:
    db = open_database(settings)
    try:
        RecallIndex(db).index_turns(_turns())
        assert {query: _found(db, query) for query in EXPECTED} == EXPECTED
        # The query's own spelling does not matter: folded alike.
        assert _found(db, "CAFÉ") == EXPECTED["cafe"]
    finally:
        db.close()


def test_a_node_name_with_an_accent_scores_for_its_folded_word(settings: Settings) -> None:
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes([Node("ORG:flore", "ORG", "Café Royal", {}), Node("ORG:cafe", "ORG", "Cafe Royal", {})])
        scores = _node_scores(db, "cafe")
        assert set(scores) == {"ORG:flore", "ORG:cafe"} and scores["ORG:flore"] == scores["ORG:cafe"] != 0.0
    finally:
        db.close()


def test_opening_a_graph_of_schema_20_reindexes_it_for_ranking(settings: Settings) -> None:
    db = open_database(settings)
    try:
        RecallIndex(db).index_turns(_turns())
        GraphStore(db).upsert_nodes([Node("ORG:flore", "ORG", "Café de Flore", {})])
    finally:
        db.close()
    rolled_back(settings, "sqlite", to=FOLD_RANK_VERSION - 1)
    db = open_database(settings, readonly=True)  # as the release before: not migrated
    try:
        assert {query: _found(db, query) for query in EXPECTED} == {
            "cafe": ["cafe-once", "cafe-twice"], "東京": ["tokyo-once", "tokyo-thrice"]}
        assert _node_scores(db, "cafe") == {"ORG:flore": 0.0}
    finally:
        db.close()

    db = open_database(settings)
    try:
        assert db.schema_version == len(MIGRATIONS)
        assert {query: _found(db, query) for query in EXPECTED} == EXPECTED
        assert _node_scores(db, "cafe")["ORG:flore"] != 0.0
        _index_matches_rows(db)
        # Rewritten and deleted rows after the migration: the index stays the rows' folded image.
        index = RecallIndex(db)
        index.index_turns([TurnRecord("memory:cafe-once", "session:s1", 8, "user", "2026-11-01T10:00:00.000Z",
                                      "Cafés, cafés, cafés everywhere", "carol")])
        with db.transaction() as conn:
            conn.execute("DELETE FROM recall_turns WHERE memory_id = ?", ("memory:tokyo-thrice",))
        assert {query: _found(db, query) for query in EXPECTED} == {"cafe": ["cafe-once", "cafe-twice"], "東京": ["tokyo-once"]}
        _index_matches_rows(db)
    finally:
        db.close()
