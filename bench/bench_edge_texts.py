"""What a commit's read of its edges' texts costs against the history of popular edges (day400d).

    python bench/bench_edge_texts.py [--sessions 100 800] [--repeat 7] [--postgres-url URL]

A graph digested by one real cycle (``bench_cycle_growth``'s corpus: sessions of 12 turns where a
few popular classes and files recur in almost every session, so their edges gain points with every
session; embedded Chroma, the heuristic extractor) of ``--sessions`` sessions, on SQLite and, with
``--postgres-url`` (default ``REM_TEST_POSTGRES_URL``), on a fresh PostgreSQL schema. Timed, best
of ``--repeat``: ``ProvenanceStore.edge_texts`` of the 20 edges with the most points (what a commit
touching them reads, every commit, besides another session), and printed with it on PostgreSQL
the index its seeks took and the buffers they touched (``EXPLAIN (ANALYZE, BUFFERS)`` of the same
statement, with the session settings the store gives it). Run it on a checkout of main for the
"before" figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_backends import engines  # noqa: E402
from bench.bench_cycle_growth import DataDir, sessions  # noqa: E402
from config import load_settings  # noqa: E402
from store.backend import open_database  # noqa: E402
from store.provenance import ProvenanceStore  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.cycle import Stores, run_cycle  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

KEYS = 20


class _Explained:
    """A database whose ``query`` and ``query_seeking`` also keep PostgreSQL's plan of the read."""

    def __init__(self, db: Any) -> None:
        self.db, self.plan = db, ""

    def _explain(self, run: Any, sql: str, params: Any) -> list[Any]:
        rows = run("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        lines = [r[0] for r in rows]
        indexes = sorted({line.split(" using ")[1].split(" on ")[0] for line in lines if " using " in line})
        self.plan = f"{', '.join(indexes)}; {next(line.strip() for line in lines if 'Buffers' in line)}"
        return run(sql, params)

    def query(self, sql: str, params: Any = ()) -> list[Any]:
        return self._explain(self.db.query, sql, params)

    def query_seeking(self, sql: str, params: Any = ()) -> list[Any]:
        return self._explain(self.db.query_seeking, sql, params)


async def _cycle(dd: DataDir) -> None:
    """One cycle on ``dd``'s graph database, whichever engine its settings name."""
    db = open_database(dd.settings)
    stores = Stores(db=db, unit=DatabaseUnitOfWork(db), chroma=dd.chroma)
    try:
        result = await run_cycle(dd.settings, stores=stores)
    finally:
        stores.close()
    if result.outcome != "completed":
        raise RuntimeError(f"cycle {result.outcome}: {result.message}")


def measure(data_dir: Path, count: int, url: str | None, repeat: int) -> dict[str, Any]:
    """Digest ``count`` sessions in ``data_dir`` (on ``url``'s schema when given), then time the texts' read."""
    dd = DataDir(data_dir, batch_limit=count)
    if url is not None:
        dd.settings = load_settings(data_dir=data_dir, batch_limit=count, community_refresh_fraction=100, database_url=url)
    memories, summaries = sessions(random.Random(7), "s", 0, count)
    asyncio.run(dd.add(memories, summaries))
    asyncio.run(_cycle(dd))
    db = open_database(dd.settings)
    try:
        rows = db.query("SELECT source, target, relationship, COUNT(*) FROM edge_points GROUP BY source, target, relationship "
                        "ORDER BY COUNT(*) DESC, source, target LIMIT ?", (KEYS,))
        keys = [(r[0], r[1], r[2]) for r in rows]
        store = ProvenanceStore(db)
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            store.edge_texts(keys, besides="session:bench")
            best = min(best, time.perf_counter() - start)
        plan = "-"
        if url is not None:
            explained = _Explained(db)
            ProvenanceStore(explained).edge_texts(keys, besides="session:bench")  # type: ignore[arg-type]
            plan = explained.plan
        points = db.query("SELECT COUNT(*) FROM edge_points")[0][0]
        return {"ms": best * 1e3, "points": points, "top": [int(r[3]) for r in rows[:3]], "plan": plan}
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print one line per engine and history."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[100, 800])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--postgres-url", default=os.environ.get("REM_TEST_POSTGRES_URL", ""))
    args = parser.parse_args(argv)
    configure_logging(level="warning", fmt="json")
    with engines(args.postgres_url) as (scratch, names, schemas):
        for engine in names:
            for count in args.sessions:
                url = schemas.new("texts") if engine == "postgresql" and schemas else None
                r = measure(scratch / f"{engine}-{count}", count, url, args.repeat)
                print(f"{engine:10} {count:5} sessions, {r['points']:6} edge points (top edges {r['top']}): "
                      f"edge_texts of the {KEYS} most pointed edges {r['ms']:.2f} ms; {r['plan']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
