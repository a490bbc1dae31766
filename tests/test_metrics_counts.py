"""``/metrics`` additions against a real database, queue files and Chroma: dead letters (counted
again only when the file changed), sessions left with no turns, the database read again only when
its files changed, and how fresh the graph is."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from config import Settings
from store.backend import open_database
from tests.conftest import make_session
from tests.lazy_fixtures import drain, queue_of, seed_chroma
from worker.cycle import PHASES, Stores, run_cycle
from worker import metrics
from worker.metrics import build_registry, database_files_key, parse_utc, settled

WITHOUT_EXTRACT = tuple(phase for phase in PHASES if phase[0] != "extract")


def _sample(registry, name: str) -> float:  # noqa: ANN001 - a prometheus registry
    text = generate_latest(registry).decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


async def test_dead_letters_are_exported_and_follow_the_file(settings: Settings, stores: Stores) -> None:
    """What a scrape reads of the file (a ``stat`` when unchanged, the appended records after a
    drain): tests/test_drainleft_dead_count.py."""
    registry = build_registry(settings)
    await run_cycle(settings, stores=stores, phases=WITHOUT_EXTRACT)
    assert _sample(registry, "rem_cycle_dead_letters") == 0  # no file yet
    queue = queue_of(settings)
    queue.append_lines([b'{"broken": 1\n', b"not json\n", b"[]\n"])
    await drain(settings, stores)
    assert _sample(registry, "rem_cycle_dead_letters") == 3
    assert _sample(registry, "rem_cycle_dead_letters") == 3
    queue.append_lines([b"{nope\n", b"{nope either\n"])
    await drain(settings, stores)
    assert _sample(registry, "rem_cycle_dead_letters") == 5


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


async def test_an_unchanged_database_is_not_read_again_and_a_write_is_seen(
    settings: Settings, stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed_chroma(stores, settings, [make_session("old", 2, created="2026-11-01T10:00:00Z")], tmp_path)
    await run_cycle(settings, stores=stores)
    registry = build_registry(settings)
    monkeypatch.setattr(metrics, "SETTLE_SECONDS", 0.0)  # the files are settled as soon as written
    reads: list[Settings] = []
    monkeypatch.setattr(metrics, "open_database", lambda s, **options: reads.append(s) or open_database(s, **options))
    assert _sample(registry, "rem_cycle_newest_digested_session_timestamp_seconds") == parse_utc("2026-11-01T10:00:00Z").timestamp()
    assert _sample(registry, "rem_cycle_cycles_total") == 1
    assert len(reads) == 1  # the second scrape found the files as they were
    # Another connection writes (a cycle digests a newer session): the next scrape reads it.
    await seed_chroma(stores, settings, [make_session("new", 2, created="2026-11-20T08:30:00Z")], tmp_path)
    await run_cycle(settings, stores=stores)
    assert _sample(registry, "rem_cycle_newest_digested_session_timestamp_seconds") == parse_utc("2026-11-20T08:30:00Z").timestamp()
    assert _sample(registry, "rem_cycle_cycles_total") == 2
    assert len(reads) == 2


def test_files_written_in_the_last_moments_are_not_settled(tmp_path: Path) -> None:
    path = tmp_path / "graph.sqlite3"
    assert database_files_key(path) == (None, None)
    path.write_bytes(b"x")
    key = database_files_key(path)
    written = key[0][3] / 1e9  # type: ignore[index]
    assert not settled(key, written + metrics.SETTLE_SECONDS - 0.5)
    assert settled(key, written + metrics.SETTLE_SECONDS)
    path.write_bytes(b"xy")
    assert database_files_key(path) != key
