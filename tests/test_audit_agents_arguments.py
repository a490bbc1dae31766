"""What agents send, adversarially: arguments a model may well write (a session by its node id, a
far-future date) through the official ``mcp`` SDK client against a real ``rem-cycle mcp`` process,
and the same through ``rem-cycle recall``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from config import Settings
from pipelines.recall import item_tokens
from tests.conftest import run_cli
from tests.test_mcp import graph, stdio_params, text_of  # noqa: F401 - the fixture
from tests.test_recall import SESSIONS, build

pytestmark = pytest.mark.timeout(120)


async def test_a_session_given_by_its_node_id_in_any_case_is_that_session(graph: Settings) -> None:
    # Ids are accepted in any case everywhere (README, "The graph"): `SESSION:alice-s1` is the
    # session show_node and recall print as `session:alice-s1`. It answered nothing at all.
    async with Client(stdio_params(graph)) as client:
        answers = {}
        for given in ("alice-s1", "session:alice-s1", "SESSION:alice-s1", "Session:alice-s1"):
            result = await client.call_tool("recall", {"query": "torn lines drain", "session": given})
            assert not result.is_error, text_of(result)
            body = result.structured_content
            assert body["turns"], given
            assert {t["session_id"] for t in body["turns"]} == {"session:alice-s1"}, given
            answers[given] = [t["memory_id"] for t in body["turns"]]
        assert len({tuple(a) for a in answers.values()}) == 1
        # Another user's session by its upper-case node id stays out of a pinned user's reach.
        refused = await client.call_tool("recall", {"query": "payroll", "user": "alice", "session": "SESSION:bob-s1"})
        assert not refused.is_error and refused.structured_content["turns"] == []
    env = {"REM_DATA_DIR": str(graph.data_dir)}
    done = run_cli("recall", "torn lines drain", "--session", "SESSION:alice-s1", "--json", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {t["session_id"] for t in json.loads(done.stdout)["turns"]} == {"session:alice-s1"}


async def test_as_of_the_last_day_a_date_can_name_is_everything_not_an_error(graph: Settings) -> None:
    # `9999-12-31` means the end of that day: everything is known by then. Its end was computed by
    # adding a day, which overflowed: an MCP tool error with no message, a traceback from the CLI.
    async with Client(stdio_params(graph)) as client:
        now = await client.call_tool("recall", {"query": "torn lines drain", "user": "alice"})
        for name, arguments in (
            ("recall", {"query": "torn lines drain", "user": "alice", "as_of": "9999-12-31"}),
            ("search_nodes", {"query": "LazyEdgeQueue", "as_of": "9999-12-31"}),
            ("show_node", {"node_id": "CLASS:LazyEdgeQueue", "as_of": "9999-12-31"}),
        ):
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, text_of(result))
        late = await client.call_tool("recall", {"query": "torn lines drain", "user": "alice", "as_of": "9999-12-31"})
        assert late.structured_content["signals"]["scope"]["as_of"] == "9999-12-31T23:59:59.999Z"
        assert [t["memory_id"] for t in late.structured_content["turns"]] == [t["memory_id"] for t in now.structured_content["turns"]]
    env = {"REM_DATA_DIR": str(graph.data_dir)}
    done = run_cli("recall", "torn lines drain", "--as-of", "9999-12-31", "--json", env=env, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["turns"]


async def test_show_node_is_packed_into_its_token_budget(settings: Settings, tmp_path: Path) -> None:
    # A node's turns are verbatim, and turns can be tool outputs of hundreds of kilobytes: show_node
    # answered its 20 turns whole whatever their size (here ~2 MB, beyond any model's context),
    # with no way for the agent to ask for less.
    log = "LazyEdgeQueue drain log line with a torn record and its offset\n" * 3_000  # ~200 kB a turn
    carol = {"sessionId": "carol-s1", "title": "Carol's logs", "createdAt": "2026-11-21T10:00:00Z", "userId": "carol",
             "turns": [{"id": f"cm{i}", "role": "assistant", "createdAt": f"2026-11-21T10:0{i}:00Z", "text": f"The LazyEdgeQueue drain wrote this in run {i}:\n{log}"}
                       for i in range(10)]}
    await build(settings, tmp_path, [*SESSIONS, carol])
    async with Client(stdio_params(settings)) as client:
        for budget in (None, 300, 5_000, 200_000):
            arguments = {"node_id": "CLASS:LazyEdgeQueue"} | ({"budget_tokens": budget} if budget else {})
            result = await client.call_tool("show_node", arguments)
            assert not result.is_error, text_of(result)
            body = result.structured_content
            budget = budget or settings.recall_budget_tokens
            assert len(json.dumps(body)) < 4 * budget + 10_000
            entity = {k: v for k, v in body.items() if k not in ("turns", "omitted", "used_tokens", "budget_tokens")}
            assert body["budget_tokens"] == budget
            assert body["used_tokens"] == item_tokens(entity) + sum(item_tokens(t) for t in body["turns"]) <= budget
            assert body["omitted"] or budget == 200_000
        assert [t for t in body["turns"] if t.get("truncated")]  # a turn that does not fit whole is cut
        too_small = await client.call_tool("show_node", {"node_id": "CLASS:LazyEdgeQueue", "budget_tokens": 5})
        assert too_small.is_error and "ask with a larger budget" in text_of(too_small)
