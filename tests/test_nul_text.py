"""A NUL (U+0000) in a turn, a summary or their metadata: PostgreSQL's text holds none, so on
PostgreSQL such a session failed its sync at every cycle (``\\u0000 cannot be converted to text``)
and was never ingested, while SQLite took it. Both engines now read a NUL as U+FFFD and ingest the
session whole, alike; an id holding one is still refused. Rows written to the real embedded Chroma
as an agent writes them, and through ``rem-cycle import``; the real cycle; recall on both engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import NUL_STAND_IN, ChromaStore
from tests.conftest import write_sessions
from tests.test_recall import ask
from worker.cycle import run_cycle

TEXT = "The osprey\x00 nests by the LazyEdgeQueue"
SUMMARY = "Ospreys\x00 and queues"


async def _agent_writes(settings: Settings) -> None:
    """Session ``nul`` (two turns, a summary, NULs in text and metadata) and session ``bad\\x00id``
    (refused: its id holds a NUL), written to Chroma directly."""
    chroma = ChromaStore(settings)
    await chroma.upsert(settings.memory_collection, ["nul-t0", "nul-t1", "bad-t0"], [TEXT, "fine\x00", "osprey again"], [
        {"sessionId": "nul", "turnIndex": 0, "role": "user\x00", "createdAt": "2026-11-01T10:00:00Z", "userId": "u\x00x", "note": "a\x00b"},
        {"sessionId": "nul", "turnIndex": 1, "role": "assistant", "createdAt": "2026-11-01T10:01:00Z", "userId": "u\x00x"},
        {"sessionId": "bad\x00id", "turnIndex": 0, "role": "user", "createdAt": "2026-11-01T10:00:00Z"},
    ])
    await chroma.upsert(settings.session_collection, ["summary_nul"], [SUMMARY], [
        {"sessionId": "nul", "title": "Ti\x00tle", "createdAt": "2026-11-01T10:00:00Z", "userId": "u\x00x", "memoryCount": 2}])


@pytest.mark.both_backends
async def test_a_session_holding_nuls_is_ingested_whole_on_both_engines(settings: Settings) -> None:
    await _agent_writes(settings)
    result = await run_cycle(settings)
    ingest = result.phases["ingest"]
    assert result.outcome == "completed" and ingest["sessions_failed"] == 0, ingest.get("session_failures")
    answer = ask(settings, "osprey")
    assert TEXT.replace("\x00", NUL_STAND_IN) in [t["text"] for t in answer["turns"]]
    db = open_database(settings)
    try:
        digests = {r[0]: r[1] for r in db.query("SELECT session_id, state FROM session_digests")}
        summaries = db.query("SELECT summary, title, user_id FROM recall_sessions")
    finally:
        db.close()
    assert digests == {"nul": "digested"}  # the session whose id holds a NUL is refused, as before
    assert [tuple(r) for r in summaries] == [(SUMMARY.replace("\x00", NUL_STAND_IN), "Ti\ufffdtle", "u\ufffdx")]
    again = await run_cycle(settings)
    assert again.phases["ingest"]["sessions_changed"] == 0, again.phases["ingest"]


@pytest.mark.both_backends
async def test_an_imported_nul_is_written_as_ingest_reads_it(settings: Settings, tmp_path: Path) -> None:
    sessions = write_sessions(tmp_path / "in.jsonl", [{
        "sessionId": "imp", "createdAt": "2026-11-01T10:00:00Z", "userId": "u", "title": "T\x00", "summary": SUMMARY,
        "turns": [{"id": "imp-t0", "role": "user", "text": TEXT}, {"id": "imp-t1", "role": "assistant", "text": "fine"}]}])
    chroma = ChromaStore(settings)
    first = await import_sessions(sessions, chroma=chroma, memory_collection=settings.memory_collection,
                                  summary_collection=settings.session_collection)
    second = await import_sessions(sessions, chroma=chroma, memory_collection=settings.memory_collection,
                                   summary_collection=settings.session_collection)
    assert (first.memories_written, second.memories_written, second.memories_unchanged) == (2, 0, 2)
    assert (second.summaries_written, second.summaries_unchanged) == (0, 1)
    result = await run_cycle(settings)
    assert result.phases["ingest"]["sessions_failed"] == 0, result.phases["ingest"].get("session_failures")
    assert TEXT.replace("\x00", NUL_STAND_IN) in [t["text"] for t in ask(settings, "osprey")["turns"]]
