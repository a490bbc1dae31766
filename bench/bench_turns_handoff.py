"""suitetime5: a big session's turns read once a cycle, not twice (store.chroma.TurnsHandOff).

A session of ``--turns`` turns (and ``--others`` small sessions beside it) is written to an
embedded Chroma. A cycle's two reads of it are timed in the same process, in turn (each first every
other round), ``--rounds`` times, medians:

- before: the ingest phase's read (``ChromaStore.memories_for_sessions`` by id) and the extract
  phase's (``memories_for_session`` by id), both from Chroma;
- after: the ingest phase's read through a ``TurnsHandOff`` (the collection's state taken first)
  and the extract phase's through it (the state taken again and compared; the rows handed over).

    python bench/bench_turns_handoff.py --turns 50000 --others 100 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import load_settings  # noqa: E402
from store.chroma import ChromaStore, TurnsHandOff  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


async def run(turns: int, others: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(data_dir=Path(tmp))
        chroma = await ChromaStore.connect(settings)
        name = settings.memory_collection
        ids = [f"big-t{i:06d}" for i in range(turns)]
        small = [f"s{s}-t{i}" for s in range(others) for i in range(3)]
        t0 = time.perf_counter()
        await chroma.upsert(name, [*ids, *small], [f"turn {i}: FooWidget calls bar_{i % 7}()" for i in range(turns + len(small))],
                            [*({"sessionId": "big", "turnIndex": i} for i in range(turns)),
                             *({"sessionId": m.split("-")[0], "turnIndex": int(m.rsplit("t", 1)[1])} for m in small)])
        written = time.perf_counter() - t0
        wanted = {"big": ids}

        async def before() -> int:
            first = await chroma.memories_for_sessions(["big"], memory_ids=wanted)
            second = await chroma.memories_for_session("big", memory_ids=ids)
            return len(first["big"]) + len(second)

        async def after() -> int:
            handoff = TurnsHandOff(chroma, name)
            first = await handoff.read(["big"], wanted)
            second = await handoff.memories_for_session("big", memory_ids=ids)
            return len(first["big"]) + (0 if second is first["big"] else len(second))

        times: dict[str, list[float]] = {"before": [], "after": []}
        read: dict[str, int] = {}
        for done in range(rounds):
            pair = [("before", before), ("after", after)]
            for label, fn in pair if done % 2 == 0 else pair[::-1]:
                t0 = time.perf_counter()
                read[label] = await fn()
                times[label].append(time.perf_counter() - t0)
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    return {"turns": turns, "collection_rows": turns + len(small), "write_s": round(written, 1),
            "rows_read_from_chroma": read, "before_s": round(b, 3), "after_s": round(a, 3), "ratio": round(a / b, 3)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50_000)
    parser.add_argument("--others", type=int, default=100, help="small sessions of 3 turns beside the big one")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    result = asyncio.run(run(args.turns, args.others, args.rounds))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
