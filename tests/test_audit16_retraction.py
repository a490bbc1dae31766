"""audit16: what a retraction leaves in the lazy-edge queue when something happens beside or during
it — a follower extracting the session whose turn went, a cycle cancelled mid-ingest, a backfill
stopped by a signal. Real ``python -m worker`` processes (a ``--once`` follower with
REM_SHARED_EXTRACT; ``backfill``), cycles in this process, real SQLite files or PostgreSQL,
embedded Chroma and the loopback model server."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import pytest

from config import Settings
from store.backend import open_database
from store.lazy_queue import LazyEdgeQueue
from tests.conftest import make_session
from tests.daemon_support import start_worker
from tests.lazy_fixtures import seed_chroma
from tests.llm_server import LLMServer, held, ok
from tests.test_audit_workers_forget import env_of, follower_waiting_on_the_model, mentions
from tests.test_command_signals import _env, _interrupt_midway
from tests.test_forget import canonical
from tests.test_forget_bytes import _files_holding
from tests.test_forget_queue import OLD_REF
from tests.test_forget_rest import rows_holding
from tests.test_retract_queue import _built, _delete_rows
from tests.workers_support import corpus, ingested
from worker.cycle import PHASES, open_stores, run_cycle

RETRACTED = "w0000-t1"


@pytest.mark.both_backends
def test_a_turn_retracted_while_a_follower_extracts_its_session_leaves_nothing_of_it(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """The turn's row leaves Chroma while a follower waits for the model on its session; the
    leader's ingest retracts the turn and withdraws its queue lines. The follower's commit of the
    old revision must roll back (as a forget's or a rewritten turn's takes its claim back): before
    audit16 it went through, wrote the turn's points back into the graph and queued new
    ``MENTIONED_IN`` lines to the retracted turn after the withdrawal — lines that link it again
    should its row come back, and that the re-extraction does not take out."""
    answers = held()
    with LLMServer(default=answers) as llm:
        base = asyncio.run(ingested(settings.data_dir, corpus(1), tmp_path, database_url=database_url))
        env = env_of(settings, llm, database_url)
        worker = follower_waiting_on_the_model(settings, llm, env, tmp_path / "w.log", requests=1)
        asyncio.run(_delete_rows(base, [RETRACTED]))
        scan = base.model_copy(update={"full_scan_interval_seconds": 0})  # only a full scan sees a row go
        leader = asyncio.run(run_cycle(scan, phases=tuple(p for p in PHASES if p[0] == "ingest")))
        assert leader.outcome == "completed" and leader.phases["ingest"]["turns_retracted"] == 1, leader.phases
        llm.default = ok()
        answers.release.set()
        assert worker.wait(timeout=120) == 0, (tmp_path / "w.log").read_text()[-3000:]
        assert mentions(canonical(settings), RETRACTED) == []
        again = start_worker("--once", env=env, log_path=tmp_path / "again.log")
        assert again.wait(timeout=120) == 0, (tmp_path / "again.log").read_text()[-3000:]
    assert mentions(canonical(settings), RETRACTED) == [] and mentions(canonical(settings), "w0000-t0")
    assert _files_holding(settings.data_dir, RETRACTED) == []
    assert [r for r in rows_holding(settings, RETRACTED) if r.startswith("lazy_edges")] == []


def _queue_files_holding(settings: Settings, word: str) -> list[str]:
    """The queue files (live, ``.draining``, dead letters) that hold ``word``."""
    queue = LazyEdgeQueue(settings.queue_path)
    return [p.name for p in (queue.path, *queue.draining_files(), queue.dead_letter_path) if p.exists() and word in p.read_text()]


async def test_a_retraction_cancelled_mid_ingest_still_withdraws_its_lines(settings: Settings, tmp_path: Path) -> None:
    """The cycle is cancelled (a daemon's stop grace ran out) while its ingest syncs a backlog, just
    after it retracted ``s-gone`` (its rows left Chroma): the retraction is committed, and no later
    cycle finds it again, so its queue lines must go all the same. Before audit16 the withdrawal
    ran outside the phase's ``try`` (a cancellation before the sync loop skipped it) or, in its
    ``finally``, unshielded (a cancellation in the loop skipped it at its first checkpoint)."""
    mine = await _built(settings, tmp_path)
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, [make_session(f"backlog-{i:03d}", 2) for i in range(100)], tmp_path)
    finally:
        stores.close()
    await _delete_rows(mine, ["s-gone-t0000", "s-gone-t0001"], sessions=("s-gone",))
    assert _queue_files_holding(mine, OLD_REF)
    db = open_database(mine, readonly=True)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(run_cycle, mine.model_copy(update={"full_scan_interval_seconds": 0})))
            while db.query("SELECT COUNT(*) FROM session_digests WHERE session_id = 's-gone'")[0][0]:
                await anyio.sleep(0.001)
            tg.cancel_scope.cancel()  # retracted (committed); the backlog's sync has 100 sessions to go
        synced = db.query("SELECT COUNT(*) FROM session_digests WHERE session_id LIKE 'backlog-%'")[0][0]
    finally:
        db.close()
    assert synced < 100  # the cancellation came mid-ingest
    assert _queue_files_holding(mine, OLD_REF) == []


async def test_a_backfill_stopped_midway_withdraws_the_lines_of_the_turns_it_took_out(settings: Settings, tmp_path: Path) -> None:
    """``rem-cycle backfill`` takes out ``s-gone``'s first turn (its row left Chroma) in its first
    batch of sessions, then a SIGINT stops it in a later one: the retraction is committed, and
    neither a re-run nor a cycle finds the turn gone again, so its queue line must go all the same.
    Before audit16 the withdrawal ran only once every batch was synced."""
    mine = await backlog_after_a_retracted_turn(settings, tmp_path)
    done = backfill_stopped_after_the_turn(mine)
    assert done.returncode == 130, done.stderr[-3000:]
    assert graph_sessions(mine) < 203  # stopped before its last batch
    assert _queue_files_holding(mine, OLD_REF) == []


async def backlog_after_a_retracted_turn(settings: Settings, tmp_path: Path) -> Settings:
    """The built graph, 200 sessions more in Chroma after ``s-gone``'s day (batches of their own,
    after its), and ``s-gone``'s first turn's row deleted from Chroma."""
    mine = await _built(settings, tmp_path)
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, [make_session(f"backlog-{i:03d}", 1, created="2026-11-02T10:00:00Z")
                                         for i in range(200)], tmp_path)
    finally:
        stores.close()
    await _delete_rows(mine, ["s-gone-t0000"])
    return mine


def backfill_stopped_after_the_turn(mine: Settings, *, then: Callable[[sqlite3.Connection], None] = lambda graph: None
                                    ) -> subprocess.CompletedProcess[str]:
    """``rem-cycle backfill`` run until it took ``s-gone``'s first turn out, its next batch held on
    the graph's write lock until a SIGINT stops it; ``then(graph)`` (a read-only connection) once it
    exited."""
    graph = sqlite3.connect(f"{mine.graph_path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    gate = sqlite3.connect(mine.graph_path, isolation_level=None, timeout=30)
    try:
        def turn_taken_out() -> bool:
            if graph.execute("SELECT COUNT(*) FROM nodes WHERE id = 'memory:s-gone-t0000'").fetchone()[0]:
                return False
            gate.execute("BEGIN IMMEDIATE")  # the backfill's next batch waits here until the signal
            return True

        done = _interrupt_midway(["backfill", "--days", "3650", "--skip-drain"], _env(mine.data_dir), signal.SIGINT,
                                 turn_taken_out, signalled=lambda: gate.execute("ROLLBACK"))
        then(graph)
        return done
    finally:
        gate.close()
        graph.close()


def graph_sessions(settings: Settings) -> int:
    db = open_database(settings, readonly=True)
    try:
        return db.query("SELECT COUNT(*) FROM nodes WHERE label = 'SESSION'")[0][0]
    finally:
        db.close()
