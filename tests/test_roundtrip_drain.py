"""A drain while the Chroma server is down: the lines that need a back-fill stay queued as they
were, with no attempt counted, and are linked once it is back — rather than each drain counting an
attempt against every line, so that a few drains during an outage dead-lettered good lines.
A real `chroma run` (the session's server), and a loopback port nothing listens on for "down"
(roundtrip audit)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.drain import ChromaGoneDuringDrainError, DrainStats
from pipelines.enqueue import enqueue_lazy_edges
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from tests.test_change_scan import _query
from tests.conftest import free_port, make_session, run_cli, write_sessions
from worker.cycle import drain_lazy_edges, open_stores

EDGES = [
    {"source": "memory:rt-a-t0000", "target": "session:rt-b", "relationship": "RELATES_TO"},
    {"source": "memory:rt-b-t0001", "target": "memory:rt-a-t0001", "relationship": "FOLLOWS"},
]


async def _drain(settings: Settings) -> DrainStats:
    stores = await open_stores(settings)
    try:
        return await drain_lazy_edges(settings, stores)
    finally:
        stores.close()


def _queued(settings: Settings) -> list[Any]:
    """The queue as a drain would find it: the file's bytes, or the table's rows."""
    if settings.lazy_queue == "file":
        path = Path(settings.queue_path)
        return [path.read_bytes() if path.exists() else b""]
    return _query(settings, "SELECT id, line, attempts, last_error FROM lazy_edges ORDER BY id")


def _dead(settings: Settings) -> int:
    if settings.lazy_queue == "file":
        dead = Path(settings.queue_path).with_name("lazy-edges.dead.jsonl")
        return len(dead.read_text().splitlines()) if dead.exists() else 0
    return _query(settings, "SELECT COUNT(*) FROM lazy_edges_dead")[0][0]


async def _queue_edges_whose_rows_are_on(settings: Settings, chroma_url: str, tmp_path: Path, form: str) -> Settings:
    """Settings of a worker whose Chroma is the server at ``chroma_url`` (collections of its own)
    holding two sessions, with two lazy edges between their rows queued in ``form``."""
    name = uuid.uuid4().hex[:12]
    live = settings.model_copy(update={"chroma_url": chroma_url, "memory_collection": f"m-{name}",
                                       "session_collection": f"s-{name}", "lazy_queue": form})
    source = write_sessions(tmp_path / "in.jsonl", [make_session("rt-a", 2), make_session("rt-b", 2)])
    stats = await import_sessions(source, chroma=ChromaStore(live), memory_collection=live.memory_collection,
                                  summary_collection=live.session_collection)
    assert not stats.bad_lines
    open_database(live).close()  # the graph database (the table form lives in it)
    enqueue_lazy_edges(live.lazy_queue_target, EDGES)
    return live


@pytest.mark.both_backends
@pytest.mark.parametrize("form", ["file", "database"])
async def test_drains_while_chroma_is_down_count_no_attempt_and_link_once_it_is_back(
    settings: Settings, chroma_server: str, tmp_path: Path, form: str
) -> None:
    live = await _queue_edges_whose_rows_are_on(settings, chroma_server, tmp_path, form)
    before = _queued(live)
    down = live.model_copy(update={"chroma_url": f"http://127.0.0.1:{free_port()}"})

    # More drains than REM_LAZY_MAX_ATTEMPTS while the server is down: before, each one counted an
    # attempt against every line and reported success, and the last one dead-lettered them all.
    for _ in range(live.lazy_max_attempts + 1):
        with pytest.raises(ChromaGoneDuringDrainError, match="no attempt counted") as gone:
            await _drain(down)
        assert (gone.value.reason_code, gone.value.stats.failed, gone.value.stats.dead_lettered) == ("chroma-unavailable", 0, 0)
        assert _queued(live) == before  # the lines as they were (the file: byte for byte)
        assert _dead(live) == 0

    back = await _drain(live)
    assert (back.succeeded, back.failed, back.dead_lettered) == (2, 0, 0)
    assert back.backfilled == 4  # every endpoint of the two lines
    linked = _query(live, "SELECT source, target, relationship FROM edges WHERE relationship IN ('RELATES_TO', 'FOLLOWS') ORDER BY relationship")
    assert linked == [("memory:rt-b-t0001", "memory:rt-a-t0001", "FOLLOWS"), ("memory:rt-a-t0000", "session:rt-b", "RELATES_TO")]
    assert _queued(live) in ([b""], [])


async def test_rem_cycle_drain_while_chroma_is_down_exits_1_and_says_so(settings: Settings, chroma_server: str, tmp_path: Path) -> None:
    live = await _queue_edges_whose_rows_are_on(settings, chroma_server, tmp_path, "file")
    before = _queued(live)
    env = {"REM_DATA_DIR": str(live.data_dir), "REM_CHROMA_URL": f"http://127.0.0.1:{free_port()}",
           "REM_MEMORY_COLLECTION": live.memory_collection, "REM_SESSION_COLLECTION": live.session_collection}
    done = run_cli("drain", "--json", env=env, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]  # it was 0, with "failed": 2, "requeued": 2
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("rem-cycle: Chroma could not be reached, so the drain stopped")
    assert "2 lines that needed Chroma and the unread ones are back in the queue as they were, with no attempt counted" in said
    assert _queued(live) == before


async def test_rem_cycle_backfill_while_chroma_is_down_says_how_far_it_got(settings: Settings, chroma_server: str, tmp_path: Path) -> None:
    live = await _queue_edges_whose_rows_are_on(settings, chroma_server, tmp_path, "file")
    env = {"REM_DATA_DIR": str(live.data_dir), "REM_CHROMA_URL": f"http://127.0.0.1:{free_port()}",
           "REM_MEMORY_COLLECTION": live.memory_collection, "REM_SESSION_COLLECTION": live.session_collection}
    done = run_cli("backfill", "--json", env=env, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    said = done.stderr.strip().splitlines()[-1]
    # Before: only Chroma's error, as if nothing could have been done (no count, nothing on safety).
    assert said.startswith("rem-cycle: backfill stopped: cannot open Chroma"), said
    assert "0 of ? sessions synced, drain not started; re-running the backfill is safe" in said, said
