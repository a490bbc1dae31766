"""bench/identity_judge.py — the model judge on the real labelled identity pairs — measures what a
cycle would do: the rules' verdicts, the questions a cycle would put (same type, on the review
list) and the judge's answers, each question paid for once across runs (the answers file), a failed
call counted and asked again. The ceiling (``--oracle``) is checked against bench_identity's own
scorer; the model path runs as a subprocess against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.bench_identity import REAL, load_pairs, score
from bench.identity_judge import judge_pairs, oracle, read_answers, report
from pipelines.identity import resolve
from tests.llm_server import LLMServer, Reply, Status
from tests.test_migrations_identity_verdicts import model

ROOT = Path(__file__).resolve().parent.parent
SPLITS = ["tuning"]  # a tuning split: nothing here is tuned, but no untouched figure is printed by a test
KINDS = ["path", "prose"]


def _pairs() -> list[dict[str, Any]]:
    return [p for p in load_pairs(REAL) if p["split"] in SPLITS and p["name_kind"] in KINDS and p["rule"] != "cross-type"]


async def test_the_ceiling_is_the_rules_plus_every_same_pair_they_leave_for_review() -> None:
    """With every question answered from the labels, recall is what bench_identity's scorer calls
    ``recall_with_review`` (the rules' links and the same pairs on the review list), and no false
    link is added; without a question the judge changes nothing."""
    pairs = _pairs()
    figures = report(await judge_pairs(pairs, oracle(pairs), answers={}))
    for kind in KINDS:
        mine = [p for p in pairs if p["name_kind"] == kind]
        scored = score(mine, lambda n, i: resolve(n, i), crowd=False)
        f = figures[f"tuning/{kind}"]
        assert f["rules"]["recall"] == scored["recall"] and f["rules"]["fp"] == scored["fp"], (kind, f, scored)
        assert f["judge"]["recall"] == scored["recall_with_review"], (kind, f, scored)
        assert f["judge"]["fp"] == f["rules"]["fp"]
        assert f["asked"] > 0  # the review list has pairs of each kind here, so the test can fail
    assert figures["tuning/path"]["judge"]["recall"] > figures["tuning/path"]["rules"]["recall"]


def _judge(server: LLMServer, answers: Path, tmp_path: Path) -> dict[str, Any]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("REM_")}, "REM_DATA_DIR": str(tmp_path / "data"),
           "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url, "REM_LLM_MODEL": "test-model", "REM_LLM_MAX_RETRIES": "0"}
    done = subprocess.run(
        [sys.executable, "bench/identity_judge.py", "--splits", *SPLITS, "--kinds", *KINDS, "--answers", str(answers), "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


async def test_a_model_on_loopback_answers_each_question_once_across_runs(tmp_path: Path) -> None:
    """A model that links every question to the first existing node: every same pair on the review
    list is linked (the ceiling's recall) and every other one is a false link; the second run reads
    every answer back and puts no question to the model."""
    pairs = _pairs()
    ceiling = report(await judge_pairs(pairs, oracle(pairs), answers={}))["tuning/all"]
    answers = tmp_path / "answers.jsonl"
    with LLMServer(default=Reply(model)) as server:
        first = _judge(server, answers, tmp_path)["tuning/all"]
        asked = server.chat_count
        assert first["asked"] == ceiling["asked"] and asked == len(read_answers(answers)) > 0, (first, asked)
        assert first["judge"]["recall"] == ceiling["judge"]["recall"]
        false_links = first["judge"]["fp"] - first["rules"]["fp"]
        assert false_links == ceiling["asked"] - (ceiling["judge"]["tp"] - ceiling["rules"]["tp"]) > 0, first
        again = _judge(server, answers, tmp_path)["tuning/all"]
        assert server.chat_count == asked, "a question was paid for twice"
        assert again["from_answers"] == first["asked"] and again["asked"] == 0
        assert again["judge"] == first["judge"]


async def test_a_failed_call_is_counted_unanswered_kept_nowhere_and_asked_again(tmp_path: Path) -> None:
    """Every call fails (500): each question is ``unanswered``, the judge adds nothing, and nothing is
    kept; the next run, with the model back, asks them all."""
    answers = tmp_path / "answers.jsonl"
    with LLMServer(default=Status(500, "down")) as server:
        failed = _judge(server, answers, tmp_path)["tuning/all"]
    assert failed["unanswered"] == failed["asked"] > 0 and failed["judge"] == failed["rules"], failed
    assert read_answers(answers) == {}
    with LLMServer(default=Reply(model)) as server:
        back = _judge(server, answers, tmp_path)["tuning/all"]
        assert back["asked"] == failed["asked"] and back["unanswered"] == 0 and server.chat_count == back["asked"], back


def _scenes(tmp_path: Path) -> Path:
    """Two scenes: `David Wallace` speaks in one, `Wallace` in the other (heuristic extraction
    makes a PERSON of each speaker): one question when a judge is on."""
    scenes = [
        {"sessionId": f"s{i}", "title": f"s{i}", "createdAt": f"2026-01-0{i + 1}T00:00:00+00:00",
         "turns": [{"id": f"s{i}-u{j}", "role": who, "text": text, "createdAt": f"2026-01-0{i + 1}T00:00:0{j}+00:00"}
                   for j, (who, text) in enumerate([(speaker, "The numbers look good this quarter."), ("Jan", "They do.")])]}
        for i, speaker in enumerate(["David Wallace", "Wallace"])
    ]
    sessions = tmp_path / "scenes.jsonl"
    sessions.write_text("".join(json.dumps(s) + "\n" for s in scenes), encoding="utf-8")
    return sessions


def _label(tmp_path: Path, *, same: bool) -> Path:
    labels = tmp_path / f"labels-{same}.jsonl"
    labels.write_text(json.dumps({
        "split": "extension-tuning", "type": "PERSON", "existing": {"name": "David Wallace", "aliases": []},
        "incoming": {"name": "Wallace", "aliases": []}, "source": "extension", "rule": "", "score": 0.0,
        "same": same, "run": "scenes"}) + "\n", encoding="utf-8")
    return labels


def _judge_runs(tmp_path: Path, labels: Path, keep: str, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "bench/identity_judge.py", "--real", str(labels), "--splits", "extension-tuning", "--kinds", "prose",
         "--runs", f"scenes={_scenes(tmp_path)}", "--keep", str(tmp_path / keep), "--json", *extra],
        cwd=ROOT, env=env or {k: v for k, v in os.environ.items() if not k.startswith("REM_")},
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _people(data_dir: Path) -> set[str]:
    db = sqlite3.connect(data_dir / "scenes" / "graph.sqlite3")
    try:
        return {name for (name,) in db.execute("SELECT name FROM nodes WHERE label = 'PERSON'")} & {"David Wallace", "Wallace"}
    finally:
        db.close()


def test_runs_digest_sessions_with_the_labels_as_the_judge(tmp_path: Path) -> None:
    """``--oracle --runs``: the sessions imported and digested (heuristic extraction) with the
    labels answering the questions, the run's labelled pairs scored as bench_identity scores a run:
    a link where the label says same, two nodes and no review row where it says different."""
    for same in (True, False):
        figures = _judge_runs(tmp_path, _label(tmp_path, same=same), f"runs-{same}", "--oracle")
        run, split = figures["runs"]["scenes"], figures["splits"]["extension-tuning/all"]
        assert run["sessions"] == 2 and run["questions"] == 1 and run["questions_labelled"] == 1
        assert split["pairs"] == 1 and split["absent"] == 0
        assert split["positives"] == int(same) and split["precision"] == 1.0 and split["recall"] == 1.0
        assert run["review_pairs"] == 0 and split["reviewed_different"] == 0
        assert _people(tmp_path / f"runs-{same}") == ({"David Wallace"} if same else {"David Wallace", "Wallace"})


def test_runs_with_a_model_on_loopback_measure_its_answers_with_quotes(tmp_path: Path) -> None:
    """``--runs`` without ``--oracle``: the model the REM_LLM_* settings name judges the run, shown
    the quotes a cycle shows. A model that links a pair labelled different is a false link
    (precision 0); its answer is kept in ``--answers`` and a second run pays nothing; a call that
    fails is counted unanswered, kept nowhere, and the pair waits on the review list."""
    different = _label(tmp_path, same=False)
    answers = tmp_path / "answers.jsonl"
    with LLMServer(default=Reply(model)) as server:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("REM_")},
               "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url, "REM_LLM_MODEL": "test-model", "REM_LLM_MAX_RETRIES": "0"}
        first = _judge_runs(tmp_path, different, "first", "--answers", str(answers), env=env)
        (asked,) = [json.loads(r.prompt) for r in server.chat_requests if '"existing"' in r.prompt]
        again = _judge_runs(tmp_path, different, "again", "--answers", str(answers), env=env)
        assert server.chat_count == 1  # the second run asked nothing
        server.script(Status(500, "down"), match='"existing"')
        failed = _judge_runs(tmp_path, different, "failed", env=env)
    assert asked["new"]["quotes"] and asked["existing"][0]["quotes"]  # what a cycle shows
    run, split = first["runs"]["scenes"], first["splits"]["extension-tuning/all"]
    assert (run["questions"], run["questions_from_answers"], run["questions_unanswered"]) == (1, 0, 0)
    assert split["precision"] == 0.0 and _people(tmp_path / "first") == {"David Wallace"}
    assert len(answers.read_text(encoding="utf-8").splitlines()) == 1
    assert (again["runs"]["scenes"]["questions"], again["runs"]["scenes"]["questions_from_answers"]) == (0, 1)
    assert again["splits"]["extension-tuning/all"]["precision"] == 0.0
    run, split = failed["runs"]["scenes"], failed["splits"]["extension-tuning/all"]
    assert (run["questions"], run["questions_unanswered"], run["review_pairs"]) == (1, 1, 1)
    assert split["precision"] == 1.0 and split["reviewed_different"] == 1
