"""SQLite against PostgreSQL (issue 15): one corpus, one worker, each engine.

For each engine, in the same process: a whole REM cycle over the corpus (heuristic extractor), the
graph writes alone (the nodes and edges ingest plans, written through ``GraphStore`` in the cycle's
batches, on a fresh database) against that engine's raw bulk insert of the same rows (SQLite:
``executemany`` in one transaction; PostgreSQL: ``COPY``, its fastest path), and at the end the
canonical dumps of the two cycles' graphs, which must be equal.

    python bench/bench_backends.py --postgres-url postgresql://rem@127.0.0.1:5432/rem_bench
    python bench/bench_backends.py --memories 20000 --sessions 400   # REM_TEST_POSTGRES_URL by default

The PostgreSQL tables go in a schema of their own, dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_ingest import graph_write_seconds, load_corpus, planned_batches, raw_insert_seconds, synthetic_rows, written_rows  # noqa: E402
from config import load_settings  # noqa: E402
from store.backend import canonical_dump, open_database, open_database_at  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from store.graph import GraphStore  # noqa: E402
from store.postgres import close_pools  # noqa: E402
from worker.cycle import run_cycle  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


def copy_insert_seconds(url: str, nodes: list[tuple], edges: list[tuple]) -> float:
    """Baseline: ``COPY`` of the same node and edge rows into a fresh copy of the schema."""
    open_database_at(path=Path("unused"), url=url).close()  # creates the schema (tables, triggers)
    with psycopg.connect(url) as conn:
        t0 = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy("COPY nodes(id, label, name, properties, created_at, updated_at) FROM STDIN") as copy:
                for row in nodes:
                    copy.write_row(row)
            with cur.copy("COPY edges(source, target, relationship, weight, properties, created_at, updated_at) FROM STDIN") as copy:
                for row in edges:
                    copy.write_row(row)
        conn.commit()
        return time.perf_counter() - t0


class Schemas:
    """Fresh PostgreSQL schemas on one server, each a database URL of its own; all dropped at the end."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.made: list[str] = []

    def new(self, purpose: str) -> str:
        name = f"bench_{purpose}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        self.made.append(name)
        separator = "&" if "?" in self.server else "?"
        return f"{self.server}{separator}options={quote(f'-csearch_path={name}')}"

    def drop(self) -> None:
        close_pools()
        with psycopg.connect(self.server, autocommit=True) as conn:
            for name in self.made:
                conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@contextmanager
def engines(postgres_url: str) -> Iterator[tuple[Path, tuple[str, ...], Schemas | None]]:
    """A scratch directory, the engines a bench runs on (SQLite, and PostgreSQL when
    ``postgres_url`` names a server) and that server's fresh schemas, all dropped at the end."""
    schemas = Schemas(postgres_url) if postgres_url else None
    try:
        with tempfile.TemporaryDirectory() as scratch:
            yield Path(scratch), ("sqlite", "postgresql") if schemas else ("sqlite",), schemas
    finally:
        if schemas is not None:
            schemas.drop()


async def bench(memories: int, sessions: int, server: str, workdir: Path, repeat: int) -> dict[str, Any]:
    configure_logging(level="warning", fmt="json")
    schemas = Schemas(server)
    try:
        cycle_url = schemas.new("cycle")
        engines = {
            "sqlite": load_settings(data_dir=workdir / "data", batch_limit=sessions),
            "postgresql": load_settings(data_dir=workdir / "data", batch_limit=sessions, database_url=cycle_url),
        }
        mem_rows, sum_rows = synthetic_rows(memories, sessions)
        chroma = ChromaStore(engines["sqlite"])
        await load_corpus(chroma, engines["sqlite"], mem_rows, sum_rows)
        batches = await planned_batches(chroma, [r[2]["sessionId"] for r in sum_rows])
        result: dict[str, Any] = {"memories": memories, "sessions": sessions, "repeat": repeat}
        dumps = {}
        for name, settings in engines.items():
            cycle = await run_cycle(settings, reason="bench")
            assert cycle.outcome == "completed", cycle.message
            result[f"{name}_cycle_s"] = round(cycle.wall_ms / 1000, 2)
            db = open_database(settings)
            dumps[name] = canonical_dump(db)
            db.close()

            # Best of ``repeat`` alternating runs, each on a fresh database: the machine is shared.
            graph_s = raw_s = float("inf")
            for attempt in range(repeat):
                url = None if name == "sqlite" else schemas.new("graph")
                graph = GraphStore(open_database_at(path=workdir / f"graph-only-{name}-{attempt}.sqlite3", url=url))
                graph_s = min(graph_s, graph_write_seconds(graph, batches))
                nodes, edges = written_rows(graph.db)
                graph.db.close()
                if url is None:
                    raw_s = min(raw_s, raw_insert_seconds(workdir / f"raw-{attempt}.sqlite3", nodes, edges))
                else:
                    raw_s = min(raw_s, copy_insert_seconds(schemas.new("raw"), nodes, edges))
            rows = len(nodes) + len(edges)
            result[f"{name}_graph_rows"] = rows
            result[f"{name}_graph_write_rows_per_s"] = round(rows / graph_s)
            result[f"{name}_raw_bulk_rows_per_s"] = round(rows / raw_s)
            result[f"{name}_graph_vs_raw"] = round(raw_s / graph_s, 3)
        result["graph_rows_in_dump"] = sum(len(rows) for rows in dumps["sqlite"].values())
        result["dumps_equal"] = dumps["sqlite"] == dumps["postgresql"]
        result["postgresql_cycle_over_sqlite"] = round(result["postgresql_cycle_s"] / result["sqlite_cycle_s"], 2)
        return result
    finally:
        schemas.drop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3, help="graph-write and raw-insert runs per engine (best is kept)")
    parser.add_argument("--postgres-url", default=os.environ.get("REM_TEST_POSTGRES_URL", ""),
                        help="a PostgreSQL database the bench may create schemas in (default: REM_TEST_POSTGRES_URL)")
    args = parser.parse_args(argv)
    if not args.postgres_url:  # run_all goes on with the other benchmarks
        print("bench_backends skipped: it needs a PostgreSQL server (--postgres-url or REM_TEST_POSTGRES_URL)")
        return {}
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-backends-"))
    try:
        result = anyio.run(bench, args.memories, args.sessions, args.postgres_url, workdir, args.repeat)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for key, value in result.items():
        print(f"{key:36} {value}")
    ok = result["dumps_equal"] and result["sqlite_graph_vs_raw"] >= 0.25 and result["postgresql_graph_vs_raw"] >= 0.25
    print("targets (graph writes ≥ 25% of the engine's raw bulk insert on each, dumps equal):", "met" if ok else "NOT met")
    return result


if __name__ == "__main__":
    main()
