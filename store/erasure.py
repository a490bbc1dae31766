"""``rem_counters`` ``erase_due``: deleted text that a request to forget covers may still be in the
database's files.

One rule: whatever deletes text someone asked to have forgotten, or that a rewrite superseded,
makes an erase due, in the deleting transaction (:meth:`EraseDueStore.mark`). Three deletions do:
a retraction, a forget or a rewrite (a cycle's ingest or ``rem-cycle backfill`` taking out a
session or turns whose rows left Chroma, or replacing a turn's text written again with other
words; ``rem-cycle forget``: :meth:`store.withdrawals.QueueWithdrawalStore.record`, which records
their queue lines too); the sync of a session summary written again with other words (its SESSION
node and recall row replaced: ``pipelines.ingest._write_sessions``); and the next commit of the
extraction of a session whose turns the first took out or replaced, which replaces what the model
said of them — whenever and by whichever worker that commit happens
(:meth:`EraseDueStore.mark_superseded`, called by :meth:`store.runstate.RunStateStore.mark_digested`;
``session_digests.erase_at_commit`` carries the deletion to it, migration 23). A forget, a cycle's
``finalize``, a backfill and a drain erase deleted text from the files while the counter is above
zero (``worker.knowledge.erase_when_due``) and, once an erase completed, take off what they read
(:meth:`EraseDueStore.settle`).

An erase that does not complete (a reader holding an old snapshot) is counted
(``erase_failures``) and tried again after a wait that doubles with each failure
(:data:`RETRY_BASE_SECONDS` to :data:`RETRY_MAX_SECONDS`, ``erase_retry_at``), not at every cycle:
each attempt rewrites the full-text indexes and waits for the reader. No row reads as zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from store.db import Database

_ERASE_DUE = "erase_due"
_FAILURES = "erase_failures"
_RETRY_AT = "erase_retry_at"
# The wait before the next attempt after the first failed erase; it doubles with each failure.
RETRY_BASE_SECONDS = 60
RETRY_MAX_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class EraseState:
    """What is due: ``due`` deletions since the last completed erase, ``failures`` erases in a row
    that did not complete, the next of which is not tried before ``retry_at`` (Unix seconds)."""

    due: int = 0
    failures: int = 0
    retry_at: int = 0

    def waiting(self, now: float) -> bool:
        """Whether an erase is due but its retry after a failure is not yet. A retry time further
        off than :data:`RETRY_MAX_SECONDS` was set by a clock ahead of ``now`` (another host's, or
        this one's before it was set back): no wait set was that long, so it is not waited for."""
        return bool(self.due and self.failures and now < self.retry_at <= now + RETRY_MAX_SECONDS)

    def as_dict(self) -> dict[str, int | str | None]:
        """``erase_due``, ``erase_failures``, ``erase_retry_at`` (UTC, ``None`` when none failed)."""
        retry_at = datetime.fromtimestamp(self.retry_at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        return {"erase_due": self.due, "erase_failures": self.failures, "erase_retry_at": retry_at if self.failures else None}


class EraseDueStore:
    """Typed access to the erase rows of ``rem_counters`` and ``session_digests.erase_at_commit``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def mark(self, *, extraction_of: str | None = None) -> None:
        """Record that deleted text is due to be erased (in the caller's transaction: the deletion's).
        ``extraction_of``: the session whose turns it took out or replaced, leaving its extraction,
        which quotes them, standing: that extraction's next commit marks again (:meth:`mark_superseded`)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO rem_counters(name, value) VALUES (?, 1) "
                "ON CONFLICT (name) DO UPDATE SET value = rem_counters.value + 1",
                (_ERASE_DUE,),
            )
            if extraction_of is not None:
                conn.execute("UPDATE session_digests SET erase_at_commit = 1 WHERE session_id = ?", (extraction_of,))

    def mark_superseded(self, session_id: str) -> bool:
        """In the transaction committing ``session_id``'s extraction: when a retraction took turns of
        it out (or a sync replaced their words) since its last commit, this commit deletes what the
        model said of them, so an erase is due (:meth:`mark`). One primary-key update otherwise. Returns whether it marked."""
        with self.db.transaction() as conn:
            held = conn.execute(
                "UPDATE session_digests SET erase_at_commit = 0 WHERE session_id = ? AND erase_at_commit = 1", (session_id,)
            ).rowcount
            if held:
                self.mark()
        return bool(held)

    def state(self) -> EraseState:
        """The counters (one read of three primary keys)."""
        rows = dict(self.db.query("SELECT name, value FROM rem_counters WHERE name IN (?, ?, ?)", (_ERASE_DUE, _FAILURES, _RETRY_AT)))
        return EraseState(int(rows.get(_ERASE_DUE, 0)), int(rows.get(_FAILURES, 0)), int(rows.get(_RETRY_AT, 0)))

    def due(self) -> int:
        """How many deletions were marked since the last completed erase (0: none is due)."""
        return self.state().due

    def settle(self, erased: int) -> None:
        """Take off ``erased`` (what :meth:`state` read before an erase that completed): a deletion
        marked since stays due, for the next erase; the failures are over. Never below zero: a leader
        paused past its lease in its erase settles what the leader that took over settled too
        (``finalize``'s erase is not fenced), and a negative count would swallow the next mark."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE rem_counters SET value = CASE WHEN value > ? THEN value - ? ELSE 0 END WHERE name = ?",
                         (erased, erased, _ERASE_DUE))
            conn.execute("DELETE FROM rem_counters WHERE name IN (?, ?)", (_FAILURES, _RETRY_AT))

    def failed(self, now: float) -> EraseState:
        """Count an erase that did not complete at ``now`` (Unix seconds) and set when the next one
        is tried: :data:`RETRY_BASE_SECONDS` after the first failure, doubling, at most
        :data:`RETRY_MAX_SECONDS`. Returns the new state."""
        with self.db.transaction() as conn:
            failures = self.state().failures + 1
            retry_at = int(now) + min(RETRY_BASE_SECONDS * 2 ** min(failures - 1, 16), RETRY_MAX_SECONDS)
            conn.executemany(
                "INSERT INTO rem_counters(name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                [(_FAILURES, failures), (_RETRY_AT, retry_at)],
            )
            return self.state()
