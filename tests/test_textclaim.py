"""Two workers never pay the model twice for the same words (textclaim): a worker about to ask the
model about a chunk's words claims them in the database (``text_claims``); another worker with the
same words in another session (a fork and its original, duplicates) waits for that answer and
reuses it (forkreuse's way) instead of asking again — and extracts them itself when the holder dies
or stalls past its lease. Real ``python -m worker --once`` processes with REM_SHARED_EXTRACT on one
SQLite file or one PostgreSQL database, one embedded Chroma, the loopback model server holding its
answers until both workers are mid-call."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.chunks import ChunkResultStore
from store.claims import TextClaimStore, host_identity, lease_holders
from tests.conftest import run_cli
from tests.daemon_support import start_worker, wait_for, worker_env
from tests.llm_server import LLMServer, Status, held
from tests.test_forkreuse import HISTORY, conversation, points
from tests.workers_support import graph_database, ingested, worker_settings

LEASE = 2.0
WAITS = "chunk waits for another worker's extraction of its words"
# The three chunks of HISTORY (two turns each, llm_settings' 48-token budget): one CamelCase word per turn.
CHUNK_WORDS = (("PartAItem", "PartBItem"), ("PartCItem", "PartDItem"), ("PartEItem", "PartFItem"))



def worker_envs(settings: Settings, llm: LLMServer, database_url: str | None, **overrides: object) -> dict[str, str]:
    """Each worker takes one session (``REM_BATCH_LIMIT=1``), so the two copies go to two workers."""
    values = worker_settings(llm.url, chunk_limit_tokens=48, prompt_envelope_tokens=0, batch_limit=1, log_level="info",
                             **overrides)
    return worker_env(settings.data_dir, **values, **({"database_url": database_url} if database_url else {}))


def sent_per_chunk(llm: LLMServer) -> list[int]:
    """How many requests asked about each chunk of HISTORY."""
    return [sum(first in r.prompt for r in llm.chat_requests) for first, _ in CHUNK_WORDS]


def digests(settings: Settings) -> list[tuple[str, str]]:
    db = open_database(settings, readonly=True)
    try:
        return [tuple(r) for r in db.query("SELECT session_id, state FROM session_digests ORDER BY session_id")]
    finally:
        db.close()


def text_claims_left(settings: Settings, database_url: str | None) -> int:
    with graph_database(settings.data_dir, database_url) as db:
        return db.query("SELECT COUNT(*) FROM text_claims")[0][0]


def worker_owner_of(proc: subprocess.Popen[bytes]) -> str:
    """The lease owner of a worker process of this host, but its nonce (``host:pid:``)."""
    return f"{host_identity()}:{proc.pid}:"


def finished(proc: subprocess.Popen[bytes], log: Path) -> None:
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]


def start_holder_then_waiter(tmp_path: Path, env: dict[str, str], llm: LLMServer) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """Worker A asks the model about its session's three chunks (held); then worker B takes the
    other session, whose words are the same, and waits for A's answers — or, before textclaim, asks
    the model about them too."""
    a = start_worker("--once", env=env, log_path=tmp_path / "a.log")
    wait_for(lambda: llm.chat_count >= 3, what="worker A never asked the model")
    b = start_worker("--once", env=env, log_path=tmp_path / "b.log")
    wait_for(lambda: WAITS in (tmp_path / "b.log").read_text() or llm.chat_count >= 6,
             what="worker B neither waited nor asked the model")
    return a, b


@pytest.mark.both_backends
def test_two_workers_with_the_same_words_pay_each_chunk_once(tmp_path: Path, settings: Settings, database_url: str | None) -> None:
    """Before textclaim: 6 requests (each worker paid for the 3 chunks its session shares)."""
    answers = held()
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, [conversation("orig", HISTORY), conversation("copy", HISTORY)], tmp_path,
                             database_url=database_url))
        a, b = start_holder_then_waiter(tmp_path, worker_envs(settings, llm, database_url), llm)
        status = run_cli("status", env={"REM_DATA_DIR": str(settings.data_dir),
                                        **({"REM_DATABASE_URL": database_url} if database_url else {})})
        assert f"text claims: {worker_owner_of(a)}" in status.stdout and "about 3 chunks' words" in status.stdout, status.stdout
        answers.release.set()
        finished(a, tmp_path / "a.log")
        finished(b, tmp_path / "b.log")
        assert sent_per_chunk(llm) == [1, 1, 1] and llm.chat_count == 3, (tmp_path / "b.log").read_text()[-3000:]
    assert digests(settings) == [("copy", "digested"), ("orig", "digested")]
    assert points(settings, "copy") == points(settings, "orig") != set()
    assert text_claims_left(settings, database_url) == 0  # deleted as each call landed


@pytest.mark.both_backends
def test_a_killed_holders_words_are_extracted_by_the_waiter_and_nothing_is_lost(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """Worker A is killed (SIGKILL) while the model holds its three calls: worker B, waiting on
    them, finds A's process gone, takes the claims over and asks the model itself; a third worker
    takes A's session over and reuses B's answers."""
    answers = held()
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, [conversation("orig", HISTORY), conversation("copy", HISTORY)], tmp_path,
                             database_url=database_url))
        env = worker_envs(settings, llm, database_url)
        a, b = start_holder_then_waiter(tmp_path, env, llm)
        a.kill()
        a.wait()
        wait_for(lambda: llm.chat_count >= 6, what="worker B never took the killed worker's texts over")
        answers.release.set()
        finished(b, tmp_path / "b.log")
        assert sent_per_chunk(llm) == [2, 2, 2]  # A's, lost with it, and B's
        c = start_worker("--once", env=env, log_path=tmp_path / "c.log")
        finished(c, tmp_path / "c.log")
        assert llm.chat_count == 6  # C reuses B's answers for A's session
    assert digests(settings) == [("copy", "digested"), ("orig", "digested")]
    assert points(settings, "copy") == points(settings, "orig") != set()
    assert text_claims_left(settings, database_url) == 0


def test_a_holder_whose_request_failed_leaves_the_words_to_the_waiter(tmp_path: Path, settings: Settings) -> None:
    """Worker A's request for the first chunk fails (a 500): A lands its claim without an answer,
    and worker B, waiting on it, asks the model itself (the failure may be that request's alone)
    and digests its session; A's session, failed this cycle, reuses B's answer at its retry."""
    answers, failure = held(), held(Status(500, "model hiccup"))
    with LLMServer(default=answers) as llm:
        llm.script(failure, match=CHUNK_WORDS[0][0])
        asyncio.run(ingested(settings.data_dir, [conversation("orig", HISTORY), conversation("copy", HISTORY)], tmp_path))
        env = worker_envs(settings, llm, None, chunk_retry_base_seconds=0.001, chunk_retry_max_seconds=0.001)
        a, b = start_holder_then_waiter(tmp_path, env, llm)
        answers.release.set()
        failure.release.set()
        finished(a, tmp_path / "a.log")
        finished(b, tmp_path / "b.log")
        assert sent_per_chunk(llm) == [2, 1, 1] and llm.chat_count == 4
        assert sorted(state for _, state in digests(settings)) == ["digested", "undigested"]
        c = start_worker("--once", env=env, log_path=tmp_path / "c.log")
        finished(c, tmp_path / "c.log")
        assert llm.chat_count == 4
    assert digests(settings) == [("copy", "digested"), ("orig", "digested")]
    assert points(settings, "copy") == points(settings, "orig") != set()


def test_a_stalled_holders_words_are_extracted_by_the_waiter_once_its_lease_runs_out(
    tmp_path: Path, settings: Settings
) -> None:
    """Worker A is paused (SIGSTOP: a frozen VM) while the model holds its calls: its process is
    alive, so worker B waits until A's leases run out, then asks the model itself and digests its
    session. A resumes, lands its late answers and digests its own."""
    answers = held()
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, [conversation("orig", HISTORY), conversation("copy", HISTORY)], tmp_path))
        a, b = start_holder_then_waiter(tmp_path, worker_envs(settings, llm, None, lease_timeout_seconds=LEASE), llm)
        os.kill(a.pid, signal.SIGSTOP)
        try:
            paused = time.monotonic()
            wait_for(lambda: llm.chat_count >= 6, what="worker B never took the stalled worker's texts over")
            assert time.monotonic() - paused > LEASE / 2  # not before A's lease (renewed just before the pause) ran out
            answers.release.set()
            finished(b, tmp_path / "b.log")
        finally:
            os.kill(a.pid, signal.SIGCONT)
        finished(a, tmp_path / "a.log")
        assert sent_per_chunk(llm) == [2, 2, 2]
    assert digests(settings) == [("copy", "digested"), ("orig", "digested")]
    assert points(settings, "copy") == points(settings, "orig") != set()


@pytest.mark.both_backends
def test_a_text_claim_is_refused_while_held_taken_over_when_expired_and_answered_once_stored(
    settings: Settings, database_url: str | None
) -> None:
    """The store alone: two owners on one database, a clock the test moves."""
    moment = [datetime(2026, 12, 1, tzinfo=UTC)]
    db = open_database(settings)
    try:
        mine, theirs = (TextClaimStore(db, owner=f"elsewhere:{pid}:x", lease_seconds=10, clock=lambda: moment[0])
                        for pid in (1, 2))
        assert mine.claim("fp", "t1") == "mine"
        assert theirs.claim("fp", "t1") == "held" and theirs.claim("fp2", "t1") == "mine"
        # `rem-cycle status` (`leases.texts` in --json): who asks the model about how many texts.
        assert [(held["owner"], held["texts"]) for held in lease_holders(db)["texts"]] == [
            ("elsewhere:1:x", 1), ("elsewhere:2:x", 1)]
        mine.land("fp", "t1")
        assert theirs.claim("fp", "t1") == "mine"
        moment[0] += timedelta(seconds=11)  # their lease ran out (no heartbeat)
        assert mine.claim("fp", "t1") == "mine"
        assert mine.heartbeat() == 1 and theirs.sweep() == 1  # theirs: fp2's, its own; mine is live
        moment[0] += timedelta(seconds=11)
        assert theirs.sweep() == 1  # mine, expired: a crashed worker's rows go without reading any history
        gone = subprocess.Popen(["true"])
        gone.wait()  # a process of this host that no longer exists: its live rows go at once
        dead = TextClaimStore(db, owner=f"{host_identity()}:{gone.pid}:x", lease_seconds=10, clock=lambda: moment[0])
        assert dead.claim("fp", "t2") == "mine" and theirs.claim("fp", "t2") == "mine"
        assert dead.claim("fp", "t3") == "mine" and theirs.sweep() == 2  # t2 is theirs now: its own, and t3
        ChunkResultStore(db).record_ok(session_id="s", chunk_id="s:chunk:0", content_hash="c1", text_hash="t1",
                                       memory_ids=["m1"], fingerprint="fp", tokens_in=1, tokens_out=1, latency_ms=1.0,
                                       payload={}, run_id=None)
        assert theirs.claim("fp", "t1") == "answered"
        assert db.query("SELECT COUNT(*) FROM text_claims")[0][0] == 0
    finally:
        db.close()
