"""The review list's noise on a real run, by family (bench/RESULTS.md, issue 11, eighth round: the
review list's noise).

    python bench/identity_review_noise.py sample swe-tune=DATA_DIR [--per-rule 27 | --random 60] [--show]
    python bench/identity_review_noise.py compare BEFORE_DIR AFTER_DIR [--split review-noise-tuning]
    python bench/identity_review_noise.py cost swe-tune=DATA_DIR [--repeat 5]
    python bench/identity_review_noise.py cost friends-tune=DATA_DIR --prose [--repeat 5]   # in each tree

The twelfth round (chat) labelled 91 pairs of the Friends tuning run's list the same way, split
``review-chat-tuning`` (``--per-rule 40``), and measures its rules with ``compare --split
review-chat-tuning`` and ``cost --prose``.

``sample`` draws a sample of a run's review list (``identity_candidates``) stratified by rule
(``--per-rule`` pairs of each rule, every pair of a rule with fewer; seed 20261201) — or, with
``--random N``, N pairs drawn uniformly over the whole list, so its labels estimate the whole
list's noise rather than each rule's — and, with ``--show``, prints what a labeller reads for
each pair: every session that said each node (the first 12 listed), the spellings it said there,
and the turns where each is said, in the pair's session first. Labels (names,
rule and session ids; no turn text) live in ``bench/data/identity_session_files.jsonl``, split
``review-noise-tuning``, ``same`` — would a reviewer who reads these sessions say the two nodes
are one thing? A node that mixes several things (a bare ``save`` said of several classes'
methods) beside one of them is *not* (no answer makes the graph right).

Labelled before any review-list rule was written: 60 pairs of the tuning run
(``--per-rule 27``: every ``ambiguous-qualified`` and ``cross-type`` pair, 27 ``file-basename``, 27
``qualified``). ``compare`` takes two runs of one source (before and after a review-list rule)
and prints, per rule, the list's pairs on each and, of the labelled pairs of ``--split`` on the
first, how many the second no longer lists — noise and same apart: what a rule removes. (The
held-out labels, split ``session-files-review-heldout``, are read by ``identity_session_files.py
review``, once the rules are frozen. Split ``review-office-heldout``, round 12: 60 pairs of a run
over The Office's held-out half, ``--random 60 --seed 20261204``, labelled blind before any figure
of that round; each also says ``noise`` — a pair no reviewer should have been asked, a common word
at one end — and ``why``, and names both nodes' types and names.) ``cost``: a run's sessions resolved in turn, each a batch of its
FILE/METHOD names as it spelled them, against an index that learns each one, with the two
review-list rules and with them disabled (one process, interleaved, best of ``--repeat``). Read-only on the data dirs.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.identity_session_files import LABELS, SEED, _connect, _runs, _said  # noqa: E402


def review_pairs(data_dir: Path) -> list[dict[str, Any]]:
    """Every pair of a run's review list: rule, node, candidate, session, score, form."""
    db = _connect(data_dir)
    return [
        {"rule": rule, "node": node, "candidate": candidate, "session": session, "score": score, "form": form}
        for node, candidate, rule, session, score, form in db.execute(
            "SELECT node_id, candidate_id, rule, session_id, score, form FROM identity_candidates ORDER BY node_id, candidate_id")
    ]


def stratified(pairs: list[dict[str, Any]], *, per_rule: int, seed: int = SEED) -> list[dict[str, Any]]:
    """``per_rule`` random pairs of each rule (all of a rule with fewer)."""
    by_rule: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pair in pairs:
        by_rule[pair["rule"]].append(pair)
    rng = random.Random(seed)
    return [p for rule in sorted(by_rule) for p in rng.sample(by_rule[rule], min(per_rule, len(by_rule[rule])))]


SHOWN_SESSIONS = 12  # of a node's sessions, listed with their spellings (the rest counted)


def uniform(pairs: list[dict[str, Any]], n: int, *, seed: int = SEED) -> list[dict[str, Any]]:
    """``n`` pairs drawn uniformly over the whole list (all of it if shorter), not by rule."""
    return random.Random(seed).sample(pairs, min(n, len(pairs)))


def node_sessions(db: sqlite3.Connection, node_id: str) -> dict[str, list[str]]:
    """Session → the spellings a node was said by there (its points' evidence)."""
    said: dict[str, set[str]] = defaultdict(set)
    for anchor, evidence in db.execute("SELECT DISTINCT anchor, evidence FROM node_points WHERE node_id = ?", (node_id,)):
        said[anchor.removeprefix("session:")].add(evidence)
    return {s: sorted(e) for s, e in sorted(said.items())}


def show(data_dir: Path, pair: dict[str, Any]) -> list[str]:
    """What a labeller reads for one pair."""
    db = _connect(data_dir)
    lines = []
    for side in ("node", "candidate"):
        node_id = pair[side]
        said = node_sessions(db, node_id)
        lines.append(f"  {side} {node_id}: {len(said)} sessions")
        for session, spellings in list(said.items())[:SHOWN_SESSIONS]:
            lines.append(f"    {session}: {spellings[:6]}")
        if len(said) > SHOWN_SESSIONS:
            lines.append(f"    … {len(said) - SHOWN_SESSIONS} more")
        # The pair's own session first: it is where the resolver met both names. A node's id may be
        # lower-cased (a CONCEPT), so its turns are found by the spellings it was said by there.
        for session in [*dict.fromkeys([pair["session"], *said])][:3]:
            for spelling in said.get(session, [node_id.partition(":")[2]]):
                lines.extend(f"  [{session}]" + line for line in _said(db, session, spelling, limit=3, width=80))
    return lines


def listed(data_dir: Path) -> dict[frozenset[str], str]:
    """A run's review pairs, each as its two node ids (unordered) → rule."""
    return {frozenset((p["node"], p["candidate"])): p["rule"] for p in review_pairs(data_dir)}


def compare(before: Path, after: Path, *, split: str) -> dict[str, dict[str, int]]:
    """Per rule: pairs listed before and after, and the labelled pairs (of ``split``, listed
    before) the second run drops, noise and same apart."""
    one, two = listed(before), listed(after)
    out: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(
        ("before", "after", "labelled", "labelled_noise", "removed_noise", "removed_same"), 0))
    for rule in one.values():
        out[rule]["before"] += 1
    for rule in two.values():
        out[rule]["after"] += 1
    for label in map(json.loads, LABELS.read_text().splitlines()):
        pair = frozenset((label.get("node"), label.get("candidate")))
        if label["kind"] != "review" or label["split"] != split or pair not in one:
            continue
        row = out[one[pair]]
        row["labelled"] += 1
        row["labelled_noise"] += not label["same"]
        if pair not in two:
            row["removed_noise" if not label["same"] else "removed_same"] += 1
    return dict(out)


def _batches(data_dir: Path, kinds: tuple[str, ...]) -> list[list[Any]]:
    """A run's sessions in order, each as the batch of its nodes of ``kinds`` as it spelled them
    (their points' evidence: the first spelling the name, the others aliases)."""
    from pipelines.identity import NodeRef

    db = _connect(data_dir)
    spelled: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    where = " OR ".join("node_id LIKE ?" for _ in kinds)
    for node_id, anchor, evidence in db.execute(
        f"SELECT node_id, anchor, evidence FROM node_points WHERE {where} ORDER BY anchor, rowid", [f"{kind}:%" for kind in kinds]
    ):
        if evidence not in spelled[anchor][node_id]:
            spelled[anchor][node_id].append(evidence)
    return [[NodeRef(node_id, node_id.partition(":")[0], forms[0], tuple(forms[1:])) for node_id, forms in names.items()]
            for _, names in sorted(spelled.items())]


def prose_cost(data_dir: Path, *, repeat: int = 5) -> dict[str, Any]:
    """Seconds to resolve a chat run's sessions in turn, each a batch of its PERSON, PLACE,
    ORGANIZATION, WORK and CONCEPT names as it spelled them, against an index that learns each one
    (resolve, short-name check, learn), with the resolver of the tree this runs in (best of
    ``repeat``). The twelfth round's rules (cross-type ranking, ``derived``, ``owned``) are inline
    in the resolver: run it in each tree, alternately, and compare."""
    import time

    from pipelines import hubs
    from pipelines.identity import AliasIndex, learn, resolve_batch

    batches = _batches(data_dir, ("PERSON", "PLACE", "ORGANIZATION", "WORK", "CONCEPT"))
    timed = []
    for _ in range(repeat + 1):  # the first is a warm-up
        index = AliasIndex()
        start = time.perf_counter()
        for refs in batches:
            checked = hubs.check(refs, resolve_batch(refs, index), index)
            learn(index, refs, checked.verdicts)
        timed.append(time.perf_counter() - start)
    return {"sessions": len(batches), "names": sum(map(len, batches)), "seconds": round(min(timed[1:]), 3)}


def cost(data_dir: Path, *, repeat: int = 5) -> dict[str, Any]:
    """Seconds to resolve a run's sessions in turn, each a batch of its FILE/METHOD names as it
    spelled them (their points' evidence), against an index that learns each session (as the
    worker's resolver does: resolve, short-name check, :func:`without_foreign_receivers`, learn),
    with the review-list rules and without them."""
    import time
    from unittest import mock

    from pipelines import hubs
    from pipelines import identity as identity_module
    from pipelines.identity import MAX_SHARED_NAME, AliasIndex, learn, resolve_batch, without_foreign_receivers

    batches = _batches(data_dir, ("FILE", "METHOD"))

    def once(drop: Callable[..., list[Any]]) -> float:
        index = AliasIndex()
        start = time.perf_counter()
        for refs in batches:
            checked = hubs.check(refs, resolve_batch(refs, index), index)
            learn(index, refs, drop(refs, checked.verdicts, index))
        return time.perf_counter() - start

    def keep_all(refs: Any, verdicts: Any, index: Any) -> list[Any]:
        return list(verdicts)

    old_crowd = mock.patch.object(identity_module, "crowded_basename", lambda ids: len(ids) > MAX_SHARED_NAME)
    once(without_foreign_receivers)  # warm-up
    timed: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeat):  # interleaved, so load on the machine falls on both alike
        timed[True].append(once(without_foreign_receivers))
        with old_crowd:
            timed[False].append(once(keep_all))
    with_rules, without_rules = min(timed[True]), min(timed[False])
    return {"sessions": len(batches), "names": sum(map(len, batches)), "with_rules_s": round(with_rules, 3),
            "without_s": round(without_rules, 3), "ratio": round(with_rules / without_rules, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sampling = sub.add_parser("sample", help="a sample of a run's review list, by rule or uniform")
    sampling.add_argument("runs", nargs="+", metavar="SOURCE=DATA_DIR")
    sampling.add_argument("--per-rule", type=int, default=27)
    sampling.add_argument("--random", type=int, default=0, metavar="N",
                          help="N pairs drawn uniformly over the list instead of per rule (0: per rule)")
    sampling.add_argument("--seed", type=int, default=SEED)
    sampling.add_argument("--show", action="store_true")
    comparing = sub.add_parser("compare", help="what a rule removes from a run's list, by the labels")
    comparing.add_argument("before", type=Path)
    comparing.add_argument("after", type=Path)
    comparing.add_argument("--split", default="review-noise-tuning")
    costing = sub.add_parser("cost", help="resolution time with and without the review-list rules")
    costing.add_argument("runs", nargs="+", metavar="SOURCE=DATA_DIR")
    costing.add_argument("--repeat", type=int, default=5)
    costing.add_argument("--prose", action="store_true", help="a chat run's prose names, this tree's resolver only")
    args = parser.parse_args(argv)
    if args.command == "cost":
        for source, data_dir in _runs(args.runs).items():
            print(source, (prose_cost if args.prose else cost)(data_dir, repeat=args.repeat))
        return
    if args.command == "compare":
        rows = compare(args.before, args.after, split=args.split)
        for rule, row in sorted(rows.items()):
            print(f"{rule}: {row}")
        total = {key: sum(row[key] for row in rows.values()) for key in next(iter(rows.values()), {})}
        print(f"all: {total}")
        return
    if args.command == "sample":
        for source, data_dir in _runs(args.runs).items():
            pairs = review_pairs(data_dir)
            picked = (uniform(pairs, args.random, seed=args.seed) if args.random
                      else stratified(pairs, per_rule=args.per_rule, seed=args.seed))
            print(f"# {source}: {len(pairs)} pairs, {len(picked)} sampled", file=sys.stderr)
            for n, pair in enumerate(picked, 1):
                print(f"[{n}] " + json.dumps({"run": source, **{k: pair[k] for k in ("rule", "node", "candidate", "session")}}))
                if args.show:
                    print("\n".join(show(data_dir, pair)))


if __name__ == "__main__":
    main()
