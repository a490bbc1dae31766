"""run_cli's commands forked by the command server (tests/command_server.py) answer as commands
started as new interpreters do: the same status, stdout and stderr; a timeout kills the command
and raises as ``subprocess.run`` does; a command whose start environment differs from the server's
is started as a new interpreter. start_worker's background commands are forked too, and are
polled, signalled and waited for as a ``subprocess.Popen``."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import COMMAND_SERVER_ENV, ROOT, ForkedCommand, command_server, run_cli, start_environment
from tests.daemon_support import start_worker, wait_for, worker_env


def started(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m worker ARGS`` started as a new interpreter, as run_cli did before the server."""
    return subprocess.run([sys.executable, "-m", "worker", *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["no-such-command"], ["status"], ["status", "--json"]])
def test_a_forked_command_answers_as_a_started_one(args: list[str], tmp_path: Path) -> None:
    # A data dir that does not exist: status says so on stderr and exits 1.
    env = COMMAND_SERVER_ENV | {"REM_DATA_DIR": str(tmp_path / "missing")}
    forked = command_server().run(args, env, 300, tmp_path)
    fresh = started(args, env, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout or forked.stderr


def test_a_forked_command_runs_in_its_own_directory_and_environment(tmp_path: Path) -> None:
    # A relative data dir is taken from the working directory the caller gave.
    done = run_cli("--once", "--json", env={"REM_DATA_DIR": "here"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "here" / "graph.sqlite3").exists()


def test_a_command_past_its_timeout_is_killed_and_raises(tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_RUN_AT_STARTUP": "false"}  # a daemon: never ends by itself
    started_at = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(env=env, timeout=3)
    assert time.monotonic() - started_at < 60
    # Killed: its graph database is free for the next command at once.
    assert run_cli("status", env={"REM_DATA_DIR": str(tmp_path / "d")}, timeout=60).returncode == 0


def test_only_the_settings_and_the_running_tests_name_may_differ_from_the_servers_start() -> None:
    assert start_environment(COMMAND_SERVER_ENV | {"REM_DATA_DIR": "/x", "PYTEST_CURRENT_TEST": "t"}) == \
        start_environment(COMMAND_SERVER_ENV)
    for changed in ({"PYTHONIOENCODING": "ascii"}, {"LANG": "C"}, {"HOME": "/elsewhere"}):
        assert start_environment(COMMAND_SERVER_ENV | changed) != start_environment(COMMAND_SERVER_ENV)


def test_a_command_with_another_start_environment_is_a_new_interpreter(tmp_path: Path) -> None:
    # PYTHONIOENCODING is read when the interpreter starts: only a new one writes "ä" as "\\xe4".
    env = {"REM_DATA_DIR": str(tmp_path / "dätä"), "PYTHONIOENCODING": "ascii"}
    done = run_cli("status", env=env)
    assert done.returncode == 1 and "d\\xe4t\\xe4" in done.stderr, done.stderr
    assert done.stderr == started(["status"], COMMAND_SERVER_ENV | env, ROOT).stderr


def test_a_started_worker_is_forked_and_answers_as_a_popen(tmp_path: Path) -> None:
    # A daemon that waits for its first cycle: running until signalled.
    env = worker_env(tmp_path / "d", run_at_startup="false", log_level="info")
    daemon = start_worker(env=env, log_path=tmp_path / "daemon.log")
    assert isinstance(daemon, ForkedCommand)
    wait_for(lambda: (tmp_path / "daemon.log").read_text(), what="the daemon's log (stdout and stderr)")
    assert daemon.poll() is None and daemon.returncode is None
    with pytest.raises(subprocess.TimeoutExpired):
        daemon.wait(timeout=0.5)
    daemon.terminate()
    assert daemon.wait(timeout=60) == 0 and daemon.poll() == 0  # a graceful stop
    daemon.kill()  # ended: not signalled again (its pid may be another's by now), as Popen
    killed = start_worker(env=worker_env(tmp_path / "e", run_at_startup="false"), log_path=tmp_path / "killed.log")
    killed.kill()
    assert killed.wait(timeout=60) == -signal.SIGKILL


def test_a_started_worker_nobody_waits_for_leaves_the_server_serving(tmp_path: Path) -> None:
    forgotten = start_worker(env=worker_env(tmp_path / "d", run_at_startup="false"), log_path=tmp_path / "d.log")
    pid = forgotten.pid
    del forgotten
    gc.collect()  # its end of the connection closed: the server's report of its status goes nowhere
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="the server to reap the killed command")
    assert run_cli("--version").returncode == 0


def test_a_worker_started_with_popen_options_is_a_new_interpreter(tmp_path: Path) -> None:
    proc = start_worker("--version", env=worker_env(tmp_path / "d"), log_path=tmp_path / "v.log", start_new_session=True)
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=120) == 0
