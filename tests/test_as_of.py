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
    assert bad.returncode == 2 and "is not a date" in bad.stderr


async def test_every_command_reads_as_of_as_recall_and_the_mcp_tools_do(settings: Settings, tmp_path: Path) -> None:
    """One reading of ``--as-of`` (asofone): ``show``, ``search`` and ``export`` take epoch seconds,
    epoch milliseconds and a written date as ``recall`` and the MCP tools do, the same moment each
    way, where they refused all but ISO 8601 (exit 2)."""
    await _build(settings, tmp_path, ["a", "b", "c"])
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    iso = "2026-11-02T23:59:59.999Z"
    spellings = [iso, "1793663999.999", "1793663999999", "2 November 2026", "Nov 2, 2026"]
    exported = [run_cli("export", "--as-of", when, env=env) for when in spellings]
    assert all(done.returncode == 0 for done in exported), [done.stderr[-500:] for done in exported]
    graphs = [{k: v for k, v in json.loads(done.stdout).items() if k != "generated_at"} for done in exported]
    assert all(graph == graphs[0] for graph in graphs) and graphs[0]["as_of"] == iso
    for command in (["show", "CLASS:LazyEdgeQueue", "--json"], ["search", "RetryPolicy", "--json"]):
        answers = [run_cli(*command, "--as-of", when, env=env) for when in spellings]
        assert all(done.returncode == 0 for done in answers), [done.stderr[-500:] for done in answers]
        assert len({done.stdout for done in answers}) == 1, command
    assert json.loads(answers[0].stdout)["results"] == []  # RetryPolicy: named only in session c, after the 2nd
    ambiguous = run_cli("show", "CLASS:LazyEdgeQueue", "--as-of", "4/11/2026", env=env)
    assert ambiguous.returncode == 2 and "does not tell the day from the month" in ambiguous.stderr
