"""The last two sessions' code, attacked (audit30, thirtieth session).

- A hand ``merge`` of a CONCEPT known by a forgotten person's full name into another CONCEPT, and
  its ``unmerge``, were refused (exit 2) as bringing that name back into CONCEPT nodes, though a
  CONCEPT held it before the edit (the forget left it: another thing) and only moved it — where a
  later extraction of that CONCEPT name was let in (:func:`pipelines.extract.commit.kept_out`).
  An edit that moves a name between two nodes of one type is judged by who held it before.
- A CONCEPT whose name a CONCEPT still held passed the cross-type rule whole, with an alias the
  rule kept out (a forgotten person's other full name, held by no CONCEPT): the alias came in
  under the CONCEPT type. Each name is judged on its own now.
- input29 made ``recall`` and ``search_nodes`` refuse a budget or limit that is no whole number (a
  bool, a string); ``show_node``'s budget, checked apart in ``pack_entity``, still took ``True``
  as a budget of 1 token and raised ``TypeError`` on ``"500"``. One check for all three.
- Text that is not UTF-8 was refused naming ``merge``'s first id ``MERGED_ID`` (its usage says
  ``NODE_ID``) and an abbreviated ``--us`` as ``USER``: named as the usage names them now.

Real SQLite and PostgreSQL, the ``rem-cycle`` CLI in a subprocess, a real cycle over a real
OpenAI-compatible server on loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.recall import RecallInputError
from store.graph import Node
from tests.conftest import add_nodes, run_cli
from tests.llm_server import LLMServer, Reply, prompt_turns
from tests.test_change_scan import _query
from tests.test_forget import _env
from tests.test_forget_named import _ids, _model, _said, typed_as_written
from tests.test_mcp import graph  # noqa: F401 - the fixture
from worker.recall import search_nodes, show_node


@pytest.mark.both_backends
async def test_a_hand_merge_and_unmerge_that_move_a_name_within_its_type_are_not_refused(settings: Settings, tmp_path: Path) -> None:
    """PERSON ``Jane Doe`` forgotten while a CONCEPT ``Jane Doe`` is kept (another thing): merging
    that CONCEPT into the CONCEPT ``Doe Papers`` moves the name within CONCEPT nodes, and
    unmerging it moves it back — both go through (exit 0), as a later extraction of the CONCEPT
    ``Jane Doe`` joins the node that holds the name. Before, both were refused as giving a
    CONCEPT a name kept out of CONCEPT nodes."""
    with LLMServer(default=Reply(typed_as_written)) as server:
        mine = _model(settings, server)
        await _said(mine, tmp_path, "s1", 1, ["We met [PERSON Jane Doe]."])
        env = _env(settings)
        assert run_cli("forget", "--node", "PERSON:Jane Doe", env=env).returncode == 0
        add_nodes(settings, [Node("CONCEPT:jane doe", "CONCEPT", "Jane Doe", {}), Node("CONCEPT:doe papers", "CONCEPT", "Doe Papers", {})])
        merged = run_cli("merge", "CONCEPT:jane doe", "CONCEPT:doe papers", env=env)
        assert merged.returncode == 0, merged.stderr
        assert "CONCEPT:jane doe" not in _ids(settings)
        extract = await _said(mine, tmp_path, "s2", 2, ["[CONCEPT Jane Doe] wrote again."])
        assert extract["suppressed"] == 0, extract  # the commit's view: a CONCEPT holds the name
        unmerged = run_cli("unmerge", "CONCEPT:jane doe", env=env)
        assert unmerged.returncode == 0, unmerged.stderr
    assert {"CONCEPT:jane doe", "CONCEPT:doe papers"} <= _ids(settings)
    assert _query(settings, "SELECT COUNT(*) FROM merges WHERE undone_at IS NULL")[0][0] == 0


def _with_alias(body: dict[str, Any]) -> dict[str, Any]:
    """The model: as :func:`typed_as_written`, and ``[CONCEPT Jane Doe]`` also called ``John Roe``."""
    reply = typed_as_written(body)
    for node in reply["nodes"]:
        if node["name"] == "Jane Doe" and node["type"] == "CONCEPT":
            node["aliases"] = ["John Roe"]
    assert prompt_turns(body)
    return reply


@pytest.mark.both_backends
async def test_a_name_the_type_still_knows_does_not_let_in_an_alias_it_keeps_out(settings: Settings, tmp_path: Path) -> None:
    """PERSONs ``Jane Doe`` and ``John Roe`` forgotten, a CONCEPT ``Jane Doe`` kept: a later CONCEPT
    ``Jane Doe`` also called ``John Roe`` is left out (counted ``suppressed``), where its first name
    let it in whole and the CONCEPT took ``John Roe``, kept out of CONCEPT nodes as no CONCEPT was
    known by it."""
    with LLMServer(default=Reply(_with_alias)) as server:
        mine = _model(settings, server)
        await _said(mine, tmp_path, "s1", 1, ["We met [PERSON Jane Doe] and [PERSON John Roe]."])
        env = _env(settings)
        for person in ("PERSON:Jane Doe", "PERSON:John Roe"):
            assert run_cli("forget", "--node", person, env=env).returncode == 0
        add_nodes(settings, [Node("CONCEPT:jane doe", "CONCEPT", "Jane Doe", {})])
        extract = await _said(mine, tmp_path, "s2", 2, ["[CONCEPT Jane Doe] wrote again."])
    assert extract["suppressed"] == 1, extract
    assert _query(settings, "SELECT COUNT(*) FROM node_aliases WHERE alias_key = 'john roe'")[0][0] == 0


@pytest.mark.parametrize("budget", [True, False, "500", 2.0, 0])
async def test_show_node_refuses_a_budget_that_is_no_whole_number_as_recall_does(graph: Settings, budget: Any) -> None:  # noqa: F811
    """``show_node(budget_tokens=True)`` packed the entity into 1 token (and refused it as too large
    for that), ``"500"`` raised ``TypeError``: the same refusal as ``recall`` and ``search_nodes``."""
    for call in (lambda: show_node(graph, "CLASS:LazyEdgeQueue", budget_tokens=budget),
                 lambda: search_nodes(graph, "LazyEdgeQueue", budget_tokens=budget)):
        with pytest.raises(RecallInputError, match="budget_tokens must be a whole number"):
            call()
    assert show_node(graph, "CLASS:LazyEdgeQueue", budget_tokens=500) is not None


def test_text_not_utf8_is_named_as_the_usage_names_its_argument(graph: Settings) -> None:  # noqa: F811
    """The refusal named a positional by its destination (``MERGED_ID``, where ``merge``'s usage
    says ``NODE_ID``) and an abbreviated option (``--us``) as ``USER``: now as ``--help`` shows them."""
    env = _env(graph)
    for args, says in ((("merge", "A\udce9", "CLASS:B"), "NODE_ID b'A\\xe9'"),
                       (("recall", "torn lines", "--us", "alice\udcff"), "--user b'alice\\xff'"),
                       (("recall", "torn lines", "--user=alice\udcff"), "--user b'alice\\xff'")):
        done = run_cli(*args, env=env)
        assert done.returncode == 2 and done.stderr.startswith(f"rem-cycle: {says} is not UTF-8"), (args, done.stderr)
