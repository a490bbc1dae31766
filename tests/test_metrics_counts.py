"""``/metrics`` additions against a real database, queue files and Chroma: dead letters (counted
again only when the file changed) and sessions left with no turns."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from config import Settings
from store.lazy_queue import LazyEdgeQueue
from tests.conftest import make_session
from tests.lazy_fixtures import drain, queue_of, seed_chroma
from worker.cycle import PHASES, Stores, run_cycle
from worker.metrics import build_registry

WITHOUT_EXTRACT = tuple(phase for phase in PHASES if phase[0] != "extract")


def _sample(registry, name: str) -> float:  # noqa: ANN001 - a prometheus registry
    text = generate_latest(registry).decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


async def test_dead_letters_are_exported_and_recounted_only_when_the_file_changes(
    settings: Settings, stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = build_registry(settings)
    await run_cycle(settings, stores=stores, phases=WITHOUT_EXTRACT)
    assert _sample(registry, "rem_cycle_dead_letters") == 0  # no file yet
    queue = queue_of(settings)
    queue.append_lines([b'{"broken": 1\n', b"not json\n", b"[]\n"])
    await drain(settings, stores)
    counted: list[Path] = []
    real = LazyEdgeQueue.dead_letter_count
    monkeypatch.setattr(LazyEdgeQueue, "dead_letter_count", lambda self: counted.append(self.path) or real(self))
    assert _sample(registry, "rem_cycle_dead_letters") == 3
    assert _sample(registry, "rem_cycle_dead_letters") == 3
    assert len(counted) == 1  # the unchanged file was not read again
    queue.append_lines([b"{nope\n", b"{nope either\n"])
    await drain(settings, stores)
    assert _sample(registry, "rem_cycle_dead_letters") == 5
    assert len(counted) == 2


async def test_sessions_left_without_turns_are_exported(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_chroma(stores, settings, [make_session("keep", 3), make_session("emptied", 2)], tmp_path)
    registry = build_registry(settings)
    await run_cycle(settings, stores=stores, phases=WITHOUT_EXTRACT)
    assert _sample(registry, "rem_cycle_sessions_without_turns") == 0
    # Every turn of one session disappears from Chroma (deleted, or moved to another session).
    memories = await stores.chroma.memories()
    memories.delete(ids=[row.id for row in await stores.chroma.memories_for_session("emptied")])
    result = await run_cycle(settings, stores=stores, phases=WITHOUT_EXTRACT)
    assert result.outcome == "completed"
    assert _sample(registry, "rem_cycle_sessions_without_turns") == 1
