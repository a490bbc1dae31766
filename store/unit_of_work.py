"""The unit of work: the stores of one database connection and the transaction they share.

Pipelines never open a transaction on a connection themselves: they are handed a unit of work
(typed by :class:`pipelines.ports.UnitOfWork`) and write inside ``with unit.transaction():`` —
everything written through its stores in that block commits together, or nothing does when the
block raises. Blocks nest (only the outermost commits), as the engines' transactions do. Failures
are the :mod:`store.errors` family whichever engine holds the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from store.chunks import ChunkResultStore
from store.db import Database
from store.erasure import EraseDueStore
from store.graph import GraphStore, utc_now
from store.communities import CommunityStore
from store.merges import MergeStore
from store.provenance import ProvenanceStore
from store.recall_index import RecallIndex
from store.runstate import RunStateStore
from store.suppressions import SuppressionStore
from store.tombstones import TombstoneStore
from store.verdicts import VerdictStore
from store.withdrawals import QueueWithdrawalStore

T = TypeVar("T")


class DatabaseUnitOfWork:
    """Every store over ``db`` (SQLite or PostgreSQL), and :meth:`transaction` around their writes.
    ``clock`` stamps the rows the stores date (``utc_now``). ``fence``, when given, runs first in
    every transaction: what it raises (:class:`store.errors.LeaseLostError`) rolls it back."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now, fence: Callable[[], object] | None = None) -> None:
        self.db = db
        self.fence = fence
        self.graph = GraphStore(db, clock=clock)
        self.provenance = ProvenanceStore(db)
        self.merges = MergeStore(db, clock=clock)
        self.communities = CommunityStore(db, clock=clock)
        self.recall_index = RecallIndex(db)
        self.runstate = RunStateStore(db, clock=clock)
        self.chunks = ChunkResultStore(db, clock=clock)
        self.tombstones = TombstoneStore(db, clock=clock)
        self.verdicts = VerdictStore(db, clock=clock)
        self.suppressions = SuppressionStore(db, clock=clock)
        self.withdrawals = QueueWithdrawalStore(db, clock=clock)
        self.erasure = EraseDueStore(db)

    @contextmanager
    def transaction(self) -> Iterator[DatabaseUnitOfWork]:
        """One transaction around the block: commits when it ends, rolls back when it raises."""
        with self.db.transaction():
            if self.fence is not None:
                self.fence()
            yield self

    def write_locks_in_time(self, tables: Sequence[str]) -> bool:
        """Whether a writer of ``tables`` gets its locks within the database's statement timeout,
        now (:meth:`store.postgres.PostgresDatabase.write_locks_in_time`). Blocking."""
        return self.db.write_locks_in_time(tables)

    def apply(self, write: Callable[[], T]) -> T:
        """``write`` (a store's own transaction, which nests) inside a transaction of this unit, so
        the unit's fence holds for it; returns what ``write`` returns. Blocking."""
        with self.transaction():
            return write()
