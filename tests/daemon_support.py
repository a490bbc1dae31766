"""Helpers for the tests that run ``rem-cycle`` as a real process and catch it mid-cycle.

To interrupt or kill a cycle while it runs, without test hooks in the product, the data must make
a cycle last a moment: a few thousand small sessions take about a second to ingest. Importing them
takes several seconds, so one template data dir is built per test session and copied per test.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from filelock import FileLock

from tests.conftest import (COMMAND_SERVER_ENV, ROOT, ForkedCommand, command_server, make_session, run_cli, run_temp_dir,
                            start_environment, write_sessions)

BUSY_SESSIONS = 2000


def worker_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """A clean environment for ``python -m worker``: no inherited ``REM_*``, JSON logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env.update({"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data_dir), "REM_LOG_FORMAT": "json"})
    env.update({f"REM_{key.upper()}": value for key, value in settings.items()})
    return env


def start_worker(*args: str, env: dict[str, str], log_path: Path, **popen: Any) -> subprocess.Popen[bytes] | ForkedCommand:
    """Start ``python -m worker ARGS`` in the background, stdout+stderr to ``log_path`` (``popen``:
    more ``subprocess.Popen`` options, e.g. a ``preexec_fn``): forked by the command server
    (tests/command_server.py) when there are no such options and ``env`` apart from ``REM_*`` is
    the server's, else started as a new interpreter (each start paid about 1 s of CPU for the
    imports)."""
    with log_path.open("ab") as handle:
        if not popen and start_environment(env) == start_environment(COMMAND_SERVER_ENV):
            return command_server().start(list(args), env, ROOT, stdout=handle.fileno(), stderr=handle.fileno())
        return subprocess.Popen(
            [sys.executable, "-m", "worker", *args], stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT, **popen
        )


def busy_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """:func:`worker_env` for a busy data dir: one cycle takes every session (about a second)."""
    return worker_env(data_dir, batch_limit=str(BUSY_SESSIONS), **settings)


def busy_data_dir(base_temp: Path, target: Path) -> Path:
    """Copy of a data dir whose Chroma holds ``BUSY_SESSIONS`` sessions (built once per test run,
    by the first of pytest-xdist's workers to need it)."""
    template = run_temp_dir(base_temp) / "busy-template"
    with FileLock(f"{template}.lock"):
        if not (template / "ready").exists():
            shutil.rmtree(template, ignore_errors=True)
            template.mkdir()
            sessions = [
                make_session(f"busy-{i:05d}", 2, created=f"2026-11-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z")
                for i in range(BUSY_SESSIONS)
            ]
            source = write_sessions(template / "sessions.jsonl", sessions)
            done = run_cli("import", str(source), env={"REM_DATA_DIR": str(template / "data")})
            assert done.returncode == 0, done.stderr
            (template / "ready").touch()
    shutil.copytree(template / "data", target)
    return target


def read_runs(graph_path: Path) -> list[dict[str, Any]]:
    """Every ``rem_runs`` row, oldest first, read through a separate read-only connection."""
    if not graph_path.exists():
        return []
    conn = sqlite3.connect(f"{graph_path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute("SELECT * FROM rem_runs ORDER BY started_at, rowid").fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        conn.close()
    return [{**dict(r), "phases": json.loads(r["phases"] or "{}")} for r in rows]


def wait_for(predicate: Any, *, timeout: float = 60.0, interval: float = 0.005, what: str = "condition") -> Any:
    """Poll ``predicate()`` until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_for_http(url: str, *, timeout: float = 30) -> httpx.Response:
    def answered() -> httpx.Response | None:
        try:
            return httpx.get(url, timeout=2)
        except httpx.HTTPError:
            return None

    return wait_for(answered, timeout=timeout, interval=0.1, what=url)


def integrity(graph_path: Path) -> str:
    conn = sqlite3.connect(graph_path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def stop(proc: subprocess.Popen[bytes], *, timeout: float = 30) -> int:
    """SIGTERM the process (when still running) and return its exit status."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise
