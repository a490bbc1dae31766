"""erasedue2's erase and its backoff, attacked (audit20): what holds an erase back must be a reader
that keeps the deleted rows, not a ``VACUUM`` running elsewhere; and a retry time written by a clock
ahead of this one (another host's, or this one's before it was set back) must not hold the erase
back for longer than the longest wait. Real SQLite files, real PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from config import Settings
from store.backend import open_database
from store.erasure import RETRY_MAX_SECONDS, EraseDueStore, EraseState
from tests.daemon_support import wait_for
from worker.knowledge import erase_when_due

# Pages of a table of this test's own that a ``VACUUM`` throttled to one page per 100 ms reads for
# ~20 s: it is still running when the erase looks (the test cancels it once done).
_PAGES = 200


@contextmanager
def vacuum_running_elsewhere(url: str) -> Iterator[None]:
    """Another client's plain ``VACUUM`` (what autovacuum runs) of a table of its own, in progress
    for the whole block: throttled by its cost delay, cancelled at the end."""
    admin = psycopg.connect(url, autocommit=True)
    admin.execute("CREATE TABLE audit20_big (id INTEGER, filler TEXT)")
    admin.execute("INSERT INTO audit20_big SELECT g, repeat('x', 200) FROM generate_series(1, %s) g", (_PAGES * 35,))
    vacuum = psycopg.connect(url, autocommit=True)
    pid = vacuum.info.backend_pid

    def run() -> None:
        vacuum.execute("SET vacuum_cost_delay = 100")
        vacuum.execute("SET vacuum_cost_limit = 1")
        try:
            vacuum.execute("VACUUM audit20_big")
        except psycopg.errors.QueryCanceled:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: admin.execute("SELECT 1 FROM pg_stat_progress_vacuum WHERE pid = %s", (pid,)).fetchone() is not None,
                 timeout=10, interval=0.05, what="the VACUUM elsewhere to start")
        yield
    finally:
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
        thread.join(timeout=10)
        vacuum.close()
        admin.close()


@pytest.mark.own_database
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_vacuum_running_elsewhere_does_not_hold_an_erase_back(settings: Settings, database_url: str) -> None:
    """Another client's plain ``VACUUM`` (autovacuum's, on a big table) is running when a deletion
    commits and an erase is due. PostgreSQL does not let a running ``VACUUM`` keep rows that later
    ``VACUUM``s may remove, so the erase completes at once: ``erased: true``, nothing counted.
    Before, the ``VACUUM``'s snapshot read as a reader's: the erase waited its whole timeout and
    said ``erased: false``, counted a failure and was put off (60 s, doubling) for as long as such
    ``VACUUM``s ran."""
    db = open_database(settings, timeout=2.0)
    try:
        with vacuum_running_elsewhere(database_url):
            EraseDueStore(db).mark()  # a deletion's transaction, committed after the VACUUM began
            started = time.monotonic()
            done = erase_when_due(db)
            waited = time.monotonic() - started
        assert done.get("erased") is True, done
        assert waited < 2.0
        assert EraseDueStore(db).state() == EraseState()
    finally:
        db.close()


@pytest.mark.own_database
@pytest.mark.both_backends
def test_a_retry_time_set_by_a_clock_ahead_holds_the_erase_back_no_longer_than_the_longest_wait(settings: Settings) -> None:
    """A worker whose clock is a day ahead (another host's, or this one's before it was set back)
    fails an erase — a reader holds an old snapshot — and records the retry for a minute after its
    own time. This host's clock reads the time a day before that: the retry is further off than
    any wait the backoff sets (at most :data:`RETRY_MAX_SECONDS`), so its first cycle, the reader
    gone, erases. Before, every cycle skipped the erase for a day and a minute (``erase_retry_at``
    a day ahead), the deleted text kept in the files all that time."""
    reader, db = open_database(settings), open_database(settings, timeout=0.5)
    try:
        EraseDueStore(db).mark()
        ahead = time.time() + 86_400
        with reader.read_snapshot():
            reader.query("SELECT COUNT(*) FROM recall_turns")  # the snapshot is taken by the first read
            EraseDueStore(db).mark()  # a deletion the reader's snapshot does not see
            failed = erase_when_due(db, now=ahead)
        assert (failed["erased"], failed["erase_failures"]) == (False, 1)
        assert EraseDueStore(db).state().retry_at > time.time() + RETRY_MAX_SECONDS
        done = erase_when_due(db)  # this host's clock
        assert done.get("erased") is True, done
        assert EraseDueStore(db).state() == EraseState()
    finally:
        db.close()
        reader.close()
