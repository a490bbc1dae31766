"""audit17: ``rem-cycle backfill`` stopped mid-way withdraws the queue lines of the turns it took
out in a shielded ``finally``; a failure of that withdrawal must not take the place of what stopped
the backfill (the signal's exit code, the error that stopped it), as the cycle's ingest already
ensures (worker/cycle.py ``_withdraw_retracted_lines(despite_failure=True)``). Real embedded Chroma, a real SQLite file,
the real CLI interrupted by SIGINT."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from config import Settings
from tests.test_audit16_retraction import backfill_stopped_after_the_turn, backlog_after_a_retracted_turn

REFUSED = "queue_withdrawals refuses deletes"


async def test_a_backfill_interrupted_while_its_withdrawal_fails_still_exits_as_interrupted(settings: Settings, tmp_path: Path) -> None:
    """The backfill takes out ``s-gone``'s first turn in its first batch, then a SIGINT stops it in
    a later one; the withdrawal its ``finally`` runs fails (the database refuses to delete the
    retraction's record: a trigger standing for a full disk or a lost connection). The backfill
    exits 130, as interrupted, saying the lines stay for the next cycle; the record stays. Before:
    the withdrawal's database error replaced the interruption (exit 1, ``database-error``)."""
    mine = await backlog_after_a_retracted_turn(settings, tmp_path)
    with sqlite3.connect(mine.graph_path) as conn:
        conn.execute(f"CREATE TRIGGER refuse_settle BEFORE DELETE ON queue_withdrawals BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END")

    def the_record_stays(graph: sqlite3.Connection) -> None:
        assert graph.execute("SELECT chunk_key, turn FROM queue_withdrawals").fetchall() == [("s-gone", "memory:s-gone-t0000")]

    done = backfill_stopped_after_the_turn(mine, then=the_record_stays)
    assert done.returncode == 130, done.stderr[-3000:]
    assert REFUSED in done.stderr and "next cycle" in done.stderr, done.stderr[-3000:]
