"""drain_queue against real files, a real SQLite graph and a real embedded Chroma."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from config import Settings
from pipelines.drain import MalformedLine, QueuedEdge, parse_line
from store.db import Database
from store.errors import DatabaseBusyError
from store.unit_of_work import DatabaseUnitOfWork
from store.lazy_queue import QueueBusyError, edge_line
from tests.conftest import ROOT, run_cli
from tests.lazy_fixtures import (
    add_concepts,
    drain,
    edge_count,
    graph_dump,
    queue_of,
    read_jsonl,
    seed_standard,
)
from worker.cycle import Stores, run_cycle


def mention(concept: str, target: str, **extra: object) -> dict[str, object]:
    return {"source": f"CONCEPT:{concept}", "target": target, "relationship": "MENTIONED_IN", **extra}


# --- parse_line (pure) ---------------------------------------------------------------------------


def test_parse_line_normalises_and_keeps_top_level_fields() -> None:
    line = parse_line(
        b'{"source":"CONCEPT:a","target":"MEMORY:M1","relationship":"MENTIONED_IN","weight":2,'
        b'"justification":"quoted","properties":{"quote":"q"},"timestamp":"t","attempts":3,"lastError":"x"}\n'
    )
    assert isinstance(line, QueuedEdge)
    assert (line.edge.source, line.edge.target, line.edge.weight) == ("CONCEPT:a", "memory:M1", 2.0)
    assert line.edge.properties == {"justification": "quoted", "quote": "q"}
    assert line.attempts == 3


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"not json\n", "malformed-json"),
        (b"[1, 2]\n", "malformed-json"),
        (b'{"source":"CONCEPT:a","relationship":"R"}\n', "invalid-edge"),
        (b'{"source":"CONCEPT:a","target":"","relationship":"R"}\n', "invalid-edge"),
        (b'{"source":"CONCEPT:a","target":"memory:has space","relationship":"R"}\n', "invalid-edge"),
        (b'{"source":"CONCEPT:a","target":"memory:m","relationship":"R","weight":"heavy"}\n', "invalid-edge"),
        (b'{"source":"CONCEPT:a","target":"memory:m","relationship":"R","properties":[1]}\n', "invalid-edge"),
        (b'{"source":"CONCEPT:a","target":"memory:m","relationship":7}\n', "invalid-edge"),
        (b"\xff\xfe{}\n", "malformed-json"),
    ],
)
def test_parse_line_rejects_malformed(raw: bytes, reason: str) -> None:
    line = parse_line(raw)
    assert isinstance(line, MalformedLine) and line.reason == reason


# --- drains ------------------------------------------------------------------------------------


async def test_missing_queue_is_a_noop(settings: Settings, stores: Stores) -> None:
    stats = await drain(settings, stores)
    assert stats.as_dict() | {"failure_reasons": {}} == {
        "total_lines": 0, "processed": 0, "succeeded": 0, "failed": 0, "skipped_malformed": 0,
        "dead_lettered": 0, "queue_rotated": False, "orphan_recovered": False, "requeued": 0,
        "backfilled": 0, "table_rows": 0, "dry_run": False, "failure_reasons": {},
    }
    queue = queue_of(settings)
    assert not queue.path.exists() and not queue.draining_path.exists() and not queue.dead_letter_path.exists()


async def test_full_drain_links_backfills_and_removes_files(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph", "queue")
    queue = queue_of(settings)
    queue.append([
        mention("graph", "MEMORY:s-1-t0000", justification="seen in turn 0"),
        mention("queue", "memory:s-2-t0001"),
        {"source": "CONCEPT:graph", "target": "SESSION:s-nosum", "relationship": "DISCUSSED_IN"},
        {"source": "CONCEPT:graph", "target": "CONCEPT:queue", "relationship": "RELATES_TO", "weight": 0.5},
    ])
    stats = await drain(settings, stores)
    assert (stats.total_lines, stats.processed, stats.succeeded, stats.failed) == (4, 4, 4, 0)
    assert stats.queue_rotated and not stats.orphan_recovered
    assert stats.backfilled == 3  # endpoints: two memories and s-nosum (parents s-1, s-2 not counted)
    for path in (queue.path, queue.draining_path, queue.requeue_pending_path, queue.dead_pending_path):
        assert not path.exists(), path
    graph = stores.graph
    edge = graph.get_edge("CONCEPT:graph", "memory:s-1-t0000", "MENTIONED_IN")
    assert edge is not None and edge.properties == {"justification": "seen in turn 0"}
    assert graph.get_edge("CONCEPT:graph", "CONCEPT:queue", "RELATES_TO").weight == 0.5
    assert graph.get_node("session:s-nosum").properties["minimal"] is True
    assert graph.get_edge("memory:s-2-t0001", "session:s-2", "ORIGINATES_IN") is not None


async def test_failed_lines_are_requeued_with_attempts_then_dead_lettered(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph")
    queue = queue_of(settings)
    queue.append([mention("graph", "memory:nope", justification="keep me"), mention("graph", "memory:s-1-t0000")])
    first = await drain(settings, stores, max_attempts=3)
    assert (first.succeeded, first.failed, first.requeued, first.dead_lettered) == (1, 1, 1, 0)
    assert first.failure_reasons == {"chroma-row-not-found": 1}
    [kept] = read_jsonl(queue.path)
    assert kept["attempts"] == 1 and kept["justification"] == "keep me"
    assert kept["lastError"].startswith("chroma-row-not-found: memory:nope")
    await drain(settings, stores, max_attempts=3)
    assert read_jsonl(queue.path)[0]["attempts"] == 2
    third = await drain(settings, stores, max_attempts=3)
    assert (third.failed, third.requeued, third.dead_lettered) == (1, 0, 1)
    assert not queue.path.exists()
    [dead] = read_jsonl(queue.dead_letter_path)
    assert dead["reason"] == "max-attempts" and dead["attempts"] == 3
    assert dead["detail"].startswith("chroma-row-not-found")
    assert json.loads(dead["line"])["justification"] == "keep me"


async def test_malformed_lines_are_dead_lettered_and_counted(settings: Settings, stores: Stores) -> None:
    add_concepts(stores.graph, "a", "b")
    queue = queue_of(settings)
    queue.path.parent.mkdir(parents=True, exist_ok=True)
    good = edge_line({"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO"})
    queue.path.write_bytes(
        b"{not json\n"
        + good
        + b'{"source":"CONCEPT:a","relationship":"RELATES_TO"}\n'
        + b"\n"
        + b'{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"RELATES_TO","weight":"x"}\n'
        + b'{"source":"CONCEPT:a","target":"CONCEPT:b"'  # torn last line, no newline
    )
    stats = await drain(settings, stores)
    assert (stats.total_lines, stats.processed, stats.succeeded) == (5, 1, 1)
    assert stats.skipped_malformed == 4 and stats.dead_lettered == 4 and stats.requeued == 0
    assert not queue.path.exists()
    dead = read_jsonl(queue.dead_letter_path)
    assert [d["reason"] for d in dead] == ["malformed-json", "invalid-edge", "invalid-edge", "malformed-json"]
    assert dead[0]["line"] == "{not json" and "missing target" in dead[1]["detail"]
    assert all(d["attempts"] == 0 and d["deadLetteredAt"] for d in dead)


async def test_dry_run_changes_nothing(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph")
    queue = queue_of(settings)
    queue.append([mention("graph", "memory:s-1-t0000"), mention("graph", "memory:nope")])
    os.rename(queue.path, queue.draining_path)  # an orphan …
    queue.append([mention("graph", "session:s-2")])  # … and a live queue
    queue.path.open("ab").write(b"garbage\n")
    files_before = {p.name: p.read_bytes() for p in queue.path.parent.iterdir() if p.is_file() and "lazy" in p.name}
    graph_before = graph_dump(stores.graph)
    stats = await drain(settings, stores, dry_run=True)
    assert stats.dry_run and stats.orphan_recovered and not stats.queue_rotated
    assert (stats.total_lines, stats.succeeded, stats.failed, stats.skipped_malformed) == (4, 2, 1, 1)
    assert stats.backfilled == 2  # endpoints: the memory and s-2 (parent s-1 is not an endpoint)
    files_after = {p.name: p.read_bytes() for p in queue.path.parent.iterdir() if p.is_file() and "lazy" in p.name}
    assert files_after == files_before  # no rename, no lock file, no dead letters
    assert graph_dump(stores.graph) == graph_before


async def test_orphaned_draining_file_is_recovered_first(settings: Settings, stores: Stores) -> None:
    add_concepts(stores.graph, "a", "b", "c")
    queue = queue_of(settings)
    queue.append([{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO"}])
    os.rename(queue.path, queue.draining_path)  # a drain crashed after its rename
    queue.append([{"source": "CONCEPT:b", "target": "CONCEPT:c", "relationship": "RELATES_TO"}])
    stats = await drain(settings, stores)
    assert stats.orphan_recovered and stats.queue_rotated
    assert (stats.total_lines, stats.succeeded) == (2, 2)
    assert queue.draining_files() == [] and not queue.path.exists()
    assert edge_count(stores.graph) == 2


async def test_an_exception_while_linking_keeps_the_line(settings: Settings, stores: Stores) -> None:
    """Another process holds the graph's write lock: linking raises (database is locked), the drain
    ends with it, the line is kept with no attempt charged (busy is no line's fault:
    tests/test_drainstall_busy.py), and the next drain links it."""
    add_concepts(stores.graph, "a", "b")
    queue = queue_of(settings)
    queue.append([{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO"}])
    impatient = Database(settings.graph_path, timeout=0.1)
    blocker = sqlite3.connect(settings.graph_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(DatabaseBusyError, match="database is locked"):
            await drain(settings, stores, unit=DatabaseUnitOfWork(impatient))
        [kept] = [json.loads(line) for path in queue.draining_files() for line in path.read_text().splitlines()]
        assert "attempts" not in kept and "lastError" not in kept
        blocker.execute("ROLLBACK")
        again = await drain(settings, stores, unit=DatabaseUnitOfWork(impatient))
        assert again.succeeded == 1 and not queue.path.exists()
    finally:
        blocker.close()
        impatient.close()
    assert edge_count(stores.graph) == 1


async def test_replaying_a_line_leaves_one_edge(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph")
    queue = queue_of(settings)
    line = mention("graph", "memory:s-1-t0000", timestamp="2026-11-29T10:00:00.000Z")
    queue.append([line, line])
    await drain(settings, stores)
    before = graph_dump(stores.graph)
    queue.append([line])
    stats = await drain(settings, stores)
    assert stats.succeeded == 1 and stats.backfilled == 0
    assert graph_dump(stores.graph) == before
    assert edge_count(stores.graph, "MENTIONED_IN") == 1


async def test_second_drain_is_refused_while_one_runs(settings: Settings, stores: Stores) -> None:
    queue = queue_of(settings)
    queue.append([{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO"}])
    with queue.exclusive():
        with pytest.raises(QueueBusyError):
            await drain(settings, stores)
        env = {"REM_DATA_DIR": str(settings.data_dir)}
        result = run_cli("drain", env=env)
        assert result.returncode == 3 and "another drain" in result.stderr
    assert queue.depth() == 1  # untouched


_HOLD_THE_QUEUE = """
import sys
sys.path.insert(0, sys.argv[2])
from store.lazy_queue import LazyEdgeQueue
with LazyEdgeQueue(sys.argv[1]).exclusive():
    print("held", flush=True)
    sys.stdin.read()
"""


async def test_a_busy_drain_names_the_process_holding_the_queue(settings: Settings, stores: Stores) -> None:
    """The drain's lock names its holder as the cycle's does (before: only the lock file)."""
    queue = queue_of(settings)
    queue.append([{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO"}])
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_THE_QUEUE, str(settings.queue_path), str(ROOT)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = run_cli("drain", env={"REM_DATA_DIR": str(settings.data_dir)})
    finally:
        holder.communicate("", timeout=30)
    lock = os.path.abspath(queue.lock_path)
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith(f"rem-cycle: another drain of {os.path.abspath(queue.path)} is running: pid {holder.pid} on "), result.stderr
    assert result.stderr.rstrip().endswith(f"(it holds {lock}); not starting a second one"), result.stderr
    assert queue.depth() == 1 and queue.lock_path.read_bytes() == b""  # released: emptied


async def test_stop_requested_mid_drain_requeues_unread_lines_untouched(settings: Settings, stores: Stores) -> None:
    add_concepts(stores.graph, *[f"c{i}" for i in range(30)])
    queue = queue_of(settings)
    lines = [{"source": f"CONCEPT:c{i}", "target": f"CONCEPT:c{i + 1}", "relationship": "FOLLOWS"} for i in range(29)]
    queue.append(lines)
    batches: list[int] = []
    stats = await drain(settings, stores, batch_size=10, on_progress=lambda done, total: batches.append(done), should_stop=lambda: len(batches) >= 1)
    assert stats.succeeded == 10 and stats.requeued == 0
    rest = read_jsonl(queue.path)
    assert [r["source"] for r in rest] == [f"CONCEPT:c{i}" for i in range(10, 29)]
    assert all("attempts" not in r for r in rest)
    await drain(settings, stores)
    assert edge_count(stores.graph) == 29


DRAIN_LOOP = """
import sys, time, anyio
from pathlib import Path
from config import load_settings
from worker.cycle import open_stores
from pipelines.drain import drain_queue
from store.lazy_queue import LazyEdgeQueue

async def main():
    settings = load_settings()
    stores = await open_stores(settings)
    queue = LazyEdgeQueue(settings.queue_path)
    ready, done, report = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    ready.touch()
    busy_rounds = 0
    while True:
        finished = done.exists()
        stats = await drain_queue(queue, unit=stores.unit, chroma=stores.chroma, max_attempts=5, batch_size=50)
        busy_rounds += stats.processed > 0
        if finished:
            break
    report.write_text(str(busy_rounds))

anyio.run(main)
"""

PRODUCER = """
import sys, time
from store.lazy_queue import LazyEdgeQueue
q = LazyEdgeQueue(sys.argv[1])
for i in range(300):
    q.append([{"source": f"CONCEPT:{sys.argv[2]}", "target": f"CONCEPT:{sys.argv[2]}-{i}", "relationship": "RELATES_TO"}], fsync=False)
    if i % 10 == 0:
        time.sleep(0.01)
"""


async def test_producers_in_other_processes_lose_nothing_during_drains(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    """Three producer processes append 300 edges each while another process drains in a loop; every
    produced edge ends up in the graph, nothing is dead-lettered or left behind."""
    names = [f"p{n}" for n in range(3)]
    add_concepts(stores.graph, *names, *[f"{name}-{i}" for name in names for i in range(300)])
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("REM_")}, "PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(settings.data_dir)}
    ready, done, report = tmp_path / "ready", tmp_path / "done", tmp_path / "report"
    drainer = subprocess.Popen([sys.executable, "-c", DRAIN_LOOP, str(ready), str(done), str(report)], env=env)
    while not ready.exists():
        assert drainer.poll() is None
        await anyio.sleep(0.05)
    producers = [subprocess.Popen([sys.executable, "-c", PRODUCER, str(settings.queue_path), name], env=env) for name in names]
    for proc in producers:
        assert await anyio.to_thread.run_sync(proc.wait, 120) == 0
    done.touch()
    assert await anyio.to_thread.run_sync(drainer.wait, 120) == 0
    assert int(report.read_text()) >= 2  # the drains really overlapped the producers
    queue = queue_of(settings)
    assert queue.depth() == 0 and queue.draining_files() == [] and queue.dead_letter_count() == 0
    assert edge_count(stores.graph, "RELATES_TO") == 900


async def test_cycle_runs_the_drain_phase(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph")
    queue_of(settings).append([mention("graph", "memory:s-2-t0002"), mention("graph", "memory:nope")])
    result = await run_cycle(settings, stores=stores)
    assert result.outcome == "completed", result.message
    assert list(result.phases).index("drain") == list(result.phases).index("finalize") - 1
    phase = result.phases["drain"]
    assert (phase["total_lines"], phase["succeeded"], phase["requeued"]) == (2, 1, 1)
    assert stores.graph.get_edge("CONCEPT:graph", "memory:s-2-t0002", "MENTIONED_IN") is not None


def test_cli_drain_json_and_dry_run(settings: Settings) -> None:
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    settings.data_dir.mkdir(exist_ok=True)
    Database(settings.graph_path).close()  # a drain runs on a graph a cycle made
    queue = queue_of(settings)
    queue.append([{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO"}])
    queue.path.open("ab").write(b"junk\n")
    dry = run_cli("drain", "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    stats = json.loads(dry.stdout)
    assert stats["dry_run"] and stats["total_lines"] == 2 and stats["skipped_malformed"] == 1
    assert stats["failure_reasons"] == {"unrecognized-prefix": 1}  # CONCEPT:a is not in the graph
    assert queue.depth() == 2
    real = run_cli("drain", "--json", env=env)
    assert real.returncode == 0, real.stderr
    assert json.loads(real.stdout)["dead_lettered"] == 1
    assert [r["reason"] for r in read_jsonl(queue.dead_letter_path)] == ["malformed-json"]
    status = run_cli("status", "--json", env=env)
    assert json.loads(status.stdout)["queue"] | {"oldest_timestamp": None} == {
        "depth": 1, "dead_letters": 1, "oldest_timestamp": None,
        "table_rows": 0, "table_oldest_enqueued_at": None, "table_dead_letters": 0,
    }
