"""Live ingestion against a real embedded Chroma and a real graph database, SQLite and PostgreSQL
(DESIGN §4.2)."""

from pathlib import Path

import pytest

from config import Settings
from pipelines.importer import import_sessions
from pipelines.ingest import (
    plan_session_sync,
    scan_session_revisions,
    session_node,
    memory_node,
    BACKFILL_MARKER,
    sync_session_to_graph,
    sync_sessions_to_graph,
)
from store.chroma import MemoryRow
from tests.conftest import make_session, write_sessions
from worker.cycle import Stores

pytestmark = pytest.mark.both_backends

async def load(stores: Stores, settings: Settings, tmp_path: Path, sessions: list[dict]) -> None:
    path = write_sessions(tmp_path / "in.jsonl", sessions)
    stats = await import_sessions(path, chroma=stores.chroma, memory_collection=settings.memory_collection,
                                  summary_collection=settings.session_collection)
    assert not stats.bad_lines


async def test_sync_creates_nodes_edges_and_markers(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    await load(stores, settings, tmp_path, [make_session("s1", 3), make_session("s2", 2, summary=False)])
    stats = await sync_session_to_graph("s1", chroma=stores.chroma, unit=stores.unit)
    assert stats.as_dict() == {"processed": 3, "upserted": 4, "skipped": 0, "errors": 0}
    session = stores.graph.get_node("session:s1")
    assert session.label == "SESSION" and session.name == "Session s1"
    assert session.properties["liveIngested"] is True and "backfilled" not in session.properties
    assert session.properties["summary"] == "Summary of s1"
    memories = stores.graph.nodes_by_label("MEMORY")
    assert [m.id for m in memories] == ["memory:s1-t0000", "memory:s1-t0001", "memory:s1-t0002"]
    assert all(m.properties["liveIngested"] is True and m.properties["sessionId"] == "s1" for m in memories)
    assert [m.properties["turnIndex"] for m in memories] == [0, 1, 2]
    for m in memories:
        assert stores.graph.get_edge(m.id, "session:s1", "ORIGINATES_IN") is not None
    # No leakage: s2's rows were not touched by syncing s1.
    assert stores.graph.get_node("session:s2") is None
    assert stores.graph.counts()["edges"] == {"ORIGINATES_IN": 3}


async def test_second_sync_upserts_nothing(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    await load(stores, settings, tmp_path, [make_session("s1", 4)])
    await sync_session_to_graph("s1", chroma=stores.chroma, unit=stores.unit)
    again = await sync_session_to_graph("s1", chroma=stores.chroma, unit=stores.unit)
    assert again.as_dict() == {"processed": 4, "upserted": 0, "skipped": 4, "errors": 0}


async def test_session_without_memories_still_upserts_its_node(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    await load(stores, settings, tmp_path, [make_session("lonely", 0)])
    stats = await sync_session_to_graph("lonely", chroma=stores.chroma, unit=stores.unit)
    assert stats.upserted == 1
    assert stores.graph.get_node("session:lonely").properties["memoryCount"] == 0


async def test_minimal_session_when_no_summary(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    await load(stores, settings, tmp_path, [make_session("nosum", 2, summary=False)])
    await sync_session_to_graph("nosum", chroma=stores.chroma, unit=stores.unit)
    node = stores.graph.get_node("session:nosum")
    assert node.properties["minimal"] is True and node.properties["liveIngested"] is True


async def test_changed_row_is_reupserted(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    await load(stores, settings, tmp_path, [make_session("s1", 2)])
    await sync_session_to_graph("s1", chroma=stores.chroma, unit=stores.unit)
    await load(stores, settings, tmp_path, [make_session("s1", 2, text="edited {i}")])
    stats = await sync_session_to_graph("s1", chroma=stores.chroma, unit=stores.unit)
    assert (stats.upserted, stats.skipped) == (2, 0)
    assert stores.graph.get_node("memory:s1-t0000").name == "edited 0"


async def test_rows_missing_session_id_are_errors_not_crashes(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    await load(stores, settings, tmp_path, [make_session("s1", 2)])
    await stores.chroma.upsert(settings.memory_collection, ["orphan-1", "orphan-2"], ["no session", "bad session"],
                               [{"turnIndex": 0}, {"sessionId": "has space"}])
    scan = await scan_session_revisions(stores.chroma, memory_collection=settings.memory_collection,
                                        summary_collection=settings.session_collection, known_sessions={},
                                        ingested=stores.runstate.ingested_payloads)
    assert scan.errors == 2
    assert [r.session_id for r in scan.revisions] == ["s1"]
    # The pure planner reports a foreign or missing sessionId per row and keeps going.
    rows = [MemoryRow("ok", "fine", {"sessionId": "s9"}), MemoryRow("x", "none", {}), MemoryRow("y", "other", {"sessionId": "s8"})]
    _, memories, edges, stats = plan_session_sync("s9", rows, None, {})
    assert [m.id for m in memories] == ["memory:ok"] and len(edges) == 1
    assert stats.errors == 2 and stats.processed == 3


async def test_timestamp_epoch_ms_accepted(stores: Stores, settings: Settings) -> None:
    await stores.chroma.upsert(settings.memory_collection, ["m-b", "m-a"], ["second", "first"],
                               [{"sessionId": "t1", "timestamp": 1_764_000_001_000}, {"sessionId": "t1", "timestamp": 1_764_000_000_000}])
    await sync_sessions_to_graph(["t1"], chroma=stores.chroma, unit=stores.unit)
    first = stores.graph.get_node("memory:m-a")
    assert first.properties["createdAt"] == "2025-11-24T16:00:00.000Z"
    rows = await stores.chroma.memories_for_session("t1")
    assert [r.id for r in rows] == ["m-a", "m-b"]  # no turnIndex: ordered by time


def test_live_sync_upgrades_backfilled_nodes() -> None:
    row = MemoryRow("m1", "text", {"sessionId": "s1"})
    existing = {
        "session:s1": session_node("s1", None, marker=BACKFILL_MARKER),
        "memory:m1": memory_node(row, marker=BACKFILL_MARKER),
    }
    sessions, memories, _, stats = plan_session_sync("s1", [row], None, existing)
    assert len(sessions) == 1 and sessions[0].properties["liveIngested"] is True
    assert len(memories) == 1 and memories[0].properties["liveIngested"] is True
    assert "backfilled" not in memories[0].properties
    assert stats.skipped == 0
