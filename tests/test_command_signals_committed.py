"""SIGINT/SIGTERM while a command of one transaction (``merge``, ``unmerge``, ``forget``,
``retry``, ``backup``, ``restore``, ``enqueue``, ``export --out``) is in it: the transaction completes (a thread call is never
abandoned), so the command must print what it committed and exit with its own status. Before, it
exited 130 with ``interrupted by SIGINT`` (or was killed by SIGTERM) and no result line, although
the work was done. (A signal before the command starts its work — at start-up — stops it with
nothing changed: ``test_audit_cli_signals``.)

The command is held inside its transaction by a lock the test takes first (PostgreSQL: ``LOCK
TABLE``; SQLite: a write transaction, or an exclusive lock on the backup file restore reads), and
signalled once it waits there; the lock is then let go.

Commands of many transactions (``reindex``, ``import-notes``) held the same way stop with exit
128 + signal, and the line they print says what they committed — the transaction they were in
included. Before, they said ``interrupted by SIGINT`` whatever they had done (SIGTERM: killed)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from tests.conftest import ROOT, run_cli
from tests.graph_fixtures import build_sample_graph
from tests.daemon_support import wait_for
from tests.test_recall import build


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env.update(PYTHONPATH=str(ROOT), REM_DATA_DIR=str(settings.data_dir), REM_LOG_LEVEL="warning")
    if settings.database_url is not None:
        env["REM_DATABASE_URL"] = settings.database_url.get_secret_value()
    return env


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has the file ``path`` open (Linux)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fds / fd) == str(path.resolve()) for fd in os.listdir(fds))
    except OSError:
        return False


@contextmanager
def _held(settings: Settings, table: str, *, file: Path | None = None) -> Iterator[tuple[Callable[[int], bool], Callable[[], None]]]:
    """Hold the lock that keeps a command inside its transaction; yields ``(waiting, release)``:
    ``waiting(pid)`` is true once the command waits on the lock. PostgreSQL: ``table`` locked
    ACCESS EXCLUSIVE. SQLite: an exclusive transaction on ``file`` (default the graph database),
    and the command has that file open."""
    if settings.database_url is not None:
        import psycopg

        url = settings.database_url.get_secret_value()
        with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as watcher:
            holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            # Waiting on the holder's own lock: another test's waiter (tests run in parallel on one
            # database) must not count, or the signal comes before the command is in its transaction.
            yield (lambda pid: watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (holder.info.backend_pid,)
            ).fetchone()[0] > 0), holder.rollback
        return
    path = file or settings.graph_path
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        yield (lambda pid: _has_open(pid, path)), lambda: holder.execute("ROLLBACK")
    finally:
        holder.close()


def _signal_in_transaction(args: list[str], settings: Settings, signum: int, *, table: str, file: Path | None = None,
                           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m worker ARGS`` (with ``env`` added) held inside its transaction, send it
    ``signum`` there, let the transaction go on, and collect the command."""
    with _held(settings, table, file=file) as (waiting, release):
        proc = subprocess.Popen([sys.executable, "-m", "worker", *args], env={**_env(settings), **(env or {})}, cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: proc.poll() is not None or waiting(proc.pid), timeout=120, interval=0.01,
                     what="the command inside its transaction")
            assert proc.poll() is None, "the command finished before it could be signalled"
            proc.send_signal(signum)
            time.sleep(0.3)  # the signal is handled while the transaction still waits
            release()
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def graph(settings: Settings) -> Settings:
    build_sample_graph(settings.graph_path, opener=lambda _path: open_database(settings)).close()
    return settings


@pytest.mark.both_backends
def test_a_merge_signalled_inside_its_transaction_prints_the_merge_and_exits_0(graph: Settings) -> None:
    done = _signal_in_transaction(["merge", "METHOD:drain", "CLASS:LazyEdgeQueue"], graph, signal.SIGINT, table="merges")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("merged METHOD:drain into CLASS:LazyEdgeQueue (merge #"), done.stdout + done.stderr[-2000:]
    shown = run_cli("show", "METHOD:drain", "--json", env=_env(graph))
    assert json.loads(shown.stdout)["id"] == "CLASS:LazyEdgeQueue"  # committed: the name is an alias now


@pytest.mark.both_backends
def test_a_forget_signalled_inside_its_transaction_prints_what_it_removed(graph: Settings) -> None:
    done = _signal_in_transaction(["forget", "--session", "s2", "--json"], graph, signal.SIGTERM, table="tombstones")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["nodes_removed"] > 0, done.stdout
    assert run_cli("show", "session:s2", env=_env(graph)).returncode == 1  # committed


@pytest.mark.both_backends
def test_a_retry_signalled_inside_its_transaction_prints_what_it_reset(graph: Settings) -> None:
    done = _signal_in_transaction(["retry", "--all"], graph, signal.SIGINT, table="chunk_results")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("nothing to reset: no session is failing"), done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_backup_signalled_while_pg_dump_waits_prints_the_backup(graph: Settings, tmp_path: Path) -> None:
    done = _signal_in_transaction(["backup", str(tmp_path / "graph.dump")], graph, signal.SIGINT, table="nodes")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("backed up "), done.stdout + done.stderr[-2000:]
    assert (tmp_path / "graph.dump").stat().st_size > 0


def test_a_restore_signalled_while_it_reads_the_backup_prints_the_restore(graph: Settings, tmp_path: Path) -> None:
    backup = tmp_path / "graph.backup"
    assert run_cli("backup", str(backup), env=_env(graph)).returncode == 0
    done = _signal_in_transaction(["restore", str(backup)], graph, signal.SIGTERM, table="", file=backup)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("restored "), done.stdout + done.stderr[-2000:]


@pytest.mark.both_backends
def test_an_enqueue_signalled_while_it_writes_prints_what_it_queued(graph: Settings, tmp_path: Path) -> None:
    edges = tmp_path / "edges.jsonl"
    edges.write_text("".join(json.dumps({"source": f"CONCEPT:a{i}", "target": "CONCEPT:b", "relationship": "R"}) + "\n" for i in range(3)))
    done = _signal_in_transaction(["enqueue", str(edges)], graph, signal.SIGINT, table="lazy_edges", env={"REM_LAZY_QUEUE": "database"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("queued 3 lazy edges in the queue table"), done.stdout + done.stderr[-2000:]
    db = open_database(graph)
    try:
        assert db.query("SELECT COUNT(*) FROM lazy_edges")[0][0] == 3  # committed, as it says
    finally:
        db.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_an_export_to_a_file_signalled_while_it_reads_leaves_the_whole_new_file(graph: Settings, tmp_path: Path) -> None:
    """(PostgreSQL: on SQLite a writer's lock does not hold a reader up.) Before, SIGTERM killed
    it (-15) with no line said."""
    out = tmp_path / "graph.json"
    out.write_text("the old export")
    done = _signal_in_transaction(["export", "--out", str(out)], graph, signal.SIGTERM, table="nodes")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.startswith(f"wrote {out} (json): "), done.stderr[-2000:]
    assert len(json.loads(out.read_text())["nodes"]) > 0  # the whole new file
    assert not (tmp_path / "graph.json.part").exists()


@pytest.mark.both_backends
def test_a_reindex_signalled_while_it_writes_says_how_many_turns_it_wrote(settings: Settings, tmp_path: Path) -> None:
    asyncio.run(build(settings, tmp_path))  # real Chroma rows, ingested
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            conn.execute("DELETE FROM recall_turns")
    finally:
        db.close()
    done = _signal_in_transaction(["reindex"], settings, signal.SIGINT, table="recall_turns")
    assert done.returncode == 130, done.stdout + done.stderr[-2000:]
    said = re.search(r"reindex stopped by SIGINT: (\d+) of the (\d+) turns read so far were written", done.stderr)
    assert said is not None, done.stderr[-2000:]
    db = open_database(settings)
    try:
        assert int(said[1]) == db.query("SELECT COUNT(*) FROM recall_turns")[0][0], done.stderr[-2000:]
    finally:
        db.close()
    if settings.database_url is not None:  # held inside its first page's transaction: that page is written
        assert int(said[1]) == 5, done.stderr[-2000:]


@pytest.mark.both_backends
def test_an_import_of_notes_signalled_inside_a_write_says_which_files_it_imported(graph: Settings, tmp_path: Path) -> None:
    """PostgreSQL: held in the file's commit (``node_points``), which completes: 1 imported.
    SQLite: held at the file's first write, before its commit: 0 imported, the file not marked."""
    note = tmp_path / "notes" / "design.md"
    note.parent.mkdir()
    note.write_text("# Design\n\nThe LazyEdgeQueue feeds the DrainWorker, which calls the GraphStore.\n")
    settings = graph
    done = _signal_in_transaction(["import-notes", str(note.parent)], settings, signal.SIGINT, table="node_points")
    assert done.returncode == 130, done.stdout + done.stderr[-2000:]
    said = re.search(r"import-notes stopped by SIGINT: (\d+) imported, 0 unchanged, 0 failed \(files done\)", done.stderr)
    assert said is not None, done.stderr[-2000:]
    db = open_database(settings)
    try:
        marked = [r[0] for r in db.query("SELECT properties FROM nodes WHERE label = 'NOTE'") if json.loads(r[0]).get("contentHash")]
    finally:
        db.close()
    assert int(said[1]) == len(marked) == (1 if settings.database_url is not None else 0), done.stderr[-2000:]


def test_an_enqueue_signalled_while_it_reads_standard_input_stops_at_once_with_nothing_queued(graph: Settings) -> None:
    """Standard input left open (a producer that has not finished): the read would never end, and
    a thread call is never abandoned unless told — the signal must not wait for it."""
    proc = subprocess.Popen([sys.executable, "-m", "worker", "enqueue", "-"], env={**_env(graph), "REM_LAZY_QUEUE": "database"},
                            cwd=ROOT, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps({"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R"}) + "\n")
        proc.stdin.flush()

        def reading() -> bool:  # its own copy of standard input is open: the read has begun
            fds = Path(f"/proc/{proc.pid}/fd")
            try:
                pipe = os.readlink(fds / "0")
                return sum(1 for fd in os.listdir(fds) if os.readlink(fds / fd) == pipe) > 1
            except OSError:
                return False

        wait_for(lambda: proc.poll() is not None or reading(), timeout=60, interval=0.01, what="enqueue reading standard input")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.stdin.close()
    assert "enqueue stopped by SIGINT: nothing was queued" in proc.stderr.read() if proc.stderr else False
    db = open_database(graph)
    try:
        assert db.query("SELECT COUNT(*) FROM lazy_edges")[0][0] == 0
    finally:
        db.close()
