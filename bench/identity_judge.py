"""The model judge (``REM_LLM_JUDGE``) on the real labelled identity pairs: precision and recall of
the rules alone and of the rules with the judge settling the pairs they leave for review, per
split and kind of name — the same rule verdicts, questions and answer handling as a cycle
(:func:`pipelines.identity.resolve_batch` with ``judged``, :func:`pipelines.identity.audit_options`,
:meth:`pipelines.judge.ModelJudge.audit_identity`), against the OpenAI-compatible server the
``REM_LLM_*`` settings name.

    REM_EXTRACTOR=openai REM_LLM_BASE_URL=http://127.0.0.1:8080/v1 REM_LLM_MODEL=qwen2.5-7b-instruct \\
        python bench/identity_judge.py --splits fresh extension-fresh --kinds prose \\
        [--answers /tmp/judge-answers.jsonl] [--concurrency 4]

Each pair is resolved as :mod:`bench.bench_identity` resolves it in its *isolated* setting (the
index holds the pair's existing node only). A ``candidate`` verdict naming it is a question for the
judge; a ``link`` to it is the judge's answer. Each answer is appended to ``--answers`` by its
question (:func:`pipelines.identity.audit_question`, the key a cycle keeps answers by), and read
back by the next run: a run that stopped, or a run over more splits, pays no question twice. A
failed call is counted ``unanswered`` and not kept (the next run asks it again), as a cycle does.
In isolation every name beside one with words more is the only such name, so the
``extension-asked`` rule offers every such pair, the ceiling is loose, and the judge sees names
without quotes. A run puts the pairs among all the names of its sessions and shows the judge the
quotes a cycle shows:

    python bench/identity_judge.py --runs office-heldout=office.heldout.jsonl [NAME=FILE …] [--keep DIR] \
        [--answers /tmp/judge-run-answers.jsonl] [--oracle]

imports each file into a fresh data dir and digests it in this process with the heuristic
extractor and the model the ``REM_LLM_*`` settings name as the cycle's judge (``--oracle``: the
labels — a question naming a pair labelled same linked, every other one answered "a new node"),
(``--judged-by sweep``: a cycle without a judge, then the review list swept as ``rem-cycle
candidates --judge`` sweeps it; ``both``: the judge in the cycle and the sweep after it),
then scores the labelled pairs of that run (``run`` in the labels) as ``bench_identity.py --runs``
does, and counts the questions: asked, about a labelled pair, answered from ``--answers``,
unanswered. Keep the runs' answers in a file of their own: an isolated run's answers are keyed
alike but were given without quotes. ``--oracle`` answers from the labels of the ``--splits``
named: other splits, other answers, so another graph and another question count for the same file.

The issue-11 figures of prose identity are the rules' alone (no model runs where they were
measured); this measures the model path with one command wherever a model server runs. Which
splits are untouched, and so printed once, is bench/RESULTS.md's "Issue 11 at a glance".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_identity import LABELLED_SPLITS, REAL, load_pairs, run_report  # noqa: E402
from config import ConfigError, load_settings  # noqa: E402
from pipelines.identity import (  # noqa: E402
    CANDIDATE, LINK, AliasIndex, AuditUnanswered, Auditor, NodeRef, audit_options, audit_question, fold, offered, resolve_batch,
)

KINDS = ("identifier", "path", "prose")


@dataclass(frozen=True, slots=True)
class Judged:
    """One labelled pair: what the rules did with it and what the judge answered (``asked``:
    a question was put for it; ``answer``: the id the judge chose, ``None`` for "a new node";
    ``unanswered``: the call failed)."""

    split: str
    kind: str
    same: bool
    rule_linked: bool
    asked: bool = False
    answer: str | None = None
    unanswered: bool = False
    cached: bool = False
    existing_id: str = ""

    @property
    def judge_linked(self) -> bool:
        return self.rule_linked or (self.asked and self.answer == self.existing_id)


def read_answers(path: Path | None) -> dict[str, str | None]:
    """The answers kept in ``path`` (one JSON object a line: ``question``, ``target``); a torn last
    line (a run killed mid-write) is skipped, and so asked again."""
    answers: dict[str, str | None] = {}
    if path is None or not path.exists():
        return answers
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("question"), str):
            answers[row["question"]] = row.get("target") if isinstance(row.get("target"), str) else None
    return answers


def keep_answer(kept: Any, question: str, target: str | None) -> None:
    """Append one answer to the open answers file ``kept`` (``None``: none kept) as
    :func:`read_answers` reads it back, flushed at once: a run killed later loses nothing paid."""
    if kept is not None:
        kept.write(json.dumps({"question": question, "target": target}) + "\n")
        kept.flush()


async def judge_pairs(
    pairs: Sequence[Mapping[str, Any]], auditor: Auditor, *, answers: dict[str, str | None],
    keep: Path | None = None, concurrency: int = 4,
) -> list[Judged]:
    """Each pair resolved by the rules and, where they leave it for review, settled by ``auditor``:
    each distinct question once (pairs that put the same question share its answer), none that
    ``answers`` holds; new answers are added there and appended to ``keep``."""
    ruled: list[tuple[Judged, str | None]] = []
    todo: dict[str, tuple[NodeRef, list[NodeRef]]] = {}
    for pair in pairs:
        existing, incoming = pair["existing_ref"], pair["incoming_ref"]
        index = AliasIndex.build([existing])
        # As a cycle with a judge resolves (its rules offer the judge more than the review list).
        (verdict,) = resolve_batch([incoming], index, judged=True)
        base = Judged(pair["split"], pair["name_kind"], bool(pair["same"]),
                      verdict.action == LINK and verdict.target == existing.id, existing_id=existing.id)
        options = audit_options(verdict, incoming, index.nodes) if verdict.action == CANDIDATE else []
        question = audit_question(incoming, options) if any(o.id == existing.id for o in options) else None
        if question is not None and question not in answers:
            todo.setdefault(question, (incoming, options))
        ruled.append((base, question))
    known = set(answers)
    failed: set[str] = set()
    limiter = anyio.Semaphore(max(1, concurrency))
    kept = keep.open("a", encoding="utf-8") if keep is not None else None

    async def ask(question: str, node: NodeRef, options: Sequence[NodeRef]) -> None:
        async with limiter:
            try:
                chosen = offered(await auditor(node, options), options)
            except AuditUnanswered:
                failed.add(question)
                return
        answers[question] = chosen
        keep_answer(kept, question, chosen)

    try:
        async with anyio.create_task_group() as group:
            for question, (node, options) in todo.items():
                group.start_soon(ask, question, node, options)
    finally:
        if kept is not None:
            kept.close()
    return [
        base if question is None else
        replace(base, asked=True, answer=answers.get(question), cached=question in known, unanswered=question in failed)
        for base, question in ruled
    ]


def report(judged: Sequence[Judged]) -> dict[str, dict[str, Any]]:
    """Per ``split/kind`` (and ``split/all``): precision and recall of the rules and of the rules
    with the judge, and what was asked."""
    groups: dict[str, list[Judged]] = {}
    for j in judged:
        for key in (f"{j.split}/{j.kind}", f"{j.split}/all"):
            groups.setdefault(key, []).append(j)
    out: dict[str, dict[str, Any]] = {}
    for key, rows in sorted(groups.items()):
        figures: dict[str, Any] = {"pairs": len(rows), "positives": sum(j.same for j in rows)}
        for name, linked in (("rules", lambda j: j.rule_linked), ("judge", lambda j: j.judge_linked)):
            c = Counter(("tp" if linked(j) else "fn") if j.same else ("fp" if linked(j) else "tn") for j in rows)
            figures[name] = {
                "precision": round(c["tp"] / (c["tp"] + c["fp"]), 3) if c["tp"] + c["fp"] else 1.0,
                "recall": round(c["tp"] / (c["tp"] + c["fn"]), 3) if c["tp"] + c["fn"] else 1.0,
                **{k: c[k] for k in ("tp", "fp", "fn", "tn")},
            }
        figures["asked"] = sum(j.asked and not j.cached for j in rows)
        figures["from_answers"] = sum(j.cached for j in rows)
        figures["unanswered"] = sum(j.unanswered for j in rows)
        out[key] = figures
    return out


def pair_labels(pairs: Sequence[Mapping[str, Any]]) -> dict[frozenset[tuple[str, str]], bool]:
    """The labelled pairs by their two ``(type, folded name)``: whether they are one thing."""
    return {frozenset(((p["type"], fold(p["existing"]["name"])), (p["type"], fold(p["incoming"]["name"])))): bool(p["same"])
            for p in pairs}


def labelled_options(labels: Mapping[frozenset[tuple[str, str]], bool], node: NodeRef, options: Sequence[NodeRef]) -> list[tuple[str, bool]]:
    """``(option id, same)`` for each option a labelled pair names beside ``node`` (any of their
    names, ignoring case), in the options' order. A pair is labelled under one type: an option of
    another type (a sweep's ``cross-type`` question) is looked up under either node's."""
    return [(o.id, labels[key]) for o in options for f in node.forms for g in o.forms for kind in dict.fromkeys((node.type, o.type))
            if (key := frozenset(((kind, fold(f)), (kind, fold(g))))) in labels]


def run_oracle(pairs: Sequence[Mapping[str, Any]]) -> Auditor:
    """The labels as the judge of a run: the first option that a pair labelled same names beside
    the node, else "a new node"."""
    labels = pair_labels(pairs)

    async def answer(node: NodeRef, options: Sequence[NodeRef], *, quotes: Mapping[str, Sequence[str]] = {}) -> str | None:
        return next((option for option, same in labelled_options(labels, node, options) if same), None)

    return answer


@dataclass(slots=True)
class RunQuestions:
    """What one run asked its judge: each question's count by outcome."""

    asked: int = 0
    labelled: int = 0
    from_answers: int = 0
    unanswered: int = 0


def counting(auditor: Auditor, labels: Mapping[frozenset[tuple[str, str]], bool], counts: RunQuestions,
             answers: dict[str, str | None], keep: Any = None) -> Auditor:
    """``auditor`` as a cycle's judge that counts its questions, answers from ``answers`` those it
    holds (by :func:`pipelines.identity.audit_question`, the key a cycle keeps answers by), and
    appends each new answer to the open file ``keep``; a failed call, or an answer naming no option
    (:func:`pipelines.identity.offered`), is counted and raised on (the cycle leaves the pair for
    review, as with a model)."""
    async def answer(node: NodeRef, options: Sequence[NodeRef], *, quotes: Mapping[str, Sequence[str]] = {}) -> str | None:
        counts.labelled += bool(labelled_options(labels, node, options))
        question = audit_question(node, options)
        if question in answers:
            counts.from_answers += 1
            return answers[question]
        counts.asked += 1
        try:
            answers[question] = offered(await auditor(node, options, quotes=quotes), options)
        except AuditUnanswered:
            counts.unanswered += 1
            raise
        keep_answer(keep, question, answers[question])
        return answers[question]

    return answer


# Where a run's judge answers: in the cycle (a question per name as its session commits), in a sweep
# of the review list after the cycle (``rem-cycle candidates --judge``), or both.
JUDGED_BY = ("cycle", "sweep", "both")


async def judge_runs(
    runs: Mapping[str, Path], pairs: Sequence[Mapping[str, Any]], *, keep: Path, judge: Auditor | None = None,
    answers: dict[str, str | None] | None = None, kept_answers: Path | None = None, judged_by: str = "cycle", across: bool = False,
    cross_type: bool = False,
) -> dict[str, Any]:
    """Each run's sessions digested with ``judge`` (``None``: the labels, :func:`run_oracle`) as the
    cycle's judge (see the module docstring), in a data dir under ``keep``, and with ``judged_by``
    ``sweep`` or ``both`` the review list then swept by it (:func:`worker.knowledge.settle_review_list`,
    every question, ``across`` and ``cross_type`` as ``--across`` and ``--cross-type``; with ``sweep``
    the cycle has no judge); the figures of
    :func:`bench.bench_identity.run_report` over them, and per run its questions: asked (and per
    100 sessions), about a labelled pair, answered from ``answers`` (the answers of earlier runs,
    each new one appended to ``kept_answers``), unanswered; the sweep's separately (``sweep_*``)."""
    import os
    import subprocess

    import worker.cycle
    from pipelines.review import ReviewSweep
    from worker.cycle import run_cycle
    from worker.knowledge import settle_review_list

    root = Path(__file__).resolve().parent.parent
    made = worker.cycle.identity_resolver
    labels = pair_labels(pairs)
    answers = {} if answers is None else answers
    questions: dict[str, RunQuestions] = {}
    swept: dict[str, tuple[RunQuestions, ReviewSweep]] = {}
    dirs: dict[str, Path] = {}
    kept = kept_answers.open("a", encoding="utf-8") if kept_answers is not None else None
    try:
        for name, sessions in runs.items():
            data_dir = dirs[name] = keep / name
            counts = questions[name] = RunQuestions()
            auditor = counting(judge or run_oracle(pairs), labels, counts, answers, kept)
            # The seam a model takes in a cycle (REM_LLM_JUDGE), taken by this judge: the
            # extraction stays the heuristic one, whose graph the labelled pairs come from.
            cycle_judge = auditor if judged_by != "sweep" else None
            worker.cycle.identity_resolver = lambda db, *, judge=cycle_judge, keep_as=None, **_: made(db, auditor=judge, keep_as=keep_as)
            env = {**os.environ, "REM_DATA_DIR": str(data_dir), "REM_EXTRACTOR": "heuristic", "REM_LOG_LEVEL": "warning"}
            subprocess.run([sys.executable, "-m", "worker", "import", str(sessions)], cwd=root, env=env, check=True, capture_output=True)
            settings = load_settings(data_dir=data_dir, extractor="heuristic", batch_limit=1_000_000, log_level="warning")
            result = await run_cycle(settings)
            if result.exit_code != 0:
                raise SystemExit(f"{name}: the cycle ended {result.outcome}: {result.message}")
            if judged_by != "cycle":
                sweep_counts = RunQuestions()
                sweep = await settle_review_list(settings, counting(judge or run_oracle(pairs), labels, sweep_counts, answers, kept),
                                                 limit=None, across=across, cross_type=cross_type)
                swept[name] = (sweep_counts, sweep)
    finally:
        worker.cycle.identity_resolver = made
        if kept is not None:
            kept.close()
    figures = run_report(dirs, pairs)
    for name, counts in questions.items():
        sessions = figures["runs"][name]["sessions"]
        figures["runs"][name] |= {"questions": counts.asked, "questions_labelled": counts.labelled,
                                  "questions_from_answers": counts.from_answers, "questions_unanswered": counts.unanswered,
                                  "questions_per_100_sessions": round((counts.asked + counts.from_answers) * 100 / sessions, 1) if sessions else 0.0}
    for name, (counts, sweep) in swept.items():
        sessions = figures["runs"][name]["sessions"]
        figures["runs"][name] |= {"sweep_questions": counts.asked + counts.from_answers, "sweep_questions_labelled": counts.labelled,
                                  "sweep_questions_per_100_sessions": round((counts.asked + counts.from_answers) * 100 / sessions, 1) if sessions else 0.0,
                                  "sweep_linked": len(sweep.linked), "sweep_apart": len(sweep.apart), "sweep_unanswered": len(sweep.unanswered),
                                  "sweep_refused": len(sweep.refused), "sweep_gone": sweep.gone, "sweep_cross_type_left": sweep.cross_type_left}
    return figures


def oracle(pairs: Sequence[Mapping[str, Any]]) -> Auditor:
    """An auditor that answers from the labels (the pair's existing node when it is the same thing,
    else "a new node"): the most the judge can add to the rules, since it is asked only about the
    pairs they leave for review — a ceiling, not a model's figure."""
    same = {(p["incoming_ref"].id, p["existing_ref"].id) for p in pairs if p["same"]}

    async def answer(node: NodeRef, options: Sequence[NodeRef], *, quotes: Mapping[str, Sequence[str]] = {}) -> str | None:
        return next((o.id for o in options if (node.id, o.id) in same), None)

    return answer


async def model_judge(stack: AsyncExitStack, *, checked: bool = True) -> Any:
    """The model the ``REM_LLM_*`` settings name as the judge (a :class:`pipelines.judge.ModelJudge`
    open on ``stack``), once its server passed the check a cycle's ``provider-ready`` makes;
    :class:`SystemExit` with that check's line when it fails. Without it a server that was not
    there failed every question, each after its retries, and the run printed the rules' figures
    as the judge's, exit 0 (userwalk6). ``checked``: and once the model passed the judge's own
    check (:meth:`pipelines.judge.ModelJudge.failed_check`), as a cycle asks it; a model that fails
    it is no judge a cycle would ask (its figures are the rules'), :class:`SystemExit` saying so."""
    from pipelines.extract.llm import OpenAIExtractor
    from pipelines.extract.model import ExtractionFailure
    from pipelines.judge import ModelJudge

    extractor = await stack.enter_async_context(OpenAIExtractor(load_settings()))
    try:
        await extractor.ping()
    except ExtractionFailure as exc:
        raise SystemExit(f"identity_judge.py: no judge to measure: {exc}") from None
    judge = ModelJudge(extractor)
    if checked and (failed := await judge.failed_check()) is not None:
        raise SystemExit(f"identity_judge.py: the model judge failed its check ({failed}): a cycle asks it nothing, so "
                         "its figures are the rules' alone; --unchecked measures its answers all the same")
    return judge


async def run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Judge the chosen pairs with the model the settings name (or, ``--oracle``, with the labels),
    and print the report."""
    pairs = [p for p in load_pairs(args.real)
             if p["split"] in args.splits and p.get("name_kind") in args.kinds and p["rule"] != "cross-type"]
    if args.runs:
        async with AsyncExitStack() as stack:
            judge = None
            if not args.oracle:
                judge = (await model_judge(stack, checked=not args.unchecked)).audit_identity
            keep = args.keep if args.keep is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rem-judge-runs-")))
            ran = await judge_runs(args.runs, pairs, keep=keep, judge=judge, answers=read_answers(args.answers), kept_answers=args.answers,
                                   judged_by=args.judged_by, across=args.across, cross_type=args.cross_type)
        if args.json:
            print(json.dumps(ran, indent=1, sort_keys=True))
            return ran
        who = "the labels" if args.oracle else "the model"
        for name, r in ran["runs"].items():
            print(f"{name:28} sessions={r['sessions']} questions={r['questions']} from_answers={r['questions_from_answers']} "
                  f"unanswered={r['questions_unanswered']} ({r['questions_per_100_sessions']} per 100 sessions, "
                  f"{r['questions_labelled']} about a labelled pair)  review list {r['review_per_100_sessions']} per 100 sessions")
            if "sweep_questions" in r:
                print(f"{'':28} sweep: questions={r['sweep_questions']} ({r['sweep_questions_per_100_sessions']} per 100 sessions, "
                      f"{r['sweep_questions_labelled']} about a labelled pair) linked={r['sweep_linked']} apart={r['sweep_apart']} "
                      f"unanswered={r['sweep_unanswered']} refused={r['sweep_refused']}")
        for key, f in ran["splits"].items():
            print(f"{key:28} pairs={f['pairs']:4} same={f['positives']:4} absent={f['absent']}  with {who} judging "
                  f"P={f['precision']:.3f} R={f['recall']:.3f}  R with review={f['recall_with_review']:.3f}")
        return ran
    if args.oracle:
        judged = await judge_pairs(pairs, oracle(pairs), answers={})
    else:
        answers = read_answers(args.answers)
        async with AsyncExitStack() as stack:
            judge = await model_judge(stack, checked=not args.unchecked)
            judged = await judge_pairs(pairs, judge.audit_identity, answers=answers, keep=args.answers, concurrency=args.concurrency)
    figures = report(judged)
    if args.json:
        print(json.dumps(figures, indent=1, sort_keys=True))
        return figures
    for key, f in figures.items():
        r, j = f["rules"], f["judge"]
        print(f"{key:28} pairs={f['pairs']:4} same={f['positives']:4}  rules P={r['precision']:.3f} R={r['recall']:.3f}  "
              f"with judge P={j['precision']:.3f} R={j['recall']:.3f}  asked={f['asked']} from_answers={f['from_answers']} "
              f"unanswered={f['unanswered']}")
    return figures


def _run(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=SESSIONS_FILE, got {text!r}")
    return name, Path(path)


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Parse the arguments and run (the model settings come from the environment, as a worker's)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, default=REAL, help="the labelled pairs")
    parser.add_argument("--splits", nargs="+", default=["fresh", "extension-fresh"], choices=LABELLED_SPLITS)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--answers", type=Path, default=None, help="keep and reuse the judge's answers (JSON lines)")
    parser.add_argument("--concurrency", type=int, default=4, help="questions in flight at once")
    parser.add_argument("--oracle", action="store_true", help="answer from the labels (no model): the judge's ceiling")
    parser.add_argument("--unchecked", action="store_true",
                        help="ask the model even when it fails the judge's check (a cycle would not ask it)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--runs", nargs="+", type=_run, default=None, metavar="NAME=SESSIONS",
                        help="digest these import files (heuristic extraction) with the model, or the labels (--oracle), as the judge, and score their runs")
    parser.add_argument("--keep", type=Path, default=None, help="with --runs: leave the runs' data dirs here")
    parser.add_argument("--judged-by", choices=JUDGED_BY, default="cycle",
                        help="with --runs: the judge answers in the cycle (default), in a sweep of the review list after "
                        "a cycle without it (rem-cycle candidates --judge), or both")
    parser.add_argument("--across", action="store_true", help="the sweep as candidates --judge --across")
    parser.add_argument("--cross-type", action="store_true", help="the sweep as candidates --judge --cross-type")
    args = parser.parse_args(argv)
    if args.runs is not None:
        args.runs = dict(args.runs)
    try:
        settings = load_settings()
    except ConfigError as exc:
        parser.error(str(exc))
    if not args.oracle and settings.extractor != "openai":
        parser.error("the judge is the model's: set REM_EXTRACTOR=openai and REM_LLM_BASE_URL (and REM_LLM_MODEL)")
    return anyio.run(run, args)


if __name__ == "__main__":
    main()
