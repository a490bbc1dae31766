"""Several workers on one database: session claims with leases, and named single-flight locks.

A worker digests a session only while it holds the session's **claim**, a row of
``session_claims`` naming its owner and when the lease runs out. Claiming picks undigested sessions
no live claim covers, oldest first; the owner's heartbeat pushes the lease forward; the claim is
deleted in the transaction that commits the session's graph writes and digest record
(:meth:`ClaimStore.settle`) — a worker whose lease ran out and was taken over finds its claim gone
there, and its commit rolls back (:class:`ClaimLostError`), so no session is digested twice. A
claim whose lease ran out, or whose owner is a process of this host that no longer exists, is
taken over by the next worker that claims.

The single-flight phases (ingest, drain, finalize) hold a **lock**: a row of ``rem_locks`` with
the same lease rules (:class:`LockStore`).

A worker about to ask the model about a chunk's words holds a **text claim**: a row of
``text_claims`` on (extractor fingerprint, text hash), with the same lease rules, deleted when the
call ends (:class:`TextClaimStore`): a worker that finds another's live claim on the same words
waits for its answer instead of paying for them again (:mod:`pipelines.extract.map`).

Times are UTC ISO strings compared as text, read from one clock (:func:`lease_clock`): the
PostgreSQL server's, or on SQLite this host's, so the workers' own clocks need not agree.

The SQL is plain and runs on SQLite and PostgreSQL alike but for one piece,
:meth:`store.dialect.Dialect.skip_locked`: on SQLite a claim runs in a ``BEGIN IMMEDIATE``
transaction, which already excludes every other writer; on PostgreSQL the candidate rows are locked
``FOR UPDATE OF d SKIP LOCKED`` (the digest row: the claim row is absent for an unclaimed session),
so concurrent claimers skip each other's rows instead of queueing on them. A candidate whose claim
another worker committed after this claimer's snapshot is still refused by the claim's
``ON CONFLICT … WHERE`` lease test.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from store.db import Database, in_batches
from store.errors import LeaseLostError, StoreError
from store.graph import utc_now
from store.library_log import get_logger
from store.runstate import DigestRecord, digest_record

log = get_logger(__name__)

# The single-flight lock of a cycle's ingest, drain and finalize phases.
CYCLE_LOCK = "cycle"


class ClaimLostError(StoreError):
    """A session's claim was taken over (its lease ran out) before the session committed."""

    reason_code = "claim-lost"


class SessionGoneError(ClaimLostError):
    """The session was forgotten (or retracted) while this worker extracted it: its digest record
    is gone, and nothing of it may be written back."""


def host_identity() -> str:
    """This host as lease owners name it: the hostname and, where Linux tells them, its boot and
    process-id namespace (``name@boot.pidns``) — two containers of one ``hostname:``, or two
    machines cloned with one name, cannot see each other's processes, so neither may take the
    other's pid for one of its own."""
    name = socket.gethostname()
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()[:8]
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except (OSError, ValueError):
        return name
    return f"{name}@{boot}.{namespace}"


def lock_holder_line() -> str:
    """Who holds a lock file, as this process writes itself into it while it does
    (:func:`store.confined.exclusive_lock`'s ``holder``): pid, host (:func:`host_identity`) and
    since when — what a refused process tells its user."""
    return f"pid {os.getpid()} on {host_identity()} since {utc_now()}"


def worker_owner() -> str:
    """This process as a lease owner: ``host:pid:nonce`` (``host`` is :func:`host_identity`; the
    nonce tells a reused pid apart)."""
    return f"{host_identity()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


OwnerState = Literal["alive", "dead", "unknown"]


def owner_is_dead(owner: str, *, host: str | None = None) -> bool:
    """Whether ``owner`` (:func:`worker_owner`, or a run row's ``host:pid``) is a process of this
    host (the same :func:`host_identity`) that no longer exists — killed, say: its leases need not
    be waited out. An owner elsewhere is never known dead."""
    parts = owner.split(":")
    if len(parts) not in (2, 3) or parts[0] != (host or host_identity()) or not parts[1].isdigit():
        return False
    return _pid_gone(int(parts[1]))


def owner_state(owner: str, *, host: str | None = None, hostname: str | None = None) -> OwnerState:
    """What this host can honestly say of ``owner``'s process (``status``; read-only):

    - ``alive`` / ``dead``: an owner of this host (the same :func:`host_identity`) whose pid exists
      / is gone (:func:`owner_is_dead`);
    - ``dead`` too: an owner an earlier release wrote, ``hostname:pid`` or ``hostname:pid:nonce``
      (no boot and PID namespace), of this hostname, whose pid is gone — no process of that pid runs
      here, so that one is not running here;
    - ``unknown``: anything else — another host's owner, or an earlier release's owner of this
      hostname whose pid exists (a reused pid, or a process of another PID namespace: it cannot be
      told from here).

    Only :func:`owner_is_dead` owners are taken over at once; an earlier release's dead owner keeps
    its leases until they run out."""
    host = host or host_identity()
    parts = owner.split(":")
    if len(parts) not in (2, 3) or not parts[1].isdigit():
        return "unknown"
    if parts[0] == host:
        return "dead" if _pid_gone(int(parts[1])) else "alive"
    legacy = "@" not in parts[0]
    if legacy and parts[0] == (hostname or socket.gethostname()) and _pid_gone(int(parts[1])):
        return "dead"
    return "unknown"


def _pid_gone(pid: int) -> bool:
    """Whether no process of ``pid`` exists in this PID namespace (signal 0: nothing is sent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now() -> datetime:
    return datetime.now(UTC)


def lease_clock(db: Database) -> Callable[[], datetime]:
    """The clock leases on ``db`` are stamped and compared with: on PostgreSQL the server's, so that
    workers on hosts whose clocks disagree still agree on whose lease ran out; on SQLite this
    host's (every worker of the file is on it)."""
    if not db.dialect.postgres:
        return _now
    return lambda: db.query("SELECT clock_timestamp()")[0][0]


class _Leases:
    """What a store of leases knows: its database, the owner it acts for, how long a lease it
    grants and its clock (default :func:`lease_clock`)."""

    def __init__(self, db: Database, *, owner: str, lease_seconds: float, clock: Callable[[], datetime] | None = None) -> None:
        self.db = db
        self.owner = owner
        self.lease = timedelta(seconds=lease_seconds)
        self.clock = clock or lease_clock(db)

    def _push_leases(self, table: str) -> int:
        """Push the lease of every row of ``table`` this owner holds forward; returns how many."""
        now = self.clock()
        with self.db.transaction() as conn:
            return conn.execute(
                f"UPDATE {table} SET heartbeat_at = ?, lease_expires_at = ? WHERE owner = ?",
                (_stamp(now), _stamp(now + self.lease), self.owner),
            ).rowcount


# A session a claim takes, as its digest row ``d`` says: ingested, not digested at its revision.
_EXTRACTABLE = "d.state = 'undigested' AND d.ingested_revision = d.input_revision"


class ClaimStore(_Leases):
    """``session_claims``: which worker digests which session, until when."""

    def claim(self, limit: int, *, backing_off: tuple[str, str] | None = None) -> list[DigestRecord]:
        """Claim up to ``limit`` sessions that are ingested, not digested at their revision and not
        claimed by a live worker, oldest first; returns their digest records.

        ``backing_off`` — ``(fingerprint, now)``, the extractor's fingerprint and the run-state
        time its backoffs are compared with — leaves out the sessions with a failed chunk of that
        extractor whose retry time (``chunk_results.next_attempt_at``) is after ``now``: such a
        session cannot commit before that chunk is tried again, so reading and planning it every
        cycle would cost a Chroma read per backing-off session per cycle for nothing.
        ``rem-cycle retry`` deletes the failed rows, which makes the session eligible at once.

        A session with a retraction whose queue lines are not withdrawn yet (``queue_withdrawals``,
        store/withdrawals.py: its withdrawal failed, a drain held the files) waits until they are:
        the record names the lines by session and turn, not by when they were queued, so the lines
        this extraction queued would be withdrawn with them (its rows came back to Chroma
        meanwhile) and their edges lost. The claim or digest row a retraction takes makes an
        extraction already under way roll back (:meth:`settle`): every line a record withdraws was
        queued before it. One look-up in a table that is usually empty."""
        now = self.clock()
        stamp, expires = _stamp(now), _stamp(now + self.lease)
        waiting, params = "", (stamp, limit)
        if backing_off is not None:
            waiting = (
                "AND NOT EXISTS (SELECT 1 FROM chunk_results AS r WHERE r.session_id = d.session_id "
                "AND r.status = 'failed' AND r.fingerprint = ? AND r.next_attempt_at > ?) "
            )
            params = (stamp, *backing_off, limit)
        with self.db.transaction() as conn:
            _drop_dead_owners(conn, "session_claims")
            rows = conn.execute(
                "SELECT d.*, c.owner AS claimed_by FROM session_digests AS d "
                "LEFT JOIN session_claims AS c ON c.session_id = d.session_id "
                f"WHERE {_EXTRACTABLE} "
                "AND NOT EXISTS (SELECT 1 FROM queue_withdrawals AS w WHERE w.chunk_key = d.session_id) "
                f"AND (c.session_id IS NULL OR c.lease_expires_at < ?) {waiting}"
                f"ORDER BY d.session_created_at, d.session_id LIMIT ? {self.db.dialect.skip_locked('d')}",
                params,
            ).fetchall()
            claimed = []
            for row in rows:
                cursor = conn.execute(
                    "INSERT INTO session_claims(session_id, owner, claimed_at, heartbeat_at, lease_expires_at) "
                    "VALUES (?,?,?,?,?) ON CONFLICT(session_id) DO UPDATE SET owner = excluded.owner, "
                    "claimed_at = excluded.claimed_at, heartbeat_at = excluded.heartbeat_at, "
                    "lease_expires_at = excluded.lease_expires_at WHERE session_claims.lease_expires_at < excluded.claimed_at",
                    (row["session_id"], self.owner, stamp, stamp, expires),
                )
                if cursor.rowcount == 1:
                    claimed.append(row)
        for row in claimed:
            if row["claimed_by"] is not None:
                log.info("session claim taken over: its lease ran out", session_id=row["session_id"], previous_owner=row["claimed_by"])
        return [digest_record(row) for row in claimed]

    def heartbeat(self) -> int:
        """Push the lease of every claim this worker holds forward; returns how many it holds."""
        return self._push_leases("session_claims")

    def settle(self, session_id: str) -> None:
        """Delete this worker's claim on ``session_id`` — call inside the transaction that commits
        the session: raises :class:`ClaimLostError` (rolling the commit back) when the claim is no
        longer this worker's (its lease ran out and another took it over; a ``forget`` of the
        session or of one of its turns took it back) or the session's digest record is gone (the
        session was forgotten or retracted while it was extracted: its commit would bring it back;
        :class:`SessionGoneError`)."""
        with self.db.transaction() as conn:
            _still_there(conn, self.db, session_id)  # first: forget takes the digest row, then the claims
            gone = conn.execute(
                "DELETE FROM session_claims WHERE session_id = ? AND owner = ?", (session_id, self.owner)
            ).rowcount
            if gone != 1:
                raise ClaimLostError(f"the claim on session {session_id} was taken over or taken back; not committed")

    def hold(self, session_id: str) -> None:
        """Check that the claim on ``session_id`` is still this worker's — call inside a transaction
        that writes about the session without committing it (a failed attempt): raises
        :class:`ClaimLostError` (rolling the write back) when another worker took it over. The claim
        row stays locked to the transaction's end (PostgreSQL; SQLite's writer lock already)."""
        with self.db.transaction() as conn:
            row = conn.execute(
                f"SELECT owner FROM session_claims WHERE session_id = ? {self.db.dialect.for_update()}", (session_id,)
            ).fetchone()
            if row is None:
                _still_there(conn, self.db, session_id)
        if row is None or row[0] != self.owner:
            raise ClaimLostError(f"the claim on session {session_id} was taken over (its lease ran out); not recorded")

    def release(self, session_ids: Iterable[str] | None = None) -> int:
        """Give up this worker's claims (all of them when ``session_ids`` is None)."""
        with self.db.transaction() as conn:
            if session_ids is None:
                return conn.execute("DELETE FROM session_claims WHERE owner = ?", (self.owner,)).rowcount
            released = 0
            for part, marks in in_batches(sorted(set(session_ids))):
                released += conn.execute(
                    f"DELETE FROM session_claims WHERE owner = ? AND session_id IN ({marks})", (self.owner, *part)
                ).rowcount
            return released


def withdrawal_waits(db: Database, *, named: int = 5) -> dict[str, Any]:
    """``{"sessions": n, "first": [...]}``: the ``n`` sessions :meth:`ClaimStore.claim` leaves out
    while a withdrawal record of theirs is pending (``queue_withdrawals``: a drain holding the queue
    files past the wait, a database error), the first ``named`` of them oldest first. One query led
    by the usually empty ``queue_withdrawals`` (``CROSS JOIN``: SQLite keeps that order, then reads
    ``session_digests`` by its primary key), however many sessions wait to be extracted."""
    rows = db.query(
        "SELECT d.session_id, COUNT(*) OVER () FROM (SELECT DISTINCT chunk_key FROM queue_withdrawals) AS w "
        f"CROSS JOIN session_digests AS d WHERE d.session_id = w.chunk_key AND {_EXTRACTABLE} "
        "ORDER BY d.session_created_at, d.session_id LIMIT ?",
        (named,),
    )
    return {"sessions": int(rows[0][1]) if rows else 0, "first": [row[0] for row in rows]}


def _still_there(conn: Any, db: Database, session_id: str) -> None:
    """Raise :class:`SessionGoneError` when ``session_id`` has no digest record any more (its row
    stays locked to the transaction's end: PostgreSQL; SQLite's writer lock already)."""
    if conn.execute(f"SELECT 1 FROM session_digests WHERE session_id = ? {db.dialect.for_update()}", (session_id,)).fetchone() is None:
        raise SessionGoneError(f"session {session_id} was forgotten while it was extracted; not committed")


def _drop_dead_owners(conn: Any, table: str) -> int:
    """Delete the rows of ``table`` (``session_claims``, ``rem_locks``, ``text_claims``) owned by
    processes of this host that are gone, and return how many: a killed worker's leases are taken
    over at once, not after they run out."""
    owners = [r[0] for r in conn.execute(f"SELECT DISTINCT owner FROM {table}").fetchall()]  # noqa: S608 - fixed names
    dropped = 0
    for owner in owners:
        if owner_is_dead(owner):
            log.info("lease owner gone: its leases are taken over", table=table, owner=owner)
            dropped += conn.execute(f"DELETE FROM {table} WHERE owner = ?", (owner,)).rowcount  # noqa: S608 - fixed names
    return dropped


def drop_every_lease(db: Database) -> int:
    """Delete every lease — the locks of ``rem_locks``, the claims of ``session_claims`` and
    ``text_claims`` — and return how many. For a restore (every worker stopped): the backup's leases
    belong to the processes of the backup's time, and would hold the next cycles off until they ran out."""
    with db.transaction() as conn:
        return sum(conn.execute(f"DELETE FROM {table}").rowcount  # noqa: S608 - fixed names
                   for table in ("rem_locks", "session_claims", "text_claims"))


def lease_holders(db: Database) -> dict[str, list[dict[str, Any]]]:
    """Who holds what (``status``): each lock's holder and lease, per owner how many sessions it
    has claimed and until when, and per owner how many texts it is asking the model about
    (``texts``; read-only; the tables hold live leases only, so this is small).
    ``owner_state``: what this host can tell of the owner's process (:func:`owner_state`);
    ``owner_gone``: it is ``dead``; ``taken_at_once``: the next worker takes its leases at once,
    whatever their time (:func:`owner_is_dead`) — else when they run out."""
    locks = db.query("SELECT name, owner, acquired_at, lease_expires_at FROM rem_locks ORDER BY name")
    claims = db.query(
        "SELECT owner, COUNT(*) AS sessions, MAX(heartbeat_at) AS heartbeat_at, MIN(lease_expires_at) AS lease_expires_at "
        "FROM session_claims GROUP BY owner ORDER BY owner"
    )
    texts = db.query(
        "SELECT owner, COUNT(*) AS texts, MIN(lease_expires_at) AS lease_expires_at FROM text_claims GROUP BY owner ORDER BY owner"
    )
    return {kind: [_judged(dict(r)) for r in found] for kind, found in (("locks", locks), ("claims", claims), ("texts", texts))}


def _judged(holder: dict[str, Any]) -> dict[str, Any]:
    state = owner_state(holder["owner"])
    return {**holder, "owner_state": state, "owner_gone": state == "dead", "taken_at_once": owner_is_dead(holder["owner"])}


class LockStore(_Leases):
    """``rem_locks``: named leases, one holder each (the single-flight phases: :data:`CYCLE_LOCK`)."""

    def acquire(self, name: str) -> bool:
        """Take the lock ``name`` unless a live holder has it (its lease running, its process alive);
        ``True`` when this owner holds it now."""
        now = self.clock()
        stamp, expires = _stamp(now), _stamp(now + self.lease)
        with self.db.transaction() as conn:
            _drop_dead_owners(conn, "rem_locks")
            return conn.execute(
                "INSERT INTO rem_locks(name, owner, acquired_at, heartbeat_at, lease_expires_at) VALUES (?,?,?,?,?) "
                "ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, acquired_at = excluded.acquired_at, "
                "heartbeat_at = excluded.heartbeat_at, lease_expires_at = excluded.lease_expires_at "
                "WHERE rem_locks.lease_expires_at < excluded.acquired_at OR rem_locks.owner = excluded.owner",
                (name, self.owner, stamp, stamp, expires),
            ).rowcount == 1

    def holder(self, name: str) -> str | None:
        """Who holds ``name`` (lease running or not), or None."""
        rows = self.db.query("SELECT owner FROM rem_locks WHERE name = ?", (name,))
        return rows[0][0] if rows else None

    def heartbeat(self, name: str) -> bool:
        """Push this owner's lease on ``name`` forward; ``False`` when it no longer holds it."""
        now = self.clock()
        with self.db.transaction() as conn:
            return conn.execute(
                "UPDATE rem_locks SET heartbeat_at = ?, lease_expires_at = ? WHERE name = ? AND owner = ?",
                (_stamp(now), _stamp(now + self.lease), name, self.owner),
            ).rowcount == 1

    def still_held(self, name: str) -> None:
        """Inside the caller's transaction: renew this owner's lease on ``name`` — the row stays
        locked until that transaction ends, so no other worker takes the lock over before it
        commits — or raise :class:`LeaseLostError` (rolling it back) when another owner has."""
        if not self.heartbeat(name):
            raise LeaseLostError(f"the lock {name!r} was taken over ({self.holder(name) or 'released'}) while this worker was "
                                 "silent past its lease")

    def release(self, name: str) -> None:
        """Give the lock up (nothing happens when this owner does not hold it)."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM rem_locks WHERE name = ? AND owner = ?", (name, self.owner))


# What a text claim found (:meth:`TextClaimStore.claim`): ``mine`` — this worker asks the model and
# must :meth:`~TextClaimStore.land` the claim; ``answered`` — an answer of the words is stored (reuse
# it, no claim taken); ``held`` — another live worker is asking the model about them.
TextClaimState = Literal["mine", "answered", "held"]


class TextClaimStore(_Leases):
    """``text_claims``: which worker is asking the model about which words, until when.

    A claim's lease is pushed forward by the cycle's heartbeat (:meth:`heartbeat`) while the call
    runs, and the row is deleted when the call ends, answered or not (:meth:`land`): the table holds
    the calls in progress only. A crashed worker's rows are taken over one by one when claimed again
    (lease run out, or owner a dead process of this host), and swept at the start of each extract
    phase (:meth:`sweep`, through ``text_claims_lease``: the expired rows only)."""

    def claim(self, fingerprint: str, text_hash: str) -> TextClaimState:
        """Claim the words ``text_hash`` for extractor ``fingerprint``, unless an ``ok`` answer of
        them is stored (``answered``, no claim left) or another live worker holds the claim
        (``held``). A claim whose lease ran out, or whose owner is a process of this host that no
        longer exists, is taken over.

        The answer is looked for after the claim's statement, never before: that statement waits
        for a holder's transaction deleting its claim (:meth:`land`), and on PostgreSQL (READ
        COMMITTED: each statement reads what was committed when it began) only a read begun after
        it sees an answer the holder committed meanwhile — read before, it was missed, and the
        words taken over and paid for again. On SQLite the transaction is serial anyway."""
        now = self.clock()
        stamp, expires = _stamp(now), _stamp(now + self.lease)
        with self.db.transaction() as conn:
            for _ in range(2):  # the second time after a dead holder's rows went
                taken = conn.execute(
                    "INSERT INTO text_claims(fingerprint, text_hash, owner, claimed_at, heartbeat_at, lease_expires_at) "
                    "VALUES (?,?,?,?,?,?) ON CONFLICT(fingerprint, text_hash) DO UPDATE SET owner = excluded.owner, "
                    "claimed_at = excluded.claimed_at, heartbeat_at = excluded.heartbeat_at, "
                    "lease_expires_at = excluded.lease_expires_at "
                    "WHERE text_claims.lease_expires_at < excluded.claimed_at OR text_claims.owner = excluded.owner",
                    (fingerprint, text_hash, self.owner, stamp, stamp, expires),
                ).rowcount == 1
                if taken:
                    break
                holder = conn.execute(
                    "SELECT owner FROM text_claims WHERE fingerprint = ? AND text_hash = ?", (fingerprint, text_hash)
                ).fetchone()
                if holder is None or not owner_is_dead(holder[0]):
                    break
                log.info("text claim owner gone: its claims are taken over", owner=holder[0])
                conn.execute("DELETE FROM text_claims WHERE owner = ?", (holder[0],))
            if conn.execute(
                "SELECT 1 FROM chunk_results WHERE text_hash = ? AND fingerprint = ? AND status = 'ok' LIMIT 1",
                (text_hash, fingerprint),
            ).fetchone() is not None:
                if taken:
                    conn.execute("DELETE FROM text_claims WHERE fingerprint = ? AND text_hash = ? AND owner = ?",
                                 (fingerprint, text_hash, self.owner))
                return "answered"
        return "mine" if taken else "held"

    def land(self, fingerprint: str, text_hash: str) -> None:
        """The call this worker made on the words ended (answered or not): delete its claim."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM text_claims WHERE fingerprint = ? AND text_hash = ? AND owner = ?",
                         (fingerprint, text_hash, self.owner))

    def heartbeat(self) -> int:
        """Push the lease of every text claim this worker holds forward; returns how many it holds."""
        return self._push_leases("text_claims")

    def sweep(self) -> int:
        """Delete this worker's text claims (an earlier cycle's that could not land them: the
        database dropped its connection), the expired ones and those of dead processes of this host
        (a crashed worker's); returns how many were deleted. Reads the live claims only."""
        stamp = _stamp(self.clock())
        with self.db.transaction() as conn:
            return (_drop_dead_owners(conn, "text_claims")
                    + conn.execute("DELETE FROM text_claims WHERE owner = ?", (self.owner,)).rowcount
                    + conn.execute("DELETE FROM text_claims WHERE lease_expires_at < ?", (stamp,)).rowcount)

    def release(self) -> int:
        """Give up every text claim this worker holds (the end of an extract phase)."""
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM text_claims WHERE owner = ?", (self.owner,)).rowcount
