"""A deletion costs an id scan, not a content scan (day400c).

A row of the memory collection deleted moves the scan marks' tail ids, so the next cycle cannot
read only the rows added after them. It reads every id — which finds the deleted turn — but no
longer every ingested row's text: the comparison that finds rows updated in place keeps its own
interval (``full_scan_interval_seconds``), which the scan of the ids does not restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import worker.cycle
from config import Settings
from store.backend import open_database
from store.chroma import ChromaStore, MemoryRow
from store.scan_marks import ScanMarkStore
from tests.test_extract_cycle import session
from tests.test_inplace import TURNS, _cycle, _full, _import, _session_of, _update_in_place


class _CountingChroma(ChromaStore):
    """The real store, keeping the memory ids it read by id with their text."""

    texts_read: list[str] = []
    memory_collection = ""

    async def _by_ids(self, coll: Any, ids: Sequence[str], *, include: Sequence[str], cls: type = MemoryRow) -> list[Any]:
        if "documents" in include and coll.name == _CountingChroma.memory_collection:
            _CountingChroma.texts_read.extend(ids)
        return await super()._by_ids(coll, ids, include=include, cls=cls)


async def _delete(settings: Settings, row_id: str) -> None:
    coll = await ChromaStore(settings).collection(settings.memory_collection)
    assert coll is not None
    coll.delete(ids=[row_id])


def _full_scan_times(settings: Settings) -> list[str]:
    db = open_database(settings, readonly=True)
    try:
        return sorted(mark.full_scan_at for mark in ScanMarkStore(db).load().values())
    finally:
        db.close()


@pytest.fixture
def counted(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setattr(worker.cycle, "ChromaStore", _CountingChroma)
    _CountingChroma.memory_collection = settings.memory_collection
    _CountingChroma.texts_read = []
    return _CountingChroma.texts_read


@pytest.mark.both_backends
async def test_a_deleted_turn_leaves_the_graph_without_reading_every_rows_text(settings: Settings, tmp_path: Path, counted: list[str]) -> None:
    await _import(settings, tmp_path, [session("s-a", TURNS[:3]), session("s-b", TURNS[3:])])
    await _cycle(settings)
    assert _session_of(settings, "s-a-t1")[0] == "s-a"
    await _delete(settings, "s-a-t0")  # before the marks' tail: their ids are no longer where they were
    counted.clear()

    result = await _cycle(settings)

    ingest = result.phases["ingest"]
    assert ingest["scan"] == "full" and ingest["sessions_synced"] == 1, ingest
    assert _session_of(settings, "s-a-t0") == (None, [], None)
    assert _session_of(settings, "s-a-t1")[0] == "s-a"
    # The sync reads the changed session's turns; the scan read no other row's text (before: all 5).
    assert not {"s-b-t0", "s-b-t1"} & set(counted), counted
    assert (await _cycle(settings)).phases["ingest"]["sessions_changed"] == 0


@pytest.mark.both_backends
async def test_an_update_in_place_is_still_caught_when_the_content_scan_is_due(settings: Settings, tmp_path: Path) -> None:
    await _import(settings, tmp_path, [session("s-a", TURNS[:3]), session("s-b", TURNS[3:])])
    await _cycle(settings)
    scanned_at = _full_scan_times(settings)
    await _update_in_place(settings, "s-b-t1", sessionId="s-a")
    await _delete(settings, "s-a-t0")

    await _cycle(settings)

    # The id scan synced the deletion, and left the content comparison's interval where it was.
    assert _session_of(settings, "s-a-t0") == (None, [], None)
    assert _full_scan_times(settings) == scanned_at
    assert _session_of(settings, "s-b-t1")[0] == "s-b"
    result = await _cycle(_full(settings))  # the content scan is due
    assert result.phases["ingest"]["sessions_changed"] == 2, result.phases["ingest"]
    assert _session_of(settings, "s-b-t1") == ("s-a", ["session:s-a"], "s-a")
