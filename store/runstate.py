"""Run state: ``rem_runs`` (one row per cycle) and ``session_digests`` (one row per session).

Lives in the graph database so that a session's graph writes and its digest record commit in one
transaction. ``chunk_results`` (per-chunk extraction outcomes) is in the same file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from config.redact import redact
from store.db import Database, fold_changes, in_batches
from store.erasure import EraseDueStore
from store.graph import dumps, utc_now

RUN_OUTCOMES = ("running", "completed", "failed", "skipped", "interrupted", "abandoned")
DIGEST_STATES = ("undigested", "digested", "undigestible")

# The run histograms' bucket bounds, in seconds (``rem_cycle_cycle_duration_seconds``,
# ``rem_cycle_phase_duration_seconds``), ascending to ``inf``: ``run_stats`` keeps a count per bound.
CYCLE_BUCKETS: tuple[float, ...] = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, math.inf)
PHASE_BUCKETS: tuple[float, ...] = (0.05, 0.25, 1, 5, 15, 60, 300, 900, 3600, math.inf)
# ``run_stats`` series: the cycle histogram, a histogram per phase (``phase:<name>``), and the chunks
# the extract phases reused; ``SUM`` is the bound of a series' sum.
CYCLE_SERIES, PHASE_SERIES, REUSED_SERIES, SUM = "cycle", "phase:", "chunks_reused", "sum"
_STAT_COLUMNS = "started_at, finished_at, outcome, phases"


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
    # Whether an extraction of the session has committed since its digest row was made
    # (``commit_seq`` set; a forget of the session deletes the row): it may have queued lines.
    committed: bool = False


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
            self._accounted(conn, run_id, lambda: conn.execute(
                "UPDATE rem_runs SET finished_at = ?, outcome = ?, reason_code = ?, failure_phase = ?, "
                "last_successful_phase = ?, phases = ? WHERE run_id = ?",
                (self.clock(), outcome, reason_code, failure_phase, last_successful_phase, dumps(redact(phases)), run_id),
            ))

    def prune_runs(self, *, finished_before: str) -> int:
        """Delete the runs that finished before ``finished_before``, but each outcome's latest
        (``rem_cycle_last_cycle_finished_timestamp_seconds``) and never a running one; returns
        how many went. What they counted stays counted: ``rem_run_counts`` gets back what its
        delete trigger takes, and ``run_stats`` is not touched — so nothing is pruned until
        ``run_stats`` is built (the first finish after migration 17 reads every run). Each outcome
        is one range of ``rem_runs_outcome_finished``: the cost of the runs that go."""
        pruned = 0
        with self.db.transaction() as conn:
            built = conn.execute("SELECT value FROM rem_counters WHERE name = 'run_stats'").fetchone()
            if built is None or not built[0]:
                return 0
            for outcome in RUN_OUTCOMES:
                if outcome == "running":
                    continue
                latest = conn.execute("SELECT MAX(finished_at) FROM rem_runs WHERE outcome = ?", (outcome,)).fetchone()[0]
                if latest is None:
                    continue
                gone = conn.execute(
                    "DELETE FROM rem_runs WHERE outcome = ? AND finished_at < ? AND finished_at < ?", (outcome, finished_before, latest)
                ).rowcount
                if gone:
                    conn.execute("UPDATE rem_run_counts SET total = total + ? WHERE outcome = ?", (gone, outcome))
                    pruned += gone
        return pruned

    def mark_abandoned(self, *, older_than_seconds: float, now: datetime | None = None) -> list[str]:
        """Mark ``running`` runs that are silent (see :meth:`silent_runs`: a heartbeat older than
        ``older_than_seconds``, or that far ahead of a clock that went back) as ``abandoned``."""
        with self.db.transaction() as conn:
            stale = [run["run_id"] for run in self.silent_runs(older_than_seconds=older_than_seconds, now=now)]
            for run_id in stale:
                self._accounted(conn, run_id, lambda run_id=run_id: conn.execute(
                    "UPDATE rem_runs SET outcome = 'abandoned', reason_code = 'heartbeat-lost', finished_at = ? WHERE run_id = ?",
                    (self.clock(), run_id),
                ))
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

    def run_stats(self) -> dict[tuple[str, str], float]:
        """The run histograms and the chunks reused, as ``{(series, bound): value}`` (see
        :func:`run_contribution`): the rows of ``run_stats``, which each finish keeps in step
        (migration 17) — a read of a few dozen rows, whatever the run history. Until the first
        run finishes after that migration they are not built: every run is read, as before."""
        built = self.db.query("SELECT value FROM rem_counters WHERE name = 'run_stats'")
        if built and built[0][0]:
            return {(r[0], r[1]): float(r[2]) for r in self.db.query("SELECT series, bound, value FROM run_stats")}
        return _summed(run_contribution(r) for r in self.db.query(f"SELECT {_STAT_COLUMNS} FROM rem_runs"))

    def _accounted(self, conn: Any, run_id: str, change: Callable[[], object]) -> None:
        """Make ``change`` (a write to run ``run_id``'s row) inside ``conn``'s transaction and keep
        ``run_stats`` in step: the row's contribution before it out, after it in (a run finished
        twice — abandoned by a peer, then finishing itself — counts once). The first writer after
        migration 17 builds the table from every run, once (the ``run_stats`` counter row, held
        to the transaction's end, keeps a concurrent finish from being counted twice or never)."""
        built = conn.execute(f"SELECT value FROM rem_counters WHERE name = 'run_stats' {self.db.dialect.for_update()}").fetchone()
        if built is None or not built[0]:
            change()
            if built is not None:
                _add_stats(conn, _summed(run_contribution(r) for r in conn.execute(f"SELECT {_STAT_COLUMNS} FROM rem_runs").fetchall()))
                conn.execute("UPDATE rem_counters SET value = 1 WHERE name = 'run_stats'")
            return
        before = conn.execute(f"SELECT {_STAT_COLUMNS} FROM rem_runs WHERE run_id = ?", (run_id,)).fetchone()
        change()
        after = conn.execute(f"SELECT {_STAT_COLUMNS} FROM rem_runs WHERE run_id = ?", (run_id,)).fetchone()
        delta = run_contribution(after) if after is not None else {}
        for key, value in (run_contribution(before) if before is not None else {}).items():
            delta[key] = delta.get(key, 0.0) - value
        _add_stats(conn, delta)

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
        """Sessions digested (state ``digested``) whose digest record changed after ``moment``:
        a range of ``session_digests_updated`` (migration 17), the rows changed since."""
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

    def newest_finished(self) -> dict[str, Any] | None:
        """The run that finished last, or None: :meth:`last_finished_by_outcome`'s look-ups, then
        that run's row (``rem_runs_outcome_finished``): the same cost whatever the run history."""
        last = self.last_finished_by_outcome()
        if not last:
            return None
        outcome, finished_at = max(last.items(), key=lambda item: item[1])
        rows = self.db.query("SELECT * FROM rem_runs WHERE outcome = ? AND finished_at = ? LIMIT 1", (outcome, finished_at))
        return _run(rows[0]) if rows else None

    def chunk_totals(self) -> dict[str, dict[str, int]]:
        """Per ``chunk_results`` status: ``{count, tokens_in, tokens_out}`` (:meth:`state_totals`)."""
        return {name: {"count": count, "tokens_in": tokens_in, "tokens_out": tokens_out}
                for name, (count, tokens_in, tokens_out) in self.state_totals("chunk").items()}

    def state_totals(self, kind: str) -> dict[str, tuple[int, int, int]]:
        """``kind`` ``session`` (digests by state) or ``chunk`` (chunk results by status): per name,
        ``(rows, tokens_in, tokens_out)`` — the folded counts plus the changes the triggers recorded
        since (migration 17): O(states + changes), never O(sessions) or O(chunks)."""
        rows = self.db.query(
            "SELECT name, SUM(total), SUM(tokens_in), SUM(tokens_out) FROM (SELECT name, total, tokens_in, tokens_out "
            "FROM state_counts WHERE kind = ? UNION ALL SELECT name, delta, tokens_in, tokens_out FROM state_count_changes "
            "WHERE kind = ?) AS c GROUP BY name HAVING SUM(total) != 0",
            (kind, kind),
        )
        return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}

    def fold_counts(self) -> int:
        """Fold the recorded state-count changes into ``state_counts`` (:func:`store.db.fold_changes`);
        returns how many were folded."""
        with self.db.transaction() as conn:
            return fold_changes(conn, changes="state_count_changes", totals="state_counts", extra=("tokens_in", "tokens_out"))

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

    def sync_again(self, session_ids: Iterable[str]) -> None:
        """Forget the revision last ingested of ``session_ids`` (their rows were written again
        under the same ids), so that every later scan finds them changed until a sync marks them
        ingested: a full scan after a stopped or limited ingest has no mark to say they came back."""
        with self.db.transaction() as conn:
            for part, marks in in_batches(sorted(set(session_ids))):
                conn.execute(f"UPDATE session_digests SET ingested_revision = NULL WHERE session_id IN ({marks})", part)

    def session_ids(self) -> set[str]:
        """Every session with a digest record (ids only)."""
        return {r[0] for r in self.db.query("SELECT session_id FROM session_digests")}

    def memory_index(self) -> dict[str, str]:
        """``memory id -> session id`` for every memory row ingested so far."""
        return {r[0]: r[1] for r in self.db.query("SELECT memory_id, session_id FROM memory_index")}

    def ingested_payloads(self, first: str, last: str) -> dict[str, str]:
        """``memory id -> payloadHash`` of its MEMORY node, for the memory rows ingested so far
        with an id from ``first`` to ``last`` (byte order on both engines, which is the order of
        Python's ``sorted`` too: UTF-8 keeps code point order) that have one: what the graph (and the extraction) took of the turn — its text's
        hash and the metadata it reads — for a full scan to compare with the rows Chroma holds now.
        A range, not a list of ids: one seek of the primary key, where an ``IN`` list of a thousand
        ids costs PostgreSQL some 25 ms to bind and look up."""
        payload = self.db.dialect.json_text("n.properties", "payloadHash")
        rows = self.db.query(f"SELECT m.memory_id, {payload} FROM memory_index AS m JOIN nodes AS n ON n.id = 'memory:' || m.memory_id "
                             "WHERE m.memory_id BETWEEN ? AND ?", (first, last))
        return {r[0]: r[1] for r in rows if r[1]}

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

    def drop_retracted_turns(self, session_id: str, memory_ids: Iterable[str]) -> None:
        """Take turns whose rows left Chroma out of ``session_id``'s memory index, in the caller's
        transaction with their retraction: the session no longer has them, wherever the retraction
        ran (a cycle's ingest, whose :meth:`mark_ingested` then writes the same index, or
        ``rem-cycle backfill``, which has no revision to mark). Its ``turns`` count follows (triggers)."""
        with self.db.transaction() as conn:
            conn.executemany("DELETE FROM memory_index WHERE session_id = ? AND memory_id = ?",
                             [(session_id, memory_id) for memory_id in memory_ids])

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
            # A new session's memory rows went in before its digest row (their triggers found none
            # to count on): it starts with their count.
            conn.execute(
                "INSERT INTO session_digests(session_id, input_revision, ingested_revision, state, attempts, "
                "session_created_at, last_run_id, updated_at, turns) VALUES (?,?,?,'undigested',0,?,?,?,?) "
                "ON CONFLICT(session_id) DO UPDATE SET input_revision = excluded.input_revision, "
                "ingested_revision = excluded.ingested_revision, session_created_at = excluded.session_created_at, "
                "last_run_id = excluded.last_run_id, updated_at = excluded.updated_at, "
                "state = CASE WHEN session_digests.digested_revision = excluded.input_revision "
                "THEN session_digests.state ELSE 'undigested' END, "
                "attempts = CASE WHEN session_digests.digested_revision = excluded.input_revision "
                "THEN session_digests.attempts ELSE 0 END, "
                "defer_reason = CASE WHEN session_digests.digested_revision = excluded.input_revision "
                "THEN session_digests.defer_reason ELSE NULL END",
                (revision.session_id, revision.revision, revision.revision, revision.created_at, run_id, now, len(set(revision.memory_ids))),
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
        commits on engines that do not serialise writers). A commit replacing an extraction that
        quoted turns a retraction took out makes an erase due (:meth:`EraseDueStore.mark_superseded`)."""
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
            EraseDueStore(self.db).mark_superseded(session_id)

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
        """Make failing sessions eligible again with a fresh count of attempts (all of them when
        ``session_ids`` is None): the undigestible ones, and those not digested yet that were
        charged an attempt. Returns how many there were; a session with nothing of
        that (digested, or not tried yet) is not counted (userwalk6: ``--all`` left a failing
        session's attempts, so one more failure made it undigestible, and ``--session`` counted a
        session with nothing to reset)."""
        now = self.clock()
        failing = "(state = 'undigestible' OR (state = 'undigested' AND attempts > 0))"
        reset = f"UPDATE session_digests SET state = 'undigested', attempts = 0, defer_reason = NULL, updated_at = ? WHERE {failing}"
        with self.db.transaction() as conn:
            if session_ids is None:
                return conn.execute(reset, (now,)).rowcount
            return conn.executemany(reset + " AND session_id = ?", [(now, sid) for sid in session_ids]).rowcount

    def digest_counts(self) -> dict[str, int]:
        """Sessions by digest state, every state named (:meth:`state_totals`)."""
        counts = dict.fromkeys(DIGEST_STATES, 0)
        counts.update({name: total[0] for name, total in self.state_totals("session").items()})
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
        another session), by the memory index: ``turns`` (kept by its triggers, migration 17) is 0,
        a range of the partial index ``session_digests_no_turns`` — those sessions, not all."""
        rows = self.db.query("SELECT COUNT(*) FROM session_digests WHERE turns = 0 AND ingested_revision IS NOT NULL")
        return int(rows[0][0])


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds_between(start: str | None, end: str | None) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def histogram_buckets(values: Iterable[float], bounds: Iterable[float]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets (``le`` label, count) and the sum of ``values``. ``bounds``
    must be ascending and end with ``inf``. Pure."""
    ordered = sorted(values)
    buckets: list[tuple[str, float]] = []
    index = 0
    for bound in bounds:
        while index < len(ordered) and ordered[index] <= bound:
            index += 1
        buckets.append((bound_label(bound), float(index)))
    return buckets, float(sum(ordered))


def bound_label(bound: float) -> str:
    """A bucket bound as Prometheus's ``le`` label writes it."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def run_contribution(row: Mapping[str, Any] | Any) -> dict[tuple[str, str], float]:
    """What one ``rem_runs`` row (``started_at, finished_at, outcome, phases``) adds to the run
    statistics (pure): a finished run's wall-clock seconds to the cycle histogram (one count per
    bucket it falls in, and the sum), each phase's ``duration_ms`` to its phase's histogram, and
    its extract phase's ``chunks_reused``. A document that does not parse counts as no phases."""
    found: dict[tuple[str, str], float] = {}

    def observe(series: str, bounds: tuple[float, ...], seconds: float) -> None:
        buckets, total = histogram_buckets([seconds], bounds)
        for label, count in [*buckets, (SUM, total)]:
            if count:
                found[(series, label)] = found.get((series, label), 0.0) + count

    started_at, finished_at, outcome, text = row[0], row[1], row[2], row[3]
    if finished_at is not None and outcome != "running":
        seconds = _seconds_between(started_at, finished_at)
        if seconds is not None:
            observe(CYCLE_SERIES, CYCLE_BUCKETS, max(0.0, seconds))
    try:
        phases = json.loads(text)
    except (TypeError, ValueError):
        phases = None
    for phase, record in phases.items() if isinstance(phases, dict) else ():
        if isinstance(record, dict) and _is_number(record.get("duration_ms")):
            observe(PHASE_SERIES + phase, PHASE_BUCKETS, record["duration_ms"] / 1000.0)
    extract = phases.get("extract") if isinstance(phases, dict) else None
    if isinstance(extract, dict) and _is_number(extract.get("chunks_reused")):
        found[(REUSED_SERIES, SUM)] = float(extract["chunks_reused"])
    return found


def _summed(contributions: Iterable[Mapping[tuple[str, str], float]]) -> dict[tuple[str, str], float]:
    total: dict[tuple[str, str], float] = {}
    for contribution in contributions:
        for key, value in contribution.items():
            total[key] = total.get(key, 0.0) + value
    return total


def _add_stats(conn: Any, delta: Mapping[tuple[str, str], float]) -> None:
    """Add ``delta`` to ``run_stats`` (inside the caller's transaction)."""
    changed = sorted((series, bound, value) for (series, bound), value in delta.items() if value)
    if changed:
        conn.executemany(
            "INSERT INTO run_stats(series, bound, value) VALUES (?, ?, ?) "
            "ON CONFLICT(series, bound) DO UPDATE SET value = run_stats.value + excluded.value",
            changed,
        )


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
        committed=row["commit_seq"] is not None,
    )
