"""Would a learned combination of every evidence kind separate a coding node's noise? (issue 11, tenth round)

Nine rounds measured kinds of evidence one at a time (name shape, turn role, repetition, turn
salience, where in the agent's message, the task, imports) and found none that separates "a class
or method said once" that is noise from one that is useful. This module asks whether all of them
*together*, weighed by a model fitted to the labels, do better than the fifth round's hand-made
evidence score — before anyone builds such a model into the extractor.

Material: every labelled coding node (``bench/data/extract_node_labels.jsonl``; sources ``swe``,
``aider``, ``sweagent``) that the current heuristic extractor still makes, of every split already
printed — never :data:`HELD_OUT` (the tenth round's untouched sample). Features, per session node
(the chunks that keep it, :func:`bench.extract_evidence.session_chunks`): its type, distinct turns,
chunks, where it is said (user turn, agent prose, command line, edit, edit context, quoted code,
tool output), the busiest and quietest turn's name count, a library import, and the name's shape
(``self.``, dotted, CamelCase, underscore, length, lower case). Files, URLs and issues are always
kept (as by the evidence lever); the models score the rest.

Figures: five-fold cross-validation grouped by session (a session's nodes are never both fitted
and scored), logistic regression and gradient-boosted trees (scikit-learn), and the hand score —
precision and recall of the useful nodes at each threshold.

    pip install -e '.[bench]'
    python -m bench.extract_learned --data /tmp/q3/data2
    python -m bench.extract_learned --data /tmp/q3/data2 --held-out   # after HELD_OUT is labelled

``--held-out`` fits the operating point chosen from the cross-validation (:data:`FROZEN`: boosted
trees, threshold 0.85 — the first to reach 0.9 precision there; committed before any label of
:data:`HELD_OUT` existed) on all the material, and scores :data:`HELD_OUT`'s labelled sample once:
whether the cross-validated estimate holds on sessions nobody tuned on.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_extract_quality as quality  # noqa: E402
from bench.extract_evidence import NameEvidence, session_chunks  # noqa: E402
from config import Settings  # noqa: E402

HELD_OUT = "untouched10"
ALWAYS_KEPT = ("FILE", "URL", "ISSUE")
KINDS = ("user", "prose", "command", "edit", "edit-context", "quote", "tool")
TYPES = ("METHOD", "CLASS", "TEST", "CONCEPT", "PERSON")
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9)
FOLDS = 5
FROZEN = ("gradient-boosted trees", 0.85)


def labelled_nodes(data: Path, settings: Settings, *, held_out: bool = False) -> list[dict[str, Any]]:
    """Every labelled coding node the current extractor makes outside :data:`HELD_OUT` (or, with
    ``held_out``, in it), with its session-level evidence."""
    sessions = quality.labelled_coding_sessions(data)
    labels: dict[str, list[dict[str, Any]]] = {}
    for row in quality.read_jsonl(quality.NODE_LABELS):
        if row["source"] in quality.LABELLED_CODING_FILES and (row.get("split") == HELD_OUT) == held_out:
            labels.setdefault(row["session"], []).append(row)
    found = []
    for sid, rows in sorted(labels.items()):
        chunks = session_chunks(sessions[sid], settings)
        for row in rows:
            keeping = [(kept[row["node"]], seen[row["node"]]) for kept, seen in chunks if row["node"] in kept and row["node"] in seen]
            if keeping:
                found.append({"session": sid, "node": row["node"], "useful": bool(row["useful"]), "source": row["source"],
                              **_evidence(keeping)})
    return found


def _evidence(keeping: Sequence[tuple[str, NameEvidence]]) -> dict[str, Any]:
    evidence = [e for _, e in keeping]
    return {
        "type": keeping[0][0], "turns": sum(e.turns for e in evidence), "chunks": len(evidence),
        "kinds": sorted(set().union(*(e.kinds for e in evidence))),
        "salience_max": max(e.salience for e in evidence), "salience_min": min(e.salience for e in evidence),
        "library": any(e.library_import for e in evidence),
    }


def features(node: dict[str, Any]) -> list[float]:
    """A node's feature vector (see the module docstring)."""
    name = node["node"].partition(":")[2]
    return [
        min(node["turns"], 6), node["turns"] == 1, node["chunks"], node["salience_max"] ** 0.5, node["salience_min"] ** 0.5,
        node["library"], *(kind in node["kinds"] for kind in KINDS), *(node["type"] == t for t in TYPES),
        name.startswith("self."), "." in name, bool(re.search(r"[a-z][A-Z]", name)), "_" in name, len(name) / 20, name.islower(),
    ]


def hand_score(node: dict[str, Any]) -> float:
    """The fifth round's evidence (``bench_extract_quality.evidence``), scaled to 0..1: distinct
    turns (at most 3), +1 said by the person, +1 shown in tool output too."""
    return (min(node["turns"], 3) + ("user" in node["kinds"]) + ("tool" in node["kinds"])) / 5


def cross_validated(nodes: Sequence[dict[str, Any]], make: Callable[[], Any]) -> list[float]:
    """Each node's score from a model fitted on the other folds' sessions."""
    import numpy as np
    from sklearn.model_selection import GroupKFold

    x = np.array([features(n) for n in nodes], dtype=float)
    y = np.array([n["useful"] for n in nodes])
    groups = [n["session"] for n in nodes]
    scores = np.zeros(len(nodes))
    for fit, score in GroupKFold(FOLDS).split(x, y, groups):
        scores[score] = make().fit(x[fit], y[fit]).predict_proba(x[score])[:, 1]
    return scores.tolist()


def curve(nodes: Sequence[dict[str, Any]], scores: Sequence[float], thresholds: Sequence[float]) -> list[dict[str, Any]]:
    """Precision and recall of the useful nodes when a scored node needs ``score >= threshold``."""
    useful = sum(n["useful"] for n in nodes)
    rows = []
    for threshold in (0.0, *thresholds):
        kept = [n["useful"] for n, s in zip(nodes, scores) if n["type"] in ALWAYS_KEPT or s >= threshold]
        rows.append({"threshold": threshold, "kept": len(kept), "precision": round(sum(kept) / len(kept), 3),
                     "recall": round(sum(kept) / useful, 3), "noise_removed": len(nodes) - useful - (len(kept) - sum(kept)),
                     "useful_lost": useful - sum(kept)})
    return rows


def held_out_figures(material: Sequence[dict[str, Any]], held_out: Sequence[dict[str, Any]], make: Callable[[], Any]) -> list[dict[str, Any]]:
    """:data:`FROZEN`'s model fitted on all ``material``, scored on ``held_out``, per source."""
    import numpy as np

    model = make().fit(np.array([features(n) for n in material], dtype=float), np.array([n["useful"] for n in material]))
    rows = []
    for source in sorted({n["source"] for n in held_out}):
        mine = [n for n in held_out if n["source"] == source]
        scores = model.predict_proba(np.array([features(n) for n in mine], dtype=float))[:, 1].tolist()
        rows += [{"split": HELD_OUT, "source": source, **row} for row in curve(mine, scores, (FROZEN[1],))]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="directory of converted <source>.<split>.jsonl")
    parser.add_argument("--held-out", action="store_true", help=f"score {HELD_OUT} with the frozen operating point (once)")
    args = parser.parse_args(argv)
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    models = {
        "logistic regression": lambda: LogisticRegression(max_iter=2000),
        "gradient-boosted trees": lambda: GradientBoostingClassifier(max_depth=2, n_estimators=150, learning_rate=0.05, random_state=0),
    }
    nodes = labelled_nodes(args.data, Settings())
    if args.held_out:
        for row in held_out_figures(nodes, labelled_nodes(args.data, Settings(), held_out=True), models[FROZEN[0]]):
            print(json.dumps(row))
        return
    print(json.dumps({"labelled": len(nodes), "useful": sum(n["useful"] for n in nodes),
                      "scored": sum(n["type"] not in ALWAYS_KEPT for n in nodes)}))
    for name, make in models.items():
        for row in curve(nodes, cross_validated(nodes, make), THRESHOLDS):
            print(json.dumps({"score": name, **row}))
    for row in curve(nodes, [hand_score(n) for n in nodes], (0.4, 0.6, 0.8, 1.0)):
        print(json.dumps({"score": "hand (fifth round)", **row}))


if __name__ == "__main__":
    main()
