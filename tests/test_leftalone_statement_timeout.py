"""A session whose statement PostgreSQL stops at its ``statement_timeout`` is charged nothing
(leftalone): the wait is on rows every session writes (the commit counter, a shared node, its digest
row) that another writer holds, or a server too loaded to answer in time — the database's state,
not the session's. The session is deferred (``outage``: no attempt, no backoff), said in the log,
and the next extraction digests it from its stored answers. Before, the timeout was charged as the
session's failure (an attempt, then ``undigestible``), or, where the failure itself could not be
recorded, it left the phase. Real PostgreSQL locks, embedded Chroma, the loopback model server."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from config import Settings
from tests.llm_server import LLMServer
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_drainleft_statement_timeout import timing_out
from tests.test_extract_cycle import llm_settings
from tests.test_pgcut_sessions import Blocker, charged, extract_one, ingested, s1_failure_refused_beside_s2, stores_on

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


async def test_a_commit_stopped_at_the_statement_timeout_defers_the_session_charged_nothing(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, database_url: str
) -> None:
    """Another client holds the commit counter's row for 1.5 s (what another worker's long commit
    holds); the session's commit waits on it and the server stops the statement at 500 ms, well
    before the 30 s lock timeout. Deferred, charged nothing; digested next time with no model call."""
    mine = llm_settings(settings.data_dir, llm_server, database_url=timing_out(database_url))
    with stores_on(mine, timeout=30.0) as stores:
        await ingested(mine, stores, tmp_path)
        blocker = Blocker(mine.graph_path, database_url)
        blocker.release_at = 1.5
        assert await extract_one(mine, stores, before_commit=blocker.before_commit) == "outage"
        assert charged(stores) == ("undigested", 0, 0)
        paid = llm_server.chat_count
        while blocker.held_now:
            await anyio.sleep(0.05)
        assert await extract_one(mine, stores) == "digested"
        assert llm_server.chat_count == paid  # its answers were stored before the commit
        assert charged(stores) == ("digested", 0, 0)


async def test_a_session_failure_stopped_at_the_statement_timeout_defers_it_and_the_phase_goes_on(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, database_url: str
) -> None:
    """s1's chunks get HTTP 500 (its own failure, recorded with their backoff); recording s1's failed
    attempt waits on its digest row, held by another client past the 500 ms statement timeout. s1
    is deferred with 0 attempts, and s2, answered later, is digested in the same phase. Before, the
    timeout left ``extract_sessions``: the phase failed and s2's call in flight was lost."""
    mine = llm_settings(settings.data_dir, llm_server, database_url=timing_out(database_url))
    with stores_on(mine, timeout=30.0) as stores:  # the lock timeout far past the statement timeout
        stats = await s1_failure_refused_beside_s2(mine, stores, llm_server, tmp_path, database_url, answer_s2_after=1.5)
        assert (stats.sessions_deferred, stats.sessions_digested, stats.sessions_failed) == (1, 1, 0)
        assert charged(stores) == ("undigested", 0, 2)  # its chunks' own failures, backing off
