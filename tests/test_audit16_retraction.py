"""audit16: a turn retracted (its Chroma row deleted) while a follower extracts its session. Real
``python -m worker --once`` follower (REM_SHARED_EXTRACT), the leader's ingest in this process, one
SQLite file or one PostgreSQL database, embedded Chroma and the loopback model server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from config import Settings
from store.chroma import ChromaStore
from tests.daemon_support import start_worker
from tests.llm_server import LLMServer, held, ok
from tests.test_audit_workers_forget import env_of, follower_waiting_on_the_model, mentions
from tests.test_forget import canonical
from tests.test_forget_bytes import _files_holding
from tests.test_forget_rest import rows_holding
from tests.workers_support import corpus, ingested
from worker.cycle import PHASES, run_cycle

RETRACTED = "w0000-t1"


async def _delete_row(settings: Settings, memory_id: str) -> None:
    (await ChromaStore(settings).memories()).delete(ids=[memory_id])


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
        asyncio.run(_delete_row(base, RETRACTED))
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
