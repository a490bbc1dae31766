"""``/metrics`` label cardinality (operator audit).

A lazy edge's ``relationship`` is stored as given (any 1-128 characters: README "Queue line
format"), so every producer's spelling became a series of ``rem_cycle_graph_edges``: a producer
writing a relationship per edge made one series per edge, which Prometheus keeps for good. The
vocabulary's relationships keep their own series; any other is counted under ``other``."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from config import Settings
from tests.conftest import make_session
from tests.lazy_fixtures import drain, queue_of, seed_chroma
from worker.cycle import PHASES, Stores, run_cycle
from worker.metrics import build_registry

WITHOUT_EXTRACT = tuple(phase for phase in PHASES if phase[0] != "extract")


def _edge_series(registry) -> dict[str, float]:  # noqa: ANN001 - a prometheus registry
    text = generate_latest(registry).decode()
    return {
        s.labels["relationship"]: s.value
        for f in text_string_to_metric_families(text) for s in f.samples if s.name == "rem_cycle_graph_edges"
    }


async def test_relationships_producers_invent_share_one_series(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    await seed_chroma(stores, settings, [make_session("s1", 3)], tmp_path)
    await run_cycle(settings, stores=stores, phases=WITHOUT_EXTRACT)
    lines = [
        json.dumps({"source": "memory:s1-t0000", "target": "session:s1", "relationship": f"seen by agent {n}"}).encode() + b"\n"
        for n in range(40)
    ]
    queue_of(settings).append_lines([*lines, json.dumps(
        {"source": "memory:s1-t0001", "target": "memory:s1-t0002", "relationship": "FOLLOWS"}).encode() + b"\n"])
    stats = await drain(settings, stores)
    assert stats.succeeded == 41
    series = _edge_series(build_registry(settings))
    assert series == {"ORIGINATES_IN": 3, "FOLLOWS": 1, "other": 40}


async def test_a_scrape_while_a_cycle_writes_does_not_reread_the_run_history(
    settings: Settings, stores: Stores, tmp_path: Path, monkeypatch
) -> None:
    """``rem_cycle_chunks_reused_total`` summed the extract phase of every run ever recorded at
    each scrape that read the database: every scrape while a cycle writes, and every scrape on
    PostgreSQL (no files to watch). Measured: 20 ms a scrape with 1,000 runs, 200 ms with 8,000
    (a year of hourly cycles), most of it this sum. It is now recounted only when a run starts or
    finishes, with the duration histograms."""
    from store.runstate import RunStateStore

    await seed_chroma(stores, settings, [make_session("s1", 3)], tmp_path)
    await run_cycle(settings, stores=stores, phases=WITHOUT_EXTRACT)
    calls: list[str] = []
    real = RunStateStore.run_stats
    monkeypatch.setattr(RunStateStore, "run_stats", lambda self: calls.append("run_stats") or real(self))
    registry = build_registry(settings)
    generate_latest(registry)
    for n in range(3):  # the database changes between scrapes (a cycle writing), no run finishes
        stores.db.query("SELECT 1")
        with stores.db.transaction() as conn:
            conn.execute("UPDATE nodes SET updated_at = ? WHERE id = 'session:s1'", (f"2026-12-01T00:00:0{n}.000Z",))
        generate_latest(registry)
    assert len(calls) == 1
    await run_cycle(settings, stores=stores, phases=WITHOUT_EXTRACT)  # a run finished: counted again
    text = generate_latest(registry).decode()
    assert len(calls) == 2
    assert 'rem_cycle_cycles_total{outcome="completed"} 2.0' in text
    assert "rem_cycle_chunks_reused_total 0.0" in text
