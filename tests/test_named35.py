"""A typed name linked by ``named`` to a CONCEPT is paired with a shorter or longer name (named35).

The commit folds the CONCEPT `las vegas` into the PLACE `Las Vegas` said later (the typed node's id
survives), but resolution learned the PLACE under the CONCEPT's id: the ``extension`` rule saw a
PLACE `CONCEPT:las vegas`, refused it as another type (79eb679), and `Vegas`, said beside `Las
Vegas`, was neither asked about nor put on the review list. On the Friends tuning run the labelled
pair `Vegas` / `Las Vegas` (the same place) was missed so. Each test runs a real cycle: real
SQLite, real embedded Chroma, the loopback model server as extractor and judge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from config import Settings
from pipelines.extract.commit import candidate_pairs
from pipelines.identity import ASKED_EXTENSION, CANDIDATE, LINK, AliasIndex, NodeRef, audit_options, folded_concepts, resolve_batch
from store.backend import open_database
from tests.llm_server import LLMServer, Reply, prompt_turns
from tests.test_forget import _session
from tests.test_migrations_identity_verdicts import _import, questions
from worker.cycle import run_cycle

# What the model finds in a turn, by the text it says: (name, type), in the order said.
SAID = {
    "lights": [("Las Vegas", "CONCEPT")], "went": [("Las Vegas", "PLACE"), ("Vegas", "PLACE")],
    "skyline": [("New York City", "PLACE")], "idea": [("New York", "CONCEPT")], "moved": [("New York", "PLACE")],
}
# Session by session (one turn each): the CONCEPT `las vegas`, then the PLACEs `Las Vegas` and `Vegas`.
VEGAS = ["Las Vegas is a city of lights.", "We went to Las Vegas; Vegas was hot."]
# The PLACE `New York City`, the CONCEPT `new york`, then the PLACE `New York` alone.
NEW_YORK = ["New York City has a skyline.", "New York is an idea.", "We moved to New York."]


def model(answer: str, said: Mapping[str, list[tuple[str, str]]] = SAID) -> Any:
    """The extractor and the judge: nodes by ``said`` (a turn with the key word says those names and
    types); an identity question answered ``answer`` ("link": the first option, "create": a new
    node, "junk": no answer)."""
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if '"existing"' in prompt:
            if answer == "junk":
                return {"verdict": "link"}  # no target: no answer (audit31)
            return {"verdict": "link", "target": json.loads(prompt)["existing"][0]["id"]} if answer == "link" else {"verdict": "create"}
        if '"members"' in prompt:
            return {"label": "Places"}
        nodes = [
            {"id": f"{kind}:{name}", "type": kind, "name": name, "description": f"the {kind.lower()} {name}", "confidence": 0.8,
             "evidence": [{"turn": number, "quote": name}]}
            for number, text in prompt_turns(body)
            for word, found in said.items() if word in text.lower()
            for name, kind in found
        ]
        return {"summary": "a trip", "nodes": nodes, "edges": []}
    return reply


async def cycle(settings: Settings, tmp_path: Path, answer: str, *, judge: bool, turns: list[str] = VEGAS) -> tuple[LLMServer, set[str], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """One session per turn of ``turns``, each digested by a cycle of its own. Returns the server,
    the PLACE and CONCEPT nodes, the merges and the review list."""
    with LLMServer(default=Reply(model(answer))) as server:
        mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": judge, "llm_max_retries": 0})
        for number, turn in enumerate(turns, start=1):
            await _import(mine, tmp_path / f"{number}.jsonl", [_session(f"s{number}", f"2026-11-0{number}T10:00:00Z", [turn])])
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


# The shorter name is the one that folds a CONCEPT, the longer one a node of an earlier session: a
# link verdict carried no question, so the judge was never asked (`New York` / `New York City`,
# `Princess Consuela` / `Princess Consuela Banana Hammock` on the Friends tuning runs).

async def test_a_shorter_name_folding_a_concept_is_asked_about_the_longer_one(settings: Settings, tmp_path: Path) -> None:
    server, nodes, merges, review = await cycle(settings, tmp_path, "link", judge=True, turns=NEW_YORK)
    (question,) = [json.loads(q) for q in questions(server)]
    assert question["new"]["name"] == "New York" and [o["id"] for o in question["existing"]] == ["PLACE:New York City"]
    # One place: the least id survives, and the CONCEPT is folded into it as before (its rule kept).
    assert nodes == {"PLACE:New York"} and review == []
    assert merges == [("CONCEPT:new york", "PLACE:New York", "named"), ("PLACE:New York City", "PLACE:New York", "auditor")]


async def test_the_judges_new_node_still_folds_the_concept(settings: Settings, tmp_path: Path) -> None:
    server, nodes, merges, review = await cycle(settings, tmp_path, "create", judge=True, turns=NEW_YORK)
    assert len(questions(server)) == 1
    assert nodes == {"PLACE:New York", "PLACE:New York City"} and review == []
    assert merges == [("CONCEPT:new york", "PLACE:New York", "named")]


async def test_a_failed_question_still_folds_the_concept_and_leaves_the_pair(settings: Settings, tmp_path: Path) -> None:
    """The model answers nothing usable: the fold stands, the pair waits for a person."""
    server, nodes, merges, review = await cycle(settings, tmp_path, "junk", judge=True, turns=NEW_YORK)
    assert len(questions(server)) == 1
    assert nodes == {"PLACE:New York", "PLACE:New York City"}
    assert merges == [("CONCEPT:new york", "PLACE:New York", "named")]
    assert review == [("PLACE:New York", "PLACE:New York City", "extension-asked")]


async def test_without_a_judge_the_fold_is_as_before(settings: Settings, tmp_path: Path) -> None:
    server, nodes, merges, review = await cycle(settings, tmp_path, "link", judge=False, turns=NEW_YORK)
    assert questions(server) == []
    assert nodes == {"PLACE:New York", "PLACE:New York City"} and review == []
    assert merges == [("CONCEPT:new york", "PLACE:New York", "named")]


def test_a_longer_name_folding_a_concept_is_asked_about_the_shorter_one() -> None:
    """The other way round, pure: the longer name said folds its CONCEPT, the shorter one is a
    graph node; the question keeps the fold, and the review list would show the pair, not the fold."""
    graph = AliasIndex.build([NodeRef("CONCEPT:princess consuela banana hammock", "CONCEPT", "Princess Consuela Banana Hammock"),
                              NodeRef("PERSON:Princess Consuela", "PERSON", "Princess Consuela")])
    said = NodeRef("PERSON:Princess Consuela Banana Hammock", "PERSON", "Princess Consuela Banana Hammock")
    assert resolve_batch([said], graph)[0].target == "CONCEPT:princess consuela banana hammock"  # no judge: the fold alone
    (verdict,) = resolve_batch([said], graph, judged=True)
    assert verdict.action == CANDIDATE and [(m.node_id, m.rule) for m in verdict.candidates] == [
        ("PERSON:Princess Consuela", ASKED_EXTENSION), ("CONCEPT:princess consuela banana hammock", "named")]
    assert folded_concepts(verdict) == ["CONCEPT:princess consuela banana hammock"]
    assert [(p.node_id, p.candidate_id) for p in candidate_pairs([verdict], "s")] == [(said.id, "PERSON:Princess Consuela")]
    assert [o.id for o in audit_options(verdict, said, graph.nodes)] == ["PERSON:Princess Consuela"]


def test_a_shorter_name_folding_a_concept_is_asked_beside_a_longer_one_said_with_it() -> None:
    """Both said in one scene (`Princess Consuela`, folding its CONCEPT, and `Princess Consuela
    Banana Hammock`, a graph node said again): the pair went on the longer name, whose link to the
    graph carries no question, and nothing was asked."""
    graph = AliasIndex.build([NodeRef("CONCEPT:princess consuela", "CONCEPT", "Princess Consuela"),
                              NodeRef("PERSON:Princess Consuela Banana Hammock", "PERSON", "Princess Consuela Banana Hammock")])
    said = [NodeRef("PERSON:Princess Consuela", "PERSON", "Princess Consuela"),
            NodeRef("PERSON:Princess Consuela Banana Hammock", "PERSON", "Princess Consuela Banana Hammock")]
    for judged in (False, True):
        short, long = resolve_batch(said, graph, judged=judged)
        assert long.action == LINK and long.target == "PERSON:Princess Consuela Banana Hammock"
        assert short.action == CANDIDATE and [(m.node_id, m.rule) for m in short.candidates] == [
            ("PERSON:Princess Consuela Banana Hammock", "extension"), ("CONCEPT:princess consuela", "named")]


def test_no_question_joins_a_folded_concept_to_a_node_someone_separated_it_from() -> None:
    """A person undid the merge of the CONCEPT `new york` into `New York City`: a "same" about the
    PLACE `New York` (which folds that CONCEPT) would join them again, so it is not asked; the fold
    stands as before."""
    graph = AliasIndex.build([NodeRef("CONCEPT:new york", "CONCEPT", "New York"), NodeRef("PLACE:New York City", "PLACE", "New York City")])
    said = [NodeRef("PLACE:New York", "PLACE", "New York")]
    (asked,) = resolve_batch(said, graph, judged=True)
    assert asked.action == CANDIDATE and folded_concepts(asked) == ["CONCEPT:new york"]
    (kept,) = resolve_batch(said, graph, judged=True, blocked=frozenset({("CONCEPT:new york", "PLACE:New York City")}))
    assert kept.action == LINK and kept.rule == "named" and kept.target == "CONCEPT:new york"
