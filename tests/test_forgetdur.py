"""A forget's withdrawal and erase do not depend on its process surviving (forgetdur, nineteenth
session). ``rem-cycle forget`` records, in the forget's own transaction, that the lines its
extraction queued are still to be withdrawn (``queue_withdrawals``) and that its text is still to
be erased from the database's files (``rem_counters`` ``erase_due``), then does both and clears
the records. A forget SIGKILLed in between leaves them to the next cycle or ``rem-cycle drain``
(before: to the same forget run again, by hand, and until then the forgotten words stayed in the
queue files and the database's files). The kill lands after the commit exactly: the test holds the
queue files' drain lock, as a drain running elsewhere does, so the forget waits in its withdrawal.
Real embedded Chroma, real files, a real ``rem-cycle forget`` process, both engines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.lazy_queue import LazyEdgeQueue
from tests.conftest import ROOT, run_cli
from tests.test_crash_matrix import wait_for
from tests.test_forget_bytes import _files_holding
from tests.test_forget_queue import LEGACY_REF, OLD_REF
from tests.test_retract_durable import _count, _vacuums
from tests.test_retract_queue import _built, _cycle, _queue_text

# What the message of a forget run again adds: its tombstone does not say whether the first found anything.
_OR_NEVER = " (or it was never in the graph, which a forget tombstones too: check the id, rem-cycle search)"


def _env(settings: Settings, database_url: str | None) -> dict[str, str]:
    return {"REM_DATA_DIR": str(settings.data_dir)} | ({"REM_DATABASE_URL": database_url} if database_url else {})


async def _forget_killed_after_its_commit(
    settings: Settings, database_url: str | None, tmp_path: Path, *what: str,
) -> tuple[Settings, LazyEdgeQueue]:
    """A built graph (``_built``: s-gone's two turns' lines dead-lettered, the first's naming
    OLD_REF, which the turn's text holds too) after ``rem-cycle forget WHAT`` of s-gone or its
    first turn was SIGKILLed between its commit and its withdrawal and erase."""
    mine = await _built(settings, tmp_path)
    queue = LazyEdgeQueue(mine.queue_path)
    assert OLD_REF in _queue_text(queue)
    forgotten = what[1].removeprefix("memory:")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT)} | _env(mine, database_url)
    with queue.exclusive():  # a drain running elsewhere: the forget waits in its withdrawal, after its commit
        proc = subprocess.Popen([sys.executable, "-m", "worker", "forget", *what], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: _count(mine, f"SELECT COUNT(*) FROM tombstones WHERE id = '{forgotten}'") == 1, proc.pid)
            assert proc.poll() is None, "the forget ended before the kill"
            time.sleep(0.3)  # into the withdrawal's wait for the lock
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    assert _count(mine, "SELECT COUNT(*) FROM nodes WHERE id = 'memory:s-gone-t0000'") == 0  # forgotten, committed
    assert OLD_REF in _queue_text(queue)  # the kill left its line
    if database_url is None:
        assert _files_holding(mine.data_dir, OLD_REF) == ["graph.sqlite3", "lazy-edges.dead.jsonl"]  # and its words
    return mine, queue


@pytest.mark.both_backends
async def test_a_forget_killed_after_its_commit_leaves_its_withdrawal_and_erase_to_the_next_cycle(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    # Before: nothing said the lines or the erase were still due; the next cycle had nothing to
    # retract and erased nothing, so the words stayed in the dead-letter file and the database's
    # files until the operator ran the same forget again.
    mine, queue = await _forget_killed_after_its_commit(settings, database_url, tmp_path, "--memory", "memory:s-gone-t0000")
    # A turn's forget takes what the extraction said of it out itself: no second erase at its re-extraction.
    assert _count(mine, "SELECT erase_at_commit FROM session_digests WHERE session_id = 's-gone'") == 0
    db = open_database(mine)
    try:
        vacuumed = _vacuums(db, "recall_turns") if database_url else 0
        phases = (await _cycle(mine)).phases
        if database_url:
            assert _vacuums(db, "recall_turns") > vacuumed
    finally:
        db.close()
    assert _files_holding(mine.data_dir, OLD_REF) == []
    assert LEGACY_REF in _queue_text(queue)  # s-gone's other turn's line stays
    ingest = phases["ingest"]
    assert (ingest["turns_retracted"], ingest["retractions_withdrawn"], ingest["queue_lines_withdrawn"]) == (0, 1, 1)
    assert phases["finalize"]["erased"] is True
    assert _count(mine, "SELECT COUNT(*) FROM queue_withdrawals") == 0
    again = await _cycle(mine)  # settled: nothing more to withdraw or erase
    assert (again.phases["ingest"]["retractions_withdrawn"], "erased" in again.phases["finalize"]) == (0, False)


@pytest.mark.both_backends
async def test_a_forget_killed_after_its_commit_leaves_its_withdrawal_and_erase_to_a_drain_run_alone(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    # Before: the drain found no record (the forget wrote none) and ran no erase.
    mine, queue = await _forget_killed_after_its_commit(settings, database_url, tmp_path, "--session", "s-gone")
    db = open_database(mine)
    try:
        vacuumed = _vacuums(db, "recall_turns") if database_url else 0
        done = run_cli("drain", "--json", env=_env(mine, database_url))
        assert done.returncode == 0, done.stderr
        if database_url:
            assert _vacuums(db, "recall_turns") > vacuumed
    finally:
        db.close()
    stats = json.loads(done.stdout)
    assert (stats.get("retractions_withdrawn"), stats.get("queue_lines_withdrawn"), stats.get("erased")) == (1, 2, True), stats
    for word in (OLD_REF, LEGACY_REF):
        assert _files_holding(mine.data_dir, word) == [], word
    assert _count(mine, "SELECT COUNT(*) FROM queue_withdrawals") == 0
    again = json.loads(run_cli("drain", "--json", env=_env(mine, database_url)).stdout)
    assert (again["retractions_withdrawn"], "erased" in again) == (0, False)


async def test_the_same_forget_run_again_says_it_was_already_forgotten_and_finishes_the_job(
    settings: Settings, tmp_path: Path,
) -> None:
    # Before: the second run said "memory s-gone-t0000 is not in the graph: nothing was removed;
    # tombstoned, … (check the id if you meant a memory of the graph …)", as for an id never seen.
    mine, queue = await _forget_killed_after_its_commit(settings, None, tmp_path, "--memory", "s-gone-t0000")
    env = _env(mine, None)
    done = run_cli("forget", "--memory", "s-gone-t0000", env=env)
    # (stderr: the killed forget's lease on the graph's lock taken over)
    assert (done.returncode, done.stdout.splitlines()) == (0, ["memory s-gone-t0000 was already forgotten: nothing more to remove" + _OR_NEVER])
    assert _files_holding(mine.data_dir, OLD_REF) == [] and LEGACY_REF in _queue_text(queue)  # it finished the job
    assert _count(mine, "SELECT COUNT(*) FROM queue_withdrawals") == 0
    report = json.loads(run_cli("forget", "--memory", "s-gone-t0000", "--json", env=env).stdout)
    assert (report["already_forgotten"], report["points"], report["queue_lines_withdrawn"], report["erased"]) == (True, 0, 0, True)
    assert json.loads(run_cli("forget", "--session", "s-gone", "--json", env=env).stdout)["already_forgotten"] is False
    again = run_cli("forget", "--session", "s-gone", "--dry-run", env=env)
    assert (again.returncode, again.stdout.splitlines()) == (0, ["session s-gone was already forgotten: nothing more to remove" + _OR_NEVER])
    never = run_cli("forget", "--memory", "never-seen", env=env)  # an id never seen still says so
    assert never.returncode == 0 and never.stdout.startswith("memory never-seen is not in the graph: nothing was removed")


NOTE_REF = "zqnoteref4417"  # a memory id only the notes file writes: its line waits in the queue file


def test_a_notes_files_forget_whose_queue_was_busy_leaves_its_lines_to_a_drain(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A drain held the queue files past the forget's wait. Before: the forget said to run it again
    # and recorded nothing, so a drain read the line as any other (an attempt charged, re-queued).
    from worker import knowledge

    note = tmp_path / "decisions.md"
    note.write_text(f"We chose rename-then-drain; memory:{NOTE_REF}-t9 was lost.\n", encoding="utf-8")
    env = _env(settings, None)
    done = run_cli("import-notes", str(note), "--json", env=env)
    assert done.returncode == 0, done.stderr
    queue = LazyEdgeQueue(settings.queue_path)
    assert NOTE_REF in _queue_text(queue)
    monkeypatch.setattr(knowledge, "_QUEUE_WAIT_SECONDS", 0.0)
    with queue.exclusive():
        busy = knowledge.forget(settings, note=json.loads(done.stdout)["files"][0]["note_id"])
    assert "another drain" in busy["queue_error"] and busy["erased"] is True
    assert NOTE_REF in _queue_text(queue) and _count(settings, "SELECT COUNT(*) FROM queue_withdrawals") == 1
    drained = run_cli("drain", "--json", env=env)
    assert drained.returncode == 0, drained.stderr
    stats = json.loads(drained.stdout)
    assert (stats["retractions_withdrawn"], stats["queue_lines_withdrawn"], stats["total_lines"]) == (1, 1, 0), stats
    assert _files_holding(settings.data_dir, NOTE_REF) == []
    assert _count(settings, "SELECT COUNT(*) FROM queue_withdrawals") == 0


NEW_NOTE_REF = "zqnoteref5528"  # what the file, written again after its forget, refers to instead


async def test_an_import_of_a_file_whose_forget_was_left_unfinished_withdraws_its_old_lines_first(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # import-notes extracts without a session's claim. Before: importing a file whose forget left
    # its record (a drain held the files) queued the file's new lines under that record, and the
    # next withdrawal took them with the old ones: the file's references lost.
    from worker import knowledge

    note = tmp_path / "decisions.md"
    note.write_text(f"We chose rename-then-drain; memory:{NOTE_REF}-t9 was lost.\n", encoding="utf-8")
    first = await knowledge.import_notes(settings, [str(note)])
    queue = LazyEdgeQueue(settings.queue_path)
    assert first["imported"] == 1 and NOTE_REF in _queue_text(queue)
    monkeypatch.setattr(knowledge, "_QUEUE_WAIT_SECONDS", 0.0)
    with queue.exclusive():  # a drain running elsewhere, through the forget and the first import again
        busy = knowledge.forget(settings, note=first["files"][0]["note_id"])
        held = await knowledge.import_notes(settings, [str(note)])
    assert "another drain" in busy["queue_error"]
    assert (held["imported"], held["failed"]) == (0, 1) and "forget is not finished" in held["files"][0]["error"], held
    note.write_text(f"We chose rename-then-drain; memory:{NEW_NOTE_REF}-t2 was lost too.\n", encoding="utf-8")
    again = await knowledge.import_notes(settings, [str(note)])
    assert again["imported"] == 1, again
    assert _count(settings, "SELECT COUNT(*) FROM queue_withdrawals") == 0
    assert NOTE_REF not in _queue_text(queue) and NEW_NOTE_REF in _queue_text(queue)
    drained = run_cli("drain", "--json", env=_env(settings, None))
    assert drained.returncode == 0, drained.stderr
    assert json.loads(drained.stdout)["retractions_withdrawn"] == 0
    assert NEW_NOTE_REF in _queue_text(queue)  # re-queued: its row was never written, but the line is kept
