"""Stopping a running cycle: SIGTERM/SIGINT end it cleanly, SIGKILL leaves a run the next one
marks abandoned. Real processes, caught mid-cycle by polling ``rem_runs`` for the running row."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from config import Settings

from tests.conftest import run_cli
from tests.daemon_support import BUSY_SESSIONS, busy_data_dir, busy_env, integrity, read_runs, start_worker, wait_for
from worker.cycle import CycleContext, provider_ready, run_cycle
from worker.signals import stop_on_signals


@pytest.fixture
def busy(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return busy_data_dir(tmp_path_factory.getbasetemp(), tmp_path / "data")


def _running(graph: Path) -> list[dict]:
    return [r for r in read_runs(graph) if r["outcome"] == "running"]


def _assert_next_cycle_completes_the_work(data: Path) -> dict:
    done = run_cli("--once", "--json", env=busy_env(data))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == "completed"
    assert result["phases"]["finalize"]["graph"]["nodes"]["SESSION"] == BUSY_SESSIONS
    assert result["phases"]["finalize"]["digests"]["undigested"] + result["phases"]["finalize"]["digests"]["digested"] == BUSY_SESSIONS
    return result


@pytest.mark.parametrize(("args", "signum"), [((), signal.SIGTERM), (("--once",), signal.SIGINT)], ids=["daemon-SIGTERM", "once-SIGINT"])
def test_stop_signal_mid_cycle_records_interrupted_and_exits_zero(busy: Path, tmp_path: Path, args: tuple[str, ...], signum: int) -> None:
    graph = busy / "graph.sqlite3"
    grace = 10.0
    proc = start_worker(*args, env=busy_env(busy, grace_seconds=str(grace)), log_path=tmp_path / "worker.log")
    try:
        wait_for(lambda: _running(graph), timeout=60, what="a running cycle")
        sent = time.monotonic()
        proc.send_signal(signum)
        status = proc.wait(grace + 5)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "worker.log").read_text()
    assert status == 0, log
    assert took < grace, took
    runs = read_runs(graph)
    assert [r["outcome"] for r in runs] == ["interrupted"], log
    assert runs[0]["reason_code"] == "stop-requested"
    assert runs[0]["finished_at"]
    assert integrity(graph) == "ok"
    assert "stop requested" in log

    result = _assert_next_cycle_completes_the_work(busy)
    # The interrupted cycle's committed batches are not redone: only the rest is ingested now.
    assert result["phases"]["ingest"]["sessions_changed"] <= BUSY_SESSIONS


def test_killed_daemon_run_is_marked_abandoned_by_the_next_run(busy: Path, tmp_path: Path) -> None:
    graph = busy / "graph.sqlite3"
    proc = start_worker(env=busy_env(busy), log_path=tmp_path / "daemon.log")
    try:
        dead = wait_for(lambda: _running(graph), timeout=60, what="a running cycle")[0]
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [r["outcome"] for r in read_runs(graph)] == ["running"]
    assert integrity(graph) == "ok"

    _assert_next_cycle_completes_the_work(busy)
    runs = {r["run_id"]: r for r in read_runs(graph)}
    assert runs[dead["run_id"]]["outcome"] == "abandoned"
    assert runs[dead["run_id"]]["reason_code"] == "heartbeat-lost"
    assert runs[dead["run_id"]]["finished_at"]
    assert sorted(r["outcome"] for r in runs.values()) == ["abandoned", "completed"]


async def test_a_cycle_stuck_in_one_call_is_cancelled_after_the_grace_time(settings: Settings) -> None:
    """A phase that never reaches a transaction boundary (say, waiting on a model) is cancelled
    at 80 % of the grace time and still recorded."""

    started = 0.0

    async def stuck(ctx: CycleContext) -> dict:
        nonlocal started
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep(60)
        return {}

    result = "not cancelled"
    async with stop_on_signals(grace_seconds=1.0) as stop:
        result = await run_cycle(settings, stop=stop.event, phases=(("provider-ready", provider_ready), ("stuck", stuck)))
    took = time.monotonic() - started
    assert result == "not cancelled"  # run_cycle never returned: it was cancelled
    assert 0.8 <= took < 3.0, took
    (run,) = read_runs(settings.graph_path)
    assert (run["outcome"], run["reason_code"], run["failure_phase"]) == ("interrupted", "cancelled", "stuck")
    assert run["phases"]["provider-ready"]["state"] == "completed"
    assert run["phases"]["stuck"]["state"] == "interrupted"
    assert integrity(settings.graph_path) == "ok"
