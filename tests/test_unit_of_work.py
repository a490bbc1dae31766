"""The unit of work owns transactions: a pipeline run against a unit of work whose stores fail half
way through leaves nothing written — on real database files (and PostgreSQL schemas), with a unit
of work that is not the database one (pipelines see only pipelines.ports' Protocols)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from pipelines.extract.commit import commit_session
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
from pipelines.extract.reduce import ReducedSession, reduce_session
from pipelines.forget import forget_session
from pipelines.ingest import sync_sessions_to_graph
from pipelines.ports import Graph, RecallWriter, Tombstones, UnitOfWork
from store.backend import canonical_dump
from store.errors import DatabaseBusyError, StoreError
from store.graph import Node
from store.unit_of_work import DatabaseUnitOfWork
from tests.conftest import make_session
from tests.lazy_fixtures import seed_chroma

pytestmark = pytest.mark.both_backends


class _FailsAfter:
    """A store that does what the real one does, then raises a store error from ``method`` — so
    the rows that call wrote are in the transaction when it fails."""

    def __init__(self, real: Any, method: str) -> None:
        self._real, self._method = real, method

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._real, name)
        if name != self._method:
            return attribute

        def failing(*args: Any, **kwargs: Any) -> Any:
            attribute(*args, **kwargs)
            raise DatabaseBusyError(f"injected failure after {name}")

        return failing


class FailingUnitOfWork:
    """A unit of work over the real stores of ``real`` whose ``store.method`` fails (after writing)."""

    def __init__(self, real: DatabaseUnitOfWork, *, store: str, method: str) -> None:
        self._real = real
        self._failing = {store: _FailsAfter(getattr(real, store), method)}
        self.provenance, self.merges, self.runstate, self.chunks = real.provenance, real.merges, real.runstate, real.chunks
        self.suppressions = real.suppressions

    @property
    def graph(self) -> Graph:
        return self._failing.get("graph", self._real.graph)

    @property
    def recall_index(self) -> RecallWriter:
        return self._failing.get("recall_index", self._real.recall_index)

    @property
    def tombstones(self) -> Tombstones:
        return self._failing.get("tombstones", self._real.tombstones)

    def transaction(self) -> AbstractContextManager[Any]:
        return self._real.transaction()


def _reduced(sid: str) -> ReducedSession:
    """Two nodes and an edge between them, said in turn 1 of session ``sid``."""
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, (UnitTurn(1, f"{sid}-m1", "LazyEdgeQueue uses DrainWorker"),), "h")
    raw = {
        "summary": "",
        "nodes": [
            {"id": "q", "type": "CLASS", "name": "LazyEdgeQueue", "description": "the queue", "evidence": [{"turn": 1, "quote": "LazyEdgeQueue"}]},
            {"id": "w", "type": "CLASS", "name": "DrainWorker", "evidence": [{"turn": 1, "quote": "DrainWorker"}]},
        ],
        "edges": [{"source": "q", "target": "w", "relationship": "DEPENDS_ON", "evidence": [{"turn": 1, "quote": "uses"}]}],
    }
    return reduce_session(sid, [validate_extraction(raw, work, semantic_types=("CLASS",))])


def _commit(unit: UnitOfWork, sid: str) -> None:
    commit_session(_reduced(sid), unit=unit, graph_index=None, on_commit=lambda: None, queue_append=len,
                   matcher=lambda candidates, index: {})


@pytest.fixture
def unit(tmp_path: Path, open_graph_database: Callable[..., Any]) -> Iterator[DatabaseUnitOfWork]:
    db = open_graph_database(tmp_path / "graph.sqlite3")
    unit = DatabaseUnitOfWork(db)
    unit.graph.upsert_nodes([Node("session:s1", "SESSION", "s1"), Node("memory:s1-m1", "MEMORY", "m")])
    yield unit
    db.close()


@pytest.mark.parametrize(("store", "method"), [("graph", "upsert_nodes"), ("graph", "link_nodes")])
def test_a_commit_failing_half_way_leaves_nothing_written(unit: DatabaseUnitOfWork, store: str, method: str) -> None:
    before = canonical_dump(unit.db)
    with pytest.raises(StoreError, match="injected"):
        _commit(FailingUnitOfWork(unit, store=store, method=method), "s1")
    assert canonical_dump(unit.db) == before
    _commit(unit, "s1")  # the same commit through the database's own unit of work
    after = canonical_dump(unit.db)
    assert {row[0] for row in after["nodes"]} >= {"CLASS:LazyEdgeQueue", "CLASS:DrainWorker"}
    assert ("CLASS:LazyEdgeQueue", "CLASS:DrainWorker", "DEPENDS_ON") in {row[:3] for row in after["edges"]}


def test_a_forget_failing_half_way_leaves_the_session_in_place(unit: DatabaseUnitOfWork) -> None:
    _commit(unit, "s1")
    before = canonical_dump(unit.db)
    with pytest.raises(StoreError, match="injected"):
        forget_session(FailingUnitOfWork(unit, store="tombstones", method="bury"), "s1")
    assert canonical_dump(unit.db) == before
    assert unit.db.query("SELECT COUNT(*) FROM tombstones")[0][0] == 0
    forget_session(unit, "s1")
    assert not unit.graph.existing_ids(["CLASS:LazyEdgeQueue", "session:s1"])


async def test_an_ingest_batch_failing_at_its_last_write_leaves_nothing_written(settings: Any, stores: Any, tmp_path: Path) -> None:
    """The recall index is written last in an ingest batch's transaction: when it fails, the batch's
    session and turn nodes, already written, go with it."""
    await seed_chroma(stores, settings, [make_session("a", 3), make_session("b", 2)], tmp_path)
    before = canonical_dump(stores.db)
    with pytest.raises(StoreError, match="injected"):
        await sync_sessions_to_graph(["a", "b"], chroma=stores.chroma, unit=FailingUnitOfWork(stores.unit, store="recall_index", method="index_memory_nodes"))
    assert canonical_dump(stores.db) == before
    assert stores.db.query("SELECT COUNT(*) FROM recall_turns")[0][0] == 0
    await sync_sessions_to_graph(["a", "b"], chroma=stores.chroma, unit=stores.unit)
    assert stores.graph.existing_ids(["session:a", "session:b", "memory:a-t0000"]) == {"session:a", "session:b", "memory:a-t0000"}



@pytest.mark.parametrize(
    ("protocol", "concrete"),
    [
        ("Graph", "store.graph.GraphStore"), ("Provenance", "store.provenance.ProvenanceStore"),
        ("NodeClaims", "store.provenance.NodeClaimLookup"), ("MergeRecorder", "store.merges.MergeStore"),
        ("RunState", "store.runstate.RunStateStore"), ("ChunkResults", "store.chunks.ChunkResultStore"),
        ("Tombstones", "store.tombstones.TombstoneStore"), ("RecallWriter", "store.recall_index.RecallIndex"),
        ("QueueTable", "store.lazy_table.LazyEdgeTable"), ("UnitOfWork", "store.unit_of_work.DatabaseUnitOfWork"),
    ],
)
def test_every_protocol_method_is_the_stores_own(protocol: str, concrete: str) -> None:
    """The Protocols describe methods the stores have, with the same parameters (a Protocol that
    drifted from its store would type-check pipelines against a method nobody implements)."""
    import importlib
    import inspect

    import pipelines.ports as ports

    module, _, name = concrete.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    proto = getattr(ports, protocol)
    members = [m for m in vars(proto) if not m.startswith("_")]
    assert members
    for member in members:
        wanted = getattr(proto, member)
        if isinstance(wanted, property):
            assert member in inspect.signature(cls.__init__).parameters or member in inspect.getsource(cls.__init__), member
            continue
        mine, asked = inspect.signature(getattr(cls, member)).parameters, inspect.signature(wanted).parameters
        # The store may take more, with defaults (options pipelines do not use).
        assert [p for p in mine if p in asked] == list(asked), (protocol, member)
        assert all(mine[p].kind == asked[p].kind for p in asked), (protocol, member)
        assert all(mine[p].default is not inspect.Parameter.empty for p in mine if p not in asked), (protocol, member)
