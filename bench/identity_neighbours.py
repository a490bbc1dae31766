"""Neighbours as evidence for prose identity (issue 11, eighth round): for each labelled extension
pair (a name beside the same name with words more, ``"round": 6`` in
bench/data/identity_real_pairs.jsonl), how alike the two nodes' neighbourhoods are in the graph a
run of the pair's sessions left — and what each neighbourhood context would link on one part.

    python bench/identity_neighbours.py friends-tune=DIR friends-heldout=DIR swe-tune=DIR --part extension-tuning [--sweep] [--pairs]
    python bench/identity_neighbours.py … swe-heldout=DIR --part extension-fresh      # once, after the contexts were frozen

``DIR``: a data dir after ``rem-cycle import`` + ``rem-cycle --once`` until every session is
digested (bench/RESULTS.md, sixth round). A pair's names are found on the nodes the run holds them
on (:func:`bench.bench_identity.node_of_name`: a merged name on the node it went into). The
neighbourhoods of a node: its *edge* neighbours (``RELATES_TO``: said in one turn), its
*co-session* names (every knowledge node grounded in a session it is grounded in) and the
*speakers* of its sessions (turn roles that are person names) — on the whole graph, and *at
meeting* (:func:`at_meeting`: what a commit-time rule could read). Prints, per :data:`FROZEN`
context, what it would link, and how well each feature ranks (AUC). Read-only; only the given
part's labels are read.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_identity import _SPLIT_RUN, load_pairs, node_of_name  # noqa: E402
from bench.identity_extensions import sub_run  # noqa: E402
from pipelines.extract.heuristic import speaker_name  # noqa: E402
from pipelines.identity import prose_key  # noqa: E402
from pipelines.vocabulary import ANCHOR_LABELS  # noqa: E402

LABELS = Path(__file__).resolve().parent / "data" / "identity_real_pairs.jsonl"


@dataclass
class Graph:
    """What one run's graph says about its knowledge nodes' neighbourhoods."""

    where: dict[tuple[str, str], str]
    label: dict[str, str] = field(default_factory=dict)
    words: dict[str, list[str]] = field(default_factory=dict)
    sessions: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    said_in: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    speakers: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    # session → when it began; (node, session) → the nodes it was said in one turn with there
    began: dict[str, str] = field(default_factory=dict)
    edges_in: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))

    def co_session(self, node: str) -> set[str]:
        return set().union(*(self.said_in[s] for s in self.sessions[node])) - {node} if self.sessions[node] else set()

    def speakers_of(self, node: str) -> set[str]:
        return set().union(*(self.speakers[s] for s in self.sessions[node])) if self.sessions[node] else set()

    def extensions(self, node: str) -> set[str]:
        """Knowledge nodes (any type) whose words have ``node``'s words as a shorter contiguous run."""
        words = self.words[node]
        return {n for n, w in self.words.items() if n != node and sub_run(words, w)}


def load(data_dir: Path) -> Graph:
    """A run's graph, read once."""
    db = sqlite3.connect(f"file:{data_dir / 'graph.sqlite3'}?mode=ro", uri=True)
    graph = Graph(where=node_of_name(db))
    anchors = set(ANCHOR_LABELS)
    for node_id, label, name in db.execute("SELECT id, label, name FROM nodes"):
        if label not in anchors:
            graph.label[node_id] = label
            graph.words[node_id] = prose_key(label, name).split()
    for node_id, anchor in db.execute("SELECT DISTINCT node_id, anchor FROM node_points"):
        if node_id in graph.label and anchor.startswith("session:"):
            graph.sessions[node_id].add(anchor)
            graph.said_in[anchor].add(node_id)
    for source, target in db.execute("SELECT source, target FROM edges WHERE relationship = 'RELATES_TO'"):
        if source in graph.label and target in graph.label:
            graph.edges[source].add(target)
            graph.edges[target].add(source)
    for source, target, anchor in db.execute("SELECT DISTINCT source, target, anchor FROM edge_points WHERE relationship = 'RELATES_TO'"):
        graph.edges_in[(source, anchor)].add(target)
        graph.edges_in[(target, anchor)].add(source)
    graph.began = dict(db.execute("SELECT session_id, MIN(created_at) FROM recall_turns GROUP BY session_id"))
    for session, role in db.execute("SELECT DISTINCT session_id, role FROM recall_turns"):
        if (name := speaker_name(role)) is not None:
            graph.speakers[session].add(prose_key("PERSON", name))
    db.close()
    return graph


def _overlap(a: set[str], b: set[str], weight: Callable[[str], float] = lambda _: 1.0) -> dict[str, float]:
    shared = a & b
    w = sum(weight(x) for x in shared)
    return {
        "count": float(len(shared)),
        "jaccard": w / sum(weight(x) for x in a | b) if a | b else 0.0,
        "share": w / min(sum(weight(x) for x in a), sum(weight(x) for x in b)) if a and b else 0.0,
    }


def features(graph: Graph, short: str, long: str) -> dict[str, float]:
    """How alike the neighbourhoods of the nodes ``short`` and ``long`` are (they differ)."""
    sessions_total = max(1, len(graph.said_in))
    rarity = {n: math.log(sessions_total / max(1, len(graph.sessions[n]))) for n in graph.label}
    ends = {short, long}
    out: dict[str, float] = {}
    for kind, a, b, weight in (
        ("edge", graph.edges[short] - ends, graph.edges[long] - ends, None),
        ("co", graph.co_session(short) - ends, graph.co_session(long) - ends, None),
        ("co_idf", graph.co_session(short) - ends, graph.co_session(long) - ends, rarity.__getitem__),
        ("speakers", graph.speakers_of(short), graph.speakers_of(long), None),
    ):
        for measure, value in (_overlap(a, b, weight) if weight else _overlap(a, b)).items():
            out[f"{kind}_{measure}"] = value
    long_name = " ".join(graph.words[long])
    out["long_speaks_where_short_said"] = float(long_name in graph.speakers_of(short))
    out["together"] = float(bool(graph.sessions[short] & graph.sessions[long]))
    out["sessions_short"] = float(len(graph.sessions[short]))
    out["sessions_long"] = float(len(graph.sessions[long]))
    out["long_sessions_ratio"] = len(graph.sessions[long]) / max(1, len(graph.sessions[short]))
    # Relative: is ``long`` the extension of ``short`` whose co-session names overlap most?
    others = graph.extensions(short) - {long}
    out["extensions"] = float(len(others) + 1)
    out["long_dominance"] = len(graph.sessions[long]) / max([1, *(len(graph.sessions[o]) for o in others)])
    mine = out["co_idf_jaccard"]
    rival = max((_overlap(graph.co_session(short) - {short, o}, graph.co_session(o) - {short, o}, rarity.__getitem__)["jaccard"] for o in others), default=0.0)
    out["co_idf_margin"] = mine - rival
    out.update(at_meeting(graph, short, long, others, rarity))
    return out


def at_meeting(graph: Graph, short: str, long: str, others: set[str], rarity: dict[str, float]) -> dict[str, float]:
    """What the resolver could see when the pair first met: the session ``T`` in which the later of
    the two nodes was first said (the incoming name) against the earlier node's history before ``T``
    (the existing node). ``at_`` features; both first said in ``T``: no history, only ``T``."""
    first = {n: min(graph.sessions[n], key=graph.began.__getitem__) for n in (short, long)}
    later = max((short, long), key=lambda n: (graph.began[first[n]], n == long))
    earlier = long if later == short else short
    when = graph.began[first[later]]
    ends = {short, long}
    before = [a for a in graph.sessions[earlier] if graph.began[a] < when]
    incoming = graph.said_in[first[later]] - ends
    existing = set().union(*(graph.said_in[a] for a in before)) - ends if before else set()
    edges_now = graph.edges_in[(later, first[later])] - ends
    edges_then = set().union(*(graph.edges_in[(earlier, a)] for a in before)) - ends if before else set()
    speakers_now = graph.speakers[first[later]]
    speakers_then = set().union(*(graph.speakers[a] for a in before)) if before else set()
    prior = {n: sum(1 for a in graph.sessions[n] if graph.began[a] < when) for n in (long, *others)}
    out = {f"at_co_{k}": v for k, v in _overlap(incoming, existing).items()}
    out.update({f"at_co_idf_{k}": v for k, v in _overlap(incoming, existing, rarity.__getitem__).items()})
    out.update({f"at_edge_{k}": v for k, v in _overlap(edges_now, edges_then).items()})
    out.update({f"at_speakers_{k}": v for k, v in _overlap(speakers_now, speakers_then).items()})
    out["at_short_incoming"] = float(later == short)
    out["at_existing_sessions"] = float(len(before))
    out["at_long_prior_share"] = prior[long] / sum(prior.values()) if sum(prior.values()) else 0.0
    out["at_long_speaks_now"] = float(" ".join(graph.words[long]) in speakers_now)
    return out


def pair_rows(runs: dict[str, Path], labels: list[dict[str, Any]], *, part: str) -> list[dict[str, Any]]:
    """The part's labelled extension pairs with where the run put them: ``state`` linked (one node),
    absent (a name the run does not hold) or apart, and for pairs apart their :func:`features`."""
    graphs: dict[str, Graph] = {}
    out = []
    for row in labels:
        # the extension pairs carry their run; an older split's prose pairs are from its sessions' run
        run = row.get("run") or (_SPLIT_RUN.get(row["split"]) if row.get("name_kind") == "prose" else None)
        if row["split"] != part or row.get("rule") == "cross-type" or run not in runs:
            continue
        row = {**row, "run": run}
        if row["run"] not in graphs:
            graphs[row["run"]] = load(runs[row["run"]])
        graph = graphs[row["run"]]
        kind = row["type"]
        short, long = sorted((row["existing"]["name"], row["incoming"]["name"]), key=lambda n: len(prose_key(kind, n).split()))
        s, l = graph.where.get((kind, short)), graph.where.get((kind, long))
        item = {"run": row["run"], "type": kind, "short": short, "long": long, "same": row["same"]}
        if s is None or l is None or s not in graph.label or l not in graph.label:
            item["state"] = "absent"
        elif s == l:
            item["state"] = "linked"
        else:
            item["state"] = "apart"
            item["nodes"] = [s, l]
            item.update(features(graph, s, l))
        out.append(item)
    return out


# The contexts measured: (name, predicate on a pair apart). Thresholds are read off the tuning part.
def contexts(thresholds: dict[str, list[float]]) -> list[tuple[str, Callable[[dict[str, Any]], bool]]]:
    out: list[tuple[str, Callable[[dict[str, Any]], bool]]] = []
    for feature, values in thresholds.items():
        for t in values:
            out.append((f"{feature} >= {t:g}", lambda r, f=feature, t=t: r[f] >= t))
    return out


SWEEP = {
    "edge_count": [1, 2, 3], "edge_jaccard": [0.05, 0.1, 0.2], "edge_share": [0.25, 0.5, 1.0],
    "co_count": [1, 3, 5, 10], "co_jaccard": [0.05, 0.1, 0.2, 0.3], "co_share": [0.25, 0.5, 0.75, 1.0],
    "co_idf_jaccard": [0.05, 0.1, 0.2, 0.3], "co_idf_share": [0.25, 0.5, 0.75, 1.0], "co_idf_margin": [0.0001, 0.05, 0.1],
    "speakers_count": [1, 2, 3], "speakers_jaccard": [0.1, 0.2, 0.3, 0.5], "speakers_share": [0.5, 0.75, 1.0],
    "long_speaks_where_short_said": [1], "together": [1], "long_sessions_ratio": [1, 2, 5, 10],
    "long_dominance": [2, 5, 10, 100],
    "at_co_count": [1, 2, 3, 5], "at_co_share": [0.25, 0.5, 0.75, 1.0], "at_co_idf_share": [0.25, 0.5, 0.75],
    "at_co_idf_jaccard": [0.05, 0.1, 0.2], "at_edge_count": [1, 2], "at_speakers_count": [1, 2, 3], "at_speakers_share": [0.5, 1.0],
    "at_existing_sessions": [1, 5, 20, 100], "at_long_prior_share": [0.5, 0.9, 0.99],
}


# The contexts of the table (bench/RESULTS.md, eighth round), frozen on the tuning part before the
# untouched pairs were printed: each a conjunction of (feature, least value).
FROZEN: list[tuple[str, list[tuple[str, float]]]] = [
    ("edge: >= 2 shared neighbours said in one turn with each", [("edge_count", 2)]),
    ("co-session: >= 10 shared names", [("co_count", 10)]),
    ("co-session: rarity-weighted share of the smaller >= 0.25", [("co_idf_share", 0.25)]),
    ("co-session: said together, and the longer the extension whose names overlap most (margin >= 0.1)", [("together", 1), ("co_idf_margin", 0.1)]),
    ("speakers: >= 2 shared speakers", [("speakers_count", 2)]),
    ("the longer has >= 10x the sessions of the shorter", [("long_sessions_ratio", 10)]),
    ("the longer has >= 10x the sessions of any other extension", [("long_dominance", 10)]),
    ("at meeting: >= 3 names of the incoming session in the existing node's sessions", [("at_co_count", 3)]),
    ("at meeting: >= 1 shared neighbour said in one turn", [("at_edge_count", 1)]),
    ("at meeting: >= 2 shared speakers", [("at_speakers_count", 2)]),
    ("at meeting: the existing node said in >= 20 sessions", [("at_existing_sessions", 20)]),
    ("at meeting: the longer holds >= 90 % of its extensions' earlier sessions", [("at_long_prior_share", 0.9)]),
]


def auc(rows: list[dict[str, Any]], feature: str) -> float:
    """How well ``feature`` ranks same pairs above different ones (ties count a half)."""
    pos = [r[feature] for r in rows if r["same"]]
    neg = [r[feature] for r in rows if not r["same"]]
    if not pos or not neg:
        return float("nan")
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="SOURCE=DATA_DIR of the runs the pairs were collected from")
    parser.add_argument("--part", required=True, help="the label split to measure (extension-tuning while designing)")
    parser.add_argument("--pairs", action="store_true", help="also print each pair apart with its features")
    parser.add_argument("--sweep", action="store_true", help="also print every threshold of SWEEP (designing)")
    parser.add_argument("--rule", action="append", default=[], metavar="FEATURE>=T[,FEATURE>=T]",
                        help="a conjunction to measure besides the sweep (repeatable)")
    args = parser.parse_args(argv)
    runs = {source: Path(path) for source, _, path in (r.partition("=") for r in args.runs)}
    labels = load_pairs(LABELS)
    rows = pair_rows(runs, labels, part=args.part)
    positives = sum(r["same"] for r in rows)
    states = defaultdict(lambda: [0, 0])
    for r in rows:
        states[r["state"]][0] += 1
        states[r["state"]][1] += r["same"]
    print(f"{args.part}: {len(rows)} pairs, {positives} same; " + ", ".join(f"{k} {n} ({s} same)" for k, (n, s) in sorted(states.items())))
    apart = [r for r in rows if r["state"] == "apart"]
    if args.pairs:
        for r in sorted(apart, key=lambda r: (r["run"], r["short"], r["long"])):
            shown = {k: round(v, 3) for k, v in r.items() if isinstance(v, float)}
            print(json.dumps({"run": r["run"], "short": r["short"], "long": r["long"], "same": r["same"], **shown}, ensure_ascii=False))
    print("ranking (AUC, pairs apart):", ", ".join(f"{f} {auc(apart, f):.3f}" for f in SWEEP))
    extra = []
    for spec in args.rule:
        terms = [(f, float(t)) for f, _, t in (term.partition(">=") for term in spec.split(","))]
        extra.append((spec, lambda r, terms=terms: all(r[f] >= t for f, t in terms)))
    frozen = [(name, lambda r, terms=terms: all(r[f] >= t for f, t in terms)) for name, terms in FROZEN]
    for name, rule in [*(contexts(SWEEP) if args.sweep else []), *extra, *frozen]:
        hit = [r for r in apart if rule(r)]
        same = sum(r["same"] for r in hit)
        print(f"{name:98} links={len(hit):3} same={same:3} precision={same / len(hit) if hit else 1:.3f} recall={same / positives if positives else 1:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
