"""``rem-cycle mcp`` on a PostgreSQL graph (``REM_DATABASE_URL``), driven by the official SDK's
client: it answers, and goes on answering after the server dropped its connections (a restart, a
failover). Needs REM_TEST_POSTGRES_URL."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from mcp import Client

from config import Settings, load_settings
from tests.test_mcp import stdio_params
from tests.test_recall import build

pytestmark = [pytest.mark.parametrize("backend", ["postgresql"], indirect=True), pytest.mark.timeout(120)]


async def test_mcp_answers_from_postgresql_and_again_after_its_connections_were_dropped(
    settings: Settings, tmp_path: Path, postgres_server_url: str
) -> None:
    await build(settings, tmp_path)
    url = f"{settings.database_url.get_secret_value()}&application_name=mcp-{uuid.uuid4().hex[:8]}"
    served = load_settings(data_dir=settings.data_dir, database_url=url)
    async with Client(stdio_params(served, REM_DATABASE_URL=url)) as client:
        first = await client.call_tool("recall", {"query": "torn lines", "user": "alice"})
        assert not first.is_error and first.structured_content["turns"][0]["session_id"] == "session:alice-s1"
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:  # what a restart does to them
            cut = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (url.rsplit("=", 1)[1],)
            ).fetchall()
        assert cut  # the MCP server kept a pooled connection open
        again = await client.call_tool("recall", {"query": "torn lines", "user": "alice"})
        assert not again.is_error, again.content
        assert again.structured_content == first.structured_content
        found = await client.call_tool("search_nodes", {"query": "LazyEdgeQueue"})
        assert not found.is_error and found.structured_content["nodes"]
