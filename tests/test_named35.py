"""A typed name linked by ``named`` to a CONCEPT is paired with a shorter name said beside it (named35).

The commit folds the CONCEPT `las vegas` into the PLACE `Las Vegas` said later (the typed node's id
survives), but resolution learned the PLACE under the CONCEPT's id: the ``extension`` rule saw a
PLACE `CONCEPT:las vegas`, refused it as another type (79eb679), and `Vegas`, said beside `Las
Vegas`, was neither asked about nor put on the review list. On the Friends tuning run the labelled
pair `Vegas` / `Las Vegas` (the same place) was missed so. Each test runs a real cycle: real
SQLite, real embedded Chroma, the loopback model server as extractor and judge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from config import Settings
from store.backend import open_database
from tests.llm_server import LLMServer, Reply, prompt_turns
from tests.test_forget import _session
from tests.test_migrations_identity_verdicts import _import, questions
from worker.cycle import run_cycle

# What the model finds in a turn, by the text it says: (name, type), in the order said.
SAID = {"lights": [("Las Vegas", "CONCEPT")], "went": [("Las Vegas", "PLACE"), ("Vegas", "PLACE")]}


def model(answer: str) -> Any:
    """The extractor and the judge: nodes by :data:`SAID`; an identity question answered ``answer``
    ("link": the first option, "create": a new node)."""
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if '"existing"' in prompt:
            return {"verdict": "link", "target": json.loads(prompt)["existing"][0]["id"]} if answer == "link" else {"verdict": "create"}
        if '"members"' in prompt:
            return {"label": "Places"}
        nodes = [
            {"id": f"{kind}:{name}", "type": kind, "name": name, "description": f"the {kind.lower()} {name}", "confidence": 0.8,
             "evidence": [{"turn": number, "quote": name}]}
            for number, text in prompt_turns(body)
            for word, found in SAID.items() if word in text.lower()
            for name, kind in found
        ]
        return {"summary": "a trip", "nodes": nodes, "edges": []}
    return reply


async def cycle(settings: Settings, tmp_path: Path, answer: str, *, judge: bool) -> tuple[LLMServer, set[str], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Session one makes the CONCEPT `las vegas`; session two says the PLACEs `Las Vegas` and
    `Vegas`. Returns the server, the PLACE and CONCEPT nodes, the merges and the review list."""
    with LLMServer(default=Reply(model(answer))) as server:
        mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": judge, "llm_max_retries": 0})
        await _import(mine, tmp_path / "one.jsonl", [_session("one", "2026-11-01T10:00:00Z", ["Las Vegas is a city of lights."])])
        assert (await run_cycle(mine)).outcome == "completed"
        await _import(mine, tmp_path / "two.jsonl", [_session("two", "2026-11-02T10:00:00Z", ["We went to Las Vegas; Vegas was hot."])])
        assert (await run_cycle(mine)).outcome == "completed"
    db = open_database(settings)
    try:
        nodes = {r[0] for r in db.query("SELECT id FROM nodes WHERE label IN ('PLACE', 'CONCEPT')")}
        merges = sorted(tuple(r) for r in db.query("SELECT merged_id, into_id, rule FROM merges WHERE undone_at IS NULL"))
        review = [tuple(r) for r in db.query("SELECT node_id, candidate_id, rule FROM identity_candidates")]
    finally:
        db.close()
    return server, nodes, merges, review


async def test_without_a_judge_the_pair_is_on_the_review_list(settings: Settings, tmp_path: Path) -> None:
    _, nodes, merges, review = await cycle(settings, tmp_path, "link", judge=False)
    assert nodes == {"PLACE:Las Vegas", "PLACE:Vegas"}
    assert merges == [("CONCEPT:las vegas", "PLACE:Las Vegas", "named")]
    assert review == [("PLACE:Vegas", "PLACE:Las Vegas", "extension")]


async def test_the_judge_is_asked_and_its_link_makes_one_place(settings: Settings, tmp_path: Path) -> None:
    server, nodes, merges, review = await cycle(settings, tmp_path, "link", judge=True)
    (question,) = [json.loads(q) for q in questions(server)]
    assert question["new"]["name"] == "Vegas" and [o["id"] for o in question["existing"]] == ["PLACE:Las Vegas"]
    assert nodes == {"PLACE:Las Vegas"} and review == []
    assert merges == [("CONCEPT:las vegas", "PLACE:Las Vegas", "named"), ("PLACE:Vegas", "PLACE:Las Vegas", "auditor")]


async def test_the_judges_new_node_keeps_both_places_and_the_fold(settings: Settings, tmp_path: Path) -> None:
    server, nodes, merges, review = await cycle(settings, tmp_path, "create", judge=True)
    assert len(questions(server)) == 1
    assert nodes == {"PLACE:Las Vegas", "PLACE:Vegas"} and review == []
    assert merges == [("CONCEPT:las vegas", "PLACE:Las Vegas", "named")]
