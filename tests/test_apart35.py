"""Two nodes a person says are different things (`rem-cycle apart`, apart35).

The review list could only be left by a merge: a pair a person read and found to be two things
stayed listed, and came back with every session that said the names again, so the list could not
be finished. `rem-cycle apart NODE OTHER` records the decision (migration 35, ``identity_apart``):
the pair leaves the list, and identity resolution never links, pairs or asks about it again
(`--undo` takes it back). Real
cycles: real SQLite and PostgreSQL, real embedded Chroma, the loopback model server as extractor
and judge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from store.backend import open_database
from store.merges import MergeError
from tests.conftest import run_cli
from tests.llm_server import LLMServer, Reply, prompt_turns
from tests.test_forget import _session
from tests.test_migrations_identity_verdicts import _import
from tests.test_named35 import VEGAS, model
from worker.cycle import run_cycle
from worker.knowledge import keep_apart, undo_apart

PAIR = ("PLACE:Vegas", "PLACE:Las Vegas")


def rows(settings: Settings) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The review list, the pairs kept apart and the merges."""
    db = open_database(settings)
    try:
        review = [tuple(r) for r in db.query("SELECT node_id, candidate_id, rule FROM identity_candidates")]
        apart = [tuple(r) for r in db.query("SELECT node_id, other_id FROM identity_apart")]
        merges = sorted(tuple(r) for r in db.query("SELECT merged_id, into_id, rule FROM merges WHERE undone_at IS NULL"))
        return review, apart, merges
    finally:
        db.close()


async def sessions(settings: Settings, tmp_path: Path, server: LLMServer, turns: list[str], *, judge: bool, first: int = 1) -> None:
    mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": judge, "llm_max_retries": 0})
    for number, turn in enumerate(turns, start=first):
        await _import(mine, tmp_path / f"{number}.jsonl", [_session(f"s{number}", f"2026-11-{number:02d}T10:00:00Z", [turn])])
        assert (await run_cycle(mine)).outcome == "completed"


# A later session names one place by both names as aliases of a third (`Sin City`): the alias rule
# finds both nodes, and a bridging rule would join all three — unless they were kept apart.
BRIDGE = "Sin City, that is Vegas, that is Las Vegas."


def bridging_model(answer: str) -> Any:
    """:func:`tests.test_named35.model`, and for :data:`BRIDGE` one PLACE with both names as aliases."""
    named = model(answer)

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        if BRIDGE not in json.dumps(body):
            return named(body)
        number = next(number for number, text in prompt_turns(body) if "Sin City" in text)
        return {"summary": "a trip", "edges": [], "nodes": [{
            "id": "PLACE:Sin City", "type": "PLACE", "name": "Sin City", "aliases": ["Vegas", "Las Vegas"],
            "description": "the city", "confidence": 0.8, "evidence": [{"turn": number, "quote": "Sin City"}]}]}
    return reply


@pytest.mark.both_backends
async def test_a_pair_kept_apart_leaves_the_review_list_and_is_never_joined(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(bridging_model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
        assert rows(settings)[0] == [(*PAIR, "extension")]
        assert keep_apart(settings, *PAIR) is True
        assert rows(settings)[:2] == ([], [("PLACE:Las Vegas", "PLACE:Vegas")])
        assert keep_apart(settings, *reversed(PAIR)) is False  # one pair, either order
        await sessions(settings, tmp_path, server, [BRIDGE], judge=False, first=3)
    review, apart, merges = rows(settings)
    assert apart == [("PLACE:Las Vegas", "PLACE:Vegas")]
    assert merges == [("CONCEPT:las vegas", "PLACE:Las Vegas", "named")]  # no bridge across the pair
    assert {(node, other) for node, other, _ in review} == {("PLACE:Sin City", "PLACE:Las Vegas"), ("PLACE:Sin City", "PLACE:Vegas")}


async def test_without_the_decision_the_bridge_joins_them(settings: Settings, tmp_path: Path) -> None:
    """The control: the same sessions without `apart` make one place of the three names."""
    with LLMServer(default=Reply(bridging_model("link"))) as server:
        await sessions(settings, tmp_path, server, [*VEGAS, BRIDGE], judge=False)
    merged = {(merged, into) for merged, into, _ in rows(settings)[2]}
    assert {"PLACE:Vegas", "PLACE:Sin City"} <= {m for m, _ in merged} and {into for _, into in merged} == {"PLACE:Las Vegas"}


async def test_an_undone_answer_lets_the_bridge_join_them(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(bridging_model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
        keep_apart(settings, *PAIR)
        assert undo_apart(settings, *reversed(PAIR)) is True  # either order
        assert undo_apart(settings, *PAIR) is False
        await sessions(settings, tmp_path, server, [BRIDGE], judge=False, first=3)
    review, apart, merges = rows(settings)
    assert apart == [] and ("PLACE:Vegas", "PLACE:Las Vegas") in {(m, i) for m, i, _ in merges}


async def test_forgetting_a_node_forgets_the_pair_it_was_kept_apart_in(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
    keep_apart(settings, *PAIR)
    done = run_cli("forget", "--node", "PLACE:Vegas", env={"REM_DATA_DIR": str(settings.data_dir)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert rows(settings)[1] == []


@pytest.mark.parametrize(("one", "other", "says"), [
    ("PLACE:Vegas", "PLACE:Nowhere", "no node PLACE:Nowhere"),
    ("PLACE:Vegas", "PLACE:Vegas", "not apart from itself"),
    ("PLACE:Vegas", "session:s1", "provenance anchor"),
])
async def test_a_pair_that_cannot_be_kept_apart_is_refused_and_changes_nothing(settings: Settings, tmp_path: Path, one: str, other: str, says: str) -> None:
    with LLMServer(default=Reply(model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
    before = rows(settings)
    with pytest.raises(MergeError, match=says):
        keep_apart(settings, one, other)
    assert rows(settings) == before


async def test_the_command(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    done = run_cli("--json", "apart", *PAIR, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"node": PAIR[0], "other": PAIR[1], "added": True}
    listed = run_cli("--json", "candidates", env=env)
    assert json.loads(listed.stdout)["total"] == 0
    undone = run_cli("--json", "apart", "--undo", *PAIR, env=env)
    assert undone.returncode == 0 and json.loads(undone.stdout) == {"node": PAIR[0], "other": PAIR[1], "undone": True}
    missing = run_cli("apart", "PLACE:Vegas", "PLACE:Nowhere", env=env)
    assert missing.returncode == 1 and "no node PLACE:Nowhere" in missing.stderr
