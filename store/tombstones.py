"""What ``rem-cycle forget`` removed (``tombstones``) and the run-state rows a forgotten session
leaves behind (digest, memory index, chunk results, identity candidates)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from store.db import Database, in_batches
from store.graph import utc_now
from store.ids import memory_node_id, row_kind, row_suffix
from store.scan_marks import ScanMarkStore

SESSION, MEMORY, NOTE = "session", "memory", "note"


class TombstoneStore:
    """Tombstones and the forgetting of a session's run state (inside the caller's transaction)."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    def bury(self, kind: str, item_id: str) -> None:
        """Record that ``item_id`` (a session id, memory id or note id) was forgotten."""
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO tombstones(kind, id, created_at) VALUES (?,?,?) ON CONFLICT DO NOTHING", (kind, item_id, self.clock()))

    def buried(self, kind: str, ids: Iterable[str] | None = None) -> set[str]:
        """The forgotten ids of ``kind`` (among ``ids`` when given: only those are looked up, so a
        session's extraction does not read every tombstone ever written)."""
        if ids is None:
            return {r[0] for r in self.db.query("SELECT id FROM tombstones WHERE kind = ?", (kind,))}
        found: set[str] = set()
        for part, marks in in_batches(sorted(set(ids))):
            found.update(r[0] for r in self.db.query(f"SELECT id FROM tombstones WHERE kind = ? AND id IN ({marks})", (kind, *part)))
        return found

    def session_memories(self, session_id: str) -> list[str]:
        """The memory ids of ``session_id``: its memory index and the MEMORY nodes that originate in
        its SESSION node (a back-filled turn has no index row)."""
        rows = self.db.query(
            "SELECT memory_id FROM memory_index WHERE session_id = ? UNION "
            "SELECT substr(source, 8) FROM edges WHERE target = ? AND relationship = 'ORIGINATES_IN' AND source LIKE 'memory:%'",
            (session_id, f"session:{session_id}"),
        )
        return sorted(r[0] for r in rows)

    def session_of_memory(self, memory_id: str) -> str | None:
        """The session a memory row was ingested under: its memory index row, else the session its
        provenance points are anchored to — a turn a retraction took out (its row left Chroma) has
        no index row and no MEMORY node left, but its points stay until its session is extracted
        again, and a forget of it must find them now. Reads the ``*_points_memory`` indexes
        (migration 24), never a scan. ``None`` for a turn neither names."""
        indexed = self.db.query("SELECT session_id FROM memory_index WHERE memory_id = ?", (memory_id,))
        if indexed:
            return indexed[0][0]
        node_id = memory_node_id(memory_id)
        anchors = self.db.query(
            "SELECT anchor FROM node_points WHERE memory_id = ? UNION SELECT anchor FROM edge_points WHERE memory_id = ?",
            (node_id, node_id),
        )
        return min((row_suffix(r[0]) for r in anchors if row_kind(r[0]) == "session"), default=None)

    def forget_memory_state(self, memory_id: str, session_id: str | None) -> int:
        """Delete a forgotten turn's memory index row and mark its session for re-extraction, so
        that what the session said of its nodes is recombined without the turn. The session's
        failed chunk attempts and its reason for being deferred go too: a model's refusal or a
        server's error message may quote the turn, and the re-extraction, on chunks without the
        turn, starts their count afresh anyway. Returns the failed chunk attempts deleted."""
        failed = 0
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM memory_index WHERE memory_id = ?", (memory_id,))
            if session_id:
                # A worker extracting the session read the turn: its commit must not write it back.
                conn.execute("DELETE FROM session_claims WHERE session_id = ?", (session_id,))
            # The change scan's marks assume the memory index holds every row before them: the next
            # scan reads every row (store/scan_marks.py), the marks kept to say what was written
            # again since (deleted, that scan could not tell: a redaction waiting for it stayed).
            ScanMarkStore(self.db).make_full_scan_due()
            if session_id:
                conn.execute(
                    "UPDATE session_digests SET state = 'undigested', digested_revision = NULL, attempts = 0, defer_reason = NULL "
                    "WHERE session_id = ?",
                    (session_id,),
                )
                failed = conn.execute("DELETE FROM chunk_results WHERE session_id = ? AND status = 'failed'", (session_id,)).rowcount
        return failed

    def forget_session_state(self, session_id: str, chunk_key: str) -> dict[str, int]:
        """Delete a session's digest, memory index, chunk results (keyed ``chunk_key``), the
        identity candidates it reported and the identity verdicts its extraction asked the model
        for. Returns rows deleted per table."""
        deleted = {}
        with self.db.transaction() as conn:
            for table, column, value in (
                ("session_digests", "session_id", session_id),
                ("memory_index", "session_id", session_id),
                ("chunk_results", "session_id", chunk_key),
                ("identity_candidates", "session_id", session_id),
                ("identity_verdicts", "session_id", session_id),
                # A worker extracting the session loses it: its commit rolls back (ClaimStore.settle).
                ("session_claims", "session_id", session_id),
            ):
                deleted[table] = conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (value,)).rowcount
        return deleted
