"""The erase of a retraction's text from the database's files does not depend on the process that
retracted reaching its ``finalize`` (erasedue, seventeenth session). A retraction records in its
own transaction that an erase is due (``rem_counters`` ``erase_due``, store/erasure.py); a cycle's
``finalize`` erases while it is due and settles it once the erase completed. Before, the cycle kept
it in memory: a cycle killed between its retraction and its ``finalize`` left the retracted turn's
words in the full-text segments of the SQLite file (or the dead rows' pages on PostgreSQL) until
some later forget; and after ``rem-cycle backfill`` took a turn out (and erased at once), the next
cycle's re-extraction replaced what the extraction had said of the turn without erasing that.
Real embedded Chroma, a real ``rem-cycle --once`` process SIGKILLed while the loopback model
holds its extraction, the real ``backfill`` command, real files, both engines.

erasedue2 (eighteenth session): the commit that replaces what the model said of a retracted turn
makes the erase due, whichever cycle or worker makes it (not only the cycle after the backfill);
an erase a reader holds back is counted, said and tried again after a wait; on PostgreSQL it no
longer says ``erased: true`` while a reader's snapshot keeps the rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from store.backend import open_database
from store.chroma import ChromaStore
from store.erasure import RETRY_BASE_SECONDS, EraseDueStore, EraseState
from store.runstate import RunStateStore, SessionRevision
from store.unit_of_work import DatabaseUnitOfWork
from store.withdrawals import QueueWithdrawalStore
from tests.conftest import ROOT, run_cli
from tests.lazy_fixtures import seed_chroma
from tests.llm_server import LLMServer, held
from tests.test_crash_matrix import wait_for
from tests.test_forget_bytes import TURN_SECRET, _files_holding, _sessions
from tests.test_forget_rest import rows_holding
from tests.test_model_faults import fault_settings
from tests.test_retract_durable import _vacuums
from tests.test_retract_queue import _cycle, _delete_rows
from worker.cycle import Stores, open_stores, run_cycle
from worker.knowledge import erase_when_due

# One word to the full-text tokenizer, quoted by the heuristic extractor's description of
# PaymentGateway as long as the turn that first names it is in the session.
DESCRIPTION_SECRET = "zqdescsecret7731"


def _erase_due(settings: Settings) -> int:
    db = open_database(settings)
    try:
        return EraseDueStore(db).due()
    finally:
        db.close()


def _vacuum_count(settings: Settings, table: str) -> int:
    db = open_database(settings)
    try:
        return _vacuums(db, table)
    finally:
        db.close()


async def _seed(settings: Settings, sessions: list[dict[str, object]], tmp_path: Path) -> None:
    stores = await open_stores(settings)
    try:
        await seed_chroma(stores, settings, sessions, tmp_path)
    finally:
        stores.close()


@pytest.mark.both_backends
async def test_a_cycle_killed_between_its_retraction_and_its_finalize_leaves_the_erase_to_the_next_cycle(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    with LLMServer() as server:
        mine = fault_settings(settings.data_dir, server, database_url=database_url)
        await _seed(mine, _sessions(), tmp_path)
        await _cycle(mine)
        await _delete_rows(mine, ["s-keep-t0001"])
        # The retraction commits and its queue lines are withdrawn (the ingest's records of it
        # settled); then the re-extraction of s-keep waits on the model, and the process is killed.
        answer = held()
        server.script(answer)
        asked = server.chat_count
        env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {
            "PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(mine.data_dir), "REM_FULL_SCAN_INTERVAL_SECONDS": "0",
            "REM_LOG_LEVEL": "error", "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url,
        } | ({"REM_DATABASE_URL": database_url} if database_url else {})
        vacuumed = _vacuum_count(mine, "recall_turns") if database_url else 0
        proc = subprocess.Popen([sys.executable, "-m", "worker", "--once"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: server.chat_count > asked, proc.pid)
            assert proc.poll() is None, "the cycle ended before the kill"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            answer.release.set()
        assert rows_holding(mine, TURN_SECRET) == []  # retracted: out of every table
        if database_url is None:
            assert _files_holding(mine.data_dir, TURN_SECRET)  # but not out of the files yet

        finalize = (await _cycle(mine)).phases["finalize"]  # nothing left to retract: the record says
        if database_url:
            assert _vacuum_count(mine, "recall_turns") > vacuumed
        else:
            assert _files_holding(mine.data_dir, TURN_SECRET) == []
        assert finalize["erased"] is True
        assert _erase_due(mine) == 0
        assert "erased" not in (await _cycle(mine)).phases["finalize"]  # settled: an idle cycle does not erase


def _described_session() -> list[dict[str, object]]:
    turns = [f"The vault key for PaymentGateway is {DESCRIPTION_SECRET} and it rotates every week.",
             "PaymentGateway retries on timeout now, three times in a row."]
    return [{"sessionId": "s-desc", "title": "Session s-desc", "createdAt": "2026-11-01T10:00:00Z", "userId": "user-1",
             "summary": "PaymentGateway work.", "turns": [{"role": "user", "text": text} for text in turns]}]


@pytest.mark.both_backends
async def test_the_cycle_after_a_backfill_took_a_turn_out_erases_what_its_re_extraction_replaced(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    assert (await _backfill_taking_a_described_turn_out(settings, database_url, tmp_path))["erased"] is True
    # The backfill erased the turn; the extraction's description of PaymentGateway, which quotes
    # it, is live until the session is extracted again.
    await _re_extraction_erases_the_description(settings, database_url)


async def _backfill_taking_a_described_turn_out(settings: Settings, database_url: str | None, tmp_path: Path) -> dict[str, Any]:
    """s-desc extracted, then its first turn's row deleted and taken out by a real ``rem-cycle
    backfill``: its ``--json``."""
    await _seed(settings, _described_session(), tmp_path)
    await _cycle(settings)
    await _delete_rows(settings, ["s-desc-t0000"])
    env = {"REM_DATA_DIR": str(settings.data_dir)} | ({"REM_DATABASE_URL": database_url} if database_url else {})
    done = run_cli("backfill", "--days", "3650", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["turns_retracted"] == 1
    return report


async def _re_extraction_erases_the_description(settings: Settings, database_url: str | None) -> None:
    """The next cycle extracts s-desc again: PaymentGateway's description, which quotes the turn
    taken out and is live until then, leaves the rows and the files (on PostgreSQL: ``nodes`` is
    vacuumed), and the erase is settled."""
    assert any(row.startswith("nodes: CLASS:PaymentGateway ") for row in rows_holding(settings, DESCRIPTION_SECRET))
    vacuumed = _vacuum_count(settings, "nodes") if database_url else 0
    finalize = (await _cycle(settings)).phases["finalize"]
    assert rows_holding(settings, DESCRIPTION_SECRET) == []  # the re-extraction replaced the description
    if database_url:
        assert _vacuum_count(settings, "nodes") > vacuumed
    else:
        assert _files_holding(settings.data_dir, DESCRIPTION_SECRET) == []
    assert finalize["erased"] is True
    assert _erase_due(settings) == 0


@pytest.mark.both_backends
def test_two_leaders_settling_one_erase_leave_a_later_retraction_due(settings: Settings) -> None:
    """``finalize``'s erase is not fenced by the single-flight lock ("the other writes are the same
    whoever makes them"): a leader paused past its lease in its erase (a long VACUUM or full-text
    merge) and the leader that took over both read the one retraction due, both erase, both settle.
    The counter must not go below zero: a retraction recorded afterwards is due, and the next
    finalize erases its text. Two connections of a real database, the interleaving forced. Before:
    the second settle left -1, the retraction made it 0, and no finalize erased it."""
    stale, leader = open_database(settings), open_database(settings)
    try:
        EraseDueStore(leader).mark()
        read = [EraseDueStore(stale).due(), EraseDueStore(leader).due()]
        assert read == [1, 1]
        EraseDueStore(leader).settle(read[1])
        EraseDueStore(stale).settle(read[0])
        assert EraseDueStore(leader).due() == 0
        EraseDueStore(leader).mark()  # a later retraction
        assert EraseDueStore(stale).due() == 1
    finally:
        stale.close()
        leader.close()


@pytest.mark.both_backends
async def test_a_session_a_backfill_took_a_turn_of_re_extracted_cycles_later_is_erased_by_that_cycle(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    """The erase follows the deletion of what the model said of a retracted turn, wherever that
    happens: here two cycles after the backfill, the first having extracted an older session
    instead (the batch limit). Before: the first cycle settled the counter the backfill left, the
    second re-extracted s-desc without erasing, and its old description stayed in the files."""
    await _backfill_taking_a_described_turn_out(settings, database_url, tmp_path)
    older = {"sessionId": "s-older", "title": "Session s-older", "createdAt": "2026-10-01T10:00:00Z", "userId": "user-1",
             "summary": "RetryPolicy.", "turns": [{"role": "user", "text": "RetryPolicy wraps the HTTP client now."}]}
    await _seed(settings, [older], tmp_path)

    await _cycle(settings, batch_limit=1)  # ingests and extracts s-older, the oldest: not s-desc
    await _re_extraction_erases_the_description(settings, database_url)


@pytest.mark.own_database  # the reader it holds would hold the other tests' erases back
@pytest.mark.both_backends
async def test_an_erase_a_reader_holds_back_is_counted_said_and_tried_again_after_a_wait(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    """A reader holding an old snapshot (an export) keeps the erase from completing: SQLite cannot
    truncate its log, PostgreSQL's ``VACUUM`` keeps the dead rows that snapshot may read. The
    failure is counted, said (the run record, ``status --json``) and the erase is tried again only
    after a wait, not by every cycle; the retry after the wait, the reader gone, erases. The cycle's
    connection waits 0.5 s for a busy database instead of 30 s. Before: PostgreSQL reported
    ``erased: true`` and settled the counter (the rows stayed in the files until some later vacuum),
    SQLite retried at every cycle (the full-text merge and the 30 s wait each time), and neither
    said how long it had failed."""
    await _seed(settings, _sessions(), tmp_path)
    await _cycle(settings)
    await _delete_rows(settings, ["s-keep-t0001"])
    mine = settings.model_copy(update={"full_scan_interval_seconds": 0})
    env = {"REM_DATA_DIR": str(settings.data_dir)} | ({"REM_DATABASE_URL": database_url} if database_url else {})
    reader, db = open_database(settings), open_database(settings, timeout=0.5)
    stores = Stores(db=db, unit=DatabaseUnitOfWork(db), chroma=ChromaStore(settings))
    try:
        with reader.read_snapshot():
            reader.query("SELECT COUNT(*) FROM recall_turns")  # the snapshot is taken by the first read
            failed = (await run_cycle(mine, stores=stores)).phases["finalize"]  # retracts the turn, re-extracts s-keep
            assert rows_holding(settings, TURN_SECRET) == []
            assert (failed["erased"], failed["erase_failures"]) == (False, 1)
            assert failed["erase_due"] >= 1
            skipped = (await run_cycle(mine, stores=stores)).phases["finalize"]
            assert "erased" not in skipped  # not tried again before its time
            assert (skipped["erase_failures"], skipped["erase_retry_at"]) == (1, failed["erase_retry_at"])
            status = run_cli("status", "--json", env=env)
            assert status.returncode == 0, status.stderr
            assert json.loads(status.stdout)["erase"] == {k: failed[k] for k in ("erase_due", "erase_failures", "erase_retry_at")}
        if database_url is None:
            assert _files_holding(settings.data_dir, TURN_SECRET)
        state = EraseDueStore(db).state()
        assert state.retry_at - RETRY_BASE_SECONDS <= time.time()
        assert erase_when_due(db, now=state.retry_at - 1) == state.as_dict()  # still waiting
        done = erase_when_due(db, now=state.retry_at)  # what the first finalize after the wait runs
        assert done["erased"] is True
        assert EraseDueStore(db).state() == EraseState()
        if database_url is None:
            assert _files_holding(settings.data_dir, TURN_SECRET) == []
    finally:
        stores.close()
        reader.close()


@pytest.mark.both_backends
def test_any_worker_committing_a_session_a_retraction_cut_makes_the_erase_due_once(settings: Settings) -> None:
    """The rule lives in the commit's own record of the session (``mark_digested``), so the commit
    of a follower, of a cycle cycles later, or one rolled back and made again, makes the erase due
    in its transaction; a session no retraction cut, or committed since, makes none. Two
    connections of a real database: the retracting one, and a follower's committing."""
    leader, follower = open_database(settings), open_database(settings)
    try:
        for sid in ("s-cut", "s-other"):
            RunStateStore(leader).mark_ingested(SessionRevision(sid, "r1", "2026-11-01T00:00:00Z"), "run-l")
        QueueWithdrawalStore(leader).record("s-cut", ["memory:s-cut-t0000"])  # a turn of s-cut retracted
        EraseDueStore(leader).settle(EraseDueStore(leader).due())  # the retraction's own erase completed
        RunStateStore(follower).mark_digested("s-other", "r1", "run-f")
        assert EraseDueStore(leader).due() == 0
        with pytest.raises(RuntimeError), follower.transaction():  # a commit rolled back (its claim lost)
            RunStateStore(follower).mark_digested("s-cut", "r1", "run-f")
            raise RuntimeError
        assert EraseDueStore(leader).due() == 0
        RunStateStore(follower).mark_digested("s-cut", "r2", "run-f")
        assert EraseDueStore(leader).due() == 1
        RunStateStore(follower).mark_digested("s-cut", "r3", "run-f")  # its old rows quote no retracted turn now
        assert EraseDueStore(leader).due() == 1
    finally:
        leader.close()
        follower.close()
