"""The nineteenth session's code (forgetdur, rewriteerase, the import-notes guard, audit20),
attacked (audit21, twentieth session): RELIABILITY.md, section audit21. Real SQLite files, a real
PostgreSQL schema, the real queue file and table; no mocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.claims import ClaimStore
from store.lazy_queue import LazyEdgeQueue, edge_line
from store.lazy_table import LazyEdgeTable
from store.runstate import RunStateStore, SessionRevision
from store.withdrawals import SESSION_UNKNOWN, QueueWithdrawalStore
from worker.knowledge import withdraw_retracted


def _extraction_line(session: str, target: object) -> bytes:
    """A queue line as the extraction of ``session`` writes one (its chunk ids), to ``target``."""
    return edge_line({"source": "CONCEPT:retry budget", "target": target, "relationship": "MENTIONED_IN",
                      "properties": {"chunk_ids": [f"{session}:chunk:0"]}})


@pytest.mark.both_backends
def test_a_line_whose_target_is_no_id_does_not_stop_a_turns_withdrawal(settings: Settings) -> None:
    """An agent's line (an INSERT into ``lazy_edges`` or an append to the file, README) may hold
    anything; one with an extraction's chunk ids and a list as its ``target`` made every withdrawal
    of a turn (a forget, a retraction; a forget run again: a turn of no known session) raise
    ``TypeError: unhashable type`` — the cycle's ingest failed every cycle, the record stayed and
    the session was never claimed again. Now such a line is no turn's: it stays, the turn's go."""
    db = open_database(settings)
    try:
        RunStateStore(db).mark_ingested(SessionRevision("s-1", "r1", "2026-11-01T00:00:00Z"), "run-1")
        odd = _extraction_line("s-1", ["memory:s-1-t0000"])
        mine = [_extraction_line("s-1", "memory:s-1-t0000"), _extraction_line("s-2", "memory:s-2-t0001")]
        LazyEdgeTable(db).append_lines([odd, *mine])
        queue = LazyEdgeQueue(settings.queue_path)
        queue.append_lines([odd, *mine])
        records = QueueWithdrawalStore(db)
        records.record("s-1", ["memory:s-1-t0000"])
        records.record(SESSION_UNKNOWN, ["memory:s-2-t0001"], extraction_stands=False)

        assert withdraw_retracted(db, queue=queue) == {"queue_lines_withdrawn": 4, "retractions_withdrawn": 2}

        assert [row[0] for row in db.query("SELECT line FROM lazy_edges")] == [odd.decode().rstrip("\n")]
        assert [line.strip() for line in settings.queue_path.read_bytes().splitlines() if line.strip()] == [odd.rstrip(b"\n")]
        assert records.pending() == []
        assert [row.session_id for row in ClaimStore(db, owner="w", lease_seconds=60).claim(limit=5)] == ["s-1"]
    finally:
        db.close()
