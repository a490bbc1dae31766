"""Drain benchmark (issues 4 and 15): 100,000 queued edges whose endpoints exist, against 10,000,
in the JSONL file and in the queue table (``lazy_edges``).

Lines/s of ``drain_queue`` and its peak Python heap (``tracemalloc``, a separate run so tracing
does not slow the timed one). Streaming means the peak of the 100,000-line drain stays close to
the 10,000-line one instead of growing tenfold. The table form drains the same lines as rows, in the
same process, the two forms alternating over three rounds (medians): rows/s against the file's
lines/s, and its own peak heap.
Producers: edges/s of ``enqueue_lazy_edges`` in calls of 100 edges, to the file and to the table.

    python bench/bench_drain.py
    python bench/bench_drain.py --lines 100000 --small 10000 --batch-size 500
    python bench/bench_drain.py --postgres-url postgresql://…   # + both forms on PostgreSQL
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import load_settings  # noqa: E402
from pipelines.drain import drain_queue  # noqa: E402
from pipelines.enqueue import enqueue_lazy_edges  # noqa: E402
from store.backend import open_database_at  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import GraphStore, Node  # noqa: E402
from store.lazy_queue import LazyEdgeQueue, edge_line  # noqa: E402
from store.lazy_table import LazyEdgeTable  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

ROUNDS = 3
FAN = 1_000  # sources; line n links CONCEPT:s<n % FAN> → CONCEPT:t<n // FAN>, all distinct


def bench_edge(n: int) -> dict[str, Any]:
    return {"source": f"CONCEPT:s{n % FAN}", "target": f"CONCEPT:t{n // FAN}", "relationship": "RELATES_TO",
            "weight": 1.0, "properties": {"evidence": f"line {n} of the benchmark queue"}}


def queue_lines(lines: int) -> list[bytes]:
    return [edge_line(bench_edge(n), timestamp="2026-11-29T12:00:00.000Z") for n in range(lines)]


async def one_drain(
    workdir: Path, lines: int, batch_size: int, *, trace: bool, form: str = "file", url: str | None = None
) -> dict[str, Any]:
    root = workdir / f"{lines}-{form}-{'trace' if trace else 'time'}"
    settings = load_settings(data_dir=root)
    root.mkdir(parents=True, exist_ok=True)
    graph = GraphStore(open_database_at(path=settings.graph_path, url=url))
    graph.upsert_nodes(Node(f"CONCEPT:s{n}", "CONCEPT", f"s{n}") for n in range(FAN))
    graph.upsert_nodes(Node(f"CONCEPT:t{n}", "CONCEPT", f"t{n}") for n in range((lines + FAN - 1) // FAN))
    queue = LazyEdgeQueue(settings.queue_path)
    table = LazyEdgeTable(graph.db)
    if form == "file":
        queue.append_lines(queue_lines(lines))
        size = queue.path.stat().st_size
    else:
        table.append_lines(queue_lines(lines))
        size = table.pending_bytes(up_to=table.last_id())
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    stats = await drain_queue(queue, table=table, unit=DatabaseUnitOfWork(graph.db), chroma=ChromaStore(settings), max_attempts=5, batch_size=batch_size)
    seconds = time.perf_counter() - t0
    peak = 0
    if trace:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert stats.succeeded == lines and stats.failed == 0, stats
    assert stats.table_rows == (lines if form == "table" else 0), stats
    assert graph.counts()["edge_total"] == lines and table.depth() == 0
    graph.db.close()
    shutil.rmtree(root)
    return {"seconds": seconds, "peak_bytes": peak, "queue_bytes": size}


def enqueue_rate(workdir: Path, edges: int, *, form: str) -> float:
    """Edges/s of ``enqueue_lazy_edges`` in calls of 100 edges (each call opens the target: a
    producer process's view)."""
    root = workdir / f"enqueue-{form}"
    settings = load_settings(data_dir=root)
    Database(settings.graph_path).close()
    target = settings.queue_path if form == "file" else f"sqlite:///{settings.graph_path}"
    t0 = time.perf_counter()
    for start in range(0, edges, 100):
        enqueue_lazy_edges(target, [bench_edge(n) for n in range(start, min(edges, start + 100))], fsync=True)
    seconds = time.perf_counter() - t0
    shutil.rmtree(root)
    return edges / seconds


async def bench(lines: int, small: int, batch_size: int, workdir: Path) -> dict[str, Any]:
    configure_logging(level="warning", fmt="json")
    queue_bytes = len(b"".join(queue_lines(lines)))
    # The two forms alternate, three rounds, and each keeps its median: load from other work on
    # the machine then falls on both alike.
    timed: dict[tuple[str, int], list[float]] = {}
    for _ in range(ROUNDS):
        for size in (lines, small):
            for form in ("file", "table"):
                timed.setdefault((form, size), []).append((await one_drain(workdir, size, batch_size, trace=False, form=form))["seconds"])
    big_t, table_t, small_t, table_small_t = (
        {"seconds": statistics.median(timed[key])} for key in (("file", lines), ("table", lines), ("file", small), ("table", small))
    )
    big_t["queue_bytes"] = queue_bytes
    big_m = await one_drain(workdir, lines, batch_size, trace=True)
    small_m = await one_drain(workdir, small, batch_size, trace=True)
    table_big_m = await one_drain(workdir, lines, batch_size, trace=True, form="table")
    table_small_m = await one_drain(workdir, small, batch_size, trace=True, form="table")
    enqueue_file = enqueue_rate(workdir, small, form="file")
    enqueue_table = enqueue_rate(workdir, small, form="table")
    return {
        "lines": lines,
        "batch_size": batch_size,
        "queue_mb": round(big_t["queue_bytes"] / 1e6, 1),
        "seconds": round(big_t["seconds"], 2),
        "lines_per_s": round(lines / big_t["seconds"]),
        "small_lines": small,
        "small_lines_per_s": round(small / small_t["seconds"]),
        "peak_heap_mb": round(big_m["peak_bytes"] / 1e6, 2),
        "small_peak_heap_mb": round(small_m["peak_bytes"] / 1e6, 2),
        "peak_ratio": round(big_m["peak_bytes"] / small_m["peak_bytes"], 2),
        "table_rows_per_s": round(lines / table_t["seconds"]),
        "table_vs_file": round(big_t["seconds"] / table_t["seconds"], 2),
        "table_small_rows_per_s": round(small / table_small_t["seconds"]),
        "table_peak_heap_mb": round(table_big_m["peak_bytes"] / 1e6, 2),
        "table_small_peak_heap_mb": round(table_small_m["peak_bytes"] / 1e6, 2),
        "table_peak_ratio": round(table_big_m["peak_bytes"] / table_small_m["peak_bytes"], 2),
        "enqueue_file_edges_per_s": round(enqueue_file),
        "enqueue_table_edges_per_s": round(enqueue_table),
    }


async def bench_postgres(lines: int, batch_size: int, server: str) -> dict[str, Any]:
    """The two forms with the graph (and the queue table) in PostgreSQL: medians of three
    alternating rounds, each on a fresh schema."""
    from bench.bench_backends import Schemas

    schemas = Schemas(server)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-drain-pg-"))
    try:
        timed: dict[str, list[float]] = {"file": [], "table": []}
        for _ in range(ROUNDS):
            for form in ("file", "table"):
                done = await one_drain(workdir, lines, batch_size, trace=False, form=form, url=schemas.new("drain"))
                timed[form].append(done["seconds"])
    finally:
        schemas.drop()
        shutil.rmtree(workdir, ignore_errors=True)
    file_s, table_s = statistics.median(timed["file"]), statistics.median(timed["table"])
    return {
        "pg_lines": lines,
        "pg_file_lines_per_s": round(lines / file_s),
        "pg_table_rows_per_s": round(lines / table_s),
        "pg_table_vs_file": round(file_s / table_s, 2),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--postgres-url", default=os.environ.get("REM_TEST_POSTGRES_URL", ""),
                        help="also drain both forms with the graph in this PostgreSQL database (schemas made and dropped)")
    parser.add_argument("--pg-lines", type=int, default=20_000)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-drain-"))
    try:
        result = anyio.run(bench, args.lines, args.small, args.batch_size, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.postgres_url:
        configure_logging(level="warning", fmt="json")
        result.update(anyio.run(bench_postgres, args.pg_lines, args.batch_size, args.postgres_url))
    for key, value in result.items():
        print(f"{key:20} {value}")
    print("target (peak heap of the large drain within 1.5× the small one):", "met" if result["peak_ratio"] <= 1.5 else "NOT met")
    print("target (the table form's peak heap flat too, within 1.5×):", "met" if result["table_peak_ratio"] <= 1.5 else "NOT met")
    return result


if __name__ == "__main__":
    main()
