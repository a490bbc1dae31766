"""heldonce: a paid answer the database refused to store outlives the process that paid for it. The
extract phase writes what it still holds to the data dir's ``held-answers.jsonl`` (0600, replaced
whole) and the next process's phase takes it, so a ``--once`` run's answers are stored by the next
run with no request; ``forget`` takes its words out of the file; a damaged line costs only its own
answer; a lock keeps two processes from taking the same file; a kill mid-write leaves a whole file.
Real ``rem-cycle --once`` processes, real SQLite files and PostgreSQL (a trigger that refuses the
answers), embedded Chroma, the loopback chat-completions server counting requests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
from structlog.testing import capture_logs

from config import Settings
from pipelines.extract.inflight import HeldAnswer, HeldAnswers
from pipelines.extract.model import ChunkExtraction
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.held_file import HeldAnswersFile
from tests.conftest import ROOT, run_cli, write_sessions
from tests.daemon_support import start_worker, stop, wait_for, worker_env
from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, conversation
from tests.test_textclaim import CHUNK_WORDS, digests, sent_per_chunk
from tests.test_textclaim_failures import charged
from tests.workers_support import accept_answers, extract_phase, ingested, refuse_answers
from worker.held_answers import take_from_file
from worker.knowledge import forget


def _once(env: dict[str, str]) -> dict[str, object]:
    """``rem-cycle --once --json`` as a process of its own; its extract phase's counts."""
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["phases"]["extract"]


def _held_lines(settings: Settings) -> list[str]:
    path = settings.held_answers_path
    return path.read_text().splitlines() if path.exists() else []


def test_a_once_run_stores_the_answers_the_database_refused_the_run_before_it_with_no_request(
    tmp_path: Path, settings: Settings, database_url: str | None
) -> None:
    """Run 1 (``rem-cycle --once``, the database refusing every answer: a trigger) asks about each
    of the three chunks once and leaves the answers in ``held-answers.jsonl``, mode 0600. Run 2, a
    new process with the database healthy, stores them: no request, three reused, the session
    digested, charged nothing, the file gone. Before, run 1 took the answers with it when it exited
    and run 2 asked about each chunk again ([2, 2, 2])."""
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm, **({"database_url": database_url} if database_url else {}))
        asyncio.run(ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path, database_url=database_url))
        env = worker_env(settings.data_dir, extractor="openai", llm_base_url=llm.url, llm_max_retries="0",
                         chunk_limit_tokens="48", prompt_envelope_tokens="0", llm_concurrency="4",
                         **({"database_url": database_url} if database_url else {}))
        refuse_answers(config, database_url)
        first = _once(env)
        assert (first["sessions_deferred"], sent_per_chunk(llm)) == (1, [1, 1, 1]), first
        assert len(_held_lines(config)) == 3
        assert stat.S_IMODE(config.held_answers_path.stat().st_mode) == 0o600
        accept_answers(config, database_url)
        second = _once(env)
        assert (second["sessions_digested"], second["chunks_reused"], sent_per_chunk(llm)) == (1, 3, [1, 1, 1]), second
    assert not config.held_answers_path.exists()
    assert digests(config) == [("s", "digested")]
    assert charged(config, database_url) == {"attempts": [0], "failed_chunks": 0}


async def test_a_daemon_stopped_after_a_refused_cycle_leaves_its_answers_to_the_next_run(
    tmp_path: Path, settings: Settings, quick_refusal: None
) -> None:
    """A real daemon (``python -m worker``, a cycle at start, the next an hour later) whose first
    cycle the database refused every answer of is stopped with SIGTERM (exit 0). The next run, the
    database healthy, stores the three answers with no request. Before, the daemon took them with
    it: the next run asked about each chunk again ([2, 2, 2])."""
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm)
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path)
        env = worker_env(settings.data_dir, interval_seconds="3600", extractor="openai", llm_base_url=llm.url,
                         llm_max_retries="0", chunk_limit_tokens="48", prompt_envelope_tokens="0", llm_concurrency="4")
        refuse_answers(config, None)
        log = tmp_path / "daemon.log"
        daemon = start_worker(env=env, log_path=log)
        try:
            await anyio.to_thread.run_sync(lambda: wait_for(
                lambda: "cycle finished" in log.read_text(), timeout=60, interval=0.05, what="the daemon's first cycle"))
        finally:
            assert stop(daemon) == 0, log.read_text()[-3000:]
        assert sent_per_chunk(llm) == [1, 1, 1]
        accept_answers(config, None)
        phase = await extract_phase(config)
        assert (phase["sessions_digested"], phase["chunks_reused"], sent_per_chunk(llm)) == (1, 3, [1, 1, 1]), phase


async def _three_answers_in_the_file(settings: Settings, llm: LLMServer, work: Path) -> Settings:
    """Session ``s`` ingested, then extracted once while the database refused every answer: its
    three chunks' answers are in the data dir's file; the database accepts answers again."""
    config = llm_settings(settings.data_dir, llm)
    await ingested(settings.data_dir, [conversation("s", HISTORY)], work)
    refuse_answers(config, None)
    await extract_phase(config)
    assert CHUNK_WORDS[0][0] in config.held_answers_path.read_text()
    accept_answers(config, None)
    return config


async def test_a_forget_takes_its_turns_answers_out_of_the_file(tmp_path: Path, settings: Settings, quick_refusal: None) -> None:
    """A run the database refused leaves the three answers of ``s`` in the file. ``forget`` of the
    turn of chunk 0 takes that chunk's answer out (its words leave the file's bytes) and keeps the
    other two; ``forget`` of the session takes the file away. The next run stores nothing held."""
    with LLMServer() as llm:
        config = await _three_answers_in_the_file(settings, llm, tmp_path)
        forget(config, memory="s-t0")
        assert len(_held_lines(config)) == 2
        assert CHUNK_WORDS[0][0] not in config.held_answers_path.read_text()
        forget(config, session="s")
        assert not config.held_answers_path.exists()
        assert (await extract_phase(config))["chunks_reused"] == 0


async def test_a_rewritten_turns_old_answer_leaves_the_file_at_the_next_cycles_ingest(
    tmp_path: Path, settings: Settings, quick_refusal: None
) -> None:
    """A run the database refused leaves the three answers of ``s`` in the file; turn 0 is then
    written again with other words (a redaction: ``import`` of the corrected session, deleted and
    added under its id). The next cycle's ingest withdraws what the rewrite replaced, and the old
    words' answer leaves the file with it; the other two chunks' answers are stored with no request.
    Before, the old answer (its turn's id still in the graph) was taken and written back by every
    phase: the redacted words stayed in the file until 1,000 newer answers pushed them out."""
    with LLMServer() as llm:
        config = await _three_answers_in_the_file(settings, llm, tmp_path)
        redacted = [(HISTORY[0][0], HISTORY[0][1].replace(CHUNK_WORDS[0][0], "ZqRedactedItem")), *HISTORY[1:]]
        await import_sessions(write_sessions(tmp_path / "redacted.jsonl", [conversation("s", redacted)]), chroma=ChromaStore(config),
                              memory_collection=config.memory_collection, summary_collection=config.session_collection)
        phase = await extract_phase(config)
        assert (phase["sessions_digested"], phase["chunks_reused"]) == (1, 2), phase
    assert not config.held_answers_path.exists(), _held_lines(config)


async def test_a_damaged_line_costs_its_own_answer_and_the_run_goes_on(tmp_path: Path, settings: Settings, quick_refusal: None) -> None:
    """The file's line of chunk 2 cut short (a disk's damage; rem-cycle's own writes are whole) and
    a line of garbage added: the next run logs the damage, stores the two answers it could read
    with no request, asks about chunk 2 again, digests the session, and leaves no file."""
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm)
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path)
        refuse_answers(config, None)
        await extract_phase(config)
        lines = _held_lines(config)
        damaged = [line[: len(line) // 2] if CHUNK_WORDS[2][0] in line else line for line in lines]
        config.held_answers_path.write_text("\n".join([*damaged, "\x00 not json"]) + "\n")
        accept_answers(config, None)
        with capture_logs() as logs:
            phase = await extract_phase(config)
        assert (phase["sessions_digested"], phase["chunks_reused"], sent_per_chunk(llm)) == (1, 2, [1, 1, 2]), phase
    errors = [e for e in logs if e["event"].startswith("held answers file damaged")]
    assert [(e["log_level"], e["unreadable"]) for e in errors] == [("error", 2)], logs
    assert not config.held_answers_path.exists()


async def test_a_file_that_cannot_be_read_or_replaced_leaves_the_answers_in_the_daemons_memory(
    tmp_path: Path, settings: Settings, quick_refusal: None
) -> None:
    """``held-answers.jsonl`` is a directory (nothing rem-cycle can read or replace): each extract
    phase logs the error and completes; the daemon (its cycles share one ``HeldAnswers``) keeps the
    answers the database refused in memory, and its next cycle stores them with no request."""
    held = HeldAnswers()
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm)
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path)
        config.held_answers_path.mkdir()
        refuse_answers(config, None)
        with capture_logs() as logs:
            await extract_phase(config, held)
            assert len(held) == 3
            accept_answers(config, None)
            second = await extract_phase(config, held)
        assert (second["sessions_digested"], second["chunks_reused"], sent_per_chunk(llm)) == (1, 3, [1, 1, 1]), second
    assert [e["event"].split(":")[0] for e in logs if e["log_level"] == "error"] == [
        "held answers file not taken", "held answers not written to their file", "held answers file not taken"]


def _two_answers() -> list[dict[str, object]]:
    """Two held answers' records (their words are never asked here)."""
    held = HeldAnswers()
    for n in range(2):
        extraction = ChunkExtraction(f"s:chunk:{n}", "a summary")
        held.keep(("openai:model", f"{n:064x}"), HeldAnswer(extraction, "s", (f"s-t{2 * n}", f"s-t{2 * n + 1}"), 9, 4, 21.0,
                                                                datetime.now(UTC)))
    return held.records()


def test_a_process_takes_the_file_only_when_the_one_holding_its_lock_is_done(settings: Settings) -> None:
    """Another process on the data dir holds the file's lock (here: this test, through a descriptor
    of its own) while it rewrites the file. A take waits for the lock, then takes what that process
    left (the second answer), not what it read before (the first); it removes the file, so a second
    take finds nothing. Without the lock the take would read the first file and miss the second."""
    settings.data_dir.mkdir(parents=True)
    first, second = _two_answers()
    spill = HeldAnswersFile(settings.held_answers_path, root=settings.data_dir)
    spill.replace([first])
    taken = HeldAnswers()
    with spill.locked():
        taker = threading.Thread(target=take_from_file, args=(settings, taken))
        taker.start()
        taker.join(0.2)
        assert taker.is_alive() and len(taken) == 0
        spill.replace([second])
    taker.join(10)
    assert [r["text_hash"] for r in taken.records()] == [second["text_hash"]]
    again = HeldAnswers()
    take_from_file(settings, again)
    assert len(again) == 0 and not settings.held_answers_path.exists()


_WRITER = """
import sys
from pathlib import Path
from store.held_file import HeldAnswersFile
spill = HeldAnswersFile(Path(sys.argv[1]), root=Path(sys.argv[1]).parent)
small, large = [{"n": 0}], [{"n": i, "pad": "x" * 100_000} for i in range(40)]
while True:
    for records in (small, large):
        spill.replace(records)
        print(len(records), flush=True)
"""


def test_a_kill_mid_write_leaves_the_old_file_or_the_new_one(tmp_path: Path) -> None:
    """A process replacing the file again and again (1 record, then 40 of 100 kB) is killed with
    SIGKILL three times in the middle of its writes: each time the file reads whole (1 or 40
    records, no unreadable line), and the ``.part`` a kill left goes with the next write."""
    path = tmp_path / "held-answers.jsonl"
    for _ in range(3):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, cwd=ROOT,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert writer.stdout is not None
        assert b"40\n" in iter(writer.stdout.readline, b"")  # a large file written: the small one next, then the large
        time.sleep(0.005)
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
        content = HeldAnswersFile(path, root=tmp_path).read()
        assert (len(content.records), content.unreadable) in {(1, 0), (40, 0)}
    HeldAnswersFile(path, root=tmp_path).replace([])
    assert sorted(p.name for p in tmp_path.iterdir()) == []
