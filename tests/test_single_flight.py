"""Single flight: never two cycles (nor two daemons) on one data dir."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database_at
from tests.conftest import SAMPLE, run_cli
from tests.daemon_support import busy_data_dir, busy_env, read_runs, start_worker, stop, wait_for, worker_env
from worker.cycle import EXIT_BUSY, CycleBusyError, run_cycle, single_flight
from worker.daemon import daemon_lock_path


async def test_a_cycle_under_a_held_lock_raises_busy_and_records_nothing(settings: Settings) -> None:
    async with single_flight(settings):
        with pytest.raises(CycleBusyError, match="another REM cycle is running"):
            await run_cycle(settings)
    assert not settings.graph_path.exists()
    # Released: the next cycle runs.
    assert (await run_cycle(settings)).outcome == "completed"


async def test_once_exits_busy_at_once_while_a_cycle_holds_the_lock(settings: Settings) -> None:
    async with single_flight(settings):
        started = time.monotonic()
        done = run_cli("--once", env={"REM_DATA_DIR": str(settings.data_dir)}, timeout=60)
        took = time.monotonic() - started
    assert done.returncode == EXIT_BUSY == 3
    assert "another REM cycle is running" in done.stderr
    assert "not starting a second one" in done.stderr
    assert took < 30  # no waiting for the lock: start-up time only
    assert read_runs(settings.graph_path) == []


def test_two_concurrent_once_runs_exactly_one(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    data = busy_data_dir(tmp_path_factory.getbasetemp(), tmp_path / "data")
    env = busy_env(data)
    # Whichever takes the cycle lock first cannot finish while this process holds the graph's
    # write lock, so the other meets the lock taken however late a loaded machine starts it (one
    # started after the first's one-second cycle had ended ran a cycle of its own).
    open_database_at(path=data / "graph.sqlite3", url=None).close()  # the schema, as the first run would make it
    gate = sqlite3.connect(data / "graph.sqlite3", isolation_level=None, timeout=30)
    gate.execute("BEGIN IMMEDIATE")
    try:
        procs = [start_worker("--once", env=env, log_path=tmp_path / f"once-{i}.log") for i in range(2)]
        wait_for(lambda: any(p.poll() is not None for p in procs), timeout=120, interval=0.05, what="one run to end")
    finally:
        gate.execute("ROLLBACK")
        gate.close()
    statuses = sorted(p.wait(120) for p in procs)
    logs = [(tmp_path / f"once-{i}.log").read_text() for i in range(2)]
    assert statuses == [0, EXIT_BUSY], logs
    assert any("another REM cycle is running" in log for log in logs)
    assert [r["outcome"] for r in read_runs(data / "graph.sqlite3")] == ["completed"]


def test_second_daemon_exits_busy_while_the_first_runs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("import", str(SAMPLE), env={"REM_DATA_DIR": str(data)}).returncode == 0
    first = start_worker(env=worker_env(data, interval_seconds="3600"), log_path=tmp_path / "first.log")
    try:
        wait_for(lambda: [r for r in read_runs(data / "graph.sqlite3") if r["outcome"] == "completed"], timeout=60, interval=0.1, what="first cycle")
        second = run_cli(env={"REM_DATA_DIR": str(data)}, timeout=60)
        assert second.returncode == EXIT_BUSY, second.stderr
        assert "another rem-cycle daemon is running" in second.stderr
        assert str(daemon_lock_path(Settings(data_dir=data))) in second.stderr
        # Between the daemon's cycles a one-shot cycle may run: only cycles are single-flight.
        once = run_cli("--once", env={"REM_DATA_DIR": str(data)}, timeout=60)
        assert once.returncode == 0, once.stderr
        assert first.poll() is None
    finally:
        assert stop(first) == 0
    assert [r["mode"] for r in read_runs(data / "graph.sqlite3")] == ["daemon", "once"]
