"""An identity question is worded the same by a resolver that kept its index and by a fresh one
(qkey33). The model judge's answers (``REM_LLM_JUDGE``) are kept by their question
(:func:`pipelines.identity.audit_question`: a hash of the nodes' ids, types, names and aliases),
so the words of a question decide whether an answer already paid for is found again. A resolver's
learned index names a node by the first name it learned, while the graph names it by its fullest
name (:func:`store.facts.least_name`, la33id) — as does an index built fresh from the graph after a
restart. Worded from the index, the same question got another key after a restart and was paid
for again. Real cycles, a real ``python -m worker --once`` killed with SIGKILL while the judge is
asked, a real loopback model server (tests/llm_server.py, counting requests), embedded Chroma,
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from pipelines.identity import CANDIDATE, Match, NodeRef, Verdict, audit_options, audit_question
from pipelines.resolver import node_refs
from pipelines.vocabulary import ANCHOR_LABELS
from store.backend import open_database
from store.graph import GraphStore
from store.verdicts import VerdictStore
from tests.llm_server import LLMServer, Reply, held
from tests.test_forget import _session
from tests.test_migrations_community_names import killed_while_asked, once_log, worker_once
from tests.test_migrations_identity_verdicts import _import, model, questions
from worker.cycle import run_cycle

# Said first: `alpha.py` is the node's id and, alone, its name (and `bravo.py` the same).
FIRST = _session("first", "2026-11-01T10:00:00Z", ["See alpha.py and bravo.py."])
# The judge links `store/alpha.py` to it: the graph names the node by the fuller `store/alpha.py`,
# and a resolver that learned the node from the first session still calls it `alpha.py`.
FULLER = _session("fuller", "2026-11-02T10:00:00Z", ["Then store/alpha.py changed."])
# Two questions, asked in this order: about the renamed node, then about `bravo.py`.
THIRD = _session("third", "2026-11-03T10:00:00Z", ["Then lib/alpha.py and lib/bravo.py changed."])
# One question, about the renamed node.
ALONE = _session("alone", "2026-11-03T10:00:00Z", ["Then lib/alpha.py changed."])


# audit_question of the pinned question below, as the code before qkey33 made it too.
KEY = "ade65ca3e2b01845c4d03b2d3a7bff533cf0699772ed8575e24dc0fa8ce81172"


def judged(settings: Settings, server: LLMServer) -> Settings:
    return settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": True, "llm_max_retries": 0})


def options(prompt: str) -> list[tuple[str, str]]:
    """The (id, name) of each option of an identity question, as the model was shown it."""
    return [(o["id"], o["name"]) for o in json.loads(prompt)["existing"]]


@pytest.mark.both_backends
async def test_a_question_asked_before_a_restart_is_not_paid_for_again(settings: Settings, tmp_path: Path, database_url: str | None) -> None:
    """One worker commits "fuller" (the judge links it: the graph renames the node `store/alpha.py`),
    is answered the first question of "third" (kept as it is given) and is killed while the second
    is with the model. The restarted worker builds its index fresh from the graph, and asks only
    the question in flight at the kill. Before, the killed worker's first question of "third" named
    the option `alpha.py` (its learned index), the restarted one's `store/alpha.py` (the graph):
    another key, and the model was paid a second time for the same question."""
    with LLMServer(default=Reply(model)) as server:
        mine = judged(settings, server)
        await _import(mine, tmp_path / "first.jsonl", [FIRST])
        assert (await run_cycle(mine)).outcome == "completed"
        await _import(mine, tmp_path / "more.jsonl", [FULLER, THIRD])
        # The question about `lib/bravo.py` is held: the kill lands while it is with the model,
        # after the one about `lib/alpha.py` was answered and kept, before the session's commit.
        server.script(held(Reply(model)), match='"new": {"id": "FILE:lib/bravo.py"')
        killed_while_asked(settings, server, database_url, lambda: len(questions(server)), count=3)
        before = questions(server)

        again = worker_once(settings, server, database_url)
        assert again.wait(120) == 0, once_log(settings).read_text()[-3000:]
        after = questions(server)[len(before):]

    assert len(before) == 3 and after == before[2:]  # only the question in flight at the kill
    # Each option as the graph named it when asked: `store/alpha.py` once "fuller" committed.
    assert [options(q) for q in before] == [
        [("FILE:alpha.py", "alpha.py")], [("FILE:alpha.py", "store/alpha.py")], [("FILE:bravo.py", "bravo.py")],
    ]
    db = open_database(settings)
    try:  # and the answer kept before the kill was applied: one node with the three names
        graph = GraphStore(db)
        node = graph.get_node("FILE:alpha.py")
        assert node is not None and graph.get_node("FILE:lib/alpha.py") is None
        assert node.name == "store/alpha.py" and {"alpha.py", "store/alpha.py", "lib/alpha.py"} <= set(node.properties["aliases"])
        assert graph.get_node("FILE:lib/bravo.py") is None
    finally:
        db.close()


@pytest.mark.both_backends
async def test_an_answer_kept_by_a_fresh_index_is_found_by_a_kept_one(settings: Settings, tmp_path: Path) -> None:
    """The other way round, and the key's format: a worker just started (its index fresh from the
    graph) asked about "third" and kept the answer under the key the code before qkey33 made too,
    then stopped before the commit; a worker that kept its index since "fuller" takes "third" up.
    It finds the answer kept and asks nothing. Before, it named the option `alpha.py` and paid for
    the question again. The key kept here is built as a fresh index built it (the graph's rows,
    :func:`worker.knowledge.identity_resolver`'s reading), so answers kept before this change by a
    fresh index are found as they were."""
    with LLMServer(default=Reply(model)) as server:
        mine = judged(settings, server)
        await _import(mine, tmp_path / "first.jsonl", [FIRST])
        assert (await run_cycle(mine)).outcome == "completed"
        await _import(mine, tmp_path / "fuller.jsonl", [FULLER])
        assert (await run_cycle(mine)).outcome == "completed"  # the index is kept for the next cycle
        asked = len(questions(server))
        db = open_database(settings)
        try:
            (option,) = node_refs(GraphStore(db).node_names(exclude_labels=ANCHOR_LABELS, ids=["FILE:alpha.py"]))
            assert option.name == "store/alpha.py"
            incoming = NodeRef("FILE:lib/alpha.py", "FILE", "lib/alpha.py", ("lib/alpha.py",))
            VerdictStore(db).keep(audit_question(incoming, [option]), "FILE:alpha.py", session="alone")
        finally:
            db.close()
        await _import(mine, tmp_path / "alone.jsonl", [ALONE])
        result = await run_cycle(mine)
        assert result.outcome == "completed" and result.phases["extract"]["identity_index_builds"] == 0  # the kept index asked

    assert questions(server)[asked:] == []
    db = open_database(settings)
    try:  # the kept answer was applied, and used up by the commit
        node = GraphStore(db).get_node("FILE:alpha.py")
        assert node is not None and "lib/alpha.py" in node.properties["aliases"] and GraphStore(db).get_node("FILE:lib/alpha.py") is None
        assert VerdictStore(db).given([audit_question(incoming, [option])]) == {}
    finally:
        db.close()


def test_the_question_key_is_the_one_answers_were_kept_by() -> None:
    """The key's format is unchanged by qkey33 (only the words an option is shown with are the
    graph's): answers kept before it, by this key, are found."""
    incoming = NodeRef("FILE:lib/alpha.py", "FILE", "lib/alpha.py", ("lib/alpha.py",))
    option = NodeRef("FILE:alpha.py", "FILE", "store/alpha.py", ("store/alpha.py", "alpha.py"))
    assert audit_question(incoming, [option]) == KEY



def test_an_option_is_shown_as_the_graph_holds_it_and_only_while_it_does() -> None:
    """:func:`pipelines.identity.audit_options` takes an option from the graph's rows (by id), not
    from the index that found it: the graph's name and aliases, and no option the graph no longer
    holds (a node another worker's commit folded away, still in a kept index). A node new in the
    session is taken from the session's batch."""
    incoming = NodeRef("FILE:lib/alpha.py", "FILE", "lib/alpha.py", ("lib/alpha.py",))
    learned = NodeRef("FILE:alpha.py", "FILE", "alpha.py", ("alpha.py", "store/alpha.py"))
    graph = {learned.id: NodeRef("FILE:alpha.py", "FILE", "store/alpha.py", ("alpha.py", "store/alpha.py"))}
    new = NodeRef("FILE:src/alpha.py", "FILE", "src/alpha.py", ("src/alpha.py",))
    found = tuple(Match(i, "file-basename", 0.7, "alpha.py", "FILE") for i in (learned.id, "FILE:store/alpha.py", new.id))
    verdict = Verdict(incoming.id, CANDIDATE, None, "file-basename", 0.7, found)
    assert audit_options(verdict, incoming, graph, {incoming.id: incoming, new.id: new}) == [graph[learned.id], new]
