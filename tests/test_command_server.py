"""run_cli's commands forked by the command server (tests/command_server.py) answer as commands
started as new interpreters do: the same status, stdout and stderr; a timeout kills the command
and raises as ``subprocess.run`` does; a command whose start environment differs from the server's
is started as a new interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import COMMAND_SERVER_ENV, ROOT, command_server, run_cli, start_environment


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
