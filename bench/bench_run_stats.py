"""What the run histograms cost as the run history grows (1× and 8×).

The first ``/metrics`` scrape after each run (on PostgreSQL and on SQLite alike: a run's finish
changes the runs) rebuilt ``rem_cycle_cycle_duration_seconds``, ``rem_cycle_phase_duration_seconds``
and ``rem_cycle_chunks_reused_total`` from every run ever recorded: two reads of every run's phases
document and one of its times (:data:`READS_BEFORE_17`, decoded as ``RunStateStore`` did). Now
(migration 17) each finish keeps ``run_stats`` in step and a scrape reads its few dozen rows
(``RunStateStore.run_stats``); the finish pays a read of its own row and an upsert of the buckets it
falls in. On the same database at R and 8 × R hourly runs (bench/bench_scrape_growth.py's history),
in one process; ``--postgres-url`` adds PostgreSQL.

    python bench/bench_run_stats.py [--runs 1000] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_metrics import best_of  # noqa: E402
from bench.growth import at_scales, engines  # noqa: E402
from bench.bench_scrape_growth import run_history  # noqa: E402
from store.db import Database  # noqa: E402
from store.runstate import RunStateStore, run_contribution  # noqa: E402

READS_BEFORE_17 = (
    "SELECT started_at, finished_at FROM rem_runs WHERE finished_at IS NOT NULL AND outcome != 'running'",
    "SELECT phases FROM rem_runs",  # the phase durations
    "SELECT phases FROM rem_runs",  # the chunks reused
)


def read_before(db: Database) -> None:
    """What the scrape read and decoded before migration 17."""
    for sql in READS_BEFORE_17:
        for row in db.query(sql):
            if len(row) == 1:
                json.loads(row[0])


def measure(db: Database, runs: int) -> dict[str, Any]:
    run_history(db, runs)
    store = RunStateStore(db)
    running = store.running_runs()[0]["run_id"]
    store.finish_run(running, outcome="completed", phases={"extract": {"duration_ms": 10, "chunks_reused": 1}})  # builds run_stats
    everything = {}
    for row in db.query("SELECT started_at, finished_at, outcome, phases FROM rem_runs"):
        for key, value in run_contribution(row).items():
            everything[key] = everything.get(key, 0.0) + value
    assert store.run_stats().keys() == everything.keys()
    names = itertools.count()

    def one_run() -> None:
        run_id = f"bench-run-{next(names)}"
        store.start_run(run_id, reason="interval", mode="once", owner="bench")
        store.finish_run(run_id, outcome="completed", phases={"ingest": {"duration_ms": 1200}, "extract": {"duration_ms": 900, "chunks_reused": 2}})

    return {
        "runs": runs,
        "before": best_of(lambda: read_before(db), repeat=7),
        "now": best_of(store.run_stats, repeat=21),
        "finish": best_of(one_run, repeat=21),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs at 1× (8× is eight times as many)")
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args(argv)
    for engine, url in engines(args.postgres_url):
        results = at_scales(url, lambda db, scale: measure(db, scale * args.runs))
        first = results[0]
        print(f"{engine}: the run histograms and chunks reused, as the first scrape after a run reads them")
        print("| runs | every run read (before) | ÷ 1× | run_stats (now) | ÷ 1× | a run's start + finish (now) | ÷ 1× |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in results:
            print(f"| {r['runs']:,} | {r['before'] * 1000:.1f} ms | {r['before'] / first['before']:.2f}× | {r['now'] * 1000:.2f} ms "
                  f"| {r['now'] / first['now']:.2f}× | {r['finish'] * 1000:.2f} ms | {r['finish'] / first['finish']:.2f}× |")


if __name__ == "__main__":
    main()
