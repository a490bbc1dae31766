"""A drain batch whose COMMIT is lost with the connection (a PostgreSQL restart at that instant):
the batch is linked again on a new connection, and the file queue's re-queued and dead-lettered
lines must be written once. The instant cannot be hit on purpose with a real server, so the unit
of work loses its first outermost commit (rolled back, then ``DatabaseUnreadableError``, what the
PostgreSQL adapter raises); the database, queue files and Chroma are real."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from store.errors import DatabaseUnreadableError
from tests.lazy_fixtures import add_concepts, drain, queue_of, read_jsonl, seed_standard
from worker.cycle import Stores


class FirstCommitLost:
    """``unit`` whose first outermost transaction is rolled back at its end and reported lost."""

    def __init__(self, unit: Any) -> None:
        self._unit = unit
        self._depth = 0
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._unit, name)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        self._depth += 1
        try:
            with self._unit.transaction() as conn:
                yield conn
                if self._depth == 1 and not self.lost:
                    self.lost += 1
                    raise DatabaseUnreadableError("the PostgreSQL server closed the connection (at COMMIT)")
        finally:
            self._depth -= 1


@pytest.mark.both_backends
async def test_a_batch_whose_commit_was_lost_writes_its_requeued_lines_once(
    settings: Settings, stores: Stores, tmp_path: Path
) -> None:
    """Before, the lost attempt had already written the batch's re-queued line to the scratch file,
    and the second wrote it again: the line came back twice (and a dead letter would be doubled)."""
    await seed_standard(stores, settings, tmp_path)
    add_concepts(stores.graph, "graph")
    queue = queue_of(settings)
    queue.append([{"source": "CONCEPT:graph", "target": "memory:nope", "relationship": "MENTIONED_IN"},
                  {"source": "CONCEPT:graph", "target": "memory:s-1-t0000", "relationship": "MENTIONED_IN"}])
    unit = FirstCommitLost(stores.unit)
    stats = await drain(settings, stores, unit=unit)
    assert unit.lost == 1
    assert (stats.succeeded, stats.requeued) == (1, 1)
    assert [line["target"] for line in read_jsonl(queue.path)] == ["memory:nope"]
    assert stores.graph.get_edge("CONCEPT:graph", "memory:s-1-t0000", "MENTIONED_IN") is not None
