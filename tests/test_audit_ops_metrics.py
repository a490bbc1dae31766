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
