"""``rem-cycle mcp`` when its graph is not there or cannot be read: before the first cycle, and a
graph database file that is damaged — the official ``mcp`` SDK client against a real server process,
which keeps serving and answers as soon as the graph can be read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mcp import Client

from config import Settings
from tests.conftest import free_port, run_cli
from tests.test_mcp import graph, stdio_params, text_of  # noqa: F401 - the fixture
from tests.test_recall import build

pytestmark = pytest.mark.timeout(120)

CALLS = (
    ("recall", {"query": "torn lines drain", "user": "alice"}),
    ("search_nodes", {"query": "LazyEdgeQueue"}),
    ("show_node", {"node_id": "CLASS:LazyEdgeQueue"}),
)


async def test_a_server_started_before_the_first_cycle_answers_once_the_graph_exists(settings: Settings, tmp_path: Path) -> None:
    # A client configured before the first cycle starts the server then. It exited at once (exit 1,
    # "no graph database"), so the client showed a dead server until restarted by hand; with
    # PostgreSQL it already served and said so per call.
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    async with Client(stdio_params(settings)) as client:
        for name, arguments in CALLS:
            result = await client.call_tool(name, arguments)
            assert result.is_error and "no graph database" in text_of(result), (name, text_of(result))
        assert not settings.data_dir.exists()  # asking created nothing
        await build(settings, tmp_path)
        for name, arguments in CALLS:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, text_of(result))
        assert result.structured_content["turns"]


async def test_a_graph_database_that_cannot_be_read_is_a_tool_error_saying_why(graph: Settings) -> None:
    # A damaged (or, with PostgreSQL, unreachable) graph database: the agent got the SDK's bare
    # "Error executing tool recall" and the server's stderr hundreds of lines of traceback.
    path = graph.graph_path
    kept = path.with_name("kept.sqlite3")
    async with Client(stdio_params(graph)) as client:
        path.rename(kept)
        path.write_bytes(b"this is not a database file" * 4_000)
        try:
            for name, arguments in CALLS:
                result = await client.call_tool(name, arguments)
                assert result.is_error, name
                assert "cannot be read" in text_of(result) and "not a database" in text_of(result), text_of(result)
        finally:
            kept.replace(path)
        for name, arguments in CALLS:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, text_of(result))


@pytest.mark.parametrize("http", [False, True])
def test_a_pinned_user_no_call_can_use_is_refused_at_start(graph: Settings, http: bool) -> None:
    # REM_MCP_USER with a control character (a stray tab from a script): the server started and
    # refused every call with "invalid user" — a configuration error told to the agent, not the operator.
    env = {"REM_DATA_DIR": str(graph.data_dir), "REM_MCP_USER": "alice\t", "REM_MCP_PORT": str(free_port())}
    done = run_cli("mcp", *(["--http"] if http else []), env=env, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "REM_MCP_USER: invalid user" in done.stderr and "Traceback" not in done.stderr
