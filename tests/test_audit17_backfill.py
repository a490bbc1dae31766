"""audit17: ``rem-cycle backfill`` stopped mid-way withdraws the queue lines of the turns it took
out in a shielded ``finally``; a failure of that withdrawal must not take the place of what stopped
the backfill (the signal's exit code, the error that stopped it), as the cycle's ingest already
ensures (worker/cycle.py ``_withdraw_despite_failure``). Real embedded Chroma, a real SQLite file,
the real CLI interrupted by SIGINT."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

from config import Settings
from tests.conftest import make_session
from tests.lazy_fixtures import seed_chroma
from tests.test_command_signals import _env, _interrupt_midway
from tests.test_retract_queue import _built, _delete_rows
from worker.cycle import open_stores

REFUSED = "queue_withdrawals refuses deletes"


async def test_a_backfill_interrupted_while_its_withdrawal_fails_still_exits_as_interrupted(settings: Settings, tmp_path: Path) -> None:
    """The backfill takes out ``s-gone``'s first turn in its first batch, then a SIGINT stops it in
    a later one; the withdrawal its ``finally`` runs fails (the database refuses to delete the
    retraction's record: a trigger standing for a full disk or a lost connection). The backfill
    exits 130, as interrupted, saying the lines stay for the next cycle; the record stays. Before:
    the withdrawal's database error replaced the interruption (exit 1, ``database-error``)."""
    mine = await _built(settings, tmp_path)
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, [make_session(f"backlog-{i:03d}", 1, created="2026-11-02T10:00:00Z")
                                         for i in range(200)], tmp_path)
    finally:
        stores.close()
    await _delete_rows(mine, ["s-gone-t0000"])
    with sqlite3.connect(mine.graph_path) as conn:
        conn.execute(f"CREATE TRIGGER refuse_settle BEFORE DELETE ON queue_withdrawals BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END")
    graph = sqlite3.connect(f"{mine.graph_path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    gate = sqlite3.connect(mine.graph_path, isolation_level=None, timeout=30)
    try:
        def turn_taken_out() -> bool:
            if graph.execute("SELECT COUNT(*) FROM nodes WHERE id = 'memory:s-gone-t0000'").fetchone()[0]:
                return False
            gate.execute("BEGIN IMMEDIATE")  # the backfill's next batch waits here until the signal
            return True

        done = _interrupt_midway(["backfill", "--days", "3650", "--skip-drain"], _env(mine.data_dir), signal.SIGINT,
                                 turn_taken_out, signalled=lambda: gate.execute("ROLLBACK"))
        assert graph.execute("SELECT chunk_key, turn FROM queue_withdrawals").fetchall() == [("s-gone", "memory:s-gone-t0000")]
    finally:
        gate.close()
        graph.close()
    assert done.returncode == 130, done.stderr[-3000:]
    assert REFUSED in done.stderr and "next cycle" in done.stderr, done.stderr[-3000:]
