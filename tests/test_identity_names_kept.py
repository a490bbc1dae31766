"""Identity names and aliases kept whole (la33id, thirty-third session).

- A node two names were joined into is named by the fuller name (`Pam Beesly`, not `Beesly`),
  whatever the order the names were committed in, while its id stays the group's least
  (`PERSON:Beesly`): the id is what makes the graph independent of commit order, the name a pure
  choice over the group's names (:func:`store.facts.name_order`).
- A node with no claims (written by hand) keeps its name as an alias when a commit joins it to
  another, whether it survives or is folded into an incoming least id.
- An alias said with quotes or a leading separator around it (`"Jane Doe"`, `-Jane Doe`) is stored
  without them, so the alias index's range by the first word finds it.

Real cycles over real Chroma, real SQLite (and PostgreSQL where marked) and a real loopback model
server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from store.facts import least_name
from store.graph import Node
from tests.conftest import add_nodes, run_cli
from tests.llm_server import LLMServer, Reply, prompt_turns
from tests.test_change_scan import _query
from tests.test_forget import _env, _session
from tests.test_identity_judge_extension import judged, model
from tests.test_migrations_identity_verdicts import _import, questions
from worker.cycle import run_cycle


def test_the_fuller_name_names_the_node_whatever_the_order_of_its_names() -> None:
    """Most words first (a word as identity splits it: `QuerySet.iterator` is three, as `lazy edge
    queue` and `LazyEdgeQueue` are), then the spelling that writes the id, then the longer, then the
    least by case fold and as written: a minimum, so any order of the names gives it. Before, the
    spelling writing the id came first: `Beesly`."""
    for names in (["Beesly", "Pam Beesly"], ["Pam Beesly", "Beesly"]):
        assert least_name(names, node_id="PERSON:Beesly") == "Pam Beesly"
    assert least_name(["Pam Beesly", "Pamela Beesly", "Beesly"], node_id="PERSON:Beesly") == "Pamela Beesly"
    assert least_name(["Pamela Beesly", "Pam Beesly"], node_id="PERSON:Pam Beesly") == "Pam Beesly"
    assert least_name(["lazy_edge_queue", "lazy edge queue", "LazyEdgeQueue"], node_id="CLASS:LazyEdgeQueue") == "LazyEdgeQueue"
    # Words as identity reads them: a leading article, a git diff's `a/` before a path add none.
    assert least_name(["the lazy edge queue", "lazy edge queue"], node_id="CONCEPT:lazy edge queue") == "lazy edge queue"
    assert least_name(["a/src/x.py", "src/x.py"], node_id="FILE:src/x.py") == "src/x.py"
    # An issue is its number: the id's spelling names it, not a longer way of saying it.
    assert least_name(["issue 42", "#42", "Issue #42: crash on start"], node_id="ISSUE:#42") == "#42"


def _people(settings: Settings) -> list[tuple[Any, ...]]:
    return sorted(_query(settings, "SELECT id, name, properties FROM nodes WHERE label = 'PERSON'"))


def _aliases(settings: Settings, node_id: str) -> set[str]:
    return {r[0] for r in _query(settings, "SELECT alias FROM node_aliases WHERE node_id = ?", (node_id,))}


@pytest.mark.both_backends
async def test_two_names_joined_in_one_session_are_named_by_the_fuller(settings: Settings, tmp_path: Path) -> None:
    """The judge links `Beesly` and `Pam Beesly`, both new in one session: the node keeps the least
    id, `PERSON:Beesly`, and is named `Pam Beesly`; `Beesly` stays an alias (before: named
    `Beesly`)."""
    with LLMServer(default=Reply(model(names=("Pam Beesly", "Beesly")))) as server:
        mine = judged(settings, server)
        await _import(mine, tmp_path / "one.jsonl", [_session("one", "2026-11-01T10:00:00Z", ["Pam Beesly and Beesly again."])])
        assert (await run_cycle(mine)).outcome == "completed"
        assert len(questions(server)) == 1
    ((node_id, name, _),) = _people(settings)
    assert (node_id, name) == ("PERSON:Beesly", "Pam Beesly")
    assert _aliases(settings, node_id) == {"Beesly", "Pam Beesly"}


async def _graph_in_order(tmp_path: Path, order: tuple[str, str]) -> dict[str, Any]:
    """`Pam Beesly` said in session `one`, `Beesly` in session `two`, committed in ``order`` (a
    cycle each) into a graph of its own; the graph as data."""
    said = {"one": ("2026-11-01T10:00:00Z", "Pam Beesly runs the front desk."), "two": ("2026-11-02T10:00:00Z", "Beesly called.")}
    settings = load_settings(data_dir=tmp_path / "-".join(order))
    with LLMServer(default=Reply(model(names=("Pam Beesly", "Beesly")))) as server:
        mine = judged(settings, server)
        for sid in order:
            created, text = said[sid]
            await _import(mine, tmp_path / f"{'-'.join(order)}-{sid}.jsonl", [_session(sid, created, [text])])
            assert (await run_cycle(mine)).outcome == "completed"
        assert len(questions(server)) == 1
    return {
        "nodes": _query(settings, "SELECT id, label, name, properties FROM nodes ORDER BY id"),
        "aliases": sorted(_query(settings, "SELECT node_id, alias, alias_key FROM node_aliases")),
        "edges": _query(settings, "SELECT source, target, relationship, weight FROM edges ORDER BY 1, 2, 3"),
    }


async def test_the_fuller_name_whatever_the_commit_order(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    """The two names in two sessions, committed in either order: the same graph, the node
    `PERSON:Beesly` named `Pam Beesly` (before: named `Beesly` in both orders — the same graph, but
    not the fuller name). One order folds the existing `Pam Beesly` into the incoming least id, the
    other links the incoming `Pam Beesly` to the existing `Beesly`."""
    first = await _graph_in_order(tmp_path, ("one", "two"))
    second = await _graph_in_order(tmp_path, ("two", "one"))
    assert first == second
    people = [(r[0], r[2]) for r in first["nodes"] if r[1] == "PERSON"]
    assert people == [("PERSON:Beesly", "Pam Beesly")]
    assert {r[1] for r in first["aliases"] if r[0] == "PERSON:Beesly"} == {"Beesly", "Pam Beesly"}


@pytest.mark.both_backends
@pytest.mark.parametrize("written", ["folded into the incoming least id", "the least id itself"])
async def test_a_node_written_by_hand_keeps_its_name_as_an_alias(settings: Settings, tmp_path: Path, written: str) -> None:
    """A node written by hand (no claims, no aliases) joined by a commit: its name stays an alias
    of the node. Folded into an incoming least id (`PERSON:Tomás Herrera` into the `Tomas Herrera`
    a session says, no judge needed) — before, `Tomás Herrera` was no alias of the survivor. Or
    the survivor itself (`PERSON:Beesly`, which the judge joins to `Pam Beesly`): before, renamed
    `Pam Beesly` by the fuller name, `Beesly` would be no alias."""
    if written == "the least id itself":
        hand, said, kept = Node("PERSON:Beesly", "PERSON", "Beesly", {}), "Pam Beesly", "PERSON:Beesly"
    else:
        hand, said, kept = Node("PERSON:Tomás Herrera", "PERSON", "Tomás Herrera", {}), "Tomas Herrera", "PERSON:Tomas Herrera"
    add_nodes(settings, [hand])
    with LLMServer(default=Reply(model(names=(said,)))) as server:
        mine = judged(settings, server)
        await _import(mine, tmp_path / "one.jsonl", [_session("one", "2026-11-01T10:00:00Z", [f"{said} called."])])
        assert (await run_cycle(mine)).outcome == "completed"
    assert [r[0] for r in _people(settings)] == [kept]
    assert _aliases(settings, kept) == {hand.name, said}


_TYPED = re.compile(r"\[([A-Z]+) ([^\]|]+)(?:\|([^\]]+))?\]")


def typed_with_aliases(body: dict[str, Any]) -> dict[str, Any]:
    """The model: each ``[TYPE Name]`` or ``[TYPE Name|alias]`` a turn writes is a node of that
    type and name (with that alias, as written)."""
    nodes: dict[tuple[str, str], dict[str, Any]] = {}
    for number, text in prompt_turns(body):
        for kind, name, alias in _TYPED.findall(text):
            nodes.setdefault((kind, name), {"id": f"{kind}-{name}", "type": kind, "name": name, "description": name,
                                            "aliases": [alias] if alias else [], "confidence": 0.9,
                                            "evidence": [{"turn": number, "quote": name}]})
    return {"summary": "things", "nodes": list(nodes.values()), "edges": []}


@pytest.mark.both_backends
@pytest.mark.parametrize("alias", ['"Jane Doe"', "-Jane Doe", "'Jane Doe'", "— Jane Doe"])
async def test_an_alias_said_with_quotes_or_a_separator_around_it_is_found_by_its_words(settings: Settings, tmp_path: Path, alias: str) -> None:
    """A CONCEPT `Doe Papers` the model gave the alias ``"Jane Doe"`` (or ``-Jane Doe``…) beside the
    PERSON `Jane Doe`: the `named` rule joins the two; an operator parts them (``unmerge``), then
    forgets the person. A later CONCEPT `Jane Doe` is another thing the graph's CONCEPTs know by
    that name, so it joins `Doe Papers` and is not left out. Before, the alias was stored as said,
    its key (``"jane doe"``) outside the alias index's range by the first word (``jane``): the
    CONCEPT was left out (``suppressed`` 1)."""
    env = _env(settings)
    with LLMServer(default=Reply(typed_with_aliases)) as server:
        mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_max_retries": 0})
        await _import(mine, tmp_path / "s1.jsonl", [_session("s1", "2026-11-01T10:00:00Z", [f"We met [PERSON Jane Doe] over the [CONCEPT Doe Papers|{alias}]."])])
        assert (await run_cycle(mine)).outcome == "completed"
        assert _query(settings, "SELECT merged_id, into_id FROM merges") == [("CONCEPT:doe papers", "PERSON:Jane Doe")]
        for command in (("unmerge", "CONCEPT:doe papers"), ("forget", "--node", "PERSON:Jane Doe")):
            done = run_cli(*command, env=env)
            assert done.returncode == 0, done.stderr
        await _import(mine, tmp_path / "s2.jsonl", [_session("s2", "2026-11-02T10:00:00Z", ["[CONCEPT Jane Doe] wrote again."])])
        result = await run_cycle(mine)
    assert result.outcome == "completed" and result.phases["extract"]["suppressed"] == 0, result.phases["extract"]
    points = _query(settings, "SELECT DISTINCT node_id FROM node_points WHERE anchor = 'session:s2'")
    assert [r[0] for r in points] == ["CONCEPT:doe papers"], points
    assert "Jane Doe" in _aliases(settings, "CONCEPT:doe papers")
