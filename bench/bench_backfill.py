"""Back-fill benchmark (issue 4): the earlier system's historical scale, reached through the queue.

8,246 memories in 794 sessions sit in embedded Chroma, none of them in the graph. One queued
``MENTIONED_IN`` edge per memory (``CONCEPT:topic-N → memory:<id>``) makes the drain back-fill
every memory and, with it, every parent session. Measured in the same process on two fresh graph
files over the same Chroma:

- batched: ``drain_queue`` (per batch of lines one Chroma ``get(ids=[…])``, one ``$in`` summary
  read, one graph transaction);
- one row at a time: ``link_nodes_async`` per line, i.e. ``ingest_single_row`` of the endpoint
  (its own Chroma reads and transaction) and then the link, as the earlier system did.

    python bench/bench_backfill.py
    python bench/bench_backfill.py --memories 2000 --sessions 200   # quicker
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_ingest import load_corpus, synthetic_rows  # noqa: E402
from config import load_settings  # noqa: E402
from pipelines.backfill import link_nodes_async  # noqa: E402
from pipelines.drain import drain_queue  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import GraphStore, Node  # noqa: E402
from store.lazy_queue import LazyEdgeQueue  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

TOPICS = 50


def queued_edges(memory_ids: list[str]) -> list[dict[str, Any]]:
    return [
        {"source": f"CONCEPT:topic-{n % TOPICS}", "target": f"memory:{mid}", "relationship": "MENTIONED_IN", "properties": {"n": n}}
        for n, mid in enumerate(memory_ids)
    ]


def fresh_graph(path: Path) -> GraphStore:
    graph = GraphStore(Database(path))
    graph.upsert_nodes(Node(f"CONCEPT:topic-{n}", "CONCEPT", f"topic {n}") for n in range(TOPICS))
    return graph


def check(graph: GraphStore, memories: int, sessions: int) -> dict[str, Any]:
    counts = graph.counts()
    assert counts["nodes"].get("MEMORY") == memories, counts
    assert counts["nodes"].get("SESSION") == sessions, counts
    assert counts["edges"].get("MENTIONED_IN") == memories, counts
    assert counts["edges"].get("ORIGINATES_IN") == memories, counts
    return counts


async def bench(memories: int, sessions: int, workdir: Path, batch_size: int) -> dict[str, Any]:
    configure_logging(level="warning", fmt="json")
    settings = load_settings(data_dir=workdir / "data")
    mem_rows, sum_rows = synthetic_rows(memories, sessions)
    # synthetic_rows gives every session memories // sessions turns; spread the remainder too.
    extra = memories - len(mem_rows)
    for k in range(extra):
        sid = sum_rows[k][2]["sessionId"]
        mem_rows.append((f"{sid}-x{k:04d}", "one more turn", {"sessionId": sid, "turnIndex": 1000 + k, "createdAt": "2026-10-01T00:00:00Z"}))
    chroma = ChromaStore(settings)
    load_s = await load_corpus(chroma, settings, mem_rows, sum_rows)
    edges = queued_edges([r[0] for r in mem_rows])

    batched_graph = fresh_graph(workdir / "batched.sqlite3")
    queue = LazyEdgeQueue(workdir / "data" / "lazy-edges.jsonl")
    queue.append(edges)
    t0, c0 = time.perf_counter(), time.process_time()
    stats = await drain_queue(queue, unit=DatabaseUnitOfWork(batched_graph.db), chroma=chroma, max_attempts=5, batch_size=batch_size)
    batched_s, batched_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert stats.succeeded == memories and stats.failed == 0, stats
    check(batched_graph, memories, sessions)
    batched_graph.db.close()

    single_graph = fresh_graph(workdir / "single.sqlite3")
    t0, c0 = time.perf_counter(), time.process_time()
    for edge in edges:
        ok = await link_nodes_async(
            edge["source"], edge["target"], edge["relationship"], properties=edge["properties"], chroma=chroma, unit=DatabaseUnitOfWork(single_graph.db)
        )
        assert ok, edge
    single_s, single_cpu = time.perf_counter() - t0, time.process_time() - c0
    check(single_graph, memories, sessions)
    single_graph.db.close()
    return {
        "memories": memories,
        "sessions": sessions,
        "batch_size": batch_size,
        "chroma_load_s": round(load_s, 2),
        "batched_s": round(batched_s, 2),
        "batched_lines_per_s": round(memories / batched_s),
        "one_at_a_time_s": round(single_s, 2),
        "one_at_a_time_lines_per_s": round(memories / single_s),
        "speedup": round(single_s / batched_s, 1),
        "batched_cpu_s": round(batched_cpu, 2),
        "one_at_a_time_cpu_s": round(single_cpu, 2),
        "cpu_ratio": round(single_cpu / batched_cpu, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=8_246)
    parser.add_argument("--sessions", type=int, default=794)
    parser.add_argument("--batch-size", type=int, default=500, help="drain lines per batch (REM_WRITE_BATCH_SIZE)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-backfill-"))
    try:
        result = anyio.run(bench, args.memories, args.sessions, workdir, args.batch_size)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for key, value in result.items():
        print(f"{key:28} {value}")
    print("target (batched ≥ 10× one-row-at-a-time):", "met" if result["speedup"] >= 10 else "NOT met")
    return result


if __name__ == "__main__":
    main()
