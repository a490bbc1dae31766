"""``as_of`` of recall, ``show``, export and the MCP tools (asof26, twenty-fourth session): a
year alone, a session's summary written after the date, a name several nodes share, and the MCP
``show_node`` of a session or a turn. Real SQLite files (and PostgreSQL where marked), embedded
Chroma, real cycles, real ``rem-cycle`` processes and the real ``rem-cycle mcp`` process."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from config import Settings
from pipelines.asof import AsOfError
from pipelines.asof import parse_as_of as show_as_of
from pipelines.recall import RecallInputError, parse_as_of
from store.backend import open_database
from tests.conftest import run_cli
from tests.test_mcp import stdio_params, text_of

pytestmark = pytest.mark.timeout(120)


# --- a year alone ----------------------------------------------------------------------------
@pytest.mark.parametrize("year", ["2026", "1970", " 1000 ", "9999"])
def test_a_year_alone_is_refused_by_both_readings_of_as_of(year: str) -> None:
    """Recall read ``2026`` as epoch seconds (1970-01-01T00:33:46Z) and answered from the first
    half hour of 1970: nothing, and no word why. ``show`` refused it as no ISO 8601 time."""
    with pytest.raises(RecallInputError, match=r"is a year, not a date: name its day \(\d{4}-01-01 for its start"):
        parse_as_of(year)
    with pytest.raises(AsOfError, match="is a year, not a date"):
        show_as_of(year)
    assert parse_as_of("1700000000") == "2023-11-14T22:13:20.000Z"  # ten digits are still epoch seconds
    assert parse_as_of("999") == "1970-01-01T00:16:39.000Z"


def test_a_year_alone_is_one_line_on_every_command_and_tool(settings: Settings, tmp_path: Path) -> None:
    open_database(settings).close()  # an empty graph: the date is read before anything is
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    for command in (["recall", "drain"], ["show", "CLASS:X"], ["export"]):
        done = run_cli(*command, "--as-of", "2026", env=env)
        assert done.returncode == 2, (command, done.stderr[-2000:])
        assert done.stderr.strip().splitlines()[-1].endswith(
            "'2026' is a year, not a date: name its day (2026-01-01 for its start, 2026-12-31 for all of it)"), done.stderr


async def test_a_year_alone_is_refused_by_the_mcp_tools(settings: Settings) -> None:
    async with Client(stdio_params(settings)) as client:
        for tool, arguments in (("recall", {"query": "drain"}), ("search_nodes", {"query": "drain"}),
                                ("show_node", {"node_id": "session:s1"})):
            result = await client.call_tool(tool, {**arguments, "as_of": "2026"})
            assert result.is_error and "'2026' is a year, not a date" in text_of(result), (tool, text_of(result))
