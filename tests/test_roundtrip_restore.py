"""`rem-cycle restore` of a backup made before a `forget` does not bring back what was forgotten:
README promises a forget is final and no command undoes it (roundtrip audit). Real SQLite files,
real embedded Chroma, the real CLI for backup and restore."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.backend import backup as store_backup
from store.backend import open_database
from store.chroma import ChromaStore
from tests.conftest import make_session, run_cli, write_sessions
from worker.cycle import run_cycle
from worker.knowledge import forget


def _env(settings: Settings) -> dict[str, str]:
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    if settings.database_url is not None:
        env["REM_DATABASE_URL"] = settings.database_url.get_secret_value()
    return env


def _count(settings: Settings, sql: str, params: tuple[Any, ...] = ()) -> int:
    db = open_database(settings, readonly=True)
    try:
        return db.query(sql, params)[0][0]
    finally:
        db.close()


def _gone(settings: Settings) -> dict[str, int]:
    """What is left in the graph of session ``fa`` and turn ``fb-t0001`` (both forgotten)."""
    return {
        "session": _count(settings, "SELECT COUNT(*) FROM nodes WHERE id = 'session:fa'"),
        "session turns": _count(settings, "SELECT COUNT(*) FROM nodes WHERE id LIKE 'memory:fa-%'"),
        "session points": _count(settings, "SELECT COUNT(*) FROM node_points WHERE anchor = 'session:fa'"),
        "session text": _count(settings, "SELECT COUNT(*) FROM recall_turns WHERE session_id = 'session:fa'"),
        "turn": _count(settings, "SELECT COUNT(*) FROM nodes WHERE id = 'memory:fb-t0001'"),
        "turn points": _count(settings, "SELECT COUNT(*) FROM node_points WHERE memory_id = 'memory:fb-t0001'"),
        "turn text": _count(settings, "SELECT COUNT(*) FROM recall_turns WHERE memory_id = 'memory:fb-t0001'"),
    }


async def _digested_backed_up_then_forgotten(settings: Settings, tmp_path: Path) -> Path:
    text = "The {sid} worker talks to the QueueDrainer about turn {i}."
    source = write_sessions(tmp_path / "in.jsonl", [make_session(sid, 3, text=text) for sid in ("fa", "fb", "fc")])
    await import_sessions(source, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)
    assert (await run_cycle(settings)).outcome == "completed"
    backup = tmp_path / "backups" / "graph.sqlite3"
    store_backup(settings, backup)  # what `rem-cycle backup` runs
    assert set(_gone(settings).values()) != {0}
    forget(settings, session="fa")
    forget(settings, memory="memory:fb-t0001")
    assert set(_gone(settings).values()) == {0}
    return backup


@pytest.mark.both_backends
async def test_a_restored_backup_made_before_a_forget_does_not_bring_it_back(settings: Settings, tmp_path: Path) -> None:
    backup = await _digested_backed_up_then_forgotten(settings, tmp_path)

    done = run_cli("restore", str(backup), "--json", env=_env(settings), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # Before: the session, its turns, points and text, and the turn, all back — and, with no
    # tombstone left, kept by every later cycle while their rows are in Chroma.
    assert set(_gone(settings).values()) == {0}, _gone(settings)
    assert json.loads(done.stdout)["forgotten_again"] == {"sessions": 1, "memories": 1, "nodes": 0}
    assert _count(settings, "SELECT COUNT(*) FROM tombstones") == 2
    assert (await run_cycle(settings)).outcome == "completed"
    assert set(_gone(settings).values()) == {0}, _gone(settings)
    assert _count(settings, "SELECT COUNT(*) FROM nodes WHERE id IN ('session:fb', 'session:fc', 'memory:fb-t0000')") == 3


async def test_a_restore_over_a_damaged_database_says_forgets_may_be_back(settings: Settings, tmp_path: Path) -> None:
    backup = await _digested_backed_up_then_forgotten(settings, tmp_path)
    for suffix in ("-wal", "-shm"):
        Path(f"{settings.graph_path}{suffix}").unlink(missing_ok=True)
    settings.graph_path.write_bytes(b"this is no database " * 1000)  # the reason to restore

    done = run_cli("restore", str(backup), "--json", env=_env(settings), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "forgets_unread" in json.loads(done.stdout)
    assert "so what forget took out after the backup may be back: forget it again" in done.stderr
