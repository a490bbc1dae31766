"""One re-extraction commit's cost against the length of the live lazy-edge queue table (day400d).

    python bench/bench_supersede_growth.py [--lines 4000] [--scales 1 8] [--repeat 9] [--postgres-url URL]

A graph — a SQLite file, and with ``--postgres-url`` (default ``REM_TEST_POSTGRES_URL``) a fresh
schema on that server — whose session ``s-again`` was committed once while its turns' MEMORY nodes
were not in the graph: its commit queued one ``MENTIONED_IN`` line per mention in the queue table
(``REM_LAZY_QUEUE=database``). The table also holds ``--lines`` × scale lines of 12 other sessions
(a few hundred bytes each: the live queue). Timed, best of ``--repeat``: ``commit_session`` of
``s-again``'s extraction again, as a cycle commits a session extracted before (its lines stand in
for the earlier ones: ``queue_superseding`` on the table), and within it the superseding alone.
Printed after each engine: the plan of the superseding's read (SQLite's ``EXPLAIN QUERY PLAN``;
PostgreSQL's ``EXPLAIN ANALYZE``, whose rows removed by the filter are lines read and not chosen).
Run it on a checkout of main for the "before" figures (the plan prints ``-`` there).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_backends import Schemas, engines  # noqa: E402
from pipelines.extract.commit import commit_session  # noqa: E402
from pipelines.extract.heuristic import extract_heuristic  # noqa: E402
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction  # noqa: E402
from pipelines.extract.reduce import ReducedSession, reduce_session  # noqa: E402
from pipelines.lazy_edge import ExtractionLines, queue_superseding  # noqa: E402
from store.backend import open_database_at  # noqa: E402
from store.lazy_queue import edge_line  # noqa: E402
from store.lazy_table import LazyEdgeTable  # noqa: E402
from store.semantic_index import SemanticIndex  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

OTHERS = [f"session-{i:02d}" for i in range(12)]
TURN = "The LazyEdgeQueue feeds GraphStore; DrainWorker reads ConfigLoader and RetryPolicy. "


def _other(sid: str, n: int) -> dict[str, Any]:
    return {"source": f"CLASS:Thing{n}", "target": f"memory:{sid}-m{n}", "relationship": "MENTIONED_IN",
            "properties": {"chunk_ids": [f"{sid}:chunk:{n % 40}"], "evidence": ["x" * 200]}}


def _reduced(turns: int) -> ReducedSession:
    work = WorkUnit("s-again:chunk:0", "s-again", 0, tuple(UnitTurn(n, f"s-again-m{n}", TURN) for n in range(1, turns + 1)), "h")
    return reduce_session("s-again", [validate_extraction(extract_heuristic(work), work, semantic_types=("CLASS",))])


def _plan(db: Any, engine: str) -> str:
    """The plan of the superseding's read of the table, for ``s-again``'s lines."""
    try:
        from store.lazy_table import holding_read  # noqa: PLC0415 - absent on main: the plan prints "-" there
    except ImportError:
        return "-"
    statement, patterns = holding_read("lazy_edges", ExtractionLines({"s-again": None}).filters, db.dialect)
    statement = statement.format(line="line")
    if engine == "sqlite":
        return "; ".join(row[-1] for row in db.query(f"EXPLAIN QUERY PLAN {statement}", (0, *patterns, 2000)))
    with db.transaction() as conn:
        rows = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {statement}", (0, *patterns, 2000)).fetchall()
    return "; ".join(row[0].strip() for row in rows)


def measure(engine: str, lines: int, repeat: int, workdir: Path, schemas: Schemas | None) -> dict[str, Any]:
    """Best commit and superseding milliseconds with ``lines`` other lines queued, and the read's plan."""
    url = schemas.new("supersede") if engine == "postgresql" and schemas else None
    db = open_database_at(path=workdir / f"g{lines}.sqlite3", url=url)
    try:
        table = LazyEdgeTable(db)
        table.append_lines(edge_line(_other(OTHERS[n % len(OTHERS)], n)) for n in range(lines))
        reduced = _reduced(20)
        unit = DatabaseUnitOfWork(db)
        commit_session(reduced, unit=unit, graph_index=SemanticIndex(db), on_commit=lambda: None, queue_append=table.append)
        queued = table.depth() - lines
        superseding: list[float] = []

        def timed_superseding(edges: Sequence[Mapping[str, Any]]) -> int:
            start = time.perf_counter()
            try:
                return queue_superseding(table, edges)
            finally:
                superseding.append((time.perf_counter() - start) * 1e3)

        commits = []
        for _ in range(repeat):
            start = time.perf_counter()
            commit_session(reduced, unit=unit, graph_index=SemanticIndex(db), on_commit=lambda: None, queue_append=timed_superseding)
            commits.append((time.perf_counter() - start) * 1e3)
        left = table.depth() - lines
        return {"commit_ms": min(commits), "supersede_ms": min(superseding), "queued": queued, "left": left, "plan": _plan(db, engine)}
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print one line per engine and queue length, then each engine's plan."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=4000)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--postgres-url", default=os.environ.get("REM_TEST_POSTGRES_URL", ""))
    args = parser.parse_args(argv)
    configure_logging(level="warning", fmt="json")
    with engines(args.postgres_url) as (scratch, names, schemas):
        for engine in names:
            plan = "-"
            for scale in args.scales:
                lines = args.lines * scale
                r = measure(engine, lines, args.repeat, scratch, schemas)
                plan = r["plan"]
                print(f"{engine:10} {lines:7} lines queued: commit {r['commit_ms']:.2f} ms, of which superseding "
                      f"{r['supersede_ms']:.2f} ms; s-again's lines {r['queued']} queued, {r['left']} after {args.repeat} commits",
                      flush=True)
            print(f"{engine:10} plan of the superseding's read at {lines} lines: {plan}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
