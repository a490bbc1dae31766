"""``forget --node`` keeps a name out across the types the ``named`` identity rule makes one thing
(namedout, thirtieth session): a person, place, organisation or work forgotten is kept out of
CONCEPT nodes of its full name, which that rule would have merged into it, and a CONCEPT forgotten
out of those types — unless a node of that type is known by the name (the forget left it, or an
operator kept it): then it is another thing. A hand merge that would give a node such a name is
refused. Real cycles over a real OpenAI-compatible server on loopback (whose extraction types each
bracketed name as written), real SQLite and PostgreSQL, the ``rem-cycle`` CLI in a subprocess."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from store.graph import Node
from tests.conftest import add_nodes, run_cli
from tests.llm_server import LLMServer, Reply, prompt_turns
from tests.test_change_scan import _query
from tests.test_forget import _env, _session
from tests.test_migrations_identity_verdicts import _import
from worker.cycle import run_cycle

_TYPED = re.compile(r"\[([A-Z]+) ([^\]]+)\]")


def typed_as_written(body: dict[str, Any]) -> dict[str, Any]:
    """The model: each ``[TYPE Name]`` a turn writes is a node of that type and name."""
    nodes: dict[tuple[str, str], dict[str, Any]] = {}
    for number, text in prompt_turns(body):
        for kind, name in _TYPED.findall(text):
            nodes.setdefault((kind, name), {"id": f"{kind}-{name}", "type": kind, "name": name, "description": f"{name}",
                                            "confidence": 0.9, "evidence": [{"turn": number, "quote": name}]})
    return {"summary": "people", "nodes": list(nodes.values()), "edges": []}


def _ids(settings: Settings) -> set[str]:
    return {r[0] for r in _query(settings, "SELECT id FROM nodes WHERE label NOT IN ('MEMORY', 'SESSION', 'NOTE')")}


async def _said(settings: Settings, tmp_path: Path, sid: str, day: int, turns: list[str]) -> dict[str, Any]:
    """Session ``sid`` said and a cycle run; the extract phase's record."""
    await _import(settings, tmp_path / f"{sid}.jsonl", [_session(sid, f"2026-11-{day:02d}T10:00:00Z", turns)])
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result.phases["extract"]


def _model(settings: Settings, server: LLMServer) -> Settings:
    return settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_max_retries": 0})


@pytest.mark.both_backends
async def test_a_person_forgotten_is_kept_out_as_a_concept_of_the_full_name(settings: Settings, tmp_path: Path) -> None:
    """PERSON ``Jane Doe`` forgotten; a later session calls her a CONCEPT ``Jane Doe``: left out
    (counted ``suppressed``), where it became a new node holding her name. A one-word CONCEPT
    ``Jane`` is not (the rule is for full names), nor is a CONCEPT of another name. And the other
    way round: a CONCEPT ``Acme Labs`` forgotten keeps out the ORGANIZATION ``Acme Labs``."""
    with LLMServer(default=Reply(typed_as_written)) as server:
        mine = _model(settings, server)
        await _said(mine, tmp_path, "s1", 1, ["We met [PERSON Jane Doe] about [CONCEPT Acme Labs]."])
        assert {"PERSON:Jane Doe", "CONCEPT:acme labs"} <= _ids(settings)
        for node in ("PERSON:Jane Doe", "CONCEPT:acme labs"):
            done = run_cli("forget", "--node", node, env=_env(settings))
            assert done.returncode == 0, done.stderr

        extract = await _said(mine, tmp_path, "s2", 2, [
            "[CONCEPT Jane Doe] wrote again, and [CONCEPT Jane] and [CONCEPT Doe Family] too.",
            "[ORGANIZATION Acme Labs] answered.",
        ])
    assert extract["suppressed"] == 2, extract
    ids = _ids(settings)
    assert not ids & {"CONCEPT:jane doe", "PERSON:Jane Doe", "ORGANIZATION:Acme Labs", "CONCEPT:acme labs"}, ids
    assert {"CONCEPT:jane", "CONCEPT:doe family"} <= ids
    assert _query(settings, "SELECT COUNT(*) FROM node_aliases WHERE alias_key IN ('jane doe', 'acme labs')")[0][0] == 0


@pytest.mark.both_backends
@pytest.mark.parametrize("kept", ["by its id", "by an alias", "by an alias spelled otherwise"])
async def test_a_concept_of_the_name_the_forget_left_keeps_taking_it(settings: Settings, tmp_path: Path, kept: str) -> None:
    """PERSON ``Jane Doe`` forgotten while the graph holds a CONCEPT known by ``Jane Doe`` (as its
    id, or an alias of another CONCEPT — also spelled ``Jane-Doe``, one CONCEPT name with ``Jane
    Doe``): that is another thing the operator kept, and a later CONCEPT ``Jane Doe`` still joins
    it, not left out."""
    with LLMServer(default=Reply(typed_as_written)) as server:
        mine = _model(settings, server)
        await _said(mine, tmp_path, "s1", 1, ["We met [PERSON Jane Doe]."])
        assert run_cli("forget", "--node", "PERSON:Jane Doe", env=_env(settings)).returncode == 0
        node = (Node("CONCEPT:jane doe", "CONCEPT", "Jane Doe", {}) if kept == "by its id"
                else Node("CONCEPT:doe papers", "CONCEPT", "Doe Papers",
                          {"aliases": ["Jane Doe" if kept == "by an alias" else "Jane-Doe"]}))
        add_nodes(settings, [node])
        extract = await _said(mine, tmp_path, "s2", 2, ["[CONCEPT Jane Doe] wrote again."])
    assert extract["suppressed"] == 0, extract
    points = _query(settings, "SELECT DISTINCT node_id FROM node_points WHERE anchor = 'session:s2'")
    assert [r[0] for r in points] == [node.id], points


@pytest.mark.both_backends
async def test_a_hand_merge_that_would_carry_a_forgotten_persons_name_to_a_concept_is_refused(settings: Settings, tmp_path: Path) -> None:
    """PERSON ``Jane Doe`` forgotten, a PLACE ``Jane Doe`` kept (another type, which the rule does not
    join to a person): merging the PLACE into the CONCEPT ``Doe Family`` would give that CONCEPT her
    name, so it is refused — exit 2, nothing changed, the message naming the person's ``--undo``.
    Into another PLACE it goes through."""
    with LLMServer(default=Reply(typed_as_written)) as server:
        mine = _model(settings, server)
        await _said(mine, tmp_path, "s1", 1, ["[PERSON Jane Doe] of [CONCEPT Doe Family] lives at [PLACE Jane Doe] near [PLACE Doe Hill]."])
        env = _env(settings)
        assert run_cli("forget", "--node", "PERSON:Jane Doe", env=env).returncode == 0
        before = _ids(settings), _query(settings, "SELECT merge_id FROM merges")
        merged = run_cli("merge", "PLACE:Jane Doe", "CONCEPT:doe family", env=env)
        assert merged.returncode == 2, merged.stderr
        assert "keeps out of PERSON nodes, and so of CONCEPT nodes" in merged.stderr, merged.stderr
        assert "rem-cycle forget --node 'PERSON:Jane Doe' --undo" in merged.stderr, merged.stderr
        assert (_ids(settings), _query(settings, "SELECT merge_id FROM merges")) == before
        into_place = run_cli("merge", "PLACE:Jane Doe", "PLACE:Doe Hill", env=env)
        assert into_place.returncode == 0, into_place.stderr
