"""``queue_withdrawals``: what a retraction took out whose queue lines are still to be withdrawn.

A cycle's ingest (or ``rem-cycle backfill``) that retracts a session whose rows all left Chroma,
or a turn whose row did, writes a row here in the retraction's own transaction: the anchor's chunk
key (a session id) and the turn (``memory:<id>``), or ``''`` for the whole anchor. The lines its
extraction queued are withdrawn from the queue table and files afterwards (outside the database's
transaction: the files cannot be in it), and the rows read are deleted once that is done
(:meth:`QueueWithdrawalStore.settle`). A kill, a failure or a drain holding the files in between
leaves the rows, and the next cycle withdraws them: the withdrawal does not depend on the process
that retracted surviving. The table holds retractions not withdrawn yet — usually none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from store.db import Database
from store.erasure import EraseDueStore
from store.graph import utc_now

# The ``turn`` of a row that stands for the whole anchor.
WHOLE_ANCHOR = ""


class QueueWithdrawalStore:
    """Typed access to ``queue_withdrawals``."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    def record(self, chunk_key: str, turns: Iterable[str] | None = None) -> None:
        """Record that the anchor ``chunk_key`` was taken out whole (``turns`` ``None``), or those
        of its ``turns``: its queue lines are due to be withdrawn, and its text to be erased from
        the database's files (:class:`store.erasure.EraseDueStore`) — for turns, what its extraction
        said of them too, once that is committed again —, in the caller's transaction."""
        now = self.clock()
        rows = [(chunk_key, turn, now) for turn in ([WHOLE_ANCHOR] if turns is None else sorted(set(turns)))]
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO queue_withdrawals(chunk_key, turn, created_at) VALUES (?,?,?) ON CONFLICT DO NOTHING", rows
            )
            EraseDueStore(self.db).mark(extraction_of=None if turns is None else chunk_key)

    def pending(self) -> list[tuple[str, str]]:
        """Every ``(chunk_key, turn)`` whose lines are due (``turn`` :data:`WHOLE_ANCHOR`: all of
        the anchor's)."""
        return sorted((key, turn) for key, turn in self.db.query("SELECT chunk_key, turn FROM queue_withdrawals"))

    def settle(self, withdrawn: Iterable[tuple[str, str]]) -> int:
        """Delete the rows ``withdrawn`` (what :meth:`pending` returned, once their lines are out of
        the queue): a retraction recorded since stays. Returns how many went."""
        gone = 0
        with self.db.transaction() as conn:
            for key, turn in withdrawn:  # few: the retractions of a cycle or two
                gone += conn.execute("DELETE FROM queue_withdrawals WHERE chunk_key = ? AND turn = ?", (key, turn)).rowcount
        return gone
