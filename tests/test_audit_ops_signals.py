"""Signals and pipes around the CLI's own messages (operator audit).

``--help`` and ``--version`` end like every other command whose reader went away
(``rem-cycle --help | head -1``): exit 141 (128 + SIGPIPE) without a message. argparse swallows
the write error of its own messages, so they exited 0 as if the reader had read them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, make_session, run_cli, write_sessions
from tests.daemon_support import busy_data_dir, busy_env, integrity, read_runs, start_worker, wait_for


def _run_with_reader_gone(*args: str, data: Path) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m worker ARGS`` with stdout a pipe whose reader is already closed."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env |= {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data)}
    try:
        return subprocess.run(
            [sys.executable, "-m", "worker", *args], stdout=write_end, stderr=subprocess.PIPE,
            timeout=120, env=env, cwd=ROOT,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["export", "--help"], ["-h"]])
def test_help_and_version_whose_reader_went_away_exit_141_quietly(tmp_path: Path, args: list[str]) -> None:
    done = _run_with_reader_gone(*args, data=tmp_path / "d")
    assert done.returncode == 141, done.stderr.decode()[-2000:]
    assert done.stderr == b""


# SIGINT the moment the finished cycle's report starts to print (``worker.report`` is imported only
# for it): Ctrl-C just after the cycle finished.
_SIGINT_WHEN_THE_REPORT_PRINTS = """
import os, signal, sys
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "worker.report":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _CtrlC())
sys.argv = ["rem-cycle", *sys.argv[1:]]
import runpy
runpy.run_module("worker", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_just_after_a_once_cycle_finished_still_prints_its_report_and_exits_0(tmp_path: Path) -> None:
    data = tmp_path / "d"
    sessions = write_sessions(tmp_path / "s.jsonl", [make_session("s1", 4, text="turn {i}: the LazyEdgeQueue drains")])
    assert run_cli("import", str(sessions), env={"REM_DATA_DIR": str(data)}).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env |= {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data)}
    done = subprocess.run(
        [sys.executable, "-c", _SIGINT_WHEN_THE_REPORT_PRINTS, "--once"],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )
    assert "interrupted by SIGINT" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "completed" in done.stdout
    status = run_cli("status", "--json", env={"REM_DATA_DIR": str(data)})
    assert json.loads(status.stdout)["runs"][0]["outcome"] == "completed"


def test_sighup_mid_cycle_stops_the_daemon_gracefully(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """SIGHUP (the daemon's terminal or SSH session closed) stops it as SIGTERM does: the cycle
    ends after its transaction, is recorded ``interrupted`` and the daemon exits 0. It killed the
    daemon at once (exit 129), leaving the run ``running`` (a stall) until the next cycle."""
    busy = busy_data_dir(tmp_path_factory.getbasetemp(), tmp_path / "data")
    graph = busy / "graph.sqlite3"
    proc = start_worker(env=busy_env(busy, grace_seconds="10"), log_path=tmp_path / "worker.log")
    try:
        wait_for(lambda: [r for r in read_runs(graph) if r["outcome"] == "running"], timeout=60, what="a running cycle")
        proc.send_signal(signal.SIGHUP)
        status = proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "worker.log").read_text()
    assert status == 0, log[-3000:]
    runs = read_runs(graph)
    assert [(r["outcome"], r["reason_code"]) for r in runs] == [("interrupted", "stop-requested")], log[-3000:]
    assert integrity(graph) == "ok"


def test_a_daemon_started_with_sighup_ignored_outlives_its_terminal(tmp_path: Path) -> None:
    """``nohup rem-cycle &`` ignores SIGHUP to outlive the terminal: the stop signals leave an
    ignored SIGHUP ignored (a handler would override nohup), and SIGTERM still stops it."""
    data = tmp_path / "data"
    data.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env |= {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data), "REM_RUN_AT_STARTUP": "false", "REM_LOG_FORMAT": "json"}
    log = tmp_path / "worker.log"
    proc = start_worker(env=env, log_path=log, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        wait_for(lambda: "daemon started" in log.read_text(), timeout=60, what="the daemon to start")
        proc.send_signal(signal.SIGHUP)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
