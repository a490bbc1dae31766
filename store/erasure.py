"""``rem_counters`` ``erase_due``: a retraction's text may still be in the database's files.

A retraction (a cycle's ingest or ``rem-cycle backfill`` taking out a session or turn whose rows
left Chroma) bumps the counter in its own transaction (:meth:`store.withdrawals.QueueWithdrawalStore.record`);
a cycle's ``finalize`` erases deleted text from the files when it is above zero and, once the erase
completed, takes off what it read (:meth:`EraseDueStore.settle`). So a cycle killed or cancelled
between its retraction and its ``finalize`` leaves the erase to the next cycle, and a backfill,
which erases at once but leaves the re-extraction of the session to a cycle, leaves the counter
for that cycle, whose ``finalize`` erases what the re-extraction replaced. No row (a database
no retraction touched yet) reads as zero: no migration.
"""

from __future__ import annotations

from store.db import Database

_ERASE_DUE = "erase_due"


class EraseDueStore:
    """Typed access to the ``erase_due`` row of ``rem_counters``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def mark(self) -> None:
        """Record that deleted text is due to be erased (in the caller's transaction: the retraction's)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO rem_counters(name, value) VALUES (?, 1) "
                "ON CONFLICT (name) DO UPDATE SET value = rem_counters.value + 1",
                (_ERASE_DUE,),
            )

    def due(self) -> int:
        """How many retractions were recorded since the last completed erase (0: none is due)."""
        rows = self.db.query("SELECT value FROM rem_counters WHERE name = ?", (_ERASE_DUE,))
        return int(rows[0][0]) if rows else 0

    def settle(self, erased: int) -> None:
        """Take off ``erased`` (what :meth:`due` read before an erase that completed): a retraction
        recorded since stays due, for the next erase. Never below zero: a leader paused past its
        lease in its erase settles what the leader that took over settled too (``finalize``'s erase
        is not fenced), and a negative count would swallow the next retraction's mark."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE rem_counters SET value = CASE WHEN value > ? THEN value - ? ELSE 0 END WHERE name = ?",
                         (erased, erased, _ERASE_DUE))
