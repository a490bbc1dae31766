"""Identity chains benchmark: does the graph's grouping of names depend on the order sessions
commit in, and what does the grouping rule cost in precision/recall on real names?

    python bench/bench_chains.py [--real bench/data/identity_real_pairs.jsonl] [--orders 4] [--splits tuning,held-out]

For each split of the real labelled pairs (bench/data/identity_real_pairs.jsonl, labelled from real
coding-agent sessions; see bench/RESULTS.md "Identity resolution"), every name of the split (both
ends of every pair, per type) is committed as a one-node session through the real path — the
worker's identity resolver (``worker.knowledge.identity_resolver``) and
``pipelines.extract.commit.commit_session`` with merges recorded — into a fresh SQLite graph, in
``--orders`` shuffled orders (seeded). Each name ends up in the node its session's claim is on.
Reported per split: pairwise precision and recall of "same node" against the labels (mean over the
orders), and ``order_dependent`` — the labelled pairs whose same/different outcome differs between
orders (0 when grouping does not depend on order) and how many of them have a bare method name or
an acronym on one side (the rules that let one short name stand for several longer ones: README
"Several workers", *Short names*), with the number of distinct groupings seen.
Cross-type pairs are left out (never merged). Run it on two commits to compare rules.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.extract.commit import commit_session  # noqa: E402
from pipelines.extract.model import ExtractionFailure, UnitTurn, WorkUnit, validate_extraction  # noqa: E402
from pipelines.extract.reduce import reduce_session  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import Node  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.knowledge import identity_resolver  # noqa: E402

REAL = Path(__file__).resolve().parent / "data" / "identity_real_pairs.jsonl"


def split_names(rows: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], list[tuple[tuple[str, str], tuple[str, str], bool]]]:
    """The (type, name) of every name in ``rows`` and the labelled pairs among them."""
    names: dict[tuple[str, str], None] = {}
    pairs = []
    for row in rows:
        if row["rule"] == "cross-type":
            continue
        one, two = (row["type"], row["existing"]["name"]), (row["type"], row["incoming"]["name"])
        names.update(dict.fromkeys((one, two)))
        pairs.append((one, two, bool(row["same"])))
    return list(names), pairs


def commit_all(path: Path, names: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Commit each name as a session of its own, in the order given; the node each name ended in."""
    db = Database(path)
    unit = DatabaseUnitOfWork(db)
    resolver = identity_resolver(db)
    types = sorted({t for t, _ in names})
    sessions: dict[str, tuple[str, str]] = {}
    try:
        for number, (node_type, name) in enumerate(names):
            sid = f"s{number:05d}"
            work = WorkUnit(f"{sid}:chunk:0", sid, 0, (UnitTurn(1, f"{sid}-m1", name),), "h")
            raw = {"summary": "", "nodes": [{"id": "n", "type": node_type, "name": name, "evidence": [{"turn": 1, "quote": name}]}], "edges": []}
            try:
                reduced = reduce_session(sid, [validate_extraction(raw, work, semantic_types=types)])
            except ExtractionFailure:
                continue
            if not reduced.nodes:
                continue
            unit.graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), Node(f"memory:{sid}-m1", "MEMORY", "m")])
            stats = commit_session(reduced, unit=unit, graph_index=None, on_commit=lambda: None, queue_append=len,
                                   matcher=resolver, merges=unit.merges)
            if stats.nodes_removed or stats.nodes_folded:
                resolver.reset()
            sessions[f"session:{sid}"] = (node_type, name)
        rows = db.query("SELECT DISTINCT anchor, node_id FROM node_claims WHERE anchor LIKE 'session:%'")
        return {sessions[r[0]]: r[1] for r in rows if r[0] in sessions}
    finally:
        db.close()


def short_name(name: tuple[str, str]) -> bool:
    """A name the hub rules let stand for longer ones: a bare METHOD name (``save`` for
    ``user.save``) or an all-caps acronym."""
    node_type, text = name
    return (node_type == "METHOD" and "." not in text) or (text.isupper() and text.isalpha())


def score(node_of: dict[tuple[str, str], str], pairs: list[tuple[tuple[str, str], tuple[str, str], bool]]) -> dict[str, Any]:
    tp = fp = fn = 0
    outcome = {}
    for one, two, same in pairs:
        if one not in node_of or two not in node_of:
            continue
        merged = node_of[one] == node_of[two]
        outcome[(one, two)] = merged
        tp += merged and same
        fp += merged and not same
        fn += same and not merged
    return {"precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / (tp + fn) if tp + fn else 1.0,
            "tp": tp, "fp": fp, "fn": fn, "outcome": outcome}


def run_split(rows: list[dict[str, Any]], *, orders: int, seed: int, work: Path) -> dict[str, Any]:
    names, pairs = split_names(rows)
    results = []
    groupings = set()
    started = time.perf_counter()
    for order in range(orders):
        shuffled = list(names)
        random.Random(seed + order).shuffle(shuffled)
        node_of = commit_all(work / f"order{order}.sqlite3", shuffled)
        results.append(score(node_of, pairs))
        groups: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for name, node in node_of.items():
            groups[node].add(name)
        groupings.add(frozenset(frozenset(g) for g in groups.values()))
    keys = set.intersection(*(set(r["outcome"]) for r in results))
    dependent = sorted(k for k in keys if len({r["outcome"][k] for r in results}) > 1)
    return {
        "names": len(names), "pairs": len(keys), "positives": sum(1 for a, b, same in pairs if same and (a, b) in keys),
        "precision": sum(r["precision"] for r in results) / orders, "recall": sum(r["recall"] for r in results) / orders,
        "fp": [r["fp"] for r in results], "fn": [r["fn"] for r in results],
        "order_dependent": len(dependent), "order_dependent_short": sum(1 for a, b in dependent if short_name(a) or short_name(b)),
        "distinct_groupings": len(groupings),
        "seconds": round(time.perf_counter() - started, 1), "dependent_examples": [f"{a[1]!r} / {b[1]!r}" for a, b in sorted(dependent, key=lambda pair: short_name(pair[0]) or short_name(pair[1]))[:8]],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a summary and return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, default=REAL)
    parser.add_argument("--orders", type=int, default=4)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--splits", default="tuning,held-out,fresh,aider,sweagent")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    rows = [json.loads(line) for line in args.real.read_text(encoding="utf-8").splitlines() if line.strip()]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for split in args.splits.split(","):
            work = Path(tmp) / split
            work.mkdir()
            r = results[split] = run_split([row for row in rows if row["split"] == split], orders=args.orders, seed=args.seed, work=work)
            print(f"{split:9} names={r['names']} pairs={r['pairs']} positives={r['positives']} precision={r['precision']:.3f} "
                  f"recall={r['recall']:.3f} fp/order={r['fp']} fn/order={r['fn']} order_dependent_pairs={r['order_dependent']} (with a bare method name or an acronym: {r['order_dependent_short']}) "
                  f"distinct_groupings={r['distinct_groupings']}/{args.orders} ({r['seconds']} s)")
            for example in r["dependent_examples"]:
                print(f"    order-dependent: {example}")
    return results


if __name__ == "__main__":
    main()
