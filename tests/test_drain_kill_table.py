"""SIGKILL a real ``rem-cycle drain`` working on the queue *table* at random points: no row is
lost, none applied twice, and — unlike the file form, where a kill inside the publish may leave a
torn line — no dead letter is doubled or torn: a batch's edges and its rows' fates commit together.

Same corpus as tests/test_drain_kill.py (2,600 resolvable edges needing back-fill, 300 pointing at
memories that do not exist, 100 malformed), inserted as rows; the drain runs with 100-row batches,
forked, and the kills from launch are drawn over an uninterrupted table drain's time, as there.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from config import Settings, load_settings
from store.db import Database
from store.lazy_table import LazyEdgeTable
from tests.lazy_fixtures import drain, edge_count, table_of
from tests.test_drain_kill import MALFORMED, MISSING, RESOLVABLE, drain_seconds, kill_drain, make_template, queue_lines
from worker.cycle import open_stores

TRIALS = 8


def queued_as_rows(template: Path, data: Path, lines: list[bytes]) -> Settings:
    """A copy of ``template`` at ``data`` with ``lines`` in its queue table; its settings."""
    shutil.copytree(template, data)
    settings = load_settings(data_dir=data)
    db = Database(settings.graph_path)
    LazyEdgeTable(db).append_lines(lines)
    db.close()
    return settings


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_sigkill_of_a_table_drain_loses_no_row_and_doubles_none(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    template = await make_template(tmp_path / "template")
    reference = queued_as_rows(template, tmp_path / "reference", queue_lines(0))
    span = drain_seconds(reference)
    shutil.rmtree(reference.data_dir)
    rng = random.Random(1515)
    kill_points: list[int] = []
    for trial in range(TRIALS):
        data = tmp_path / f"trial-{trial}"
        settings = queued_as_rows(template, data, queue_lines(trial))
        if trial % 2:  # once a random share of the edges is linked
            kill_drain(settings, share=rng.uniform(0.02, 0.95))
        else:  # a random moment from launch
            kill_drain(settings, delay=rng.uniform(0, span))

        stores = await open_stores(settings)
        try:
            linked_at_kill = edge_count(stores.graph, "MENTIONED_IN")
            kill_points.append(linked_at_kill)
            # Whatever the kill cut, each row is in exactly one place: waiting, dead, or linked.
            in_table = stores.db.query("SELECT COUNT(*) FROM lazy_edges")[0][0]
            in_dead = stores.db.query("SELECT COUNT(*) FROM lazy_edges_dead")[0][0]
            assert in_table + in_dead + linked_at_kill == RESOLVABLE + MISSING + MALFORMED, f"trial {trial}"
            stats = await drain(settings, stores, table=table_of(stores))
            assert edge_count(stores.graph, "MENTIONED_IN") == RESOLVABLE, f"trial {trial}: {stats}"
            memories = stores.graph.nodes_by_label("MEMORY")
            assert len(memories) == 200 and all(m.properties.get("backfilled") for m in memories)
            assert edge_count(stores.graph, "ORIGINATES_IN") == 200
            assert stores.db.integrity_check() == "ok"
            rows = [dict(r) for r in stores.db.query("SELECT line, attempts FROM lazy_edges")]
            dead = [dict(r) for r in stores.db.query("SELECT line, reason FROM lazy_edges_dead")]
        finally:
            stores.close()
        # The failing rows wait, exactly once each, after one or two drains; the malformed ones are
        # dead letters, exactly once each.
        assert sorted(json.loads(r["line"])["target"] for r in rows) == sorted(f"memory:missing-{i}" for i in range(MISSING))
        assert all(r["attempts"] in (1, 2) for r in rows), f"trial {trial}"
        assert sorted(d["line"] for d in dead) == sorted(f'{{"broken": {i}' for i in range(MALFORMED)), f"trial {trial}"
        assert all(d["reason"] == "malformed-json" for d in dead)
        assert not settings.queue_path.exists()
        shutil.rmtree(data)
    mid_drain = sum(1 for linked in kill_points if 0 < linked < RESOLVABLE)
    print(f"drain kills: uninterrupted drain {span:.2f}s, edges linked at each kill {kill_points}")
    assert mid_drain >= TRIALS // 4, f"only {mid_drain} kills landed mid-drain: {kill_points}"
