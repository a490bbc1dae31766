"""What ranking the folded words costs on SQLite (foldrank, seventeenth session): each way of
giving FTS5's BM25 the words the index holds, at one size, in one process, against the way of
schema 20 (whose scores are wrong for folded words: the baseline of cost, not of quality).

    python bench/bench_fold_rank.py [--turns 20000] [--join 1]

FTS5 tables of ``detail='column'`` keep no positions: ``bm25()`` counts a word's occurrences in a
row by tokenizing the row's text as its content table gives it. Ways:

- ``column (schema 20)``: content ``recall_turns`` (the turn's own text): "Café" is not ``cafe``.
- ``view`` (taken, schema 21): content a view giving each turn's ``rem_search_text(text)``.
- ``full``: content ``recall_turns``, ``detail='full'``: positions kept in the index.
- ``stored``: the folded text kept in a column of ``recall_turns``, the FTS content.

For each: the bytes of the full-text index and of the turn table with it (``dbstat``), the seconds
to write every turn (batches of 500, the statements of ``RecallIndex.index_turns``), the median of
30 ranked reads (the 10 best of a word's matches, as ``keyword_turns``), and whether "Café" scores
for ``cafe`` and ``東京`` ranks by its count; ``ASCII alike``: the 100 best turns of each ASCII
query and their scores are the baseline's. The ways take turns for each batch and each read.
Then ``migrate``: a graph of the schema's turns rolled back to schema 20 and opened, i.e. migration
21 re-indexing every turn (one-off), beside the time its turns took to write. Data: bench_search_fold's generated turns (8-40 words), ``--join`` of them a turn (longer turns).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import random  # noqa: E402

from bench.bench_search_fold import turns, vocabulary  # noqa: E402
from store.db import _FOLDED_TOKENIZER, FOLD_RANK_VERSION, Database  # noqa: E402
from store.recall_index import RecallIndex, TurnRecord, term_match  # noqa: E402
from tests.migrations_support import roll_back  # noqa: E402

# The generated turns' most frequent word (in one turn of ~4), two rarer ones, two folded ones.
QUERIES = [vocabulary(3_000, random.Random(18))[0], "budget", "payroll export", "cafe", "東京"]
ASCII_QUERIES = QUERIES[:3]
# Each way: (its full-text table and delete trigger, the FTS column, what the turn table adds).
WAYS: dict[str, tuple[str, str, str]] = {
    "column (schema 20)": (
        f"CREATE VIRTUAL TABLE recall_turns_fts USING fts5(text, content='recall_turns', content_rowid='id', {_FOLDED_TOKENIZER}, detail='column')",
        "text", ""),
    "view": (
        "CREATE VIEW recall_turns_search(id, text) AS SELECT id, rem_search_text(text) FROM recall_turns;\n"
        f"CREATE VIRTUAL TABLE recall_turns_fts USING fts5(text, content='recall_turns_search', content_rowid='id', {_FOLDED_TOKENIZER}, detail='column')",
        "text", ""),
    "full": (
        f"CREATE VIRTUAL TABLE recall_turns_fts USING fts5(text, content='recall_turns', content_rowid='id', {_FOLDED_TOKENIZER})",
        "text", ""),
    "stored": (
        f"CREATE VIRTUAL TABLE recall_turns_fts USING fts5(search, content='recall_turns', content_rowid='id', {_FOLDED_TOKENIZER}, detail='column')",
        "search", "ALTER TABLE recall_turns ADD COLUMN search TEXT NOT NULL DEFAULT ''"),
}
CHECK = [("a", "cafe open today"), ("b", "Café open today"), ("c", "東京に行きます"), ("d", "京都と東京と東京都")]


def open_way(path: Path, way: str) -> Database:
    """A fresh graph whose turn index is made ``way``'s way."""
    db = Database(path)
    table, _, extra = WAYS[way]
    db.conn.executescript(f"DROP TRIGGER recall_turns_ad; DROP TABLE recall_turns_fts; {extra + ';' if extra else ''} {table};")
    return db


def write(db: Database, way: str, rows: list[TurnRecord]) -> None:
    """``rows`` written as ``RecallIndex.index_turns`` writes new turns (no earlier text to delete)."""
    column = WAYS[way][1]
    stored = column == "search"
    with db.transaction() as conn:
        conn.executemany(
            "INSERT INTO recall_turns(memory_id, session_id, user_id, turn_index, role, created_at, text"
            f"{', search' if stored else ''}) VALUES (?,?,?,?,?,?,?{', rem_search_text(?)' if stored else ''})",
            [(t.memory_id, t.session_id, t.user_id, t.turn_index, t.role, t.created_at, t.text, *((t.text,) if stored else ()))
             for t in rows],
        )
        conn.execute(
            f"INSERT INTO recall_turns_fts(rowid, {column}) SELECT id, {'search' if stored else 'rem_search_text(text)'} "
            "FROM recall_turns WHERE memory_id IN (SELECT value FROM json_each(?))",
            (json.dumps([t.memory_id for t in rows]),),
        )


def ranked(db: Database, query: str, limit: int = 10) -> list[tuple[str, float]]:
    return [(r[0], r[1]) for r in db.query(
        "SELECT t.memory_id, bm25(recall_turns_fts) FROM recall_turns_fts JOIN recall_turns AS t ON t.id = recall_turns_fts.rowid "
        "WHERE recall_turns_fts MATCH ? ORDER BY rank, t.id LIMIT ?", (term_match(query), limit))]


def size(db: Database, pattern: str) -> int:
    """Bytes of the tables and indexes whose names are like ``pattern``."""
    return db.query("SELECT SUM(pgsize) FROM dbstat WHERE name LIKE ?", (pattern,))[0][0]


def measure(work: Path, rows: list[TurnRecord]) -> dict[str, dict[str, Any]]:
    """Every way's figures, the ways taken in turn for each batch written and each read timed (the
    machine's load falls on all of them alike)."""
    dbs = {way: open_way(work / f"{way.split()[0]}.db", way) for way in WAYS}
    try:
        seconds = dict.fromkeys(WAYS, 0.0)
        for i in range(0, len(rows), 500):
            for way, db in dbs.items():
                started = time.perf_counter()
                write(db, way, rows[i:i + 500])
                seconds[way] += time.perf_counter() - started
        samples: dict[str, dict[str, list[float]]] = {way: {q: [] for q in QUERIES} for way in WAYS}
        for _ in range(30):
            for query in QUERIES:
                for way, db in dbs.items():
                    began = time.perf_counter()
                    ranked(db, query)
                    samples[way][query].append(time.perf_counter() - began)
        found = {}
        for way, db in dbs.items():
            found[way] = {"bytes": size(db, "%recall_turns%"), "index_bytes": size(db, "recall_turns_fts%"), "write_s": seconds[way],
                          "reads_ms": {q: statistics.median(samples[way][q]) * 1000 for q in QUERIES}}
            write(db, way, [TurnRecord(f"memory:check-{k}", "session:check", 0, "user", None, text) for k, text in CHECK])
        plain = {q: ranked(dbs["column (schema 20)"], q, 100) for q in ASCII_QUERIES}
        for way, db in dbs.items():
            cafe = dict(ranked(db, "cafe", 100_000))
            found[way].update(cafe_scores=cafe["memory:check-b"] != 0.0,
                              tokyo_order=[m for m, _ in ranked(db, "東京", 100_000) if m.startswith("memory:check-")],
                              ascii_alike=all(ranked(db, q, 100) == plain[q] for q in ASCII_QUERIES))
        return found
    finally:
        for db in dbs.values():
            db.close()


def migrate(work: Path, rows: list[TurnRecord]) -> tuple[float, float]:
    """Seconds to write ``rows`` into a graph of this schema, and to open it once rolled back to
    schema 20 (migration 21)."""
    path = work / "migrate.db"
    db = Database(path)
    try:
        index = RecallIndex(db)
        started = time.perf_counter()
        for i in range(0, len(rows), 500):
            index.index_turns(rows[i:i + 500])
        written = time.perf_counter() - started
        with db.transaction() as conn:
            roll_back(conn, "sqlite", to=FOLD_RANK_VERSION - 1)
    finally:
        db.close()
    started = time.perf_counter()
    Database(path).close()
    return written, time.perf_counter() - started


def joined(rows: list[TurnRecord], join: int) -> list[TurnRecord]:
    """Each ``join`` consecutive generated turns as one turn of their words."""
    return [TurnRecord(rows[i].memory_id, rows[i].session_id, rows[i].turn_index, rows[i].role, rows[i].created_at,
                       " ".join(r.text for r in rows[i:i + join]), rows[i].user_id) for i in range(0, len(rows), join)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--join", type=int, default=1)
    args = parser.parse_args(argv)
    rows = joined(turns(args.turns * args.join), args.join)
    with tempfile.TemporaryDirectory() as tmp:
        found = measure(Path(tmp), rows)
        written, migrated = migrate(Path(tmp), rows)
    base = found["column (schema 20)"]
    words = sum(len(r.text.split()) for r in rows) / len(rows)
    print(f"{args.turns} turns of {words:.0f} words on average; ratios against column (schema 20)")
    print("| way | index MB | × | index + table MB | × | write s | × | " + " | ".join(f"read {q} ms" for q in QUERIES) + " | Café scores | 東京 order | ASCII alike |")
    print("| --- " * (8 + len(QUERIES) + 3) + "|")
    for way, f in found.items():
        reads = " | ".join(f"{f['reads_ms'][q]:.2f} ({f['reads_ms'][q] / base['reads_ms'][q]:.2f}×)" for q in QUERIES)
        print(f"| {way} | {f['index_bytes'] / 1e6:.2f} | {f['index_bytes'] / base['index_bytes']:.2f} | {f['bytes'] / 1e6:.2f} | {f['bytes'] / base['bytes']:.2f} | {f['write_s']:.2f} | "
              f"{f['write_s'] / base['write_s']:.2f} | {reads} | {f['cafe_scores']} | "
              f"{' '.join(m.removeprefix('memory:check-') for m in f['tokyo_order'])} | {f['ascii_alike']} |")
    print(f"migrate: {migrated:.2f} s to open the graph of schema 20 (its turns took {written:.2f} s to write: "
          f"{migrated / written:.2f}x)")


if __name__ == "__main__":
    main()
