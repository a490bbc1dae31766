"""What counting sessions by digest state and chunk results by status costs as they grow (1× and 8×).

Every ``/metrics`` scrape on PostgreSQL (on SQLite, the first after each write), each run's
``finalize`` and ``status`` count ``session_digests`` by state and ``chunk_results`` by status with
their tokens. Before migration 17 that was a ``GROUP BY`` over both tables (:data:`SCANS_BEFORE_17`):
every session and chunk result ever recorded. Now ``RunStateStore.digest_counts`` and
``chunk_totals`` read ``state_counts`` plus the changes recorded since the last fold (a cycle's
worth, :data:`UNFOLDED`, is left unfolded here). The back-filled MEMORY/SESSION nodes by reason
the same way since migration 28: :data:`TURNS` turn nodes and a session node per session, one in
ten back-filled, read whole before (``bench_metrics.backfill_before_28``), now
``GraphStore.backfill_counts``. The readings, and a whole scrape
(``RemCycleCollector.collect``, a fresh connection each: what Prometheus gets), on the same database
at N and 8 × N sessions (``--chunks`` results each), in one process.

    python bench/bench_state_counts.py [--sessions 5000] [--chunks 4] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_metrics import backfill_before_28, best_of  # noqa: E402
from bench.growth import at_scales, engines  # noqa: E402
from config import load_settings  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import GraphStore  # noqa: E402
from store.runstate import RunStateStore  # noqa: E402
from worker.metrics import RemCycleCollector  # noqa: E402

SCANS_BEFORE_17 = (
    "SELECT state, COUNT(*) FROM session_digests GROUP BY state",
    "SELECT status, COUNT(*), COALESCE(SUM(tokens_in), 0), COALESCE(SUM(tokens_out), 0) FROM chunk_results GROUP BY status",
)
UNFOLDED = 100  # sessions digested since the last fold (a cycle's worth of changes)
TURNS = 20  # MEMORY nodes per session

# ``n`` rows 0 … count - 1, on both engines.
_NUMBERS = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) "


def fill(db: Database, *, sessions: int, chunks: int) -> None:
    """``sessions`` sessions, one in fifty undigested and one in five hundred undigestible, each with
    ``chunks`` chunk results (one in a hundred failed); then a fold, then :data:`UNFOLDED` sessions
    digested since."""
    with db.transaction() as conn:
        conn.execute(
            _NUMBERS + "INSERT INTO session_digests(session_id, input_revision, ingested_revision, digested_revision, state, "
            "session_created_at, updated_at) SELECT 's' || i, 'r1', 'r1', 'r1', CASE WHEN i % 500 = 0 THEN 'undigestible' "
            "WHEN i % 50 = 0 OR i < ? THEN 'undigested' ELSE 'digested' END, '2026-11-01T00:00:00Z', '2026-11-01T00:00:00Z' FROM n",
            (sessions, UNFOLDED),
        )
        conn.execute(
            _NUMBERS + "INSERT INTO chunk_results(session_id, chunk_id, content_hash, fingerprint, status, tokens_in, tokens_out, "
            "updated_at) SELECT 's' || (i / ?), 'c' || i, 'h' || i, 'f', CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'ok' END, "
            "1000 + i % 7, 200, '2026-11-01T00:00:00Z' FROM n",
            (sessions * chunks, chunks),
        )
        # One turn node in ten and one session node in ten back-filled (one in twenty minimal).
        for label, key, count, minimal in (("SESSION", "session:s", sessions, "i % 20 = 0"), ("MEMORY", "memory:m", sessions * TURNS, "0 = 1")):
            conn.execute(
                _NUMBERS + "INSERT INTO nodes(id, label, name, properties, created_at, updated_at) SELECT ? || i, ?, 'n' || i, "
                f"CASE WHEN i % 10 = 0 THEN (CASE WHEN {minimal} THEN '{{\"backfilled\": true, \"minimal\": true}}' "
                "ELSE '{\"backfilled\": true}' END) ELSE '{\"liveIngested\": true}' END, "
                "'2026-11-01T00:00:00Z', '2026-11-01T00:00:00Z' FROM n",
                (count, key, label),
            )
    runstate = RunStateStore(db)
    runstate.fold_counts()
    GraphStore(db).fold_counts()
    with db.transaction() as conn:
        conn.execute(
            "UPDATE session_digests SET state = 'digested', updated_at = '2026-11-20T00:00:00Z' WHERE session_id IN ("
            + ", ".join("?" * UNFOLDED) + ")",
            [f"s{i}" for i in range(UNFOLDED)],
        )


def vacuumed(db: Database) -> None:
    """PostgreSQL: the tables as autovacuum leaves them after many cycles. The fill wrote its rows'
    changes in one burst, folded (deleted) since: ``state_count_changes`` is compacted, as it is
    when each cycle's few changes reuse the space the last fold freed (a real burst, a back-fill of
    many sessions in one cycle, leaves the heap that large until a vacuum truncates it)."""
    url = getattr(db, "url", None)
    if url is not None:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM FULL state_count_changes")
            conn.execute("VACUUM FULL backfill_count_changes")
            conn.execute("VACUUM ANALYZE")


def scale_settings(db: Any) -> Any:
    """The settings that open ``db`` again (its folder, or its PostgreSQL schema's URL)."""
    url = getattr(db, "url", None)
    return load_settings(data_dir=db.path.parent) if url is None else load_settings(data_dir=Path(tempfile.gettempdir()), database_url=url)


def measure(db: Database, settings: Any, *, sessions: int, chunks: int) -> dict[str, float]:
    fill(db, sessions=sessions, chunks=chunks)
    vacuumed(db)
    runstate = RunStateStore(db)
    before = [{r[0]: tuple(r[1:]) for r in db.query(sql)} for sql in SCANS_BEFORE_17]
    assert runstate.digest_counts() == {**dict.fromkeys(("undigested", "digested", "undigestible"), 0), **{k: v[0] for k, v in before[0].items()}}
    assert runstate.chunk_totals() == {k: {"count": v[0], "tokens_in": int(v[1]), "tokens_out": int(v[2])} for k, v in before[1].items()}
    graph = GraphStore(db)
    backfill_before = backfill_before_28(db.dialect)
    assert graph.backfill_counts() == {r[0]: {"backfilled": int(r[1]), "backfilled-minimal": int(r[2])} for r in db.query(backfill_before)}
    collector = RemCycleCollector(settings)
    list(collector.collect())  # the run families' cache, as a running exporter has it
    return {
        "sessions": sessions,
        "before": best_of(lambda: [db.query(sql) for sql in SCANS_BEFORE_17], repeat=21),
        "now": best_of(lambda: (runstate.digest_counts(), runstate.chunk_totals()), repeat=21),
        "backfill_before": best_of(lambda: db.query(backfill_before), repeat=21),
        "backfill_now": best_of(graph.backfill_counts, repeat=21),
        "scrape": best_of(lambda: list(collector.collect()), repeat=11),
        "changes": db.query("SELECT COUNT(*) FROM state_count_changes")[0][0],
        **digested_since(db, runstate),
    }


def digested_since(db: Database, runstate: RunStateStore) -> dict[str, float]:
    """Finalize's count of the sessions digested since the last community detection (the
    :data:`UNFOLDED` digested last), with ``session_digests_updated`` and, dropped, without it."""
    moment = "2026-11-15T00:00:00Z"
    assert runstate.digested_since(moment) == UNFOLDED
    now = best_of(lambda: runstate.digested_since(moment), repeat=21)
    with db.transaction() as conn:
        conn.execute("DROP INDEX session_digests_updated")
    before = best_of(lambda: runstate.digested_since(moment), repeat=21)
    return {"since_now": now, "since_before": before}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5000, help="sessions at 1× (8× is eight times as many)")
    parser.add_argument("--chunks", type=int, default=4, help="chunk results per session")
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args(argv)
    for engine, url in engines(args.postgres_url):
        results = at_scales(url, lambda db, scale: measure(db, scale_settings(db), sessions=scale * args.sessions, chunks=args.chunks))
        first = results[0]
        print(f"{engine}: sessions by state and chunk results by status ({args.chunks} per session), {UNFOLDED} sessions' changes unfolded")
        print("| sessions | chunk results | GROUP BY both (before) | ÷ 1× | state_counts (now) | ÷ 1× | whole scrape (now) | ÷ 1× |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in results:
            print(f"| {r['sessions']:,} | {r['sessions'] * args.chunks:,} | {r['before'] * 1000:.2f} ms | {r['before'] / first['before']:.2f}× "
                  f"| {r['now'] * 1000:.2f} ms | {r['now'] / first['now']:.2f}× | {r['scrape'] * 1000:.1f} ms | {r['scrape'] / first['scrape']:.2f}× |")
        print(f"{engine}: back-filled MEMORY/SESSION nodes by reason ({TURNS} turn nodes a session, one in ten back-filled)")
        print("| nodes | every node read (before) | ÷ 1× | backfill_counts (now) | ÷ 1× |")
        print("| --- | --- | --- | --- | --- |")
        for r in results:
            print(f"| {r['sessions'] * (TURNS + 1):,} | {r['backfill_before'] * 1000:.2f} ms | {r['backfill_before'] / first['backfill_before']:.2f}× "
                  f"| {r['backfill_now'] * 1000:.2f} ms | {r['backfill_now'] / first['backfill_now']:.2f}× |")
        print(f"{engine}: finalize's count of the {UNFOLDED} sessions digested since the last community detection")
        print("| sessions | without session_digests_updated (before) | ÷ 1× | with it (now) | ÷ 1× |")
        print("| --- | --- | --- | --- | --- |")
        for r in results:
            print(f"| {r['sessions']:,} | {r['since_before'] * 1000:.2f} ms | {r['since_before'] / first['since_before']:.2f}× "
                  f"| {r['since_now'] * 1000:.2f} ms | {r['since_now'] / first['since_now']:.2f}× |")


if __name__ == "__main__":
    main()
