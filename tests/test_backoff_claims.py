"""A session whose failed chunks all back off is not claimed, so not read from Chroma, until its
retry time comes (real cycles, embedded Chroma, SQLite and PostgreSQL, the loopback
chat-completions server of tests/llm_server.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.importer import import_sessions
from store.chroma import MemoryRow
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, server_error
from worker.cycle import Stores, open_stores, run_cycle
from worker.report import reset_failures

pytestmark = pytest.mark.both_backends


def session(sid: str, minute: int) -> dict[str, Any]:
    return {
        "sessionId": sid, "title": sid, "createdAt": f"2026-11-01T10:{minute:02d}:00Z", "noSummary": True,
        "turns": [{"id": f"{sid}-t0", "role": "user", "text": f"In {sid} the LazyEdgeQueue feeds the GraphStore."}],
    }


def count_session_reads(stores: Stores) -> list[str]:
    """The sessions whose turns the cycle reads from the (real) Chroma store, in order."""
    reads: list[str] = []
    read = stores.chroma.memories_for_session

    async def counted(session_id: str, **options: Any) -> Sequence[MemoryRow]:
        reads.append(session_id)
        return await read(session_id, **options)

    stores.chroma.memories_for_session = counted  # type: ignore[method-assign]
    return reads


async def test_a_session_backing_off_is_not_claimed_nor_read_until_its_retry_time(
    settings: Settings, tmp_path: Path, backend: str
) -> None:
    """Found by the audit: a session whose chunks back off was claimed by every cycle, its turns
    read from Chroma and its chunks planned, only to find them all backing off (no call). It is
    left unclaimed while every failed chunk of it (for this extractor) is backing off; it is
    extracted once the backoff ends, and `rem-cycle retry` makes it eligible at once."""
    with LLMServer() as server:
        server.script(server_error(500), server_error(500), match="In bad ")
        mine = load_settings(data_dir=settings.data_dir, extractor="openai", llm_base_url=server.url, llm_max_retries=0,
                             llm_concurrency=1, chunk_retry_base_seconds=3600)
        stores = await open_stores(mine)
        try:
            path = write_sessions(tmp_path / "in.jsonl", [session("bad", 0), session("good", 1)])
            await import_sessions(path, chroma=stores.chroma, memory_collection=mine.memory_collection,
                                  summary_collection=mine.session_collection)
            reads = count_session_reads(stores)
            first = (await run_cycle(mine, stores=stores)).phases["extract"]
            assert (first["sessions_failed"], first["sessions_digested"]) == (1, 1), first
            assert reads == ["bad", "good"]
            calls = server.chat_count

            for _ in range(2):  # "bad" backs off for an hour: not claimed, not read, no call
                reads.clear()
                idle = await run_cycle(mine, stores=stores)
                assert idle.outcome == "completed", idle.message
                extract = idle.phases["extract"]
                assert reads == [], reads
                assert (extract["sessions_queued"], extract["sessions_deferred"]) == (0, 0), extract
                assert server.chat_count == calls

            # Its backoff ends (the clock passes its retry time): claimed, read, tried again (fails).
            with stores.db.transaction() as conn:
                conn.execute("UPDATE chunk_results SET next_attempt_at = ? WHERE status = 'failed'",
                             ("2000-01-01T00:00:00.000Z",))
            again = (await run_cycle(mine, stores=stores)).phases["extract"]
            assert reads == ["bad"] and again["sessions_failed"] == 1, again
            assert server.chat_count == calls + 1

            # Backing off again; `rem-cycle retry` makes it eligible now, and it digests.
            reads.clear()
            assert (await run_cycle(mine, stores=stores)).phases["extract"]["sessions_queued"] == 0
            assert reads == []
            assert reset_failures(stores, ["bad"])["chunks_reset"] == 1
            healed = (await run_cycle(mine, stores=stores)).phases["extract"]
            assert reads == ["bad"] and healed["sessions_digested"] == 1, healed
            assert stores.runstate.digest_counts() == {"undigested": 0, "digested": 2, "undigestible": 0}
        finally:
            stores.close()
