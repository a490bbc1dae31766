"""The review list settled by the model judge (`rem-cycle candidates --judge`, sweep36).

A cycle asks the judge about a name only while it commits the session that says it: the pairs of
a graph built before the judge was on, and those of a call that failed, waited on the review list
for a person, however long. `candidates --judge` asks the judge about them: "link" merges (rule
``auditor``), "a new node" keeps the pair apart with ``decided_by = judge`` (migration 36), no
answer changes nothing. ``--across`` asks what a judged cycle asks across sessions; ``--cross-type``
the pairs of one name under two types, whose link now lasts (``merged-id``). Real cycles and
commands: real SQLite and PostgreSQL, real embedded Chroma, the loopback model server as extractor
and judge.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.identity import ASKED_EXTENSION, CANDIDATES_KEPT, AliasIndex, NodeRef, graph_extensions
from pipelines.review import folded_way, review_questions, with_graph_extensions
from store.backend import open_database
from tests.conftest import ROOT, run_cli
from tests.llm_server import LLMServer, Reply, Status, held
from tests.test_apart35 import PAIR, rows, sessions
from tests.test_command_signals import _interrupt_midway, _message
from tests.test_named35 import VEGAS, model


def graph_env(settings: Settings) -> dict[str, str]:
    """The environment that names the test's graph (its data dir, and its PostgreSQL database)."""
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    if settings.database_url is not None:
        env["REM_DATABASE_URL"] = settings.database_url.get_secret_value()
    return env


def judge_env(settings: Settings, server: LLMServer) -> dict[str, str]:
    """:func:`graph_env` with ``server`` as the extractor's model and the judge."""
    return graph_env(settings) | {"REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url, "REM_LLM_JUDGE": "true", "REM_LLM_MAX_RETRIES": "0"}


def questions_asked(server: LLMServer) -> list[dict[str, Any]]:
    """The identity questions the server was sent, as the judge's user message."""
    return [json.loads(request.prompt) for request in server.chat_requests if '"existing"' in request.prompt]


def apart_rows(settings: Settings) -> list[tuple[Any, ...]]:
    db = open_database(settings)
    try:
        return [tuple(r) for r in db.query("SELECT node_id, other_id, decided_by FROM identity_apart")]
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_link_merges_the_pair_with_the_quotes_of_both_shown(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
        assert rows(settings)[0] == [(*PAIR, "extension")]
        done = run_cli("candidates", "--judge", "--json", env=judge_env(settings, server))
        assert done.returncode == 0, done.stderr[-2000:]
        asked = questions_asked(server)
    sweep = json.loads(done.stdout)
    assert sweep["asked"] == 1 and [(link["node"], link["into"]) for link in sweep["linked"]] == [PAIR]
    review, apart, merges = rows(settings)
    assert review == [] and apart == []
    assert ("PLACE:Vegas", "PLACE:Las Vegas", "auditor") in merges
    # The question shows both nodes with the turns the graph grounds them in.
    [question] = asked
    assert question["new"]["id"] == "PLACE:Vegas" and [o["id"] for o in question["existing"]] == ["PLACE:Las Vegas"]
    assert any("Vegas was hot" in quote for quote in question["new"]["quotes"])
    assert any("city of lights" in quote for quote in question["existing"][0]["quotes"])
    undone = run_cli("unmerge", "PLACE:Vegas", env=graph_env(settings))
    assert undone.returncode == 0, undone.stderr[-2000:]
    review, apart, merges = rows(settings)
    assert ("PLACE:Vegas", "PLACE:Las Vegas", "auditor") not in merges and review == []  # an undone merge: settled apart


async def test_a_new_node_keeps_the_pair_apart_as_the_judge_said_and_is_never_asked_again(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("create"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
        first = run_cli("candidates", "--judge", env=judge_env(settings, server))
        assert first.returncode == 0, first.stderr[-2000:]
        assert "1 questions asked: 0 linked, 1 kept apart" in first.stdout
        again = run_cli("candidates", "--judge", "--json", env=judge_env(settings, server))
        assert again.returncode == 0 and json.loads(again.stdout)["asked"] == 0
        assert len(questions_asked(server)) == 1  # paid once
        listed = run_cli("apart", "--list", "--json", env=judge_env(settings, server))
    assert apart_rows(settings) == [("PLACE:Las Vegas", "PLACE:Vegas", "judge")]
    assert rows(settings)[0] == []
    assert [(p["node_id"], p["other_id"], p["decided_by"]) for p in json.loads(listed.stdout)["apart"]] == [("PLACE:Las Vegas", "PLACE:Vegas", "judge")]


async def test_an_operator_apart_is_listed_as_the_operators(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
    env = graph_env(settings)
    assert run_cli("apart", *PAIR, env=env).returncode == 0
    listed = run_cli("apart", "--list", env=env)
    assert listed.returncode == 0 and "operator" in listed.stdout and "PLACE:Las Vegas" in listed.stdout
    assert run_cli("apart", "PLACE:Vegas", env=env).returncode == 2  # one id: a usage error


@pytest.mark.parametrize(("behaviour", "why"), [
    (Reply(model("junk")), "no verdict"),
    (Status(500, "overloaded"), "a failed call"),
])
async def test_no_answer_changes_nothing(settings: Settings, tmp_path: Path, behaviour: Any, why: str) -> None:
    with LLMServer(default=Reply(model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
        before = rows(settings)
        server.script(behaviour, match='"existing"')
        done = run_cli("candidates", "--judge", "--json", env=judge_env(settings, server))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["unanswered"] == ["PLACE:Vegas"], why
    assert rows(settings) == before and apart_rows(settings) == []


async def test_without_a_judge_it_says_what_to_set_and_changes_nothing(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("link"))) as server:
        await sessions(settings, tmp_path, server, VEGAS, judge=False)
        before = rows(settings)
        plain = run_cli("candidates", "--judge", env=graph_env(settings))
        env = judge_env(settings, server)
    assert plain.returncode == 2 and "REM_LLM_JUDGE=true" in plain.stderr
    gone = run_cli("candidates", "--judge", env=env)  # the server has stopped
    assert gone.returncode == 1 and "no judge to ask" in gone.stderr
    assert rows(settings) == before


async def test_the_limit_counts_questions(settings: Settings, tmp_path: Path) -> None:
    turns = [*VEGAS, "We moved to New York, under the skyline of New York City."]
    with LLMServer(default=Reply(model("create"))) as server:
        await sessions(settings, tmp_path, server, turns, judge=False)
        assert len(rows(settings)[0]) == 2
        done = run_cli("candidates", "--judge", "--limit", "1", "--json", env=judge_env(settings, server))
    sweep = json.loads(done.stdout)
    assert (sweep["asked"], sweep["not_asked"], len(rows(settings)[0])) == (1, 1, 1)


def pair(node: str, candidate: str, score: float, *, labels: tuple[str, str] = ("PERSON", "PERSON")) -> dict[str, Any]:
    return {"node_id": node, "node_label": labels[0], "candidate_id": candidate, "candidate_label": labels[1], "score": score}


def test_questions_group_a_nodes_pairs_strongest_first() -> None:
    many = [pair("PERSON:Joey", f"PERSON:Joey {n}", 0.9 - n / 100) for n in range(CANDIDATES_KEPT + 2)]
    listed = [pair("PERSON:Ross", "CONCEPT:ross", 0.95, labels=("PERSON", "CONCEPT")),
              *many[:3], pair("PERSON:Ross", "PERSON:Ross Geller", 0.8), *many[3:]]
    assert review_questions(listed)[1] == 1 and review_questions(listed)[0] == review_questions(listed, cross_type=True)[0][:-1]
    questions, left = review_questions(listed, cross_type=True)
    assert left == 0
    # Same-type questions first; a cross-type pair is a question of its own, after them.
    assert [(q.node_id, q.options[0], len(q.options)) for q in questions] == [
        ("PERSON:Joey", "PERSON:Joey 0", CANDIDATES_KEPT), ("PERSON:Joey", "PERSON:Joey 5", 2), ("PERSON:Ross", "PERSON:Ross Geller", 1),
        ("PERSON:Ross", "CONCEPT:ross", 1)]
    assert questions[0].scores[0] == pytest.approx(0.9)


def test_a_concept_chosen_for_a_typed_node_folds_into_it() -> None:
    concept, person, place = NodeRef("CONCEPT:ross", "CONCEPT", "ross"), NodeRef("PERSON:Ross", "PERSON", "Ross"), NodeRef("PLACE:Ross", "PLACE", "Ross")
    assert folded_way(person, concept) == ("CONCEPT:ross", "PERSON:Ross") == folded_way(concept, person)
    assert folded_way(place, person) == ("PLACE:Ross", "PERSON:Ross")


# One name typed two ways, in two sessions: the PERSON `Rachel` and the CONCEPT `rachel` (a name of
# one word: no `named` link) — a `cross-type` pair on the review list.
RACHEL = {"friend": [("Rachel", "PERSON")], "idea": [("Rachel", "CONCEPT")]}


@pytest.mark.both_backends
@pytest.mark.parametrize("turns", [["Rachel is my friend.", "Rachel is an idea."], ["Rachel is an idea.", "Rachel is my friend."]])
async def test_a_link_across_types_lasts(settings: Settings, tmp_path: Path, turns: list[str]) -> None:
    with LLMServer(default=Reply(model("link", RACHEL))) as server:
        await sessions(settings, tmp_path, server, turns, judge=False)
        assert [rule for *_, rule in rows(settings)[0]] == ["cross-type"]
        plain = run_cli("candidates", "--judge", "--json", env=judge_env(settings, server))
        assert json.loads(plain.stdout)["cross_type_left"] == 1 and json.loads(plain.stdout)["asked"] == 0
        done = run_cli("candidates", "--judge", "--cross-type", "--json", env=judge_env(settings, server))
        assert done.returncode == 0, done.stderr[-2000:]
        assert [(link["node"], link["into"]) for link in json.loads(done.stdout)["linked"]] == [("CONCEPT:rachel", "PERSON:Rachel")]
        # The CONCEPT said again, by a cycle with the judge: linked where it went, no node, no pair, no question.
        asked = len(questions_asked(server))
        await sessions(settings, tmp_path, server, ["Rachel is an idea again."], judge=True, first=3)
        assert len(questions_asked(server)) == asked
    review, apart, merges = rows(settings)
    assert review == [] and merges == [("CONCEPT:rachel", "PERSON:Rachel", "auditor")]
    db = open_database(settings)
    try:
        assert [r[0] for r in db.query("SELECT id FROM nodes WHERE label IN ('PERSON', 'CONCEPT')")] == ["PERSON:Rachel"]
    finally:
        db.close()


# `Wallace` in one session, `David Wallace` in another: a cycle without the judge pairs them
# nowhere (they never meet in one session); a cycle with it asks (`extension-asked`).
WALLACE = {"boss": [("Wallace", "PERSON")], "ceo": [("David Wallace", "PERSON")]}
WALLACE_TURNS = ["Wallace is the boss.", "David Wallace is the CEO."]


async def test_across_asks_what_a_judged_cycle_would_have_asked_once(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("create", WALLACE))) as server:
        await sessions(settings, tmp_path, server, WALLACE_TURNS, judge=False)
        assert rows(settings)[0] == []
        listed_only = run_cli("candidates", "--judge", "--json", env=judge_env(settings, server))
        assert json.loads(listed_only.stdout)["asked"] == 0
        first = run_cli("candidates", "--judge", "--across", "--json", env=judge_env(settings, server))
        again = run_cli("candidates", "--judge", "--across", "--json", env=judge_env(settings, server))
        asked = questions_asked(server)
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout)["apart"] == [{"node": "PERSON:Wallace", "from": ["PERSON:David Wallace"]}]
    assert json.loads(again.stdout)["asked"] == 0 and len(asked) == 1  # its "no" is kept: paid once
    assert apart_rows(settings) == [("PERSON:David Wallace", "PERSON:Wallace", "judge")]


async def test_across_links_on_a_yes(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("link", WALLACE))) as server:
        await sessions(settings, tmp_path, server, WALLACE_TURNS, judge=False)
        done = run_cli("candidates", "--judge", "--across", "--json", env=judge_env(settings, server))
    assert [(link["node"], link["into"]) for link in json.loads(done.stdout)["linked"]] == [("PERSON:Wallace", "PERSON:David Wallace")]
    assert ("PERSON:Wallace", "PERSON:David Wallace", "auditor") in rows(settings)[2]
    assert run_cli("candidates", "--across", env=graph_env(settings)).returncode == 2  # --across goes with --judge


def test_graph_extensions_are_bounded_and_skip_blocked_and_owned_names() -> None:
    index = AliasIndex.build([
        NodeRef("PERSON:Joey", "PERSON", "Joey"), *(NodeRef(f"PERSON:Joey {n}", "PERSON", f"Joey {n}") for n in ("Smith", "Jones", "Lauren")),
        NodeRef("PERSON:Reverend Joey Tribbiani", "PERSON", "Reverend Joey Tribbiani"),
        NodeRef("PERSON:Pete", "PERSON", "Pete"), NodeRef("PERSON:Pete's Mom", "PERSON", "Pete's Mom"),
        NodeRef("PERSON:Ross", "PERSON", "Ross"), NodeRef("PERSON:Ross Geller", "PERSON", "Ross Geller"),
        NodeRef("PLACE:Ross Island", "PLACE", "Ross Island"),
    ])
    pairs = graph_extensions(index, blocked=frozenset({("PERSON:Ross Geller", "PERSON:Ross")}))
    # Beside four longer names, the closest three; a name of Pete's is not Pete; an undone merge
    # blocks its pair either way round; another type is no extension.
    assert pairs == [("PERSON:Joey", "PERSON:Joey Jones"), ("PERSON:Joey", "PERSON:Joey Lauren"), ("PERSON:Joey", "PERSON:Joey Smith")]
    # A longer name said in one of the short one's sessions is offered too, however far.
    together = graph_extensions(index, said_with=lambda short, longer: [{"PERSON:Reverend Joey Tribbiani"} & set(longer)])
    assert [long for short, long in together if short == "PERSON:Joey"] == [
        "PERSON:Joey Jones", "PERSON:Joey Lauren", "PERSON:Joey Smith", "PERSON:Reverend Joey Tribbiani"]
    rows_ = with_graph_extensions([pair("PERSON:Joey Smith", "PERSON:Joey", 0.9)], index)
    assert [(r["node_id"], r["candidate_id"], r["rule"]) for r in rows_[1:]] == [
        ("PERSON:Joey", "PERSON:Joey Jones", ASKED_EXTENSION), ("PERSON:Joey", "PERSON:Joey Lauren", ASKED_EXTENSION),
        ("PERSON:Ross", "PERSON:Ross Geller", ASKED_EXTENSION),
    ]


async def test_a_signal_mid_sweep_keeps_what_was_applied_and_loses_only_the_question_in_flight(settings: Settings, tmp_path: Path) -> None:
    turns = [*VEGAS, "We moved to New York, under the skyline of New York City."]
    with LLMServer(default=Reply(model("create"))) as server:
        await sessions(settings, tmp_path, server, turns, judge=False)
        answer = held(Reply(model("create")))
        server.script(answer, match="Vegas was hot")  # the second question (New York's comes first: by id)
        env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT)} | judge_env(settings, server)
        try:
            stopped = _interrupt_midway(["candidates", "--judge"], env, signal.SIGINT, lambda: len(questions_asked(server)) == 2)
        finally:
            answer.release.set()
        assert stopped.returncode == 130, stopped.stderr[-2000:]
        assert "0 pairs linked and 1 kept apart" in _message(stopped.stderr)
        assert apart_rows(settings) == [("PLACE:New York", "PLACE:New York City", "judge")]
        assert rows(settings)[0] == [(*PAIR, "extension")]  # the question in flight: still listed
        again = run_cli("candidates", "--judge", "--json", env=judge_env(settings, server))
    assert json.loads(again.stdout)["asked"] == 1 and rows(settings)[0] == []
