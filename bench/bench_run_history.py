"""How many runs the graph database keeps, and what a cycle's prune costs, at 1× and 8× the history.

Every cycle writes a ``rem_runs`` row (its phases document is about 1.9 KB: 4 KB of file a cycle
on SQLite, measured over idle ``--once`` cycles), and nothing deleted them: a year of cycles every
five minutes is some 400 MB. Now ``finalize`` deletes the runs finished more than
``REM_RUN_HISTORY_DAYS`` (90) days ago (``RunStateStore.prune_runs``; counts and histograms keep
them). The history below is a run every 15 minutes over 60 days (1×) and 480 days (8×); the first
prune takes out the backlog (on PostgreSQL, vacuumed then, as autovacuum soon does: until then
each prune steps over the backlog's dead index entries), then each cycle's prune is timed (a new run, then the prune: the one
run that aged out), best of 21, in one process; ``--postgres-url`` adds PostgreSQL.

    python bench/bench_run_history.py [--days 60] [--keep-days 90] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_metrics import best_of  # noqa: E402
from bench.growth import at_scales, engines  # noqa: E402
from store.db import Database  # noqa: E402
from store.runstate import RunStateStore  # noqa: E402

EVERY = timedelta(minutes=15)
START = datetime(2025, 1, 1, tzinfo=UTC)
PHASES = json.dumps({phase: {"duration_ms": 1200, "state": "completed", "sessions": 12, "chunks": 40}
                     for phase in ("provider-ready", "ingest", "extract", "drain", "finalize")})


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def measure(db: Database, *, days: int, keep_days: int) -> dict[str, Any]:
    runs = int(timedelta(days=days) / EVERY)
    with db.transaction() as conn:
        conn.executemany(
            "INSERT INTO rem_runs(run_id, reason, mode, started_at, finished_at, outcome, phases) VALUES (?,?,?,?,?,?,?)",
            [(f"run-{n:06d}", "interval", "once", stamp(START + n * EVERY), stamp(START + n * EVERY + timedelta(seconds=30)),
              "failed" if n % 10 == 0 else "completed", PHASES) for n in range(runs)],
        )
    clock = iter(itertools.count(runs))
    now = [START + runs * EVERY]

    def cycle() -> int:
        n = next(clock)
        store = RunStateStore(db, clock=lambda: stamp(now[0]))
        store.start_run(f"run-{n:06d}", reason="interval", mode="once", owner="bench")
        store.finish_run(f"run-{n:06d}", outcome="completed", phases={"ingest": {"duration_ms": 900}})  # builds run_stats once
        now[0] += EVERY
        return store.prune_runs(finished_before=stamp(now[0] - timedelta(days=keep_days)))

    total_before = db.query("SELECT COUNT(*) FROM rem_runs")[0][0]
    first = cycle()  # the backlog beyond the history kept
    url = getattr(db, "url", None)
    if url is not None:  # PostgreSQL: the backlog's dead rows vacuumed, as autovacuum does soon after
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE rem_runs")
    return {
        "days": days, "runs": total_before, "first_prune": first,
        "cycle": best_of(cycle, repeat=21), "kept": db.query("SELECT COUNT(*) FROM rem_runs")[0][0],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=60, help="days of history at 1× (8× is eight times as long)")
    parser.add_argument("--keep-days", type=int, default=90, help="REM_RUN_HISTORY_DAYS")
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args(argv)
    for engine, url in engines(args.postgres_url):
        results = at_scales(url, lambda db, scale: measure(db, days=scale * args.days, keep_days=args.keep_days))
        first = results[0]
        print(f"{engine}: a run every 15 minutes, REM_RUN_HISTORY_DAYS={args.keep_days}")
        print("| days of history | runs recorded | first prune deleted | runs kept | a cycle's start + finish + prune | ÷ 1× |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in results:
            print(f"| {r['days']:,} | {r['runs']:,} | {r['first_prune']:,} | {r['kept']:,} | {r['cycle'] * 1000:.2f} ms "
                  f"| {r['cycle'] / first['cycle']:.2f}× |")


if __name__ == "__main__":
    main()
