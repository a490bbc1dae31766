"""Recording a cycle that crashed outside its phases: no failure of any kind goes unrecorded.

A phase's own failure is recorded by the cycle (``worker.cycle``). What is left is a crash around
the phases — the lock file, the database or the run row could not be opened or written (typically:
the process ran out of file descriptors) — which must still become a ``failed`` row of
``rem_runs`` with a reason code. The daemon opens one :class:`FailureRecorder` at start-up, while
descriptors are plentiful, and keeps its connection: in WAL mode a write on an open connection
needs no new descriptor, so the row can be written even when the failure was running out of them.
What cannot be written at once is kept and written at the next chance (before the next cycle).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from config import Settings
from store.backend import open_database
from store.db import Database
from store.errors import ConstraintError, DatabaseDamagedError, DatabaseError, StoreError
from store.library_log import get_logger
from store.runstate import RunStateStore

log = get_logger(__name__)

FD_EXHAUSTED = (errno.EMFILE, errno.ENFILE)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack = [exc]
    while stack:
        link = stack.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        if isinstance(link, BaseExceptionGroup):
            stack.extend(link.exceptions)
        stack.extend(x for x in (link.__cause__, link.__context__) if x is not None)


def failure_reason(exc: BaseException) -> str:
    """The ``rem_runs.reason_code`` of a cycle that crashed with ``exc`` (its causes and group
    members included): ``too-many-open-files``, ``database-damaged``, ``database-error``,
    ``os-error`` or ``crashed``. Pure."""
    links = list(_causes(exc))
    if any(isinstance(link, OSError) and link.errno in FD_EXHAUSTED for link in links):
        return "too-many-open-files"
    if any(isinstance(link, DatabaseDamagedError) for link in links):
        return DatabaseDamagedError.reason_code
    if any(isinstance(link, DatabaseError) for link in links):
        return "database-error"
    if any(isinstance(link, OSError) for link in links):
        return "os-error"
    return "crashed"


def damage_message(exc: BaseException) -> str | None:
    """What a cycle that met a damaged graph database says (a :class:`DatabaseDamagedError` among
    ``exc``'s causes and group members): the database's words, on one line, and what to do, as no
    later cycle mends it; None for any other failure. Pure."""
    damage = next((link for link in _causes(exc) if isinstance(link, DatabaseDamagedError)), None)
    if damage is None:
        return None
    return (f"the graph database is damaged ({' '.join(str(damage).split())}): no cycle can mend it; stop the "
            "workers and restore it from a backup (rem-cycle restore BACKUP)")


@dataclass(frozen=True, slots=True)
class RunFailure:
    """A crashed cycle's ``rem_runs`` row. ``row_started``: the run's ``running`` row exists."""

    run_id: str
    reason: str
    mode: str
    owner: str
    started_at: str
    finished_at: str
    reason_code: str
    failure_phase: str
    last_successful_phase: str | None
    phases: dict[str, Any]
    row_started: bool


@dataclass
class FailureRecorder:
    """Writes :class:`RunFailure` rows; keeps those it cannot write yet (see the module doc)."""

    settings: Settings
    pending: list[RunFailure] = field(default_factory=list)
    # The daemon's recorder: it flushes what is pending before each cycle. A ``--once`` recorder
    # never does, so its log line must not promise a retry.
    retries: bool = False
    _db: Database | None = field(default=None, init=False, repr=False)
    _keep: bool = field(default=False, init=False, repr=False)  # opened: keep a connection

    def open(self) -> None:
        """Open (creating or migrating) the database and keep the connection for later writes."""
        self._keep = True
        self._db = open_database(self.settings)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def record(self, failure: RunFailure) -> bool:
        """Write ``failure`` (and any still pending); False when it is kept for later."""
        self.pending.append(failure)
        return self.flush()

    def flush(self) -> bool:
        """Write the pending failures, oldest first; False (logged) when the database refused."""
        if not self.pending:
            return True
        try:
            try:
                self._write_pending()
            except StoreError:
                if self._db is None or not self._db.broken:
                    raise
                self._write_pending()  # on a new connection: the server had dropped the kept one
        except (StoreError, OSError) as exc:
            event = "cycle failure not recorded in rem_runs yet" + (", will retry before the next cycle" if self.retries else "")
            log.error(event, error=str(exc), pending=[f.run_id for f in self.pending])
            return False
        return True

    def _write_pending(self) -> None:
        if self._keep and (self._db is None or self._db.broken):
            # The kept connection is gone (a PostgreSQL restart dropped it, or reopening failed
            # while the server was down): keep a new one.
            self.close()
            self._db = open_database(self.settings)
        db = self._db or open_database(self.settings)
        try:
            while self.pending:
                _write(db, self.pending[0])
                self.pending.pop(0)
        finally:
            if db is not self._db:
                db.close()


def _write(db: Database, failure: RunFailure) -> None:
    with db.transaction():
        if not failure.row_started:
            try:
                RunStateStore(db, clock=lambda: failure.started_at).start_run(
                    failure.run_id, reason=failure.reason, mode=failure.mode, owner=failure.owner
                )
            except ConstraintError:
                pass  # the row was written after all (the crash came just after)
        RunStateStore(db, clock=lambda: failure.finished_at).finish_run(
            failure.run_id,
            outcome="failed",
            phases=failure.phases,
            reason_code=failure.reason_code,
            failure_phase=failure.failure_phase,
            last_successful_phase=failure.last_successful_phase,
        )
