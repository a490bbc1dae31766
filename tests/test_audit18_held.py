"""audit18: a held answer (paidstore) stored at the next attempt of its words is an answer of them,
for the other units of the same words in that phase too. Real cycles on a real SQLite file and
PostgreSQL, embedded Chroma, the loopback chat-completions server counting requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from pipelines.extract.inflight import HeldAnswers
from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, conversation
from tests.test_paidstore import accept_answers, extract_phase, refuse_answers
from tests.test_textclaim import sent_per_chunk
from tests.test_textclaim_failures import charged
from tests.workers_support import ingested


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
        assert (first["sessions_deferred"], sent_per_chunk(llm), len(held)) == (2, [1, 1, 1], 3)
        accept_answers(config, database_url)
        second = await extract_phase(config, held)
        assert second["sessions_digested"] == 2, second
        assert sent_per_chunk(llm) == [1, 1, 1]
        assert second["chunks_reused"] == 6
    assert charged(config, database_url) == {"attempts": [0, 0], "failed_chunks": 0}
