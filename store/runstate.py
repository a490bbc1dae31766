"""Run state: ``rem_runs`` (one row per cycle) and ``session_digests`` (one row per session).

Lives in the graph database so that a session's graph writes and its digest record commit in one
transaction. ``chunk_results`` (per-chunk extraction outcomes) is in the same file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from config.redact import redact
from store.db import Database, in_batches
from store.graph import dumps, utc_now

RUN_OUTCOMES = ("running", "completed", "failed", "skipped", "interrupted", "abandoned")
DIGEST_STATES = ("undigested", "digested", "undigestible")


@dataclass(frozen=True, slots=True)
class DigestRecord:
    session_id: str
    input_revision: str
    ingested_revision: str | None
    digested_revision: str | None
    state: str
    attempts: int
    defer_reason: str | None
    session_created_at: str | None
    last_run_id: str | None


@dataclass(frozen=True, slots=True)
class SessionRevision:
    """What the cheap scan of Chroma says about one session."""

    session_id: str
    revision: str
    created_at: str | None
    memory_ids: tuple[str, ...] = ()


class RunStateStore:
    """Typed access to ``rem_runs`` and ``session_digests``."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    # --- runs ----------------------------------------------------------------------------
    def start_run(self, run_id: str, *, reason: str, mode: str, owner: str) -> None:
        now = self.clock()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO rem_runs(run_id, reason, mode, started_at, outcome, lease_owner, heartbeat_at) "
                "VALUES (?,?,?,?,?,?,?)",
                (run_id, reason, mode, now, "running", owner, now),
            )

    def heartbeat(self, run_id: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE rem_runs SET heartbeat_at = ? WHERE run_id = ?", (self.clock(), run_id))

    def finish_run(
        self,
        run_id: str,
        *,
        outcome: str,
        phases: dict[str, Any],
        reason_code: str | None = None,
        failure_phase: str | None = None,
        last_successful_phase: str | None = None,
    ) -> None:
        if outcome not in RUN_OUTCOMES:
            raise ValueError(f"unknown run outcome {outcome!r}")
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE rem_runs SET finished_at = ?, outcome = ?, reason_code = ?, failure_phase = ?, "
                "last_successful_phase = ?, phases = ? WHERE run_id = ?",
                (self.clock(), outcome, reason_code, failure_phase, last_successful_phase, dumps(redact(phases)), run_id),
            )

    def mark_abandoned(self, *, older_than_seconds: float, now: datetime | None = None) -> list[str]:
        """Mark ``running`` runs that are silent (see :meth:`silent_runs`: a heartbeat older than
        ``older_than_seconds``, or that far ahead of a clock that went back) as ``abandoned``."""
        with self.db.transaction() as conn:
            stale = [run["run_id"] for run in self.silent_runs(older_than_seconds=older_than_seconds, now=now)]
            conn.executemany(
                "UPDATE rem_runs SET outcome = 'abandoned', reason_code = 'heartbeat-lost', finished_at = ? "
                "WHERE run_id = ?",
                [(self.clock(), run_id) for run_id in stale],
            )
        return stale

    def silent_runs(
        self, *, older_than_seconds: float, now: datetime | None = None, owner: str | None = None
    ) -> list[dict[str, Any]]:
        """``running`` runs (of ``owner`` only, when given) whose heartbeat is older than
        ``older_than_seconds`` — or further than that in the future: a live run rewrites its
        heartbeat with its own clock every few seconds, so one left ahead of the clock stopped
        beating before the clock went back. Read-only: whether such a run is dead or stalled is
        the caller's call."""
        now = now or datetime.now(UTC)
        lease = timedelta(seconds=older_than_seconds)
        early, late = (_stamp(now - lease), _stamp(now + lease))
        sql = "SELECT * FROM rem_runs WHERE outcome = 'running' AND (heartbeat_at IS NULL OR heartbeat_at < ? OR heartbeat_at > ?)"
        params: tuple[str, ...] = (early, late)
        if owner is not None:
            sql, params = sql + " AND lease_owner = ?", (*params, owner)
        return [_run(r) for r in self.db.query(sql + " ORDER BY started_at", params)]

    def running_runs(self) -> list[dict[str, Any]]:
        return [_run(r) for r in self.db.query("SELECT * FROM rem_runs WHERE outcome = 'running' ORDER BY started_at")]

    def recent_runs(self, limit: int = 10) -> list[dict[str, Any]]:
        rows = self.db.query("SELECT * FROM rem_runs ORDER BY started_at DESC, rowid DESC LIMIT ?", (limit,))
        return [_run(r) for r in rows]

    def runs_by_outcome(self) -> dict[str, int]:
        """Runs of each outcome, from the counts the triggers keep (migration 13): one row an outcome."""
        return {r[0]: r[1] for r in self.db.query("SELECT outcome, total FROM rem_run_counts WHERE total > 0")}

    def run_durations(self) -> list[float]:
        """Wall-clock seconds of every finished run."""
        rows = self.db.query("SELECT started_at, finished_at FROM rem_runs WHERE finished_at IS NOT NULL AND outcome != 'running'")
        durations = (_seconds_between(r[0], r[1]) for r in rows)
        return [max(0.0, d) for d in durations if d is not None]

    def phase_durations(self) -> list[tuple[str, float]]:
        """``(phase, seconds)`` for every phase recorded in ``rem_runs.phases``."""
        return [
            (phase, record["duration_ms"] / 1000.0)
            for phases in self._all_phases()
            for phase, record in phases.items()
            if isinstance(record, dict) and _is_number(record.get("duration_ms"))
        ]

    def phase_count_total(self, phase: str, key: str) -> float:
        """Sum over all runs of the count ``key`` recorded by ``phase`` (0 when never recorded)."""
        counts = (phases.get(phase, {}).get(key) if isinstance(phases.get(phase), dict) else None for phases in self._all_phases())
        return float(sum(c for c in counts if _is_number(c)))

    def _all_phases(self) -> Iterator[dict[str, Any]]:
        # Decoded here rather than with the engine's JSON functions, which SQLite and PostgreSQL
        # spell differently; a document that does not parse counts as no phases.
        for row in self.db.query("SELECT phases FROM rem_runs"):
            try:
                phases = json.loads(row[0])
            except (TypeError, ValueError):
                continue
            if isinstance(phases, dict):
                yield phases

    def last_phase_record(self, phase: str) -> dict[str, Any] | None:
        """What ``phase`` recorded in the latest run that completed it, or None. Walks the runs
        newest first (``rem_runs_started``), a page at a time, and stops at the first that has it:
        usually the last. The JSON is read here, not in SQL, so that both engines share the query."""
        before: str | None = None
        while True:
            rows = self.db.query(
                "SELECT started_at, phases FROM rem_runs WHERE (? IS NULL OR started_at < ?) ORDER BY started_at DESC LIMIT 50",
                (before, before),
            )
            for started_at, text in rows:
                try:
                    record = json.loads(text).get(phase)
                except (TypeError, ValueError, AttributeError):
                    continue
                if isinstance(record, dict) and record.get("state") == "completed":
                    return record
            if len(rows) < 50:
                return None
            before = rows[-1][0]

    def digested_since(self, moment: str) -> int:
        """Sessions digested (state ``digested``) whose digest record changed after ``moment``."""
        rows = self.db.query(
            "SELECT COUNT(*) FROM session_digests WHERE state = 'digested' AND updated_at > ?", (moment,)
        )
        return int(rows[0][0])

    def last_finished_by_outcome(self) -> dict[str, str]:
        """Finish time of the latest run of each outcome: one look-up of ``rem_runs_outcome_finished``
        an outcome (a scrape reads it; grouping every run would grow with the history)."""
        rows = self.db.query(
            "SELECT outcome, (SELECT r.finished_at FROM rem_runs r WHERE r.outcome = c.outcome AND r.finished_at IS NOT NULL "
            "ORDER BY r.finished_at DESC LIMIT 1) FROM rem_run_counts c"
        )
        return {r[0]: r[1] for r in rows if r[1] is not None}

    def chunk_totals(self) -> dict[str, dict[str, int]]:
        """Per ``chunk_results`` status: ``{count, tokens_in, tokens_out}``."""
        rows = self.db.query(
            "SELECT status, COUNT(*), COALESCE(SUM(tokens_in), 0), COALESCE(SUM(tokens_out), 0) FROM chunk_results GROUP BY status"
        )
        return {r[0]: {"count": r[1], "tokens_in": int(r[2]), "tokens_out": int(r[3])} for r in rows}

    def failing_chunks(self, limit: int = 20) -> list[dict[str, Any]]:
        """The most recently failed chunk results (no payloads)."""
        rows = self.db.query(
            "SELECT session_id, chunk_id, error_kind, error, attempts, next_attempt_at, updated_at FROM chunk_results "
            "WHERE status = 'failed' ORDER BY updated_at DESC, chunk_id LIMIT ?",
            (limit,),
        )
        return [dict(r) for r in rows]

    # --- session digests -----------------------------------------------------------------
    def get_digests(self, session_ids: Iterable[str] | None = None) -> dict[str, DigestRecord]:
        """Digest records by session id: all of them, or those among ``session_ids``."""
        if session_ids is None:
            return {r["session_id"]: digest_record(r) for r in self.db.query("SELECT * FROM session_digests")}
        found: dict[str, DigestRecord] = {}
        for part, marks in in_batches(sorted(set(session_ids))):
            for r in self.db.query(f"SELECT * FROM session_digests WHERE session_id IN ({marks})", part):
                found[r["session_id"]] = digest_record(r)
        return found

    def changed_sessions(self, revisions: Iterable[SessionRevision]) -> list[SessionRevision]:
        """The sessions whose input revision differs from the one last ingested, oldest first."""
        revisions = list(revisions)
        ingested: dict[str, str | None] = {}
        for part, marks in in_batches(sorted({r.session_id for r in revisions})):
            rows = self.db.query(f"SELECT session_id, ingested_revision FROM session_digests WHERE session_id IN ({marks})", part)
            ingested.update((r[0], r[1]) for r in rows)
        changed = [r for r in revisions if r.session_id not in ingested or ingested[r.session_id] != r.revision]
        return sorted(changed, key=lambda r: (r.created_at or "", r.session_id))

    def session_ids(self) -> set[str]:
        """Every session with a digest record (ids only)."""
        return {r[0] for r in self.db.query("SELECT session_id FROM session_digests")}

    def memory_index(self) -> dict[str, str]:
        """``memory id -> session id`` for every memory row ingested so far."""
        return {r[0]: r[1] for r in self.db.query("SELECT memory_id, session_id FROM memory_index")}

    def sessions_of_memories(self, memory_ids: Iterable[str]) -> dict[str, str]:
        """``memory id -> session id`` for those of ``memory_ids`` ingested so far."""
        found: dict[str, str] = {}
        for part, marks in in_batches(sorted(set(memory_ids))):
            found.update((r[0], r[1]) for r in self.db.query(f"SELECT memory_id, session_id FROM memory_index WHERE memory_id IN ({marks})", part))
        return found

    def memories_of_sessions(self, session_ids: Iterable[str]) -> dict[str, list[str]]:
        """The memory ids each of ``session_ids`` had when it was last ingested."""
        found: dict[str, list[str]] = {}
        for part, marks in in_batches(sorted(set(session_ids))):
            for r in self.db.query(f"SELECT session_id, memory_id FROM memory_index WHERE session_id IN ({marks})", part):
                found.setdefault(r[0], []).append(r[1])
        return found

    def mark_ingested(self, revision: SessionRevision, run_id: str) -> None:
        """Record that ``revision`` of the session (and its memory ids) is in the graph; a changed
        revision resets the extraction state (new content deserves a fresh set of attempts)."""
        now = self.clock()
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM memory_index WHERE session_id = ?", (revision.session_id,))
            conn.executemany(
                "INSERT INTO memory_index(memory_id, session_id) VALUES (?, ?) "
                "ON CONFLICT(memory_id) DO UPDATE SET session_id = excluded.session_id",
                [(memory_id, revision.session_id) for memory_id in revision.memory_ids],
            )
            conn.execute(
                "INSERT INTO session_digests(session_id, input_revision, ingested_revision, state, attempts, "
                "session_created_at, last_run_id, updated_at) VALUES (?,?,?,'undigested',0,?,?,?) "
                "ON CONFLICT(session_id) DO UPDATE SET input_revision = excluded.input_revision, "
                "ingested_revision = excluded.ingested_revision, session_created_at = excluded.session_created_at, "
                "last_run_id = excluded.last_run_id, updated_at = excluded.updated_at, "
                "state = CASE WHEN session_digests.digested_revision = excluded.input_revision "
                "THEN session_digests.state ELSE 'undigested' END, "
                "attempts = CASE WHEN session_digests.digested_revision = excluded.input_revision "
                "THEN session_digests.attempts ELSE 0 END, "
                "defer_reason = CASE WHEN session_digests.digested_revision = excluded.input_revision "
                "THEN session_digests.defer_reason ELSE NULL END",
                (revision.session_id, revision.revision, revision.revision, revision.created_at, run_id, now),
            )

    def require_extraction(self, session_ids: Iterable[str]) -> None:
        """Make these sessions be extracted again although their input revision is the same (a
        turn's row rewritten under its id): the next :meth:`mark_ingested` resets them, and a
        worker extracting one now loses its claim, so its commit of the old text rolls back."""
        session_ids = list(session_ids)
        if not session_ids:
            return
        with self.db.transaction() as conn:
            conn.executemany("DELETE FROM session_claims WHERE session_id = ?", [(sid,) for sid in session_ids])
            conn.executemany(
                "UPDATE session_digests SET state = 'undigested', digested_revision = NULL, attempts = 0 WHERE session_id = ?",
                [(sid,) for sid in session_ids],
            )

    def sessions_to_extract(self, limit: int) -> list[DigestRecord]:
        """Ingested sessions not yet digested at their current revision, oldest first."""
        rows = self.db.query(
            "SELECT * FROM session_digests WHERE state = 'undigested' AND ingested_revision = input_revision "
            "ORDER BY session_created_at, session_id LIMIT ?",
            (limit,),
        )
        return [digest_record(r) for r in rows]

    def begin_commit(self) -> None:
        """Call first in a session's commit transaction: session commits then run one at a time on
        either engine (PostgreSQL: the commit counter's row lock, held to the transaction's end;
        SQLite: its single writer), so what a commit reads — the identity index learning the other
        workers' commits, the nodes it links to — includes every commit before it, and the graph
        does not depend on which worker commits when."""
        with self.db.transaction() as conn:
            conn.execute(f"SELECT value FROM rem_counters WHERE name = 'commit' {self.db.dialect.for_update()}")
            # Something other than a commit changed what identity resolution indexes since the last
            # commit (forget, merge, unmerge, a retraction): a new epoch (see identity_epoch).
            conn.execute(
                "UPDATE rem_counters SET value = value + 1 WHERE name = 'identity_epoch' "
                "AND (SELECT value FROM rem_counters WHERE name = 'identity') "
                "!= (SELECT value FROM rem_counters WHERE name = 'identity_at_commit')"
            )
            conn.execute(
                "UPDATE rem_counters SET value = (SELECT value FROM rem_counters WHERE name = 'identity') "
                "WHERE name = 'identity_at_commit'"
            )

    def mark_digested(self, session_id: str, revision: str, run_id: str) -> None:
        """Call inside the commit transaction of the session's graph writes. The session gets the
        next commit sequence number (``rem_counters``: the counter row also orders concurrent
        commits on engines that do not serialise writers)."""
        with self.db.transaction() as conn:
            seq = conn.execute("UPDATE rem_counters SET value = value + 1 WHERE name = 'commit' RETURNING value").fetchone()[0]
            conn.execute(
                "UPDATE rem_counters SET value = (SELECT value FROM rem_counters WHERE name = 'identity') "
                "WHERE name = 'identity_at_commit'"
            )
            # A newer revision ingested while this one was extracted (the leader's ingest beside a
            # follower) leaves the session to extract again: its new turns are not in this commit.
            conn.execute(
                "UPDATE session_digests SET digested_revision = ?, "
                "state = CASE WHEN input_revision = ? THEN 'digested' ELSE 'undigested' END, defer_reason = NULL, "
                "last_run_id = ?, updated_at = ?, commit_seq = ? WHERE session_id = ?",
                (revision, revision, run_id, self.clock(), seq, session_id),
            )

    def identity_epoch(self) -> str | None:
        """The epoch of what identity resolution indexes, as ``<database instance>:<epoch>``: it
        changes whenever a write other than a session commit changed knowledge nodes' names,
        labels or aliases. ``None`` while such a write is pending (made after the last commit; the
        next commit starts a new epoch)."""
        values = {r[0]: r[1] for r in self.db.query(
            "SELECT name, value FROM rem_counters WHERE name IN ('identity', 'identity_at_commit', 'identity_epoch', 'instance')")}
        if values["identity"] != values["identity_at_commit"]:
            return None
        return f"{values['instance']}:{values['identity_epoch']}"

    def commits_since(self, seq: int | None) -> tuple[int, list[str]]:
        """``(latest commit sequence number, the sessions committed after seq)``: what other
        workers committed since a worker last looked (an index read, whatever the history).
        ``seq`` None: the latest number alone."""
        latest = self.db.query("SELECT value FROM rem_counters WHERE name = 'commit'")[0][0]
        if seq is None or latest == seq:
            return latest, []
        rows = self.db.query("SELECT session_id FROM session_digests WHERE commit_seq > ? ORDER BY commit_seq", (seq,))
        return latest, [r[0] for r in rows]

    def record_failure(self, session_id: str, *, reason: str, run_id: str, max_attempts: int) -> str:
        """Count a failed digest attempt; returns the new state (``undigestible`` past the limit)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE session_digests SET attempts = attempts + 1, defer_reason = ?, last_run_id = ?, "
                "updated_at = ?, state = CASE WHEN attempts + 1 >= ? THEN 'undigestible' ELSE 'undigested' END "
                "WHERE session_id = ?",
                (reason, run_id, self.clock(), max_attempts, session_id),
            )
            row = conn.execute("SELECT state FROM session_digests WHERE session_id = ?", (session_id,)).fetchone()
        return row[0] if row else "undigested"

    def reset_sessions(self, session_ids: Iterable[str] | None = None) -> int:
        """Make undigestible sessions eligible again (all of them when ``session_ids`` is None)."""
        now = self.clock()
        with self.db.transaction() as conn:
            if session_ids is None:
                cur = conn.execute(
                    "UPDATE session_digests SET state = 'undigested', attempts = 0, defer_reason = NULL, "
                    "updated_at = ? WHERE state = 'undigestible'",
                    (now,),
                )
                return cur.rowcount
            cur = conn.executemany(
                "UPDATE session_digests SET state = 'undigested', attempts = 0, defer_reason = NULL, "
                "updated_at = ? WHERE session_id = ? AND state != 'digested'",
                [(now, sid) for sid in session_ids],
            )
            return cur.rowcount

    def digest_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(DIGEST_STATES, 0)
        counts.update({r[0]: r[1] for r in self.db.query("SELECT state, COUNT(*) FROM session_digests GROUP BY state")})
        return counts

    def undigestible_sessions(self, limit: int = 50) -> list[DigestRecord]:
        rows = self.db.query(
            "SELECT * FROM session_digests WHERE state = 'undigestible' ORDER BY updated_at DESC LIMIT ?", (limit,)
        )
        return [digest_record(r) for r in rows]

    def oldest_undigested_created_at(self) -> str | None:
        rows = self.db.query("SELECT MIN(session_created_at) FROM session_digests WHERE state = 'undigested'")
        return rows[0][0] if rows else None

    def newest_digested_created_at(self) -> str | None:
        """Creation time of the newest digested session (``session_digests_state`` answers it
        without reading the others)."""
        rows = self.db.query("SELECT MAX(session_created_at) FROM session_digests WHERE state = 'digested'")
        return rows[0][0] if rows else None

    def sessions_without_turns(self) -> int:
        """Ingested sessions whose latest ingest found no memory rows (every turn gone, or moved to
        another session), by the memory index."""
        rows = self.db.query(
            "SELECT COUNT(*) FROM session_digests AS d WHERE d.ingested_revision IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM memory_index AS m WHERE m.session_id = d.session_id)"
        )
        return int(rows[0][0])


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds_between(start: str | None, end: str | None) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _run(row: Any) -> dict[str, Any]:
    run = dict(row)
    run.pop("rowid", None)  # PostgreSQL's explicit insertion order column (SQLite's is implicit)
    run["phases"] = json.loads(run.get("phases") or "{}")
    return run


def digest_record(row: Any) -> DigestRecord:
    """A ``session_digests`` row as a :class:`DigestRecord`."""
    return DigestRecord(
        session_id=row["session_id"],
        input_revision=row["input_revision"],
        ingested_revision=row["ingested_revision"],
        digested_revision=row["digested_revision"],
        state=row["state"],
        attempts=row["attempts"],
        defer_reason=row["defer_reason"],
        session_created_at=row["session_created_at"],
        last_run_id=row["last_run_id"],
    )
