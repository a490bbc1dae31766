"""The one family of errors the stores raise for the worker to catch: :class:`StoreError`.

Callers outside ``store/`` never see a database engine's own exceptions: the SQLite adapter
(``store.db``) turns every ``sqlite3`` error into one of the :class:`DatabaseError` classes below
at its boundary, keeping the original as ``__cause__`` (and its text as the message). Another
backend would map its engine's errors onto the same classes, so the worker's exit codes, one-line
messages, ``rem_runs`` reason codes and ``/healthz`` answers do not depend on the engine.

The family::

    StoreError                      reason_code
    ├── DatabaseError               database-error   the graph database failed (any engine error)
    │   ├── DatabaseUnreadableError                  missing, unopenable, not a database, damaged
    │   │   └── DatabaseDamagedError                 its file damaged: restore it from a backup
    │   ├── DatabaseBusyError                        locked or busy past the timeout
    │   │   └── ConnectionsExhaustedError            no connection to be had while the server answers
    │   ├── DatabaseFullError                        its disk (or size limit) is full; nothing is written
    │   │   └── QueueFullError (also an OSError)     the lazy-edge queue file's disk is full; nothing appended
    │   ├── ConstraintError                          a write broke a constraint (e.g. a duplicate key)
    │   ├── QueryInterruptedError                    a read was stopped at its deadline
    │   └── SchemaTooNewError                        written by a newer rem-cycle; refused untouched
    ├── LeaseLostError                  lock-lost    a lease this worker wrote under was taken over
    ├── UnsafePathError (store.confined)             a link or stray file in the data dir; also an
    │                                                OSError, as the file system refused it
    ├── DataDirAccessError (store.confined)          the file system refused this user a file or
    │                                                folder of the data dir (also an OSError)
    └── ChromaStoreError (store.chroma)  chroma-error / chroma-unavailable

Chroma's errors join the family because Chroma is one of the stores (the memory collections the
worker reads): a caller that handles "a store failed" catches :class:`StoreError` once, and one that
must tell them apart catches the subclass or reads ``reason_code``. Input errors (bad ids, bad
times, merge requests) are not store failures and stay ``ValueError`` subclasses.
"""

from __future__ import annotations


class StoreError(Exception):
    """A store could not do what was asked; ``reason_code`` names the failure in a word."""

    reason_code = "store-error"


class LeaseLostError(StoreError):
    """Another worker took over a lease a transaction was fenced with (this one was silent past
    it: paused, frozen): the transaction was rolled back, nothing written."""

    reason_code = "lock-lost"


class DatabaseError(StoreError):
    """The graph database failed; ``__cause__`` is the engine's own exception."""

    reason_code = "database-error"


class DatabaseUnreadableError(DatabaseError):
    """The database cannot be opened or read: missing, unreadable, not a database, or damaged."""


class DatabaseDamagedError(DatabaseUnreadableError):
    """The database's file is damaged (SQLite's ``SQLITE_CORRUPT``, "database disk image is
    malformed", and ``SQLITE_NOTADB``; PostgreSQL's ``data_corrupted`` and ``index_corrupted``,
    XX001 and XX002): no wait or retry mends it. A cycle that meets it ends
    (``database-damaged``), charging no session, for the operator to restore a backup."""

    reason_code = "database-damaged"


class DatabaseBusyError(DatabaseError):
    """Another connection held the database (locked, busy) for longer than the timeout."""


class DatabaseFullError(DatabaseError):
    """The database could not write for want of space: its disk is full (SQLite's "database or
    disk is full", also at a ``max_page_count``; PostgreSQL's ``disk_full``). The transaction was
    rolled back; the same write succeeds once space is freed."""


class QueueFullError(DatabaseFullError, OSError):
    """The worker's lazy-edge queue file (``REM_LAZY_QUEUE=file``, the file form of the database's
    queue table) could not take an append for want of space: its disk full, a quota, a file size
    limit. Nothing of the append is left in the file. An ``OSError`` too (with its ``errno``), as
    the file system refused it."""


class ConnectionsExhaustedError(DatabaseBusyError):
    """No connection could be had within the timeout while the server answers: every connection of
    this process's pool stayed in use (its own readers and cycle), or the server refuses more (its
    ``max_connections``, the role's or the database's limit). Busy, not broken: restarting the
    process would not give it a connection."""


class ConstraintError(DatabaseError):
    """A write broke one of the schema's constraints (a duplicate key, a missing reference)."""


class QueryInterruptedError(DatabaseError):
    """A read was stopped because it ran past its deadline."""


class SchemaTooNewError(DatabaseError):
    """The database was written by a newer rem-cycle (a schema version this one does not know)."""


# The database failing under whoever asked, not anything they asked for: the server gone or the
# connection cut (a restart, a failover, an administrator), the file unreadable, busy past the
# timeout (a lock another client holds, "too many connections"), or its disk full (a write that
# fits once space is freed) — or the lazy-edge queue file's disk, where the worker's queue is that
# file. No caller's fault: the queue line or the session it lands on is charged nothing
# (pipelines.drain, pipelines.extract.workflow). A statement stopped at its timeout
# (QueryInterruptedError) may be the caller's own: not here (the drain judges it; SESSION_OUTAGES).
DATABASE_OUTAGES: tuple[type[DatabaseError], ...] = (DatabaseUnreadableError, DatabaseBusyError, DatabaseFullError)


# What no session is charged for (pipelines.extract.workflow): the outages, and a statement the
# database stopped at its statement timeout (PostgreSQL's statement_timeout; extraction sets no
# SQLite deadline). A session's statements wait on rows every session writes — the commit counter,
# a shared node, the digest and chunk rows — which another worker's commit or any client may hold
# past the timeout, or the server is too loaded to answer within it: charged, good sessions would be
# made undigestible by the database's state. The drain tells one line's timeout from a stall by a
# probe of table locks (pipelines.drain); a session's waits are row locks, which that probe cannot
# tell from its own. The cost: a session whose own statement always runs past the timeout is
# deferred each cycle (said in its log line, no model call: its answers are stored), never charged.
SESSION_OUTAGES: tuple[type[DatabaseError], ...] = (*DATABASE_OUTAGES, QueryInterruptedError)


def is_database_outage(exc: BaseException, outages: tuple[type[DatabaseError], ...] = DATABASE_OUTAGES) -> bool:
    """Whether ``exc`` is one of ``outages`` (:data:`DATABASE_OUTAGES`, or :data:`SESSION_OUTAGES`)
    — every member of it, when it is a group (what a task group raises when its tasks failed). Pure.

    >>> is_database_outage(ExceptionGroup("map", [DatabaseBusyError("database is locked")]))
    True
    >>> is_database_outage(ExceptionGroup("map", [DatabaseBusyError("locked"), ValueError("bad")]))
    False
    """
    if isinstance(exc, BaseExceptionGroup):
        return all(is_database_outage(member, outages) for member in exc.exceptions)
    return isinstance(exc, outages)


def damage_in(exc: BaseException) -> DatabaseDamagedError | None:
    """The :class:`DatabaseDamagedError` ``exc`` is or holds (a member of a group, at any depth),
    or None. Pure.

    >>> damage_in(ExceptionGroup("map", [ValueError("bad"), DatabaseDamagedError("malformed")]))
    DatabaseDamagedError('malformed')
    """
    if isinstance(exc, BaseExceptionGroup):
        return next((found for member in exc.exceptions if (found := damage_in(member)) is not None), None)
    return exc if isinstance(exc, DatabaseDamagedError) else None


def unstorable_text(exc: UnicodeEncodeError) -> DatabaseError:
    """The :class:`DatabaseError` for a value neither engine can store: text that is no UTF-8 (a
    lone surrogate, which is how Python reads a command-line byte that is not UTF-8). Pure."""
    return DatabaseError(f"the database cannot store text that is not UTF-8 ({exc.reason}: {exc.object[exc.start:exc.end]!r})")
