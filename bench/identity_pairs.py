"""Identity pairs from a real run, for labelling: what the resolver linked, what it put on the
review list, and a sample of same-type pairs it left apart although they share words (recall).

    python bench/identity_pairs.py DATA_DIR --split held-out --out pairs.jsonl [--seed 11]

``DATA_DIR`` is a rem-cycle data dir after ``rem-cycle import`` + ``rem-cycle --once`` on the
sessions of one split (bench/convert_transcripts.py). Each output line is
``{"split", "type", "existing": {name, aliases}, "incoming": {name, aliases}, "source", "rule",
"score"}`` — add ``"same": true|false`` by hand to make it a labelled pair
(bench/data/identity_real_pairs.jsonl). Read-only on the data dir.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.identity import words  # noqa: E402

SEMANTIC = ("CLASS", "METHOD", "TEST", "FILE", "ISSUE", "CONCEPT")
CANDIDATES_PER_RULE = 40
UNLINKED_SAME_WORDS = 60
UNLINKED_OVERLAP = 30


def _aliases(properties: str) -> list[str]:
    value = json.loads(properties or "{}").get("aliases", [])
    return [a for a in value if isinstance(a, str)] if isinstance(value, list) else []


def _loose_path(name: str) -> str:
    for prefix in ("a/", "b/", "./"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def collect(data_dir: Path, *, split: str, seed: int = 11) -> list[dict[str, Any]]:
    """The pairs to label from one run (see the module docstring)."""
    rng = random.Random(seed)
    db = sqlite3.connect(f"file:{data_dir / 'graph.sqlite3'}?mode=ro", uri=True)
    nodes = {
        i: (label, name, _aliases(props))
        for i, label, name, props in db.execute(
            f"SELECT id, label, name, properties FROM nodes WHERE label IN ({','.join('?' * len(SEMANTIC))})", SEMANTIC
        )
    }
    added: dict[str, set[str]] = defaultdict(set)
    merges = []
    for merged, into, rule, score, restore in db.execute("SELECT merged_id, into_id, rule, score, restore FROM merges"):
        data = json.loads(restore)
        added[into].update(data.get("added_aliases", []))
        node = data.get("node", {})
        merges.append((merged, into, rule, score, node))

    def ref(node_id: str) -> dict[str, Any]:
        label, name, aliases = nodes[node_id]
        return {"name": name, "aliases": sorted(set(aliases) - added[node_id] - {name})}

    pairs: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()

    def emit(kind: str, incoming: dict[str, Any], existing_id: str, source: str, rule: str, score: float) -> None:
        key = (f"{kind}:{incoming['name']}", existing_id)
        if key in seen or existing_id not in nodes or incoming["name"] == nodes[existing_id][1]:
            return
        seen.add(key)
        pairs.append({"split": split, "type": kind, "existing": ref(existing_id), "incoming": incoming,
                      "source": source, "rule": rule, "score": score})

    for merged, into, rule, score, node in merges:
        name = node.get("name") or merged.partition(":")[2]
        aliases = node.get("properties", {}).get("aliases", []) if isinstance(node.get("properties"), dict) else []
        emit(merged.partition(":")[0], {"name": name, "aliases": sorted(set(a for a in aliases if isinstance(a, str)) - {name})},
             into, "merge", rule, score)
    by_rule: dict[str, list[tuple[str, str, str, float]]] = defaultdict(list)
    for node_id, other, rule, score in db.execute("SELECT node_id, candidate_id, rule, score FROM identity_candidates"):
        if node_id in nodes and other in nodes:
            by_rule[rule].append((node_id, other, rule, score))
    for rule, rows in sorted(by_rule.items()):
        chosen = rng.sample(rows, min(CANDIDATES_PER_RULE, len(rows)))
        if rule == "file-basename":  # the diff-prefix family: make sure it is represented
            prefixed = [r for r in rows if _loose_path(nodes[r[0]][1]) == _loose_path(nodes[r[1]][1])]
            chosen += rng.sample(prefixed, min(20, len(prefixed)))
        for node_id, other, _, score in chosen:
            emit(nodes[node_id][0], ref(node_id), other, "candidate", rule, score)
    decided = {(a, b) for a, b, *_ in merges} | {(r[0], r[1]) for rows in by_rule.values() for r in rows}
    decided |= {(b, a) for a, b in decided}
    same_words: list[tuple[str, str]] = []
    overlap: list[tuple[str, str]] = []
    groups: dict[tuple[str, frozenset[str]], list[str]] = defaultdict(list)
    paths: dict[str, list[str]] = defaultdict(list)
    by_word: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node_id, (label, name, _) in sorted(nodes.items()):
        found = frozenset(w.rstrip("s") for w in words(name))
        if found:
            groups[(label, found)].append(node_id)
        if label == "FILE":
            paths[_loose_path(name)].append(node_id)
        elif len(found) >= 2:
            for word in found:
                by_word[(label, word)].append(node_id)
    for members in [*groups.values(), *paths.values()]:
        same_words += [p for p in combinations(members[:20], 2) if p not in decided]
    for (label, _), members in by_word.items():
        if 2 <= len(members) <= 30:
            for a, b in combinations(members, 2):
                wa = {w.rstrip("s") for w in words(nodes[a][1])}
                wb = {w.rstrip("s") for w in words(nodes[b][1])}
                if (a, b) not in decided and len(wa & wb) / len(wa | wb) >= 0.5 and wa != wb:
                    overlap.append((a, b))
    for source, rows, count in (("unlinked-same-words", sorted(set(same_words)), UNLINKED_SAME_WORDS),
                                ("unlinked-overlap", sorted(set(overlap)), UNLINKED_OVERLAP)):
        for a, b in rng.sample(rows, min(count, len(rows))):
            emit(nodes[a][0], ref(a), b, source, "", 0.0)
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--split", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    write_pairs(collect(args.data_dir, split=args.split, seed=args.seed), args.out)
    return 0


def write_pairs(pairs: list[dict[str, Any]], path: Path) -> None:
    """Write labelled-pair candidates as JSON lines (the form of ``bench/data/identity_real_pairs.jsonl``)."""
    with path.open("w", encoding="utf-8") as out:
        for pair in pairs:
            out.write(json.dumps(pair, ensure_ascii=False) + "\n")
    print(f"{len(pairs)} pairs → {path}")


if __name__ == "__main__":
    sys.exit(main())
