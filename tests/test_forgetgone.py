"""forgetgone: ``rem-cycle forget --memory`` of a turn a cycle's ingest (or ``rem-cycle backfill``)
already retracted — its Chroma row was deleted, so its MEMORY node and its memory index row are
gone — takes what the session said from it out at once, as forgetting a live turn does: its session
is found from the provenance rows that still name the turn. Before forgetgone the forget found no
session, buried the tombstone and removed nothing until the session's later re-extraction (which a
deferred session or a batch limit delays). Real Chroma (embedded), real cycles, the real CLI, a real
SQLite file and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.tombstones import TombstoneStore
from tests.migrations_support import MIGRATIONS, POINTS_BY_MEMORY_VERSION, rolled_back
from tests.test_bfindex import backfill, delete_rows
from tests.test_forget_now import SECRET, _cli_json, _extracted, _facts, _served
from worker.cycle import PHASES, run_cycle

INGEST_ONLY = tuple(p for p in PHASES if p[0] == "ingest")


def _forgotten_at_once(env: dict[str, str]) -> None:
    """``forget --memory told-t0`` (a dry run first, which changes nothing and reports the same)
    names the session and leaves nothing of the turn's secret served."""
    dry = _cli_json(env, "forget", "--memory", "memory:told-t0", "--dry-run")
    assert SECRET in json.dumps(_served(env))
    done = _cli_json(env, "forget", "--memory", "memory:told-t0")
    assert {k: v for k, v in dry.items() if k != "dry_run"} == {k: v for k, v in done.items() if k not in ("dry_run", "erased")}
    assert done["session"] == "told" and done["points"] > 0 and done["claims"] == 2 and done["chunk_results"] == 1, done
    served = _served(env)
    assert SECRET not in json.dumps(served)
    assert served["show"]["description"] == "GraphStore keeps every node of the graph in one SQLite table."


@pytest.mark.both_backends
async def test_forgetting_a_turn_a_cycle_retracted_takes_what_it_said_out_at_once(
    settings: Settings, tmp_path: Path, clean_env
) -> None:
    """``told-t0``'s row leaves Chroma; a cycle's ingest retracts the turn (its re-extraction of
    ``told`` waits: only the ingest phase runs, as when the session is deferred or past the batch
    limit). Forgetting the turn then removes at once what only it said."""
    env = await _extracted(settings, tmp_path)
    await delete_rows(settings, ["told-t0"])
    cycle = await run_cycle(settings.model_copy(update={"full_scan_interval_seconds": 0}), phases=INGEST_ONLY)
    assert cycle.outcome == "completed" and cycle.phases["ingest"]["turns_retracted"] == 1, cycle.phases
    assert SECRET in _cli_json(env, "show", "CLASS:GraphStore")["description"]  # retracted, not re-extracted yet
    _forgotten_at_once(env)
    # The session's re-extraction (the next cycle) leaves what the forget left.
    forgotten = _facts(settings, "CLASS:GraphStore")
    assert (await run_cycle(settings)).outcome == "completed"
    assert _facts(settings, "CLASS:GraphStore") == forgotten
    assert SECRET not in json.dumps(_served(env))


@pytest.mark.both_backends
async def test_forgetting_a_turn_a_backfill_retracted_takes_what_it_said_out_at_once(
    settings: Settings, tmp_path: Path, clean_env
) -> None:
    """As above, the turn retracted by ``rem-cycle backfill``'s sync; then a memory id never seen
    is forgotten: no session, nothing removed, no error."""
    env = await _extracted(settings, tmp_path)
    await delete_rows(settings, ["told-t0"])
    assert (await backfill(settings)).turns_retracted == {"told": ["memory:told-t0"]}
    _forgotten_at_once(env)
    never = _cli_json(env, "forget", "--memory", "never-seen")
    assert (never["session"], never["points"], never["claims"], never["nodes_removed"]) == (None, 0, 0, 0), never


async def test_a_retracted_turns_session_is_found_through_the_points_memory_indexes(
    settings: Settings, tmp_path: Path, clean_env
) -> None:
    """A graph of schema 23 (the indexes undone) opened again is migrated to 24, and
    ``session_of_memory`` of a retracted turn reads ``node_points`` and ``edge_points`` through the
    new indexes (SQLite's query plan), not by a scan of the tables, which grow with the graph."""
    await _extracted(settings, tmp_path)
    await delete_rows(settings, ["told-t0"])
    assert (await backfill(settings)).turns_retracted == {"told": ["memory:told-t0"]}
    rolled_back(settings, "sqlite", to=POINTS_BY_MEMORY_VERSION - 1)
    db = open_database(settings)
    try:
        assert db.schema_version == len(MIGRATIONS)
        statements: list[str] = []
        db.conn.set_trace_callback(statements.append)
        assert TombstoneStore(db).session_of_memory("told-t0") == "told"
        db.conn.set_trace_callback(None)
        plans = {s: " | ".join(r[3] for r in db.conn.execute(f"EXPLAIN QUERY PLAN {s}")) for s in statements if "_points" in s}
        assert plans, statements
        for statement, plan in plans.items():
            assert "SCAN" not in plan and "node_points_memory" in plan and "edge_points_memory" in plan, (statement, plan)
    finally:
        db.close()
