"""A graph database rem-cycle may not open, through the real CLI: the file's permissions taken
away, or a data dir that is read-only (a backup mounted read-only, a data dir owned by the
daemon's user). The one line names the file and what rem-cycle needs, instead of SQLite's bare
``unable to open database file``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, make_session, run_cli, write_sessions

NEEDS = "(rem-cycle needs to read and write it, its -wal and -shm files and its folder)"


def without_root_powers() -> list[str]:
    """The command prefix that runs a program as an operator meets permissions: root keeps its uid
    but loses the capability to override them (the tests may run as root); none for another user."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot be taken away")
    caps = "-dac_override,-dac_read_search,-fowner"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]


def _run_without_root_powers(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m worker ARGS`` without root's powers (:func:`without_root_powers`)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([*without_root_powers(), sys.executable, "-m", "worker", *args], capture_output=True, text=True,
                          timeout=120, env=full_env, cwd=ROOT)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("import", str(write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    return data


def test_a_graph_database_without_permissions_is_named_in_the_error(data: Path) -> None:
    graph = data / "graph.sqlite3"
    graph.chmod(0)
    try:
        for command in (["status"], ["search", "turn"], ["export"]):
            done = _run_without_root_powers(*command, env={"REM_DATA_DIR": str(data)})
            assert done.returncode == 1, done.stderr
            assert done.stderr.splitlines() == [
                f"rem-cycle: cannot open the database {graph}: unable to open database file {NEEDS}"
            ], command
        done = _run_without_root_powers("--once", env={"REM_DATA_DIR": str(data)})
        assert done.returncode == 1
        assert f"cannot open the database {graph}: unable to open database file" in done.stdout
    finally:
        graph.chmod(0o644)


def test_a_read_only_data_dir_is_named_in_the_error(data: Path) -> None:
    graph = data / "graph.sqlite3"
    modes = {p: p.stat().st_mode for p in [data, *data.rglob("*")]}
    for path in modes:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        done = _run_without_root_powers("status", env={"REM_DATA_DIR": str(data)})
        assert done.returncode == 1
        assert done.stderr.splitlines() == [f"rem-cycle: cannot open the database {graph}: attempt to write a readonly database {NEEDS}"]
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
