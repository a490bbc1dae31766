"""Migration 18 (store.db.SEARCH_FOLD_MIGRATION): a graph written before it holds unfolded text in
its full-text indexes; opening it folds what is there, on both engines, and the index stays the
folded image of its rows through later writes and deletions (searchfold)."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit, urlunsplit

import pytest

from config import Settings
from pipelines.recall import RecallRequest, recall
from store.backend import backup, open_database, open_database_at
from store.db import MIGRATIONS, SEARCH_FOLD_VERSION
from store.graph import GraphStore, Node
from store.postgres import close_pools
from store.recall_index import RecallIndex, TurnRecord
from tests.conftest import drop_database
from tests.migrations_support import rolled_back

TEXTS = {"de": "Die Straße am Bahnhof ist gesperrt.", "fr": "Une ÉCOLE à Paris ouvre en septembre.",
         "en": "The plain ASCII turn about invoices."}


def _turn(key: str, text: str, index: int) -> TurnRecord:
    return TurnRecord(f"memory:{key}", "session:s1", index, "user", "2026-11-01T10:00:00.000Z", text, "carol")


def _found(db: Any, query: str) -> list[str]:
    answer = recall(RecallRequest(query=query), source=RecallIndex(db), signals=("keyword",)).as_dict()
    return [t["memory_id"].removeprefix("memory:") for t in answer["turns"]]


def _index_matches_rows(db: Any) -> None:
    """SQLite: each full-text index holds exactly the folded text of its table's rows (the words
    and how many rows hold each), compared with an index built afresh from the rows."""
    tables = {"recall_turns": ("text",), "recall_sessions": ("title", "summary"), "recall_node_docs": ("name", "aliases", "description")}
    for table, columns in tables.items():
        sql = db.query("SELECT sql FROM sqlite_master WHERE name = ?", (f"{table}_fts",))[0][0]
        tokenize = re.search(r'tokenize="[^"]*"', sql)
        assert tokenize is not None, sql
        names = ", ".join(columns)
        db.conn.execute(f"CREATE VIRTUAL TABLE temp.fresh USING fts5({names}, {tokenize[0]})")
        db.conn.execute(f"INSERT INTO temp.fresh(rowid, {names}) SELECT id, {', '.join(f'rem_search_text({c})' for c in columns)} FROM {table}")
        db.conn.execute(f"CREATE VIRTUAL TABLE temp.live_words USING fts5vocab(main, {table}_fts, row)")
        db.conn.execute("CREATE VIRTUAL TABLE temp.fresh_words USING fts5vocab(temp, fresh, row)")
        live = {tuple(r) for r in db.query("SELECT term, doc FROM temp.live_words")}
        fresh = {tuple(r) for r in db.query("SELECT term, doc FROM temp.fresh_words")}
        for name in ("live_words", "fresh_words", "fresh"):
            db.conn.execute(f"DROP TABLE temp.{name}")
        assert live == fresh, (table, live ^ fresh)


@pytest.mark.both_backends
def test_opening_a_graph_written_before_folding_folds_its_index(settings: Settings, backend: str) -> None:
    db = open_database(settings)
    try:
        RecallIndex(db).index_turns(_turn(k, t, i) for i, (k, t) in enumerate(TEXTS.items()))
        GraphStore(db).upsert_nodes([Node("ORG:ecole", "ORG", "École Polytechnique", {})])
    finally:
        db.close()
    rolled_back(settings, backend, to=SEARCH_FOLD_VERSION - 1)
    db = open_database(settings, readonly=True)  # as the release before: not migrated
    try:
        before = {q: _found(db, q) for q in ("STRASSE", "ecole", "invoices")}
    finally:
        db.close()
    assert before == {"STRASSE": [], "ecole": [] if backend == "postgresql" else ["fr"], "invoices": ["en"]}

    db = open_database(settings)
    try:
        assert db.schema_version == len(MIGRATIONS)
        assert {q: _found(db, q) for q in ("STRASSE", "straße", "ecole", "ÉCOLE", "invoices")} == {
            "STRASSE": ["de"], "straße": ["de"], "ecole": ["fr"], "ÉCOLE": ["fr"], "invoices": ["en"]}
        # Rewritten, deleted and new rows after the migration keep the index the rows' folded image.
        index = RecallIndex(db)
        index.index_turns([_turn("de", "Die Fußgängerzone ist offen.", 0), _turn("el", "Η ΟΔΟΣ είναι κλειστή.", 3)])
        GraphStore(db).upsert_nodes([Node("ORG:ecole", "ORG", "Lycée Français", {})])
        with db.transaction() as conn:
            conn.execute("DELETE FROM recall_turns WHERE memory_id = ?", ("memory:fr",))
        assert {q: _found(db, q) for q in ("STRASSE", "FUSSGANGERZONE", "ecole", "οδος")} == {
            "STRASSE": [], "FUSSGANGERZONE": ["de"], "ecole": [], "οδος": ["el"]}
        if backend == "sqlite":
            _index_matches_rows(db)
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_postgresql_backup_of_a_folded_graph_restores_and_finds_folded_words(
        settings: Settings, backend: str, database_url: str | None, postgres_server_url: str, tmp_path: Path) -> None:
    # The folding functions stand behind generated columns: pg_restore recomputes those with an
    # empty search_path, so a function calling another by name (rem_search_text → rem_fold) made
    # the restore fail ("function rem_fold(text) does not exist") and the backup useless.
    if backend != "postgresql":
        pytest.skip("pg_dump and pg_restore: PostgreSQL only")
    import psycopg

    db = open_database(settings)
    try:
        RecallIndex(db).index_turns(_turn(k, t, i) for i, (k, t) in enumerate(TEXTS.items()))
    finally:
        db.close()
    dump = tmp_path / "graph.dump"
    backup(settings, dump)
    target = f"sf_restore_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {target}")
    try:
        server = urlsplit(postgres_server_url)
        restored = urlunsplit(server._replace(path=f"/{target}"))
        done = subprocess.run(["pg_restore", "--no-owner", "--exit-on-error", "-d", restored, str(dump)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        schema = parse_qs(urlsplit(database_url or "").query)["options"][0].removeprefix("-csearch_path=")
        db = open_database_at(path=tmp_path / "unused.db", url=f"{restored}?options={quote(f'-csearch_path={schema}')}")
        try:
            assert {q: _found(db, q) for q in ("STRASSE", "ecole")} == {"STRASSE": ["de"], "ecole": ["fr"]}
        finally:
            db.close()
    finally:
        close_pools()
        drop_database(postgres_server_url, target)
