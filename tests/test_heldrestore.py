"""heldrestore: a paid answer the database refused to store (``held-answers.jsonl``) is dropped only
when it is no longer wanted — its session or turn forgotten or retracted, its session digested, or
held past ``REM_HELD_ANSWER_MAX_AGE_DAYS`` — not because a restored backup older than its session's
ingest does not know the session yet. Real SQLite files, embedded Chroma, the loopback
chat-completions server counting requests, the real CLI for ``backup``, ``restore`` and ``forget``."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from config import Settings
from pipelines.extract.inflight import HeldAnswer, HeldAnswers
from pipelines.extract.model import ChunkExtraction
from store.backend import open_database_at
from store.held_file import HeldAnswersFile
from tests.conftest import run_cli
from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, conversation
from tests.test_heldonce import _three_answers_in_the_file
from tests.test_roundtrip_restore import _env
from tests.test_textclaim import CHUNK_WORDS, sent_per_chunk
from tests.workers_support import accept_answers, extract_phase, ingested, refuse_answers
from worker.cycle import PHASES, run_cycle
from worker.held_answers import drop_taken_out

# Session ``a``: one chunk of its own words, ingested before ``s`` (same time, its id first).
OTHER = [("user", "this turn names the ZqOtherItem class and filler")]


def _cli(config: Settings, *args: str) -> None:
    done = run_cli(*args, env=_env(config))
    assert done.returncode == 0, done.stderr[-2000:]


async def _answers_held_past_a_backup(settings: Settings, llm: LLMServer, work: Path, held: HeldAnswers | None = None) -> Settings:
    """The graph backed up (``rem-cycle backup``) before anything is ingested; then ``a`` and ``s``
    ingested and extracted while the database refused every answer (four answers held: in the
    data dir's file, or in ``held``), and the backup restored (``rem-cycle restore``): the graph
    knows neither session. Returns settings that ingest and extract one session a cycle."""
    config = llm_settings(settings.data_dir, llm, batch_limit=2)
    empty = await run_cycle(config, phases=tuple(p for p in PHASES if p[0] == "ingest"))
    assert empty.outcome == "completed", empty.message
    backup = work / "backup.sqlite3"
    _cli(config, "backup", str(backup))
    await ingested(settings.data_dir, [conversation("a", OTHER), conversation("s", HISTORY)], work)
    refuse_answers(config, None)
    await extract_phase(config, held)
    assert sent_per_chunk(llm) == [1, 1, 1] and llm.chat_count == 4
    accept_answers(config, None)
    _cli(config, "restore", str(backup))
    return llm_settings(settings.data_dir, llm, batch_limit=1)


def _held_lines(settings: Settings) -> list[dict[str, object]]:
    path = settings.held_answers_path
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_held_answer_of_a_session_a_restored_backup_does_not_know_yet_is_stored_after_its_ingest(
    tmp_path: Path, settings: Settings, quick_refusal: None
) -> None:
    """The backup predates the ingest of ``a`` and ``s``, whose four answers the database refused
    before the restore. The first cycle after it ingests ``a`` only (one session a cycle, ``a``
    first) and stores ``a``'s answer; ``s``'s three wait in the file, and the next cycle, which
    ingests ``s``, stores them: no request after the restore. Before, the first cycle's extract
    phase dropped ``s``'s answers (its session unknown to the restored graph: "taken out") and the
    second asked about each chunk again ([2, 2, 2])."""
    with LLMServer() as llm:
        config = await _answers_held_past_a_backup(settings, llm, tmp_path)
        assert all("held_at" in record for record in _held_lines(config))
        first = await extract_phase(config)
        assert (first["sessions_digested"], first["chunks_reused"]) == (1, 1), first
        assert {record["session_id"] for record in _held_lines(config)} == {"s"}
        second = await extract_phase(config)
        assert (second["sessions_digested"], second["chunks_reused"]) == (1, 3), second
        assert (sent_per_chunk(llm), llm.chat_count) == ([1, 1, 1], 4)
    assert not config.held_answers_path.exists()


@pytest.mark.parametrize("what", ["session", "turn"])
async def test_a_forget_after_the_restore_still_takes_the_kept_answers_out_of_the_file(
    tmp_path: Path, settings: Settings, quick_refusal: None, what: str
) -> None:
    """After the restore the file keeps ``s``'s answers (the graph does not know ``s`` yet);
    ``rem-cycle forget`` of ``s`` or of its first turn takes them (or that turn's) out of the
    file's bytes at once. A fork ``f`` of the same words, after the session's forget, is asked
    about each chunk again: nothing forgotten is stored for it."""
    with LLMServer() as llm:
        config = await _answers_held_past_a_backup(settings, llm, tmp_path)
        _cli(config, "forget", "--session", "s") if what == "session" else _cli(config, "forget", "--memory", "s-t0")
        text = config.held_answers_path.read_text() if config.held_answers_path.exists() else ""
        assert CHUNK_WORDS[0][0] not in text
        if what == "turn":
            assert sorted(record["memory_ids"] for record in _held_lines(config) if record["session_id"] == "s") == [
                ["s-t2", "s-t3"], ["s-t4", "s-t5"]]
            return
        assert "PartCItem" not in text and "PartEItem" not in text
        await ingested(settings.data_dir, [conversation("f", HISTORY)], tmp_path)
        fork = await extract_phase(llm_settings(settings.data_dir, llm, batch_limit=2))
        assert (fork["chunks_reused"], sent_per_chunk(llm)) == (1, [2, 2, 2]), fork  # a's answer, stored


@pytest.mark.parametrize("what", ["session", "turn"])
async def test_a_daemon_holding_answers_drops_what_was_forgotten_after_the_restore(
    tmp_path: Path, settings: Settings, quick_refusal: None, what: str
) -> None:
    """A daemon whose file cannot be written (a directory there) keeps the answers in its memory,
    out of reach of the forget's scrub of the file. After the restore (the graph knows neither
    session) ``s`` or its first turn is forgotten: the daemon's next check drops what the forget's
    tombstone names — all of ``s``'s, or the one answer quoting the turn — and keeps the rest
    (``a``'s, ``s``'s other two: their sessions are not ingested yet). Before, every answer went
    (the unknown sessions' too)."""
    held = HeldAnswers()
    settings.data_dir.mkdir(parents=True)
    settings.held_answers_path.mkdir()
    with LLMServer() as llm:
        config = await _answers_held_past_a_backup(settings, llm, tmp_path, held)
        assert len(held) == 4
        _cli(config, "forget", "--session", "s") if what == "session" else _cli(config, "forget", "--memory", "s-t0")
        db = open_database_at(path=config.graph_path, url=None)
        try:
            drop_taken_out(config, held, db)
        finally:
            db.close()
    kept = sorted(tuple(record["memory_ids"]) for record in held.records())
    assert kept == ([("a-t0",)] if what == "session" else [("a-t0",), ("s-t2", "s-t3"), ("s-t4", "s-t5")])


def _rewrite(settings: Settings, change: dict[int, str | None]) -> None:
    """Give the file's answer of chunk ``n`` the ``held_at`` of ``change[n]`` (``None``: none, as
    a file written before records said it)."""
    records = _held_lines(settings)
    for n, held_at in change.items():
        (record,) = [r for r in records if r["memory_ids"][0] == f"s-t{2 * n}"]
        record.pop("held_at", None)
        if held_at is not None:
            record["held_at"] = held_at
    settings.held_answers_path.write_text("".join(json.dumps(r) + "\n" for r in records))


async def test_an_answer_held_longer_than_the_age_limit_is_dropped_and_its_words_asked_again(
    tmp_path: Path, settings: Settings, quick_refusal: None
) -> None:
    """Three answers in the file; chunk 0's held 31 days ago (the default limit: 30 days), chunk
    1's with no ``held_at`` (a file written before records said it: as old as the file, written
    now). The next run asks about chunk 0 again and stores the other two. Before, the age of an
    answer was not known: all three were stored ([1, 1, 1])."""
    with LLMServer() as llm:
        config = await _three_answers_in_the_file(settings, llm, tmp_path)
        _rewrite(config, {0: (datetime.now(UTC) - timedelta(days=31)).isoformat(), 1: None})
        with capture_logs() as logs:
            phase = await extract_phase(config)
        assert (phase["sessions_digested"], phase["chunks_reused"], sent_per_chunk(llm)) == (1, 2, [2, 1, 1]), phase
    assert [e["answers"] for e in logs if e["event"].startswith("held answers dropped: no attempt")] == [1]


@pytest.mark.parametrize(("hours_ago", "said", "sent"), [(12, None, [1, 1, 1]), (48, None, [2, 2, 2]),
                                                        (48, "2100-01-01T00:00:00+00:00", [2, 2, 2])])
async def test_a_file_written_before_held_at_counts_its_answers_age_from_the_files_time(
    tmp_path: Path, settings: Settings, quick_refusal: None, hours_ago: int, said: str | None, sent: list[int]
) -> None:
    """A file whose records say no ``held_at`` (written before they did), or say a time after the
    file was written (a clock ahead, a hand edit: before, kept until 2100), and whose modification
    time is ``hours_ago``, with ``REM_HELD_ANSWER_MAX_AGE_DAYS=1``: read as held then — stored
    with no request at 12 hours, dropped and asked again at 48."""
    with LLMServer() as llm:
        await _three_answers_in_the_file(settings, llm, tmp_path)
        config = llm_settings(settings.data_dir, llm, held_answer_max_age_days=1)
        _rewrite(config, {0: said, 1: said, 2: said})
        then = (datetime.now(UTC) - timedelta(hours=hours_ago)).timestamp()
        os.utime(config.held_answers_path, (then, then))
        phase = await extract_phase(config)
        assert (phase["sessions_digested"], sent_per_chunk(llm)) == (1, sent), phase
    assert not config.held_answers_path.exists()


def _answers(count: int, summary_bytes: int) -> HeldAnswers:
    """``count`` held answers whose extraction's summary is ``summary_bytes`` long, oldest first."""
    held = HeldAnswers()
    for n in range(count):
        extraction = ChunkExtraction(f"s{n}:chunk:0", "x" * summary_bytes)
        held.keep(("openai:model", f"{n:064x}"), HeldAnswer(extraction, f"s{n}", (f"s{n}-t0",), 9, 4, 21.0, datetime.now(UTC)))
    return held


def test_the_held_answers_bound_counts_the_bytes_of_the_file_not_the_answers(settings: Settings) -> None:
    """What the bound protects is the file each extract phase writes and reads whole under its lock
    (and the memory holding the answers): ten answers of 1 MiB each (a model's long answer) leave a
    file of at most 4 MiB, the newest answers kept; 1,500 answers of 200 bytes (0.5 MB) are all
    kept. Before, the bound was 1,000 answers whatever their size: a 10 MB file, and 500 small
    answers thrown away and paid again."""
    settings.data_dir.mkdir(parents=True)
    spill = HeldAnswersFile(settings.held_answers_path, root=settings.data_dir)
    large = _answers(10, 1024 * 1024)
    spill.replace(large.records())
    size = settings.held_answers_path.stat().st_size
    assert (size <= 4 * 1024 * 1024, [r["session_id"] for r in spill.read().records]) == (True, ["s7", "s8", "s9"]), size
    small = _answers(1500, 200)
    spill.replace(small.records())
    assert len(spill.read().records) == 1500
