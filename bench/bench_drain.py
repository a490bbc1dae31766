"""Drain benchmark (issue 4): 100,000 queued edges whose endpoints exist, against 10,000.

Lines/s of ``drain_queue`` and its peak Python heap (``tracemalloc``, a separate run so tracing
does not slow the timed one). Streaming means the peak of the 100,000-line drain stays close to
the 10,000-line one instead of growing tenfold.

    python bench/bench_drain.py
    python bench/bench_drain.py --lines 100000 --small 10000 --batch-size 500
"""

from __future__ import annotations

import argparse
import shutil
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
from store.chroma import ChromaStore  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import GraphStore, Node  # noqa: E402
from store.lazy_queue import LazyEdgeQueue, edge_line  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

FAN = 1_000  # sources; line n links CONCEPT:s<n % FAN> → CONCEPT:t<n // FAN>, all distinct


def write_queue(queue: LazyEdgeQueue, lines: int) -> None:
    queue.append_lines(
        edge_line(
            {"source": f"CONCEPT:s{n % FAN}", "target": f"CONCEPT:t{n // FAN}", "relationship": "RELATES_TO",
             "weight": 1.0, "properties": {"evidence": f"line {n} of the benchmark queue"}},
            timestamp="2026-11-29T12:00:00.000Z",
        )
        for n in range(lines)
    )


async def one_drain(workdir: Path, lines: int, batch_size: int, *, trace: bool) -> dict[str, Any]:
    root = workdir / f"{lines}-{'trace' if trace else 'time'}"
    settings = load_settings(data_dir=root)
    graph = GraphStore(Database(settings.graph_path))
    graph.upsert_nodes(Node(f"CONCEPT:s{n}", "CONCEPT", f"s{n}") for n in range(FAN))
    graph.upsert_nodes(Node(f"CONCEPT:t{n}", "CONCEPT", f"t{n}") for n in range((lines + FAN - 1) // FAN))
    queue = LazyEdgeQueue(settings.queue_path)
    write_queue(queue, lines)
    size = queue.path.stat().st_size
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    stats = await drain_queue(queue, graph=graph, chroma=ChromaStore(settings), max_attempts=5, batch_size=batch_size)
    seconds = time.perf_counter() - t0
    peak = 0
    if trace:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert stats.succeeded == lines and stats.failed == 0, stats
    assert graph.counts()["edge_total"] == lines
    graph.db.close()
    shutil.rmtree(root)
    return {"seconds": seconds, "peak_bytes": peak, "queue_bytes": size}


async def bench(lines: int, small: int, batch_size: int, workdir: Path) -> dict[str, Any]:
    configure_logging(level="warning", fmt="json")
    big_t = await one_drain(workdir, lines, batch_size, trace=False)
    small_t = await one_drain(workdir, small, batch_size, trace=False)
    big_m = await one_drain(workdir, lines, batch_size, trace=True)
    small_m = await one_drain(workdir, small, batch_size, trace=True)
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
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=500)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-drain-"))
    try:
        result = anyio.run(bench, args.lines, args.small, args.batch_size, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for key, value in result.items():
        print(f"{key:20} {value}")
    print("target (peak heap of the large drain within 1.5× the small one):", "met" if result["peak_ratio"] <= 1.5 else "NOT met")
    return result


if __name__ == "__main__":
    main()
