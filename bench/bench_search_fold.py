"""What the folding rule (store/textfold.py, migration 18) costs: indexing, recall and ``search``,
before and after, at 1× and 8× the data, in one process (searchfold, twelfth session).

    python bench/bench_search_fold.py [fold] [scope] [spread] [asof] [--turns 4000] [--nodes 4000] [--postgres URL]

PostgreSQL runs too when ``--postgres`` (or ``REM_TEST_POSTGRES_URL``) names a server: each run
gets a fresh schema of it. Data: generated turns and node names from a seeded mix of English,
French, German, Greek, Russian and Japanese words — a figure of cost, not of quality.

- ``index``: ``RecallIndex.index_turns`` of every turn (batches of 500) into a graph of schema 18
  ("after") and into one rolled back to 17 ("before": the unfolded tables and triggers; on SQLite
  ``rem_search_text`` is registered there as the identity, so the statements are main's); seconds
  per 1,000 turns and the after/before ratio.
- ``migrate``: opening the rolled-back graph, i.e. migration 18 re-indexing every row (one-off).
- ``recall``: the median of 100 recall queries of each kind (``ASCII``: found alike before and
  after; ``FOLDED``: found only after, on one engine or both) with the keyword signal alone, then every signal, on each
  graph, alternating before and after. No Hindi query: main's tokenizer cut its words at their
  vowel signs, so on the "before" graph this code's one-word match would be a phrase, which the
  position-less tables refuse.
- ``scope`` (searchfold, then recallscope): recall counts and ranks a query's words in the caller's
  scope; a word in every turn of other users and in 10 of the caller's 40 is counted (``term_counts``)
  and recalled (every signal) under ``--user`` through the index's list of the word's rows (forced:
  main's way), through the user's own turns (forced), and as ``RecallIndex._through_scope`` chooses,
  at 1× and 8× the other users' turns; beside the same recall without a scope.
- ``spread`` (lexcount): the same, alice's turns written one at a time among the others' (each
  turn a run of consecutive ids of its own: the scope's way's worst case on SQLite).
- ``asof`` (audit15): a rare word recalled ``--as-of`` a time by which 1,000 of the caller's turns
  were known, with ``--turns`` (1×, 8×) written later in the same sessions: the same three ways.
- ``search``: ``rem-cycle search``'s statement over ``--nodes`` nodes: main's (``LIKE`` / ``ILIKE``,
  inlined here) against ``GraphStore.search_nodes`` (``rem_fold`` on both sides), alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.recall import MATCH_BUDGET, RecallRequest, recall  # noqa: E402
from store.backend import open_database_at  # noqa: E402
from store.db import SEARCH_FOLD_VERSION  # noqa: E402
from store import recall_index  # noqa: E402
from store.graph import GraphStore, Node, escape_like  # noqa: E402
from store.recall_index import RecallIndex, Scope, TurnRecord  # noqa: E402
from tests.migrations_support import roll_back  # noqa: E402

FOREIGN = (
    "café école straße größe façade naïve résumé Zürich São Ελλάδα οδός Αθήνα καφές Москва ёлка библиотека "
    "東京 会議 報告書 予算 北京 天気 مكتبة"
).split()
# The queries: ASCII words, found alike before and after on both engines ("ascii"), and words
# the rule finds where main found none on one engine or both ("folded": accents, ß, Greek,
# Cyrillic, Chinese/Japanese).
ASCII = ["payroll export", "budget", "invoice payroll", "Budget Invoice", "EXPORT"]
FOLDED = ["cafe", "ECOLE", "strasse", "ΟΔΟΣ", "ЁЛКА", "東京", "会議の報告書", "Zurich", "resume facade", "ΑΘΗΝΑ"]


def vocabulary(n: int, rng: random.Random) -> list[str]:
    """``n`` made-up English-like words."""
    syllables = ["ka", "lo", "mi", "ne", "ro", "ta", "vu", "sen", "dar", "pol", "qui", "ber", "son", "tek"]
    return list(dict.fromkeys("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(n * 2)))[:n]


def turns(n: int, seed: int = 18) -> list[TurnRecord]:
    """``n`` turns of 8-40 words: Zipf-distributed made-up words, the query words now and then, and
    one word in twenty from :data:`FOREIGN`."""
    rng = random.Random(seed)
    words = vocabulary(3_000, rng) + ["payroll", "export", "budget", "invoice"]
    weights = [1 / (rank + 1) for rank in range(len(words))]
    out = []
    for i in range(n):
        count = rng.randint(8, 40)
        chosen = rng.choices(words, weights, k=count)
        chosen = [rng.choice(FOREIGN) if rng.random() < 0.05 else w for w in chosen]
        out.append(TurnRecord(f"memory:t{i}", f"session:s{i // 20}", i % 20, "user", "2026-11-01T10:00:00.000Z",
                              " ".join(chosen), f"u{i // 2000}"))
    return out


def nodes(n: int, seed: int = 18) -> list[Node]:
    rng = random.Random(seed)
    words = vocabulary(3_000, rng) + FOREIGN
    return [Node(f"CONCEPT:n{i}", "CONCEPT", " ".join(rng.choice(words) for _ in range(rng.randint(1, 3))).title(),
                 {"aliases": [rng.choice(words).upper()]}) for i in range(n)]


class Graphs:
    """A fresh graph per variant: SQLite files under ``work``, or schemas of the PostgreSQL URL."""

    # Numbered across every Graphs of the process: each part makes its own, and numbering per
    # Graphs reopened the same SQLite file (g1.db) for every part and scale, so a part's graph
    # held the rows of the parts before it (the scope part's 8x held the asof part's 5,000 turns
    # of alice's, enough to turn her recall to the index's way).
    opened = 0

    def __init__(self, work: Path, url: str | None) -> None:
        self.work, self.url = work, url

    def open(self, *, before: bool) -> tuple[Any, tuple[Path, str | None]]:
        """A fresh graph (rolled back to schema 17 when ``before``) and where it is."""
        Graphs.opened += 1
        self.count = Graphs.opened
        url = None
        if self.url is not None:
            import psycopg

            schema = f"bench_fold_{os.getpid()}_{self.count}"
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                conn.execute(f"CREATE SCHEMA {schema}")
            url = f"{self.url}{'&' if '?' in self.url else '?'}options=-csearch_path%3D{schema}"
        where = (self.work / f"g{self.count}.db", url)
        db = open_database_at(path=where[0], url=url)
        if before:
            with db.transaction() as conn:
                roll_back(conn, db.dialect.name, to=SEARCH_FOLD_VERSION - 1)
            if db.dialect.name == "sqlite":  # main's statements: the text as it is
                db.conn.create_function("rem_search_text", 1, lambda text: text, deterministic=True)
        return db, where


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def index_all(db: Any, rows: list[TurnRecord]) -> float:
    index = RecallIndex(db)
    return sum(timed(lambda part=rows[i:i + 500]: index.index_turns(part)) for i in range(0, len(rows), 500))


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def ask(db: Any, query: str, signals: tuple[str, ...]) -> None:
    recall(RecallRequest(query=query), source=RecallIndex(db), signals=signals)


def main_search(db: Any, text: str) -> None:
    """``GraphStore.search_nodes`` as main had it (before folding), for the baseline."""
    like = "ILIKE" if db.dialect.name == "postgresql" else "LIKE"
    pattern = "%" + escape_like(text) + "%"
    db.query(
        "SELECT id, label, name, properties FROM nodes "
        "WHERE label NOT IN (SELECT value FROM json_each(?)) AND (? IS NULL OR label = ?) AND ("
        f"name {like} ? ESCAPE '\\' OR id {like} ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM node_aliases AS a "
        f"WHERE a.node_id = nodes.id AND a.alias {like} ? ESCAPE '\\')) "
        f"ORDER BY CASE WHEN name = ? COLLATE NOCASE THEN 0 WHEN name {like} ? ESCAPE '\\' THEN 1 "
        f"WHEN name {like} ? ESCAPE '\\' THEN 2 ELSE 3 END, name COLLATE NOCASE, id LIMIT ?",
        (json.dumps(["MEMORY", "SESSION", "NOTE"]), None, None, pattern, pattern, pattern, text, escape_like(text) + "%", pattern, 50),
    )


def run(graphs: Graphs, *, n_turns: int, n_nodes: int) -> dict[str, Any]:
    rows, named = turns(n_turns), nodes(n_nodes)
    (before, where), (after, _) = graphs.open(before=True), graphs.open(before=False)
    try:
        index_s = {"before": index_all(before, rows), "after": index_all(after, rows)}
        for db in (before, after):
            GraphStore(db).upsert_nodes(named)
        recall_ms: dict[str, dict[str, list[float]]] = {
            f"{kind}_{signals}": {"before": [], "after": []} for kind in ("ascii", "folded") for signals in ("keyword", "all")}
        search_ms: dict[str, list[float]] = {"before": [], "after": []}
        everything = ("keyword", "entities", "context", "session")
        for i in range(100):
            for kind, queries in (("ascii", ASCII), ("folded", FOLDED)):
                query = queries[i % len(queries)]
                for name, signals in (("keyword", ("keyword",)), ("all", everything)):
                    recall_ms[f"{kind}_{name}"]["before"].append(timed(lambda: ask(before, query, signals)))
                    recall_ms[f"{kind}_{name}"]["after"].append(timed(lambda: ask(after, query, signals)))
            if i < 40:
                query = (ASCII + FOLDED)[i % 15]
                search_ms["before"].append(timed(lambda: main_search(before, query)))
                search_ms["after"].append(timed(lambda: GraphStore(after).search_nodes(query, limit=50, exclude_labels=("MEMORY", "SESSION", "NOTE"))))
        before.close()
        started = time.perf_counter()
        before = open_database_at(path=where[0], url=where[1])  # migration 18 re-indexes every row
        migrate_s = time.perf_counter() - started
        assert before.schema_version == SEARCH_FOLD_VERSION
    finally:
        before.close()
        after.close()
    per_k = {k: round(v / n_turns * 1000, 4) for k, v in index_s.items()}
    return {
        "turns": n_turns, "nodes": n_nodes,
        "index_s_per_1000_turns": per_k, "index_ratio": round(per_k["after"] / per_k["before"], 2),
        "migration_s": round(migrate_s, 3),
        "recall_p50_ms": {k: {v: median_ms(s) for v, s in d.items()} for k, d in recall_ms.items()},
        "recall_ratio": {k: round(statistics.median(d["after"]) / statistics.median(d["before"]), 2) for k, d in recall_ms.items()},
        "search_p50_ms": {k: median_ms(v) for k, v in search_ms.items()},
        "search_ratio": round(statistics.median(search_ms["after"]) / statistics.median(search_ms["before"]), 2),
    }


def each_way_timed(count: Callable[[], Any], ask: Callable[[], Any], *, expected: dict[str, int]) -> dict[str, dict[str, float]]:
    """``count`` (checked against ``expected``; 3 timings a round) and ``ask`` (1 a round) timed
    through the index's way, the scope's way (each forced) and the way chosen, 10 interleaved
    rounds; the medians in ms, ``{"count_p50_ms": {way: ms}, "recall_p50_ms": {way: ms}}``."""
    ways: dict[str, dict[str, list[float]]] = {w: {"count": [], "recall": []} for w in ("index", "scope", "chosen")}
    for _ in range(10):
        for way in ways:
            with forced(way):
                assert count() == expected
                ways[way]["count"] += [timed(count) for _ in range(3)]
                ways[way]["recall"].append(timed(ask))
    return {f"{kind}_p50_ms": {w: median_ms(d[kind]) for w, d in ways.items()} for kind in ("count", "recall")}


def scoped_counts(graphs: Graphs, *, n_turns: int, spread: bool = False) -> dict[str, Any]:
    """The cost of a word common among other users' turns within one user's scope: counting it,
    and that user's whole recall of it, through the index's list of the word's rows (main's way,
    forced) against through the user's own turns (forced), and as recall chooses; beside the same
    recall without a scope (the word too common to rank). ``spread``: the user's turns written one
    at a time among the others' (each a run of its own), else after them (one run)."""
    db, _ = graphs.open(before=False)
    try:
        index = RecallIndex(db)
        rows = [TurnRecord(f"memory:o{i}", f"session:o{i // 20}", i % 20, "user", "2026-11-01T10:00:00.000Z",
                           f"zebra crossing note {i}", "others") for i in range(n_turns)]
        # Alice: 40 turns in 4 sessions, "zebra" in 10 of them.
        hers = [TurnRecord(f"memory:a{i}", f"session:a{i // 10}", i % 10, "user", "2026-11-01T10:00:00.000Z",
                           "one zebra here" if i % 4 == 0 else "a quiet day", "alice") for i in range(40)]
        if spread:
            step = n_turns // len(hers)
            for i, turn in enumerate(hers):
                rows.insert(i * (step + 1), turn)
        else:
            rows += hers
        index_all(db, rows)
        mine = Scope(sessions=index.sessions_of_user("alice"))
        # A RecallIndex per count and per recall, as the CLI and MCP open one per recall: each
        # keeps the ways it chose.
        count = lambda: RecallIndex(db).term_counts(["zebra"], cap=MATCH_BUDGET, scope=mine)  # noqa: E731
        ask_alice = lambda: recall(RecallRequest(query="zebra", user="alice"), source=RecallIndex(db))  # noqa: E731
        medians = each_way_timed(count, ask_alice, expected={"zebra": 10})
        chosen = RecallIndex(db)._through_scope('"zebra"', mine)
        # The same word asked without a scope: too common to rank, its newest turns are listed.
        unscoped = [timed(lambda: recall(RecallRequest(query="zebra"), source=index)) for _ in range(10)]
    finally:
        db.close()
    return {"other_turns": n_turns, "chosen": "scope" if chosen else "index",
            **medians,
            "unscoped_recall_p50_ms": median_ms(unscoped)}


def scoped_as_of(graphs: Graphs, *, n_turns: int) -> dict[str, Any]:
    """The cost of a rare word in a scope whose sessions are mostly hidden by ``as_of`` (audit15):
    alice's 1,000 turns known by then (the word in 10) and ``n_turns`` she wrote later in the same
    sessions; counted and recalled as of then through the index's list of the word's rows (forced),
    through her turns (forced), and as ``RecallIndex._through_scope`` chooses."""
    db, _ = graphs.open(before=False)
    try:
        rows = [TurnRecord(f"memory:a{i}", f"session:a{i % 20}", i, "user",
                           "2026-01-01T10:00:00.000Z" if i < 1_000 else "2026-06-01T10:00:00.000Z",
                           f"rareword note {i}" if i < 1_000 and i % 100 == 0 else f"a quiet day {i}", "alice")
                for i in range(1_000 + n_turns)]
        index_all(db, rows)
        then = RecallRequest(query="rareword", user="alice", as_of="2026-02-01T10:00:00.000Z")
        mine = Scope(sessions=RecallIndex(db).sessions_of_user("alice"), as_of=then.as_of)
        count = lambda: RecallIndex(db).term_counts(["rareword"], cap=MATCH_BUDGET, scope=mine)  # noqa: E731
        ask = lambda: recall(then, source=RecallIndex(db))  # noqa: E731
        medians = each_way_timed(count, ask, expected={"rareword": 10})
        chosen = RecallIndex(db)._through_scope('"rareword"', mine)
    finally:
        db.close()
    return {"later_turns": n_turns, "chosen": "scope" if chosen else "index",
            **medians}


@contextmanager
def forced(way: str) -> Iterator[None]:
    """Only ``way`` ("index": the word's rows in the whole index; "scope": the scope's own turns)
    can be chosen by ``RecallIndex._through_scope`` in this block; "chosen" leaves it to choose."""
    saved = recall_index.SEEK_COST, recall_index.TURN_COST, recall_index.SCOPE_TURNS_PROBE
    if way == "scope":  # whatever the scope's size
        recall_index.SEEK_COST, recall_index.TURN_COST = dict.fromkeys(saved[0], 0), dict.fromkeys(saved[1], 0)
        recall_index.SCOPE_TURNS_PROBE = 10**9
    elif way == "index":
        recall_index.SCOPE_TURNS_PROBE = -1
    try:
        yield
    finally:
        recall_index.SEEK_COST, recall_index.TURN_COST, recall_index.SCOPE_TURNS_PROBE = saved


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", choices=("fold", "scope", "spread", "asof"), default=["fold", "scope"])
    parser.add_argument("--turns", type=int, default=4_000)
    parser.add_argument("--nodes", type=int, default=4_000)
    parser.add_argument("--postgres", default=os.environ.get("REM_TEST_POSTGRES_URL"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-fold-"))
    try:
        for engine, url in (("sqlite", None), ("postgresql", args.postgres)):
            if engine == "postgresql" and not url:
                continue
            for scale in (1, 8):
                if "fold" in args.parts:
                    figures = run(Graphs(work, url), n_turns=args.turns * scale, n_nodes=args.nodes * scale)
                    print(json.dumps({"engine": engine, "scale": f"{scale}x", **figures}, ensure_ascii=False), flush=True)
                if "scope" in args.parts:
                    figures = scoped_counts(Graphs(work, url), n_turns=args.turns * scale)
                    print(json.dumps({"engine": engine, "scale": f"{scale}x", "part": "scope", **figures}), flush=True)
                if "spread" in args.parts:
                    figures = scoped_counts(Graphs(work, url), n_turns=args.turns * scale, spread=True)
                    print(json.dumps({"engine": engine, "scale": f"{scale}x", "part": "spread", **figures}), flush=True)
                if "asof" in args.parts:
                    figures = scoped_as_of(Graphs(work, url), n_turns=args.turns * scale)
                    print(json.dumps({"engine": engine, "scale": f"{scale}x", "part": "asof", **figures}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
