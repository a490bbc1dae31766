"""The database refuses what it cannot understand, and a clock that went back keeps no dead run alive."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

from store.db import MIGRATIONS, Database
from tests.conftest import ROOT, run_cli


def _fresh(data: Path) -> Path:
    data.mkdir()
    Database(data / "graph.sqlite3").close()  # creates and migrates the database
    return data / "graph.sqlite3"


def _digest(path: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))).hexdigest()


def test_a_database_from_a_newer_schema_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    graph = _fresh(data)
    newer = len(MIGRATIONS) + 1
    with sqlite3.connect(graph) as conn:
        conn.execute("INSERT INTO schema_version(version) VALUES (?)", (newer,))
    conn.close()
    before = _digest(graph)
    env = {"REM_DATA_DIR": str(data)}
    for command in (["--once"], ["status"], ["drain"]):
        result = run_cli(*command, env=env)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"schema version {newer}" in lines[0] and "upgrade rem-cycle" in lines[0], result.stderr
        assert "Traceback" not in result.stderr
    # The daemon does not start either.
    daemon = run_cli(env={**env, "REM_RUN_AT_STARTUP": "true"}, timeout=60)
    assert daemon.returncode == 1 and f"schema version {newer}" in daemon.stderr, daemon.stderr
    assert _digest(graph) == before
    with sqlite3.connect(graph) as conn:
        assert conn.execute("SELECT COUNT(*) FROM rem_runs").fetchone()[0] == 0
    conn.close()


def test_a_dead_run_whose_heartbeat_is_in_the_future_is_abandoned(tmp_path: Path) -> None:
    # The clock went back after the run died: its last heartbeat is ahead of "now".
    data = tmp_path / "data"
    graph = _fresh(data)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    owner = f"{socket.gethostname()}:{int(gone.stdout)}"
    assert not os.path.exists(f"/proc/{int(gone.stdout)}")
    with sqlite3.connect(graph) as conn:
        conn.execute(
            "INSERT INTO rem_runs(run_id, reason, mode, started_at, outcome, lease_owner, heartbeat_at) "
            "VALUES ('run-from-the-future', 'manual', 'once', '2999-01-01T00:00:00.000Z', 'running', ?, '2999-01-01T00:05:00.000Z')",
            (owner,),
        )
    conn.close()
    status = run_cli("status", "--json", env={"REM_DATA_DIR": str(data)}, cwd=ROOT)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["stalled_runs"] == ["run-from-the-future"]  # silent, at once
    result = run_cli("--once", env={"REM_DATA_DIR": str(data)})
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(graph) as conn:
        row = conn.execute("SELECT outcome, reason_code FROM rem_runs WHERE run_id = 'run-from-the-future'").fetchone()
        assert tuple(row) == ("abandoned", "heartbeat-lost")
        assert conn.execute("SELECT COUNT(*) FROM rem_runs WHERE outcome = 'running'").fetchone()[0] == 0
    conn.close()


def test_checking_the_database_files_keeps_the_locks_sqlite_holds_in_this_process(tmp_path: Path) -> None:
    # POSIX locks belong to the process: closing any descriptor of the database file drops every
    # lock SQLite holds on it. The link checks must look at the files without opening them (a
    # daemon opens read-only connections for /metrics beside the cycle's writer; found as a SIGBUS).
    from store.db import Database

    writer = Database(tmp_path / "graph.sqlite3")
    try:
        with writer.transaction():
            Database(tmp_path / "graph.sqlite3", readonly=True).close()
            Database(tmp_path / "graph.sqlite3").close()
            other = subprocess.run(
                [sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
                 "try:\n    c.execute('BEGIN IMMEDIATE'); print('got the write lock')\nexcept sqlite3.OperationalError as e:\n    print(e)",
                 str(tmp_path / "graph.sqlite3")],
                capture_output=True, text=True, check=True,
            )
            assert other.stdout.strip() == "database is locked", other.stdout
    finally:
        writer.close()
