"""The load benchmark, scaled down for CI: 50 sessions / 2,000 turns through full cycles with the
heuristic extractor while two producer processes append 1,000 lazy edges — none lost, memory flat."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_load import bench


@pytest.mark.timeout(180)
async def test_load_no_loss_stable_memory(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    result = await bench(sessions=50, turns=2000, edges=1000, producers=2, spread=3.0, workdir=tmp_path)
    print(result)
    assert (result["edges_linked"], result["edges_lost"], result["queue_left"]) == (1000, 0, 0), result
    assert result["producer_dead_letters"] == 0  # dead letters are only the extraction's refs to missing rows
    assert result["sessions_digested"] == 50 and result["chunks"] >= 50
    assert result["extraction_lazy_edges"] > 0 and result["drains_while_producing"] >= 1
    # Flat memory: the later cycles (drains racing the producers) add next to nothing.
    assert result["rss_after_last_cycle_mb"] - result["rss_after_first_cycle_mb"] < 40, result
