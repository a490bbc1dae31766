"""What the identity judge (``REM_LLM_JUDGE``) is shown, and what its answer settles (judge34).

- A name beside more than :data:`MAX_ASKED_EXTENSIONS` longer names (`Joey` beside `Joey
  Tribbiani`, `Joey Lauren`, `Joey Smith`, `Joey Jones`) was never asked about any of them. It is
  now asked about the best-ranked few: the longer names said in the same session first, then the
  closest (fewest words more). The question stays one per name and its options stay
  ``MAX_ASKED_EXTENSIONS``, however many longer names the graph's history holds.
- The judge's "a new node" settled only the ``extension-asked`` pairs; the other rules' pairs it
  was shown stayed on the review list, asked and answered. Now every pair it was shown leaves with
  its answer, and only those: a pair it was not shown (ranked past the options) stays.

Pure rules, :class:`pipelines.resolver.GraphResolver` over a real loopback model server, and a real
cycle over real Chroma and SQLite.
"""

from __future__ import annotations

import json
from pathlib import Path

from config import Settings
from pipelines.extract.commit import Candidate
from pipelines.extract.llm import OpenAIExtractor
from pipelines.identity import ASKED_EXTENSION, CANDIDATE, CANDIDATES_KEPT, CREATE, MAX_ASKED_EXTENSIONS, AliasIndex, resolve_batch
from pipelines.judge import ModelJudge
from pipelines.resolver import GraphResolver
from tests.llm_server import LLMServer, Reply, ok
from tests.test_forget import _session
from tests.test_identity_judge_extension import graph_rows, judged, model, person
from tests.test_migrations_identity_verdicts import _import, questions
from worker.cycle import run_cycle

JOEYS = ("Joey Tribbiani", "Joey Lauren", "Joey Smith", "Joey Jones", "Joey Adams Junior", "Reverend Joey Tribbiani")


def test_a_name_beside_many_longer_names_is_asked_about_the_best_ranked_few() -> None:
    graph = AliasIndex.build([person(name) for name in JOEYS])
    # The longer name said in the same session ranks first, then the closest (fewest words more), by id.
    (joey, _) = resolve_batch([person("Joey"), person("Joey Tribbiani")], graph, judged=True)
    assert joey.action == CANDIDATE and len(joey.candidates) == MAX_ASKED_EXTENSIONS
    assert [m.node_id for m in joey.candidates] == ["PERSON:Joey Jones", "PERSON:Joey Lauren", "PERSON:Joey Tribbiani"]
    assert {m.rule for m in joey.candidates} == {ASKED_EXTENSION}
    (alone,) = resolve_batch([person("Joey")], graph, judged=True)
    assert [m.node_id for m in alone.candidates] == ["PERSON:Joey Jones", "PERSON:Joey Lauren", "PERSON:Joey Smith"]
    # A history of many more longer names asks no more: one question, the same few options.
    crowded = AliasIndex.build([*(person(name) for name in JOEYS), *(person(f"Joey Z{n:03}") for n in range(200))])
    (many,) = resolve_batch([person("Joey")], crowded, judged=True)
    assert len(many.candidates) == MAX_ASKED_EXTENSIONS
    # Without a judge nothing changes: beside more than one longer name, no pair.
    assert resolve_batch([person("Joey")], graph)[0].action == CREATE


def test_a_longer_name_said_beside_a_crowded_shorter_one_is_asked_about_it() -> None:
    """`Joey Tribbiani` said in this session, `Joey` a graph node beside many longer names: the
    session's own longer name ranks first among them, so the question is asked (the new node's)."""
    graph = AliasIndex.build([person("Joey"), *(person(name) for name in JOEYS[1:4])])
    (said,) = resolve_batch([person("Joey Tribbiani")], graph, judged=True)
    assert said.action == CANDIDATE and [(m.node_id, m.rule) for m in said.candidates] == [("PERSON:Joey", ASKED_EXTENSION)]


async def test_the_judges_no_leaves_what_it_was_not_shown(settings: Settings) -> None:
    """Six same-type pairs of one name: the judge is shown the strongest five, answers "a new
    node", and the sixth, never shown, stays for review."""
    existing = [person(f"Michael {middle} Scott") for middle in ("Adam", "Bob", "Carl", "Dan", "Earl", "Fred")]
    incoming = Candidate("PERSON:Michael Scott", "PERSON", "Michael Scott")
    with LLMServer(default=ok({"verdict": "create"})) as server:
        mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_max_retries": 0})
        async with OpenAIExtractor(mine) as extractor:
            resolver = GraphResolver(load_nodes=lambda: existing, load_blocked=frozenset, existing=lambda ids: set(ids),
                                     auditor=ModelJudge(extractor).audit_identity)
            assert await resolver.prepare([incoming]) == 1
            verdict = resolver([incoming]).verdicts[incoming.id]
        (question,) = questions(server)
    shown = [o["id"] for o in json.loads(question)["existing"]]
    assert len(shown) == CANDIDATES_KEPT
    assert verdict.action == CANDIDATE and [m.node_id for m in verdict.candidates] == sorted({n.id for n in existing} - set(shown))


async def test_the_judges_no_settles_every_pair_it_was_shown(settings: Settings, tmp_path: Path) -> None:
    """`Michael Scott` beside `Michael Gary Scott` is a ``token-set`` pair: the judge was asked and
    answered "a new node", and the pair stayed on the review list all the same."""
    names = ("Michael Gary Scott", "Michael Scott")
    with LLMServer(default=Reply(model("create", names=names))) as server:
        mine = judged(settings, server)
        await _import(mine, tmp_path / "one.jsonl", [_session("one", "2026-11-01T10:00:00Z", ["Michael Gary Scott runs the branch."])])
        assert (await run_cycle(mine)).outcome == "completed"
        await _import(mine, tmp_path / "two.jsonl", [_session("two", "2026-11-02T10:00:00Z", ["Michael Scott called."])])
        assert (await run_cycle(mine)).outcome == "completed"
        assert len(questions(server)) == 1
    people, merges, review = graph_rows(settings)
    assert people == {"PERSON:Michael Gary Scott", "PERSON:Michael Scott"} and merges == []
    assert review == []
