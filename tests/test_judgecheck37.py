"""The model judge is checked before identity trusts it (judgecheck37).

A real small model (SmolLM2-135M-Instruct through llama.cpp's server, bench/RESULTS.md "A real
model on this machine") answered "a new node" to every one of 846 identity questions; as the judge
it settled true pairs as different and took them off the review list (`extension-fresh` recall
with review 0.500 → 0.125). Two questions whose answers no reading model misses
(:data:`pipelines.judge.JUDGE_CHECK`) now come first: a judge that answers either wrong is not
asked about the graph — its pairs stay for a person, as with no judge. Real cycles and commands,
real SQLite, embedded Chroma, the loopback server as the model (``passes_judge_check=False``:
its scripts answer the check as they answer everything).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.judge import JUDGE_CHECK
from tests.conftest import run_cli
from tests.llm_server import LLMServer, Reply, Status
from tests.test_apart35 import PAIR, _import, _session, rows
from tests.test_named35 import VEGAS, model
from tests.test_sweep36 import apart_rows, graph_env, judge_env, questions_asked
from worker.cycle import run_cycle

CHECKED = {node for quotes, _ in JUDGE_CHECK for node in quotes}


def check_questions(server: LLMServer) -> int:
    """The check's questions among those ``server`` answered from its scripts."""
    return sum(1 for q in questions_asked(server) if q["new"]["id"] in CHECKED)


def graph_questions(server: LLMServer) -> list[str]:
    """The ids the judge was asked about that are the graph's, not the check's."""
    return [q["new"]["id"] for q in questions_asked(server) if q["new"]["id"] not in CHECKED]


async def judged_cycles(settings: Settings, tmp_path: Path, server: LLMServer) -> list[dict[str, Any]]:
    """One session of :data:`VEGAS` a cycle, the judge on: each cycle's extract phase."""
    mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": True, "llm_max_retries": 0})
    phases = []
    for number, turn in enumerate(VEGAS, start=1):
        await _import(mine, tmp_path / f"{number}.jsonl", [_session(f"s{number}", f"2026-11-{number:02d}T10:00:00Z", [turn])])
        result = await run_cycle(mine)
        assert result.outcome == "completed", result.message
        phases.append(result.phases["extract"])
    return phases


@pytest.mark.parametrize(("answer", "said"), [("create", "a new node"), ("link", "a link to PERSON:grace hopper")])
async def test_a_judge_that_answers_by_rote_is_not_asked_and_its_pairs_stay_for_review(
    settings: Settings, tmp_path: Path, answer: str, said: str,
) -> None:
    with LLMServer(default=Reply(model(answer)), passes_judge_check=False) as server:
        phases = await judged_cycles(settings, tmp_path, server)
        assert check_questions(server) == (1 if answer == "create" else 2)  # asked once a process, to the first wrong answer
        assert graph_questions(server) == []
    assert all(said in phase["judge_failed_check"] for phase in phases), phases
    review, apart, merges = rows(settings)
    assert review == [(*PAIR, "extension")] and apart == []  # as with no judge
    assert [m for m in merges if m[2] == "auditor"] == []
    assert apart_rows(settings) == []


async def test_a_judge_that_passes_is_asked_as_before(settings: Settings, tmp_path: Path) -> None:
    """The same rote "a new node", with the check answered right (a capable model's answers to it):
    the judge is trusted, and its answer settles the pair — what the check is there to prevent
    from a model that cannot read."""
    with LLMServer(default=Reply(model("create"))) as server:
        phases = await judged_cycles(settings, tmp_path, server)
        assert len(server.check_requests) == 2 and graph_questions(server) == ["PLACE:Vegas"]
        # the answer's schema offers the options' ids only: a server decoding to it cannot name another
        (asked,) = [r.body for r in server.chat_requests if '"existing"' in r.prompt]
        assert asked["response_format"]["json_schema"]["schema"]["properties"]["target"]["enum"] == ["PLACE:Las Vegas"]
    assert all("judge_failed_check" not in phase for phase in phases)
    assert rows(settings)[0] == []  # settled by the judge


async def test_an_unanswered_check_leaves_the_judge_out_of_that_cycle_only(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("link")), passes_judge_check=False) as server:
        server.script(Status(500, "overloaded"), match="Grace")
        server.script(Reply({"verdict": "link", "target": "PERSON:grace hopper"}), Reply({"verdict": "create"}), match="Grace")
        phases = await judged_cycles(settings, tmp_path, server)
        assert "went unanswered" in phases[0]["judge_failed_check"]
        assert "judge_failed_check" not in phases[1]  # asked again, and passed
        assert check_questions(server) == 3 and graph_questions(server) == ["PLACE:Vegas"]
    assert ("PLACE:Vegas", "PLACE:Las Vegas", "auditor") in rows(settings)[2]


async def test_candidates_judge_refuses_a_judge_that_fails_its_check(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=Reply(model("create")), passes_judge_check=False) as server:
        mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_max_retries": 0})
        for number, turn in enumerate(VEGAS, start=1):
            await _import(mine, tmp_path / f"{number}.jsonl", [_session(f"s{number}", f"2026-11-{number:02d}T10:00:00Z", [turn])])
            assert (await run_cycle(mine)).outcome == "completed"
        before = rows(settings)
        done = run_cli("candidates", "--judge", "--json", env=judge_env(settings, server))
        assert graph_questions(server) == []
    assert done.returncode == 1 and "failed its check" in done.stderr and "a new node" in done.stderr, done.stderr
    assert rows(settings) == before and apart_rows(settings) == []
    listed = run_cli("candidates", "--json", env=graph_env(settings))
    assert [(c["node_id"], c["candidate_id"]) for c in json.loads(listed.stdout)["candidates"]] == [PAIR]


def test_the_bench_measures_a_model_that_fails_the_check_only_when_told(tmp_path: Path) -> None:
    """bench/identity_judge.py asks what a cycle asks: nothing of a model that fails the check —
    it says so, exit 1 — unless ``--unchecked``, which measures its answers all the same."""
    import os
    import subprocess
    import sys

    from tests.test_identity_judge_bench import KINDS, ROOT, SPLITS

    with LLMServer(default=Reply({"verdict": "create"}), passes_judge_check=False) as server:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("REM_")}, "REM_DATA_DIR": str(tmp_path / "data"),
               "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url, "REM_LLM_MAX_RETRIES": "0"}
        command = [sys.executable, "bench/identity_judge.py", "--splits", *SPLITS, "--kinds", *KINDS, "--json"]
        refused = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert refused.returncode == 1 and "failed its check" in refused.stderr, refused.stderr[-2000:]
        assert server.chat_count == 1  # the check's first question, nothing of the pairs
        measured = subprocess.run([*command, "--unchecked"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert measured.returncode == 0, measured.stderr[-2000:]
        figures = json.loads(measured.stdout)
        assert all(f["asked"] > 0 and f["judge"]["recall"] <= f["rules"]["recall"] + 1e-9 for f in figures.values()), figures
