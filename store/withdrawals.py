"""``queue_withdrawals``: what a retraction or a forget took out, or a rewrite replaced, whose queue
lines are still to be withdrawn.

A cycle's ingest (or ``rem-cycle backfill``) that retracts a session whose rows all left Chroma, or
a turn whose row did, or that replaces a turn's text written again with other words (the lines the
old words' extraction queued), and ``rem-cycle forget`` (a session, a turn, a notes file) write a
row here in their own transaction: the anchor's chunk key (a session id, a notes file's key) and the
turn (``memory:<id>``), or ``''`` for the whole anchor; a turn whose session is no longer known has
``''`` as its chunk key. The lines its extraction queued are withdrawn from the queue table and
files afterwards (outside the database's transaction: the files cannot be in it), and the rows read
are deleted once that is done (:meth:`QueueWithdrawalStore.settle`). A kill, a failure or a drain
holding the files in between leaves the rows, and the next cycle (or ``rem-cycle drain``) withdraws
them: the withdrawal does not depend on the process that retracted or forgot surviving. The table
holds what is not withdrawn yet — usually nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from store.db import Database
from store.erasure import EraseDueStore
from store.graph import utc_now

# The ``turn`` of a row that stands for the whole anchor.
WHOLE_ANCHOR = ""
# The ``chunk_key`` of a turn's row whose session is no longer known (a forget of the turn committed
# before and took the one row that said it): its lines are found by the turn alone
# (:class:`pipelines.lazy_edge.ExtractionLines`). No anchor has an empty key.
SESSION_UNKNOWN = ""


class QueueWithdrawalStore:
    """Typed access to ``queue_withdrawals``."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    def record(self, chunk_key: str, turns: Iterable[str] | None = None, *, extraction_stands: bool = True,
               words_deleted: bool = True) -> None:
        """Record that the anchor ``chunk_key`` was taken out whole (``turns`` ``None``), or those
        of its ``turns``: its queue lines are due to be withdrawn, and its text to be erased from
        the database's files (:class:`store.erasure.EraseDueStore`) — for turns whose anchor's
        extraction still stands (``extraction_stands``: a retraction's), what it said of them too,
        once that is committed again —, in the caller's transaction. A forget of a turn takes what
        the extraction said of it out itself (``extraction_stands`` ``False``). ``words_deleted``
        ``False``: the turns' words live on (moved to another session with them): nothing is erased."""
        now = self.clock()
        rows = [(chunk_key, turn, now) for turn in ([WHOLE_ANCHOR] if turns is None else sorted(set(turns)))]
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO queue_withdrawals(chunk_key, turn, created_at) VALUES (?,?,?) ON CONFLICT DO NOTHING", rows
            )
            if words_deleted:
                EraseDueStore(self.db).mark(extraction_of=chunk_key if turns is not None and extraction_stands else None)

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
