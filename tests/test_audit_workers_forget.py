"""Adversarial audit: the graph changes under a follower while it waits for the model — an operator
forgets a session it extracts, or the leader ingests new turns of it. Real ``python -m worker --once``
followers (REM_SHARED_EXTRACT; the test holds the host's cycle lock file while one starts, so it
follows) or a cycle in this process, the real ``forget`` command and ingest, one SQLite file or one
PostgreSQL database (``both_backends``), embedded Chroma and the loopback model server."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import anyio
import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.confined import exclusive_lock
from tests.conftest import run_cli, write_sessions
from tests.daemon_support import start_worker, wait_for, worker_env
from tests.llm_server import LLMServer, Status, held, ok
from tests.test_extract_cycle import llm_settings
from tests.test_forget import canonical
from tests.test_forget_rest import rows_holding
from tests.test_forkreuse import conversation
from tests.workers_support import corpus, graph_database, ingested, worker_settings
from worker.cycle import PHASES, run_cycle
from worker.knowledge import forget


def follower_waiting_on_the_model(settings: Settings, llm: LLMServer, env: dict[str, str], log: Path, *, requests: int) -> Any:
    """Start a ``--once`` worker as a follower (this process holds the host's lock file until the
    worker has sent ``requests`` chat requests: it has claimed its sessions and waits for the model)."""
    with exclusive_lock(settings.lock_path, root=settings.data_dir) as locked:
        assert locked
        worker = start_worker("--once", env=env, log_path=log)
        wait_for(lambda: llm.chat_count >= requests, what=f"the follower never asked the model: {log.read_text()[-2000:]}")
    return worker


def mentions(dump: dict[str, list[tuple[Any, ...]]], text: str) -> list[tuple[Any, ...]]:
    return [row for rows in dump.values() for row in rows if any(isinstance(v, str) and text in v for v in row)]


def env_of(settings: Settings, llm: LLMServer, database_url: str | None) -> dict[str, str]:
    return worker_env(settings.data_dir, **worker_settings(llm.url), **({"database_url": database_url} if database_url else {}))


def forget_beside_a_follower(tmp_path: Path, settings: Settings, database_url: str | None, *, sessions: int,
                             forget: tuple[str, ...], then_once: bool = False) -> None:
    """Ingest ``sessions`` sessions, start a follower on them and, while it waits for the model,
    run ``rem-cycle forget FORGET``; wait for the follower (and, ``then_once``, one more worker)."""
    answers = held()  # the follower's, until the test has acted beside it, however slowly things start
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, corpus(sessions), tmp_path, database_url=database_url))
        env = env_of(settings, llm, database_url)
        worker = follower_waiting_on_the_model(settings, llm, env, tmp_path / "w.log", requests=sessions)
        forgot = run_cli("forget", *forget, env={k: v for k, v in env.items() if k.startswith("REM_")})
        assert forgot.returncode == 0, forgot.stdout + forgot.stderr
        llm.default = ok()  # later requests are answered at once …
        answers.release.set()  # … and so now is what the follower waits for
        assert worker.wait(timeout=120) == 0, (tmp_path / "w.log").read_text()[-3000:]
        if then_once:
            again = start_worker("--once", env=env, log_path=tmp_path / "again.log")
            assert again.wait(timeout=120) == 0, (tmp_path / "again.log").read_text()[-3000:]


@pytest.mark.both_backends
def test_a_session_forgotten_while_a_follower_extracts_it_stays_forgotten(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """``forget --session w0001`` runs while a follower waits for the model on it: the follower's
    commit of w0001 must roll back. Before, it went through (its claim was still its own) and wrote
    the forgotten session's points, claims and nodes back into the graph."""
    forget_beside_a_follower(tmp_path, settings, database_url, sessions=3, forget=("--session", "w0001"))
    dump = canonical(settings)
    assert mentions(dump, "w0001") == []
    assert mentions(dump, "w0000") and mentions(dump, "w0002")  # the others committed
    with graph_database(settings.data_dir, database_url) as db:
        assert db.query("SELECT COUNT(*) FROM session_digests WHERE session_id = ?", ("w0001",))[0][0] == 0
        # Nor do the follower's answers for it stay behind (chunk results hold its names and quotes).
        assert db.query("SELECT COUNT(*) FROM chunk_results WHERE session_id = ?", ("w0001",))[0][0] == 0


@pytest.mark.both_backends
def test_a_turn_forgotten_while_a_follower_extracts_its_session_stays_forgotten(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """``forget --memory`` of a turn of w0000 while a follower waits for the model on w0000 (whose
    prompt holds the turn): the follower's commit must roll back, and the session is extracted
    again without the turn. Before, the commit wrote the turn's points back and marked the session
    digested, so nothing took them out again."""
    forget_beside_a_follower(tmp_path, settings, database_url, sessions=1, forget=("--memory", "memory:w0000-t1"), then_once=True)
    dump = canonical(settings)
    assert mentions(dump, "w0000-t1") == [] and mentions(dump, "w0000-t0")


@pytest.mark.both_backends
def test_turns_ingested_while_a_follower_extracts_the_session_are_extracted_too(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """A follower extracts w0000 as it was (three turns) while the leader ingests a fourth. The
    follower's commit of the old revision must leave the session to extract again (the follower
    or the next worker does): before, it marked it digested, and the new turn was never extracted
    (``status`` said all was digested)."""
    sessions = corpus(1)
    answers = held()  # the follower's, until the test has acted beside it, however slowly things start
    with LLMServer(default=answers) as llm:
        base = asyncio.run(ingested(settings.data_dir, sessions, tmp_path, database_url=database_url))
        env = env_of(settings, llm, database_url)
        worker = follower_waiting_on_the_model(settings, llm, env, tmp_path / "w.log", requests=1)
        grown = copy.deepcopy(sessions)
        grown[0]["turns"].append({"id": "w0000-t3", "role": "user", "text": "Turn 3 brings the AppendedThing in."})
        asyncio.run(import_sessions(write_sessions(tmp_path / "grown.jsonl", grown), chroma=ChromaStore(base),
                                    memory_collection=base.memory_collection, summary_collection=base.session_collection))
        leader = asyncio.run(run_cycle(base, phases=tuple(p for p in PHASES if p[0] == "ingest")))
        assert leader.outcome == "completed" and leader.phases["ingest"]["sessions_synced"] == 1, leader.phases
        llm.default = ok()  # later requests are answered at once …
        answers.release.set()  # … and so now is what the follower waits for
        assert worker.wait(timeout=120) == 0, (tmp_path / "w.log").read_text()[-3000:]
        again = start_worker("--once", env=env, log_path=tmp_path / "again.log")
        assert again.wait(timeout=120) == 0, (tmp_path / "again.log").read_text()[-3000:]
    assert "CLASS:AppendedThing" in {row[0] for row in canonical(settings)["nodes"]}  # the new turn is extracted
    with graph_database(settings.data_dir, database_url) as db:
        (state, digested, current), = db.query(
            "SELECT state, digested_revision, input_revision FROM session_digests WHERE session_id = ?", ("w0000",))
    assert state == "digested" and digested == current


@pytest.mark.both_backends
async def test_a_session_forgotten_while_its_extraction_ends_in_an_outage_leaves_no_chunk_result(
    settings: Settings, tmp_path: Path,
) -> None:
    # Chunk 0's answer lands after the forget, chunk 1 finds the model server out (503): the
    # session is deferred, not committed, so nothing raised SessionGoneError and its stored answer
    # (names, quotes) stayed — for a session the operator had forgotten.
    turns = [("user", "turn 0 names the ZqSecretAlpha class and filler"), ("assistant", "turn 1 names the ZqSecretBeta class x"),
             ("user", "turn 2 names the ZqOtherGamma class and filler"), ("assistant", "turn 3 names the ZqOtherDelta class x")]
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        answered, out = held(ok()), held(Status(503))
        llm.script(answered, match="ZqSecretAlpha")
        llm.script(out, match="ZqOtherGamma")
        source = write_sessions(tmp_path / "in.jsonl", [conversation("doomed", turns)])
        await import_sessions(source, chroma=ChromaStore(mine), memory_collection=mine.memory_collection,
                              summary_collection=mine.session_collection)
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_cycle, mine)
            while llm.chat_count < 2:  # both chunks asked: the session is claimed and waits for the model
                await anyio.sleep(0.02)
            await anyio.to_thread.run_sync(lambda: forget(mine, session="doomed"))
            answered.release.set()
            while not rows_holding(mine, "ZqSecretAlpha"):  # the late answer is stored
                await anyio.sleep(0.02)
            out.release.set()
        assert rows_holding(mine, "ZqSecretAlpha") == []
        assert [r for r in rows_holding(mine, "doomed:chunk") if r.startswith("chunk_results")] == []  # its failure too
