"""``rem-cycle backup``: SQLite's online backup of the graph, safe while a cycle writes."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from store.db import Database, backup_database
from store.errors import DatabaseUnreadableError
from store.graph import GraphStore, Node
from tests.conftest import run_cli


def _count(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one self-contained file
        return conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
    finally:
        conn.close()


def test_backup_while_another_connection_keeps_writing(tmp_path: Path) -> None:
    source = tmp_path / "graph.sqlite3"
    db = Database(source)
    graph = GraphStore(db)
    graph.upsert_nodes([Node(f"CONCEPT:seed-{i}", "CONCEPT", f"seed {i}") for i in range(200)])
    stop = threading.Event()
    written: list[int] = []

    def writer() -> None:
        # A separate connection, as the daemon's would be: one transaction per batch.
        batch = 0
        while not stop.is_set():
            graph.upsert_nodes([Node(f"CONCEPT:w{batch}-{i}", "CONCEPT", f"w {i}") for i in range(50)])
            batch += 1
            written.append(batch)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        counts = []
        for n in range(5):
            result = backup_database(source, tmp_path / "backups" / f"b{n}.sqlite3")
            assert result["integrity"] == "ok"
            counts.append(_count(Path(result["path"])))
    finally:
        stop.set()
        thread.join(30)
    db.close()
    assert written, "the writer never got a transaction in"
    # Every copy is a snapshot between whole transactions: seeds plus whole batches of 50.
    assert all(c >= 200 and (c - 200) % 50 == 0 for c in counts), counts
    assert counts == sorted(counts)
    assert not list((tmp_path / "backups").glob("*.partial"))


def test_backup_replaces_the_destination_only_when_sound(tmp_path: Path) -> None:
    source = tmp_path / "graph.sqlite3"
    Database(source).close()
    dest = tmp_path / "graph-backup.sqlite3"
    dest.write_bytes(b"previous backup")
    backup_database(source, dest)
    assert _count(dest) == 0
    with pytest.raises(DatabaseUnreadableError):
        backup_database(tmp_path / "missing.sqlite3", tmp_path / "other.sqlite3")
    assert not (tmp_path / "other.sqlite3").exists()


def test_backup_command(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    missing = run_cli("backup", str(tmp_path / "b.sqlite3"), env=env)
    assert missing.returncode == 1
    assert "no graph database" in missing.stderr
    assert run_cli("--once", env=env).returncode == 0
    done = run_cli("backup", str(tmp_path / "b.sqlite3"), env=env)
    assert done.returncode == 0, done.stderr
    assert "integrity ok" in done.stdout
    copy = sqlite3.connect(tmp_path / "b.sqlite3")
    try:
        assert copy.execute("SELECT outcome FROM rem_runs").fetchall() == [("completed",)]
    finally:
        copy.close()
