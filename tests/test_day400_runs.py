"""The run histograms (``rem_cycle_cycle_duration_seconds``, ``rem_cycle_phase_duration_seconds``)
and ``rem_cycle_chunks_reused_total`` are kept in ``run_stats`` as runs finish (migration 17): the
first scrape after each run read every run ever recorded (660 ms at 8,000 runs, 12× the time at
1,000). The statistics follow every finish — an abandoned run, one finishing after it was
abandoned — on both engines, a database of schema 16 is counted by the first finish after the
upgrade, and a scrape reads no run history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

from config import Settings
from store.backend import open_database
from store.db import Database
from store.postgres import PostgresDatabase
from store.runstate import CYCLE_BUCKETS, PHASE_BUCKETS, RunStateStore, bound_label, histogram_buckets
from tests.migrations_support import STATE_COUNTS_VERSION, rolled_back
from worker.metrics import build_registry

START = datetime(2026, 11, 1, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Clock:
    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> str:
        return stamp(self.seconds)


def expected(db: Any) -> dict[tuple[str, str], float]:
    """The statistics computed from every run, as a scrape did before migration 17."""
    rows = db.query("SELECT started_at, finished_at, outcome, phases FROM rem_runs")
    durations = [max(0.0, (datetime.fromisoformat(r[1]) - datetime.fromisoformat(r[0])).total_seconds())
                 for r in rows if r[1] is not None and r[2] != "running"]
    import json

    phases: dict[str, list[float]] = {}
    reused = 0.0
    for r in rows:
        for phase, record in json.loads(r[3]).items():
            if isinstance(record, dict) and isinstance(record.get("duration_ms"), int | float):
                phases.setdefault(phase, []).append(record["duration_ms"] / 1000.0)
            if phase == "extract" and isinstance(record, dict) and isinstance(record.get("chunks_reused"), int | float):
                reused += record["chunks_reused"]
    found: dict[tuple[str, str], float] = {}
    for series, values, bounds in [("cycle", durations, CYCLE_BUCKETS), *((f"phase:{p}", v, PHASE_BUCKETS) for p, v in phases.items())]:
        buckets, total = histogram_buckets(values, bounds)
        found.update({(series, label): count for label, count in buckets if count})
        if total:
            found[(series, "sum")] = total
    if reused:
        found[("chunks_reused", "sum")] = reused
    return found


def finished(store: RunStateStore, clock: Clock, run_id: str, *, after: float, phases: dict[str, Any], outcome: str = "completed") -> None:
    clock.seconds += after
    store.finish_run(run_id, outcome=outcome, phases=phases)


def history(store: RunStateStore, clock: Clock, runs: int, *, first: int = 0) -> None:
    for n in range(first, first + runs):
        store.start_run(f"run-{n:03d}", reason="interval", mode="once", owner="me")
        finished(store, clock, f"run-{n:03d}", after=0.5 + 37 * (n % 7), phases={
            "ingest": {"duration_ms": 40 * n, "state": "completed"},
            "extract": {"duration_ms": 1500 + n, "chunks_reused": n % 3, "state": "completed"},
            "finalize": {"state": "skipped"},
        }, outcome="failed" if n % 5 == 0 else "completed")
        clock.seconds += 60


def recorded(settings: Settings, runs: int) -> Clock:
    """:func:`history` of ``runs`` runs in the test's database; the clock they were written by."""
    db = open_database(settings)
    try:
        clock = Clock()
        history(RunStateStore(db, clock=clock), clock, runs)
        return clock
    finally:
        db.close()


@pytest.mark.both_backends
def test_the_run_statistics_follow_every_finish(settings: Settings) -> None:
    db = open_database(settings)
    try:
        clock = Clock()
        store = RunStateStore(db, clock=clock)
        history(store, clock, 12)
        assert store.run_stats() == pytest.approx(expected(db)) and expected(db)[("chunks_reused", "sum")] == 12
        # A run that stops beating is abandoned by a peer, then finishes itself after all.
        store.start_run("run-late", reason="interval", mode="once", owner="me")
        clock.seconds += 3600
        assert store.mark_abandoned(older_than_seconds=60, now=START + timedelta(seconds=clock.seconds)) == ["run-late"]
        assert store.run_stats() == pytest.approx(expected(db))
        finished(store, clock, "run-late", after=5, phases={"extract": {"duration_ms": 90_000, "chunks_reused": 4}})
        assert store.run_stats() == pytest.approx(expected(db))
        assert store.run_stats()[("cycle", "+Inf")] == 13  # the late run counted once
        history(store, clock, 3, first=100)
        assert store.run_stats() == pytest.approx(expected(db))
        assert db.query("SELECT value FROM rem_counters WHERE name = 'run_stats'")[0][0] == 1
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_database_of_schema_16_is_counted_by_the_first_finish(settings: Settings, backend: str) -> None:
    clock = recorded(settings, 6)
    rolled_back(settings, backend, to=STATE_COUNTS_VERSION - 1)
    db = open_database(settings)
    try:
        store = RunStateStore(db, clock=clock)
        assert db.query("SELECT value FROM rem_counters WHERE name = 'run_stats'")[0][0] == 0
        assert store.run_stats() == pytest.approx(expected(db))  # not built yet: every run is read
        store.start_run("run-next", reason="interval", mode="once", owner="me")
        finished(store, clock, "run-next", after=2, phases={"ingest": {"duration_ms": 7}})
        assert db.query("SELECT value FROM rem_counters WHERE name = 'run_stats'")[0][0] == 1
        assert db.query("SELECT COUNT(*) FROM run_stats")[0][0] > 0
        assert store.run_stats() == pytest.approx(expected(db))
        assert store.run_stats()[("cycle", bound_label(CYCLE_BUCKETS[-1]))] == 7
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_scrape_after_a_run_reads_no_run_history(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the first scrape after each run read the start, finish and phases of every run ever
    recorded; now every statement a scrape runs on ``rem_runs`` is bounded (a ``LIMIT``, or the
    running runs' partial index)."""
    recorded(settings, 5)
    statements: list[str] = []
    for kind in (Database, PostgresDatabase):
        real = kind.query
        monkeypatch.setattr(kind, "query", lambda self, sql, params=(), real=real: statements.append(sql) or real(self, sql, params))
    text = generate_latest(build_registry(settings)).decode()
    assert 'rem_cycle_cycle_duration_seconds_count 5.0' in text and 'rem_cycle_chunks_reused_total 4.0' in text
    assert 'rem_cycle_phase_duration_seconds_count{phase="extract"} 5.0' in text
    unbounded = [sql for sql in statements if "rem_runs" in sql and "LIMIT" not in sql and "outcome = 'running'" not in sql]
    assert statements and unbounded == []


@pytest.mark.both_backends
def test_old_runs_are_pruned_and_still_counted(settings: Settings) -> None:
    """Runs finished before the cut go — but each outcome's latest, and a run still running — and
    the run counts, the histograms and each outcome's latest finish are what they were."""
    db = open_database(settings)
    try:
        clock = Clock()
        store = RunStateStore(db, clock=clock)
        store.start_run("run-stuck", reason="interval", mode="once", owner="me")  # running since day 0
        history(store, clock, 10)  # day 0: runs 0-9 (0 and 5 failed)
        clock.seconds += 200 * 86400
        history(store, clock, 4, first=20)  # day 200: runs 20-23 (20 failed)
        clock.seconds += 86400
        store.start_run("run-skip", reason="interval", mode="once", owner="me")
        finished(store, clock, "run-skip", after=1, phases={}, outcome="skipped")
        before = (store.runs_by_outcome(), store.run_stats(), store.last_finished_by_outcome())
        kept_old = [r["run_id"] for r in store.recent_runs(100)]
        assert store.prune_runs(finished_before=stamp(100 * 86400)) == 10
        assert (store.runs_by_outcome(), store.run_stats(), store.last_finished_by_outcome()) == before
        assert [r["run_id"] for r in store.recent_runs(100)] == [r for r in kept_old if r >= "run-020" or r in ("run-stuck", "run-skip")]
        assert store.prune_runs(finished_before=stamp(100 * 86400)) == 0
        # The latest run of an outcome stays however old: the failed run 20 once every later one is past the cut.
        assert store.prune_runs(finished_before=stamp(400 * 86400)) == 2  # runs 21 and 22
        assert sorted(r["run_id"] for r in store.recent_runs(100)) == ["run-020", "run-023", "run-skip", "run-stuck"]
        assert (store.runs_by_outcome(), store.run_stats(), store.last_finished_by_outcome()) == before
    finally:
        db.close()


async def test_a_cycle_deletes_the_runs_older_than_rem_run_history_days(settings: Settings) -> None:
    from worker.cycle import run_cycle

    db = open_database(settings)
    try:
        clock = Clock()  # 2026-11-01: a month before this cycle
        history(RunStateStore(db, clock=clock), clock, 3)
    finally:
        db.close()
    kept = await run_cycle(settings.model_copy(update={"run_history_days": 60}))
    assert kept.outcome == "completed"
    pruned = await run_cycle(settings.model_copy(update={"run_history_days": 7}))
    assert pruned.outcome == "completed"
    db = open_database(settings)
    try:
        store = RunStateStore(db)
        # Runs 1 and 2 (completed a month ago) went; run 0, the only failed run, stays.
        assert sorted(r["run_id"] for r in store.recent_runs(10) if r["run_id"].startswith("run-0")) == ["run-000"]
        assert store.runs_by_outcome() == {"failed": 1, "completed": 4}
        assert store.recent_runs(1)[0]["phases"]["finalize"]["runs_pruned"] == 2
    finally:
        db.close()
