"""Sessions by digest state and chunk results by status (with their tokens) are counted from
``state_counts`` and the changes its triggers record (migration 17), never by grouping the tables:
a ``/metrics`` scrape, each run's ``finalize`` and ``status`` read them, and those tables grow with
every session ever seen. The counts follow every write the stores make (both engines), survive a
fold, and a database of schema 16 starts with its existing rows counted."""

from __future__ import annotations

from typing import Any

import pytest

from config import Settings
from store.backend import open_database
from store.chunks import ChunkResultStore
from store.db import Database
from store.runstate import RunStateStore, SessionRevision
from store.tombstones import TombstoneStore
from tests.migrations_support import STATE_COUNTS_VERSION, rolled_back
from worker.metrics import _chunk_families, _session_families


def truth(db: Database) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """What grouping the tables says (the reading before migration 17)."""
    digests = {state: 0 for state in ("undigested", "digested", "undigestible")}
    digests.update({r[0]: r[1] for r in db.query("SELECT state, COUNT(*) FROM session_digests GROUP BY state")})
    chunks = {r[0]: {"count": r[1], "tokens_in": int(r[2]), "tokens_out": int(r[3])} for r in db.query(
        "SELECT status, COUNT(*), COALESCE(SUM(tokens_in), 0), COALESCE(SUM(tokens_out), 0) FROM chunk_results GROUP BY status")}
    return digests, chunks


def counted(runstate: RunStateStore) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    return runstate.digest_counts(), runstate.chunk_totals()


def ok(chunks: ChunkResultStore, session: str, n: int, *, tokens: int = 10) -> None:
    chunks.record_ok(session_id=session, chunk_id=f"{session}:chunk:{n}", content_hash=f"{session}-h{n}", text_hash=f"{session}-t{n}",
                     memory_ids=(), fingerprint="f", tokens_in=tokens, tokens_out=tokens // 2, latency_ms=1.0, payload={}, run_id="r")


def failed(chunks: ChunkResultStore, session: str, n: int) -> None:
    chunks.record_failure(session_id=session, chunk_id=f"{session}:chunk:{n}", content_hash=f"{session}-h{n}", fingerprint="f",
                          error_kind="timeout", error="slow", next_attempt_at=None, tokens_in=3, tokens_out=0, latency_ms=1.0, run_id="r")


@pytest.mark.both_backends
def test_the_counts_follow_every_write_and_every_fold(settings: Settings) -> None:
    db = open_database(settings)
    try:
        runstate, chunks, tombstones = RunStateStore(db), ChunkResultStore(db), TombstoneStore(db)
        steps = [
            lambda: [runstate.mark_ingested(SessionRevision(f"s{i}", "r1", "2026-11-01T00:00:00Z"), "run") for i in range(5)],
            lambda: [failed(chunks, "s0", n) for n in range(3)],
            lambda: ok(chunks, "s0", 1, tokens=40),  # a failure replaced by an answer
            lambda: failed(chunks, "s0", 1),  # a failure never replaces an answer: nothing changes
            lambda: [ok(chunks, "s1", n) for n in range(4)],
            runstate.fold_counts,
            lambda: runstate.mark_digested("s1", "r1", "run"),
            lambda: chunks.prune_session("s1", ["s1-h0", "s1-h1"]),
            lambda: runstate.mark_digested("s0", "r1", "run"),
            lambda: runstate.mark_ingested(SessionRevision("s0", "r2", "2026-11-01T00:00:00Z"), "run"),  # new revision
            lambda: [runstate.record_failure("s2", reason="x", run_id="run", max_attempts=2) for _ in range(2)],
            lambda: runstate.reset_sessions(["s2"]),
            lambda: [runstate.record_failure("s3", reason="x", run_id="run", max_attempts=1)],
            runstate.fold_counts,
            lambda: tombstones.forget_session_state("s1", "s1"),
            lambda: chunks.reset_failures(),
            runstate.fold_counts,
            runstate.fold_counts,
        ]
        for number, step in enumerate(steps):
            with db.transaction():
                step()
            assert counted(runstate) == truth(db), number
        assert db.query("SELECT COUNT(*) FROM state_count_changes")[0][0] == 0
        assert truth(db)[0] == {"undigested": 3, "digested": 0, "undigestible": 1} and truth(db)[1]["ok"]["count"] == 1
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_rolled_back_write_changes_no_count(settings: Settings) -> None:
    db = open_database(settings)
    try:
        runstate = RunStateStore(db)
        runstate.mark_ingested(SessionRevision("s0", "r1", None), "run")
        with pytest.raises(RuntimeError), db.transaction():
            runstate.mark_digested("s0", "r1", "run")
            ok(ChunkResultStore(db), "s0", 0)
            raise RuntimeError("the commit fails")
        assert counted(runstate) == truth(db) == ({"undigested": 1, "digested": 0, "undigestible": 0}, {})
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_database_of_schema_16_starts_with_its_rows_counted(settings: Settings, backend: str) -> None:
    db = open_database(settings)
    try:
        runstate, chunks = RunStateStore(db), ChunkResultStore(db)
        for i in range(4):
            runstate.mark_ingested(SessionRevision(f"s{i}", "r1", None), "run")
            ok(chunks, f"s{i}", 0, tokens=7 * i)
        runstate.mark_digested("s3", "r1", "run")
        failed(chunks, "s3", 1)
        expected = truth(db)
    finally:
        db.close()
    rolled_back(settings, backend, to=STATE_COUNTS_VERSION - 1)
    db = open_database(settings)
    try:
        assert db.schema_version >= STATE_COUNTS_VERSION
        runstate = RunStateStore(db)
        assert counted(runstate) == expected == truth(db)
        runstate.mark_digested("s2", "r1", "run")  # the triggers are back
        assert counted(runstate) == truth(db)
    finally:
        db.close()


class Reads:
    """A database that remembers the statements read through it."""

    def __init__(self, db: Database) -> None:
        self.db, self.statements = db, []

    def query(self, sql: str, params: Any = ()) -> Any:
        self.statements.append(sql)
        return self.db.query(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@pytest.mark.both_backends
def test_a_scrape_counts_sessions_and_chunks_without_grouping_their_tables(settings: Settings) -> None:
    """Before, each scrape ran ``GROUP BY`` over ``session_digests`` and ``chunk_results`` (every
    session and chunk result ever recorded); now the only reads of those tables left in the session
    and chunk families are the two index look-ups of the newest/oldest session."""
    db = open_database(settings)
    try:
        RunStateStore(db).mark_ingested(SessionRevision("s0", "r1", None), "run")
        reads = Reads(db)
        families = [*_session_families(RunStateStore(reads)), *_chunk_families(RunStateStore(reads))]  # type: ignore[arg-type]
        assert {f.name for f in families} >= {"rem_cycle_sessions", "rem_cycle_chunk_results", "rem_cycle_model_tokens"}
        sessions = next(f for f in families if f.name == "rem_cycle_sessions")
        assert {s.labels["state"]: s.value for s in sessions.samples} == {"undigested": 1, "digested": 0, "undigestible": 0}
        grouped = [sql for sql in reads.statements if ("session_digests" in sql or "chunk_results" in sql) and "MAX(" not in sql]
        assert grouped == []
    finally:
        db.close()


@pytest.mark.both_backends
def test_the_sessions_digested_since_a_moment_are_found_by_an_index_range(settings: Settings, backend: str) -> None:
    """Finalize counts, every cycle, the sessions digested since the last community detection.
    Before, that read every digested session (the state index, then each row's ``updated_at``);
    now it is a range of ``session_digests_updated``: the sessions digested since."""
    db = open_database(settings)
    try:
        runstate = RunStateStore(db, clock=lambda: "2026-11-20T00:00:00.000Z")
        for i in range(3):
            runstate.mark_ingested(SessionRevision(f"s{i}", "r1", None), "run")
            runstate.mark_digested(f"s{i}", "r1", "run")
        assert runstate.digested_since("2026-11-19T00:00:00.000Z") == 3 and runstate.digested_since("2026-11-20T00:00:00.000Z") == 0
        sql = "SELECT COUNT(*) FROM session_digests WHERE state = 'digested' AND updated_at > ?"
        if backend == "sqlite":
            plan = " ".join(str(r[3]) for r in db.query("EXPLAIN QUERY PLAN " + sql, ("2026-11-19",)))
            assert "session_digests_updated (state=? AND updated_at>?)" in plan, plan
        else:
            with db.transaction() as conn:
                conn.execute("SET LOCAL enable_seqscan = off")
                plan = " ".join(r[0] for r in conn.execute("EXPLAIN " + sql, ("2026-11-19",)).fetchall())
            assert "session_digests_updated" in plan and "updated_at >" in plan.split("session_digests_updated", 1)[1], plan
    finally:
        db.close()


NO_TURNS_BEFORE_17 = (  # what the count read before migration 17: a probe of the memory index per session
    "SELECT COUNT(*) FROM session_digests AS d WHERE d.ingested_revision IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM memory_index AS m WHERE m.session_id = d.session_id)"
)


@pytest.mark.both_backends
def test_the_sessions_left_without_turns_follow_every_write_of_the_memory_index(settings: Settings) -> None:
    db = open_database(settings)
    try:
        runstate, tombstones = RunStateStore(db), TombstoneStore(db)

        def ingested(session: str, revision: str, *turns: str) -> None:
            runstate.mark_ingested(SessionRevision(session, revision, None, tuple(f"memory:{t}" for t in turns)), "run")

        steps = [
            lambda: ingested("a", "r1", "a-t0", "a-t1", "a-t1"),
            lambda: ingested("b", "r1", "b-t0"),
            lambda: ingested("c", "r1"),  # no turns at all
            lambda: ingested("b", "r2", "b-t0", "a-t1"),  # a turn moved from a to b
            lambda: ingested("a", "r2", "a-t0"),
            lambda: tombstones.forget_memory_state("memory:a-t0", "a"),  # a's last turn forgotten
            lambda: ingested("c", "r2", "c-t0"),
            lambda: tombstones.forget_session_state("b", "b"),
            lambda: ingested("b", "r3", "b-t9", "a-t1"),  # back, with a turn of a's (a has none left)
        ]
        for number, step in enumerate(steps):
            with db.transaction():
                step()
            assert runstate.sessions_without_turns() == db.query(NO_TURNS_BEFORE_17)[0][0], number
        assert runstate.sessions_without_turns() == 1  # a
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_database_of_schema_16_counts_the_turns_it_holds(settings: Settings, backend: str) -> None:
    db = open_database(settings)
    try:
        runstate = RunStateStore(db)
        for session, turns in (("a", ("a-t0", "a-t1")), ("b", ()), ("c", ("c-t0",))):
            runstate.mark_ingested(SessionRevision(session, "r1", None, turns), "run")
    finally:
        db.close()
    rolled_back(settings, backend, to=STATE_COUNTS_VERSION - 1)
    db = open_database(settings)
    try:
        assert {r[0]: r[1] for r in db.query("SELECT session_id, turns FROM session_digests")} == {"a": 2, "b": 0, "c": 1}
        assert RunStateStore(db).sessions_without_turns() == 1 == db.query(NO_TURNS_BEFORE_17)[0][0]
    finally:
        db.close()


@pytest.mark.both_backends
def test_the_sessions_without_turns_are_found_by_an_index_range(settings: Settings, backend: str) -> None:
    """Before, counting them probed the memory index once for every session ever ingested (1.9 →
    125 ms from 5,000 to 40,000 sessions of 20 turns), at each run's first scrape; now they are a
    range of the partial index ``session_digests_no_turns``."""
    db = open_database(settings)
    try:
        RunStateStore(db).mark_ingested(SessionRevision("a", "r1", None, ("a-t0",)), "run")
        reads = Reads(db)
        assert RunStateStore(reads).sessions_without_turns() == 0  # type: ignore[arg-type]
        (sql,) = reads.statements
        if backend == "sqlite":
            plan = " ".join(str(r[3]) for r in db.query("EXPLAIN QUERY PLAN " + sql))
        else:
            with db.transaction() as conn:
                conn.execute("SET LOCAL enable_seqscan = off")
                plan = " ".join(r[0] for r in conn.execute("EXPLAIN " + sql).fetchall())
        assert "session_digests_no_turns" in plan and "memory_index" not in plan, plan
    finally:
        db.close()
