"""The log stream failing under the worker: stderr redirected to a file on a full disk (``/dev/full``
answers every write with ``ENOSPC``) or into a pipe whose reader went away. Logs are the
operator's view, not the work: the cycle still does every phase and records what it did, and the
daemon keeps running. And a cycle that crashes between two phases is recorded ``failed``, never
``completed`` with the phases after it silently skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from config import Settings
from tests.conftest import ROOT, make_session, run_cli, write_sessions
from tests.daemon_support import read_runs, wait_for, worker_env
from worker.cycle import PHASES, Stores, run_cycle

SAMPLE = ROOT / "examples" / "sessions.jsonl"
ALL_PHASES = [name for name, _ in PHASES]


def test_once_with_its_log_on_a_full_disk_still_runs_every_phase(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = worker_env(data)
    assert run_cli("import", str(SAMPLE), env=env).returncode == 0
    with open("/dev/full", "w", encoding="utf-8") as full:
        done = subprocess.run([sys.executable, "-m", "worker", "--once"], stdout=subprocess.PIPE, stderr=full,
                              text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0
    assert "completed" in done.stdout.splitlines()[0]
    (run,) = read_runs(data / "graph.sqlite3")
    assert run["outcome"] == "completed"
    assert set(run["phases"]) == set(ALL_PHASES)
    assert run["phases"]["extract"]["sessions_digested"] == 26


def test_the_daemon_keeps_working_after_its_log_reader_went_away(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = worker_env(data, interval_seconds="0.5")
    assert run_cli("import", str(write_sessions(tmp_path / "a.jsonl", [make_session("a-1")])), env=env).returncode == 0
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "worker"], stdout=write_end, stderr=write_end, env=env, cwd=ROOT)
    os.close(write_end)
    try:
        assert b"daemon started" in os.read(read_end, 4096)
        os.close(read_end)  # the reader goes away: every later log line is EPIPE
        # Work arriving after that, and after the first cycle (a-1's, whose logs met the closed
        # pipe), is still done: by a later cycle. An import faster than the first cycle's ingest
        # would be done by the first cycle alone and prove nothing of the daemon going on.
        wait_for(lambda: proc.poll() is not None or _digested(data) >= 1, timeout=120, interval=0.2, what="a-1 digested")
        assert run_cli("import", str(write_sessions(tmp_path / "b.jsonl", [make_session("b-1")])), env=env).returncode == 0
        wait_for(lambda: proc.poll() is not None or _digested(data) >= 2, timeout=120, interval=0.2, what="b-1 digested")
        assert proc.poll() is None, "the daemon died"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    runs = read_runs(data / "graph.sqlite3")
    assert len(runs) >= 2
    assert all(set(run["phases"]) == set(ALL_PHASES) for run in runs if run["outcome"] == "completed")
    assert {run["outcome"] for run in runs} <= {"completed", "interrupted"}


def _digested(data: Path) -> int:
    runs = read_runs(data / "graph.sqlite3")
    return sum(run["phases"].get("extract", {}).get("sessions_digested", 0) for run in runs)


async def test_a_crash_between_two_phases_is_recorded_failed(settings: Settings, stores: Stores) -> None:
    ran: list[str] = []

    async def broken(ctx: object) -> dict:  # a phase whose counts are no mapping: a bug between phases
        ran.append("broken")
        return None  # type: ignore[return-value]

    async def after(ctx: object) -> dict:
        ran.append("after")
        return {}

    result = await run_cycle(settings, stores=stores, phases=(("broken", broken), ("after", after)))
    assert ran == ["broken"]
    assert (result.outcome, result.failure_phase, result.reason_code) == ("failed", "broken", "crashed")
    (run,) = read_runs(settings.graph_path)
    assert (run["outcome"], run["failure_phase"], run["reason_code"]) == ("failed", "broken", "crashed")
    assert run["phases"]["broken"]["state"] == "failed"
