"""Reading one session's turns from Chroma as the collection grows: by ``sessionId`` (a metadata
``where``, which Chroma answers by scanning) against by id (what the cycle now does with the ids
its scan found). One process, one embedded Chroma grown in steps; each step times both reads of
the same sessions, so the machine's load cancels out of the ratio between steps.

    python bench/bench_session_read.py [--steps 5000 40000] [--turns 10] [--sample 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_ingest import load_corpus, synthetic_rows  # noqa: E402
from config import load_settings  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


async def measure(steps: list[int], turns: int, sample: int, workdir: Path) -> list[dict[str, float]]:
    configure_logging(level="warning", fmt="json")
    settings = load_settings(data_dir=workdir / "data")
    chroma = ChromaStore(settings)
    memories, summaries = synthetic_rows(max(steps), max(steps) // turns)
    results, loaded = [], 0
    for rows in steps:
        await load_corpus(chroma, settings, memories[loaded:rows], summaries[loaded // turns : rows // turns])
        loaded = rows
        sessions = [f"bench-s{s:05d}" for s in range(0, rows // turns, max(1, rows // turns // sample))][:sample]
        ids = {sid: [f"{sid}-t{t:04d}" for t in range(turns)] for sid in sessions}
        by_where, by_id = [], []
        for sid in sessions:  # interleaved, so both see the same load
            t0 = time.perf_counter()
            where_rows = await chroma.memories_for_session(sid)
            by_where.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            id_rows = await chroma.memories_for_session(sid, memory_ids=ids[sid])
            by_id.append(time.perf_counter() - t0)
            assert [r.id for r in where_rows] == [r.id for r in id_rows], sid
        results.append({"rows": rows, "where_ms": statistics.median(by_where) * 1000, "id_ms": statistics.median(by_id) * 1000})
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[5000, 40000])
    parser.add_argument("--turns", type=int, default=10, help="turns per session")
    parser.add_argument("--sample", type=int, default=20, help="sessions read per step")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = anyio.run(measure, sorted(args.steps), args.turns, args.sample, Path(tmp))
    first = results[0]
    print("| rows in the collection | by sessionId (median) | by id (median) | by sessionId ÷ first | by id ÷ first |")
    print("| --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['rows']:,} | {r['where_ms']:.2f} ms | {r['id_ms']:.2f} ms | {r['where_ms'] / first['where_ms']:.2f}× | {r['id_ms'] / first['id_ms']:.2f}× |")


if __name__ == "__main__":
    main()
