"""Adversarial audit: two drains of the lazy-edge queue table on two hosts (their own data dirs and
queue locks, one database) that read the same rows. Real SQLite files and a real PostgreSQL server
(``both_backends``), two connections as the two drains."""

from __future__ import annotations

import pytest

from config import Settings
from pipelines.enqueue import enqueue_lazy_edges
from store.lazy_table import LazyEdgeTable, RowsTakenError
from tests.test_lazy_table import url_of, waiting
from worker.cycle import Stores


@pytest.mark.both_backends
async def test_a_row_another_drain_requeued_is_not_counted_twice(settings: Settings, stores: Stores, open_graph_database) -> None:  # type: ignore[no-untyped-def]
    """Drains A and B read the same row, whose endpoint cannot be found. A settles first: the row
    waits again with one attempt. B's fate for it was decided on the row as it was before A's: its
    settle must roll back (``RowsTakenError``), as when A had linked the row. Before, B found the
    row A put back under its id and counted a second attempt for the same pass — with a few drains
    a row was dead-lettered after fewer passes than ``REM_LAZY_MAX_ATTEMPTS``."""
    enqueue_lazy_edges(url_of(settings), [{"source": "CONCEPT:gone", "target": "CONCEPT:missing", "relationship": "R"}])
    other = open_graph_database(settings.graph_path)
    try:
        a, b = LazyEdgeTable(stores.db), LazyEdgeTable(other)
        seen_by_a = a.read_batch(after=0, up_to=a.last_id(), limit=10, max_bytes=10**6)
        seen_by_b = b.read_batch(after=0, up_to=b.last_id(), limit=10, max_bytes=10**6)
        assert seen_by_a == seen_by_b and len(seen_by_a) == 1
        a.settle(taken=seen_by_a, requeued=[(seen_by_a[0], "error: endpoint missing")], dead=[])
        with pytest.raises(RowsTakenError):
            b.settle(taken=seen_by_b, requeued=[(seen_by_b[0], "error: endpoint missing")], dead=[])
    finally:
        other.close()
    assert [(r["id"], r["attempts"]) for r in waiting(stores.db)] == [(seen_by_a[0].id, 1)]
