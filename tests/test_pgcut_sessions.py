"""A session whose work the database cuts (pgcut): the server drops its connection, or the database
stays locked past the timeout, while the session commits or maps. That is no session's fault, so the
session is deferred and charged nothing (no attempt, no backoff), and the next extraction digests it
from the answers already stored (no model call paid again). Real SQLite files and PostgreSQL
schemas, embedded Chroma, the loopback model server; the lock is taken from another connection just
before the session's commit (``extract_session``'s ``commit_turn``), where a real outage lands."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from config import Settings
from pipelines.extract.workflow import ExtractEnv, ExtractStats, extract_session, extract_sessions, open_extractor
from store.backend import open_database_at
from store.chroma import ChromaStore
from store.lazy_table import lazy_edge_sink
from store.semantic_index import SemanticIndex
from store.unit_of_work import DatabaseUnitOfWork
from tests.daemon_support import wait_for
from tests.llm_server import LLMServer, Status, held, ok
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_audit_remote_postgres import app_name
from tests.test_extract_cycle import TURNS, llm_settings, load, session
from tests.test_textclaim_failures import waiting_on_a_lock
from worker.cycle import PHASES, Stores, run_cycle


# What a session's commit takes first on PostgreSQL: the commit counter's row.
COMMIT_ROW = "SELECT value FROM rem_counters WHERE name = 'commit' FOR UPDATE"
# What recording a chunk's result waits on there: every write to chunk_results (reads go on).
CHUNK_WRITES = "LOCK TABLE chunk_results IN EXCLUSIVE MODE"
# What recording session s1's failed attempt waits on there: its digest row (reads go on).
S1_DIGEST_ROW = "SELECT 1 FROM session_digests WHERE session_id = 's1' FOR UPDATE"


class Blocker:
    """Another client holding a lock: on PostgreSQL the one ``pg_lock`` takes, on SQLite the write
    lock (``BEGIN IMMEDIATE``)."""

    def __init__(self, graph_path: Path, url: str | None, *, pg_lock: str = COMMIT_ROW) -> None:
        self.graph_path, self.url, self.pg_lock = graph_path, url, pg_lock
        self.release_at: float | None = None  # seconds after hold() that the lock is given up
        self.cut_from: str | None = None  # PostgreSQL server URL: terminate the backend that waits
        self._conn: Any = None
        self.held = 0  # times the lock was taken
        self.cuts = 0  # backends terminated

    @property
    def held_now(self) -> bool:
        return self._conn is not None

    def hold(self) -> None:
        if self.url:
            self._conn = psycopg.connect(self.url)
            self._conn.execute(self.pg_lock)
        else:
            self._conn = sqlite3.connect(self.graph_path, isolation_level=None, check_same_thread=False)
            self._conn.execute("BEGIN IMMEDIATE")
        self.held += 1

    def release(self) -> None:
        if self._conn is not None:
            if self.url:
                self._conn.rollback()
            else:
                self._conn.execute("ROLLBACK")
            self._conn.close()
            self._conn = None

    def _cut_the_waiter(self) -> None:
        assert self.cut_from is not None and self.url is not None
        pid = wait_for(lambda: waiting_on_a_lock(self.cut_from, app_name(self.url)), interval=0.02,
                       what="the session's commit never waited on the held row")[0]
        with psycopg.connect(self.cut_from, autocommit=True) as admin:
            self.cuts += admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        self.release()

    async def before_commit(self) -> None:
        """``extract_session``'s ``commit_turn``: take the lock, then give it up (or cut the
        commit's connection and give it up) from another thread while the commit waits."""
        self.hold()
        if self.cut_from is not None:
            threading.Thread(target=self._cut_the_waiter, daemon=True).start()
        elif self.release_at is not None:
            threading.Timer(self.release_at, self.release).start()


@contextmanager
def stores_on(settings: Settings, *, timeout: float) -> Iterator[Stores]:
    """The graph database opened with ``timeout`` (SQLite's busy timeout, PostgreSQL's lock timeout;
    a worker's is 30 s), with embedded Chroma."""
    url = settings.database_url.get_secret_value() if settings.database_url is not None else None
    db = open_database_at(path=settings.graph_path, url=url, timeout=timeout)
    try:
        yield Stores(db=db, unit=DatabaseUnitOfWork(db), chroma=ChromaStore(settings))
    finally:
        db.close()


@asynccontextmanager
async def extract_env(settings: Settings, stores: Stores) -> AsyncIterator[ExtractEnv]:
    """What the worker's extract phase extracts with (no identity resolver, no claims)."""
    async with open_extractor(settings) as extractor:
        yield ExtractEnv(
            chroma=stores.chroma, unit=stores.unit, queue=lazy_edge_sink(settings, stores.db),
            graph_index=SemanticIndex(stores.db), extractor=extractor, semantic_types=settings.semantic_types,
            budget_tokens=settings.chunk_budget_tokens, max_attempts=settings.max_chunk_attempts,
            retry_base_seconds=settings.chunk_retry_base_seconds, retry_max_seconds=settings.chunk_retry_max_seconds,
            concurrency=4, run_id="run-pgcut", now=datetime.now(UTC),
        )


async def extract_one(settings: Settings, stores: Stores, *, before_commit: Callable[[], Awaitable[None]] | None = None) -> str:
    """Extract session ``s1`` once (the worker's extract phase does the same per session)."""
    record = stores.runstate.get_digests(["s1"])["s1"]
    async with extract_env(settings, stores) as env:
        return await extract_session(record, env, ExtractStats(), anyio.CapacityLimiter(2), commit_turn=before_commit)


def charged(stores: Stores) -> tuple[str, int, int]:
    """Session ``s1``'s state and attempts, and how many chunk rows are not ``ok``."""
    digest = stores.runstate.get_digests(["s1"])["s1"]
    return digest.state, digest.attempts, stores.db.query("SELECT COUNT(*) FROM chunk_results WHERE status <> 'ok'")[0][0]


async def ingested(settings: Settings, stores: Stores, tmp_path: Path, *, more: tuple[dict[str, Any], ...] = ()) -> None:
    await load(settings, stores, tmp_path, [session("s1", TURNS), *more])
    result = await run_cycle(settings, stores=stores, phases=PHASES[:2])  # provider-ready, ingest
    assert result.outcome == "completed", result.message


@pytest.mark.both_backends
async def test_a_session_whose_commit_finds_the_database_locked_past_the_timeout_is_deferred_charged_nothing(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, database_url: str | None
) -> None:
    """Another client holds the lock the session's commit takes first for 1.5 s; the commit gives
    up after its 1 s timeout (SQLite: ``database is locked``; PostgreSQL: ``lock_timeout``). The
    session is deferred (``outage``), its attempts stay 0 and nothing is recorded as failed; the
    next extraction digests it with no model call. Before, the session was charged an attempt (the
    failure was recorded on the next connection, after the lock was given up)."""
    mine = llm_settings(settings.data_dir, llm_server)
    with stores_on(mine, timeout=1.0) as stores:
        await ingested(mine, stores, tmp_path)
        blocker = Blocker(mine.graph_path, database_url)
        blocker.release_at = 1.5
        assert await extract_one(mine, stores, before_commit=blocker.before_commit) == "outage"
        assert blocker.held == 1
        assert charged(stores) == ("undigested", 0, 0)
        paid = llm_server.chat_count
        assert paid == 2
        while blocker.held_now:
            await anyio.sleep(0.05)
        assert await extract_one(mine, stores) == "digested"
        assert llm_server.chat_count == paid  # its answers were stored before the commit: not paid again
        assert charged(stores) == ("digested", 0, 0)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_a_session_whose_commit_connection_the_server_cuts_is_deferred_charged_nothing(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, database_url: str, postgres_server_url: str
) -> None:
    """The server terminates the connection of the session's commit while it waits on a row lock
    (``pg_terminate_backend``: what a restart, a failover or an administrator does). The session is
    deferred, charged nothing, and the next extraction (on a new connection) digests it from its
    stored answers. Before, the failure was recorded on the next connection: one attempt charged."""
    url = f"{database_url}&application_name=pgcut-{uuid.uuid4().hex[:12]}"
    mine = llm_settings(settings.data_dir, llm_server, database_url=url)
    with stores_on(mine, timeout=30.0) as stores:
        await ingested(mine, stores, tmp_path)
        blocker = Blocker(mine.graph_path, url)
        blocker.cut_from = postgres_server_url
        assert await extract_one(mine, stores, before_commit=blocker.before_commit) == "outage"
        # Cut, not stopped at the 30 s lock timeout. The cutting thread counts the cut once
        # pg_terminate_backend answers, which may be after the session saw its connection go.
        wait_for(lambda: blocker.cuts == 1, timeout=10, what="the cut to be counted")
        assert charged(stores) == ("undigested", 0, 0)
        paid = llm_server.chat_count
        assert await extract_one(mine, stores) == "digested"
        assert llm_server.chat_count == paid
        assert charged(stores) == ("digested", 0, 0)


@pytest.mark.both_backends
async def test_a_session_whose_chunk_failures_the_database_refuses_to_record_is_deferred_charged_nothing(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, database_url: str | None
) -> None:
    """The model answers both chunks with HTTP 500 (a request's failure, which is charged), and the
    database is locked past the 1 s timeout just then: recording the chunks' failures is refused,
    in the map's task group (a group of two errors). The session is deferred, charged nothing: no
    attempt, no failed chunk row; once the model answers, the next extraction digests it. Before,
    the session was charged an attempt on the next connection for the database's refusal."""
    mine = llm_settings(settings.data_dir, llm_server)
    with stores_on(mine, timeout=1.0) as stores:
        await ingested(mine, stores, tmp_path)
        answers = held(Status(500, "the model server failed this request"))
        llm_server.default = answers
        blocker = Blocker(mine.graph_path, database_url, pg_lock=CHUNK_WRITES)
        results: list[str] = []

        async def extract() -> None:
            results.append(await extract_one(mine, stores))

        async with anyio.create_task_group() as tg:
            tg.start_soon(extract)
            while llm_server.chat_count < 2:
                await anyio.sleep(0.02)
            blocker.hold()
            # SQLite's connection writes one at a time: the second record waits for the first's
            # 1 s, then its own. Given up after both, before the old code's charge timed out.
            threading.Timer(2.5, blocker.release).start()
            answers.release.set()
        assert results == ["outage"]
        assert charged(stores) == ("undigested", 0, 0)
        while blocker.held_now:
            await anyio.sleep(0.05)
        llm_server.default = ok()
        assert await extract_one(mine, stores) == "digested"
        assert charged(stores) == ("digested", 0, 0)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_a_session_failure_the_database_refuses_to_record_defers_it_and_the_phase_goes_on(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, database_url: str
) -> None:
    """Sessions s1 and s2 are extracted side by side. s1's chunks get HTTP 500 (its own failure),
    recorded with their backoff; recording s1's failed attempt waits on its digest row, which
    another client holds past the 1 s lock timeout. s1 is deferred, charged nothing, and s2, whose
    answers come later, is digested in the same phase. Before, the refusal left the phase: it
    cancelled s2's calls in flight (paid for, lost) and failed the phase."""
    mine = llm_settings(settings.data_dir, llm_server)
    with stores_on(mine, timeout=1.0) as stores:
        stats = await s1_failure_refused_beside_s2(mine, stores, llm_server, tmp_path, database_url, answer_s2_after=2.0)
        assert (stats.sessions_deferred, stats.sessions_digested, stats.sessions_failed) == (1, 1, 0)
        assert charged(stores) == ("undigested", 0, 2)  # its chunks' own failures, backing off
        assert stores.runstate.get_digests(["s2"])["s2"].state == "digested"


async def s1_failure_refused_beside_s2(
    mine: Settings, stores: Stores, llm_server: LLMServer, tmp_path: Path, database_url: str, *, answer_s2_after: float
) -> ExtractStats:
    """Sessions s1 and s2 extracted side by side: s1's chunks get HTTP 500, and recording s1's
    failed attempt waits on its digest row, which another client holds until the phase ends; s2's
    answers come ``answer_s2_after`` seconds in (after the database refused s1's record)."""
    await ingested(mine, stores, tmp_path, more=(session("s2", [t.replace("CHUNK", "OTHER") for t in TURNS]),))
    llm_server.script(*[Status(500, "the model server failed this request")] * 2, match="CHUNK")
    answers = held()
    llm_server.default = answers
    blocker = Blocker(mine.graph_path, database_url, pg_lock=S1_DIGEST_ROW)
    blocker.hold()
    threading.Timer(answer_s2_after, answers.release.set).start()
    try:
        digests = stores.runstate.get_digests(["s1", "s2"])
        async with extract_env(mine, stores) as env:
            return await extract_sessions([digests["s1"], digests["s2"]], env)
    finally:
        blocker.release()
