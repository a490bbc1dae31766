"""bfindex: a turn ``rem-cycle backfill`` takes out (its row left Chroma) leaves the memory index in
the same transaction, as a cycle's ingest takes it out — so the session no longer has it for the
readers of that index: the held answers of a daemon's (or follower's) next extract phase, forget's
count of the session's turns, the sessions-without-turns metric. Real cycles and the backfill's own
sync on a real SQLite file and PostgreSQL, embedded Chroma, the loopback chat-completions server."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from config import Settings
from pipelines.backfill import RecentBackfill, sync_recent_sessions
from pipelines.extract.inflight import HeldAnswers
from pipelines.forget import forget_session
from store.chroma import ChromaStore
from store.lazy_queue import LazyEdgeQueue
from store.tombstones import TombstoneStore
from tests.llm_server import LLMServer
from tests.test_forkreuse import HISTORY, conversation
from tests.workers_support import held_count, ingested, three_answers_held
from worker.cycle import FOLLOWER_PHASES, PHASES, open_stores, run_cycle
from worker.held_answers import drop_taken_out, take_from_file
from worker.knowledge import withdraw_retracted


async def backfill(settings: Settings) -> RecentBackfill:
    """What ``rem-cycle backfill --days 3650 --skip-drain`` syncs (its sync, in this process), and
    the withdrawal of the queue lines of the turns it took out that the command runs after it (a
    session whose withdrawal is still recorded is claimed by no extraction: rewriteerase)."""
    stores = await open_stores(settings)
    try:
        recent = await sync_recent_sessions(chroma=stores.chroma, unit=stores.unit, memory_collection=settings.memory_collection,
                                            summary_collection=settings.session_collection, now=datetime.now(UTC), days=3650)
        assert "queue_error" not in withdraw_retracted(stores.db, queue=LazyEdgeQueue(settings.queue_path))
        return recent
    finally:
        stores.close()


async def delete_rows(settings: Settings, memory_ids: list[str]) -> None:
    (await ChromaStore(settings).memories()).delete(ids=memory_ids)


@pytest.mark.both_backends
async def test_a_turn_a_backfill_takes_out_leaves_the_memory_index_as_a_cycle_would(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """``s`` loses one turn's row, ``e`` both of its (its summary row stays); ``rem-cycle backfill``
    takes the three turns out of the graph. The memory index must say so at once, as a cycle's
    ingest makes it say: a full-scan cycle afterwards finds nothing to change in it. Before bfindex
    the index kept the three turns until that cycle: forget counted ``s``'s gone turn among the
    turns it removes, and ``e`` was not among the sessions without turns (the
    ``rem_cycle_sessions_without_turns`` metric)."""
    base = await ingested(settings.data_dir, [conversation("s", HISTORY[:3]), conversation("e", HISTORY[:2])], tmp_path,
                          database_url=database_url)
    await delete_rows(base, ["s-t1", "e-t0", "e-t1"])

    recent = await backfill(base)
    assert recent.turns_retracted == {"s": ["memory:s-t1"], "e": ["memory:e-t0", "memory:e-t1"]}

    stores = await open_stores(base)
    try:
        assert (forget_session(stores.unit, "s", dry_run=True)["memories"], stores.runstate.sessions_without_turns()) == (2, 1)
        assert TombstoneStore(stores.db).session_memories("s") == ["s-t0", "s-t2"]
        after_backfill = stores.runstate.memory_index()
        assert after_backfill == {"s-t0": "s", "s-t2": "s"}
    finally:
        stores.close()
    cycle = await run_cycle(base.model_copy(update={"full_scan_interval_seconds": 0}), phases=tuple(p for p in PHASES if p[0] == "ingest"))
    assert cycle.outcome == "completed" and cycle.phases["ingest"]["turns_retracted"] == 0, cycle.phases
    stores = await open_stores(base)
    try:
        assert stores.runstate.memory_index() == after_backfill
        assert stores.runstate.sessions_without_turns() == 1
    finally:
        stores.close()


@pytest.mark.both_backends
async def test_an_answer_held_for_a_turn_a_backfill_took_out_is_dropped_by_the_next_extract(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """A daemon holds the three answers the database refused for ``s`` (two turns a chunk); then
    ``s-t1``'s row leaves Chroma and ``rem-cycle backfill`` (another process) takes the turn out.
    The daemon's next extract phase — a follower's cycle, which runs no ingest — must drop the
    answer that quotes the turn (``HeldAnswers.keep_only_present``, fed from the memory index), as
    it does after a cycle's retraction or a forget; the other two cite only turns still there.
    Before bfindex the index still listed ``s-t1``: all three stayed held (3, not 2) until a
    leader's full scan synced ``s`` again. The phase's first two steps are run here on their own
    and counted: the phase then digests ``s``, and a digested session's answers all go (audit22)."""
    held = HeldAnswers()
    with LLMServer() as llm:
        config = await three_answers_held(settings.data_dir, llm, tmp_path, held, database_url=database_url)
        await delete_rows(config, ["s-t1"])
        assert (await backfill(config)).turns_retracted == {"s": ["memory:s-t1"]}

        stores = await open_stores(config)
        try:  # what the extract phase does first (worker.cycle.extract)
            take_from_file(config, held)
            drop_taken_out(config, held, stores.db)
        finally:
            stores.close()
        assert held_count(config, held) == 2
        follower = await run_cycle(config, held_answers=held, phases=tuple(p for p in PHASES if p[0] in FOLLOWER_PHASES))
        assert follower.outcome == "completed", follower.message
        assert follower.phases["extract"]["sessions_digested"] == 1, follower.phases
    assert held_count(config, held) == 0
