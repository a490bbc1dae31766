"""Chunker benchmark: 1,000,000 turns of 50–3,000 characters, and the ratio against the earlier
system's quadratic packing (re-join and re-estimate the chunk text for every added turn).

    /work/venv/bin/python bench/bench_chunker.py [--turns N] [--baseline-turns M] [--limit TOKENS]

The quadratic baseline runs on the first M turns only; the linear chunker is timed on that same
subset for the ratio (the baseline's cost is per chunk, so the ratio does not depend on M), and
both must give identical chunks. Two texts: ASCII only, and ASCII with a few non-ASCII characters
(é ü — →, as real transcripts have), where estimating a re-joined chunk costs a real UTF-8 encode.
Three linear figures: ``chunk_session`` (the plan; a chunk's text is joined when first read, and
the extractor never reads it), ``chunk_session`` plus reading every chunk's text (what a consumer
that wants all the texts pays), and ``plan_boundaries`` (the packing decision alone). Every figure
is per call, measured as ``python -m timeit`` does (best of five repeats); the linear chunker's very first
call on the subset (cold caches) is reported too.
"""

from __future__ import annotations

import argparse
import math
import random
import string
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.chunker import chunk_session, plan_boundaries  # noqa: E402


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


def per_call(fn: Callable[[], Any]) -> float:
    """Seconds per call, measured the way ``python -m timeit`` does: enough calls per repeat to run
    ≥ 0.2 s, best of five repeats. Every contestant is measured the same way."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=5, number=number)) / number


def compare(turns: list[str], limit: int) -> dict[str, Any]:
    """Linear vs quadratic on the same turns. ``first_call_s`` is the linear chunker's very first
    call on these turns (cold caches), reported beside the steady-state figures."""
    plan, first_call = _timed(lambda: chunk_session(turns, session_id="bench", safe_processing_limit_tokens=limit))
    _, spans = plan_boundaries(turns, limit_tokens=limit)
    groups = quadratic_chunks(turns, limit)
    identical = (
        [c.turn_indices for c in plan.chunks] == groups == [tuple(range(start, end)) for start, end, _ in spans or ()]
        and all(c.text == "\n".join(turns[i] for i in c.turn_indices) for c in plan.chunks)
    )
    chunks = len(groups)
    del plan, spans, groups  # the timings below start from the same memory as the first call
    linear = per_call(lambda: chunk_session(turns, session_id="bench", safe_processing_limit_tokens=limit))
    with_texts = per_call(
        lambda: [c.text for c in chunk_session(turns, session_id="bench", safe_processing_limit_tokens=limit).chunks]
    )
    packing = per_call(lambda: plan_boundaries(turns, limit_tokens=limit))
    quadratic = per_call(lambda: quadratic_chunks(turns, limit))
    return {
        "turns": len(turns),
        "chunks": chunks,
        "quadratic_s": round(quadratic, 3),
        "chunk_session_s": round(linear, 4),
        "chunk_session_first_call_s": round(first_call, 4),
        "chunk_session_with_texts_s": round(with_texts, 4),
        "plan_boundaries_s": round(packing, 4),
        "ratio_chunk_session": round(quadratic / linear, 1),
        "ratio_chunk_session_first_call": round(quadratic / first_call, 1),
        "ratio_chunk_session_with_texts": round(quadratic / with_texts, 1),
        "ratio_plan_boundaries": round(quadratic / packing, 1),
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
    result: dict[str, Any] = {
        "turns": len(turns),
        "characters": total_chars,
        "limit_tokens": args.limit,
        "chunker_seconds": round(full_seconds, 3),
        "turns_per_second": round(len(turns) / full_seconds),
        "chunks_over_limit": len(over),
    }
    texts_seconds = _timed(lambda: sum(len(c.text) for c in plan.chunks))[1]
    del plan
    result["read_every_text_seconds"] = round(texts_seconds, 3)
    print(f"chunker: {len(turns):,} turns ({total_chars:,} chars) in {full_seconds:.2f}s "
          f"({result['turns_per_second']:,} turns/s), over-limit chunks: {len(over)}; "
          f"reading every chunk's text afterwards: {texts_seconds:.2f}s")
    for name, subset in (("ascii", turns[: args.baseline_turns]), ("mixed", make_turns(args.baseline_turns, alphabet=MIXED))):
        figures = compare(subset, args.limit)
        result[name] = figures
        print(f"  {name} text, first {figures['turns']:,} turns ({figures['chunks']} chunks), "
              f"quadratic {figures['quadratic_s']:.3f}s; identical chunks: {figures['identical_chunks']}")
        for label, key in (
            ("chunk_session", "chunk_session"),
            ("chunk_session, first call", "chunk_session_first_call"),
            ("chunk_session + every text read", "chunk_session_with_texts"),
            ("plan_boundaries", "plan_boundaries"),
        ):
            print(f"    {label:32s} {figures[key + '_s']:.4f}s -> {figures['ratio_' + key]}x")
    return result


if __name__ == "__main__":
    main()
