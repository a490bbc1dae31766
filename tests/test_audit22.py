"""audit22: the twentieth session's code (heldonce, heldrewrite, rewritequeue, audit21), attacked.
Real SQLite files and PostgreSQL schemas, embedded Chroma, the loopback chat-completions server,
the real file of held answers; each test failed on the code of ``103cd96`` as RELIABILITY.md
"audit22" quotes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from config import Settings
from pipelines.extract.inflight import HeldAnswers
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.held_file import HeldAnswersFile
from tests.conftest import write_sessions
from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, conversation
from tests.test_heldonce import _held_lines, _three_answers_in_the_file, _two_answers
from tests.test_textclaim import CHUNK_WORDS, sent_per_chunk
from tests.workers_support import REFUSED, accept_answers, extract_phase, graph_database, ingested, refuse_answers, three_answers_held
from worker.cycle import run_cycle
from worker.held_answers import take_from_file, write_to_file
from worker.knowledge import forget


def _refuse_claims_release(settings: Settings, database_url: str | None, *, refuse: bool = True) -> None:
    """Make the graph database refuse every delete of a session claim (a trigger, as a database
    locked past its wait or full refuses every write); ``refuse`` False: take them again, and let
    the claims' leases run out."""
    statements = ([f"CREATE TRIGGER refuse_release BEFORE DELETE ON session_claims BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END"]
                  if database_url is None else
                  [f"CREATE FUNCTION refuse_release() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION '{REFUSED}'; END$$",
                   "CREATE TRIGGER refuse_release BEFORE DELETE ON session_claims FOR EACH ROW EXECUTE FUNCTION refuse_release()"])
    if not refuse:
        statements = ["DROP TRIGGER refuse_release" + ("" if database_url is None else " ON session_claims"),
                      "UPDATE session_claims SET lease_expires_at = '2000-01-01T00:00:00Z'"]
    with (sqlite3.connect(settings.graph_path) if database_url is None else psycopg.connect(database_url)) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.mark.both_backends
async def test_answers_refused_by_a_database_that_refuses_the_claims_release_too_reach_the_file(
    tmp_path: Path, settings: Settings, database_url: str | None, quick_refusal: None
) -> None:
    """The database refuses the answers and, at the phase's end, the release of the session's claim
    (a trigger: as a database locked past its wait or full refuses every write). The phase fails,
    but the three paid answers are in the data dir's file all the same, and the next run (once the
    claim's lease ran out) stores them with no request. Before, the failed release ended the phase's
    clean-up before its write: the answers went with the process, to be paid for again."""
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm, **({"database_url": database_url} if database_url else {}))
        await ingested(settings.data_dir, [conversation("s", HISTORY)], tmp_path, database_url=database_url)
        refuse_answers(config, database_url)
        _refuse_claims_release(config, database_url)
        result = await run_cycle(config)
        assert (result.outcome, result.failure_phase) == ("failed", "extract"), result.as_dict()
        assert len(_held_lines(config)) == 3
        accept_answers(config, database_url)
        _refuse_claims_release(config, database_url, refuse=False)
        phase = await extract_phase(config)
        assert (phase["sessions_digested"], phase["chunks_reused"], sent_per_chunk(llm)) == (1, 3, [1, 1, 1]), phase


async def test_a_forget_takes_its_words_out_of_a_part_file_a_killed_writer_left(
    tmp_path: Path, settings: Settings, quick_refusal: None
) -> None:
    """A run the database refused leaves the three answers of ``s`` in the file; the next run takes
    them (the file goes) and is killed in the middle of writing them back: ``held-answers.jsonl.part``
    holds them, no file (the kill test of tests/test_heldonce.py shows a ``.part`` stays). ``forget``
    of the turn of chunk 0 leaves its words in no file of the data dir. Before, the forget found no
    answer to drop in the (missing) file and left the ``.part``, quoting the forgotten words, until
    the next extract phase (for ``--once`` runs: whenever one came)."""
    with LLMServer() as llm:
        config = await _three_answers_in_the_file(settings, llm, tmp_path)
        part = config.held_answers_path.with_name(config.held_answers_path.name + ".part")
        config.held_answers_path.rename(part)
        forget(config, memory="s-t0")
        holding = [p.name for p in config.data_dir.iterdir() if p.is_file() and CHUNK_WORDS[0][0].encode() in p.read_bytes()]
        assert holding == []


@pytest.mark.both_backends
async def test_a_rewritten_turns_old_answer_another_process_held_meanwhile_does_not_stay_in_the_file(
    tmp_path: Path, settings: Settings, database_url: str | None, quick_refusal: None
) -> None:
    """A run the database refused leaves the three answers of ``s`` in the file. Another process's
    extract phase takes them (a follower of ``REM_SHARED_EXTRACT`` on the data dir, or a worker on
    another host of the PostgreSQL graph with its own file). Meanwhile turn 0 is written again with
    other words and the leading cycle ingests the rewrite (its scrub finds no file), then extracts
    and digests ``s``. The other phase ends and writes back what it held: the redacted words must
    not be among it. Before, the old words' answer passed the id check (the turn's id stands) and
    stayed in the file until 1,000 newer answers pushed it out."""
    with LLMServer() as llm:
        config = await three_answers_held(settings.data_dir, llm, tmp_path, HeldAnswers(), database_url=database_url)
        other = HeldAnswers()
        take_from_file(config, other)
        assert len(other) == 3 and not config.held_answers_path.exists()
        redacted = [(HISTORY[0][0], HISTORY[0][1].replace(CHUNK_WORDS[0][0], "ZqRedactedItem")), *HISTORY[1:]]
        await import_sessions(write_sessions(tmp_path / "redacted.jsonl", [conversation("s", redacted)]), chroma=ChromaStore(config),
                              memory_collection=config.memory_collection, summary_collection=config.session_collection)
        assert (await extract_phase(config))["sessions_digested"] == 1
        with graph_database(settings.data_dir, database_url) as db:
            write_to_file(config, other, db)
    assert CHUNK_WORDS[0][0] not in "".join(_held_lines(config))


def test_a_line_nested_too_deep_costs_its_own_answer_not_every_phase(settings: Settings) -> None:
    """A damaged line of the file that opens 100,000 lists (JSON's parser gives up with
    ``RecursionError``, not ``ValueError``) is one unreadable line: the take holds the other answer
    and removes the file. Before, the error left ``take_from_file`` (it catches ``OSError``), so
    every extract phase crashed on the file, which stayed."""
    settings.data_dir.mkdir(parents=True)
    first, _ = _two_answers()
    spill = HeldAnswersFile(settings.held_answers_path, root=settings.data_dir)
    spill.replace([first])
    with settings.held_answers_path.open("ab") as out:
        out.write(b"[" * 100_000 + b"\n")
    held = HeldAnswers()
    take_from_file(settings, held)
    assert len(held) == 1 and not settings.held_answers_path.exists()
