"""The queue lines of what a cycle retracted go even when the cycle does not end well (retractdur,
seventeenth session): a withdrawal that fails while the ingest phase fails leaves the phase's own
error the one reported, the withdrawal's beside it as ``queue_error``. Real embedded Chroma, real
files and databases; the faults are the database's own (a trigger refusing a statement)."""

from __future__ import annotations

from pathlib import Path

from config import Settings
from store.backend import open_database
from tests.test_retract_queue import _built, _delete_rows
from worker.cycle import run_cycle


async def test_when_the_ingest_fails_after_a_retraction_its_own_error_is_reported_not_the_withdrawals(
    settings: Settings, tmp_path: Path,
) -> None:
    # The turn's retraction commits; then recording the session's ingest fails (the phase's error),
    # and so does withdrawing the turn's queued rows (the queue table refuses the delete). Before,
    # the withdrawal's error, raised in the phase's ``finally``, took the place of the phase's.
    mine = await _built(settings, tmp_path, lazy_queue="database")
    await _delete_rows(mine, ["s-gone-t0000"])
    db = open_database(mine)
    try:
        with db.transaction() as conn:
            conn.execute("CREATE TRIGGER refuse_ingest BEFORE DELETE ON memory_index "
                         "BEGIN SELECT RAISE(ABORT, 'the memory index refused'); END")
            for table in ("lazy_edges", "lazy_edges_dead"):
                conn.execute(f"CREATE TRIGGER refuse_{table} BEFORE DELETE ON {table} "
                             "BEGIN SELECT RAISE(ABORT, 'the queue table refused'); END")
    finally:
        db.close()
    result = await run_cycle(mine.model_copy(update={"full_scan_interval_seconds": 0}))
    assert (result.outcome, result.failure_phase) == ("failed", "ingest")
    assert "the memory index refused" in result.message and "queue table" not in result.message
    ingest = result.phases["ingest"]
    assert ingest["state"] == "failed" and "the memory index refused" in ingest["error"]
    assert "the queue table refused" in ingest["queue_error"]
