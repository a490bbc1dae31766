"""Two shapes of one name on a real run, for labelling (bench/RESULTS.md, issue 11, eighth round):

* **A — a base name beside its full path in one session**: a session whose nodes include a bare
  ``FILE:options.py`` and exactly one full path with that base name
  (``FILE:django/contrib/admin/options.py``). One instance per (session, bare name, full path).
* **B — one test typed twice**: a session whose nodes include a TEST and a METHOD of one name
  (``TEST:test_srepr_dict`` / ``METHOD:test_srepr_dict``). One instance per (session, name).

    python bench/identity_session_files.py list swe-tune=DATA_DIR [--kind A|B] [--sample N] [--seed S] [--show]
    python bench/identity_session_files.py score swe-tune=DATA_DIR swe-heldout=DATA_DIR [--splits session-files-tuning]
    python bench/identity_session_files.py cost swe-tune=DATA_DIR [--repeat 5]
    python bench/identity_session_files.py review swe-heldout=DATA_DIR [--sample 40] [--show]

``list`` prints instances (with ``--show``, the turns where each name is said, for the labeller:
role, turn number, the words around it). Labels (names and session ids only, no turn text) live in
``bench/data/identity_session_files.jsonl`` with ``same`` — criterion A: in this session the bare
name refers to that full path's file (what the agent and the user mean decides; a listing that
shows several files of the name refers to none in particular); B: the session's TEST and METHOD
nodes of the name are one test function (its definition, or a copy the agent made to reproduce it).
Samples: ``list --sample 60`` (A, seed 20261201) and every B instance, of the tuning and of the
held-out run; labelled before any rule was written. ``session-files-fresh``: every instance of the
aider and SWE-agent runs (two untouched sources), labelled after the rules were frozen. ``score`` measures
:func:`pipelines.identity.session_folds` on them: each labelled session's nodes (of a run made
*without* the rule, which keeps both names apart) are folded, an instance is predicted the same
when its bare name / METHOD folds into its full path / TEST. ``cost`` reduces every session of a run
from its stored chunk results with the folds and without (one process, best of ``--repeat``): what
the rule adds to a session's reduce (it reads the session's own nodes only, never the graph).
``review`` draws a random sample of a run's review list (``identity_candidates``, seed 20261201)
and scores it against the labels of ``session-files-review-heldout`` (40 pairs of the held-out run
made with the rules, labelled after they were frozen: one referent or not, in the pair's session):
the list's noise. Read-only on the data dir.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LABELS = Path(__file__).resolve().parent / "data" / "identity_session_files.jsonl"
SEED = 20261201


def _connect(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{data_dir / 'graph.sqlite3'}?mode=ro", uri=True)


def session_files(data_dir: Path) -> dict[str, set[str]]:
    """Session id → the FILE names (node ids without ``FILE:``) with a point in that session."""
    db = _connect(data_dir)
    found: dict[str, set[str]] = defaultdict(set)
    for node_id, anchor in db.execute("SELECT DISTINCT node_id, anchor FROM node_points WHERE node_id LIKE 'FILE:%'"):
        if anchor.startswith("session:"):
            found[anchor.removeprefix("session:")].add(node_id.removeprefix("FILE:"))
    return found


def file_instances(data_dir: Path) -> list[dict[str, Any]]:
    """Every A instance of a run: (session, bare base name, the one full path of that base name)."""
    out = []
    for session, names in sorted(session_files(data_dir).items()):
        by_base: dict[str, list[str]] = defaultdict(list)
        for name in names:
            if "/" in name and "://" not in name:
                by_base[name.rsplit("/", 1)[-1]].append(name)
        for bare in sorted(n for n in names if "/" not in n):
            paths = by_base.get(bare, [])
            if len(paths) == 1:
                out.append({"kind": "A", "session": session, "bare": bare, "path": paths[0]})
    return out


def test_instances(data_dir: Path) -> list[dict[str, Any]]:
    """Every B instance of a run: (session, a name the session holds both as a TEST and as a METHOD)."""
    db = _connect(data_dir)
    typed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for node_id, anchor in db.execute(
        "SELECT DISTINCT node_id, anchor FROM node_points WHERE node_id LIKE 'TEST:%' OR node_id LIKE 'METHOD:%'"
    ):
        kind, _, name = node_id.partition(":")
        if anchor.startswith("session:"):
            typed[(anchor.removeprefix("session:"), name)].add(kind)
    return [{"kind": "B", "session": session, "name": name} for (session, name), kinds in sorted(typed.items()) if len(kinds) == 2]


def _said(db: sqlite3.Connection, session: str, text: str, *, limit: int, width: int = 90) -> list[str]:
    """Where ``text`` is said in a session's turns: ``role#turn: …words around it…``."""
    pattern = re.compile(r"(?<![\w./-])" + re.escape(text) + r"(?![\w-])")
    lines = []
    for role, index, body in db.execute(
        "SELECT role, turn_index, text FROM recall_turns WHERE session_id = ? ORDER BY turn_index", (f"session:{session}",)
    ):
        for hit in pattern.finditer(body):
            around = body[max(0, hit.start() - width) : hit.end() + width].replace("\n", " ⏎ ")
            lines.append(f"    {role}#{index}: …{around}…")
            break
        if len(lines) >= limit:
            break
    return lines


def _other_dirs(db: sqlite3.Connection, session: str, bare: str, path: str) -> list[str]:
    """Other paths ending in ``/bare`` written anywhere in the session's turns (a listing, a grep)."""
    pattern = re.compile(r"[\w./-]*/" + re.escape(bare) + r"(?![\w-])")
    seen = set()
    for (body,) in db.execute("SELECT text FROM recall_turns WHERE session_id = ?", (f"session:{session}",)):
        seen.update(m.group(0).lstrip("./") for m in pattern.finditer(body))
    return sorted(p for p in seen if not p.endswith(path) and not path.endswith(p.removeprefix("a/").removeprefix("b/")))


def show(data_dir: Path, instance: dict[str, Any]) -> list[str]:
    """The turns a labeller reads for one instance."""
    db = _connect(data_dir)
    if instance["kind"] == "A":
        session = instance["session"]
        return [
            f"  bare said in: (session {session})", *_said(db, session, instance["bare"], limit=5),
            "  full path said in:", *_said(db, session, instance["path"], limit=2, width=40),
            f"  other paths ending in /{instance['bare']}: {_other_dirs(db, session, instance['bare'], instance['path'])[:8]}",
        ]
    session = instance["session"]
    lines = []
    for kind in ("TEST", "METHOD"):
        turns = sorted({m for (m,) in db.execute(
            "SELECT DISTINCT memory_id FROM node_points WHERE node_id = ? AND anchor = ?", (f"{kind}:{instance['name']}", f"session:{session}"))})
        lines.append(f"  {kind} points: {', '.join(t.removeprefix(f'memory:{session}-') for t in turns)}")
    return [*lines, *_said(db, session, instance["name"], limit=6, width=70)]


def session_nodes(data_dir: Path, session: str) -> list[tuple[str, str, str]]:
    """``(id, type, name)`` of the FILE/TEST/METHOD nodes with a point in one session."""
    db = _connect(data_dir)
    return [(i, label, name) for i, label, name in db.execute(
        "SELECT DISTINCT n.id, n.label, n.name FROM node_points p JOIN nodes n ON n.id = p.node_id"
        " WHERE p.anchor = ? AND n.label IN ('FILE', 'TEST', 'METHOD')", (f"session:{session}",))]


def score(runs: dict[str, Path], splits: list[str]) -> dict[str, dict[str, Any]]:
    """Precision / recall of :func:`session_folds` on the labelled instances of ``splits``, per kind."""
    from pipelines.identity import session_folds

    labels = [json.loads(line) for line in LABELS.read_text().splitlines() if line.strip()]
    folds: dict[tuple[str, str], dict[str, str]] = {}
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        if label["split"] not in splits:
            continue
        key = (label["run"], label["session"])
        if key not in folds:
            folds[key] = session_folds(session_nodes(runs[label["run"]], label["session"]))
        found = folds[key]
        if label["kind"] == "A":
            predicted = found.get(f"FILE:{label['bare']}") == f"FILE:{label['path']}"
        else:
            predicted = found.get(f"METHOD:{label['name']}") == f"TEST:{label['name']}"
        row = out.setdefault(f"{label['split']} {label['kind']}", {"n": 0, "same": 0, "linked": 0, "right": 0})
        row["n"] += 1
        row["same"] += label["same"]
        row["linked"] += predicted
        row["right"] += predicted and label["same"]
    for row in out.values():
        row["precision"] = round(row["right"] / row["linked"], 3) if row["linked"] else None
        row["recall"] = round(row["right"] / row["same"], 3) if row["same"] else None
    return out


def cost(data_dir: Path, *, repeat: int = 5) -> dict[str, float]:
    """Seconds to reduce every session of a run with :func:`session_folds` and with it disabled."""
    import time
    from unittest import mock

    from pipelines.extract import reduce as reduce_module
    from pipelines.extract.model import ChunkExtraction

    db = _connect(data_dir)
    sessions: dict[str, list[ChunkExtraction]] = defaultdict(list)
    for session, payload in db.execute("SELECT session_id, payload FROM chunk_results WHERE status = 'ok' ORDER BY session_id, chunk_id"):
        sessions[session].append(ChunkExtraction.from_payload(json.loads(payload)))

    def once() -> float:
        start = time.perf_counter()
        for session, extractions in sessions.items():
            reduce_module.reduce_session(session, extractions)
        return time.perf_counter() - start

    no_folds = mock.patch.object(reduce_module, "session_folds", lambda nodes: {})
    once()  # warm-up
    timed: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeat):  # interleaved, so load on the machine falls on both alike
        timed[True].append(once())
        with no_folds:
            timed[False].append(once())
    with_folds, without = min(timed[True]), min(timed[False])
    return {"sessions": len(sessions), "with_folds_s": round(with_folds, 4), "without_s": round(without, 4),
            "ratio": round(with_folds / without, 3)}


def review_sample(data_dir: Path, *, sample: int, seed: int = SEED) -> list[tuple[str, str, str, str]]:
    """A random ``sample`` of a run's review pairs: (rule, node, candidate, session)."""
    db = _connect(data_dir)
    rows = db.execute("SELECT node_id, candidate_id, rule, session_id FROM identity_candidates ORDER BY node_id, candidate_id").fetchall()
    random.Random(seed).shuffle(rows)
    return [(rule, node, candidate, session) for node, candidate, rule, session in rows[:sample]]


def _runs(pairs: list[str]) -> dict[str, Path]:
    return {source: Path(path) for source, _, path in (p.partition("=") for p in pairs)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="print a run's instances")
    listing.add_argument("runs", nargs="+", metavar="SOURCE=DATA_DIR")
    listing.add_argument("--kind", choices=("A", "B"), default="A")
    listing.add_argument("--sample", type=int, default=0, help="a random sample of this many (0: all)")
    listing.add_argument("--seed", type=int, default=SEED)
    listing.add_argument("--show", action="store_true", help="print the turns where each name is said")
    listing.add_argument("--json", action="store_true")
    scoring = sub.add_parser("score", help="precision / recall of the session rules on the labels")
    scoring.add_argument("runs", nargs="+", metavar="SOURCE=DATA_DIR", help="runs made without the rules")
    scoring.add_argument("--splits", nargs="+", default=["session-files-tuning"],
                         help="label splits (the held-out one, session-files-heldout, once the rules are frozen)")
    costing = sub.add_parser("cost", help="reduce time with and without the session folds")
    costing.add_argument("runs", nargs="+", metavar="SOURCE=DATA_DIR")
    costing.add_argument("--repeat", type=int, default=5)
    reviewing = sub.add_parser("review", help="a random sample of a run's review list, and its noise by the labels")
    reviewing.add_argument("runs", nargs="+", metavar="SOURCE=DATA_DIR")
    reviewing.add_argument("--sample", type=int, default=40)
    args = parser.parse_args(argv)
    if args.command == "review":
        labels = {(r["node"], r["candidate"]): r["same"] for r in map(json.loads, LABELS.read_text().splitlines())
                  if r["kind"] == "review" and r["split"] == "session-files-review-heldout"}
        for source, data_dir in _runs(args.runs).items():
            picked = review_sample(data_dir, sample=args.sample)
            for rule, node, candidate, session in picked:
                print(f"{source} {rule} | {node} | {candidate} | {session} | same={labels.get((node, candidate))}")
            known = [labels[(n, c)] for _, n, c, _ in picked if (n, c) in labels]
            by_rule: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for rule, n, c, _ in picked:
                if (n, c) in labels:
                    by_rule[rule][0] += not labels[(n, c)]
                    by_rule[rule][1] += 1
            print(f"# {source}: {len(picked)} pairs, {len(known)} labelled, noise {sum(not k for k in known)}/{len(known)};"
                  f" by rule (different/labelled): {dict(by_rule)}")
        return
    if args.command == "cost":
        for source, data_dir in _runs(args.runs).items():
            print(source, cost(data_dir, repeat=args.repeat))
        return
    if args.command == "score":
        for split, row in score(_runs(args.runs), args.splits).items():
            print(f"{split}: {row['n']} instances, {row['same']} same; linked {row['linked']}, right {row['right']};"
                  f" precision {row['precision']}, recall {row['recall']}")
        return
    if args.command == "list":
        for source, data_dir in _runs(args.runs).items():
            found = file_instances(data_dir) if args.kind == "A" else test_instances(data_dir)
            picked = random.Random(args.seed).sample(found, min(args.sample, len(found))) if args.sample else found
            print(f"# {source}: {len(found)} {args.kind} instances, {len(picked)} listed", file=sys.stderr)
            for n, instance in enumerate(picked, 1):
                instance = {"run": source, **instance}
                print(json.dumps(instance) if args.json else f"[{n}] {json.dumps(instance)}")
                if args.show:
                    print("\n".join(show(data_dir, instance)))


if __name__ == "__main__":
    main()
