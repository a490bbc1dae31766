"""audit18, paidstore's code: a held answer stored at the next attempt of its words is an answer of
them, for the other units of the same words in that phase too; the daemon's own loop keeps the held
answers across its cycles; a session charged beside a refused answer names its own failure. Real
cycles (and a real daemon process) on a real SQLite file and PostgreSQL, embedded Chroma, the
loopback chat-completions server counting requests."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from config import Settings
from pipelines.extract.inflight import HeldAnswers
from pipelines.extract.map import ANSWER_UNSTORED
from tests.daemon_support import start_worker, stop, wait_for, worker_env
from tests.llm_server import LLMServer, malformed
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, conversation
from tests.test_textclaim import CHUNK_WORDS, digests, sent_per_chunk
from tests.test_textclaim_failures import charged
from tests.workers_support import accept_answers, extract_phase, graph_database, held_count, ingested, refuse_answers


@pytest.mark.both_backends
async def test_a_held_answer_stored_for_one_session_answers_its_fork_in_the_same_phase(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """A daemon (its cycles share the held answers) extracts ``s`` and its fork ``f`` (the same
    words) while the database refuses every answer: each chunk is asked once, its answer held, both
    sessions deferred. In the next cycle one session's units store the held answers and the other's,
    which wait on them in the phase, reuse them: nothing is asked again. Before: a held answer
    stored was not counted as an answer of its words (its outcome is ``reused``, not ``ok``), so
    the waiters took the words up again and asked the model a second time for each chunk."""
    held = HeldAnswers()
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm, **({"database_url": database_url} if database_url else {}))
        await ingested(settings.data_dir, [conversation("s", HISTORY), conversation("f", HISTORY)], tmp_path,
                       database_url=database_url)
        refuse_answers(config, database_url)
        first = await extract_phase(config, held)
        assert (first["sessions_deferred"], sent_per_chunk(llm), held_count(config, held)) == (2, [1, 1, 1], 3)
        accept_answers(config, database_url)
        second = await extract_phase(config, held)
        assert second["sessions_digested"] == 2, second
        assert sent_per_chunk(llm) == [1, 1, 1]
        assert second["chunks_reused"] == 6
    assert charged(config, database_url) == {"attempts": [0, 0], "failed_chunks": 0}


async def test_the_daemon_stores_in_a_later_cycle_the_answers_the_database_refused(tmp_path: Path, settings: Settings) -> None:
    """paidstore's guarantee through the daemon's own loop (``worker/daemon.py``), which its tests
    stood in for with two ``run_cycle`` calls: a real ``python -m worker`` daemon, a cycle every
    0.3 s, the database refusing every answer (a trigger) until the first cycle's three refusals are
    logged, then taking them. The session is digested with one request per chunk, charged nothing:
    the daemon's later cycle stored the answers it held. With the daemon not passing its
    ``HeldAnswers`` to each cycle, this failed with ``[2, 2, 2]``; since heldonce the answers also
    go through the data dir's file between cycles (tests/test_heldonce.py)."""
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm)
        env = worker_env(settings.data_dir, interval_seconds="0.3", extractor="openai", llm_base_url=llm.url,
                         llm_max_retries="0", chunk_limit_tokens="48", prompt_envelope_tokens="0", llm_concurrency="4")
        log = tmp_path / "daemon.log"
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path)
        refuse_answers(config, None)
        daemon = start_worker(env=env, log_path=log)
        try:
            await anyio.to_thread.run_sync(lambda: wait_for(
                lambda: log.read_text().count("held for the next attempt of its words") >= 3, timeout=60, interval=0.05,
                what="the first cycle's three refused answers"))
            accept_answers(config, None)
            await anyio.to_thread.run_sync(lambda: wait_for(
                lambda: digests(config) == [("s", "digested")], timeout=60, interval=0.05, what="the session digested"))
        finally:
            assert stop(daemon) == 0, log.read_text()[-3000:]
        assert sent_per_chunk(llm) == [1, 1, 1]
    assert charged(config, None) == {"attempts": [0], "failed_chunks": 0}


@pytest.mark.both_backends
async def test_a_session_charged_for_a_failed_chunk_names_it_not_an_answer_the_database_refused(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """The database refuses the first chunk's answer (a trigger on that chunk's ``ok`` row) and the
    model answers the last one malformed, twice (its repair round too): the session is charged one
    attempt for that chunk — the outage alone would charge nothing — and its recorded reason, which
    ``status`` and ``retry`` show, names that chunk and its failure. Before, it named the first
    failed chunk in unit order, the database's refusal (``answer-unstored``), which charges nothing."""
    with LLMServer() as llm:
        llm.script(malformed(), malformed(), match=CHUNK_WORDS[2][0])  # and its repair round
        config = llm_settings(settings.data_dir, llm, **({"database_url": database_url} if database_url else {}))
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path, database_url=database_url)
        refuse_answers(config, database_url, chunk="s:chunk:0")
        phase = await extract_phase(config)
        kinds = phase["failures_by_kind"]
        assert (phase["sessions_failed"], kinds.pop(ANSWER_UNSTORED), len(kinds)) == (1, 1, 1), phase
    assert charged(config, database_url)["attempts"] == [1]
    with graph_database(settings.data_dir, database_url) as db:
        reason = db.query("SELECT defer_reason FROM session_digests WHERE session_id = 's'")[0][0]
    assert f"s:chunk:2: {next(iter(kinds))}" in reason, reason
