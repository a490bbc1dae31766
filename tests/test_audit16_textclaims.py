"""audit16: text claims (store/claims.py TextClaimStore) at the moment a holder lands its answer."""

from __future__ import annotations

import threading
import time

import pytest

from config import Settings
from store.backend import open_database
from store.chunks import ChunkResultStore
from store.claims import TextClaimStore
from store.db import Database


def _blocked_on_a_lock(db: Database) -> bool:
    """Whether a claim of this database's waits on a lock (PostgreSQL; on SQLite, where the waiter's
    ``BEGIN IMMEDIATE`` waits and cannot be seen, assumed after a pause)."""
    if not db.dialect.postgres:
        time.sleep(0.5)
        return True
    # Inside the holder's open transaction PostgreSQL keeps the first read of pg_stat_activity for
    # the whole transaction: clear it, or a first look taken before the waiter blocked is all we see.
    db.query("SELECT pg_stat_clear_snapshot()")
    return bool(db.query(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
        "AND query LIKE '%text_claims%'")[0][0])


@pytest.mark.both_backends
def test_a_claim_racing_the_holders_landing_sees_its_answer(settings: Settings) -> None:
    """The holder stores its answer and deletes its claim in one commit while another worker's claim
    is under way (it read before that commit and waits on the claim row): that worker reuses the
    answer. Before audit16 on PostgreSQL it looked for an answer first, in a statement of its own
    (READ COMMITTED: before the commit), then took the claim freed by it — ``mine``: the same words
    paid for twice. SQLite's ``BEGIN IMMEDIATE`` orders the two transactions whole."""
    holder_db, waiter_db = open_database(settings), open_database(settings)
    try:
        holder = TextClaimStore(holder_db, owner="elsewhere:1:x", lease_seconds=60)
        waiter = TextClaimStore(waiter_db, owner="elsewhere:2:x", lease_seconds=60)
        assert holder.claim("fp", "t1") == "mine"
        found: list[str] = []
        with holder_db.transaction():
            ChunkResultStore(holder_db).record_ok(
                session_id="s", chunk_id="s:chunk:0", content_hash="c1", text_hash="t1", memory_ids=["m1"],
                fingerprint="fp", tokens_in=1, tokens_out=1, latency_ms=1.0, payload={}, run_id=None)
            holder.land("fp", "t1")
            racer = threading.Thread(target=lambda: found.append(waiter.claim("fp", "t1")))
            racer.start()
            deadline = time.monotonic() + 10
            while not _blocked_on_a_lock(holder_db):
                assert time.monotonic() < deadline, "the waiter's claim never waited on the holder's row"
                time.sleep(0.01)
        racer.join(timeout=30)
        assert found == ["answered"]
        assert waiter_db.query("SELECT COUNT(*) FROM text_claims")[0][0] == 0
    finally:
        holder_db.close()
        waiter_db.close()
