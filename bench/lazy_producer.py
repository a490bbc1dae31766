"""A lazy-edge producer process for the load benchmark: ``python -m bench.lazy_producer TARGET FIRST COUNT
--sessions S --turns-per-session T --spread SECONDS``.

Queues ``COUNT`` edges numbered ``FIRST …`` (``memory:a CITES memory:b``, both rows of the synthetic
corpus of :mod:`bench.bench_load`, distinct for distinct numbers) with the producer library
(``pipelines.enqueue.enqueue_lazy_edges``): ``TARGET`` is the JSONL queue's path or a database URL
(``sqlite:///…``, ``postgresql://…``) for the queue table. Small batches spread evenly over
``SECONDS`` race the cycle's drains. Imports nothing heavy: no Chroma, no worker.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.enqueue import enqueue_lazy_edges  # noqa: E402

BATCH = 20


def memory_id(index: int, *, turns_per_session: int) -> str:
    """The memory id of the corpus' ``index``-th turn."""
    session, turn = divmod(index, turns_per_session)
    return f"load-s{session:05d}-t{turn:04d}"


def edge(number: int, *, total_turns: int, turns_per_session: int) -> dict[str, object]:
    """Edge ``number``: its source is turn ``number`` (so distinct numbers give distinct edges)."""
    source = memory_id(number % total_turns, turns_per_session=turns_per_session)
    target = memory_id((number * 7919 + 1) % total_turns, turns_per_session=turns_per_session)
    return {"source": f"memory:{source}", "target": f"memory:{target}", "relationship": "CITES",
            "properties": {"n": number}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target", help="the JSONL queue's path, or sqlite:///… / postgresql://… for the queue table")
    parser.add_argument("first", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--turns-per-session", type=int, required=True)
    parser.add_argument("--spread", type=float, default=10.0)
    args = parser.parse_args(argv)
    total = args.sessions * args.turns_per_session
    batches = max(1, -(-args.count // BATCH))
    pause = args.spread / batches
    started = time.monotonic()
    for b in range(batches):
        numbers = range(args.first + b * BATCH, args.first + min(args.count, (b + 1) * BATCH))
        enqueue_lazy_edges(args.target, [edge(n, total_turns=total, turns_per_session=args.turns_per_session) for n in numbers], fsync=False)
        # Keep to the schedule (not a fixed sleep): a producer slowed by a busy machine catches up.
        delay = started + (b + 1) * pause - time.monotonic()
        if delay > 0:
            time.sleep(delay)


if __name__ == "__main__":
    main()
