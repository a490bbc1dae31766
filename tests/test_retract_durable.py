"""What a retraction takes out goes all the way even when the process that retracted does not end
well (retractdur, seventeenth session). A cycle's ingest (or a backfill) that retracts a session or
a turn records it in ``queue_withdrawals`` in the retraction's own transaction, and the record goes
only once the lines its extraction queued are withdrawn: a cycle SIGKILLed in between, or whose
withdrawal failed, leaves them to the next cycle (before: kept for ever). A withdrawal that fails
while the ingest phase fails leaves the phase's own error the one reported, the withdrawal's beside
it as ``queue_error``. A turn a backfill takes out leaves the database's files as a forgotten one
does. Real embedded Chroma, real files, both engines for the tables; the faults are the database's
own (a trigger refusing a statement) or a real lock (the drain's, held as a running drain holds it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.db import Database
from store.lazy_queue import LazyEdgeQueue
from tests.conftest import ROOT, run_cli
from tests.test_crash_matrix import wait_for
from tests.lazy_fixtures import seed_chroma
from tests.test_forget_bytes import TURN_SECRET, _files_holding, _sessions
from tests.test_forget_queue import LATE_REF, LEGACY_REF, OLD_REF
from tests.test_forget_rest import rows_holding
from tests.test_retract_queue import _built, _cycle, _delete_rows, _queue_text
from worker.cycle import open_stores, run_cycle


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
            # On insert: the retraction itself deletes the turn's row (bfindex); the record of
            # the session's ingest then writes its remaining turns' rows.
            conn.execute("CREATE TRIGGER refuse_ingest BEFORE INSERT ON memory_index "
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
    # The turn's rows are still queued, and still recorded: once the faults are gone, the next
    # cycle withdraws them, though it has nothing left to retract.
    assert rows_holding(mine, OLD_REF)
    db = open_database(mine)
    try:
        with db.transaction() as conn:
            for trigger in ("refuse_ingest", "refuse_lazy_edges", "refuse_lazy_edges_dead"):
                conn.execute(f"DROP TRIGGER {trigger}")
    finally:
        db.close()
    ingest = (await _cycle(mine)).phases["ingest"]
    assert rows_holding(mine, OLD_REF) == [] and rows_holding(mine, LEGACY_REF)
    assert (ingest["turns_retracted"], ingest["retractions_withdrawn"], ingest["queue_lines_withdrawn"]) == (0, 1, 1)


def _vacuums(db: Database, table: str) -> int:
    """How many times ``table`` of the test's PostgreSQL schema was vacuumed by hand (the server's count)."""
    return db.query("SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = ?", (table,))[0][0]


@pytest.mark.both_backends
async def test_a_turn_a_backfill_takes_out_leaves_the_database_files_as_a_forgotten_ones_does(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    # ``backfill`` took the turn out of the graph and its recall row out of the tables, but its
    # words stayed in the full-text index's older segments (SQLite) or the dead row's page
    # (PostgreSQL) until some later forget erased — the next cycle finds nothing to retract.
    stores = await open_stores(settings)
    try:
        await seed_chroma(stores, settings, _sessions(), tmp_path)
        assert (await run_cycle(settings, stores=stores)).outcome == "completed"
        vacuumed = _vacuums(stores.db, "recall_turns") if database_url else 0
        await _delete_rows(settings, ["s-keep-t0001"])
        env = {"REM_DATA_DIR": str(settings.data_dir)} | ({"REM_DATABASE_URL": database_url} if database_url else {})
        done = run_cli("backfill", "--days", "3650", "--json", env=env)
        assert done.returncode == 0, done.stderr
        if database_url:
            assert _vacuums(stores.db, "recall_turns") > vacuumed
        else:
            assert _files_holding(settings.data_dir, TURN_SECRET) == []
        report = json.loads(done.stdout)
        assert (report["turns_retracted"], report["erased"]) == (1, True)
        # Neither search path ever served it (the tables' rows went with the turn): only the files held it.
        recall = run_cli("recall", "ConfigLoader", "--json", env=env)
        assert recall.returncode == 0 and "s-keep-t0000" in recall.stdout and TURN_SECRET not in recall.stdout
    finally:
        stores.close()


def _count(settings: Settings, sql: str) -> int:
    db = open_database(settings)
    try:
        return db.query(sql)[0][0]
    finally:
        db.close()


async def _killed_in_its_withdrawal(settings: Settings, database_url: str | None, tmp_path: Path) -> tuple[Settings, LazyEdgeQueue]:
    """A built graph (``_built``) after a cycle SIGKILLed between its two retractions' commits
    (s-late retracted whole, s-gone's first turn) and their lines' withdrawal: the kill lands at
    that point exactly, this holding the queue files' drain lock (as a drain running elsewhere
    does), so the cycle waits in the withdrawal, after both retractions committed."""
    mine = await _built(settings, tmp_path)
    queue = LazyEdgeQueue(mine.queue_path)
    assert OLD_REF in _queue_text(queue) and LATE_REF in _queue_text(queue)
    # s-late's only row goes (the session is retracted), and s-gone's first turn (that turn is).
    await _delete_rows(mine, ["s-gone-t0000", "s-late-t0000"], sessions=("s-late",))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {
        "PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(mine.data_dir), "REM_FULL_SCAN_INTERVAL_SECONDS": "0", "REM_LOG_LEVEL": "error",
    } | ({"REM_DATABASE_URL": database_url} if database_url else {})
    with queue.exclusive():
        proc = subprocess.Popen([sys.executable, "-m", "worker", "--once"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # s-gone's ingest recorded (its turn left the memory index): the last write before the withdrawal.
            wait_for(lambda: _count(mine, "SELECT COUNT(*) FROM memory_index WHERE memory_id = 's-gone-t0000'") == 0, proc.pid)
            assert proc.poll() is None, "the cycle ended before the kill"
            time.sleep(0.3)  # into the withdrawal's wait for the lock
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    assert _count(mine, "SELECT COUNT(*) FROM nodes WHERE id IN ('session:s-late', 'memory:s-gone-t0000')") == 0  # retracted
    assert OLD_REF in _queue_text(queue) and LATE_REF in _queue_text(queue)  # the kill left their lines
    return mine, queue


@pytest.mark.both_backends
async def test_a_cycle_killed_between_its_retraction_and_the_withdrawal_leaves_the_lines_to_the_next_cycle(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    # Before: the lines were withdrawn once, at the end of the ingest that retracted them; a cycle
    # SIGKILLed in between kept them for ever (the next scan finds nothing left to retract).
    mine, queue = await _killed_in_its_withdrawal(settings, database_url, tmp_path)
    phases = (await _cycle(mine)).phases
    ingest = phases["ingest"]
    for word in (OLD_REF, LATE_REF):
        assert _files_holding(mine.data_dir, word) == [], word
    assert LEGACY_REF in _queue_text(queue)  # s-gone's other turn's line stays
    assert (ingest["sessions_retracted"], ingest["turns_retracted"]) == (0, 0)  # nothing left to retract: the record said
    assert (ingest["retractions_withdrawn"], ingest["queue_lines_withdrawn"]) == (2, 2)
    assert _count(mine, "SELECT COUNT(*) FROM queue_withdrawals") == 0
    assert phases["finalize"]["erased"] is True  # the killed cycle's retracted text leaves the files too
    again = (await _cycle(mine)).phases["ingest"]
    assert (again["retractions_withdrawn"], again["queue_lines_withdrawn"]) == (0, 0)


@pytest.mark.both_backends
async def test_a_drain_run_alone_withdraws_first_what_a_killed_cycle_left_recorded(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    # Before: only a cycle read the records, so `rem-cycle drain` run after the kill read the
    # retracted anchors' lines as any other, and charged each an attempt it can never link.
    mine, queue = await _killed_in_its_withdrawal(settings, database_url, tmp_path)
    env = {"REM_DATA_DIR": str(mine.data_dir)} | ({"REM_DATABASE_URL": database_url} if database_url else {})
    done = run_cli("drain", "--json", env=env)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert (stats.get("retractions_withdrawn"), stats.get("queue_lines_withdrawn"), stats["failed"]) == (2, 2, 0), stats
    assert stats["dead_lettered"] == 0  # none of theirs read, none charged
    assert OLD_REF not in _queue_text(queue) and LATE_REF not in _queue_text(queue)
    assert LEGACY_REF in _queue_text(queue)  # s-gone's other turn's line stays
    assert _count(mine, "SELECT COUNT(*) FROM queue_withdrawals") == 0


async def test_a_drain_run_alone_while_another_drain_holds_the_files_says_so_at_once(
    settings: Settings, tmp_path: Path,
) -> None:
    # With records pending, the drain's withdrawal first waited 30 s for the other drain's lock
    # (as a cycle's does), then the drain said "not starting a second one": it would never start.
    mine, queue = await _killed_in_its_withdrawal(settings, None, tmp_path)
    with queue.exclusive():  # another drain running
        started = time.monotonic()
        done = run_cli("drain", "--json", env={"REM_DATA_DIR": str(mine.data_dir)})
        waited = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    assert waited < 20, waited  # the withdrawal's wait is 30 s
    assert _count(mine, "SELECT COUNT(*) FROM queue_withdrawals") == 2  # the records stay, for the next drain or cycle
    assert OLD_REF in _queue_text(queue) and LATE_REF in _queue_text(queue)
