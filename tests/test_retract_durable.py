"""The queue lines of what a cycle retracted go even when the cycle does not end well (retractdur,
seventeenth session): a withdrawal that fails while the ingest phase fails leaves the phase's own
error the one reported, the withdrawal's beside it as ``queue_error``. Real embedded Chroma, real
files and databases; the faults are the database's own (a trigger refusing a statement)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.db import Database
from tests.conftest import run_cli
from tests.lazy_fixtures import seed_chroma
from tests.test_forget_bytes import TURN_SECRET, _files_holding, _sessions
from tests.test_retract_queue import _built, _delete_rows
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
