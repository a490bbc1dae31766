"""``chroma_scan_state``: how far the ingest change scan has applied each Chroma collection.

Chroma returns a collection's rows in insertion order (an upsert of an existing id keeps its place;
a deleted row leaves a gap that the rows after it close up). A mark records how many rows, in that
order, the graph has applied and the ids that ended them, so the next scan reads only what comes
after — and, by finding those ids where it left them, knows that no row before them went away. The
last of those rows deleted and added back keeps its place (and so do the ids): the mark keeps a
fingerprint of that row too (``last_row``), which tells the next scan that it was written again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from store.db import Database


# A mark's ``full_scan_at`` that makes the next scan a full one, whatever its interval.
FULL_SCAN_DUE = "0001-01-01T00:00:00+00:00"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanMark:
    """One collection's mark: ``rows_applied`` rows in insertion order, ending with ``tail_ids``,
    read at ``location``; ``full_scan_at``: when the last full scan of every row was applied;
    ``last_row``: the fingerprint of the row of the last tail id (``pipelines.ingest.row_fingerprint``;
    empty when there is none, or the mark was written before marks kept it)."""

    collection: str
    location: str
    rows_applied: int
    tail_ids: tuple[str, ...]
    full_scan_at: str
    last_row: str = ""


class ScanMarkStore:
    """Typed access to ``chroma_scan_state``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def load(self) -> dict[str, ScanMark]:
        """Every collection's mark, by collection name."""
        rows = self.db.query("SELECT collection, location, rows_applied, tail_ids, full_scan_at, last_row FROM chroma_scan_state")
        return {
            r[0]: ScanMark(collection=r[0], location=r[1], rows_applied=int(r[2]), tail_ids=tuple(json.loads(r[3])), full_scan_at=r[4],
                           last_row=r[5])
            for r in rows
        }

    def save(self, marks: Iterable[ScanMark]) -> None:
        """Replace the marks of these collections (one transaction)."""
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO chroma_scan_state(collection, location, rows_applied, tail_ids, full_scan_at, last_row) VALUES (?,?,?,?,?,?) "
                "ON CONFLICT(collection) DO UPDATE SET location = excluded.location, rows_applied = excluded.rows_applied, "
                "tail_ids = excluded.tail_ids, full_scan_at = excluded.full_scan_at, last_row = excluded.last_row",
                [(m.collection, m.location, m.rows_applied, json.dumps(list(m.tail_ids)), m.full_scan_at, m.last_row) for m in marks],
            )

    def make_full_scan_due(self, marks: Iterable[ScanMark] = ()) -> None:
        """Save ``marks`` (if any) and make the next scan of every collection a full one, reading
        every row. The marks are kept, not deleted: that scan reads the rows after the memory
        mark's tail as written again, and its last row's fingerprint tells whether that row was —
        a rewrite made while the marks wait for it (a stopped or limited ingest, a forget) is seen."""
        with self.db.transaction() as conn:
            self.save(marks)
            conn.execute("UPDATE chroma_scan_state SET full_scan_at = ?", (FULL_SCAN_DUE,))
