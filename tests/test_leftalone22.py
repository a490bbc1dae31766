"""What the twentieth session left alone, tested (leftalone22): a forget whose held answers' file
refuses its scrub, a rewrite seen by ``rem-cycle backfill``, and what ``forget`` and
``import-notes`` say. Real CLI, real SQLite files and a real PostgreSQL schema, real embedded
Chroma."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from tests.conftest import run_cli


@pytest.mark.both_backends
def test_a_forget_whose_held_answers_file_refuses_its_scrub_is_done_and_says_so(
    settings: Settings, database_url: str | None,
) -> None:
    """``forget`` takes the answers quoting what it took out of ``held-answers.jsonl``; the file
    refusing (here a directory at its name: chmod does not stop root) leaves the forget done:
    exit 0, ``held_answers_error`` in ``--json``, a warning; the records settle all the same."""
    from tests.test_forgetdur import _env

    open_database(settings).close()
    settings.held_answers_path.mkdir(parents=True)

    done = run_cli("forget", "--memory", "s-x-t0000", "--json", env=_env(settings, database_url))

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["tombstone"] is True and report["held_answers_error"], report
    assert "queue_error" not in report and report["erased"] is True
    assert f"the forget is done, but {settings.held_answers_path.name} may still hold answers" in done.stderr


def test_a_held_answers_line_nested_too_deeply_is_dropped_as_unreadable_by_a_forget(settings: Settings) -> None:
    """A damaged line the JSON parser cannot descend (``[`` two hundred thousand times) made the
    file's read raise ``RecursionError``, no ``OSError``: the forget's withdrawal failed whole
    (``queue_error``, its record kept) and every extract phase's take of the file raised. It is an
    unreadable line now, dropped by the scrub as a line cut short is."""
    from tests.test_forgetdur import _env

    open_database(settings).close()
    settings.held_answers_path.write_bytes(b"[" * 200_000 + b"\n")

    done = run_cli("forget", "--memory", "s-x-t0000", "--json", env=_env(settings, None))

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "queue_error" not in report and "held_answers_error" not in report, report
    assert not settings.held_answers_path.exists()


@pytest.mark.parametrize(("backend", "queue"), [("sqlite", "file"), ("postgresql", "database")], indirect=["backend"])
async def test_a_turn_rewritten_and_synced_by_backfill_leaves_its_old_queue_lines(
    settings: Settings, database_url: str | None, tmp_path: Path, queue: str,
) -> None:
    """rewritequeue's scenario with ``rem-cycle backfill`` in the cycle's place: its sync records
    the rewritten turn and its withdrawal takes the old words' line; the next cycle extracts the
    session again and queues the kept reference once."""
    from tests.test_erase_due import _seed
    from tests.test_forget_queue import LATE, LATE_REF, LEGACY_REF
    from tests.test_forgetdur import _env
    from tests.test_retract_queue import _cycle
    from tests.test_rewrite_queue import KEPT_REF, OLD_REF, _queued_lines, _red

    mine = settings.model_copy(update={"lazy_queue": queue})
    await _seed(mine, [_red(redacted=False), *LATE], tmp_path)
    await _cycle(mine)
    await _seed(mine, [_red(redacted=True)], tmp_path)

    done = run_cli("backfill", "--days", "3650", "--skip-drain", "--json", env=_env(mine, database_url) | {"REM_LAZY_QUEUE": queue})

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["retractions_withdrawn"], report["queue_lines_withdrawn"]) == (1, 2), report  # the turn's two lines
    assert [_queued_lines(mine, word) for word in (OLD_REF, KEPT_REF, LEGACY_REF, LATE_REF)] == [0, 0, 1, 1]
    await _cycle(mine)
    assert [_queued_lines(mine, word) for word in (OLD_REF, KEPT_REF, LEGACY_REF, LATE_REF)] == [0, 1, 1, 1]


async def test_a_turn_rewritten_and_synced_by_backfill_leaves_the_held_answers_file(
    tmp_path: Path, settings: Settings, quick_refusal: None,
) -> None:
    """heldrewrite's scenario with ``rem-cycle backfill`` in the cycle's place: the old words'
    answer leaves ``held-answers.jsonl`` at the backfill's withdrawal; the other two stay, and the
    next extract phase stores them with no request."""
    from pipelines.importer import import_sessions
    from store.chroma import ChromaStore
    from tests.conftest import write_sessions
    from tests.llm_server import LLMServer
    from tests.test_forgetdur import _env
    from tests.test_heldonce import CHUNK_WORDS, HISTORY, _held_lines, _three_answers_in_the_file, conversation, extract_phase

    with LLMServer() as llm:
        config = await _three_answers_in_the_file(settings, llm, tmp_path)
        redacted = [(HISTORY[0][0], HISTORY[0][1].replace(CHUNK_WORDS[0][0], "ZqRedactedItem")), *HISTORY[1:]]
        await import_sessions(write_sessions(tmp_path / "redacted.jsonl", [conversation("s", redacted)]), chroma=ChromaStore(config),
                              memory_collection=config.memory_collection, summary_collection=config.session_collection)

        done = run_cli("backfill", "--days", "3650", "--skip-drain", "--json", env=_env(config, None))

        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["retractions_withdrawn"] == 1
        assert len(_held_lines(config)) == 2 and CHUNK_WORDS[0][0] not in config.held_answers_path.read_text()
        phase = await extract_phase(config)
        assert (phase["sessions_digested"], phase["chunks_reused"]) == (1, 2), phase


MOVE_REF = "zqmoveref4471"  # a memory id the moved turn names, which no Chroma row has
MOVED = f"GraphStore was in memory:{MOVE_REF}-x."


@pytest.mark.parametrize(("backend", "queue"), [("sqlite", "file"), ("postgresql", "database")], indirect=["backend"])
async def test_a_turn_moved_with_its_words_leaves_the_lines_of_its_old_session(
    settings: Settings, tmp_path: Path, queue: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A turn moved to another session with the same words (``import --allow-move``). Synced in
    one batch with its old session, the old session took it out as retracted, and its old lines
    went; synced in a batch before the old session's (here a batch a session; in the field
    sessions in id order, 25 a batch, or ``REM_BATCH_LIMIT``), its old session's line stayed
    beside the new session's: an edge saying ``sessionId`` s-z, naming s-z's chunks, that a
    forget of the turn (now s-b's) did not withdraw."""
    import worker.cycle
    from pipelines.importer import import_sessions
    from store.chroma import ChromaStore
    from tests.conftest import write_sessions
    from tests.test_erase_due import _erase_due, _seed
    from tests.test_forget_queue import _session
    from tests.test_requeue_once import _records_naming
    from tests.test_retract_queue import _cycle
    from worker.knowledge import forget

    mine = settings.model_copy(update={"lazy_queue": queue})
    await _seed(mine, [_session("s-z", [MOVED, "RetryPolicy reads the config."]), _session("s-b", ["ConfigLoader caches it."])], tmp_path)
    await _cycle(mine)
    assert [line["properties"]["sessionId"] for line in _records_naming(mine, MOVE_REF)] == ["s-z"]
    moved = {**_session("s-b", []), "turns": [{"id": "s-b-t0000", "role": "user", "text": "ConfigLoader caches it."},
                                              {"id": "s-z-t0000", "role": "user", "text": MOVED}]}
    await import_sessions(write_sessions(tmp_path / "moved.jsonl", [moved]), chroma=ChromaStore(mine), allow_move=True,
                          memory_collection=mine.memory_collection, summary_collection=mine.session_collection)
    monkeypatch.setattr(worker.cycle, "SESSIONS_PER_BATCH", 1)  # s-b's batch, then s-z's

    result = await _cycle(mine)

    assert result.phases["ingest"]["retractions_withdrawn"] == 1 and _erase_due(mine) == 0  # no words went
    # Before: ['s-b', 's-z'].
    assert [line["properties"]["sessionId"] for line in _records_naming(mine, MOVE_REF)] == ["s-b"]
    forget(mine, memory="s-z-t0000")
    assert _records_naming(mine, MOVE_REF) == []


def test_a_forget_of_an_id_never_seen_run_again_still_says_to_check_the_id(settings: Settings) -> None:
    """The first forget of a mistyped id says it is not in the graph and to check the id; run
    again, it said only ``was already forgotten`` (the first had tombstoned it), as if the id had
    been right. The tombstone does not say which, so the message says both."""
    from tests.test_forgetdur import _env

    open_database(settings).close()
    first = run_cli("forget", "--memory", "s-typo-t0000", env=_env(settings, None))
    again = run_cli("forget", "--memory", "s-typo-t0000", env=_env(settings, None))

    assert (first.returncode, again.returncode) == (0, 0)
    assert "is not in the graph" in first.stdout and "check the id" in first.stdout
    assert "was already forgotten" in again.stdout and "check the id" in again.stdout, again.stdout


def test_import_notes_refused_by_a_planted_link_says_so_and_not_a_drain(settings: Settings, tmp_path: Path) -> None:
    """``import-notes`` of a file whose forget could not withdraw its lines (here a link planted at
    the queue file's name, which no wait clears) reports the file ``failed``; it said to wait for
    a running drain whatever kept the withdrawal from the files. It says the files' own error."""
    from tests.test_forgetdur import NOTE_REF, _env

    env = _env(settings, None)
    note = tmp_path / "decisions.md"
    note.write_text(f"We chose rename-then-drain; memory:{NOTE_REF}-t9 was lost.\n", encoding="utf-8")
    assert run_cli("import-notes", str(note), env=env).returncode == 0
    queue = settings.queue_path
    queue.rename(tmp_path / "elsewhere.jsonl")
    queue.symlink_to(tmp_path / "elsewhere.jsonl")  # planted
    forgot = run_cli("forget", "--note", str(note), "--json", env=env)
    assert forgot.returncode == 0 and json.loads(forgot.stdout)["queue_error"], forgot.stdout

    again = run_cli("import-notes", str(note), env=env)

    assert "its forget is not finished" in again.stdout + again.stderr, (again.stdout, again.stderr)
    said = again.stdout + again.stderr
    assert "drain to let go" not in said and "running drain" not in said and str(queue) in said, said
