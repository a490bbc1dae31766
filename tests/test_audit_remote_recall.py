"""Recall's ``user`` argument under hostile values, through the real MCP server (stdio, the SDK's
own client) and the real CLI, on both engines: a NUL byte (PostgreSQL cannot store it), a lone
surrogate (neither engine can encode it; a command-line byte that is not UTF-8 arrives as one)."""

from __future__ import annotations

import sys

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from config import Settings
from tests.conftest import ROOT, run_cli
from tests.test_mcp import graph, server_env, text_of  # noqa: F401 - graph is a fixture

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
    for args in (["recall", "torn lines", "--user", "\udcff"], ["recall", "torn lines", "--user", "alice\x01"]):
        done = run_cli(*args, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "invalid user" in done.stderr
