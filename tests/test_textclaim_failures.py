"""Text claims when things fail (claimerr): the database refusing a claim, the model server out
for every worker, a waiter whose cycle is stopped. Real ``python -m worker --once`` processes with
REM_SHARED_EXTRACT on one SQLite file or one PostgreSQL database, one embedded Chroma, the loopback
model server (tests/test_textclaim.py's set-up: two sessions of the same three chunks, one worker
each)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from config import Settings
from pipelines.extract.map import UnitOutcome, map_units
from pipelines.extract.model import Extractor
from pipelines.extract.units import SourceTurn, WorkUnit, plan_units
from pipelines.extract.workflow import open_extractor
from store.backend import open_database_at
from store.chunks import ChunkResultStore
from store.db import Database
from store.claims import TextClaimStore, worker_owner
from tests.daemon_support import start_worker, wait_for
from tests.llm_server import Held, LLMServer, Status, held
from tests.test_audit_remote_postgres import app_name
from tests.test_forkreuse import HISTORY, NEW_TURNS, conversation, points
from tests.test_textclaim import (
    WAITS,
    digests,
    finished,
    sent_per_chunk,
    start_holder_then_waiter,
    text_claims_left,
    worker_envs,
    worker_owner_of,
)
from tests.workers_support import graph_database, ingested

REFUSED = "text claims refused by the database"


def log_events(log: Path, event: str) -> list[dict[str, Any]]:
    """The JSON log records of ``log`` whose event starts with ``event``. The worker's two streams
    share the file, so a line may hold two records back to back (a CI run saw one): each is read."""
    decoder, records = json.JSONDecoder(), []
    for line in log.read_text().splitlines():
        at = line.find("{")
        while at != -1:
            try:
                record, end = decoder.raw_decode(line, at)
            except ValueError:
                break
            records.append(record)
            at = line.find("{", end)
    return [r for r in records if isinstance(r, dict) and str(r.get("event", "")).startswith(event)]


def charged(settings: Settings, database_url: str | None) -> dict[str, Any]:
    """What the sessions and chunks were charged: attempts per session, failed chunk rows."""
    with graph_database(settings.data_dir, database_url) as db:
        return {"attempts": [r[0] for r in db.query("SELECT attempts FROM session_digests ORDER BY session_id")],
                "failed_chunks": db.query("SELECT COUNT(*) FROM chunk_results WHERE status <> 'ok'")[0][0]}


def claim_rows(settings: Settings) -> list[dict[str, Any]]:
    """The ``text_claims`` rows of the data dir's SQLite file."""
    with graph_database(settings.data_dir, None) as db:
        return [dict(r) for r in db.query("SELECT * FROM text_claims")]


def waiting_on_a_lock(server: str, application: str) -> list[int]:
    """The pids of the backends of ``application`` waiting on a lock."""
    with psycopg.connect(server, autocommit=True) as admin:
        return [r[0] for r in admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (application,)
        ).fetchall()]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_claim_whose_connection_is_cut_extracts_without_it_charges_nothing_and_says_so_once(
    tmp_path: Path, settings: Settings, database_url: str, postgres_server_url: str
) -> None:
    """Worker A holds the three texts' claims (its calls held by the model server). Another client
    locks those rows, so each of worker B's claims waits on the lock, and its connection is cut
    there (``pg_terminate_backend``: a failover, an administrator) three times, once per chunk.
    Each of B's chunks extracts without a claim — paid twice, as if no other worker ran — and
    nothing is lost or charged: both sessions digested with equal points, 0 attempts, no failed
    chunk, no claim row left; B says once that it extracted without claims, not once per chunk."""
    answers = held()
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, [conversation("orig", HISTORY), conversation("copy", HISTORY)], tmp_path,
                             database_url=database_url))
        a = start_worker("--once", env=worker_envs(settings, llm, database_url), log_path=tmp_path / "a.log")
        wait_for(lambda: llm.chat_count >= 3, what="worker A never asked the model")
        b_url = f"{database_url}&application_name=claimerr-{uuid.uuid4().hex[:12]}"
        with psycopg.connect(database_url) as locker:
            assert len(locker.execute("SELECT 1 FROM text_claims FOR UPDATE").fetchall()) == 3
            b = start_worker("--once", env=worker_envs(settings, llm, b_url), log_path=tmp_path / "b.log")
            for cut in range(3):
                pid = wait_for(lambda: waiting_on_a_lock(postgres_server_url, app_name(b_url)), interval=0.05,
                               what=f"worker B's claim {cut + 1} never waited on the locked row")[0]
                with psycopg.connect(postgres_server_url, autocommit=True) as admin:
                    assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
            wait_for(lambda: llm.chat_count >= 6, what="worker B never extracted without its claims")
            locker.rollback()
        answers.release.set()
        finished(a, tmp_path / "a.log")
        finished(b, tmp_path / "b.log")
        assert sent_per_chunk(llm) == [2, 2, 2]
    assert digests(settings) == [("copy", "digested"), ("orig", "digested")]
    assert points(settings, "copy") == points(settings, "orig") != set()
    assert charged(settings, database_url) == {"attempts": [0, 0], "failed_chunks": 0}
    assert text_claims_left(settings, database_url) == 0
    said = log_events(tmp_path / "b.log", REFUSED)
    assert len(said) == 1 and said[0]["chunks"] == 3 and "closed the connection" in said[0]["error"], said


@dataclass(frozen=True)
class ShortTimeoutMap:
    """What a test of the map on a SQLite file with a short busy timeout works with."""

    answers: Held  # the model server's answer, held until the test releases it
    llm: LLMServer
    config: Settings
    db: Database
    units: list[WorkUnit]  # session ``s``'s three one-turn units, each naming its own class

    async def map_into(self, outcomes: list[UnitOutcome], extractor: Extractor, **options: Any) -> None:
        """Map the three units into ``outcomes`` (``options``: more of :func:`map_units`'s)."""
        outcomes.extend(await map_units(
            self.units, extractor=extractor, store=ChunkResultStore(self.db), semantic_types=self.config.semantic_types,
            limiter=anyio.CapacityLimiter(4), now=datetime.now(UTC), run_id="r", retry_base_seconds=60,
            retry_max_seconds=600, **options))


@contextmanager
def map_on_a_short_timeout(settings: Settings, tmp_path: Path) -> Iterator[ShortTimeoutMap]:
    """The loopback model server (its answers held), the extractor's settings, and a real SQLite file
    opened with a 0.3 s busy timeout (a worker's is 30 s), for session ``s``'s three units."""
    answers = held()
    with LLMServer(default=answers) as llm:
        config = settings.model_copy(update={"extractor": "openai", "llm_base_url": llm.url, "llm_max_retries": 0})
        db = open_database_at(path=tmp_path / "graph.sqlite3", url=None, timeout=0.3)
        try:
            units = plan_units("s", [SourceTurn(f"m{i}", f"Turn {i} names the {word}.", "user")
                                     for i, word in enumerate(("PartAItem", "PartBItem", "PartCItem"))], budget_tokens=16)
            assert len(units) == 3
            yield ShortTimeoutMap(answers, llm, config, db, units)
        finally:
            db.close()


async def test_a_claim_sqlite_refuses_past_its_busy_timeout_extracts_without_it_and_charges_nothing(
    tmp_path: Path, settings: Settings
) -> None:
    """The map itself on a real SQLite file whose busy timeout is short (0.3 s; a worker's is 30 s):
    another worker holds the three texts' claims, so each unit waits; then another connection holds
    the write lock (``BEGIN IMMEDIATE``) past the timeout. Each unit's next claim is refused
    (``database is locked``): it extracts without one and says so in its outcome; once the lock is
    gone its answer is stored ``ok`` — nothing lost, no failed row, no failure counted, no row of this
    worker left in ``text_claims``."""
    with map_on_a_short_timeout(settings, tmp_path) as case:
        async with open_extractor(case.config) as extractor:
            fingerprint = extractor.fingerprint
            elsewhere = TextClaimStore(case.db, owner="elsewhere:1:x", lease_seconds=60)
            assert {elsewhere.claim(fingerprint, u.text_hash) for u in case.units} == {"mine"}
            outcomes: list[UnitOutcome] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(case.map_into, outcomes, extractor,
                                      text_claims=TextClaimStore(case.db, owner=worker_owner(), lease_seconds=60)))
                await anyio.sleep(0.3)  # the units poll the claims elsewhere holds
                locker = sqlite3.connect(tmp_path / "graph.sqlite3", isolation_level=None)
                locker.execute("BEGIN IMMEDIATE")
                try:
                    while case.llm.chat_count < 3:
                        await anyio.sleep(0.05)
                finally:
                    locker.execute("ROLLBACK")
                    locker.close()
                case.answers.release.set()
        assert [o.status for o in outcomes] == ["ok"] * 3
        assert all("locked" in (o.claim_error or "") for o in outcomes), [o.claim_error for o in outcomes]
        assert [tuple(r) for r in case.db.query("SELECT status, attempts FROM chunk_results")] == [("ok", 1)] * 3  # one call each
        assert [tuple(r) for r in case.db.query("SELECT owner, COUNT(*) FROM text_claims GROUP BY owner")] == [("elsewhere:1:x", 3)]


def test_a_waiter_whose_cycle_is_stopped_leaves_at_once_charged_nothing(tmp_path: Path, settings: Settings) -> None:
    """Worker B waits for worker A's answers (held by the model server) when B gets SIGTERM: B has
    nothing of its own to finish, so it leaves within a poll (before: it waited for A's calls, up to
    the grace time, 24 s here), having made no call, charged nothing and holding no claim. A then
    digests its session, and a third worker digests B's from A's answers with no call."""
    answers = held()
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, [conversation("orig", HISTORY), conversation("copy", HISTORY)], tmp_path))
        env = worker_envs(settings, llm, None)
        a, b = start_holder_then_waiter(tmp_path, env, llm)
        assert WAITS in (tmp_path / "b.log").read_text()
        b.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        finished(b, tmp_path / "b.log")
        assert time.monotonic() - stopped < 10, "the waiter held its stop up"
        assert llm.chat_count == 3  # A's only
        assert charged(settings, None) == {"attempts": [0, 0], "failed_chunks": 0}
        assert {row["owner"].rsplit(":", 1)[0] for row in claim_rows(settings)} == {worker_owner_of(a)[:-1]}
        assert log_events(tmp_path / "b.log", "session deferred: no call made")[0]["reason"] == "the cycle is stopping"
        answers.release.set()
        finished(a, tmp_path / "a.log")
        c = start_worker("--once", env=env, log_path=tmp_path / "c.log")
        finished(c, tmp_path / "c.log")
        assert llm.chat_count == 3
    assert digests(settings) == [("copy", "digested"), ("orig", "digested")]
    assert points(settings, "copy") == points(settings, "orig") != set()
    assert text_claims_left(settings, None) == 0


@pytest.mark.parametrize("failure", ["500", "503", "refused"])
def test_what_a_model_server_failure_costs_two_workers_with_the_same_words(
    tmp_path: Path, settings: Settings, failure: str
) -> None:
    """Measured (RELIABILITY "claimerr"): worker A's three calls fail — HTTP 500 (one request's
    failure), 503 (an outage), or 503 and then the server gone, so that worker B's connections are
    refused (an outage). A lands its claims without an answer and B, which waited, asks the server
    itself: each worker tries each text once (6 tries in all, not 3), and nothing is lost or left:
    no claim row, both sessions undigested. An outage charges no session and records each worker's
    chunk failures with their backoff — but a request that never reached the server (B's refused
    connections) records none (leftalone23: before, B's three were recorded too, 6 rows); a 500
    charges each its attempt."""
    answers = held(Status(int(failure) if failure.isdigit() else 503, "model server failing"))
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, [conversation("orig", HISTORY), conversation("copy", HISTORY)], tmp_path))
        env = worker_envs(settings, llm, None, chunk_retry_base_seconds=60)
        a, b = start_holder_then_waiter(tmp_path, env, llm)
        if failure == "refused":
            llm.stop()  # A's held answers go out (503) as the server stops listening
        answers.release.set()
        finished(a, tmp_path / "a.log")
        finished(b, tmp_path / "b.log")
        tries = [len(log_events(tmp_path / f"{w}.log", "chunk extraction failed")) for w in "ab"]
        assert tries == [3, 3] and llm.chat_count == (3 if failure == "refused" else 6)
        assert {e["kind"] for e in log_events(tmp_path / "b.log", "chunk extraction failed")} == {"provider-error"}
    assert sorted(state for _, state in digests(settings)) == ["undigested", "undigested"]
    assert charged(settings, None) == {"attempts": [1, 1] if failure == "500" else [0, 0],
                                       "failed_chunks": 3 if failure == "refused" else 6}
    assert text_claims_left(settings, None) == 0


def test_a_waiter_cancelled_at_the_grace_time_leaves_no_row_and_charges_nothing(tmp_path: Path, settings: Settings) -> None:
    """Worker B waits for worker A's three answers and has a call of its own in flight (its session
    has a fourth chunk), both held by the model server, when it gets SIGTERM with a 1 s grace
    time: its waiters leave at the stop, its own call is cancelled when the grace time runs out
    (0.8 s), and B exits with its claim on the fourth chunk deleted, nothing recorded of its session
    and nothing charged. A third worker later digests B's session from A's answers and one call."""
    answers = held()
    with LLMServer(default=answers) as llm:
        sessions = [conversation("a-first", HISTORY), conversation("b-more", HISTORY + NEW_TURNS)]
        asyncio.run(ingested(settings.data_dir, sessions, tmp_path))
        env = worker_envs(settings, llm, None, grace_seconds=1)
        a = start_worker("--once", env=env, log_path=tmp_path / "a.log")
        wait_for(lambda: llm.chat_count >= 3, what="worker A never asked the model")
        b = start_worker("--once", env=env, log_path=tmp_path / "b.log")
        wait_for(lambda: WAITS in (tmp_path / "b.log").read_text() and llm.chat_count >= 4,
                 what="worker B never waited and asked about its own chunk")
        assert len(claim_rows(settings)) == 4
        b.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        finished(b, tmp_path / "b.log")
        assert time.monotonic() - stopped < 10, "the waiter held its stop up"
        assert llm.chat_count == 4
        assert {row["owner"].rsplit(":", 1)[0] for row in claim_rows(settings)} == {worker_owner_of(a)[:-1]}
        assert charged(settings, None) == {"attempts": [0, 0], "failed_chunks": 0}
        answers.release.set()
        finished(a, tmp_path / "a.log")
        c = start_worker("--once", env=env, log_path=tmp_path / "c.log")
        finished(c, tmp_path / "c.log")
        assert llm.chat_count == 5  # B's fourth chunk; its first three reuse A's answers
    assert digests(settings) == [("a-first", "digested"), ("b-more", "digested")]
    assert text_claims_left(settings, None) == 0
