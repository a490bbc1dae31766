"""A retraction's withdrawal record takes only the lines that were queued before it
(rewriteerase, nineteenth session).

A record in ``queue_withdrawals`` (store/withdrawals.py) names an anchor, or one of its turns, whose
extraction's queue lines are to be withdrawn; the lines are matched by what they name, not by
when they were queued. While a record waited (its withdrawal failed: a drain holding the queue
files, a database error), the session's rows could come back to Chroma and a worker extract it
again: the record then withdrew the new extraction's lines too, and their edges were lost for good
(the session, digested, is not extracted again). Now a session with a record pending is not
extracted until its record is withdrawn. Real embedded Chroma, real cycles, the queue file and the
queue table, both engines; the failure is the database's own (a trigger refusing the record's delete).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config import Settings
from store.backend import open_database
from store.lazy_queue import LazyEdgeQueue
from tests.test_erase_due import _seed
from tests.test_forget_queue import LATE_REF, OLD_REF, _session
from tests.test_forget_rest import rows_holding
from tests.test_retract_queue import _built, _cycle, _delete_rows, _queue_text
from worker.cycle import PHASES, open_stores, run_cycle
from worker.report import collect_status, print_status

NEW_REF = "zqnewref6620"  # a session id only the rows written back name
REFUSED = "the record refused"


def _refuse_settling(settings: Settings) -> None:
    """Make the graph database refuse to delete a ``queue_withdrawals`` row: each withdrawal then
    fails after its lines went, and its record stays."""
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            if settings.database_url is None:
                conn.execute(f"CREATE TRIGGER refuse_settle BEFORE DELETE ON queue_withdrawals BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END")
            else:
                conn.execute(f"CREATE FUNCTION refuse_settle() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION '{REFUSED}'; END$$")
                conn.execute("CREATE TRIGGER refuse_settle BEFORE DELETE ON queue_withdrawals FOR EACH ROW EXECUTE FUNCTION refuse_settle()")
    finally:
        db.close()


def _accept_settling(settings: Settings) -> None:
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            conn.execute("DROP TRIGGER refuse_settle" + ("" if settings.database_url is None else " ON queue_withdrawals"))
    finally:
        db.close()


def _records(settings: Settings) -> list[tuple[str, str]]:
    db = open_database(settings)
    try:
        return sorted((r[0], r[1]) for r in db.query("SELECT chunk_key, turn FROM queue_withdrawals"))
    finally:
        db.close()


async def _status(settings: Settings, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """What ``rem-cycle status`` reports over ``settings``' data: its data (``--json``) and its text."""
    stores = await open_stores(settings)
    try:
        status = collect_status(settings, stores)
    finally:
        stores.close()
    capsys.readouterr()
    print_status(status)
    return status, capsys.readouterr().out


def _queued(settings: Settings, word: str) -> bool:
    """Whether a line (or dead letter) of the queue file or table holds ``word``."""
    return word in _queue_text(LazyEdgeQueue(settings.queue_path)) or any(
        row.startswith(("lazy_edges: ", "lazy_edges_dead: ")) for row in rows_holding(settings, word))


# (queue form, what the retraction took, its rows, the session written back, its record)
CASES = [
    pytest.param("file", ["s-late-t0000"], ("s-late",), _session("s-late", [f"GraphStore moved, see session:{NEW_REF}-notes."]),
                 ("s-late", ""), id="file-session"),
    pytest.param("database", ["s-gone-t0000"], (), _session("s-gone", [f"ConfigLoader notes are in session:{NEW_REF}-archive.",
                                                                       "GraphStore was in memory:zqlegacy7720-x."]),
                 ("s-gone", "memory:s-gone-t0000"), id="table-turn"),
]


@pytest.mark.both_backends
@pytest.mark.parametrize(("queue", "rows", "summaries", "written_back", "record"), CASES)
async def test_a_withdrawal_recorded_before_a_session_came_back_leaves_its_new_extractions_lines(
    settings: Settings, tmp_path: Path, queue: str, rows: list[str], summaries: tuple[str, ...],
    written_back: dict[str, object], record: tuple[str, str], capsys: pytest.CaptureFixture[str],
) -> None:
    mine = await _built(settings, tmp_path, lazy_queue=queue)
    old = LATE_REF if record[0] == "s-late" else OLD_REF
    assert _queued(mine, old)
    _refuse_settling(mine)
    scan_all = mine.model_copy(update={"full_scan_interval_seconds": 0})

    # The rows leave Chroma: the retraction commits, its lines go, but its record stays.
    await _delete_rows(mine, rows, sessions=summaries)
    retracting = await run_cycle(scan_all)
    assert (retracting.outcome, retracting.failure_phase) == ("failed", "ingest") and REFUSED in retracting.message
    assert not _queued(mine, old) and _records(mine) == [record]

    # They come back (another text): the session is synced again; its record still cannot go.
    await _seed(mine, [written_back], tmp_path)
    syncing = await run_cycle(scan_all)
    assert (syncing.outcome, syncing.failure_phase) == ("failed", "ingest")
    assert _records(mine) == [record]
    # A worker extracting beside the leader (REM_SHARED_EXTRACT: what a follower runs) does not
    # extract the session while its record waits: its new lines would be taken for the old ones.
    following = await run_cycle(mine, phases=tuple(p for p in PHASES if p[0] in ("provider-ready", "extract")))
    assert following.outcome == "completed", following.message
    # ``status`` names the session that waits (twentieth session: before, it said nothing of it).
    status, text = await _status(mine, capsys)
    assert status["withdrawal_waits"] == {"sessions": 1, "first": [record[0]]}
    assert f"waiting: 1 sessions are not extracted until the queue lines of what was taken out or rewritten of them are " \
           f"withdrawn ({record[0]})" in text

    # The fault gone, the next cycle withdraws what the record names and settles it. Before, the
    # follower had extracted the session and queued its new line, which that withdrawal took: the
    # edge was lost (the session, digested, was not extracted again).
    _accept_settling(mine)
    result = await _cycle(mine)
    assert _queued(mine, NEW_REF) and not _queued(mine, old)
    assert _records(mine) == [] and result.phases["ingest"]["retractions_withdrawn"] == 1
    # Now the session is extracted once, after the withdrawal, by the cycle that made it.
    assert (following.phases["extract"]["sessions_digested"], result.phases["extract"]["sessions_digested"]) == (0, 1)
