"""What looking for a chunk's answer in other sessions costs the map (SQLite, ``heuristic``).

The map now asks ``chunk_results`` by text hash for the units its content-hash look-up found no
answer for (pipelines/extract/map.py). Measured, in one process, best of 3, over a database holding
``--rows`` answers of other sessions, a session of ``--chunks`` chunks through the real map with the
``heuristic`` extractor:

- *steady*: the session mapped again, every unit reused by content hash (no text look-up: the
  baseline);
- *grown*: the session with one turn more (one text look-up, one extraction);
- *fresh*: another session of new text (every unit looked up by text, missed, extracted);
- *fork*: a copy of the session under a new id (every unit found by text, moved, copied).

And the two look-ups alone for ``--chunks`` hashes: by content hash (``get_many``, as before) and
by text hash (``answers_by_text``, new).

    python bench/bench_fork_reuse.py [--rows 100000] [--chunks 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import load_settings  # noqa: E402
from pipelines.extract.heuristic import HeuristicExtractor  # noqa: E402
from pipelines.extract.map import map_units  # noqa: E402
from pipelines.extract.model import WorkUnit  # noqa: E402
from pipelines.extract.units import SourceTurn, plan_units  # noqa: E402
from store.chunks import AnswerCopy, ChunkResultStore  # noqa: E402
from store.db import Database  # noqa: E402

BUDGET = 150  # tokens: one 300-byte turn a chunk


def turns(sid: str, count: int, word: str = "Retry") -> list[SourceTurn]:
    return [SourceTurn(f"{sid}-m{i:05d}", f"Turn {i:05d} talks about the {word}Policy{i} class. ".ljust(300, "x"), "user")
            for i in range(count)]


def filled(db: Database, rows: int, fingerprint: str) -> None:
    """``rows`` answers of other sessions (small payloads), as copies: one transaction a batch."""
    store = ChunkResultStore(db)
    for start in range(0, rows, 5000):
        store.record_copies([
            AnswerCopy(f"other{n // 10}", f"other{n // 10}:chunk:{n % 10}", f"h{n:09d}", f"t{n:09d}", ("m",), fingerprint,
                       {"unit_id": "x", "nodes": [], "edges": []}, None)
            for n in range(start, min(rows, start + 5000))
        ])


async def best_of_3(run: Callable[[int], Awaitable[Any]]) -> float:
    times = []
    for attempt in range(3):
        started = time.perf_counter()
        await run(attempt)
        times.append(time.perf_counter() - started)
    return min(times)


async def measure(rows: int, chunks: int) -> dict[str, float]:
    settings = load_settings(data_dir=Path(tempfile.mkdtemp()))
    extractor = HeuristicExtractor()
    db = Database(settings.data_dir / "graph.sqlite3")
    store = ChunkResultStore(db)
    filled(db, rows, extractor.fingerprint)

    async def mapped(units: list[WorkUnit]) -> list[Any]:
        return await map_units(units, extractor=extractor, store=store, semantic_types=settings.semantic_types,
                               limiter=anyio.CapacityLimiter(4), now=datetime.now(UTC), run_id="bench",
                               retry_base_seconds=60, retry_max_seconds=3600)

    session = plan_units("s", turns("s", chunks), budget_tokens=BUDGET)
    first = await mapped(session)
    assert len(session) == chunks and {o.status for o in first} == {"ok"}, {(o.status, o.error) for o in first}

    async def steady(_: int) -> None:
        assert {o.status for o in await mapped(session)} == {"reused"}

    async def grown(attempt: int) -> None:
        extra = SourceTurn(f"s-extra{attempt}", f"Turn {attempt} more about the Grown{attempt}Policy class.", "user")
        outcomes = await mapped(plan_units("s", [*turns("s", chunks), extra], budget_tokens=BUDGET))
        assert [o.status for o in outcomes].count("ok") == 1

    async def fresh(attempt: int) -> None:
        sid = f"fresh{attempt}"
        assert {o.status for o in await mapped(plan_units(sid, turns(sid, chunks, f"New{attempt}"), budget_tokens=BUDGET))} == {"ok"}

    async def fork(attempt: int) -> None:
        sid = f"fork{attempt}"
        assert {o.status for o in await mapped(plan_units(sid, turns(sid, chunks), budget_tokens=BUDGET))} == {"reused"}

    content, text = [u.content_hash for u in session], [u.text_hash for u in session]

    async def by_content(_: int) -> None:
        store.get_many(content, extractor.fingerprint)

    async def by_text(_: int) -> None:
        store.answers_by_text(text, extractor.fingerprint)

    try:
        return {name: await best_of_3(run) for name, run in
                (("steady", steady), ("grown", grown), ("fresh", fresh), ("fork", fork),
                 ("get_many", by_content), ("answers_by_text", by_text))}
    finally:
        db.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=200)
    args = parser.parse_args(argv)
    figures = anyio.run(measure, args.rows, args.chunks)
    base = figures["steady"]
    print(f"{args.rows:,} answers of other sessions, a session of {args.chunks} chunks (heuristic), best of 3:")
    print("| map of | wall | ÷ steady |")
    print("| --- | --- | --- |")
    for name in ("steady", "grown", "fresh", "fork"):
        print(f"| {name} | {figures[name] * 1000:.1f} ms | {figures[name] / base:.2f}× |")
    print(f"look-up of {args.chunks} hashes: by content hash {figures['get_many'] * 1000:.1f} ms, by text hash "
          f"{figures['answers_by_text'] * 1000:.1f} ms ({figures['answers_by_text'] / figures['get_many']:.2f}×)")


if __name__ == "__main__":
    main()
