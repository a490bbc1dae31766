"""What ``forget`` removed stays out of the graph while its rows are still in Chroma — not only
through the cycle's ingest and extraction, but through every other way a row reaches the graph:
the drain's back-fill of a lazy edge that names the forgotten session or turn (an agent's turn
that cites ``session:<id>`` makes one at the next cycle), and ``rem-cycle backfill``. Through the
real CLI, on the shipped sample."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import anyio
import pytest

from config import Settings
from pipelines.backfill import plan_nodes, write_backfill
from pipelines.forget import forget_session
from pipelines.ingest import sync_batch_isolating_failures
from tests.conftest import copy_digested_sample, run_cli
from tests.lazy_fixtures import read_jsonl, seed_standard
from worker.cycle import Stores

SESSION = "sess-2026-11-21-91c1b3"  # forgotten whole
TURN = "sess-2026-11-09-7e0cb4-t0005"  # forgotten alone
CITING = "memory:sess-2026-11-10-f805d4-t0001"  # a turn that stays


@pytest.fixture(scope="module")
def digested(tmp_path_factory: pytest.TempPathFactory, digested_sample: Path) -> Path:
    return copy_digested_sample(digested_sample, tmp_path_factory.mktemp("forget") / "data")


@pytest.fixture
def forgotten(digested: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(digested, data)
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("forget", "--session", SESSION, env=env).returncode == 0
    assert run_cli("forget", "--memory", TURN, env=env).returncode == 0
    assert _forgotten_nodes(data) == []
    return data


def _forgotten_nodes(data: Path) -> list[str]:
    conn = sqlite3.connect(data / "graph.sqlite3")
    try:
        return [r[0] for r in conn.execute(
            "SELECT id FROM nodes WHERE id LIKE ? OR id = ?", (f"%{SESSION}%", f"memory:{TURN}"))]
    finally:
        conn.close()


def test_a_lazy_edge_to_a_forgotten_session_or_turn_is_dead_lettered_not_back_filled(forgotten: Path, tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(forgotten)}
    edges = tmp_path / "edges.jsonl"
    cited = [f"session:{SESSION}", f"memory:{SESSION}-t0003", f"memory:{TURN}"]
    edges.write_text("".join(json.dumps({"source": c, "target": CITING, "relationship": "REFERENCED_BY"}) + "\n" for c in cited))
    assert run_cli("enqueue", str(edges), env=env).returncode == 0
    drained = run_cli("drain", "--json", env=env)
    assert drained.returncode == 0, drained.stderr
    stats = json.loads(drained.stdout)
    assert stats["backfilled"] == 0
    assert stats["failure_reasons"].get("forgotten") == 3
    assert _forgotten_nodes(forgotten) == []
    # Dead at once: retrying can never link them, and nothing of them waits in the queue.
    dead = read_jsonl(forgotten / "lazy-edges.dead.jsonl")
    assert sorted(json.loads(d["line"])["source"] for d in dead if d["reason"] == "forgotten") == sorted(cited)
    assert not any(c in line["source"] for line in read_jsonl(forgotten / "lazy-edges.jsonl") for c in cited)
    assert run_cli("--once", env=env).returncode == 0
    assert _forgotten_nodes(forgotten) == []


def test_backfill_leaves_forgotten_sessions_and_turns_out(forgotten: Path) -> None:
    env = {"REM_DATA_DIR": str(forgotten)}
    done = run_cli("backfill", "--days", "36500", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["sessions_forgotten"] == 1
    assert report["sessions_synced"] == 25
    assert _forgotten_nodes(forgotten) == []
    recall = run_cli("recall", "latency regression load_config ConfigLoader", "--json", env=env)
    assert recall.returncode == 0 and SESSION not in recall.stdout and TURN not in recall.stdout


def test_forgetting_an_id_that_is_not_in_the_graph_says_so(digested: Path, tmp_path: Path) -> None:
    # A typo in a forget (a privacy request, say) must not read like a done job.
    data = tmp_path / "data"
    shutil.copytree(digested, data)
    env = {"REM_DATA_DIR": str(data)}
    typo = SESSION[:-1]
    done = run_cli("forget", "--session", typo, env=env)
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        f"session {typo} is not in the graph: nothing was removed; tombstoned, so no cycle ingests it from Chroma "
        "(check the id if you meant a session of the graph: rem-cycle search)"
    ]
    done = run_cli("forget", "--memory", f"{TURN}x", "--dry-run", env=env)
    assert done.stdout.splitlines() == [f"memory {TURN}x is not in the graph: nothing would be removed"]
    assert run_cli("forget", "--session", SESSION, env=env).stdout.startswith(f"removed session {SESSION}: ")


@pytest.mark.both_backends
async def test_a_forget_between_a_back_fills_read_and_its_write_wins(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    # A manual drain or backfill does not take the lock a forget takes: the forget may commit
    # between the back-fill's reads (tombstones included) and its write transaction.
    await seed_standard(stores, settings, tmp_path)
    plan, outcomes = await plan_nodes(["memory:s-1-t0001", "session:s-2"], chroma=stores.chroma, unit=stores.unit)
    assert {o.reason for o in outcomes.values()} == {"backfilled"}
    forget_session(stores.unit, "s-1")
    await anyio.to_thread.run_sync(write_backfill, plan, stores.unit)
    assert stores.graph.existing_ids(["session:s-1", "memory:s-1-t0001", "session:s-2"]) == {"session:s-2"}
    # ``rem-cycle backfill`` listed s-nosum before a forget committed: its live sync writes nothing.
    forget_session(stores.unit, "s-nosum")
    synced = await sync_batch_isolating_failures(["s-nosum"], chroma=stores.chroma, unit=stores.unit)
    assert synced.synced["s-nosum"].upserted == 0
    assert stores.graph.existing_ids(["session:s-nosum", "memory:s-nosum-t0000"]) == set()
