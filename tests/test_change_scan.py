"""The change scan reads only the rows added to Chroma since its marks (store/scan_marks.py), and no
change made in Chroma is lost: new rows and new summaries at the next cycle, deleted rows and a turn
moved to another session at the next cycle too (a deletion moves the rows after it, so the marks no
longer hold and every row is read), a summary edited in place within REM_FULL_SCAN_INTERVAL_SECONDS.
Real cycles, real embedded Chroma (and a `chroma run` server for the order the marks rest on)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import chromadb
import pytest
from chromadb.config import Settings as ChromaSettings

from config import Settings
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from store.scan_marks import FULL_SCAN_DUE
from tests.conftest import write_sessions
from worker.cycle import run_cycle


def _session(sid: str, turns: int, *, summary: bool = True) -> dict[str, Any]:
    session: dict[str, Any] = {
        "sessionId": sid, "title": f"Session {sid}", "createdAt": f"2026-11-0{1 + ord(sid[0]) % 9}T10:00:00Z",
        "turns": [{"id": f"{sid}-t{i}", "role": "user", "text": f"The {sid.upper()}Worker reads src/{sid}/mod{i}.py."} for i in range(turns)],
    }
    if summary:
        session["summary"] = f"about {sid}"
    else:
        session["noSummary"] = True
    return session


async def _import(settings: Settings, tmp_path: Path, sessions: list[dict[str, Any]]) -> None:
    path = write_sessions(tmp_path / f"in-{'-'.join(s['sessionId'] for s in sessions)}.jsonl", sessions)
    stats = await import_sessions(path, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                                  summary_collection=settings.session_collection)
    assert not stats.bad_lines


async def _ingest(settings: Settings) -> dict[str, Any]:
    """One real cycle; its ingest phase record."""
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result.phases["ingest"]


def _query(settings: Settings, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    db = open_database(settings)
    try:
        return [tuple(r) for r in db.query(sql, params)]
    finally:
        db.close()


def _turns(settings: Settings) -> dict[str, list[str]]:
    """Ingest's memory index: each session's memory ids."""
    found: dict[str, list[str]] = {}
    for memory_id, session_id in _query(settings, "SELECT memory_id, session_id FROM memory_index ORDER BY memory_id"):
        found.setdefault(session_id, []).append(memory_id)
    return found


async def _add_turn(settings: Settings, memory_id: str, session_id: str, text: str) -> None:
    meta = {"sessionId": session_id, "turnIndex": 9, "role": "user", "createdAt": "2026-11-05T10:00:00Z"}
    await ChromaStore(settings).upsert(settings.memory_collection, [memory_id], [text], [meta])


async def _full_scan_finds_nothing_more(settings: Settings) -> None:
    """A full scan now (the marks aged past the interval) finds no session changed: the scans of
    new rows computed every revision as the full scan does."""
    _age_marks(settings)
    ingest = await _ingest(settings)
    assert ingest["scan"] == "full" and ingest["sessions_changed"] == 0, ingest


def _age_marks(settings: Settings) -> None:
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            conn.execute("UPDATE chroma_scan_state SET full_scan_at = ?", ("2000-01-01T00:00:00+00:00",))
    finally:
        db.close()


@pytest.mark.both_backends
async def test_new_rows_and_new_turns_are_read_from_the_end_only(settings: Settings, tmp_path: Path) -> None:
    await _import(settings, tmp_path, [_session("a", 3), _session("b", 2)])
    assert (await _ingest(settings))["scan"] == "full"  # no marks yet
    await _import(settings, tmp_path, [_session("c", 2)])
    second = await _ingest(settings)
    assert (second["scan"], second["rows_scanned"], second["sessions_changed"], second["sessions_synced"]) == ("new rows", 3, 1, 1)
    await _add_turn(settings, "a-t9", "a", "The AWorker also writes src/a/extra.py.")
    third = await _ingest(settings)
    assert (third["scan"], third["rows_scanned"], third["sessions_changed"]) == ("new rows", 1, 1)
    assert _turns(settings)["a"] == ["a-t0", "a-t1", "a-t2", "a-t9"]
    assert _query(settings, "SELECT COUNT(*) FROM nodes WHERE id = 'memory:a-t9'")[0][0] == 1
    idle = await _ingest(settings)
    assert (idle["scan"], idle["rows_scanned"], idle["sessions_changed"]) == ("new rows", 0, 0)
    await _full_scan_finds_nothing_more(settings)


@pytest.mark.both_backends
async def test_deleted_rows_are_seen_at_the_next_cycle(settings: Settings, tmp_path: Path) -> None:
    await _import(settings, tmp_path, [_session("a", 3), _session("b", 2), _session("c", 2)])
    await _ingest(settings)
    chroma = ChromaStore(settings)
    (await chroma.memories()).delete(ids=["a-t0"])  # the first row: every row after it moves
    first = await _ingest(settings)
    assert (first["scan"], first["sessions_changed"], first["sessions_synced"]) == ("full", 1, 1)
    assert _turns(settings)["a"] == ["a-t1", "a-t2"]
    (await chroma.memories()).delete(ids=["b-t0", "b-t1"])
    (await chroma.summaries()).delete(where={"sessionId": "b"})
    second = await _ingest(settings)
    assert (second["scan"], second["sessions_retracted"]) == ("full", 1)
    assert "b" not in _turns(settings) and _query(settings, "SELECT COUNT(*) FROM nodes WHERE id = 'session:b'")[0][0] == 0
    assert (await _ingest(settings))["scan"] == "new rows"  # the full scan left marks again
    await _full_scan_finds_nothing_more(settings)


@pytest.mark.both_backends
async def test_a_turn_moved_to_another_session_is_seen_at_the_next_cycle(settings: Settings, tmp_path: Path) -> None:
    await _import(settings, tmp_path, [_session("a", 3), _session("b", 2)])
    await _ingest(settings)
    chroma = ChromaStore(settings)
    (await chroma.memories()).delete(ids=["a-t1"])
    await _add_turn(settings, "b-from-a", "b", "The AWorker reads src/a/mod1.py.")
    moved = await _ingest(settings)
    assert (moved["sessions_changed"], moved["sessions_synced"]) == (2, 2)
    assert _turns(settings) == {"a": ["a-t0", "a-t2"], "b": ["b-from-a", "b-t0", "b-t1"]}
    await _full_scan_finds_nothing_more(settings)


@pytest.mark.both_backends
async def test_a_new_summary_is_seen_at_once_and_one_edited_in_place_within_the_full_scan_interval(settings: Settings, tmp_path: Path) -> None:
    await _import(settings, tmp_path, [_session("a", 2), _session("b", 2, summary=False)])
    await _ingest(settings)
    chroma = ChromaStore(settings)
    meta = {"sessionId": "b", "title": "Session b", "createdAt": "2026-11-04T10:00:00Z"}
    await chroma.upsert(settings.session_collection, ["summary-of-b"], ["b, summed up"], [meta])
    added = await _ingest(settings)
    assert (added["scan"], added["sessions_changed"]) == ("new rows", 1)
    summary_of = "SELECT properties FROM nodes WHERE id = ?"
    assert "b, summed up" in _query(settings, summary_of, ("session:b",))[0][0]
    stored = (await chroma.summaries()).get(where={"sessionId": "a"}, include=["metadatas"])
    await chroma.upsert(settings.session_collection, stored["ids"], ["a, rewritten"], stored["metadatas"])  # in place: same id
    unseen = await _ingest(settings)
    assert (unseen["scan"], unseen["sessions_changed"]) == ("new rows", 0)  # not yet: nothing was added
    _age_marks(settings)  # REM_FULL_SCAN_INTERVAL_SECONDS have passed
    seen = await _ingest(settings)
    assert (seen["scan"], seen["sessions_changed"]) == ("full", 1)
    assert "a, rewritten" in _query(settings, summary_of, ("session:a",))[0][0]


async def test_a_backlog_makes_every_scan_a_full_one_until_it_is_ingested(settings: Settings, tmp_path: Path) -> None:
    small = settings.model_copy(update={"batch_limit": 2})
    await _import(settings, tmp_path, [_session("a", 1), _session("b", 1), _session("c", 1)])
    first = await _ingest(small)
    assert (first["scan"], first["backlog"]) == ("full", 1)
    # The marks stay (the next full scan reads the rows written again after them: audit23), due.
    assert {r[0] for r in _query(settings, "SELECT full_scan_at FROM chroma_scan_state")} == {FULL_SCAN_DUE}
    await _import(settings, tmp_path, [_session("d", 1)])
    second = await _ingest(small)
    assert (second["scan"], second["sessions_synced"], second["backlog"]) == ("full", 2, 0)
    assert (await _ingest(small))["scan"] == "new rows"
    assert sorted(_turns(settings)) == ["a", "b", "c", "d"]


def test_chroma_returns_rows_in_insertion_order_embedded_and_served(tmp_path: Path, chroma_server: str) -> None:
    """What the marks rest on: ``get`` pages in insertion order; an upsert or update of an existing
    id keeps its place; a deleted id re-added goes to the end."""
    host, port = chroma_server.rsplit("//", 1)[1].split(":")
    clients = {
        "embedded": chromadb.PersistentClient(path=str(tmp_path / "chroma"), settings=ChromaSettings(anonymized_telemetry=False)),
        "served": chromadb.HttpClient(host=host, port=int(port), settings=ChromaSettings(anonymized_telemetry=False)),
    }
    rng = random.Random(7)
    for kind, client in clients.items():
        coll = client.get_or_create_collection(f"order-{kind}", embedding_function=None)
        ids = list(dict.fromkeys(f"r{rng.randrange(10**9):09d}" for _ in range(600)))
        for start in range(0, len(ids), 150):
            part = ids[start : start + 150]
            coll.add(ids=part, embeddings=[[rng.random(), rng.random()] for _ in part], metadatas=[{"n": 1} for _ in part])
        coll.delete(ids=[ids[10], ids[300]])
        coll.upsert(ids=[ids[20]], embeddings=[[0.0, 1.0]], metadatas=[{"n": 2}])
        coll.update(ids=[ids[30]], metadatas=[{"n": 3}])
        coll.add(ids=[ids[10], "late"], embeddings=[[1.0, 0.0], [0.5, 0.5]])
        expected = [i for i in ids if i not in (ids[10], ids[300])] + [ids[10], "late"]
        assert coll.get(include=[])["ids"] == expected, kind
        assert coll.get(include=[], offset=580, limit=50)["ids"] == expected[580:], kind
