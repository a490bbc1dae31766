"""Session claims and single-flight locks in the database (store/claims.py), and the cycle's leader /
follower split (REM_SHARED_EXTRACT): real SQLite files and a real PostgreSQL server (``both_backends``),
two connections as two workers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.backend import open_database
from store.claims import CYCLE_LOCK, ClaimLostError, ClaimStore, LockStore, host_identity, owner_is_dead, worker_owner
from store.runstate import RunStateStore, SessionRevision
from tests.conftest import SAMPLE
from worker.cycle import PHASES, CycleBusyError, run_cycle, single_flight

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


OpenDatabase = Callable[..., Any]


def ingested(open_graph_database: OpenDatabase, path: Path, count: int) -> None:
    db = open_graph_database(path)
    try:
        runstate = RunStateStore(db)
        for i in range(count):
            runstate.mark_ingested(SessionRevision(f"s{i:02d}", "r1", f"2026-11-{1 + i:02d}T00:00:00Z"), "run-x")
    finally:
        db.close()


def dead_owner() -> str:
    """The owner id of a process of this host that has exited."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return f"{host_identity()}:{proc.stdout.strip()}:deadbeef"


@pytest.mark.both_backends
def test_two_workers_claim_disjoint_sessions_oldest_first(tmp_path: Path, open_graph_database: OpenDatabase) -> None:
    path = tmp_path / "g.db"
    ingested(open_graph_database, path, 10)
    one, two = open_graph_database(path), open_graph_database(path)
    try:
        a = ClaimStore(one, owner="h:1:a", lease_seconds=60, clock=Clock())
        b = ClaimStore(two, owner="h:2:b", lease_seconds=60, clock=Clock())
        first = [r.session_id for r in a.claim(4)]
        second = [r.session_id for r in b.claim(4)]
        rest = [r.session_id for r in a.claim(10)]
        assert first == ["s00", "s01", "s02", "s03"]
        assert second == ["s04", "s05", "s06", "s07"]
        assert rest == ["s08", "s09"]
        assert b.claim(10) == []  # everything is claimed by a live worker
        assert b.release(["s04"]) == 1 and [r.session_id for r in a.claim(10)] == ["s04"]
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_on_postgresql_claimers_skip_each_others_locked_rows_instead_of_waiting(tmp_path: Path, open_graph_database: OpenDatabase) -> None:
    """While one claimer's transaction is still open (its candidate rows locked, its claims not yet
    visible), another claims the next sessions at once: ``FOR UPDATE OF d SKIP LOCKED``. Without
    SKIP LOCKED the second would wait on the first's row locks and fail after its 2 s lock timeout."""
    path = tmp_path / "g.db"
    ingested(open_graph_database, path, 8)
    one, two = open_graph_database(path), open_graph_database(path, timeout=2.0)
    try:
        a = ClaimStore(one, owner="h:1:a", lease_seconds=60, clock=Clock())
        b = ClaimStore(two, owner="h:2:b", lease_seconds=60, clock=Clock())
        with one.transaction():  # a's claim transaction stays open
            assert [r.session_id for r in a.claim(3)] == ["s00", "s01", "s02"]
            assert [r.session_id for r in b.claim(3)] == ["s03", "s04", "s05"]
        assert [r.session_id for r in b.claim(5)] == ["s06", "s07"]  # a's claims are visible now
        owners = dict(one.query("SELECT session_id, owner FROM session_claims"))
        assert owners == {**{f"s0{i}": "h:1:a" for i in range(3)}, **{f"s0{i}": "h:2:b" for i in range(3, 8)}}
    finally:
        one.close()
        two.close()


@pytest.mark.both_backends
def test_an_expired_claim_is_taken_over_and_the_old_owner_cannot_commit(tmp_path: Path, open_graph_database: OpenDatabase) -> None:
    path = tmp_path / "g.db"
    ingested(open_graph_database, path, 2)
    db = open_graph_database(path)
    clock = Clock()
    try:
        slow = ClaimStore(db, owner="h:1:slow", lease_seconds=30, clock=clock)
        other = ClaimStore(db, owner="h:2:other", lease_seconds=30, clock=clock)
        assert [r.session_id for r in slow.claim(1)] == ["s00"]
        clock.now = T0 + timedelta(seconds=20)
        assert slow.heartbeat() == 1  # the lease now runs to T0 + 50 s
        clock.now = T0 + timedelta(seconds=45)
        assert [r.session_id for r in other.claim(5)] == ["s01"]  # s00's lease still runs
        clock.now = T0 + timedelta(seconds=51)
        assert [r.session_id for r in other.claim(5)] == ["s00"]  # taken over
        runstate = RunStateStore(db)
        with pytest.raises(ClaimLostError):
            with db.transaction():
                runstate.mark_digested("s00", "r1", "run-slow")
                slow.settle("s00")
        assert runstate.get_digests(["s00"])["s00"].state == "undigested"  # rolled back
        with db.transaction():
            other.settle("s00")
            runstate.mark_digested("s00", "r1", "run-other")
        assert runstate.get_digests(["s00"])["s00"].state == "digested"
        assert [r[0] for r in db.query("SELECT session_id FROM session_claims ORDER BY 1")] == ["s01"]
        assert runstate.commits_since(0) == (1, ["s00"])
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_dead_local_workers_claims_and_lock_are_taken_over_at_once(tmp_path: Path, open_graph_database: OpenDatabase) -> None:
    path = tmp_path / "g.db"
    ingested(open_graph_database, path, 3)
    db = open_graph_database(path)
    dead = dead_owner()
    try:
        assert owner_is_dead(dead) and not owner_is_dead(worker_owner())
        assert not owner_is_dead("another-host:1:x")  # another host's process is never known dead
        assert [r.session_id for r in ClaimStore(db, owner=dead, lease_seconds=3600).claim(3)] == ["s00", "s01", "s02"]
        assert LockStore(db, owner=dead, lease_seconds=3600).acquire(CYCLE_LOCK)
        live = worker_owner()
        assert [r.session_id for r in ClaimStore(db, owner=live, lease_seconds=60).claim(5)] == ["s00", "s01", "s02"]
        assert LockStore(db, owner=live, lease_seconds=60).acquire(CYCLE_LOCK)
    finally:
        db.close()


@pytest.mark.both_backends
def test_the_single_flight_lock_has_one_holder_until_released_or_expired(tmp_path: Path, open_graph_database: OpenDatabase) -> None:
    db = open_graph_database(tmp_path / "g.db")
    clock = Clock()
    try:
        a = LockStore(db, owner="h:1:a", lease_seconds=10, clock=clock)
        b = LockStore(db, owner="h:2:b", lease_seconds=10, clock=clock)
        assert a.acquire(CYCLE_LOCK) and not b.acquire(CYCLE_LOCK)
        assert a.acquire(CYCLE_LOCK)  # re-entrant for its holder
        assert b.acquire("another-lock")
        clock.now = T0 + timedelta(seconds=8)
        assert a.heartbeat(CYCLE_LOCK)
        clock.now = T0 + timedelta(seconds=15)
        assert not b.acquire(CYCLE_LOCK)  # the beat pushed the lease to T0 + 18 s
        a.release(CYCLE_LOCK)
        assert b.acquire(CYCLE_LOCK) and b.holder(CYCLE_LOCK) == "h:2:b"
        clock.now = T0 + timedelta(seconds=40)
        assert not b.heartbeat("no-such-lock")
        assert a.acquire(CYCLE_LOCK)  # b's lease ran out
    finally:
        db.close()


@pytest.mark.both_backends
def test_concurrent_claimers_and_lockers_on_their_own_connections_never_share(tmp_path: Path, open_graph_database: OpenDatabase) -> None:
    """Six workers (threads, one connection each) claim and take the single-flight lock at once:
    every session is claimed by exactly one of them, and the lock has exactly one holder."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    path = tmp_path / "g.db"
    ingested(open_graph_database, path, 24)
    start = Barrier(6)

    def worker(n: int) -> tuple[list[str], bool]:
        db = open_graph_database(path)
        try:
            claims = ClaimStore(db, owner=f"h:{n}:w", lease_seconds=60)
            lock = LockStore(db, owner=f"h:{n}:w", lease_seconds=60)
            start.wait()
            got: list[str] = []
            while batch := claims.claim(3):
                got += [r.session_id for r in batch]
            return got, lock.acquire(CYCLE_LOCK)
        finally:
            db.close()

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(worker, range(6)))
    claimed = [sid for got, _ in results for sid in got]
    assert sorted(claimed) == [f"s{i:02d}" for i in range(24)]  # each once
    assert sum(held for _, held in results) == 1


@pytest.mark.both_backends
async def test_a_follower_digests_claimed_sessions_while_another_cycle_holds_single_flight(
    settings: Settings, clean_env: pytest.MonkeyPatch
) -> None:
    await import_sessions(SAMPLE, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)
    # A leader that ingested and stopped (the batch limit) before extracting.
    ingest_only = await run_cycle(settings, phases=tuple(p for p in PHASES if p[0] == "ingest"))
    assert ingest_only.outcome == "completed"
    shared = settings.model_copy(update={"shared_extract": True})
    async with single_flight(settings):
        follower = await run_cycle(shared)
    assert follower.outcome == "completed", follower.message
    assert list(follower.phases) == ["provider-ready", "extract"]
    extracted = follower.phases["extract"]
    db = open_database(settings)
    try:
        digests = RunStateStore(db).digest_counts()
        assert extracted["sessions_digested"] == digests["digested"] == 26 and digests["undigested"] == 0
        assert db.query("SELECT COUNT(*) FROM session_claims")[0][0] == 0  # every claim settled
        assert db.query("SELECT COUNT(*) FROM rem_locks")[0][0] == 0  # the leader's lock was released
    finally:
        db.close()
    # Without REM_SHARED_EXTRACT a held lock still means busy.
    async with single_flight(settings):
        with pytest.raises(CycleBusyError):
            await run_cycle(settings)


@pytest.mark.both_backends
async def test_a_cycle_is_busy_while_another_host_holds_the_database_lock(settings: Settings) -> None:
    assert (await run_cycle(settings)).outcome == "completed"
    db = open_database(settings)
    try:
        assert LockStore(db, owner="elsewhere:1:x", lease_seconds=600).acquire(CYCLE_LOCK)
    finally:
        db.close()
    with pytest.raises(CycleBusyError, match="single-flight lock"):
        await run_cycle(settings)
    follower = await run_cycle(settings.model_copy(update={"shared_extract": True}))
    assert follower.outcome == "completed" and list(follower.phases) == ["provider-ready", "extract"]


@pytest.mark.both_backends
def test_graph_edits_wait_for_the_database_single_flight_lock(settings: Settings, open_graph_database: OpenDatabase) -> None:
    """``merge`` (like ``unmerge``, ``forget``, ``import-notes``) refuses with exit 3 while a cycle
    on another host holds the database's single-flight lock, and runs once it is released."""
    from tests.conftest import run_cli

    db = open_database(settings)
    other = LockStore(db, owner="elsewhere:1:x", lease_seconds=600)
    url = settings.database_url.get_secret_value() if settings.database_url else None
    env = {"REM_DATA_DIR": str(settings.data_dir), **({"REM_DATABASE_URL": url} if url else {})}
    try:
        assert other.acquire(CYCLE_LOCK)
        ingested(open_graph_database, settings.graph_path, 3)
        assert len(ClaimStore(db, owner="elsewhere:1:x", lease_seconds=600).claim(2)) == 2
        status = run_cli("status", "--json", env=env)
        leases = json.loads(status.stdout)["leases"]  # who holds what, for the operator
        assert [(lock["name"], lock["owner"]) for lock in leases["locks"]] == [(CYCLE_LOCK, "elsewhere:1:x")]
        assert [(claim["owner"], claim["sessions"]) for claim in leases["claims"]] == [("elsewhere:1:x", 2)]
        busy = run_cli("merge", "CLASS:A", "CLASS:B", env=env)
        assert busy.returncode == 3 and "single-flight lock (elsewhere:1:x)" in busy.stderr, busy.stderr
        other.release(CYCLE_LOCK)
        done = run_cli("merge", "CLASS:A", "CLASS:B", env=env)
        assert done.returncode == 1 and "no node" in done.stderr, done.stderr  # it ran: the nodes do not exist
        assert db.query("SELECT COUNT(*) FROM rem_locks")[0][0] == 0  # released after the edit
    finally:
        db.close()
