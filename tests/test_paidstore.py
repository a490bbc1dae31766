"""A paid answer the database refuses to store (paidstore): the session is charged nothing — an
outage of the database, no chunk's fault — and an answer the database takes a second later is kept,
not paid for again. Before, the refusal crashed the session, which was charged an attempt when the
database was back by the time the failure was recorded, and the answer was lost. Real cycles, real
SQLite files and PostgreSQL (a trigger that refuses, a lock past the busy timeout, a connection cut
mid-store), embedded Chroma, the loopback chat-completions server counting requests."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from structlog.testing import capture_logs

from config import Settings
from pipelines.extract.inflight import HeldAnswers
from pipelines.extract.map import ANSWER_UNSTORED, UnitOutcome
from pipelines.extract.workflow import open_extractor
from pipelines.forget import forget_session
from store.backend import open_database_at
from store.unit_of_work import DatabaseUnitOfWork
from tests.daemon_support import wait_for
from tests.llm_server import LLMServer
from tests.test_audit_remote_postgres import app_name
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, conversation
from tests.test_textclaim import digests, sent_per_chunk
from tests.test_textclaim_failures import charged, map_on_a_short_timeout, waiting_on_a_lock
from tests.workers_support import (
    accept_answers, extract_phase, graph_database, held_count, ingested, refuse_answers, three_answers_held,
)

@pytest.mark.both_backends
@pytest.mark.parametrize("process", ["daemon", "once"])
async def test_a_database_that_refuses_the_answers_defers_the_session_and_charges_nothing(
    tmp_path: Path, settings: Settings, database_url: str | None, process: str
) -> None:
    """Cycle 1: each of the three chunks is asked once, and the database refuses to store its
    answer (a trigger), twice. The session is deferred, charged no attempt, and no failed chunk row
    is left; the chunks count as ``answer-unstored``. Cycle 2, the database taking writes again,
    digests it, storing the answers held since cycle 1 and asking nothing: in the daemon (its cycles
    share the held answers) and in two ``--once`` cycles (cycle 1 left them in the data dir's file:
    heldonce; before it, each chunk was asked again). Before paidstore: the session was charged an
    attempt in cycle 1, and each chunk was asked again in either case."""
    held = HeldAnswers() if process == "daemon" else None
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm, **({"database_url": database_url} if database_url else {}))
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path, database_url=database_url)
        refuse_answers(config, database_url)
        first = await extract_phase(config, held)
        assert sent_per_chunk(llm) == [1, 1, 1]
        assert (first["sessions_deferred"], first["sessions_failed"], first["failures_by_kind"]) == (1, 0, {ANSWER_UNSTORED: 3})
        assert charged(config, database_url) == {"attempts": [0], "failed_chunks": 0}
        accept_answers(config, database_url)
        second = await extract_phase(config, held)
        assert sent_per_chunk(llm) == [1, 1, 1]
        assert (second["sessions_digested"], second["chunks_reused"]) == (1, 3)
    assert digests(config) == [("s", "digested")]
    assert charged(config, database_url) == {"attempts": [0], "failed_chunks": 0}
    with graph_database(settings.data_dir, database_url) as db:  # each answer's row carries its one call's tokens
        assert [r[0] for r in db.query("SELECT attempts FROM chunk_results WHERE tokens_in > 0")] == [1, 1, 1]


async def test_an_answer_sqlite_refuses_past_its_busy_timeout_is_stored_after_the_pause(tmp_path: Path, settings: Settings) -> None:
    """The map on a real SQLite file whose busy timeout is short (0.3 s; a worker's is 30 s):
    another connection holds the write lock (``BEGIN IMMEDIATE``) when the three answers arrive,
    so each store is refused (``database is locked``); the lock goes before the second try, which
    stores each answer — one call per chunk, all ``ok``, nothing failed. Before: the map raised."""
    with map_on_a_short_timeout(settings, tmp_path) as case:
        outcomes: list[UnitOutcome] = []
        async with open_extractor(case.config) as extractor:
            with capture_logs() as logs:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(case.map_into, outcomes, extractor)
                    while case.llm.chat_count < 3:
                        await anyio.sleep(0.02)
                    locker = sqlite3.connect(tmp_path / "graph.sqlite3", isolation_level=None)
                    locker.execute("BEGIN IMMEDIATE")
                    try:
                        case.answers.release.set()
                        while sum(e["event"].startswith("paid answer not stored, trying once more") for e in logs) < 3:
                            await anyio.sleep(0.02)
                    finally:
                        locker.execute("ROLLBACK")
                        locker.close()
        assert [o.status for o in outcomes] == ["ok"] * 3
        assert case.llm.chat_count == 3
        assert [tuple(r) for r in case.db.query("SELECT status, attempts FROM chunk_results")] == [("ok", 1)] * 3


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_an_answer_whose_connection_is_cut_mid_store_is_kept_and_the_session_digested(
    tmp_path: Path, settings: Settings, database_url: str, postgres_server_url: str
) -> None:
    """Another client locks ``chunk_results``, so the worker's first store waits on the lock; its
    connection is cut there (``pg_terminate_backend``: a failover, an administrator) and the lock
    released. The store is tried again on a new connection and kept: the session is digested in
    that cycle, 0 attempts, one request per chunk, and the next cycle asks nothing. Before: the
    session was charged an attempt and the cut chunk asked again in the next cycle."""
    url = f"{database_url}&application_name=paidstore-{uuid.uuid4().hex[:12]}"
    with LLMServer() as llm:
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path, database_url=database_url)
        config = llm_settings(settings.data_dir, llm, database_url=url)
        with psycopg.connect(database_url) as locker:
            locker.execute("LOCK TABLE chunk_results IN EXCLUSIVE MODE")
            async with anyio.create_task_group() as tg:
                phases: list[dict[str, Any]] = []

                async def cycle() -> None:
                    phases.append(await extract_phase(config))

                tg.start_soon(cycle)
                pid = (await anyio.to_thread.run_sync(lambda: wait_for(
                    lambda: waiting_on_a_lock(postgres_server_url, app_name(url)), interval=0.05,
                    what="the worker's store never waited on the lock")))[0]
                with psycopg.connect(postgres_server_url, autocommit=True) as admin:
                    assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
                locker.rollback()
        assert phases[0]["sessions_digested"] == 1, phases
        await extract_phase(config)
        assert sent_per_chunk(llm) == [1, 1, 1]
    assert digests(settings) == [("s", "digested")]
    assert charged(settings, database_url) == {"attempts": [0], "failed_chunks": 0}


@pytest.mark.both_backends
async def test_an_answer_held_for_a_session_forgotten_since_is_dropped_not_stored_for_a_fork(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """A daemon holds the three answers the database refused for session ``s``; ``s`` is then
    forgotten (``rem-cycle forget`` in another process: it cannot reach the daemon's memory). The
    daemon's next cycle drops them, though it has nothing to extract: what was forgotten is not
    kept in the process. A fork ``f`` of the same words, ingested later, is asked about again — as
    a fork of a session forgotten with its stored answers is. Before: the three answers stayed
    held, and the fork's cycle stored them as ``f``'s, with no request."""
    held_answers = HeldAnswers()
    with LLMServer() as llm:
        config = await three_answers_held(settings.data_dir, llm, tmp_path, held_answers, database_url=database_url)
        db = open_database_at(path=settings.data_dir / "graph.sqlite3", url=database_url)
        try:
            forget_session(DatabaseUnitOfWork(db), "s")
        finally:
            db.close()
        await extract_phase(config, held_answers)
        assert held_count(config, held_answers) == 0
        await ingested(settings.data_dir, [conversation("f", HISTORY)], tmp_path, database_url=database_url)
        fork = await extract_phase(config, held_answers)
        assert (fork["sessions_digested"], fork["chunks_reused"]) == (1, 0)
        assert sent_per_chunk(llm) == [2, 2, 2]
