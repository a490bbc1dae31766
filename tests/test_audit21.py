"""The nineteenth session's code (forgetdur, rewriteerase, the import-notes guard, audit20),
attacked (audit21, twentieth session): RELIABILITY.md, section audit21. Real SQLite files, a real
PostgreSQL schema, the real queue file and table; no mocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.claims import ClaimStore
from store.lazy_queue import LazyEdgeQueue, edge_line
from store.lazy_table import LazyEdgeTable
from store.runstate import RunStateStore, SessionRevision
from store.withdrawals import SESSION_UNKNOWN, QueueWithdrawalStore
from tests.conftest import run_cli
from tests.test_withdrawal_bound import REFUSED, _accept_settling, _records, _refuse_settling
from worker.knowledge import withdraw_retracted


def _extraction_line(session: str, target: object, relationship: object = "MENTIONED_IN") -> bytes:
    """A queue line as the extraction of ``session`` writes one (its chunk ids), to ``target``."""
    return edge_line({"source": "CONCEPT:retry budget", "target": target, "relationship": relationship,
                      "properties": {"chunk_ids": [f"{session}:chunk:0"]}})


@pytest.mark.both_backends
def test_a_line_holding_no_id_where_an_extraction_holds_one_does_not_stop_a_withdrawal(settings: Settings) -> None:
    """An agent's line (an INSERT into ``lazy_edges`` or an append to the file, README) may hold
    anything: one with an extraction's chunk ids and a list as its ``relationship`` (any
    withdrawal of its anchor) or its ``target`` (a turn's) made the withdrawal raise ``TypeError:
    unhashable type`` — in a cycle's ingest, every cycle (the record stays), in ``rem-cycle drain``
    before it drained, in ``forget`` after its commit: the record was never cleared and the
    session never claimed again. Now such a line is none of theirs: it stays, theirs go."""
    db = open_database(settings)
    try:
        RunStateStore(db).mark_ingested(SessionRevision("s-1", "r1", "2026-11-01T00:00:00Z"), "run-1")
        odd = [_extraction_line("s-1", ["memory:s-1-t0000"]), _extraction_line("s-3", "memory:s-3-t0000", ["MENTIONED_IN"])]
        mine = [_extraction_line(session, f"memory:{session}-t0000") for session in ("s-1", "s-2", "s-3")]
        LazyEdgeTable(db).append_lines([*odd, *mine])
        queue = LazyEdgeQueue(settings.queue_path)
        queue.append_lines([*odd, *mine])
        records = QueueWithdrawalStore(db)
        records.record("s-1", ["memory:s-1-t0000"])
        records.record(SESSION_UNKNOWN, ["memory:s-2-t0000"], extraction_stands=False)
        records.record("s-3")

        assert withdraw_retracted(db, queue=queue) == {"queue_lines_withdrawn": 6, "retractions_withdrawn": 3}

        assert [row[0] + "\n" for row in db.query("SELECT line FROM lazy_edges ORDER BY id")] == [line.decode() for line in odd]
        assert [line + b"\n" for line in settings.queue_path.read_bytes().splitlines() if line.strip()] == odd
        assert records.pending() == []
        assert [row.session_id for row in ClaimStore(db, owner="w", lease_seconds=60).claim(limit=5)] == ["s-1"]
    finally:
        db.close()


def test_a_dead_letter_blanking_that_finds_the_disk_full_leaves_no_copy(tmp_path: Path) -> None:
    """A withdrawal blanks the dead-letter file's records by writing a blanked copy and renaming it
    over the file. A disk without room for the copy stopped it midway, and the partial copy stayed
    (until the next withdrawal or drain): the records it was to blank — a forgotten turn's words —
    and the space the disk lacked, which the database on the same disk needs to go on. Now the copy
    goes with the failure; the dead-letter file is as it was, and the next withdrawal blanks it.
    ``RLIMIT_FSIZE`` below the file's size refuses the copy (``EFBIG``, as ``ENOSPC``)."""
    from pipelines.lazy_edge import ExtractionLines, dead_letter_record
    from tests.test_audit20_queue_full import files_grow_no_further_than

    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    forgotten = _extraction_line("s-1", "memory:s-1-t0000")
    record = dead_letter_record(forgotten, reason="unresolved", detail="", attempts=5, at="2026-11-01T00:00:00Z")
    agent = json.dumps({**record, "line": edge_line({"source": "memory:a", "target": "memory:b", "relationship": "X"}).decode()})
    content = (json.dumps(record) + "\n" + (agent + "\n") * 2000).encode()
    queue.dead_letter_path.write_bytes(content)
    lines = ExtractionLines.of("s-1", turn="memory:s-1-t0000")

    with files_grow_no_further_than(len(content) // 2), queue.exclusive(), pytest.raises(OSError):
        queue.blank(lines.matches, lines.matches_dead_letter)

    assert not queue.blanking_path.exists()
    assert queue.dead_letter_path.read_bytes() == content
    with queue.exclusive():
        assert queue.blank(lines.matches, lines.matches_dead_letter) == 1
    assert b"s-1-t0000" not in queue.dead_letter_path.read_bytes()


def _refuse_erase_settling(settings: Settings, *, refuse: bool = True) -> None:
    """Make the graph database refuse (``refuse``; else allow again) to take an erase off
    ``rem_counters`` ``erase_due`` once the erase completed."""
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            if not refuse:
                conn.execute("DROP TRIGGER refuse_erase" + ("" if settings.database_url is None else " ON rem_counters"))
            elif settings.database_url is None:
                conn.execute("CREATE TRIGGER refuse_erase BEFORE UPDATE ON rem_counters WHEN OLD.name = 'erase_due' "
                             f"AND NEW.value < OLD.value BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END")
            else:
                conn.execute("CREATE FUNCTION refuse_erase() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN IF OLD.name = 'erase_due' "
                             f"AND NEW.value < OLD.value THEN RAISE EXCEPTION '{REFUSED}'; END IF; RETURN NEW; END$$")
                conn.execute("CREATE TRIGGER refuse_erase BEFORE UPDATE ON rem_counters FOR EACH ROW EXECUTE FUNCTION refuse_erase()")
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_forget_the_database_fails_after_its_commit_is_done_and_leaves_the_rest_to_a_drain(
    settings: Settings, database_url: str | None,
) -> None:
    """``rem-cycle forget`` commits, then withdraws its lines and erases, writing after its commit
    (the record's delete, the erase counter). The database failing there (locked past the wait,
    gone, its disk full; here a trigger refusing both writes) made a forget that was done exit 1
    with the database's error alone, as if nothing had been forgotten. Now it is reported done
    (exit 0) with a warning for each part left, which stays recorded: a drain finishes it."""
    from tests.test_forgetdur import _env

    open_database(settings).close()
    _refuse_settling(settings)
    _refuse_erase_settling(settings)

    done = run_cli("forget", "--memory", "s-x-t0000", "--json", env=_env(settings, database_url))

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["tombstone"] is True and REFUSED in report["queue_error"] and REFUSED in report["erase_error"]
    assert report["erased"] is False
    assert "the forget is done" in done.stderr and "the next cycle or rem-cycle drain withdraws them" in done.stderr
    assert _records(settings) == [(SESSION_UNKNOWN, "memory:s-x-t0000")]
    _accept_settling(settings)
    _refuse_erase_settling(settings, refuse=False)
    drained = json.loads(run_cli("drain", "--json", env=_env(settings, database_url)).stdout)
    assert (drained["retractions_withdrawn"], drained["erased"]) == (1, True)
    assert _records(settings) == []


def test_a_queue_row_that_is_not_utf8_does_not_stop_a_withdrawal(settings: Settings) -> None:
    """SQLite keeps the bytes a producer's INSERT gives it; the drain reads such a row as bytes and
    dead-letters it, but the withdrawal read its page of rows as text and raised ``Could not decode
    to UTF-8`` — in every cycle's ingest and every ``rem-cycle drain`` (each withdraws first), so no
    drain ever came to dead-letter the row, and the record stayed (its session never claimed).
    Now the withdrawal reads such a row as bytes too: it is no extraction's line, and stays."""
    import sqlite3

    db = open_database(settings)
    try:
        LazyEdgeTable(db).append_lines([_extraction_line("s-1", "memory:s-1-t0000")])
        latin1 = _extraction_line("s-1", "memory:s-1-t0000", "CITES").replace(b"retry", b"r\xe9try")  # an agent's
        raw = sqlite3.connect(settings.graph_path)
        raw.execute("INSERT INTO lazy_edges(line, enqueued_at) VALUES (CAST(? AS TEXT), 't')", (latin1,))
        raw.commit()
        raw.close()
        QueueWithdrawalStore(db).record("s-1")

        assert withdraw_retracted(db, queue=LazyEdgeQueue(settings.queue_path)) == {
            "queue_lines_withdrawn": 1, "retractions_withdrawn": 1}
        assert [row[0] for row in db.query("SELECT CAST(line AS BLOB) FROM lazy_edges")] == [latin1]
    finally:
        db.close()
