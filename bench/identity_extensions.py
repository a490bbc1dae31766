"""Prose-name pairs of one shape from a real run, for labelling: a name beside the same name with
words more (``Joey`` / ``Joey Tribbiani``, ``Global Root`` / ``DigiCert Global Root``) — the shape
the resolver's name rules cannot decide (bench/RESULTS.md, issue 11, fifth and sixth rounds).

    python bench/identity_extensions.py friends-tune=DATA_DIR [more SOURCE=DATA_DIR] --out pairs.jsonl \\
        [--sample 90 60] [--seed 20261130] [--quotes 3]
    python bench/identity_extensions.py friends-tune=DIR … --signals extension-tuning

``DATA_DIR`` is a rem-cycle data dir after ``rem-cycle import`` + ``rem-cycle --once`` (until every
session is digested). Every pair of same-type knowledge nodes where one name's words
(:func:`pipelines.identity.prose_key`) are a contiguous, shorter run of the other's and either name
is prose is written out, with up to ``--quotes`` evidence quotes of each node (what the labeller
reads besides the turns), the part it belongs to (:func:`part_of`, fixed by a hash of the short
name, so every pair of one short name is in one part) — and no ``same``: add it by hand
(bench/data/identity_real_pairs.jsonl, ``"round": 6``). Read-only on the data dir.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.identity_pairs import write_pairs  # noqa: E402
from pipelines.identity import prose_key  # noqa: E402
from pipelines.vocabulary import ANCHOR_LABELS  # noqa: E402

LABELS = Path(__file__).resolve().parent / "data" / "identity_real_pairs.jsonl"
# The label split names of the two parts (bench/bench_identity.py reads them).
TUNING_PART = "extension-tuning"
UNTOUCHED_PART = "extension-fresh"


def part_of(node_type: str, short: str) -> str:
    """The part a pair belongs to, by SHA-256 of ``round6|<type>|<short name's words>``: about a
    third untouched. Fixed before any pair was labelled."""
    digest = hashlib.sha256(f"round6|{node_type}|{prose_key(node_type, short)}".encode()).digest()
    return UNTOUCHED_PART if digest[0] % 3 == 0 else TUNING_PART


def sub_run(short: list[str], long: list[str]) -> bool:
    """Whether ``short`` is a contiguous, shorter run of ``long``."""
    return 0 < len(short) < len(long) and any(long[i : i + len(short)] == short for i in range(len(long) - len(short) + 1))


def collect(data_dir: Path, *, source: str, quotes: int = 3) -> list[dict[str, Any]]:
    """The extension pairs of one run (see the module docstring)."""
    db = sqlite3.connect(f"file:{data_dir / 'graph.sqlite3'}?mode=ro", uri=True)
    anchors = sorted(ANCHOR_LABELS)
    nodes = {
        i: (label, name, created)
        for i, label, name, created in db.execute(
            f"SELECT id, label, name, created_at FROM nodes WHERE label NOT IN ({','.join('?' * len(anchors))})", anchors
        )
    }
    by_word: dict[tuple[str, str], set[str]] = defaultdict(set)
    keys = {i: prose_key(label, name).split() for i, (label, name, _) in nodes.items()}
    for i, (label, _, _) in nodes.items():
        for word in keys[i]:
            by_word[(label, word)].add(i)
    pairs = []
    for short_id, (label, short, created) in sorted(nodes.items()):
        words = keys[short_id]
        if not words:
            continue
        holders = set.intersection(*(by_word[(label, w)] for w in words))
        for long_id in sorted(holders - {short_id}):
            long = nodes[long_id][1]
            if not (" " in short or " " in long) or not sub_run(words, keys[long_id]):
                continue
            first, second = sorted(((created, short_id), (nodes[long_id][2], long_id)))
            pairs.append({
                "split": part_of(label, short), "type": label, "source": source,
                "existing": {"name": nodes[first[1]][1], "aliases": []}, "incoming": {"name": nodes[second[1]][1], "aliases": []},
                "short": short, "long": long,
                "quotes": {name: _quotes(db, node_id, quotes) for name, node_id in ((short, short_id), (long, long_id))},
            })
    db.close()
    return pairs


def _quotes(db: sqlite3.Connection, node_id: str, limit: int) -> list[str]:
    """The turns the node was read from (speaker and text around its evidence), first ones first."""
    rows = db.execute(
        "SELECT p.anchor, p.evidence, t.role, t.text FROM node_points p LEFT JOIN recall_turns t ON t.memory_id = p.memory_id"
        " WHERE p.node_id = ? ORDER BY p.observed_at, p.memory_id LIMIT ?",
        (node_id, limit),
    )
    out = []
    for anchor, evidence, role, text in rows:
        at = max(0, (text or "").find(evidence) - 100)
        out.append(f"{anchor.removeprefix('session:')} {role}: {(text or evidence)[at : at + 240]}")
    return out


def sample(pairs: list[dict[str, Any]], *, per_part: dict[str, int], seed: int) -> list[dict[str, Any]]:
    """A seeded random sample of each part's pairs, one per (type, short, long) across runs."""
    unique: dict[tuple[str, str, str], dict[str, Any]] = {}
    for pair in pairs:
        unique.setdefault((pair["type"], pair["short"], pair["long"]), pair)
    rng = random.Random(seed)
    chosen = []
    for part, count in per_part.items():
        mine = sorted((p for p in unique.values() if p["split"] == part), key=lambda p: (p["source"], p["type"], p["short"], p["long"]))
        chosen += rng.sample(mine, min(count, len(mine)))
    return chosen


def signals(runs: dict[str, Path], labels: list[dict[str, Any]], *, part: str) -> list[tuple[str, int, int]]:
    """What each candidate context would do on one part's labelled pairs, read from the graph the
    pair's run left: (context, pairs it would link, same among them). The contexts: the longer name
    the only node extending the shorter; the two grounded in one session; the shorter name never
    said on its own in its turns (only inside the longer)."""
    rows = [r for r in labels if r.get("round") == 6 and r["split"] == part and r.get("run") in runs]
    graphs: dict[str, tuple[sqlite3.Connection, dict[tuple[str, str], str], dict[str, set[str]]]] = {}
    for row in rows:
        if row["run"] not in graphs:
            db = sqlite3.connect(f"file:{runs[row['run']] / 'graph.sqlite3'}?mode=ro", uri=True)
            anchors = sorted(ANCHOR_LABELS)
            named = {(label, name): i for i, label, name in db.execute(
                f"SELECT id, label, name FROM nodes WHERE label NOT IN ({','.join('?' * len(anchors))})", anchors)}
            grounded: dict[str, set[str]] = defaultdict(set)
            for node_id, anchor in db.execute("SELECT node_id, anchor FROM node_points"):
                grounded[node_id].add(anchor)
            graphs[row["run"]] = (db, named, grounded)
        db, named, grounded = graphs[row["run"]]
        kind = row["type"]
        short, long = sorted((row["existing"]["name"], row["incoming"]["name"]), key=lambda n: len(prose_key(kind, n).split()))
        words = prose_key(kind, short).split()
        row["extensions"] = sum(1 for (label, name) in named if label == kind and sub_run(words, prose_key(kind, name).split()))
        row["together"] = bool(grounded[named[(kind, short)]] & grounded[named[(kind, long)]])
        turns = [t for (t,) in db.execute("SELECT DISTINCT t.text FROM node_points p JOIN recall_turns t ON t.memory_id = p.memory_id"
                                          " WHERE p.node_id = ?", (named[(kind, short)],))]
        inside = [(m.start(), m.end()) for t in turns for m in re.finditer(re.escape(long), t, re.IGNORECASE)]
        row["alone"] = sum(1 for t in turns for m in re.finditer(rf"(?<!\w){re.escape(short)}(?!\w)", t, re.IGNORECASE)
                           if not any(a <= m.start() and m.end() <= b for a, b in inside))
        row["short_words"] = len(short.split())
    for db, _, _ in graphs.values():
        db.close()
    contexts = {
        "the longer name is the only node extending the shorter": lambda r: r["extensions"] == 1,
        "the two are said in one session": lambda r: r["together"],
        "both (the extension rule)": lambda r: r["extensions"] == 1 and r["together"],
        "the shorter has >= 2 words, and the only extension": lambda r: r["short_words"] >= 2 and r["extensions"] == 1,
        "... and said in one session": lambda r: r["short_words"] >= 2 and r["extensions"] == 1 and r["together"],
        "at most two extensions, said in one session": lambda r: r["extensions"] <= 2 and r["together"],
        "the shorter name is never said on its own": lambda r: r["alone"] == 0,
    }
    return [(name, len(hit := [r for r in rows if rule(r)]), sum(r["same"] for r in hit)) for name, rule in contexts.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="SOURCE=DATA_DIR, e.g. friends-tune=/tmp/friends-tune")
    parser.add_argument("--out", type=Path, help="where the pairs go (required unless --signals)")
    parser.add_argument("--quotes", type=int, default=3)
    parser.add_argument("--sample", type=int, nargs=2, metavar=("TUNING", "FRESH"), help="draw this many pairs of each part")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--signals", metavar="PART", help="instead: what each context does on this part's labelled pairs")
    args = parser.parse_args(argv)
    if args.signals:
        runs = {source: Path(path) for source, _, path in (r.partition("=") for r in args.runs)}
        labels = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
        positives = sum(r["same"] for r in labels if r.get("round") == 6 and r["split"] == args.signals)
        for name, hits, same in signals(runs, labels, part=args.signals):
            print(f"{name:56} pairs={hits:3} same={same:3} precision={same / hits if hits else 1:.3f} recall={same / positives:.3f}")
        return 0
    if args.out is None:
        parser.error("--out is required")
    pairs = []
    for run in args.runs:
        source, _, data_dir = run.partition("=")
        pairs += collect(Path(data_dir), source=source, quotes=args.quotes)
    if args.sample:
        pairs = sample(pairs, per_part={TUNING_PART: args.sample[0], UNTOUCHED_PART: args.sample[1]}, seed=args.seed)
    write_pairs(pairs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
