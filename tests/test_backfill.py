"""Back-fill against a real embedded Chroma (and a real `chroma run` server for fetch failures)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from chromadb.api.models.Collection import Collection

from config import Settings, load_settings
from pipelines.backfill import (
    ensure_nodes_exist,
    ingest_single_row,
    link_nodes_async,
    session_created_times,
    sessions_in_window,
    window_start,
)
from pipelines.ingest import sync_session_to_graph
from store.chroma import ChromaStore
from store.chroma import MemoryRow
from tests.conftest import free_port, make_session, run_cli
from tests.lazy_fixtures import add_concepts, edge_count, graph_dump, queue_of, read_jsonl, seed_chroma, seed_standard
from worker.cycle import Stores


async def single(stores: Stores, node_id: object) -> dict[str, Any]:
    return await ingest_single_row(node_id, chroma=stores.chroma, unit=stores.unit)


async def test_reasons_for_rows_in_chroma(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "x")
    assert await single(stores, "session:s-1") == {"success": True, "reason": "backfilled", "graph_node_id": "session:s-1"}
    assert await single(stores, "session:s-1") == {"success": True, "reason": "already-exists", "graph_node_id": "session:s-1"}
    assert await single(stores, "session:s-nosum") == {
        "success": True, "reason": "backfilled-minimal", "graph_node_id": "session:s-nosum",
    }
    # A session with neither a summary nor any memory row is not faked.
    ghost = await single(stores, "session:legacy-2025-03-01")
    assert (ghost["success"], ghost["reason"]) == (False, "chroma-row-not-found")
    assert stores.graph.get_node("session:legacy-2025-03-01") is None
    assert (await single(stores, "CONCEPT:x"))["reason"] == "already-exists"
    unknown = await single(stores, "CONCEPT:unknown")
    assert (unknown["success"], unknown["reason"]) == (False, "unrecognized-prefix")
    assert (await single(stores, "no-prefix-at-all"))["reason"] == "unrecognized-prefix"
    missing = await single(stores, "memory:does-not-exist")
    assert (missing["success"], missing["reason"], missing["graph_node_id"]) == (False, "chroma-row-not-found", "memory:does-not-exist")
    bad = await single(stores, "memory:has space")
    assert (bad["success"], bad["reason"]) == (False, "error") and "invalid memory id" in bad["error"]
    assert (await single(stores, None))["reason"] == "error"


async def test_memory_without_session_id_is_an_error(settings: Settings, stores: Stores) -> None:
    await stores.chroma.upsert(settings.memory_collection, ["orphan-1"], ["text"], [{"createdAt": "2026-11-01T10:00:00Z"}])
    result = await single(stores, "memory:orphan-1")
    assert (result["success"], result["reason"]) == (False, "error") and "sessionId" in result["error"]
    assert stores.graph.get_node("memory:orphan-1") is None


async def test_no_collection(settings: Settings, stores: Stores) -> None:
    assert (await single(stores, "memory:m1"))["reason"] == "no-collection"
    assert (await single(stores, "session:s1"))["reason"] == "no-collection"
    # Memories exist but the summary collection does not: the parent session cannot be read.
    await stores.chroma.upsert(settings.memory_collection, ["m1"], ["text"], [{"sessionId": "s1"}])
    result = await single(stores, "memory:m1")
    assert result["reason"] == "no-collection" and "parent session" in result["error"]
    assert stores.graph.counts()["node_total"] == 0


async def test_memory_backfill_creates_its_session_first(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    result = await single(stores, "MEMORY:s-1-t0001")  # upper-case compatibility input
    assert result == {"success": True, "reason": "backfilled", "graph_node_id": "memory:s-1-t0001"}
    memory = stores.graph.get_node("memory:s-1-t0001")
    session = stores.graph.get_node("session:s-1")
    assert memory is not None and session is not None
    assert memory.label == "MEMORY" and memory.properties["backfilled"] is True and "liveIngested" not in memory.properties
    assert memory.properties["sessionId"] == "s-1" and memory.properties["turnIndex"] == 1
    assert session.properties["backfilled"] is True and session.properties["title"] == "Session s-1"
    assert stores.graph.get_edge("memory:s-1-t0001", "session:s-1", "ORIGINATES_IN") is not None
    assert stores.graph.get_node("MEMORY:s-1-t0001") == memory  # lookups normalise too
    # A memory of a session without a summary row gets a minimal parent.
    await single(stores, "memory:s-nosum-t0000")
    parent = stores.graph.get_node("session:s-nosum")
    assert parent is not None and parent.properties == {
        "sessionId": "s-nosum", "payloadHash": parent.properties["payloadHash"], "backfilled": True, "minimal": True,
    }


async def test_live_sync_upgrades_backfilled_nodes(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    await single(stores, "memory:s-nosum-t0001")
    assert stores.graph.get_node("session:s-nosum").properties["minimal"] is True
    # The agent summarises the session later; the next live sync upgrades both nodes.
    await seed_chroma(stores, settings, [make_session("s-nosum", 2)], tmp_path)
    stats = await sync_session_to_graph("s-nosum", chroma=stores.chroma, unit=stores.unit)
    assert stats.errors == 0
    session = stores.graph.get_node("session:s-nosum")
    assert session.properties["liveIngested"] is True and session.properties["title"] == "Session s-nosum"
    assert "backfilled" not in session.properties and "minimal" not in session.properties
    for node in stores.graph.nodes_by_label("MEMORY"):
        assert node.properties.get("liveIngested") is True and "backfilled" not in node.properties
    assert edge_count(stores.graph, "ORIGINATES_IN") == 2


async def test_backfill_never_overwrites_a_live_node(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    await sync_session_to_graph("s-1", chroma=stores.chroma, unit=stores.unit)
    before = graph_dump(stores.graph)
    assert (await single(stores, "memory:s-1-t0000"))["reason"] == "already-exists"
    assert graph_dump(stores.graph) == before


async def test_link_nodes_async(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph")
    link = lambda s, t, **kw: link_nodes_async(s, t, "MENTIONED_IN", chroma=stores.chroma, unit=stores.unit, **kw)  # noqa: E731
    assert await link("CONCEPT:graph", "MEMORY:s-2-t0000", weight=0.7, properties={"quote": "turn 0"}) is True
    edge = stores.graph.get_edge("CONCEPT:graph", "memory:s-2-t0000", "MENTIONED_IN")
    assert edge is not None and edge.weight == 0.7 and edge.properties == {"quote": "turn 0"}
    assert await link("session:s-1", "SESSION:s-nosum") is True
    assert await link("CONCEPT:nowhere", "memory:s-2-t0001") is False  # unknown prefix, not in graph
    assert await link("CONCEPT:graph", "memory:not-in-chroma") is False  # failed back-fill
    assert await link("CONCEPT:graph", "memory:bad id") is False
    assert stores.graph.get_node("memory:s-2-t0001") is not None  # the good endpoint was still back-filled
    assert stores.graph.get_edge("CONCEPT:nowhere", "memory:s-2-t0001", "MENTIONED_IN") is None


async def test_ensure_nodes_exist_reads_chroma_once_per_batch(
    settings: Settings, stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = [make_session(f"b{n}", 4, summary=n % 3 != 0) for n in range(12)]
    await seed_chroma(stores, settings, sessions, tmp_path)
    calls: list[dict[str, Any]] = []
    original = Collection.get

    def spy(self: Collection, *args: Any, **kwargs: Any) -> Any:
        calls.append({"ids": len(kwargs.get("ids") or []), "where": kwargs.get("where")})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "get", spy)
    wanted = [f"memory:b{n}-t{t:04d}" for n in range(12) for t in range(4)] + ["session:b0", "SESSION:b1", "memory:nope"]
    outcomes = await ensure_nodes_exist(wanted, chroma=stores.chroma, unit=stores.unit, batch_size=100)
    assert [c["ids"] for c in calls] == [49, 0]  # one get(ids=[…]) for memories, one where-$in for summaries
    assert calls[1]["where"] == {"sessionId": {"$in": [f"b{n}" for n in sorted(range(12), key=str)]}}
    assert outcomes["memory:nope"].reason == "chroma-row-not-found"
    assert outcomes["SESSION:b1"].reason == "backfilled" and outcomes["session:b0"].reason == "backfilled-minimal"
    assert sum(o.reason == "backfilled" for o in outcomes.values()) == 49
    assert stores.graph.counts()["nodes"] == {"MEMORY": 48, "SESSION": 12}
    calls.clear()
    again = await ensure_nodes_exist(wanted, chroma=stores.chroma, unit=stores.unit, batch_size=20)
    assert [c["ids"] for c in calls] == [1]  # only the missing row is asked for again
    assert {o.reason for o in again.values()} == {"already-exists", "chroma-row-not-found"}


async def test_dry_run_backfill_writes_nothing(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    outcomes = await ensure_nodes_exist(["memory:s-1-t0000", "session:s-nosum"], chroma=stores.chroma, unit=stores.unit, dry_run=True)
    assert [o.reason for o in outcomes.values()] == ["backfilled", "backfilled-minimal"]
    assert stores.graph.counts()["node_total"] == 0


def start_chroma(path: Path) -> tuple[subprocess.Popen[bytes], str]:
    exe = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")
    port = free_port()
    proc = subprocess.Popen([exe, "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("chroma run did not start")


@pytest.mark.server
async def test_chroma_fetch_failed_when_the_server_goes_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, url = start_chroma(tmp_path / "server")
    try:
        settings = load_settings(data_dir=tmp_path / "data", chroma_url=url)
        from worker.cycle import open_stores

        stores = await open_stores(settings)
        try:
            await seed_standard(stores, settings, tmp_path)
            assert (await single(stores, "memory:s-1-t0000"))["reason"] == "backfilled"
            proc.terminate()
            proc.wait(20)
            result = await single(stores, "memory:s-2-t0000")
            assert (result["success"], result["reason"]) == (False, "chroma-fetch-failed")
            assert (await single(stores, "session:s-2"))["reason"] == "chroma-fetch-failed"
            assert await link_nodes_async("session:s-1", "session:s-2", "FOLLOWS", chroma=stores.chroma, unit=stores.unit) is False
            # The drain stops and keeps such lines for the next one, as they were: no attempt counted.
            queue_of(settings).append([{"source": "session:s-1", "target": "memory:s-2-t0001", "relationship": "REFERENCED_BY"}])
            from pipelines.drain import ChromaGoneDuringDrainError
            from tests.lazy_fixtures import drain

            with pytest.raises(ChromaGoneDuringDrainError):
                await drain(settings, stores)
            assert "attempts" not in read_jsonl(settings.queue_path)[0]
        finally:
            stores.close()
    finally:
        if proc.poll() is None:
            proc.kill()


# --- rem-cycle backfill ------------------------------------------------------------------------


def test_session_times_and_window_are_pure() -> None:
    summaries = [
        MemoryRow("sum-old", "", {"sessionId": "old", "createdAt": "2026-01-01T00:00:00Z"}),
        MemoryRow("sum-b", "", {"sessionId": "new-b", "timestamp": 1_795_132_800_000}),  # 2026-11-20, epoch ms
        MemoryRow("sum-bad", "", {"createdAt": "2026-11-20T00:00:00Z"}),
    ]
    memories = [
        MemoryRow("m1", "", {"sessionId": "new-a", "createdAt": "2026-11-12T00:00:00Z"}),
        MemoryRow("m2", "", {"sessionId": "new-a", "createdAt": "2026-11-10T00:00:00Z"}),
        MemoryRow("m3", "", {"sessionId": "old", "createdAt": "2026-11-28T00:00:00Z"}),  # the summary decides
        MemoryRow("m4", "", {"sessionId": "undated"}),
    ]
    created = session_created_times(summaries, memories)
    assert created == {
        "old": "2026-01-01T00:00:00.000Z", "new-b": "2026-11-20T00:00:00.000Z",
        "new-a": "2026-11-10T00:00:00.000Z", "undated": None,
    }
    since = window_start(datetime(2026, 11, 29, tzinfo=UTC), 30)
    assert since == "2026-10-30T00:00:00.000Z"
    assert sessions_in_window(created, since=since) == (["new-a", "new-b"], 1)


def test_cli_backfill_days_dry_run_and_skip_drain(settings: Settings, tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    now = datetime.now(UTC)
    recent = now.replace(microsecond=0).isoformat().replace("+00:00", "Z")
    sessions = [
        make_session("recent", 2, created=recent),
        make_session("recent-nosum", 2, created=recent, summary=False),
        make_session("ancient", 2, created="2020-01-01T00:00:00Z"),
    ]
    from tests.conftest import write_sessions

    assert run_cli("import", str(write_sessions(tmp_path / "s.jsonl", sessions)), env=env).returncode == 0
    queue = queue_of(settings)
    queue.append([{"source": "session:recent", "target": "MEMORY:ancient-t0001", "relationship": "REFERENCED_BY"}])
    queue_bytes = queue.path.read_bytes()

    dry = run_cli("backfill", "--days", "7", "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert (report["sessions_in_window"], report["sessions_present"], report["sessions_synced"]) == (2, 0, 0)
    assert report["drain"]["dry_run"] and report["drain"]["succeeded"] == 1
    assert queue.path.read_bytes() == queue_bytes

    skip = run_cli("backfill", "--days", "7", "--skip-drain", "--json", env=env)
    assert skip.returncode == 0, skip.stderr
    report = json.loads(skip.stdout)
    assert report["sessions_synced"] == 2 and report["drain"] is None and report["ingest"]["upserted"] == 6
    assert queue.path.read_bytes() == queue_bytes

    full = run_cli("backfill", "--json", env=env)  # default 30 days: nothing new, then the drain
    report = json.loads(full.stdout)
    assert report["days"] == 30 and report["sessions_present"] == 2
    assert report["drain"]["succeeded"] == 1 and not queue.path.exists()
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["graph"]["nodes"] == {"MEMORY": 5, "SESSION": 3}  # ancient: one memory + its session back-filled
    assert run_cli("backfill", "--days", "0", env=env).returncode == 2



def test_a_dry_run_backfill_on_a_data_dir_without_a_graph_creates_none(tmp_path: Path) -> None:
    # A dry run created graph.sqlite3 (and its schema) on a data dir that had none: it must create
    # nothing. It still reports what Chroma holds and what the drain would link (read against an
    # empty graph outside the data dir). The backfill that syncs creates the graph, as ever.
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    recent = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    from tests.conftest import write_sessions

    sessions = write_sessions(tmp_path / "s.jsonl", [make_session("recent", 2, created=recent)])
    assert run_cli("import", str(sessions), env=env).returncode == 0
    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps({"source": "session:recent", "target": "MEMORY:recent-t0001", "relationship": "REFERENCED_BY"}) + "\n")
    assert run_cli("enqueue", str(edges), env=env).returncode == 0
    before = sorted(p.name for p in data.iterdir())
    assert "graph.sqlite3" not in before
    dry = run_cli("backfill", "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert (report["sessions_in_window"], report["sessions_present"]) == (1, 0)
    assert report["drain"]["dry_run"] and report["drain"]["succeeded"] == 1
    assert sorted(p.name for p in data.iterdir()) == before
    done = run_cli("backfill", "--json", env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["sessions_synced"] == 1
    assert (data / "graph.sqlite3").is_file()


@pytest.mark.parametrize("exists", [True, False], ids=["empty-data-dir", "no-data-dir"])
def test_a_dry_run_backfill_on_an_empty_data_dir_creates_nothing(tmp_path: Path, exists: bool) -> None:
    """Before, it created Chroma's own folder (``<data>/chroma/chroma.sqlite3``), and the data
    dir for it: the embedded store that does not exist yet is now read as the empty one it would
    be, kept in memory."""
    data = tmp_path / "data"
    if exists:
        data.mkdir()
    dry = run_cli("backfill", "--dry-run", "--json", env={"REM_DATA_DIR": str(data)})
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert (report["sessions_in_window"], report["sessions_synced"]) == (0, 0)
    assert sorted(tmp_path.rglob("*")) == ([data] if exists else [])


def test_a_dry_run_drain_that_would_back_fill_creates_no_chroma_store(tmp_path: Path) -> None:
    """A queued line whose endpoint the drain would back-fill: before, ``drain --dry-run`` made
    Chroma's folder to read it from."""
    from pipelines.enqueue import enqueue_lazy_edges
    from tests.graph_fixtures import build_sample_graph

    data = tmp_path / "data"
    build_sample_graph(data / "graph.sqlite3").close()
    enqueue_lazy_edges(data / "lazy-edges.jsonl", [{"source": "memory:x-t0001", "target": "session:x", "relationship": "R"}])
    before = sorted(p.name for p in data.iterdir())
    dry = run_cli("drain", "--dry-run", "--json", env={"REM_DATA_DIR": str(data)})
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["failure_reasons"] == {"no-collection": 1}
    assert sorted(p.name for p in data.iterdir()) == before


def test_a_dry_run_backfill_without_the_embedded_chroma_creates_none(tmp_path: Path) -> None:
    # README: `backfill --dry-run` creates nothing. Without a data dir, or on one that holds only a
    # queue, it made the data dir and the embedded Chroma store `chroma/` (opening the store creates
    # it). The store that is not there holds no row: the dry run reports against an empty one.
    missing = tmp_path / "missing"
    dry = run_cli("backfill", "--dry-run", "--json", env={"REM_DATA_DIR": str(missing)})
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["sessions_in_window"] == 0
    assert not missing.exists()
    data = tmp_path / "data"
    data.mkdir()
    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps({"source": "session:gone", "target": "memory:gone-t0001", "relationship": "REFERENCED_BY"}) + "\n")
    assert run_cli("enqueue", str(edges), env={"REM_DATA_DIR": str(data)}).returncode == 0
    before = sorted(p.name for p in data.iterdir())
    dry = run_cli("backfill", "--dry-run", "--json", env={"REM_DATA_DIR": str(data)})
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["drain"]["failure_reasons"] == {"no-collection": 1}
    assert sorted(p.name for p in data.iterdir()) == before
