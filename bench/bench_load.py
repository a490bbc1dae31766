"""Load benchmark (issue 6): a synthetic corpus in embedded Chroma through full REM cycles with the
heuristic extractor, while separate producer processes append lazy edges concurrently.

Reports the first cycle's phases and rates, how many of the producers' edges reached the graph (all
of them, or the run fails), and the worker's memory: peak RSS, and the resident size after the
first and the last cycle (stable = the later cycles add next to nothing).

    python bench/bench_load.py                                            # 1,000 sessions, 50,000 turns, 10,000 edges
    python bench/bench_load.py --sessions 50 --turns 2000 --edges 1000    # the size tests/test_load.py runs
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_ingest import load_corpus  # noqa: E402
from bench.lazy_producer import memory_id  # noqa: E402
from config import Settings, load_settings  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from store.lazy_queue import LazyEdgeQueue  # noqa: E402
from worker.cycle import open_stores, run_cycle  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

CLASSES = [a + b for a in ("Graph", "Queue", "Drain", "Chunk", "Session", "Memory", "Edge", "Node", "Cycle", "Token")
           for b in ("Store", "Worker", "Planner", "Index", "Reader", "Writer", "Policy", "Cache")]
PEOPLE = ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Barbara Liskov", "Edsger Dijkstra"]
FILLER = "the worker then reads each row and writes the result back before the next cycle starts".split()


def corpus(sessions: int, turns: int, seed: int = 6) -> tuple[list[tuple[str, str, dict[str, Any]]], list[tuple[str, str, dict[str, Any]]]]:
    """(memory rows, summary rows) as (id, document, metadata): turns that name classes, files,
    issues, people, and now and then an explicit ``memory:`` reference (to another session's turn,
    or to a legacy row that does not exist — the extraction's lazy edges)."""
    rng = random.Random(seed)
    per = turns // sessions
    memories, summaries = [], []
    for s in range(sessions):
        sid = f"load-s{s:05d}"
        created = f"2026-10-{1 + s % 28:02d}T{s % 24:02d}:{s % 60:02d}:00Z"
        summaries.append((f"summary_{sid}", f"Session {s} about {rng.choice(CLASSES)}",
                          {"sessionId": sid, "title": f"Load session {s}", "createdAt": created, "userId": "u-load"}))
        for t in range(per):
            words = rng.sample(FILLER, 8)
            words.insert(2, rng.choice(CLASSES))
            words.insert(5, f"src/{rng.choice(('store', 'pipelines', 'worker'))}/{rng.choice(CLASSES).lower()}.py")
            if t % 3 == 0:
                words.append(f"(see #{rng.randrange(1, 400)})")
            if t % 5 == 0:
                words.insert(0, f"{rng.choice(PEOPLE)} says")
            if t % 25 == 7:
                other = rng.randrange(sessions * per)
                words.append(f"as in memory:{memory_id(other, turns_per_session=per)}" if t % 50 == 7 else f"as in memory:legacy-{s}-{t}")
            memories.append((f"{sid}-t{t:04d}", " ".join(words) + ".",
                             {"sessionId": sid, "turnIndex": t, "role": "user" if t % 2 == 0 else "assistant",
                              "createdAt": created, "userId": "u-load"}))
    return memories, summaries


def rss_mb() -> float:
    """Resident set size now, in MB."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def start_producers(settings: Settings, *, first: int, edges: int, producers: int, sessions: int, per: int,
                    spread: float) -> list[subprocess.Popen[bytes]]:
    """``producers`` processes appending edges ``first … first + edges - 1`` between them."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    share = -(-edges // producers)
    procs = []
    for k in range(producers):
        start, count = first + k * share, max(0, min(share, edges - k * share))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bench.lazy_producer", str(settings.queue_path), str(start), str(count),
             "--sessions", str(sessions), "--turns-per-session", str(per), "--spread", str(spread)],
            env=env, cwd=ROOT,
        ))
    return procs


async def bench(*, sessions: int, turns: int, edges: int, producers: int, spread: float, workdir: Path) -> dict[str, Any]:
    configure_logging(level="warning", fmt="json")
    per = turns // sessions
    if edges > sessions * per:
        raise ValueError("--edges must not exceed --turns (each edge starts at its own turn)")
    settings = load_settings(data_dir=workdir / "data", batch_limit=sessions)
    memories, summaries = corpus(sessions, turns)
    chroma = ChromaStore(settings)
    load_s = await load_corpus(chroma, settings, memories, summaries)
    del memories, summaries

    rss_before = rss_mb()
    stores = await open_stores(settings)
    # Two waves of producers: the first appends while the big first cycle ingests and extracts,
    # the second while the following cycles (mostly drains) run back to back, racing the renames.
    half = edges // 2
    shared = {"settings": settings, "producers": producers, "sessions": sessions, "per": per, "spread": spread}
    procs = start_producers(first=0, edges=half, **shared)
    cycles: list[Any] = []
    rss_after: list[float] = []
    drained_while_producing = 0
    try:
        while True:
            producing = any(p.poll() is None for p in procs)
            result = await run_cycle(settings, stores=stores, reason="bench")
            if result.outcome != "completed":
                raise RuntimeError(f"cycle {len(cycles) + 1} {result.outcome}: {result.message}")
            cycles.append(result)
            rss_after.append(rss_mb())
            drained_while_producing += producing and result.phases["drain"].get("succeeded", 0) > 0
            if len(cycles) == 1:
                procs += start_producers(first=half, edges=edges - half, **shared)
            elif not producing:
                break  # this cycle started after the last append: it drained everything
        codes = [p.wait(60) for p in procs]
        if any(codes):
            raise RuntimeError(f"a producer failed: exit codes {codes}")
        cites = stores.db.query("SELECT COUNT(*) FROM edges WHERE relationship = 'CITES'")[0][0]
        counts = stores.graph.counts()
        digests = stores.runstate.digest_counts()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        stores.close()
    queue = LazyEdgeQueue(settings.queue_path)
    first = cycles[0]
    extract, drain = first.phases["extract"], first.phases["drain"]
    first_s = first.wall_ms / 1000
    return {
        "sessions": sessions,
        "turns": sessions * per,
        "producers": producers,
        "edges_produced": edges,
        "edges_linked": cites,
        "edges_lost": edges - cites,
        "queue_left": _count(queue.path, b'"CITES"'),
        "dead_letters": queue.dead_letter_count(),  # the extraction's refs to rows that do not exist
        "producer_dead_letters": _count(queue.dead_letter_path, b"CITES"),
        "chroma_load_s": round(load_s, 1),
        "cycles": len(cycles),
        "drains_while_producing": drained_while_producing,
        "first_cycle_s": round(first_s, 1),
        "phase_s": {name: round(p["duration_ms"] / 1000, 2) for name, p in first.phases.items()},
        "turns_per_s": round(sessions * per / first_s),
        "sessions_digested": digests["digested"],
        "chunks": extract["chunks_total"],
        "nodes": counts.get("nodes"),
        "edges": counts.get("edges"),
        "extraction_lazy_edges": extract["lazy_edges_queued"],
        "first_drain_lines": drain.get("total_lines", 0),
        "rss_before_mb": round(rss_before),
        "rss_after_first_cycle_mb": round(rss_after[0]),
        "rss_after_last_cycle_mb": round(rss_after[-1]),
        "peak_rss_mb": round(peak_rss_mb()),
    }


def _count(path: Path, needle: bytes) -> int:
    """Lines of ``path`` that contain ``needle`` (the producers' lines: relationship CITES)."""
    if not path.exists():
        return 0
    return sum(1 for line in LazyEdgeQueue.read_lines(path) if needle in line)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv``, run the benchmark in a scratch directory, return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--turns", type=int, default=50_000)
    parser.add_argument("--edges", type=int, default=10_000)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--spread", type=float, default=20.0, help="seconds over which each wave of producers appends")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-load-"))
    try:
        return anyio.run(lambda: bench(sessions=args.sessions, turns=args.turns, edges=args.edges,
                                       producers=args.producers, spread=args.spread, workdir=workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    result = run(argv)
    for key, value in result.items():
        print(f"{key:28} {value}")
    ok = result["edges_lost"] == 0 and result["queue_left"] == 0
    print("no loss:", "yes" if ok else "NO")
    return result


if __name__ == "__main__":
    main()
