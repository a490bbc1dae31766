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
from typing import Any

import pytest

from config import Settings
from store.backend import open_database
from store.graph import GraphStore
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
