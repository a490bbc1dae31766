"""Chunker benchmark: 1,000,000 turns of 50–3,000 characters, and the ratio against the earlier
system's quadratic packing (re-join and re-estimate the chunk text for every added turn).

    /work/venv/bin/python bench/bench_chunker.py [--turns N] [--baseline-turns M] [--limit TOKENS]

The quadratic baseline runs on the first M turns only (it would take hours on a million); the
linear chunker is timed on that same subset for the ratio, and both must give identical chunks.
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

from pipelines.chunker import chunk_session, estimate_tokens  # noqa: E402


def make_turns(count: int, *, seed: int = 7, pool_size: int = 50_000) -> list[str]:
    """``count`` turns of random length 50–3,000 drawn from a pool of distinct random texts (so a
    million turns cost megabytes, not gigabytes, before chunking)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "      .,\n"
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
    subset = turns[: args.baseline_turns]
    linear, linear_seconds = _timed(lambda: chunk_session(subset, session_id="bench", safe_processing_limit_tokens=args.limit))
    quadratic, quadratic_seconds = _timed(lambda: quadratic_chunks(subset, args.limit))
    rejoin_only, rejoin_seconds = _timed(lambda: quadratic_chunks(subset, args.limit, estimate_tokens))
    identical = [c.turn_indices for c in linear.chunks] == quadratic == rejoin_only
    result = {
        "turns": len(turns),
        "characters": total_chars,
        "limit_tokens": args.limit,
        "chunks": len(plan.chunks),
        "chunker_seconds": round(full_seconds, 3),
        "turns_per_second": round(len(turns) / full_seconds),
        "chunks_over_limit": len(over),
        "baseline_turns": len(subset),
        "baseline_chunks": len(quadratic),
        "linear_subset_seconds": round(linear_seconds, 4),
        "quadratic_subset_seconds": round(quadratic_seconds, 3),
        "ratio": round(quadratic_seconds / linear_seconds, 1),
        "rejoin_only_subset_seconds": round(rejoin_seconds, 3),
        "rejoin_only_ratio": round(rejoin_seconds / linear_seconds, 1),
        "identical_chunks": identical,
    }
    print(f"chunker: {result['turns']:,} turns ({total_chars:,} chars) -> {result['chunks']:,} chunks "
          f"in {full_seconds:.2f}s ({result['turns_per_second']:,} turns/s), over-limit chunks: {len(over)}")
    print(f"baseline on the first {len(subset):,} turns ({len(quadratic)} chunks): quadratic "
          f"{quadratic_seconds:.2f}s vs linear {linear_seconds:.4f}s -> {result['ratio']}x, identical chunks: {identical}")
    print(f"  re-join only (O(1) ASCII estimate, the join alone is quadratic): {rejoin_seconds:.2f}s -> "
          f"{result['rejoin_only_ratio']}x")
    return result


if __name__ == "__main__":
    main()
