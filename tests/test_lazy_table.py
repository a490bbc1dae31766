"""The lazy-edge queue's database form (``lazy_edges``) and the producer library, against real SQLite
files (and a real PostgreSQL server: the tests marked ``both_backends``), a real embedded Chroma and real producer processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import anyio
import pytest

from config import Settings
from pipelines.enqueue import InvalidLazyEdgeError, enqueue_lazy_edges
from store.db import Database
from store.errors import ConstraintError, DatabaseUnreadableError
from store.unit_of_work import DatabaseUnitOfWork
from store.lazy_queue import LazyEdgeQueue, edge_line
from store.lazy_table import APPEND_BATCH_ROWS, MAX_LINE_CHARACTERS, LazyEdgeTable, QueuedRow, RowsTakenError
from tests.conftest import ROOT
from tests.lazy_fixtures import add_concepts, drain, edge_count, graph_dump, queue_of, read_jsonl, seed_standard, table_of
from worker.cycle import Stores


def mention(concept: str, target: str, **extra: object) -> dict[str, object]:
    return {"source": f"CONCEPT:{concept}", "target": target, "relationship": "MENTIONED_IN", **extra}


def waiting(db: Database) -> list[dict[str, Any]]:
    return [dict(r) for r in db.query("SELECT id, line, attempts, last_error FROM lazy_edges ORDER BY id")]


def dead(db: Database) -> list[dict[str, Any]]:
    return [dict(r) for r in db.query("SELECT line, reason, detail, attempts FROM lazy_edges_dead ORDER BY id")]


def url_of(settings: Settings) -> str:
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    return f"sqlite:///{settings.graph_path.resolve()}"


# --- the producer library ----------------------------------------------------------------------


@pytest.mark.both_backends
async def test_enqueue_writes_the_file_or_the_table_by_target(settings: Settings, stores: Stores) -> None:
    edges = [mention("a", "memory:m1", justification="seen"), {"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R"}]
    assert enqueue_lazy_edges(settings.queue_path, edges) == 2
    assert enqueue_lazy_edges(str(settings.queue_path), edges[:1]) == 1
    assert enqueue_lazy_edges(url_of(settings), edges) == 2
    from_file = read_jsonl(settings.queue_path)
    from_table = [json.loads(r["line"]) for r in waiting(stores.db)]
    assert [r["justification"] for r in (from_file[0], from_table[0])] == ["seen", "seen"]
    # The same line in both forms: every field kept verbatim (ids are normalised by the drain).
    strip = lambda record: {k: v for k, v in record.items() if k != "timestamp"}  # noqa: E731
    assert [strip(r) for r in from_file[:2]] == [strip(r) for r in from_table]
    assert all(r["attempts"] == 0 and r["last_error"] is None for r in waiting(stores.db))
    assert enqueue_lazy_edges(url_of(settings), []) == 0
    # Settings name the configured form.
    assert settings.lazy_queue_target == settings.queue_path
    assert settings.model_copy(update={"lazy_queue": "database"}).lazy_queue_target == url_of(settings)


@pytest.mark.both_backends
@pytest.mark.parametrize("form", ["file", "table"])
async def test_enqueue_rejects_bad_edges_and_writes_none(settings: Settings, stores: Stores, form: str) -> None:
    target = settings.queue_path if form == "file" else url_of(settings)
    edges = [
        mention("a", "memory:ok"),
        {"source": "CONCEPT:a", "relationship": "R"},
        mention("a", "memory:has space"),
        mention("a", "memory:m", weight=float("nan")),
        "not a mapping",
        mention("a", "memory:m", properties={"big": "x" * (1024 * 1024)}),
    ]
    with pytest.raises(InvalidLazyEdgeError) as caught:
        enqueue_lazy_edges(target, edges)  # type: ignore[arg-type]
    assert [(i, reason) for i, reason, _ in caught.value.problems] == [
        (1, "invalid-edge"), (2, "invalid-edge"), (3, "invalid-edge"), (4, "invalid-edge"), (5, "line-too-long"),
    ]
    assert "missing target" in str(caught.value) and "none enqueued" in str(caught.value)
    assert not settings.queue_path.exists() and waiting(stores.db) == []


def test_enqueue_refuses_a_database_that_is_not_there_and_unknown_schemes(tmp_path: Path) -> None:
    with pytest.raises(DatabaseUnreadableError, match="no graph database"):
        enqueue_lazy_edges(f"sqlite:///{tmp_path}/typo.sqlite3", [mention("a", "memory:m")])
    assert not (tmp_path / "typo.sqlite3").exists()
    with pytest.raises(ValueError, match="not a queue file nor a database URL"):
        enqueue_lazy_edges("mysql://host/db", [mention("a", "memory:m")])


@pytest.mark.both_backends
async def test_the_table_refuses_a_line_longer_than_its_limit(stores: Stores) -> None:
    with pytest.raises(ConstraintError):
        table_of(stores).append_lines(["x" * (1024 * 1024 + 1)])
    assert waiting(stores.db) == []


@pytest.mark.both_backends
@pytest.mark.parametrize("last", ["too long", "raises"])
async def test_the_table_takes_a_large_input_a_batch_at_a_time_and_still_all_or_none(stores: Stores, last: str) -> None:
    """A producer's lines are inserted in bounded batches while they are still being read (the
    whole input was built as one list first); a bad line or a failing reader after several batches
    rolls every batch back."""
    table = table_of(stores)
    total = 3 * APPEND_BATCH_ROWS + 5
    held_at_most = 0

    def lines(*, bad_end: bool) -> Iterator[str]:
        nonlocal held_at_most
        for n in range(total):
            if n % 100 == 0:  # lines read but not yet inserted (the transaction's connection sees its rows)
                held_at_most = max(held_at_most, n - stores.db.query("SELECT COUNT(*) FROM lazy_edges")[0][0])
            yield edge_line(mention(f"c{n}", "memory:m1")).decode()
        if bad_end:
            if last == "raises":
                raise OSError("the producer's file went away")
            yield "x" * (MAX_LINE_CHARACTERS + 1)

    with pytest.raises(ConstraintError if last == "too long" else OSError):
        table.append_lines(lines(bad_end=True))
    assert waiting(stores.db) == []
    assert held_at_most < APPEND_BATCH_ROWS
    assert table.append_lines(lines(bad_end=False)) == total
    assert len(waiting(stores.db)) == total and held_at_most < APPEND_BATCH_ROWS


# --- drains of the table -------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_table_rows_link_backfill_and_leave_the_table(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph", "queue")
    enqueue_lazy_edges(url_of(settings), [
        mention("graph", "MEMORY:s-1-t0000", justification="seen in turn 0"),
        mention("queue", "memory:s-2-t0001"),
        {"source": "CONCEPT:graph", "target": "SESSION:s-nosum", "relationship": "DISCUSSED_IN"},
        {"source": "CONCEPT:graph", "target": "CONCEPT:queue", "relationship": "RELATES_TO", "weight": 0.5},
    ])
    stats = await drain(settings, stores, table=table_of(stores))
    assert (stats.total_lines, stats.table_rows, stats.succeeded, stats.failed, stats.backfilled) == (4, 4, 4, 0, 3)
    assert not stats.queue_rotated  # no file: the table alone was drained
    assert waiting(stores.db) == [] and dead(stores.db) == []
    edge = stores.graph.get_edge("CONCEPT:graph", "memory:s-1-t0000", "MENTIONED_IN")
    assert edge is not None and edge.properties == {"justification": "seen in turn 0"}
    assert stores.graph.get_node("session:s-nosum").properties["minimal"] is True
    assert not queue_of(settings).path.exists()


@pytest.mark.both_backends
async def test_failed_rows_keep_their_place_with_attempts_then_die(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph")
    table = table_of(stores)
    enqueue_lazy_edges(url_of(settings), [mention("graph", "memory:nope", justification="keep me"), mention("graph", "memory:s-1-t0000")])
    enqueue_lazy_edges(url_of(settings), [mention("graph", "memory:s-1-t0001")])
    [first_id, _, third_id] = [r["id"] for r in waiting(stores.db)]
    first = await drain(settings, stores, table=table, max_attempts=3)
    assert (first.succeeded, first.failed, first.requeued, first.dead_lettered) == (2, 1, 1, 0)
    assert first.failure_reasons == {"chroma-row-not-found": 1}
    [kept] = waiting(stores.db)
    assert kept["id"] == first_id < third_id  # still first in line
    assert kept["attempts"] == 1 and kept["last_error"].startswith("chroma-row-not-found: memory:nope")
    assert json.loads(kept["line"])["justification"] == "keep me"  # the producer's line, untouched
    await drain(settings, stores, table=table, max_attempts=3)
    assert waiting(stores.db)[0]["attempts"] == 2
    third = await drain(settings, stores, table=table, max_attempts=3)
    assert (third.failed, third.requeued, third.dead_lettered) == (1, 0, 1)
    assert waiting(stores.db) == []
    [gone] = dead(stores.db)
    assert gone["reason"] == "max-attempts" and gone["attempts"] == 3 and gone["detail"].startswith("chroma-row-not-found")
    assert json.loads(gone["line"])["justification"] == "keep me"


MALFORMED = [
    "{not json",
    '{"source":"CONCEPT:a","relationship":"RELATES_TO"}',
    '{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"RELATES_TO","weight":"x"}',
    "[1, 2]",
    '{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"RELATES_TO","properties":{"n":NaN}}',
]


@pytest.mark.both_backends
async def test_malformed_rows_are_dead_lettered_exactly_like_file_lines(settings: Settings, stores: Stores) -> None:
    """One rule, one place: the same bad lines get the same reasons and details in either form."""
    add_concepts(stores.graph, "a", "b")
    good = edge_line({"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "RELATES_TO"}).decode()
    table = table_of(stores)
    table.append_lines([MALFORMED[0], good, *MALFORMED[1:]])  # what a producer writing SQL may insert
    queue = queue_of(settings)
    queue.append_lines([line.encode() + b"\n" for line in [MALFORMED[0], good, *MALFORMED[1:]]])
    stats = await drain(settings, stores, table=table)
    assert (stats.total_lines, stats.table_rows, stats.processed, stats.succeeded) == (12, 6, 2, 2)
    assert stats.skipped_malformed == stats.dead_lettered == 10 and stats.requeued == 0
    assert waiting(stores.db) == [] and not queue.path.exists()
    from_table = dead(stores.db)
    from_file = read_jsonl(queue.dead_letter_path)
    assert [(d["line"], d["reason"], d["detail"], d["attempts"]) for d in from_table] == [
        (d["line"], d["reason"], d["detail"], d["attempts"]) for d in from_file
    ]
    assert [d["reason"] for d in from_table] == ["malformed-json", "invalid-edge", "invalid-edge", "malformed-json", "invalid-edge"]
    assert table.dead_letter_count() == 5 and table.dead_letters(limit=1)[0]["line"] == MALFORMED[-1]
    assert edge_count(stores.graph) == 1  # the good line, queued twice, is one edge


async def test_a_row_that_is_not_utf8_is_dead_lettered_not_stuck(settings: Settings, stores: Stores) -> None:
    """SQLite stores whatever bytes a producer writing SQL gives it: such a row is dead-lettered
    as malformed, like such a file line, and the rows around it link."""
    import sqlite3

    add_concepts(stores.graph, "a", "b")
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R"}])
    raw = sqlite3.connect(settings.graph_path)
    raw.execute("INSERT INTO lazy_edges(line, enqueued_at) VALUES (CAST(X'7B22FF7D' AS TEXT), 't')")
    raw.commit()
    raw.close()
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:b", "target": "CONCEPT:a", "relationship": "R"}])
    stats = await drain(settings, stores, table=table_of(stores))
    assert (stats.succeeded, stats.skipped_malformed, edge_count(stores.graph)) == (2, 1, 2)
    [gone] = dead(stores.db)
    assert gone["reason"] == "malformed-json" and gone["line"] == '{"\ufffd}'
    assert waiting(stores.db) == []


@pytest.mark.both_backends
async def test_one_drain_drains_both_forms(settings: Settings, stores: Stores) -> None:
    add_concepts(stores.graph, "a", "b", "c")
    enqueue_lazy_edges(settings.queue_path, [{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R"}])
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:b", "target": "CONCEPT:c", "relationship": "R"}])
    seen: list[tuple[int, int]] = []
    stats = await drain(settings, stores, table=table_of(stores), on_progress=lambda done, total: seen.append((done, total)))
    assert (stats.total_lines, stats.table_rows, stats.succeeded, stats.queue_rotated) == (2, 1, 2, True)
    assert edge_count(stores.graph) == 2 and waiting(stores.db) == [] and not queue_of(settings).path.exists()
    assert seen and seen[-1][0] == seen[-1][1] > 0


@pytest.mark.both_backends
async def test_replayed_rows_leave_one_edge_and_rows_are_read_in_order(settings: Settings, stores: Stores) -> None:
    add_concepts(stores.graph, "a", "b")
    line = {"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R", "properties": {"n": 1}}
    for _ in range(3):
        enqueue_lazy_edges(url_of(settings), [line])
    table = table_of(stores)
    end = table.last_id()
    rows = table.read_batch(after=0, up_to=end, limit=2, max_bytes=10**6)
    assert [r.id for r in rows] == sorted(r.id for r in rows) and len(rows) == 2
    assert [r.id for r in table.read_batch(after=rows[-1].id, up_to=end, limit=10, max_bytes=10**6)] == [end]
    # A batch stops at max_bytes (past its first row), so long rows never pile up in memory.
    assert len(table.read_batch(after=0, up_to=end, limit=10, max_bytes=1)) == 1
    stats = await drain(settings, stores, table=table, batch_size=1)
    assert (stats.succeeded, edge_count(stores.graph)) == (3, 1)
    assert waiting(stores.db) == []


@pytest.mark.both_backends
async def test_rows_inserted_during_a_drain_wait_for_the_next(settings: Settings, stores: Stores) -> None:
    """A drain takes the rows present when it starts: a steady producer cannot keep it going."""
    add_concepts(stores.graph, "a", *[f"t{i}" for i in range(6)])
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:a", "target": f"CONCEPT:t{i}", "relationship": "R"} for i in range(3)])
    table = table_of(stores)

    def progress(done: int, total: int) -> None:  # a producer writes between the batches
        table.append([{"source": "CONCEPT:a", "target": f"CONCEPT:t{3 + len(waiting(stores.db))}", "relationship": "R"}])

    stats = await drain(settings, stores, table=table, batch_size=1, on_progress=progress)
    assert stats.succeeded == 3 and len(waiting(stores.db)) == 3
    assert (await drain(settings, stores, table=table)).succeeded == 3


@pytest.mark.both_backends
async def test_dry_run_leaves_the_table_alone(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph")
    table = table_of(stores)
    enqueue_lazy_edges(url_of(settings), [mention("graph", "memory:s-1-t0000"), mention("graph", "memory:nope")])
    table.append_lines(["garbage"])
    before = (waiting(stores.db), graph_dump(stores.graph))
    stats = await drain(settings, stores, table=table, dry_run=True)
    assert (stats.total_lines, stats.succeeded, stats.failed, stats.skipped_malformed) == (3, 1, 1, 1)
    assert (waiting(stores.db), graph_dump(stores.graph)) == before and dead(stores.db) == []


@pytest.mark.both_backends
async def test_a_stopped_drain_leaves_unread_rows_untouched(settings: Settings, stores: Stores) -> None:
    add_concepts(stores.graph, "a", *[f"t{i}" for i in range(5)])
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:a", "target": f"CONCEPT:t{i}", "relationship": "R"} for i in range(5)])
    before = waiting(stores.db)
    stats = await drain(settings, stores, table=table_of(stores), batch_size=2, should_stop=lambda: True)
    assert stats.succeeded == 2 and waiting(stores.db) == before[2:]


async def test_an_exception_while_linking_keeps_the_row_and_rolls_back(settings: Settings, stores: Stores) -> None:
    """A batch whose write fails is rolled back whole and retried row by row; a row that still
    fails stays queued with its error (never lost), and the next drain links it."""
    import sqlite3

    add_concepts(stores.graph, "a", "b")
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R"}])
    impatient = Database(settings.graph_path, timeout=0.1)
    blocker = sqlite3.connect(settings.graph_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(Exception, match="locked"):
            # The write lock is held by another process: the row cannot even be settled as failed.
            await drain(settings, stores, unit=DatabaseUnitOfWork(impatient), table=LazyEdgeTable(impatient))
        blocker.execute("ROLLBACK")
        assert [r["attempts"] for r in waiting(stores.db)] == [0] and edge_count(stores.graph) == 0
        again = await drain(settings, stores, unit=DatabaseUnitOfWork(impatient), table=LazyEdgeTable(impatient))
        assert again.succeeded == 1 and waiting(stores.db) == []
    finally:
        blocker.close()
        impatient.close()


@pytest.mark.both_backends
async def test_settling_rows_another_drain_took_rolls_the_batch_back(settings: Settings, stores: Stores) -> None:
    add_concepts(stores.graph, "a", "b")
    table = table_of(stores)
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R"}] * 2)
    rows = table.read_batch(after=0, up_to=table.last_id(), limit=10, max_bytes=10**6)
    with stores.db.transaction():
        table.settle(taken=rows[:1], requeued=[], dead=[])  # another drain settled the first row
    with pytest.raises(RowsTakenError):
        with stores.db.transaction():
            stores.graph.link_nodes([])
            table.settle(taken=rows, requeued=[(rows[1], "error: x")], dead=[])
    assert [r["id"] for r in waiting(stores.db)] == [rows[1].id]  # rolled back: untouched
    stale = QueuedRow(10**9, b"{}", 0, "t")
    with pytest.raises(RowsTakenError):
        table.settle(taken=[stale], requeued=[], dead=[])


@pytest.mark.both_backends
async def test_two_concurrent_drains_of_one_table_apply_each_row_once(
    settings: Settings, stores: Stores, tmp_path: Path, open_graph_database: Any
) -> None:
    """Two drains (two hosts: their own queue files and locks, one database) race over the same
    rows: each batch is applied by exactly one of them."""
    add_concepts(stores.graph, "a", *[f"t{i}" for i in range(300)])
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:a", "target": f"CONCEPT:t{i}", "relationship": "R"} for i in range(300)])
    other_db = open_graph_database(settings.graph_path)
    try:
        results = []

        async def one(queue_dir: Path, db: Database) -> None:
            queue_dir.mkdir()
            results.append(await drain(
                settings, stores, unit=DatabaseUnitOfWork(db), table=LazyEdgeTable(db), batch_size=25,
                queue=LazyEdgeQueue(queue_dir / "lazy-edges.jsonl"),
            ))

        async with anyio.create_task_group() as group:
            group.start_soon(one, tmp_path / "host-a", stores.db)
            group.start_soon(one, tmp_path / "host-b", other_db)
    finally:
        other_db.close()
    assert sum(r.succeeded for r in results) == 300 and sum(r.failed for r in results) == 0
    assert edge_count(stores.graph) == 300 and waiting(stores.db) == [] and dead(stores.db) == []


PRODUCER = """
import sys
from pipelines.enqueue import enqueue_lazy_edges
target, producer, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for start in range(0, count, 10):
    enqueue_lazy_edges(target, [
        {"source": f"CONCEPT:p{producer}", "target": f"CONCEPT:t{n}", "relationship": "R", "properties": {"n": n}}
        for n in range(start, min(count, start + 10))
    ], fsync=False)
"""


@pytest.mark.both_backends
@pytest.mark.timeout(180)
async def test_concurrent_producer_processes_and_a_drain_lose_nothing(settings: Settings, stores: Stores) -> None:
    """Four producer processes (two on the file, two on the table) write while drains run; at the
    end every edge is in the graph exactly once and both queues are empty."""
    per_producer = 150
    add_concepts(stores.graph, *[f"p{i}" for i in range(4)], *[f"t{n}" for n in range(per_producer)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT)}
    targets = [str(settings.queue_path), url_of(settings)] * 2
    procs = [
        subprocess.Popen([sys.executable, "-c", PRODUCER, target, str(i), str(per_producer)], env=env, cwd=ROOT,
                         stderr=subprocess.PIPE)
        for i, target in enumerate(targets)
    ]
    table = table_of(stores)
    drains = 0
    while any(p.poll() is None for p in procs):
        await drain(settings, stores, table=table, batch_size=40)
        drains += 1
        await anyio.sleep(0.05)
    for p in procs:
        assert p.wait() == 0, p.stderr.read().decode() if p.stderr else ""
    await drain(settings, stores, table=table)
    assert edge_count(stores.graph, "R") == 4 * per_producer and drains >= 1
    assert waiting(stores.db) == [] and dead(stores.db) == []
    assert not queue_of(settings).path.exists() and not queue_of(settings).dead_letter_path.exists()


# --- the worker as a producer, and the operator's verb ------------------------------------------


@pytest.mark.both_backends
async def test_with_the_database_form_a_cycle_queues_its_lazy_edges_as_rows(settings: Settings, tmp_path: Path) -> None:
    """REM_LAZY_QUEUE=database: the provenance edges extraction cannot link yet become rows, in
    the session's commit; the drain phase then works them like any producer's."""
    from tests.conftest import make_session
    from tests.lazy_fixtures import seed_chroma
    from worker.cycle import PHASES, open_stores, run_cycle

    mine = settings.model_copy(update={"lazy_queue": "database"})
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, [make_session("s2", 2, text="turn {i} cites memory:legacy-0117 and session:old-2")], tmp_path)
        result = await run_cycle(mine, stores=stores, phases=tuple(p for p in PHASES if p[0] != "drain"))
        assert result.phases["extract"]["lazy_edges_queued"] == 4
        rows = [json.loads(r["line"]) for r in waiting(stores.db)]
        assert {(r["source"], r["relationship"]) for r in rows} == {("memory:legacy-0117", "REFERENCED_BY"), ("session:old-2", "REFERENCED_BY")}
        assert not mine.queue_path.exists()
        full = await run_cycle(mine, stores=stores)
        assert full.phases["drain"]["table_rows"] == 4 and full.phases["drain"]["requeued"] == 4
        assert [r["attempts"] for r in waiting(stores.db)] == [1, 1, 1, 1]
    finally:
        stores.close()


@pytest.mark.both_backends
def test_cli_enqueue_queues_a_file_in_the_configured_form(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps(mention("a", "memory:m1")) + "\n\n" + json.dumps(mention("b", "memory:m2")) + "\n")
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    if settings.database_url is not None:
        env["REM_DATABASE_URL"] = settings.database_url.get_secret_value()
        settings.data_dir.mkdir(parents=True, exist_ok=True)  # the file form's queue lives there
    done = run_cli("enqueue", str(edges), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"queued": 2, "queue": "file"} and len(read_jsonl(settings.queue_path)) == 2
    done = run_cli("enqueue", str(edges), env={**env, "REM_LAZY_QUEUE": "database"})
    assert done.returncode == 0 and "queued 2 lazy edges in the queue table" in done.stdout
    assert len(waiting(stores.db)) == 2
    status = run_cli("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    queue = json.loads(status.stdout)["queue"]
    assert (queue["depth"], queue["table_rows"], queue["table_dead_letters"]) == (2, 2, 0) and queue["table_oldest_enqueued_at"]
    assert "table: 2 rows" in run_cli("status", env=env).stdout
    drained = run_cli("drain", env=env)
    assert drained.returncode == 0 and "4 lines" in drained.stdout and "2 of the lines from the queue table" in drained.stdout
    # One bad line: each is named, nothing is queued.
    edges.write_text(json.dumps(mention("a", "memory:m3")) + "\n{oops\n" + json.dumps({"source": "CONCEPT:a"}) + "\n")
    done = run_cli("enqueue", str(edges), env={**env, "REM_LAZY_QUEUE": "database"})
    assert done.returncode == 1 and "line 2: malformed-json" in done.stderr and "nothing was queued" in done.stderr
    edges.write_text(json.dumps(mention("a", "memory:m3")) + "\n" + json.dumps({"source": "CONCEPT:a"}) + "\n")
    done = run_cli("enqueue", str(edges), env=env)
    assert done.returncode == 1 and "line 2: invalid-edge: missing target, relationship" in done.stderr
    assert len(waiting(stores.db)) == 2 and len(read_jsonl(settings.queue_path)) == 2


@pytest.mark.both_backends
async def test_metrics_export_the_rows_waiting_in_the_table(settings: Settings, stores: Stores) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from worker.metrics import build_registry

    def rows_gauge() -> float:
        text = generate_latest(build_registry(settings)).decode()
        return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == "rem_cycle_lazy_queue_table_rows")

    assert rows_gauge() == 0
    enqueue_lazy_edges(url_of(settings), [mention("a", f"memory:m{i}") for i in range(3)])
    assert rows_gauge() == 3
