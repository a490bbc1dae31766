"""Migration 13: the metrics scrape reads ``rem_runs`` at a cost that does not grow with the runs
recorded — runs by outcome from ``rem_run_counts`` (kept by triggers), each outcome's latest finish
through ``rem_runs_outcome_finished``, the running runs through the partial index
``rem_runs_running``. A database of the previous schema is
migrated with its runs counted; every way a run is written keeps the counts equal to a full count;
the queries read the index and the counts, never all of ``rem_runs`` (the cost at 1× and 8× the
runs: bench/bench_scrape_growth.py). Real SQLite files and a real PostgreSQL server (``both_backends``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from config import Settings
from store.backend import open_database
from store.db import MIGRATIONS, Database
from store.runstate import RunStateStore
from tests.migrations_support import RUN_COUNTS_VERSION, roll_back

VERSION = RUN_COUNTS_VERSION


def full_counts(db: Database) -> tuple[dict[str, int], dict[str, str]]:
    """Runs by outcome and each outcome's latest finish, counted over every run (the scans the
    scrape ran before migration 13)."""
    counts = {r[0]: r[1] for r in db.query("SELECT outcome, COUNT(*) FROM rem_runs GROUP BY outcome")}
    latest = {r[0]: r[1] for r in db.query("SELECT outcome, MAX(finished_at) FROM rem_runs WHERE finished_at IS NOT NULL GROUP BY outcome")}
    return counts, latest


def read_by_scrape(runs: RunStateStore) -> tuple[dict[str, int], dict[str, str]]:
    return runs.runs_by_outcome(), runs.last_finished_by_outcome()


def clock(start: datetime) -> Callable[[], str]:
    """A clock one second later at each call, so that every finish time differs."""
    ticks = iter(range(10_000))
    return lambda: (start + timedelta(seconds=next(ticks))).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@pytest.mark.both_backends
def test_a_database_of_the_previous_schema_is_migrated_with_its_runs_counted(settings: Settings, backend: str) -> None:
    db = open_database(settings)
    try:
        runs = RunStateStore(db, clock=clock(datetime(2026, 11, 1, tzinfo=UTC)))
        for n in range(7):
            runs.start_run(f"old-{n}", reason="interval", mode="once", owner="w")
            if n < 6:
                runs.finish_run(f"old-{n}", outcome=("completed", "failed", "skipped")[n % 3], phases={})
        with db.transaction() as conn:
            roll_back(conn, backend, to=VERSION - 1)
        assert db.schema_version == VERSION - 1
        before = full_counts(db)
        assert before[0] == {"completed": 2, "failed": 2, "skipped": 2, "running": 1}
    finally:
        db.close()
    db = open_database(settings)
    try:
        assert db.schema_version == len(MIGRATIONS)
        runs = RunStateStore(db, clock=clock(datetime(2026, 11, 2, tzinfo=UTC)))
        assert read_by_scrape(runs) == before
        assert [r["run_id"] for r in runs.running_runs()] == ["old-6"]
        # The triggers count the runs written after the migration.
        runs.finish_run("old-6", outcome="interrupted", phases={})
        runs.start_run("new-0", reason="manual", mode="once", owner="w")
        assert read_by_scrape(runs) == full_counts(db)
        assert runs.runs_by_outcome() == {"completed": 2, "failed": 2, "skipped": 2, "interrupted": 1, "running": 1}
    finally:
        db.close()


@pytest.mark.both_backends
def test_every_write_of_a_run_keeps_the_counts_equal_to_a_full_count(settings: Settings) -> None:
    """Start, heartbeat, finish, abandon (a silent run), a finish that writes the same outcome
    again, and a deleted row: after each, the scrape's reads equal the scans over every run."""
    db = open_database(settings)
    try:
        now = datetime(2026, 11, 3, tzinfo=UTC)
        runs = RunStateStore(db, clock=clock(now))
        assert read_by_scrape(runs) == ({}, {}) and runs.running_runs() == []
        steps = [
            lambda: runs.start_run("a", reason="interval", mode="once", owner="w1"),
            lambda: runs.start_run("b", reason="interval", mode="once", owner="w2"),
            lambda: runs.heartbeat("a"),
            lambda: runs.finish_run("a", outcome="completed", phases={"ingest": {"duration_ms": 5}}),
            lambda: runs.finish_run("a", outcome="completed", phases={}),  # same outcome: counted once
            lambda: runs.mark_abandoned(older_than_seconds=60, now=now + timedelta(hours=2)),  # b is silent
            lambda: runs.start_run("c", reason="manual", mode="once", owner="w1"),
            lambda: runs.finish_run("c", outcome="failed", phases={}, reason_code="provider-down"),
        ]
        for step in steps:
            step()
            assert read_by_scrape(runs) == full_counts(db)
        with db.transaction() as conn:
            conn.execute("DELETE FROM rem_runs WHERE run_id = ?", ("c",))
        counts, latest = read_by_scrape(runs)
        assert (counts, latest) == full_counts(db)
        assert counts == {"completed": 1, "abandoned": 1} and "failed" not in latest
        assert runs.running_runs() == []
    finally:
        db.close()


def scrape_reads(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements a scrape's three reads of the runs send (in order), running them once."""
    sent: list[str] = []
    query = db.query

    def recording(sql: str, params: tuple = ()) -> list:
        sent.append(sql)
        return query(sql, params)

    monkeypatch.setattr(db, "query", recording)
    runs = RunStateStore(db)
    runs.runs_by_outcome()
    runs.last_finished_by_outcome()
    assert len(runs.running_runs()) == 2
    monkeypatch.undo()
    return sent


def with_history(db: Database) -> None:
    runs = RunStateStore(db)
    for n in range(50):
        runs.start_run(f"r{n}", reason="interval", mode="once", owner="w")
        if n < 48:
            runs.finish_run(f"r{n}", outcome=("completed", "failed")[n % 2], phases={})


def test_the_scrape_reads_the_index_and_the_counts_never_every_run(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """EXPLAIN QUERY PLAN of each read a scrape makes of the runs (SQLite): the counts table, then
    one index search an outcome; nothing scans ``rem_runs``."""
    db = open_database(settings)
    try:
        with_history(db)
        with db.transaction() as conn:
            conn.execute("ANALYZE")
        plans = [" | ".join(r[3] for r in db.query("EXPLAIN QUERY PLAN " + sql)) for sql in scrape_reads(db, monkeypatch)]
    finally:
        db.close()
    assert len(plans) == 3, plans
    assert plans[0] == "SCAN rem_run_counts", plans[0]
    assert "SEARCH r USING COVERING INDEX rem_runs_outcome_finished (outcome=?" in plans[1], plans[1]
    assert plans[2] == "SCAN rem_runs USING INDEX rem_runs_running", plans[2]  # the partial index: running rows only
    assert "SCAN r " not in plans[1] + " ", plans[1]


@pytest.mark.both_backends
def test_postgresql_can_answer_the_reads_from_the_index(settings: Settings, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL's planner may scan a table this small; with sequential scans disabled, the latest
    finish of each outcome is read through ``rem_runs_outcome_finished``, the running runs through
    ``rem_runs_running``."""
    if backend != "postgresql":
        pytest.skip("SQLite's plans: test_the_scrape_reads_the_index_and_the_counts_never_every_run")
    db = open_database(settings)
    try:
        with_history(db)
        sent = scrape_reads(db, monkeypatch)
        with db.transaction() as conn:
            conn.execute("SET LOCAL enable_seqscan = off")
            plans = ["\n".join(r[0] for r in conn.execute("EXPLAIN " + sql).fetchall()) for sql in sent]
    finally:
        db.close()
    assert "rem_runs" not in plans[0].replace("rem_run_counts", ""), plans[0]
    assert "rem_runs_outcome_finished" in plans[1], plans[1]
    assert "rem_runs_running" in plans[2], plans[2]
