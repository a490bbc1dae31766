"""Map concurrency benchmark: 200 chunks through the openai extractor against the loopback
chat-completions server answering after 200 ms, at concurrency 8. Ideal wall time: 200 / 8 × 0.2 s
= 5 s; the target is ≤ 1.15 × that.

    /work/venv/bin/python bench/bench_map.py [--chunks N] [--latency S] [--concurrency C]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import load_settings  # noqa: E402
from pipelines.extract.llm import OpenAIExtractor  # noqa: E402
from pipelines.extract.map import map_units  # noqa: E402
from pipelines.extract.units import SourceTurn, plan_units  # noqa: E402
from store.chunks import ChunkResultStore  # noqa: E402
from store.db import Database  # noqa: E402
from tests.llm_server import LLMServer, slow  # noqa: E402


def one_chunk_per_turn(count: int) -> tuple[list[SourceTurn], int]:
    """``count`` turns of 300 bytes and a 100-token budget: every turn is its own chunk."""
    turns = [SourceTurn(f"m{i:05d}", f"Turn {i:05d} talks about the RetryPolicy{i} class. ".ljust(300, "x")) for i in range(count)]
    return turns, 100


async def run(chunks: int, latency: float, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, LLMServer(default=slow(latency)) as server:
        settings = load_settings(
            data_dir=Path(tmp), extractor="openai", llm_base_url=server.url, llm_concurrency=concurrency,
            llm_max_retries=0,
        )
        turns, budget = one_chunk_per_turn(chunks)
        units = plan_units("bench", turns, budget_tokens=budget)
        assert len(units) == chunks
        db = Database(Path(tmp) / "graph.sqlite3")
        try:
            async with OpenAIExtractor(settings) as extractor:
                started = time.perf_counter()
                outcomes = await map_units(
                    units, extractor=extractor, store=ChunkResultStore(db), semantic_types=settings.semantic_types,
                    limiter=anyio.CapacityLimiter(concurrency), now=datetime.now(UTC), run_id="bench",
                    retry_base_seconds=settings.chunk_retry_base_seconds,
                    retry_max_seconds=settings.chunk_retry_max_seconds,
                )
                wall = time.perf_counter() - started
        finally:
            db.close()
        ideal = chunks / concurrency * latency
        return {
            "chunks": chunks,
            "latency_s": latency,
            "concurrency": concurrency,
            "ok": sum(1 for o in outcomes if o.status == "ok"),
            "requests": server.chat_count,
            "wall_s": round(wall, 3),
            "ideal_s": round(ideal, 3),
            "ratio_to_ideal": round(wall / ideal, 3),
            "within_target": wall <= 1.15 * ideal,
        }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a summary and return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    result = anyio.run(run, args.chunks, args.latency, args.concurrency)
    print(
        f"map: {result['chunks']} chunks, {result['latency_s'] * 1000:.0f} ms latency, concurrency "
        f"{result['concurrency']}: {result['wall_s']:.2f}s wall vs {result['ideal_s']:.2f}s ideal "
        f"({result['ratio_to_ideal']}x; target <= 1.15x: {result['within_target']}), {result['ok']} ok, "
        f"{result['requests']} requests"
    )
    return result


if __name__ == "__main__":
    main()
