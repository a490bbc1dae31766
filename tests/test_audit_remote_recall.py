"""Recall's ``user`` argument under hostile values, through the real MCP server (stdio, the SDK's
own client) and the real CLI, on both engines: a NUL byte (PostgreSQL cannot store it), a lone
surrogate (neither engine can encode it; a command-line byte that is not UTF-8 arrives as one).
And recall's vector signal when the Chroma server is frozen or gone."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from config import Settings
from tests.conftest import ROOT, free_port, run_cli, start_chroma_server
from tests.test_mcp import graph, server_env, text_of  # noqa: F401 - graph is a fixture
from worker.recall import RECALL_DEADLINE_SECONDS

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_backends]

def env_of(settings: Settings) -> dict[str, str]:
    """The environment of a process serving ``settings``' graph, on its engine."""
    env = server_env(settings)
    if settings.database_url is not None:
        env["REM_DATABASE_URL"] = settings.database_url.get_secret_value()
    return env


BAD_USERS = ["alice\x00", "ali\nce"]  # the SDK's client cannot send a lone surrogate; the CLI can


async def test_a_user_with_characters_no_id_has_is_a_tool_error(graph: Settings) -> None:  # noqa: F811
    params = StdioServerParameters(command=sys.executable, args=["-m", "worker", "mcp"], env=env_of(graph), cwd=str(ROOT))
    async with Client(params) as client:
        for user in BAD_USERS:
            for tool, arguments in (("recall", {"query": "torn lines"}), ("search_nodes", {"query": "LazyEdgeQueue"})):
                result = await client.call_tool(tool, {**arguments, "user": user})
                assert result.is_error, (tool, user)
                assert "invalid user" in text_of(result), (tool, user, text_of(result))
        again = await client.call_tool("recall", {"query": "torn lines", "user": "alice"})  # still serving
        assert not again.is_error and again.structured_content["turns"]


def test_cli_recall_with_a_user_that_is_not_utf8_is_a_usage_error(graph: Settings) -> None:  # noqa: F811
    env = env_of(graph)
    for args, says in ((["recall", "torn lines", "--user", "\udcff"], "--user b'\\xff' is not UTF-8"),
                       (["recall", "torn lines", "--user", "alice\x01"], "invalid user")):
        done = run_cli(*args, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert says in done.stderr, done.stderr


@pytest.mark.parametrize("outage", ["frozen", "killed"])
def test_recall_answers_from_the_graph_when_the_vector_store_is_out(graph: Settings, tmp_path: Path, outage: str) -> None:  # noqa: F811
    """``REM_RECALL_VECTOR`` with the Chroma server frozen (SIGSTOP) or gone: recall still answers
    from the graph, within its deadline, and says why the vector signal is missing."""
    port = free_port()
    server = start_chroma_server(tmp_path / "chroma", port)
    env = {**env_of(graph), "REM_RECALL_VECTOR": "true", "REM_CHROMA_URL": f"http://127.0.0.1:{port}"}
    try:
        server.send_signal(signal.SIGSTOP if outage == "frozen" else signal.SIGKILL)
        started = time.monotonic()
        done = run_cli("recall", "torn lines", "--json", env=env, timeout=120)
        assert time.monotonic() - started < RECALL_DEADLINE_SECONDS + 10
        assert done.returncode == 0, done.stderr[-2000:]
        answer = json.loads(done.stdout)
        assert answer["turns"] and answer["turns"][0]["session_id"] == "session:alice-s1"
        vector = answer["signals"]["vector"]
        assert vector["enabled"] is False and "Chroma" in vector["error"], vector
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait(10)
