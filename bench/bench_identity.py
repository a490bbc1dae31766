"""Identity-resolution benchmark: precision/recall of the resolver on a labelled merge set, against
the exact-match baseline (same type, case-insensitive equal name or alias), plus resolver speed.

    /work/venv/bin/python bench/bench_identity.py [--pairs bench/data/merge_pairs.jsonl] [--scale 20000]

Each line of the merge set is ``{"existing": {type, name, aliases}, "incoming": {type, name},
"same": bool, "kind": "…"}`` — pairs from realistic agent sessions: spelling variants that name the
same thing, and hard negatives (``GraphStore``/``GraphService``, ``#123``/``#124``, ``get_node``/
``get_nodes``, the same name under another type). A pair counts as predicted-same when the
resolver *links* the incoming node to the existing one; ``candidate`` (reported for review) counts
as not merged. Two settings: *isolated* (the index holds only the pair's existing node) and
*crowd* (it holds every existing node of the set, so ambiguity and wrong targets can show up).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.identity import CANDIDATE, LINK, AliasIndex, NodeRef, Verdict, fold, resolve  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "merge_pairs.jsonl"


def load_pairs(path: Path) -> list[dict[str, Any]]:
    """The labelled pairs, each with ``existing``/``incoming`` as :class:`NodeRef`."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        old, new = row["existing"], row["incoming"]
        row["existing_ref"] = NodeRef(f"{old['type']}:{old['name']}", old["type"], old["name"], tuple(old.get("aliases", ())))
        row["incoming_ref"] = NodeRef(f"{new['type']}:{new['name']}#incoming", new["type"], new["name"], tuple(new.get("aliases", ())))
        pairs.append(row)
    return pairs


def baseline(node: NodeRef, index: AliasIndex) -> Verdict:
    """The exact matcher identity resolution replaces: same type and a case-insensitive equal
    name or alias (lowest id wins)."""
    wanted = {f.casefold() for f in (node.name, *node.aliases)}
    for other in sorted(index.nodes.values(), key=lambda n: n.id):
        if other.type == node.type and wanted & {f.casefold() for f in (other.name, *other.aliases)}:
            return Verdict(node.id, LINK, other.id, "exact", 1.0)
    return Verdict(node.id, "create")


def score(pairs: Sequence[dict[str, Any]], decide: Callable[[NodeRef, AliasIndex], Verdict], *, crowd: bool) -> dict[str, Any]:
    """Precision/recall of ``decide`` over the pairs."""
    everyone = [p["existing_ref"] for p in pairs]  # one id may come with different aliases: build() unions them
    counts: Counter[str] = Counter()
    misses: list[str] = []
    for pair in pairs:
        incoming = pair["incoming_ref"]
        if crowd:
            # Distractors: every other existing node, except those spelled exactly like the incoming
            # one (linking to such a node would be right, and the pair's label could not say so).
            others = [
                n for n in everyone
                if n.id == pair["existing_ref"].id or not (n.type == incoming.type and fold(n.name) == fold(incoming.name))
            ]
            index = AliasIndex.build(others)
        else:
            index = AliasIndex.build([pair["existing_ref"]])
        verdict = decide(incoming, index)
        linked = verdict.action == LINK and verdict.target == pair["existing_ref"].id
        wrong_target = verdict.action == LINK and not linked
        if pair["same"]:
            counts["tp" if linked else "fn"] += 1
            if not linked and verdict.action == CANDIDATE and pair["existing_ref"].id in {c.node_id for c in verdict.candidates}:
                counts["fn_reported_as_candidate"] += 1
            if not linked:
                misses.append(f"miss {pair['kind']}: {pair['incoming']['name']!r} → {pair['existing']['name']!r} ({verdict.action} {verdict.rule})")
        elif verdict.action == CANDIDATE and pair["existing_ref"].id in {c.node_id for c in verdict.candidates}:
            counts["tn"] += 1
            counts["tn_reported_as_candidate"] += 1  # noise in the review list
        elif linked:
            counts["fp"] += 1
            misses.append(f"false merge {pair['kind']}: {pair['incoming']['name']!r} → {pair['existing']['name']!r} ({verdict.rule})")
        else:
            counts["tn"] += 1
        if wrong_target:
            counts["wrong_target"] += 1
            if pair["same"] is False:
                counts["fp"] += 1
                misses.append(f"linked elsewhere {pair['kind']}: {pair['incoming']['name']!r} → {verdict.target!r}")
        if pair["kind"] == "cross-type" and verdict.action == LINK:
            counts["cross_type_merged"] += 1
    tp, fp, fn = counts["tp"], counts["fp"], counts["fn"]
    return {
        "pairs": len(pairs),
        "positives": tp + fn,
        "precision": round(tp / (tp + fp), 3) if tp + fp else 1.0,
        "recall": round(tp / (tp + fn), 3) if tp + fn else 1.0,
        "recall_with_review": round((tp + counts["fn_reported_as_candidate"]) / (tp + fn), 3) if tp + fn else 1.0,
        # Of the pairs that are *not* the same, the share shown to a reviewer anyway.
        "review_noise": round(counts["tn_reported_as_candidate"] / counts["tn"], 3) if counts["tn"] else 0.0,
        **{k: counts[k] for k in ("tp", "fp", "fn", "tn", "wrong_target", "cross_type_merged", "fn_reported_as_candidate", "tn_reported_as_candidate")},
        "errors": misses,
    }


def speed(size: int, *, seed: int = 11) -> dict[str, Any]:
    """Index ``size`` synthetic CamelCase class names and resolve 1,000 variants against them."""
    rng = random.Random(seed)
    vocab = [w.capitalize() for w in (
        "graph store queue edge lazy session memory chunk drain index run state digest node cycle worker "
        "embedding chroma summary reduce map commit extract token budget lease heartbeat metric panel client"
    ).split()]
    names = sorted({"".join(rng.sample(vocab, rng.randint(2, 4))) for _ in range(size * 2)})[:size]
    t0 = time.perf_counter()
    index = AliasIndex.build(NodeRef(f"CLASS:{n}", "CLASS", n) for n in names)
    built = time.perf_counter() - t0
    probes = [rng.choice(names) for _ in range(1_000)]
    t0 = time.perf_counter()
    links = sum(resolve(NodeRef(f"CLASS:{p} x", "CLASS", " ".join(fold(w) for w in _split(p))), index).action == LINK for p in probes)
    elapsed = time.perf_counter() - t0
    return {"index_nodes": len(names), "index_build_s": round(built, 3), "resolves": len(probes), "ms_per_resolve": round(elapsed / len(probes) * 1000, 3), "linked": links}


def _split(name: str) -> list[str]:
    out, word = [], ""
    for ch in name:
        if ch.isupper() and word:
            out.append(word)
            word = ""
        word += ch
    return [*out, word]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a summary and return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, default=DATA)
    parser.add_argument("--scale", type=int, default=20_000, help="synthetic index size for the speed figure")
    args = parser.parse_args(argv)
    pairs = load_pairs(args.pairs)
    results: dict[str, Any] = {"pairs_file": str(args.pairs)}
    for setting, crowd in (("isolated", False), ("crowd", True)):
        results[setting] = {
            "resolver": score(pairs, lambda n, i: resolve(n, i), crowd=crowd),
            "baseline": score(pairs, baseline, crowd=crowd),
        }
    results["speed"] = speed(args.scale)
    for setting in ("isolated", "crowd"):
        for name in ("resolver", "baseline"):
            r = results[setting][name]
            print(
                f"{setting:8} {name:8} pairs={r['pairs']} positives={r['positives']} precision={r['precision']:.3f} "
                f"recall={r['recall']:.3f} recall_with_review={r['recall_with_review']:.3f} review_noise={r['review_noise']:.3f} "
                f"tp={r['tp']} fp={r['fp']} fn={r['fn']} cross_type_merged={r['cross_type_merged']}"
            )
        base, ours = results[setting]["baseline"]["recall"], results[setting]["resolver"]["recall"]
        print(f"{setting:8} recall ratio resolver/baseline = {ours / base if base else float('inf'):.2f}x")
    for setting in ("isolated", "crowd"):
        for error in results[setting]["resolver"]["errors"]:
            print(f"  {setting}: {error}")
    s = results["speed"]
    print(f"speed: {s['resolves']} resolves against {s['index_nodes']} nodes: {s['ms_per_resolve']} ms each (index build {s['index_build_s']} s)")
    return results


if __name__ == "__main__":
    main()
