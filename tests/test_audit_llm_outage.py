"""Audit of the model path through outages: a model server that goes away in the middle of cycles
never makes a session undigestible for it (real cycles, embedded Chroma, the SQLite graph, the
loopback chat-completions server of tests/llm_server.py killed mid-cycle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from config import Settings, load_settings
from pipelines.importer import import_sessions
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, Status, held, ok, rate_limited, server_error, slow
from worker.cycle import PHASES, Stores, open_stores, run_cycle

SESSIONS = [f"s{i}" for i in range(5)]


def session(sid: str) -> dict[str, Any]:
    return {
        "sessionId": sid, "title": sid, "createdAt": f"2026-11-01T10:0{sid[1]}:00Z", "noSummary": True,
        "turns": [{"id": f"{sid}-t0", "role": "user", "text": f"In {sid} the LazyEdgeQueue feeds the GraphStore."}],
    }


def expire_backoff(stores: Stores) -> None:
    stores.db.conn.execute("UPDATE chunk_results SET next_attempt_at = '2000-01-01T00:00:00.000Z' WHERE status = 'failed'")


async def cycle_with_an_outage(settings: Settings, stores: Stores, port: int) -> dict[str, Any]:
    """One cycle against a server on ``port`` that dies while answering its second request: the
    first session commits, the second's answer is cut off, the others' connections are refused."""
    server = LLMServer(port=port, default=held()).start()  # held until the kill cuts it …
    server.script(ok())  # … but the first answer

    async def kill_at_the_second_request() -> None:
        while server.chat_count < 2:
            await anyio.sleep(0.01)
        await anyio.to_thread.run_sync(server.kill)

    async with anyio.create_task_group() as tg:
        tg.start_soon(kill_at_the_second_request)
        result = await run_cycle(settings, stores=stores)
    assert result.outcome == "completed", result.message
    return result.phases["extract"]


async def test_a_server_dying_mid_cycle_again_and_again_never_makes_a_session_undigestible(
    settings: Settings, tmp_path: Path
) -> None:
    """Found by the audit: every session a cycle reached after the model server went away was
    charged a failed attempt, though no request of it left the worker (connection refused). Two
    such cycles (`REM_MAX_CHUNK_ATTEMPTS=2`) made the sessions never sent to the model
    `undigestible`: once the server was back they were not digested until an operator ran
    `rem-cycle retry`. A session whose chunks could not reach the server is deferred, charged
    nothing, and no try of its chunks is recorded (leftalone23: before, each was, with its
    backoff); only an answer cut off in flight charges its session."""
    with LLMServer() as probe:
        port = probe.port
    with LLMServer(port=port) as up:  # provider-ready asks the server at the start of each cycle
        mine = load_settings(data_dir=settings.data_dir, extractor="openai", llm_base_url=up.url, llm_max_retries=0,
                             llm_concurrency=1, max_chunk_attempts=2, llm_timeout_seconds=5)
    stores = await open_stores(mine)
    try:
        path = write_sessions(tmp_path / "in.jsonl", [session(s) for s in SESSIONS])
        await import_sessions(path, chroma=stores.chroma, memory_collection=mine.memory_collection,
                              summary_collection=mine.session_collection)
        for _ in range(2):
            extract = await cycle_with_an_outage(mine, stores, port)
            assert extract["sessions_digested"] == 1, extract
            failing = stores.runstate.failing_chunks()
            assert not [c for c in failing if "ConnectError" in c["error"]], failing  # a refused request is no try
            undigested = {s for s, d in stores.runstate.get_digests(SESSIONS).items() if d.state == "undigested"}
            refused = undigested - {c["session_id"] for c in failing}
            assert refused, failing
            digests = stores.runstate.get_digests(sorted(refused))
            assert {(d.state, d.attempts) for d in digests.values()} <= {("undigested", 0), ("undigested", 1)}, digests
            assert extract["sessions_undigestible"] == 0, extract
            expire_backoff(stores)

        with LLMServer(port=port):
            healed = await run_cycle(mine, stores=stores)
        assert healed.outcome == "completed", healed.message
        assert stores.runstate.digest_counts() == {"undigested": 0, "digested": len(SESSIONS), "undigestible": 0}
        assert stores.runstate.failing_chunks() == []
    finally:
        stores.close()


QUOTA = Status(429, '{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}')
REFUSALS = {"quota-429": QUOTA, "rate-limit-429": rate_limited(retry_after="0"), "bad-gateway-502": server_error(502),
            "unavailable-503": server_error(503),
            # Ollama's answer for a model not pulled (REM_LLM_MODEL mistyped): the model list still answers
            "model-not-found-404": Status(404, '{"error": "model \\"llama3.2\\" not found, try pulling it first"}'),
            "unauthorized-401": Status(401, '{"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}')}


@pytest.mark.parametrize("refusal", list(REFUSALS.values()), ids=list(REFUSALS))
async def test_a_server_refusing_all_work_for_cycles_never_makes_a_session_undigestible(
    settings: Settings, tmp_path: Path, refusal: Status
) -> None:
    """Found by the audit: a provider whose quota ran out (`429 insufficient_quota`), a gateway
    whose model is down (502, 503), a server without the configured model (404) or refusing the
    key (401) refuses every request without doing any work; each cycle charged every session an
    attempt, so after `REM_MAX_CHUNK_ATTEMPTS` cycles the whole backlog
    was `undigestible` and stayed so when the quota came back. Such a refusal is an outage: its
    chunks are recorded (`provider-error`, with their backoff; a 404, no endpoint or model there,
    records none) and the sessions deferred, and
    they digest once the server works again, without `rem-cycle retry`."""
    with LLMServer(default=refusal) as server:
        mine = load_settings(data_dir=settings.data_dir, extractor="openai", llm_base_url=server.url, llm_max_retries=0,
                             max_chunk_attempts=2)
        stores = await open_stores(mine)
        try:
            path = write_sessions(tmp_path / "in.jsonl", [session(s) for s in SESSIONS])
            await import_sessions(path, chroma=stores.chroma, memory_collection=mine.memory_collection,
                                  summary_collection=mine.session_collection)
            for _ in range(3):
                refused = await run_cycle(mine, stores=stores)
                extract = refused.phases["extract"]
                assert extract["failures_by_kind"] == {"provider-error": len(SESSIONS)}, extract
                assert (extract["sessions_deferred"], extract["sessions_undigestible"]) == (len(SESSIONS), 0), extract
                # A 404 (no model or no endpoint there: configuration) is no try of a chunk, no row (leftalone25).
                assert {c["error_kind"] for c in stores.runstate.failing_chunks()} == (set() if refusal.status == 404 else {"provider-error"})
                expire_backoff(stores)
            assert stores.runstate.digest_counts()["undigested"] == len(SESSIONS)

            server.default = slow(0)
            healed = await run_cycle(mine, stores=stores)
            assert healed.phases["extract"]["sessions_digested"] == len(SESSIONS), healed.phases["extract"]
            assert stores.runstate.failing_chunks() == []
        finally:
            stores.close()


async def test_sessions_backing_off_do_not_hold_up_the_sessions_behind_them(settings: Settings, tmp_path: Path) -> None:
    """Found by the audit: a session whose chunks back off makes no call, but it was claimed again
    by every cycle and counted against `REM_BATCH_LIMIT`: with the oldest `REM_BATCH_LIMIT`
    sessions backing off (an outage on a backlog leaves exactly that, for up to
    `REM_CHUNK_RETRY_MAX_SECONDS`, 6 h), no newer session was extracted at all. A deferred session
    takes no place in the batch."""
    with LLMServer() as server:
        server.script(*[server_error(500)] * 4, match="In s0 ")
        server.script(*[server_error(500)] * 4, match="In s1 ")
        mine = load_settings(data_dir=settings.data_dir, extractor="openai", llm_base_url=server.url, llm_max_retries=0,
                             batch_limit=2, llm_concurrency=1)
        stores = await open_stores(mine)
        try:
            path = write_sessions(tmp_path / "in.jsonl", [session(s) for s in SESSIONS[:4]])
            await import_sessions(path, chroma=stores.chroma, memory_collection=mine.memory_collection,
                                  summary_collection=mine.session_collection)
            first = (await run_cycle(mine, stores=stores)).phases["extract"]
            assert (first["sessions_failed"], first["sessions_digested"]) == (2, 0), first  # s0, s1: the batch
            calls = server.chat_count

            second = (await run_cycle(mine, stores=stores)).phases["extract"]
            assert second["sessions_queued"] == 2, second  # s0, s1 still back off: not claimed (test_backoff_claims)
            assert second["sessions_digested"] == 2, second  # s2, s3 are not held up behind them
            assert server.chat_count == calls + 2
            digests = stores.runstate.get_digests()
            assert {s: d.state for s, d in digests.items()} == {
                "s0": "undigested", "s1": "undigested", "s2": "digested", "s3": "digested"}
        finally:
            stores.close()


async def test_during_an_outage_a_cycle_asks_for_no_more_than_its_batch(settings: Settings, tmp_path: Path) -> None:
    """A session deferred by an outage made its calls (each refused, after the transport's retries
    and `Retry-After` waits): it takes its place in `REM_BATCH_LIMIT`, so a cycle in an outage
    tries a batch of the backlog, not all of it; only a session that made no call takes none."""
    with LLMServer(default=QUOTA) as server:
        mine = load_settings(data_dir=settings.data_dir, extractor="openai", llm_base_url=server.url, llm_max_retries=0,
                             batch_limit=2, llm_concurrency=1)
        stores = await open_stores(mine)
        try:
            path = write_sessions(tmp_path / "in.jsonl", [session(s) for s in SESSIONS])
            await import_sessions(path, chroma=stores.chroma, memory_collection=mine.memory_collection,
                                  summary_collection=mine.session_collection)
            ingest_all = load_settings(data_dir=settings.data_dir, extractor="openai", llm_base_url=server.url)
            await run_cycle(ingest_all, stores=stores, phases=tuple(p for p in PHASES if p[0] in ("provider-ready", "ingest")))
            assert stores.runstate.digest_counts()["undigested"] == len(SESSIONS)
            extract = (await run_cycle(mine, stores=stores)).phases["extract"]
            assert server.chat_count == 2 and extract["sessions_deferred"] == 2, extract
        finally:
            stores.close()
