"""What the ingest change scan's read of the newest rows costs as a Chroma collection grows (1×, 8×).

Each cycle's change scan reads the rows added to the memory collection since the last cycle:
``ChromaStore.ids_from(offset=rows_applied - tail, limit=…)`` (pipelines/ingest.py). Chroma pages by
offset — its SQLite walks every row before the offset — so reading the same few new rows costs more
as the collection grows — and so, measured, does a read of the first rows: Chroma's ``get`` with a
limit is itself as slow as the collection is large. Embedded Chroma, the offline ``hash`` embedding; a collection of N and 8 × N
rows, the read of the last 20 rows (an idle cycle's tail check plus a few new rows) against a read
of the first 20 (what the offset walk adds), best of 21, in one process. A finding for the ingest's
owner (day400 measured it; pipelines/ingest.py and store/chroma.py are not changed here).

    python bench/bench_scan_offset.py [--rows 2500]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import load_settings  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402

TAIL = 20


async def best_of(read, repeat: int = 21) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await read()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


async def measure(rows: int, root: Path) -> dict[str, float]:
    settings = load_settings(data_dir=root)
    chroma = ChromaStore(settings)
    name = settings.memory_collection
    for start in range(0, rows, 1000):
        ids = [f"memory:s{i // 20:05d}-t{i % 20:04d}" for i in range(start, min(rows, start + 1000))]
        await chroma.upsert(name, ids, [f"turn {i}" for i in ids], [{"sessionId": i[7:13], "createdAt": "2026-11-01T00:00:00Z"} for i in ids])
    assert len(await chroma.ids_from(name, offset=rows - TAIL, limit=TAIL)) == TAIL
    return {
        "rows": rows,
        "tail": await best_of(lambda: chroma.ids_from(name, offset=rows - TAIL, limit=TAIL)),
        "head": await best_of(lambda: chroma.ids_from(name, offset=0, limit=TAIL)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2500, help="rows at 1× (8× is eight times as many)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = [asyncio.run(measure(scale * args.rows, Path(tmp) / f"x{scale}")) for scale in (1, 8)]
    first = results[0]
    print(f"| rows | the last {TAIL} (offset) | ÷ 1× | the first {TAIL} | ÷ 1× |")
    print("| --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['rows']:,} | {r['tail'] * 1000:.2f} ms | {r['tail'] / first['tail']:.2f}× | {r['head'] * 1000:.2f} ms | {r['head'] / first['head']:.2f}× |")


if __name__ == "__main__":
    main()
