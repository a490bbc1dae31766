"""What readers are served over MCP, adversarially (audit-notes): the official ``mcp`` SDK client and
raw JSON-RPC lines against a real ``rem-cycle mcp`` process over a graph built by a real cycle."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from config import Settings, load_settings
from pipelines.recall import MAX_BUDGET_TOKENS, item_tokens
from tests.conftest import ROOT, copy_digested_sample, run_cli
from tests.test_mcp import graph, server_env, stdio_params, text_of  # noqa: F401 - the fixture
from tests.test_recall import ask
from worker.knowledge import merge_node
from worker.recall import search_nodes, show_node

pytestmark = pytest.mark.timeout(120)

MANY = "LazyEdgeQueue drain Zephyr Heron payroll BLUEFIN"


async def test_search_nodes_answers_within_a_token_budget_and_says_what_it_left_out(graph: Settings) -> None:
    # show_node and recall pack into budget_tokens; search_nodes returned up to `limit` whole
    # entities, each with its description, quotes and relations, whatever they cost the caller.
    everything = search_nodes(graph, MANY, budget_tokens=MAX_BUDGET_TOKENS)
    assert len(everything["nodes"]) >= 3 and everything["omitted"] == []
    costs = [item_tokens(n) for n in everything["nodes"]]
    budget = costs[0] + costs[1] - 1  # the first fits, the second does not
    packed = search_nodes(graph, MANY, budget_tokens=budget)
    assert packed["budget_tokens"] == budget and packed["used_tokens"] <= budget
    assert packed["nodes"][0] == everything["nodes"][0]
    assert everything["nodes"][1]["id"] not in {n["id"] for n in packed["nodes"]}
    shown = {n["id"] for n in packed["nodes"]}
    assert [o["id"] for o in packed["omitted"]] == [n["id"] for n in everything["nodes"] if n["id"] not in shown]
    assert all(o["kind"] == "node" and o["tokens"] > 0 for o in packed["omitted"])
    assert packed["used_tokens"] == sum(item_tokens(n) for n in packed["nodes"])

    async with Client(stdio_params(graph, REM_RECALL_BUDGET_TOKENS=str(budget))) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "search_nodes")
        schema = tool.input_schema["properties"]["budget_tokens"]
        assert (schema["minimum"], schema["maximum"], schema["default"]) == (1, MAX_BUDGET_TOKENS, budget)
        assert schema["description"]
        default = await client.call_tool("search_nodes", {"query": MANY})
        assert not default.is_error, text_of(default)
        assert default.structured_content["used_tokens"] <= budget == default.structured_content["budget_tokens"]
        assert default.structured_content["nodes"] == packed["nodes"]
        wide = await client.call_tool("search_nodes", {"query": MANY, "budget_tokens": MAX_BUDGET_TOKENS})
        assert wide.structured_content["nodes"] == everything["nodes"]
        for bad in (0, MAX_BUDGET_TOKENS + 1, "lots"):
            refused = await client.call_tool("search_nodes", {"query": MANY, "budget_tokens": bad})
            assert refused.is_error and "budget_tokens" in text_of(refused), bad


def test_recall_names_an_omitted_fact_by_its_node_id_not_by_its_quotes_turn(graph: Settings) -> None:
    # `omitted` named a fact that did not fit by the memory_id of its quote ("memory:am1"), so a
    # caller asking again for it got a turn, and could not tell it from an omitted turn.
    whole = ask(graph, MANY, budget_tokens=MAX_BUDGET_TOKENS)
    assert whole["facts"] and whole["omitted"] == []
    done = run_cli("recall", MANY, "--budget-tokens", "1", "--json", env={"REM_DATA_DIR": str(graph.data_dir)}, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["facts"] == answer["turns"] == [] and answer["used_tokens"] == 0
    omitted = {kind: [o["id"] for o in answer["omitted"] if o["kind"] == kind] for kind in ("fact", "turn", "session")}
    assert omitted["fact"] == [f["id"] for f in whole["facts"]]
    assert omitted["turn"] == [t["memory_id"] for t in whole["turns"]]
    assert omitted["session"] == [s["id"] for s in whole["sessions"]]


def test_a_lone_surrogate_in_a_call_over_stdio_is_answered_not_left_hanging(graph: Settings) -> None:
    # JSON may spell half of a surrogate pair ("\ud83d", an emoji a client cut in two; JavaScript's
    # JSON.stringify writes one so). The SDK's parser refused the line and over stdio answered
    # nothing: the client waited for ever for that call. Now the half is U+FFFD, as bytes that are
    # not UTF-8 are, and the call is answered like any other.
    server = subprocess.Popen([sys.executable, "-m", "worker", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=server_env(graph), cwd=str(ROOT))
    assert server.stdin is not None and server.stdout is not None

    def call(number: int, method: str, params: dict[str, Any] | None = None, *, raw: str | None = None) -> dict[str, Any] | None:
        line = raw or json.dumps({"jsonrpc": "2.0", "id": number, "method": method, **({"params": params} if params else {})})
        server.stdin.write(line.encode("ascii") + b"\n")
        server.stdin.flush()
        if not select.select([server.stdout], [], [], 15)[0]:
            return None
        return json.loads(server.stdout.readline())

    try:
        assert call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
        server.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        for number, (tool, arguments, said) in enumerate((
            ("recall", '{"query": "torn lines \\ud83d"}', None),
            ("search_nodes", '{"query": "\\udc80LazyEdgeQueue"}', None),
            ("show_node", '{"node_id": "CLASS:\\ud800"}', "no entity 'CLASS:\ufffd'"),
        ), start=1):
            raw = f'{{"jsonrpc": "2.0", "id": {number}, "method": "tools/call", "params": {{"name": "{tool}", "arguments": {arguments}}}}}'
            answer = call(number, "", raw=raw)
            assert answer is not None, f"{tool}: no answer"
            assert answer["id"] == number
            result = answer["result"]
            if said is None:
                assert not result.get("isError"), result
            else:
                assert result["isError"] and said in result["content"][0]["text"]
        recalled = call(9, "tools/call", {"name": "recall", "arguments": {"query": "torn lines \ud83d\ude00"}})
        assert recalled and recalled["result"]["structuredContent"]["turns"][0]["session_id"] == "session:alice-s1"
    finally:
        server.stdin.close()
        server.wait(timeout=30)


async def test_show_node_of_an_id_merged_since_shows_the_node_it_was_merged_into(graph: Settings) -> None:
    # An agent keeps the ids recall gave it. After an operator's `merge`, `rem-cycle show OLD`
    # shows the node OLD was merged into (and says so); MCP show_node answered "no entity", as if
    # everything known of it were gone.
    before = show_node(graph, "METHOD:drain", budget_tokens=MAX_BUDGET_TOKENS)
    assert before is not None and before.get("redirected_from") is None
    assert merge_node(graph, "METHOD:drain", "CLASS:LazyEdgeQueue") > 0
    async with Client(stdio_params(graph)) as client:
        shown = await client.call_tool("show_node", {"node_id": "METHOD:drain"})
        assert not shown.is_error, text_of(shown)
        body = shown.structured_content
        assert (body["id"], body["redirected_from"]) == ("CLASS:LazyEdgeQueue", "METHOD:drain")
        assert body["turns"] and body["used_tokens"] <= body["budget_tokens"]
        direct = await client.call_tool("show_node", {"node_id": "CLASS:LazyEdgeQueue"})
        same = ("description", "edges", "evidence", "turns", "omitted")
        assert {k: direct.structured_content[k] for k in same} == {k: body[k] for k in same}
        # Within a user's scope as everywhere: bob never said `drain` in alice's session.
        scoped = await client.call_tool("show_node", {"node_id": "METHOD:drain", "user": "alice"})
        assert {t["session_id"] for t in scoped.structured_content["turns"]} == {"session:alice-s1"}
        missing = await client.call_tool("show_node", {"node_id": "METHOD:never_there"})
        assert missing.is_error and "no entity" in text_of(missing)
    cli = run_cli("show", "METHOD:drain", "--json", env={"REM_DATA_DIR": str(graph.data_dir)}, timeout=60)
    assert json.loads(cli.stdout)["redirected_from"] == "METHOD:drain"


async def test_show_node_says_how_many_turns_an_entity_was_mentioned_in(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, digested_sample: Path,
) -> None:
    # show_node lists the 20 turns an entity is most cited in; the others were dropped without a
    # word (not in `omitted`, no count): an entity of 64 turns looked like one of 20.
    data = copy_digested_sample(digested_sample, tmp_path / "data")
    settings = load_settings(data_dir=data)
    whole = show_node(settings, "CLASS:RetryPolicy", budget_tokens=MAX_BUDGET_TOKENS)
    assert whole is not None and len(whole["turns"]) == 20 and whole["omitted"] == []
    assert whole["turns_total"] > 20
    async with Client(stdio_params(settings)) as client:
        shown = await client.call_tool("show_node", {"node_id": "CLASS:RetryPolicy", "user": "nobody-at-all"})
        assert shown.is_error  # out of every scope: not there
        shown = await client.call_tool("show_node", {"node_id": "CLASS:RetryPolicy"})
        assert not shown.is_error, text_of(shown)
        body = shown.structured_content
        assert body["turns_total"] == whole["turns_total"]
        assert len(body["turns"]) + len(body["omitted"]) == 20
