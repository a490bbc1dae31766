"""The same turns in two sessions digested side by side are paid once (forkflight): a chunk whose
words another session of the same extract phase is extracting waits for that answer and reuses it
(forkreuse's way) instead of asking the model again. Real cycles, embedded Chroma, SQLite and
PostgreSQL, the loopback chat-completions server counting requests; several sessions extracted at
once (``REM_LLM_CONCURRENCY`` > 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from config import Settings
from pipelines.extract.inflight import InFlight
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.backend import open_database
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, Status, ok, server_error, slow
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, NEW_TURNS, conversation, cycle, points, rows
from worker.cycle import PHASES, run_cycle

# A waiter left waiting would hang the cycle: it fails well before the suite's timeout instead.
STUCK_SECONDS = 60
# The first answer for chunk 0 (PartAItem) comes this late, so that the sessions started together
# have all looked up their answers before any is stored: before forkflight, each then paid.
SLOW_FIRST_ANSWER = slow(1.0)


async def bounded_cycle(settings: Settings, tmp_path: Path, *sessions: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(STUCK_SECONDS):
        return await cycle(settings, tmp_path, *sessions)


async def test_a_text_is_claimed_once_and_a_failed_flight_is_claimed_again_by_one_waiter() -> None:
    flights = InFlight()
    key = ("fp", "text")
    assert flights.claim(key) is None  # the first claimant extracts
    first, second = flights.claim(key), flights.claim(key)
    assert first is second is not None and not first.landed.is_set()

    flights.land(key, answered=False)
    assert first.landed.is_set() and not first.answered
    # The first waiter to claim again extracts; the next waits on it.
    assert flights.claim(key) is None
    retry = flights.claim(key)
    assert retry is not None and retry is not first

    flights.land(key, answered=True)
    assert retry.landed.is_set() and retry.answered
    # A late claim of an answered text gets the landed flight: it reads the answer, pays nothing.
    assert flights.claim(key) is retry
    assert flights.claim(("another fp", "text")) is None


@pytest.mark.both_backends
async def test_a_duplicate_digested_in_the_same_cycle_pays_once(settings: Settings, tmp_path: Path) -> None:
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        llm.script(SLOW_FIRST_ANSWER, match="PartAItem")
        counts = await bounded_cycle(mine, tmp_path, conversation("orig", HISTORY), conversation("copy", HISTORY))
        # Before: 6 requests, each session paid for its 3 chunks.
        assert (llm.chat_count, counts["chunks_ok"], counts["chunks_reused"], counts["sessions_digested"]) == (3, 3, 3, 2)
        assert points(mine, "copy") == points(mine, "orig") != set()
        # Whichever session waited holds its own rows, which cost nothing and no attempt.
        paid = sorted((tokens > 0, attempts) for _, _, tokens, attempts in rows(mine, "orig") + rows(mine, "copy"))
        assert paid == [(False, 0)] * 3 + [(True, 1)] * 3
        llm.reset()
        again = await bounded_cycle(mine, tmp_path)
        assert (llm.chat_count, again["sessions_attempted"]) == (0, 0)


@pytest.mark.both_backends
async def test_an_original_and_its_fork_in_one_cycle_pay_the_shared_chunks_once(settings: Settings, tmp_path: Path) -> None:
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        llm.script(SLOW_FIRST_ANSWER, match="PartAItem")
        counts = await bounded_cycle(mine, tmp_path, conversation("orig", HISTORY),
                                     conversation("fork", [*HISTORY, *NEW_TURNS]))
        # Before: 7 requests (3 + 4).
        assert (llm.chat_count, counts["chunks_total"], counts["chunks_reused"], counts["sessions_digested"]) == (4, 7, 3, 2)
        assert sum("PartAItem" in r.prompt for r in llm.chat_requests) == 1
        forked = points(mine, "fork")
        assert {p for p in forked if p[2] != "chunk:3"} == points(mine, "orig") != set()


async def test_more_duplicates_than_slots_finish_and_pay_once(settings: Settings, tmp_path: Path) -> None:
    """Six copies, two sessions and two model calls at a time (four sessions a claim): the sessions
    waiting for another's answer hold both session slots, and the phase still ends."""
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, llm_concurrency=2)
        llm.script(SLOW_FIRST_ANSWER, match="PartAItem")
        copies = [conversation(f"dup{i}", HISTORY) for i in range(6)]
        counts = await bounded_cycle(mine, tmp_path, *copies)
        # Before: 12 requests (the first claim's four sessions paid 3 each; the last two reused).
        assert (llm.chat_count, counts["chunks_reused"], counts["sessions_digested"]) == (3, 15, 6)
        assert all(points(mine, f"dup{i}") == points(mine, "dup0") != set() for i in range(1, 6))


@pytest.mark.both_backends
async def test_a_failed_first_extraction_is_taken_over_by_one_waiter_and_nothing_is_lost(
    settings: Settings, tmp_path: Path
) -> None:
    with LLMServer() as llm:
        # The failed chunk is due again at the next cycle (a session with a chunk backing off is
        # not claimed, even when another session holds an answer of its text).
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url,
                            chunk_retry_base_seconds=0.001, chunk_retry_max_seconds=0.001)
        llm.script(server_error(500), ok(), match="PartAItem")  # the first request for chunk 0 fails
        sessions = [conversation(f"dup{i}", HISTORY) for i in range(3)]
        counts = await bounded_cycle(mine, tmp_path, *sessions)
        # The session whose request failed fails; one waiter asks again and the third reuses its
        # answer. Before: 9 requests.
        assert sum("PartAItem" in r.prompt for r in llm.chat_requests) == 2 and llm.chat_count == 4
        assert (counts["sessions_failed"], counts["sessions_digested"], counts["chunks_failed"]) == (1, 2, 1)
        assert (counts["chunks_ok"], counts["chunks_reused"]) == (3, 5)

        # The failed session's retry reuses the answer the waiter paid for: nothing more is sent.
        llm.reset()
        again = await bounded_cycle(mine, tmp_path)
        assert (llm.chat_count, again["sessions_digested"], again["chunks_reused"]) == (0, 1, 3)
        assert points(mine, "dup0") == points(mine, "dup1") == points(mine, "dup2") != set()


async def test_the_heuristic_extractor_extracts_each_text_of_a_cycle_once(settings: Settings, tmp_path: Path) -> None:
    """The heuristic extractor goes through the same registry. Its extractions are too quick to
    make sessions overlap at will, so before forkflight this failed only when they did (2 runs in 3)."""
    mine = settings.model_copy(update={"chunk_limit_tokens": 48, "prompt_envelope_tokens": 0})
    sessions = [*(conversation(f"dup{i}", HISTORY) for i in range(4)), conversation("fork", [*HISTORY, *NEW_TURNS])]
    counts = await bounded_cycle(mine, tmp_path, *sessions)
    # Before, when the sessions overlapped: 10 or 13 extracted.
    assert (counts["chunks_ok"], counts["chunks_reused"], counts["sessions_digested"]) == (4, 12, 5)
    assert all(points(mine, f"dup{i}") == points(mine, "dup0") != set() for i in range(1, 4))
    assert {p for p in points(mine, "fork") if p[2] != "chunk:3"} == points(mine, "dup0")


def test_a_flight_that_ended_in_an_outage_ends_every_claim_of_its_text_alike() -> None:
    flights = InFlight()
    key = ("fp", "text")
    assert flights.claim(key) is None
    waiter = flights.claim(key)
    assert waiter is not None
    flights.land(key, answered=False, outage=("provider-error", "connection failed: ConnectError"))
    assert waiter.landed.is_set() and waiter.outage == ("provider-error", "connection failed: ConnectError")
    # No waiter takes over, and a later claim in the phase gets the same landed flight.
    assert flights.claim(key) is waiter


@pytest.mark.both_backends
async def test_duplicates_in_an_outage_try_the_server_once_a_text_and_are_charged_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    """Found by forkflight's author: while the model server was down (connection refused), each
    session waiting on a text's extraction took over in turn when it failed, and tried the server
    again (with its own retries and backoff): a cycle over K duplicates took K times as long in an
    outage, though no attempt could succeed."""
    with LLMServer() as probe:  # a port nothing listens on once it is stopped
        port = probe.port
    copies = [f"dup{i}" for i in range(4)]
    with LLMServer(port=port) as llm:
        # Two sessions and two calls at a time, four sessions a claim: all four share one registry.
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url, llm_concurrency=2,
                            chunk_retry_base_seconds=0.001, chunk_retry_max_seconds=0.001)
    source = write_sessions(tmp_path / "in.jsonl", [conversation(sid, HISTORY) for sid in copies])
    await import_sessions(source, chroma=ChromaStore(mine), memory_collection=mine.memory_collection,
                          summary_collection=mine.session_collection)
    # provider-ready would find the server down and fail the cycle: the outage starts after it.
    with anyio.fail_after(STUCK_SECONDS):
        down = await run_cycle(mine, phases=tuple(p for p in PHASES if p[0] in ("ingest", "extract")))
    assert down.outcome == "completed", down.message
    extract = down.phases["extract"]
    # Before: 12 extractions (each copy tried its 3 chunks in turn), 12 chunks failed.
    assert (extract["chunks_failed"], extract["chunks_deferred"], extract["failures_by_kind"]) == (3, 9, {"provider-error": 3})
    assert (extract["sessions_deferred"], extract["sessions_failed"], extract["sessions_undigestible"]) == (4, 0, 0)
    # A refused request never reached the server: no try of its chunk is recorded (leftalone23;
    # before, a failed row of 1 attempt each, 3 in all).
    assert [r for sid in copies for r in rows(mine, sid)] == []
    # The sessions that only waited made no call: like those backing off, they take no place in
    # REM_BATCH_LIMIT (those that called do).
    assert extract["sessions_backing_off"] == len(copies) - len({chunk.split(":")[0] for chunk in extract["failed_chunks"]})
    db = open_database(mine, readonly=True)
    try:
        assert [tuple(r) for r in db.query("SELECT state, attempts FROM session_digests")] == [("undigested", 0)] * 4
    finally:
        db.close()

    with LLMServer(port=port) as llm:  # the server is back: each text is paid once
        healed = await bounded_cycle(mine, tmp_path)
        assert (llm.chat_count, healed["chunks_ok"], healed["chunks_reused"], healed["sessions_digested"]) == (3, 3, 9, 4)
    assert all(points(mine, sid) == points(mine, "dup0") != set() for sid in copies)


@pytest.mark.both_backends
async def test_a_session_that_made_calls_and_waited_on_an_outage_is_not_counted_backing_off(
    settings: Settings, tmp_path: Path
) -> None:
    """Found by audit14, fixed by audit15: two sessions share their first chunk's words and each
    has a chunk of its own. The model server refuses the shared text (503, an outage) and answers
    the others. The session that waited on the shared text's flight asked for its own chunk, yet
    was counted in ``sessions_backing_off`` ("made no call") and took no place in
    ``REM_BATCH_LIMIT``."""
    shared = HISTORY[:2]
    own = {sid: [("user", f"turn 2 names the Zq{sid.title()}Only class and filler"), ("assistant", "turn 3 says more x")]
           for sid in ("first", "second")}
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        llm.script(Status(503), match="PartAItem")  # one request for the shared text: the other waits for it
        counts = await bounded_cycle(mine, tmp_path, *(conversation(sid, [*shared, *turns]) for sid, turns in own.items()))
        callers = {sid for sid in own if any(f"Session {sid}," in r.prompt for r in llm.chat_requests)}
    assert sum("PartAItem" in r.prompt for r in llm.chat_requests) == 1 and callers == set(own)
    assert (counts["chunks_ok"], counts["chunks_failed"], counts["chunks_deferred"]) == (2, 1, 1)
    # Both asked the server: both deferred by the outage, neither backing off. Before: 1 backing off.
    assert (counts["sessions_deferred"], counts["sessions_backing_off"]) == (2, 0)
