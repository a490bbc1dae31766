"""A chunk whose text is unchanged but whose place in its session moved (a turn before it forgotten)
is not paid again, and its reused extraction names the chunk it is now (upgradecost audit: the
points named the chunk it had been, `s:chunk:7` in a session of seven chunks, 0-6). Real cycles,
embedded Chroma, SQLite, the loopback chat-completions server counting requests."""

from __future__ import annotations

from pathlib import Path

from config import Settings
from store.backend import open_database
from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings, load, session
from worker.cycle import open_stores, run_cycle
from worker.knowledge import forget

# One turn a chunk under a 30-token chunk limit: forgetting turn 2 moves every later chunk up one.
TURNS = [f"turn {i:02d} mentions the Part{chr(65 + i)}Item component and a bit of filler" for i in range(8)]


def point_chunks(settings: Settings) -> set[str]:
    db = open_database(settings, readonly=True)
    try:
        return {r[0] for r in db.query("SELECT chunk_id FROM node_points WHERE anchor = 'session:s'")}
    finally:
        db.close()


async def test_a_chunk_moved_by_a_forgotten_turn_is_reused_under_its_new_place(tmp_path: Path) -> None:
    with LLMServer() as llm:
        settings = llm_settings(tmp_path / "data", llm, chunk_limit_tokens=30)
        stores = await open_stores(settings)
        try:
            await load(settings, stores, tmp_path, [session("s", TURNS)])
            first = (await run_cycle(settings, stores=stores)).phases["extract"]
        finally:
            stores.close()
        assert first["chunks_total"] == len(TURNS) == llm.chat_count
        forget(settings, memory="memory:s-t2")
        llm.reset()
        again = (await run_cycle(settings)).phases["extract"]
        assert (again["sessions_digested"], again["chunks_reused"], llm.chat_count) == (1, len(TURNS) - 1, 0)
        # Before: s:chunk:3 … s:chunk:7, the places the chunks had before the forget.
        assert point_chunks(settings) == {f"s:chunk:{i}" for i in range(len(TURNS) - 1)}
