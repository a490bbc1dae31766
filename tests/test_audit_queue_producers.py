"""Producers of the lazy-edge queue racing each other, drains and SIGKILLs (real processes)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

import store.lazy_queue
from config import load_settings
from pipelines.enqueue import enqueue_lazy_edges
from pipelines.lazy_edge import QueuedEdge, parse_line
from store.errors import DatabaseUnreadableError
from store.lazy_queue import LazyEdgeQueue
from store.lazy_table import LazyEdgeTable
from tests.conftest import ROOT, run_cli
from tests.lazy_fixtures import add_concepts, drain, edge_count
from tests.test_audit_remote_postgres import cut_connections
from worker.cycle import open_stores

EDGE = {"source": "CONCEPT:a", "target": "memory:m1", "relationship": "MENTIONED_IN"}

# A producer that follows the append protocol as it was (O_APPEND, a shared flock, same inode) and is
# SIGKILLed inside its write: what it leaves is the head of a line, without its newline. It does
# not wait for a lock it cannot have at once (then no write of its can land there).
KILLED_PRODUCER = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
try:
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(0)
os.write(fd, b'{"source": "CONCEPT:killed", "target": "memory:m9", "relationship": "MENT')
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_producer_killed_mid_write_never_takes_another_producers_line_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    queue.append([{"source": "CONCEPT:first", "target": "memory:m0", "relationship": "MENTIONED_IN"}])
    real_write_all = store.lazy_queue._write_all

    def another_producer_dies_first(fd: int, data: bytes) -> None:
        # Between this producer's look at the file's end and its write, another is killed mid-write.
        monkeypatch.setattr(store.lazy_queue, "_write_all", real_write_all)
        done = subprocess.run([sys.executable, "-c", KILLED_PRODUCER, str(queue.path)], timeout=60)
        assert done.returncode in (0, -9)
        real_write_all(fd, data)

    monkeypatch.setattr(store.lazy_queue, "_write_all", another_producer_dies_first)
    queue.append([{"source": "CONCEPT:good", "target": "memory:m1", "relationship": "MENTIONED_IN"}])
    edges = [parsed.edge.source for parsed in map(parse_line, LazyEdgeQueue.read_lines(queue.path)) if isinstance(parsed, QueuedEdge)]
    assert edges == ["CONCEPT:first", "CONCEPT:good"]


def _tables(url: str | None, path: Path) -> set[str]:
    if url is None:
        with sqlite3.connect(path) as db:
            return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    import psycopg

    with psycopg.connect(url) as conn:
        return {name for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}


@pytest.mark.both_backends
@pytest.mark.empty_schema  # a database rem-cycle did not make
def test_a_producer_never_makes_a_graph_database_of_a_database_rem_cycle_did_not_make(
    tmp_path: Path, database_url: str | None
) -> None:
    """A producer naming a database without rem-cycle's schema — a mistyped database name that
    exists (`postgres`), the embedded Chroma's `chroma.sqlite3`, an empty file — is refused
    (``no graph database at …``) and the database is left as it was. Before, the producer migrated
    it: 29 tables of rem-cycle's schema written into it (into Chroma's own SQLite database too), and
    the edges "queued" where no worker drains them (exit 0), while a mistyped SQLite path was refused."""
    other = tmp_path / "chroma.sqlite3"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE migrations (dir TEXT, version INTEGER)")
    (tmp_path / "empty.sqlite3").touch()
    targets = [f"sqlite:///{other}", f"sqlite:///{tmp_path / 'empty.sqlite3'}"] if database_url is None else [database_url]
    for target in targets:
        before = _tables(database_url, Path(target.removeprefix("sqlite:///")))
        with pytest.raises(DatabaseUnreadableError, match="no graph database at .*: run rem-cycle once there first, or fix the URL"):
            enqueue_lazy_edges(target, [EDGE])
        assert _tables(database_url, Path(target.removeprefix("sqlite:///"))) == before
    if database_url is not None:  # the operator's verb, with a password that must not show
        data = tmp_path / "data"
        data.mkdir()
        edges = tmp_path / "edges.jsonl"
        edges.write_text(json.dumps(EDGE) + "\n", encoding="utf-8")
        secret_url = database_url.replace("postgresql://rem@", "postgresql://rem:hunter22@")
        done = run_cli("enqueue", str(edges), env={"REM_DATA_DIR": str(data), "REM_LAZY_QUEUE": "database", "REM_DATABASE_URL": secret_url})
        assert done.returncode == 1 and "no graph database at postgresql://rem:***@" in done.stderr, done.stderr[-2000:]
        assert "hunter22" not in done.stderr and "Traceback" not in done.stderr
        assert _tables(database_url, Path()) == set()


# Queues ``count`` edges in batches of 5 into the table at argv[1], retrying a batch whose
# transaction the server cut (a batch is all or nothing; queued twice, it links once).
RETRYING_PRODUCER = """
import sys, time
from pipelines.enqueue import enqueue_lazy_edges
url, producer, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cut = 0
for start in range(0, count, 5):
    batch = [{"source": f"CONCEPT:p{producer}", "target": f"CONCEPT:t{n}", "relationship": "R"} for n in range(start, start + 5)]
    while True:
        try:
            enqueue_lazy_edges(url, batch)
            break
        except Exception:
            cut += 1
            time.sleep(0.05)
print(cut)
"""


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.timeout(180)
async def test_producers_and_drains_of_the_table_lose_nothing_when_the_server_drops_their_connections(
    data_dir: Path, database_url: str, postgres_server_url: str
) -> None:
    """Three producer processes insert rows while drains run, and every connection of theirs is
    cut again and again (what a restart or failover does): a cut insert rolls back whole and is
    retried, a cut drain leaves its batch's rows in place for the next; at the end every edge is in
    the graph once, no row is left and none is dead."""
    url = f"{database_url}&application_name=audit-queue-{uuid.uuid4().hex[:12]}"
    settings = load_settings(data_dir=data_dir, database_url=url)
    stores = await open_stores(settings)
    try:
        add_concepts(stores.graph, "p0", "p1", "p2", *[f"t{n}" for n in range(200)])
    finally:
        stores.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", RETRYING_PRODUCER, url, str(i), "200"], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    cuts = drains = 0
    while any(p.poll() is None for p in procs) or drains < 3:
        try:
            stores = await open_stores(settings)  # a cycle's stores: fresh connections from the pool
            try:
                await drain(settings, stores, table=LazyEdgeTable(stores.db), batch_size=20)
                drains += 1
            finally:
                stores.close()
        except Exception:  # noqa: BLE001 - a drain whose connection was cut; its rows wait
            pass
        cuts += cut_connections(postgres_server_url, url)
        await anyio.sleep(0.1)
    # The count is all of stdout: the store's warnings (a connection replaced) go to stderr in a
    # process that has not configured structlog (tests/test_library_stdout.py).
    retried = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    stores = await open_stores(settings)
    try:
        await drain(settings, stores, table=LazyEdgeTable(stores.db))
        assert edge_count(stores.graph, "R") == 600
        assert stores.db.query("SELECT COUNT(*) FROM lazy_edges")[0][0] == 0
        assert stores.db.query("SELECT COUNT(*) FROM lazy_edges_dead")[0][0] == 0
    finally:
        stores.close()
    assert cuts > 0 and drains >= 3, (cuts, drains, retried)
