"""SIGINT/SIGTERM during ``import``, ``drain`` and ``backfill``: the real CLI, caught mid-way,
exits 128 + signal with one line saying what was done and that re-running is safe, and
re-running completes with nothing lost."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from config import load_settings
from tests.conftest import ROOT, make_session, run_cli, write_sessions
from tests.daemon_support import busy_data_dir, wait_for
from tests.lazy_fixtures import edge_count, queue_of, read_jsonl
from tests.test_drain_kill import MISSING, RESOLVABLE, make_template, queue_lines
from worker.cycle import open_stores

IMPORT_SESSIONS, IMPORT_TURNS = 3000, 3


def _env(data: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env.update(PYTHONPATH=str(ROOT), REM_DATA_DIR=str(data), REM_LOG_LEVEL="warning")
    env.update({f"REM_{key.upper()}": value for key, value in settings.items()})
    return env


def _interrupt_midway(args: list[str], env: dict[str, str], signum: int, midway: Callable[[], bool], *,
                      signalled: Callable[[], None] = lambda: None) -> subprocess.CompletedProcess[str]:
    """Start ``python -m worker ARGS``, send ``signum`` once ``midway()`` holds, call ``signalled()``
    and collect it."""
    proc = subprocess.Popen([sys.executable, "-m", "worker", *args], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: proc.poll() is not None or midway(), timeout=120, interval=0.01, what="the command mid-way")
        assert proc.poll() is None, "the command finished before it could be interrupted"
        proc.send_signal(signum)
        signalled()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _count(path: Path, sql: str) -> int:
    """A count read through a separate read-only connection; 0 while the table is not there yet."""
    if not path.exists():
        return 0
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute(sql).fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def _message(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("rem-cycle: ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_sigint_mid_import_exits_130_and_a_rerun_imports_everything(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sessions = [make_session(f"imp-{i:05d}", IMPORT_TURNS) for i in range(IMPORT_SESSIONS)]
    source = write_sessions(tmp_path / "sessions.jsonl", sessions)
    chroma_db = load_settings(data_dir=data).chroma_path / "chroma.sqlite3"
    done = _interrupt_midway(
        ["import", str(source)], _env(data), signal.SIGINT,
        lambda: _count(chroma_db, "SELECT COUNT(*) FROM embeddings") >= 500,
    )
    assert done.returncode == 130, done.stderr[-3000:]
    message = _message(done.stderr)
    assert message.startswith("rem-cycle: import stopped by SIGINT: ")
    assert "re-running the same import is safe" in message
    assert done.stdout == ""  # no success summary for a half-done import

    again = run_cli("import", "--json", str(source), env={"REM_DATA_DIR": str(data)})
    assert again.returncode == 0, again.stderr[-3000:]
    stats = json.loads(again.stdout)
    assert stats["sessions"] == IMPORT_SESSIONS
    assert stats["memories_written"] + stats["memories_unchanged"] == IMPORT_SESSIONS * IMPORT_TURNS
    # The interrupted run's rows (500 at least, memories and summaries) were kept, not redone.
    assert stats["memories_unchanged"] + stats["summaries_unchanged"] >= 500
    assert _count(chroma_db, "SELECT COUNT(*) FROM embeddings") == IMPORT_SESSIONS * (IMPORT_TURNS + 1)


async def test_sigterm_mid_drain_exits_143_and_a_rerun_links_every_line(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    data = await make_template(tmp_path / "template")
    settings = load_settings(data_dir=data)
    queue = queue_of(settings)
    queue.append_lines(queue_lines(7))
    env = _env(data, write_batch_size="100")
    # The signal must come before the drain's last batch, whatever the machine's pace: this process
    # holds the graph's write lock until it has sent it, so the drain (which checks for a stop after
    # each batch) cannot commit past the batch it is in. Waiting instead for 200 linked edges let a
    # test paused for a quarter of a second find the drain finished.
    gate = sqlite3.connect(settings.graph_path, isolation_level=None, timeout=30)
    gate.execute("BEGIN IMMEDIATE")
    try:
        done = _interrupt_midway(["drain", "--json"], env, signal.SIGTERM, queue.draining_path.exists,
                                 signalled=lambda: gate.execute("ROLLBACK"))
    finally:
        gate.close()
    assert done.returncode == 143, done.stderr[-3000:]
    message = _message(done.stderr)
    assert message.startswith("rem-cycle: drain stopped by SIGTERM: ")
    assert "the unread lines are back in the queue untouched" in message
    assert "re-running the drain is safe" in message
    first = json.loads(done.stdout)  # the drain stopped at a batch boundary and reported
    assert 0 < first["succeeded"] < RESOLVABLE
    assert f"{first['succeeded']} queued edges linked" in message
    assert queue.draining_files() == []

    again = run_cli("drain", "--json", env={"REM_DATA_DIR": str(data)})
    assert again.returncode == 0, again.stderr[-3000:]
    stores = await open_stores(settings)
    try:
        assert edge_count(stores.graph, "MENTIONED_IN") == RESOLVABLE
    finally:
        stores.close()
    assert {r["target"] for r in read_jsonl(queue.path)} == {f"memory:missing-{i}" for i in range(MISSING)}


@pytest.mark.slow
def test_sigint_mid_backfill_exits_130_and_a_rerun_syncs_every_session(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.daemon_support import BUSY_SESSIONS

    data = busy_data_dir(tmp_path_factory.getbasetemp(), tmp_path / "data")
    graph = data / "graph.sqlite3"
    sessions = "SELECT COUNT(*) FROM nodes WHERE label = 'SESSION'"
    done = _interrupt_midway(["backfill", "--days", "3650", "--skip-drain"], _env(data), signal.SIGINT, lambda: _count(graph, sessions) >= 50)
    assert done.returncode == 130, done.stderr[-3000:]
    message = _message(done.stderr)
    assert message.startswith("rem-cycle: backfill stopped by SIGINT: ")
    assert f"of {BUSY_SESSIONS} sessions" in message and "re-running the backfill is safe" in message
    assert 0 < _count(graph, sessions) < BUSY_SESSIONS

    again = run_cli("backfill", "--days", "3650", "--skip-drain", "--json", env={"REM_DATA_DIR": str(data)})
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["sessions_failed"] == 0
    assert _count(graph, sessions) == BUSY_SESSIONS
