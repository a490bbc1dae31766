"""Restoring a backup (operator audit).

README said: stop the worker and put the copy at ``<data_dir>/graph.sqlite3``. After a worker was
killed (`kill -9`, an OOM kill, a power cut) its ``graph.sqlite3-wal`` is full of the replaced
database's pages, and SQLite replays it into the file put in its place: the restored graph was
damaged (``database disk image is malformed``). ``rem-cycle restore BACKUP`` checks the backup,
removes the replaced database's companions and renames the copy into place, under the daemon's and
the cycle's locks."""

from __future__ import annotations

import fcntl
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, make_session, run_cli, write_sessions

# A process killed mid-write: its transactions are committed to the -wal, never checkpointed into
# the file (os._exit skips SQLite's close, which would checkpoint and remove the -wal). A writer of
# rem-cycle's: with the SQL functions its connections have (the recall triggers fold text).
_KILLED_WRITER = """
import os, sqlite3, sys
sys.path.insert(0, sys.argv[2])
from store.db import register_functions
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
register_functions(conn)
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("CREATE TABLE killed_writer AS SELECT * FROM nodes")
conn.execute("UPDATE nodes SET properties = properties || ''")
os._exit(0)
"""


def _env(data: Path) -> dict[str, str]:
    return {"REM_DATA_DIR": str(data)}


@pytest.fixture(scope="module")
def backed_up_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A digested data dir, its backup, then one more session digested and a writer killed with
    its -wal full: ``(data dir, backup)``."""
    tmp_path = tmp_path_factory.mktemp("restore")
    data, backup = tmp_path / "data", tmp_path / "backup.sqlite3"
    first = write_sessions(tmp_path / "a.jsonl", [make_session("s1", 4, text="turn {i}: the LazyEdgeQueue drains")])
    assert run_cli("import", str(first), env=_env(data)).returncode == 0
    assert run_cli("--once", env=_env(data)).returncode == 0
    assert run_cli("backup", str(backup), env=_env(data)).returncode == 0
    later = write_sessions(tmp_path / "b.jsonl", [make_session("s2", 4, text="turn {i}: the RetryBudget grows")])
    assert run_cli("import", str(later), env=_env(data)).returncode == 0
    assert run_cli("--once", env=_env(data)).returncode == 0
    subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(data / "graph.sqlite3"), str(ROOT)], check=True, timeout=60)
    assert (data / "graph.sqlite3-wal").stat().st_size > 0
    return data, backup


@pytest.fixture
def backed_up(backed_up_once: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A copy of :func:`backed_up_once`'s data dir (nothing has it open) and its backup."""
    data = tmp_path / "data"
    shutil.copytree(backed_up_once[0], data)
    return data, backed_up_once[1]


def test_a_restore_after_a_killed_worker_gives_a_sound_graph_that_cycles_and_recalls(backed_up: tuple[Path, Path]) -> None:
    data, backup = backed_up
    done = run_cli("restore", str(backup), env=_env(data))
    assert done.returncode == 0, done.stderr[-2000:]
    with sqlite3.connect(data / "graph.sqlite3") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'killed_writer'").fetchone()[0] == 0
    status = run_cli("status", "--json", env=_env(data))
    assert status.returncode == 0, status.stderr[-2000:]
    once = run_cli("--once", "--json", env=_env(data))
    assert once.returncode == 0, once.stderr[-2000:]
    assert json.loads(once.stdout)["phases"]["extract"]["sessions_digested"] == 1  # s2, written after the backup
    recall = run_cli("recall", "RetryBudget", "--json", env=_env(data))
    assert recall.returncode == 0 and "s2" in recall.stdout


def test_a_restore_into_an_empty_data_dir_brings_the_graph_back(backed_up: tuple[Path, Path], tmp_path: Path) -> None:
    _, backup = backed_up
    fresh = tmp_path / "fresh"
    assert run_cli("restore", str(backup), env=_env(fresh)).returncode == 0
    show = run_cli("show", "CLASS:LazyEdgeQueue", env=_env(fresh))
    assert show.returncode == 0, show.stderr[-2000:]


def test_a_restore_while_a_daemon_holds_the_data_dir_exits_3_and_changes_nothing(backed_up: tuple[Path, Path]) -> None:
    data, backup = backed_up
    before = (data / "graph.sqlite3").read_bytes()
    with open(data / "rem-cycle.daemon.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = run_cli("restore", str(backup), env=_env(data))
    assert done.returncode == 3, done.stderr[-2000:]
    assert "stop it before restoring" in done.stderr
    assert (data / "graph.sqlite3").read_bytes() == before
    assert (data / "graph.sqlite3-wal").stat().st_size > 0


@pytest.mark.parametrize("kind", ["not a database", "no rem-cycle graph", "missing"])
def test_a_bad_backup_is_refused_and_changes_nothing(backed_up: tuple[Path, Path], tmp_path: Path, kind: str) -> None:
    data, _ = backed_up
    bad = tmp_path / "bad.sqlite3"
    if kind == "not a database":
        bad.write_bytes(b"this is no database\n" * 500)
    elif kind == "no rem-cycle graph":
        with sqlite3.connect(bad) as conn:
            conn.execute("CREATE TABLE t (x)")
    before = {p.name: p.read_bytes() for p in data.iterdir() if p.name.startswith("graph.sqlite3")}
    done = run_cli("restore", str(bad), env=_env(data))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert {p.name: p.read_bytes() for p in data.iterdir() if p.name.startswith("graph.sqlite3")} == before


def test_an_empty_backup_is_called_empty_not_a_database_of_another_kind(backed_up: tuple[Path, Path], tmp_path: Path) -> None:
    """A backup that was never written (a full disk, a copy cut short) leaves a file of 0 bytes;
    SQLite reads it as an empty database, and the refusal said "no rem-cycle graph"."""
    data, _ = backed_up
    empty = tmp_path / "backup.sqlite3"
    empty.touch()
    before = {p.name: p.read_bytes() for p in data.iterdir() if p.name.startswith("graph.sqlite3")}
    done = run_cli("restore", str(empty), env=_env(data))
    assert (done.returncode, done.stderr.splitlines()) == (
        1, [f"rem-cycle: restore from {empty} failed, nothing was changed: {empty} is empty (0 bytes): no backup was written to it"])
    assert {p.name: p.read_bytes() for p in data.iterdir() if p.name.startswith("graph.sqlite3")} == before
