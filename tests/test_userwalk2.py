"""What the second walk through README left to mend (RELIABILITY.md, "userwalk2"): an id the MCP
``recall`` returns that its ``show_node`` refused, a ``--once`` failing before its run began that
printed a Python repr, a ``retry --session`` of an unknown id that said ``reset 0``, an ``import -`` that looked
for a file named ``-``. Real ``rem-cycle mcp`` processes driven by the
``mcp`` SDK's client, real CLI processes."""

from __future__ import annotations

from pathlib import Path

import json
import os
import subprocess
import sys

import pytest
from mcp import Client

from config import Settings
from tests.conftest import ROOT, make_session, run_cli, write_sessions
from tests.test_forget import _env
from tests.test_identity import _import, _session
from tests.test_mcp import graph, stdio_params, text_of  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(120)


async def test_mcp_show_node_shows_the_session_and_turn_ids_recall_returns(graph: Settings) -> None:  # noqa: F811
    """Agents read the graph through MCP: ``recall`` answers turns by ``memory_id`` and
    ``session_id``; ``show_node`` of either said ``no entity``."""
    async with Client(stdio_params(graph)) as client:
        turn = (await client.call_tool("recall", {"query": "torn lines", "user": "alice"})).structured_content["turns"][0]
        shown = await client.call_tool("show_node", {"node_id": turn["memory_id"], "user": "alice"})
        assert not shown.is_error, text_of(shown)
        assert [t["text"] for t in shown.structured_content["turns"]] == [turn["text"]]
        assert shown.structured_content["edges"]  # what was said in it
        session = await client.call_tool("show_node", {"node_id": turn["session_id"]})
        assert not session.is_error, text_of(session)
        said = {e["source"] for e in session.structured_content["edges"]}
        assert "CLASS:LazyEdgeQueue" in said and all(e["target"] == turn["session_id"] for e in session.structured_content["edges"])
    # A pinned user sees no one else's session or turn by its id either.
    async with Client(stdio_params(graph, REM_MCP_USER="bob")) as client:
        for node_id in (turn["memory_id"], turn["session_id"]):
            hidden = await client.call_tool("show_node", {"node_id": node_id})
            assert hidden.is_error and "no entity" in text_of(hidden), text_of(hidden)


def test_once_that_cannot_reach_the_database_says_so_as_status_does(tmp_path: Path) -> None:
    """PostgreSQL unreachable: ``status`` says ``rem-cycle: cannot connect …``; ``--once`` printed
    ``DatabaseUnreadableError('cannot connect …\\n\\t…')``, the exception's repr, twice."""
    env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_DATABASE_URL": "postgresql://rem:pw@127.0.0.1:1/x"}
    status = run_cli("status", env=env)
    assert status.returncode == 1
    said = " ".join(status.stderr.removeprefix("rem-cycle: ").split())
    assert said.startswith("cannot connect to the PostgreSQL database postgresql://rem:***@127.0.0.1:1/x")
    once = run_cli("--once", env=env)
    assert once.returncode == 1  # a cycle failed (README's exit codes)
    assert f"(phase setup: database-error — {said}; not recorded in rem_runs yet)" in once.stdout.splitlines()[0]
    assert "DatabaseUnreadableError" not in once.stdout and "\\n" not in once.stdout


@pytest.mark.both_backends
async def test_retry_of_a_session_no_cycle_has_read_says_so(settings: Settings, tmp_path: Path) -> None:
    """``retry --session nope`` (a mistyped id) said ``reset 0 sessions and 0 failed chunks``, exit 0,
    as for a session with nothing to retry; ``show`` of an unknown node exits 1."""
    from worker.cycle import run_cycle

    await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The LazyEdgeQueue drops lines."])])
    assert (await run_cycle(settings)).outcome == "completed"
    env = _env(settings)
    known = run_cli("retry", "--session", "session:a", env=env)
    assert (known.returncode, known.stderr) == (0, "")
    mixed = run_cli("retry", "--session", "a", "--session", "session:nope", "--json", env=env)
    assert mixed.returncode == 1
    assert json.loads(mixed.stdout) == {"chunks_reset": 0, "sessions_reset": 0, "unknown": ["nope"]}
    assert mixed.stderr.splitlines() == [
        "rem-cycle: no session 'nope' in the graph's run state: no cycle has read it (check the id: rem-cycle status "
        "lists failing sessions)"
    ]


def test_import_dash_reads_standard_input_as_enqueue_dash_does(tmp_path: Path) -> None:
    """``producer | rem-cycle import -`` said ``rem-cycle: cannot read -: No such file or directory``
    while ``enqueue -`` reads standard input."""
    sessions = write_sessions(tmp_path / "in.jsonl", [make_session("s1", 2), make_session("s2", 1)]).read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env.update({"REM_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)})
    done = subprocess.run([sys.executable, "-m", "worker", "import", "-", "--json"], input=sessions, capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout)
    assert (imported["sessions"], imported["lines"], imported["memories_written"]) == (2, 2, 3)
    again = run_cli("import", str(tmp_path / "in.jsonl"), "--json", env={"REM_DATA_DIR": str(tmp_path / "data")})
    assert json.loads(again.stdout)["memories_unchanged"] == 3  # the same rows, from the file
