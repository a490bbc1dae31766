"""``--as-of DATE``: the graph as known at a date equals the graph built from the sessions seen by
then; ``show``/``search`` agree; first_seen/last_seen come from the turns' times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings, load_settings
from pipelines.asof import AsOfError, parse_as_of
from store.db import Database
from tests.conftest import run_cli
from tests.test_forget import _build
from worker.knowledge import search_graph, show_node, snapshot_from_db


def _export(path: Path, as_of: str | None = None) -> dict:
    db = Database(path)
    try:
        snapshot = snapshot_from_db(db, include_anchors=True, as_of=as_of)
    finally:
        db.close()
    return {k: snapshot[k] for k in ("nodes", "edges", "sessions", "node_sessions", "provenance")} | {
        "nodes": [{k: v for k, v in n.items() if k != "community"} for n in snapshot["nodes"]]
    }


def test_as_of_parses_dates_and_times() -> None:
    assert parse_as_of("2026-11-15") == "2026-11-15T23:59:59.999Z"
    assert parse_as_of("2026-11-15T10:00:00+01:00") == "2026-11-15T09:00:00.000Z"
    with pytest.raises(AsOfError, match="expected a date"):
        parse_as_of("last tuesday")


async def test_the_graph_as_of_a_date_is_the_graph_of_the_sessions_seen_by_then(settings: Settings, tmp_path: Path, clean_env) -> None:
    await _build(settings, tmp_path, ["a", "b", "c"])
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    then = parse_as_of("2026-11-02")
    past = _export(settings.graph_path, then)
    assert past != _export(settings.graph_path)

    other = tmp_path / "a-and-b"
    clean_env.setenv("REM_DATA_DIR", str(other))
    await _build(load_settings(data_dir=other), tmp_path, ["a", "b"])
    assert past == _export(other / "graph.sqlite3")

    clean_env.setenv("REM_DATA_DIR", str(settings.data_dir))
    assert [h["id"] for h in search_graph(settings, "RetryPolicy", as_of=then)] == []
    assert [h["id"] for h in search_graph(settings, "RetryPolicy")] == ["CLASS:RetryPolicy"]
    view = await show_node(settings, "CLASS:LazyEdgeQueue")
    assert view["first_seen"].startswith("2026-11-01") and view["last_seen"].startswith("2026-11-03")
    old = await show_node(settings, "CLASS:LazyEdgeQueue", as_of=then)
    assert old["last_seen"].startswith("2026-11-02") and old["turns_total"] < view["turns_total"]
    assert await show_node(settings, "CLASS:RetryPolicy", as_of=then) is None

    out = run_cli("export", "--as-of", "2026-11-02", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["as_of"] == then
    bad = run_cli("export", "--as-of", "soon", env=env)
    assert bad.returncode == 2 and "expected a date" in bad.stderr
