"""An optional setting given empty (``REM_X=`` in ``.env``, as ``.env.example`` shows them) means
unset, as ``.env.example`` says: the default queue path, 75 % of the context, no pinned MCP user.
Before, the first two stopped every command with exit 2 and the third pinned the MCP server to the
user ``''``, so that it answered nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from config import Settings, load_settings
from tests.test_mcp import graph, stdio_params, text_of  # noqa: F401  (graph is a fixture)

pytestmark = pytest.mark.timeout(120)


def test_empty_optional_settings_mean_unset(data_dir: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("REM_DATA_DIR", str(data_dir))
    for name in ("REM_LAZY_EDGES_PATH", "REM_SAFE_PROCESSING_LIMIT_TOKENS", "REM_MCP_USER"):
        clean_env.setenv(name, "")
    settings = load_settings()
    assert settings.queue_path == data_dir / "lazy-edges.jsonl"
    assert settings.effective_safe_limit == int(settings.context_limit_tokens * 0.75)
    assert settings.mcp_user is None


async def test_an_empty_mcp_user_pins_nobody(graph: Settings) -> None:  # noqa: F811
    async with Client(stdio_params(graph, REM_MCP_USER="")) as client:
        answer = await client.call_tool("recall", {"query": "payroll", "user": "bob"})
        assert not answer.is_error, text_of(answer)
        assert answer.structured_content["turns"]
