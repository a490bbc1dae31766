"""Incremental extraction benchmark: a 100-chunk session is extracted once; then one turn is
appended and the session extracted again. Counts the chunks sent to the model the second time
(target ≤ 2), both when the last chunk has room for the new turn and when it is full.

    /work/venv/bin/python bench/bench_incremental.py
"""

from __future__ import annotations

import sys
import tempfile
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
from tests.llm_server import LLMServer  # noqa: E402

BUDGET_TOKENS = 1_000  # 3,000 bytes: five 550-byte turns per chunk (six do not fit)


def turn(i: int, size: int = 550) -> SourceTurn:
    return SourceTurn(f"m{i:05d}", f"Turn {i:05d} on the SessionChunker and CycleScheduler. ".ljust(size, "y"))


async def scenario(name: str, turns: list[SourceTurn], extra: SourceTurn) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, LLMServer() as server:
        settings = load_settings(data_dir=Path(tmp), extractor="openai", llm_base_url=server.url, llm_concurrency=8)
        db = Database(Path(tmp) / "graph.sqlite3")
        try:
            store = ChunkResultStore(db)
            async with OpenAIExtractor(settings) as extractor:

                async def extract(session_turns: list[SourceTurn]) -> tuple[int, int]:
                    units = plan_units("bench", session_turns, budget_tokens=BUDGET_TOKENS)
                    before = server.chat_count
                    outcomes = await map_units(
                        units, extractor=extractor, store=store, semantic_types=settings.semantic_types,
                        limiter=anyio.CapacityLimiter(8), now=datetime.now(UTC), run_id="bench",
                        retry_base_seconds=settings.chunk_retry_base_seconds,
                        retry_max_seconds=settings.chunk_retry_max_seconds,
                    )
                    assert all(o.extraction is not None for o in outcomes)
                    return len(units), server.chat_count - before

                first_chunks, first_calls = await extract(turns)
                second_chunks, second_calls = await extract([*turns, extra])
        finally:
            db.close()
    return {
        "scenario": name,
        "chunks_before": first_chunks,
        "calls_first_run": first_calls,
        "chunks_after": second_chunks,
        "chunks_reextracted": second_calls,
        "within_target": second_calls <= 2,
    }


async def run() -> list[dict[str, Any]]:
    # 498 turns: 100 chunks, the last holds three turns and has room; 500 turns: 100 full chunks.
    room = [turn(i) for i in range(498)]
    full = [turn(i) for i in range(500)]
    return [
        await scenario("last chunk has room", room, turn(498, size=200)),
        await scenario("last chunk full", full, turn(500)),
    ]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run both scenarios, print a summary and return the figures."""
    results = anyio.run(run)
    for r in results:
        print(
            f"incremental ({r['scenario']}): {r['chunks_before']} chunks extracted with {r['calls_first_run']} calls; "
            f"after appending one turn: {r['chunks_after']} chunks, {r['chunks_reextracted']} re-extracted "
            f"(target <= 2: {r['within_target']})"
        )
    return results


if __name__ == "__main__":
    main()
