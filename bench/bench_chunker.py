"""Chunker benchmark: 1,000,000 turns of 50–3,000 characters, and the ratio against the earlier
system's quadratic packing (re-join and re-estimate the chunk text for every added turn).

    /work/venv/bin/python bench/bench_chunker.py [--turns N] [--baseline-turns M] [--limit TOKENS]

The quadratic baseline runs on the first M turns only; the linear chunker is timed on that same
subset for the ratio (the baseline's cost is per chunk, so the ratio does not depend on M), and
both must give identical chunks. Two texts: ASCII only, and ASCII with a few non-ASCII characters
(é ü — →, as real transcripts have), where estimating a re-joined chunk costs a real UTF-8 encode.
Two linear figures: ``chunk_session`` (packing plus building every chunk's text) and
``plan_boundaries`` (the packing decision alone).
"""

from __future__ import annotations

import argparse
import math
import random
import string
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.chunker import chunk_session, estimate_tokens, plan_boundaries  # noqa: E402


ASCII = string.ascii_letters + string.digits + "      .,\n"
MIXED = ASCII + "éü—→"


def make_turns(count: int, *, seed: int = 7, pool_size: int = 50_000, alphabet: str = ASCII) -> list[str]:
    """``count`` turns of random length 50–3,000 drawn from a pool of distinct random texts (so a
    million turns cost megabytes, not gigabytes, before chunking)."""
    rng = random.Random(seed)
    base = "".join(rng.choices(alphabet, k=pool_size + 3_000))
    pool = []
    for _ in range(pool_size):
        length = rng.randint(50, 3_000)
        start = rng.randrange(0, pool_size)
        pool.append(base[start : start + length])
    return [pool[rng.randrange(pool_size)] for _ in range(count)]


def literal_estimate(text: str) -> int:
    """DESIGN §4.1's formula written out, as the earlier system computed it (an O(n) byte count)."""
    return math.ceil(len(text.encode("utf-8")) / 3)


def quadratic_chunks(turns: list[str], limit: int, estimate: Callable[[str], int] = literal_estimate) -> list[tuple[int, ...]]:
    """The earlier system's packing: join the chunk plus the next turn and estimate it, every turn."""
    groups: list[tuple[int, ...]] = []
    current: list[str] = []
    indices: list[int] = []
    for index, text in enumerate(turns):
        if estimate(text) > limit:
            if indices:
                groups.append(tuple(indices))
            groups.append((index,))
            current, indices = [], []
            continue
        candidate = "\n".join([*current, text])
        if not indices or estimate(candidate) <= limit:
            current.append(text)
            indices.append(index)
        else:
            groups.append(tuple(indices))
            current, indices = [text], [index]
    if indices:
        groups.append(tuple(indices))
    return groups


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def compare(turns: list[str], limit: int) -> dict[str, Any]:
    """Linear vs quadratic on the same turns (best of two runs each)."""
    def best(fn: Callable[[], Any]) -> tuple[Any, float]:
        return min((_timed(fn) for _ in range(2)), key=lambda timed: timed[1])

    linear = best(lambda: chunk_session(turns, session_id="bench", safe_processing_limit_tokens=limit))
    spans = best(lambda: plan_boundaries(turns, limit_tokens=limit))
    quadratic = best(lambda: quadratic_chunks(turns, limit))
    identical = [c.turn_indices for c in linear[0].chunks] == quadratic[0] == [
        tuple(range(start, end)) for start, end, _ in spans[0][1]
    ]
    return {
        "turns": len(turns),
        "chunks": len(quadratic[0]),
        "quadratic_s": round(quadratic[1], 3),
        "chunk_session_s": round(linear[1], 4),
        "plan_boundaries_s": round(spans[1], 4),
        "ratio_chunk_session": round(quadratic[1] / linear[1], 1),
        "ratio_plan_boundaries": round(quadratic[1] / spans[1], 1),
        "identical_chunks": identical,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a summary and return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--baseline-turns", type=int, default=20_000)
    parser.add_argument("--limit", type=int, default=100_000)
    args = parser.parse_args(argv)
    turns = make_turns(args.turns)
    total_chars = sum(len(t) for t in turns)
    plan, full_seconds = _timed(lambda: chunk_session(turns, session_id="bench", safe_processing_limit_tokens=args.limit))
    over = [c for c in plan.chunks if c.estimated_tokens > args.limit and not c.oversized_turn]
    del plan
    result: dict[str, Any] = {
        "turns": len(turns),
        "characters": total_chars,
        "limit_tokens": args.limit,
        "chunker_seconds": round(full_seconds, 3),
        "turns_per_second": round(len(turns) / full_seconds),
        "chunks_over_limit": len(over),
    }
    print(f"chunker: {len(turns):,} turns ({total_chars:,} chars) in {full_seconds:.2f}s "
          f"({result['turns_per_second']:,} turns/s), over-limit chunks: {len(over)}")
    for name, subset in (("ascii", turns[: args.baseline_turns]), ("mixed", make_turns(args.baseline_turns, alphabet=MIXED))):
        figures = compare(subset, args.limit)
        result[name] = figures
        print(f"  {name} text, first {figures['turns']:,} turns ({figures['chunks']} chunks): quadratic "
              f"{figures['quadratic_s']:.3f}s; chunk_session {figures['chunk_session_s']:.4f}s -> "
              f"{figures['ratio_chunk_session']}x; plan_boundaries {figures['plan_boundaries_s']:.4f}s -> "
              f"{figures['ratio_plan_boundaries']}x; identical chunks: {figures['identical_chunks']}")
    return result


if __name__ == "__main__":
    main()
