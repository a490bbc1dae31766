"""Hostile input, second pass (input29, twenty-ninth session): what earlier audits found and left.

- The MCP tools read ``limit: true`` as 1 and ``"3"`` as 3 (pydantic's lax mode; a bool is an int
  to Python), ``recency: "yes"`` as true; the recall API took ``limit=True``. Refused now as any
  bad number is, over stdio and HTTP.
- ``--as-of -1`` was epoch second -1, 1969: an empty answer without a word. A moment before 1970
  is refused by every command that takes ``--as-of`` and by the MCP tools.
- ``search`` of text that is not UTF-8 (a command-line byte of another encoding) failed as a
  database error (exit 1); ``recall`` dropped the word and answered another query. Every text
  argument but a file's is refused in one line, exit 2, naming the bytes.
- A date whose numbers do not tell the day from the month was read month first when its
  separators were mixed, spaced or words (``4/12-2026``, ``4 / 12 / 2026``, ``4;12;2026``,
  ``4th 12 2026``): the 12th of April. Refused, as ``4/12/2026`` is.

Real processes (``rem-cycle`` commands, ``rem-cycle mcp`` over stdio and HTTP), real SQLite files
and the test PostgreSQL server, a real cycle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from config import Settings
from pipelines.asof import AsOfError
from pipelines.asof import parse_as_of as show_as_of
from pipelines.recall import RecallInputError, parse_as_of
from tests.conftest import run_cli
from tests.test_forget import _env
from tests.test_mcp import graph, http_client, http_server, stdio_params, text_of  # noqa: F401 - the fixture
from tests.test_recall import ask
from worker.recall import search_nodes

pytestmark = pytest.mark.timeout(240)


# --- 1. a number of another JSON type -------------------------------------------------------------
# Each call is refused as a tool error naming the argument, as `limit: 0` is.
BAD_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("recall", {"query": "torn lines", "limit": True}, "limit"),
    ("recall", {"query": "torn lines", "limit": False}, "limit"),
    ("recall", {"query": "torn lines", "limit": "3"}, "limit"),
    ("recall", {"query": "torn lines", "budget_tokens": True}, "budget_tokens"),
    ("recall", {"query": "torn lines", "recency": "yes"}, "recency"),
    ("recall", {"query": "torn lines", "recency": 1}, "recency"),
    ("search_nodes", {"query": "LazyEdgeQueue", "limit": True}, "limit"),
    ("search_nodes", {"query": "LazyEdgeQueue", "budget_tokens": "500"}, "budget_tokens"),
    ("show_node", {"node_id": "CLASS:LazyEdgeQueue", "budget_tokens": True}, "budget_tokens"),
]


async def _refuses_other_json_types(client: Client) -> None:
    for tool in (await client.list_tools()).tools:  # the bounds stay in the schema a client reads
        for name in ("limit", "budget_tokens"):
            if (schema := tool.input_schema["properties"].get(name)) is not None:
                assert schema["type"] == "integer" and schema["minimum"] == 1 and "maximum" in schema, (tool.name, schema)
    zero = await client.call_tool("recall", {"query": "torn lines", "limit": 0})
    assert zero.is_error and "validation error" in text_of(zero) and "limit" in text_of(zero), text_of(zero)
    for tool, arguments, name in BAD_TYPES:
        result = await client.call_tool(tool, arguments)
        assert result.is_error, (tool, arguments, str(result.structured_content)[:300])
        assert "validation error" in text_of(result) and f"\n{name}\n" in text_of(result), (tool, arguments, text_of(result))
    # A JSON number that is a whole one is read (JSON Schema counts 3.0 as an integer), and the server serves on.
    three = await client.call_tool("recall", {"query": "torn lines", "limit": 3.0, "recency": True})
    assert not three.is_error and three.structured_content["turns"], text_of(three)


async def test_the_mcp_tools_refuse_true_and_a_string_for_a_number_over_stdio(graph: Settings) -> None:  # noqa: F811
    """``limit: true`` answered as ``limit: 1`` (one turn), ``"3"`` as 3, ``recency: "yes"`` as true."""
    async with Client(stdio_params(graph)) as client:
        await _refuses_other_json_types(client)


async def test_the_mcp_tools_refuse_true_and_a_string_for_a_number_over_http(graph: Settings) -> None:  # noqa: F811
    with http_server(graph) as url:
        async with http_client(url, None) as client:
            await _refuses_other_json_types(client)


@pytest.mark.parametrize("options", [{"limit": True}, {"limit": False}, {"budget_tokens": True}, {"limit": 2.0}, {"limit": "3"}])
async def test_the_recall_api_refuses_a_limit_that_is_no_whole_number(graph: Settings, options: dict[str, Any]) -> None:  # noqa: F811
    """``RecallRequest(limit=True)`` was a limit of 1 (``1 <= True``); ``search_nodes(limit=True)`` too."""
    name = next(iter(options))
    with pytest.raises(RecallInputError, match=f"{name} must be a whole number"):
        ask(graph, "torn lines", **options)
    if name == "limit":
        with pytest.raises(RecallInputError, match="limit must be a whole number"):
            search_nodes(graph, "LazyEdgeQueue", limit=options["limit"])


# --- 2. a moment before 1970 ----------------------------------------------------------------------
BEFORE_1970 = ["-1", "-1.5", "-100000000000", "-1796378400000", "1969-12-31", "1969-12-31T23:59:59.999Z",
               "1970-01-01T01:00+02:00", "Dec 31 1969", "0001-01-01"]


def test_a_moment_before_1970_is_refused_by_both_readers() -> None:
    """``-1`` was 1969-12-31T23:59:59Z and every answer empty: no time a memory has is before 1970
    (ingest refuses one), so the moment was a slip of sign or unit. The ISO reader (``show``,
    ``search``, ``export``) refuses the ISO ones alike. Epoch 0 (also ``-0``) and 1970's first
    moments are read as before."""
    for text in BEFORE_1970:
        with pytest.raises(RecallInputError, match="before 1970-01-01T00:00Z"):
            moment = parse_as_of(text)
            pytest.fail(f"{text!r} was read as {moment}")
        if text[0].isdigit():
            with pytest.raises(AsOfError, match="before 1970-01-01T00:00Z"):
                show_as_of(text)
    assert parse_as_of("0") == parse_as_of("-0") == "1970-01-01T00:00:00.000Z"
    assert parse_as_of("1970-01-01") == show_as_of("1970-01-01") == "1970-01-01T23:59:59.999Z"
    assert parse_as_of("1970-01-01T01:00+01:00") == show_as_of("1970-01-01T01:00+01:00") == "1970-01-01T00:00:00.000Z"


@pytest.mark.both_backends
@pytest.mark.parametrize(("command", "text"), [
    (("recall", "torn lines"), "-1"), (("recall", "torn lines"), "1969-12-31"), (("show", "CLASS:LazyEdgeQueue"), "1969-12-31"),
    (("search", "LazyEdgeQueue"), "1969-12-31T23:00Z"), (("export",), "1969-12-31"),
])
def test_every_command_refuses_a_moment_before_1970_in_one_line(graph: Settings, command: tuple[str, ...], text: str) -> None:  # noqa: F811
    """``recall --as-of -1`` answered nothing (exit 0), ``show``/``search``/``export --as-of
    1969-12-31`` the empty graph of then."""
    done = run_cli(*command, "--as-of", text, env=_env(graph))
    assert done.returncode == 2, (command, text, done.stdout[-500:], done.stderr[-2000:])
    assert len(done.stderr.strip().splitlines()) == 1 and "before 1970-01-01T00:00Z" in done.stderr, done.stderr


async def test_the_mcp_tools_refuse_a_moment_before_1970(graph: Settings) -> None:  # noqa: F811
    async with Client(stdio_params(graph)) as client:
        for tool, arguments in (("recall", {"query": "torn lines"}), ("search_nodes", {"query": "LazyEdgeQueue"}),
                                ("show_node", {"node_id": "CLASS:LazyEdgeQueue"})):
            result = await client.call_tool(tool, {**arguments, "as_of": "-1"})
            assert result.is_error and "before 1970-01-01T00:00Z" in text_of(result), (tool, text_of(result))


# --- 3. text that is not UTF-8 ----------------------------------------------------------------------
# Python reads a command-line byte that is not UTF-8 as a lone surrogate (b"caf\xe9" -> "caf\udce9").
NOT_UTF8 = [
    (("search", "LazyEdge\udce9"), "TEXT b'LazyEdge\\xe9'"),
    (("recall", "caf\udce9 torn lines"), "QUERY b'caf\\xe9 torn lines'"),
    (("search", "LazyEdgeQueue", "--label", "CLASS\udcff"), "--label b'CLASS\\xff'"),
    (("recall", "torn lines", "--user", "alice\udcff"), "--user b'alice\\xff'"),
    (("retry", "--session", "alice-s1", "--session", "s\udcff"), "--session b's\\xff'"),
    (("show", "LazyEdge\udce9"), "NODE_ID b'LazyEdge\\xe9'"),
]


@pytest.mark.both_backends
def test_text_that_is_not_utf8_is_refused_in_one_line_by_every_command(graph: Settings, tmp_path: Path) -> None:  # noqa: F811
    """``search`` failed as the database refused the text (exit 1, "the database cannot store
    text …"), ``recall`` answered the query without the word; ``--user`` and ``show`` refused in
    words of their own. Now each says which argument is not UTF-8, with its bytes, exit 2. A file
    argument keeps its bytes: ``export --out caf\\xe9.json`` writes that file."""
    env = _env(graph)
    for args, says in NOT_UTF8:
        done = run_cli(*args, env=env)
        assert done.returncode == 2, (args, done.stdout[-300:], done.stderr[-2000:])
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"rem-cycle: {says} is not UTF-8"), (args, done.stderr)
    out = tmp_path / "caf\udce9.json"
    done = run_cli("export", "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(Path(out).read_text(encoding="utf-8"))["nodes"]
    found = run_cli("search", "LazyEdgeQueue", "--json", env=env)  # the graph answers as before
    assert found.returncode == 0 and json.loads(found.stdout)["results"], found.stderr[-2000:]


# --- 5. a date that does not tell the day from the month -------------------------------------------
AMBIGUOUS = ["4/12-2026", "4-12/2026", "4 / 12 / 2026", "4/12 2026", "4//12//2026", "4, 12, 2026", "4;12;2026",
             "10:00 4-12/2026", "4th 12 2026", "4 of 12 of 2026", "4t12t2026"]
TOLD = [("13/4-2026", "2026-04-13"), ("4 / 13 / 2026", "2026-04-13"), ("2026 4/12", "2026-04-12"),
        ("10:00 2026/12/04", "2026-12-04"), ("December 4th, 2026", "2026-12-04"), ("13th 4 2026", "2026-04-13"),
        ("4;4;2026", "2026-04-04")]


def test_a_date_apart_by_mixed_separators_or_words_does_not_pass_for_told() -> None:
    """Each of :data:`AMBIGUOUS` was read month first, the 12th of April, without a word
    (``4/12/2026`` was refused); what tells the day from the month (:data:`TOLD`: a day over 12,
    the same number twice, the year first, a month by name) keeps its reading."""
    for text in AMBIGUOUS:
        with pytest.raises(RecallInputError) as caught:
            moment = parse_as_of(text)
            pytest.fail(f"{text!r} was read as {moment}")
        message = str(caught.value)
        assert "does not tell the day from the month" in message and "2026-12-04" in message and "2026-04-12" in message
    for text, day in TOLD:
        assert (parse_as_of(text) or "").startswith(day), text
