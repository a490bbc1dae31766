"""Workers sharing a data dir (``REM_SHARED_EXTRACT``) take from the held answers' file only the
answers of the sessions they claim (leftalone23). audit22 left it: each extract phase took the
whole file at its start, so a worker whose phase began first held the answers of sessions another
worker then claimed — and that worker asked the model again, paying twice for the same words.
In-process cycles on one data dir (the host's lock file makes the second a follower), embedded
Chroma, both engines, the loopback model server counting requests per chunk."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from config import Settings
from pipelines.extract.inflight import HeldAnswers
from tests.llm_server import LLMServer, held, ok
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, conversation
from tests.test_textclaim import sent_per_chunk
from tests.workers_support import accept_answers, extract_phase, held_count, ingested, refuse_answers
from worker.cycle import run_cycle

# A session older than ``s`` (so claimed first), of one chunk whose words no answer is held for.
WAITING = "the WaitingOnlyItem turn asks about something else entirely"


@pytest.mark.both_backends
async def test_a_worker_takes_only_the_held_answers_of_the_sessions_it_claims(
    settings: Settings, tmp_path: Path, database_url: str | None, quick_refusal: None
) -> None:
    """Session ``s``'s three answers are in the file (paid while the database refused them). Worker
    A (one session a phase) claims the older session ``w`` and waits on the model for it; worker B
    then claims ``s``. B stores the three held answers, asking nothing. Before, A had taken them
    all at its phase's start: B asked about each chunk again ([2, 2, 2]), and A wrote them back to
    the file at its end, to be dropped once ``s`` was seen digested."""
    with LLMServer(default=ok()) as llm:
        engine = {"database_url": database_url} if database_url else {}
        config = llm_settings(settings.data_dir, llm, shared_extract=True, **engine)
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path, database_url=database_url)
        refuse_answers(config, database_url)
        await extract_phase(config)
        assert held_count(config, HeldAnswers()) == 3 and sent_per_chunk(llm) == [1, 1, 1]
        accept_answers(config, database_url)
        older = {**conversation("w", [("user", WAITING)]), "createdAt": "2026-10-01T10:00:00Z"}
        (tmp_path / "w").mkdir()
        await ingested(settings.data_dir, [older], tmp_path / "w", database_url=database_url)

        answer_w = held()
        llm.script(answer_w, match="WaitingOnlyItem")
        a_result = []

        async def worker_a() -> None:
            a_result.append(await run_cycle(config.model_copy(update={"batch_limit": 1}), held_answers=HeldAnswers()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(worker_a)
            with anyio.fail_after(30):
                while not any("WaitingOnlyItem" in r.prompt for r in llm.chat_requests):
                    await anyio.sleep(0.02)
            b = await run_cycle(config, held_answers=HeldAnswers())  # a follower: A holds the lock file
            answer_w.release.set()
        assert b.outcome == "completed", b.message
        assert sent_per_chunk(llm) == [1, 1, 1]  # before: [2, 2, 2]
        assert b.phases["extract"]["sessions_digested"] == 1 and b.phases["extract"]["chunks_reused"] == 3, b.phases
        assert a_result[0].outcome == "completed" and a_result[0].phases["extract"]["sessions_digested"] == 1
    assert not config.held_answers_path.exists()
