"""Prose-name pairs of one shape from a real run, for labelling: a name beside the same name with
words more (``Joey`` / ``Joey Tribbiani``, ``Global Root`` / ``DigiCert Global Root``) — the shape
the resolver's name rules cannot decide (bench/RESULTS.md, issue 11, fifth and sixth rounds).

    python bench/identity_extensions.py friends-tune=DATA_DIR [more SOURCE=DATA_DIR] --out pairs.jsonl \\
        [--sample 90 60] [--seed 20261130] [--quotes 3]

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
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.identity import prose_key  # noqa: E402
from pipelines.vocabulary import ANCHOR_LABELS  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="SOURCE=DATA_DIR, e.g. friends-tune=/tmp/friends-tune")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quotes", type=int, default=3)
    parser.add_argument("--sample", type=int, nargs=2, metavar=("TUNING", "FRESH"), help="draw this many pairs of each part")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args(argv)
    pairs = []
    for run in args.runs:
        source, _, data_dir = run.partition("=")
        pairs += collect(Path(data_dir), source=source, quotes=args.quotes)
    if args.sample:
        pairs = sample(pairs, per_part={TUNING_PART: args.sample[0], UNTOUCHED_PART: args.sample[1]}, seed=args.seed)
    with args.out.open("w", encoding="utf-8") as out:
        for pair in pairs:
            out.write(json.dumps(pair, ensure_ascii=False) + "\n")
    print(f"{len(pairs)} pairs → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
