"""The identity index outlives the extract phase (pipelines/resolver.py ``KeptIndex``): the next
phase in the same process takes it up only while the graph's identity epoch is the one it was built
in — any write to names, labels or aliases other than a session commit (a forget, a merge, a
database restored from a copy) makes it rebuild — and a graph digested with a kept index equals one
digested with a fresh index. Real cycles, embedded Chroma, SQLite and PostgreSQL."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.forget import forget_session
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from store.unit_of_work import DatabaseUnitOfWork
from tests.conftest import write_sessions
from tests.test_forget import SESSIONS, _session, canonical
from worker import knowledge
from worker.cycle import run_cycle

MORE = {
    "d": _session("d", "2026-11-04T10:00:00Z", ["GraphStore and the LazyEdgeQueue again, with RetryPolicy.", "See #42."]),
}


async def _digest(settings: Settings, tmp_path: Path, names: list[str]) -> dict[str, Any]:
    """Import these sessions and run one cycle; its extract phase record."""
    await import_sessions(
        write_sessions(tmp_path / f"in-{''.join(names)}.jsonl", [{**SESSIONS, **MORE}[n] for n in names]),
        chroma=ChromaStore(settings), memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result.phases["extract"]


@pytest.mark.both_backends
async def test_the_next_phase_takes_up_the_kept_index_and_digests_as_a_fresh_one_would(
    settings: Settings, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    assert (await _digest(settings, tmp_path, ["a", "b"]))["identity_index_builds"] == 1
    kept = await _digest(settings, tmp_path, ["c"])
    assert (kept["sessions_digested"], kept["identity_index_builds"]) == (1, 0)
    assert (await _digest(settings, tmp_path, ["d"]))["identity_index_builds"] == 0

    fresh_dir = tmp_path / "fresh"
    clean_env.setenv("REM_DATA_DIR", str(fresh_dir))
    fresh = load_settings(data_dir=fresh_dir, database_url="")
    await _digest(fresh, tmp_path, ["a", "b"])
    for name in ("c", "d"):
        knowledge._KEPT_INDEXES.clear()
        assert (await _digest(fresh, tmp_path, [name]))["identity_index_builds"] == 1
    assert canonical(settings) == canonical(fresh_dir / "graph.sqlite3")


@pytest.mark.both_backends
async def test_a_forget_between_phases_makes_the_next_one_rebuild(settings: Settings, tmp_path: Path) -> None:
    await _digest(settings, tmp_path, ["a", "b"])
    db = open_database(settings)
    try:
        forget_session(DatabaseUnitOfWork(db), "b")  # removes what only b named (DrainWorker): not a commit
    finally:
        db.close()
    after = await _digest(settings, tmp_path, ["c"])
    assert (after["sessions_digested"], after["identity_index_builds"]) == (1, 1)
    assert (await _digest(settings, tmp_path, ["d"]))["identity_index_builds"] == 0


async def test_a_database_restored_from_a_copy_is_not_taken_for_the_kept_one(settings: Settings, tmp_path: Path) -> None:
    await _digest(settings, tmp_path, ["a"])
    shutil.copyfile(settings.graph_path, tmp_path / "copy.sqlite3")
    assert (await _digest(settings, tmp_path, ["b"]))["identity_index_builds"] == 0
    shutil.copyfile(tmp_path / "copy.sqlite3", settings.graph_path)  # b's commit is gone again
    for companion in ("-wal", "-shm"):
        Path(f"{settings.graph_path}{companion}").unlink(missing_ok=True)
    restored = await _digest(settings, tmp_path, ["c"])
    assert restored["identity_index_builds"] == 1


async def test_the_index_kept_at_a_copy_is_taken_up_once_the_copy_is_restored(
    settings: Settings, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """The public hook a benchmark uses to restore a graph and the index kept with it
    (``kept_identity_index`` / ``install_identity_index``, bench/bench_cycle_growth.py): the index
    handed back is taken up, it is a copy that never learnt the commits made after it was taken,
    and the graph it digests equals one digested with a fresh index."""
    await _digest(settings, tmp_path, ["a"])
    shutil.copyfile(settings.graph_path, tmp_path / "copy.sqlite3")
    at_copy = knowledge.kept_identity_index(settings)
    assert at_copy is not None
    known = set(at_copy.index.nodes)
    assert (await _digest(settings, tmp_path, ["b"]))["identity_index_builds"] == 0
    live = knowledge.kept_identity_index(settings)
    assert live is not None and set(live.index.nodes) > known == set(at_copy.index.nodes)
    shutil.copyfile(tmp_path / "copy.sqlite3", settings.graph_path)  # b's commit is gone again
    for companion in ("-wal", "-shm"):
        Path(f"{settings.graph_path}{companion}").unlink(missing_ok=True)
    knowledge.install_identity_index(settings, at_copy)
    restored = await _digest(settings, tmp_path, ["c"])
    assert (restored["sessions_digested"], restored["identity_index_builds"]) == (2, 0)  # b again, and c

    fresh_dir = tmp_path / "fresh"
    clean_env.setenv("REM_DATA_DIR", str(fresh_dir))
    fresh = load_settings(data_dir=fresh_dir, database_url="")
    await _digest(fresh, tmp_path, ["a"])
    knowledge._KEPT_INDEXES.clear()
    assert (await _digest(fresh, tmp_path, ["b", "c"]))["identity_index_builds"] == 1
    assert canonical(settings) == canonical(fresh_dir / "graph.sqlite3")
