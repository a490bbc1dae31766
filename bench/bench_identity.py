"""Identity-resolution benchmark: precision/recall of the resolver on a labelled merge set, against
the exact-match baseline (same type, case-insensitive equal name or alias), plus resolver speed;
and the same on pairs labelled from real coding-agent sessions, per split.

    python bench/bench_identity.py [--pairs bench/data/merge_pairs.jsonl] [--scale 20000]
        [--real bench/data/identity_real_pairs.jsonl] [--sessions SESSIONS.jsonl]
        [--runs SOURCE=DATA_DIR ... [--runs-only]]
        # SOURCE: swe-tune, swe-heldout, friends-tune, friends-heldout, sweagent-fresh, aider-fresh

The synthetic set (``--pairs``) is a regression test. The real set (``--real``, built with
bench/convert_transcripts.py and bench/identity_pairs.py, labelled by hand) is the evidence: precision
and recall per split (``tuning``, ``held-out``) and per kind of name (code identifiers, file paths,
prose names). With ``--sessions`` (``convert_transcripts swe … --all``'s import file; default
``$REM_BENCH_SESSIONS``) each split's sessions also go through ``rem-cycle import`` +
``rem-cycle --once`` in a temporary data dir, and the review list that run leaves is measured:
pairs per 100 sessions, most pairs per node, and its noise (labelled pairs on it that are not
the same thing). With ``--runs`` the pairs collected from runs (``run``: their source,
bench/identity_extensions.py) are scored against the graph a run of the same sessions left, where
identity had the session as context (:func:`run_report`). The setting ``persons`` resolves the
pairs collected from runs beside the PERSON nodes of their run (bench/identity_context.py), as a
session batch: the context of the ``person`` rule. ``--runs`` also counts each run's PERSON nodes
holding two people's full names (``namesake_person_nodes``) and scores the ``named`` rule on the
labelled cross-type pairs of ``bench/data/identity_cross_type_pairs.jsonl`` (:func:`cross_type_report`).

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
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.identity_context import load_context, own_context  # noqa: E402
from pipelines.identity import (  # noqa: E402
    CANDIDATE, LINK, NAMED_TYPES, AliasIndex, NodeRef, Verdict, fold, learn, name_form, named_person, namesakes, resolve, resolve_batch,
    said_together,
)

DATA = Path(__file__).resolve().parent / "data" / "merge_pairs.jsonl"
REAL = Path(__file__).resolve().parent / "data" / "identity_real_pairs.jsonl"
# CONCEPT / PERSON-PLACE-ORGANIZATION-WORK pairs of one identical name from runs, labelled (cross_type_report).
CROSS_TYPE = Path(__file__).resolve().parent / "data" / "identity_cross_type_pairs.jsonl"
SPLITS = ("tuning", "held-out")
# The converter's split names (one hash, bench/convert_transcripts.py) → the labels' split names.
_IDENTITY_SPLIT = {"tune": "tuning", "heldout": "held-out"}
# Labelled pairs only: ``fresh`` = held-out sessions' pairs first labelled in issue 11's second
# round, before its rule changes (bench/RESULTS.md); its errors are never printed.
# ``sweagent`` / ``aider``: pairs from SWE-agent's own trajectories and from aider's own chat
# history (other frameworks and models; issue 11's third round), labelled from main's run before
# the code of that round ever ran on them. ``extension-tuning`` / ``extension-fresh``: prose names
# beside the same name with words more (Friends scenes and the tuning split's sessions, issue 11's
# sixth round, bench/identity_extensions.py), labelled before any rule of that round; the fresh
# part is untouched until the rule is frozen.
# ``person-audit``: every link the ``person`` rule made on the Friends runs once it was frozen
# (issue 11's seventh round), labelled afterwards by reading the turns: an audit of that rule.
# ``extension-office``: pairs of the sixth round's shape from a run over The Office's held-out
# windows (issue 11's eleventh round, a second chat corpus), labelled before any figure; untouched.
LABELLED_SPLITS = (*SPLITS, "fresh", "sweagent", "aider", "extension-tuning", "extension-fresh", "person-audit", "extension-office")


def load_pairs(path: Path) -> list[dict[str, Any]]:
    """The labelled pairs, each with ``existing``/``incoming`` as :class:`NodeRef`. A real pair
    (a top-level ``type``, both ends of it) gets ``kind`` = its source and ``name_kind``."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        old, new = row["existing"], row["incoming"]
        if "type" in row:
            old, new = {**old, "type": row["type"]}, {**new, "type": row["type"]}
            row["kind"] = f"{row['source']} {row['rule']}".strip()
            row["name_kind"] = name_kind(row["type"], old["name"], new["name"])
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


def score(
    pairs: Sequence[dict[str, Any]], decide: Callable[[NodeRef, AliasIndex], Verdict], *, crowd: bool,
    everyone: Sequence[dict[str, Any]] | None = None, context: Callable[[dict[str, Any]], Sequence[NodeRef]] | None = None,
) -> dict[str, Any]:
    """Precision/recall of ``decide`` over the pairs (crowd: among the existing nodes of
    ``everyone``, default the pairs themselves; ``context``: more nodes indexed beside a pair's
    existing one — the PERSON nodes of its run)."""
    everyone = [p["existing_ref"] for p in (pairs if everyone is None else everyone)]  # build() unions aliases of one id
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
            index = AliasIndex.build([pair["existing_ref"], *(context(pair) if context else ())])
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


def name_kind(node_type: str, a: str, b: str) -> str:
    """``path`` (FILE), ``prose`` (either name has a space) or ``identifier``."""
    if node_type == "FILE":
        return "path"
    return "prose" if len(a.split()) > 1 or len(b.split()) > 1 else "identifier"


def real_report(pairs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Precision/recall of the resolver on the real labelled pairs, per split and kind of name
    (isolated and crowd, as for the synthetic set; crowd = every existing node of the split)."""
    report: dict[str, Any] = {}
    people = load_context()

    def persons(pair: dict[str, Any]) -> list[NodeRef]:
        return [NodeRef(p["id"], "PERSON", p["name"], tuple(p["aliases"])) for p in own_context(pair, people)] if pair.get("run") else []

    for split in LABELLED_SPLITS:
        # A cross-type pair is never merged (reported only): it has no place in precision/recall.
        mine = [p for p in pairs if p["split"] == split and p["rule"] != "cross-type"]
        # "names": the two names alone. The recorded aliases come from the run the pairs were
        # collected from, whose per-session dedup still folded case (`exists()` beside `EXISTS`).
        bare = [{**p, "existing_ref": _named(p["existing_ref"]), "incoming_ref": _named(p["incoming_ref"])} for p in mine]
        for kind in ("identifier", "path", "prose", "all"):
            for setting, crowd, population in (("isolated", False, mine), ("crowd", True, mine), ("names", False, bare)):
                chosen = [p for p in population if kind == "all" or p["name_kind"] == kind]
                report[f"{split}/{kind}/{setting}"] = score(chosen, lambda n, i: resolve(n, i), crowd=crowd, everyone=population)
            # "persons": the names, beside the PERSON nodes of the run the pair came from
            # (bench/identity_context.py), resolved as a session batch: the ``person`` rule's context.
            chosen = [p for p in bare if kind == "all" or p["name_kind"] == kind]
            report[f"{split}/{kind}/persons"] = score(chosen, lambda n, i: resolve_batch([n], i)[0], crowd=False, context=persons)
    return report


def _named(node: NodeRef) -> NodeRef:
    return NodeRef(node.id, node.type, node.name)


def review_report(sessions: Path, pairs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Run each split's sessions through import + one cycle (heuristic extractor) in a temporary
    data dir and measure the review list it leaves and the links it made (against the labels)."""
    import sqlite3
    import subprocess
    import tempfile

    from bench.convert_transcripts import split_of

    labels = {(p["type"], p["incoming"]["name"], p["existing"]["name"]): p["same"] for p in pairs}
    labels |= {(t, b, a): same for (t, a, b), same in list(labels.items())}
    root = Path(__file__).resolve().parent.parent
    out: dict[str, Any] = {}
    for split in SPLITS:
        with tempfile.TemporaryDirectory(prefix="rem-bench-identity-") as tmp:
            part = Path(tmp) / "sessions.jsonl"
            count = 0
            with sessions.open(encoding="utf-8") as src, part.open("w", encoding="utf-8") as dst:
                for line in src:
                    if line.strip() and _IDENTITY_SPLIT[split_of(json.loads(line)["title"])] == split:
                        dst.write(line)
                        count += 1
            env = {**os.environ, "REM_DATA_DIR": str(Path(tmp) / "data"), "REM_EXTRACTOR": "heuristic", "REM_LOG_LEVEL": "warning"}
            for args in (["import", str(part)], ["--once", "--json"]):
                subprocess.run([sys.executable, "-m", "worker", *args], cwd=root, env=env, check=True, capture_output=True)
            db = sqlite3.connect(Path(tmp) / "data" / "graph.sqlite3")
            names = dict(db.execute("SELECT id, name FROM nodes"))
            review = [
                (node.partition(":")[0], names.get(node, ""), names.get(other, ""))
                for node, other in db.execute("SELECT node_id, candidate_id FROM identity_candidates")
            ]
            per_node = Counter(name for _, name, _ in review)
            links = [
                (merged.partition(":")[0], json.loads(restore).get("node", {}).get("name", merged.partition(":")[2]), names.get(into, ""))
                for merged, into, restore in db.execute("SELECT merged_id, into_id, restore FROM merges")
            ]
            db.close()
        labelled = [labels[r] for r in review if r in labels]
        linked = [labels[r] for r in links if r in labels]
        out[split] = {
            "sessions": count,
            "review_pairs": len(review),
            "review_per_100_sessions": round(len(review) * 100 / count, 1) if count else 0.0,
            "review_max_per_node": max(per_node.values(), default=0),
            "review_max_per_target": max(Counter(other for _, _, other in review).values(), default=0),
            "review_labelled": len(labelled),
            "review_noise": round(labelled.count(False) / len(labelled), 3) if labelled else None,
            "links": len(links),
            "links_labelled": len(linked),
            "links_wrong": linked.count(False),
        }
    return out


# The run a labelled pair without a ``run`` of its own came from: the mini-swe-agent split its
# sessions belong to (``convert_transcripts swe``; ``fresh`` pairs come from the held-out sessions),
# or the source whose sessions are all held out (``convert_transcripts sweagent`` / ``aider``: one
# ``fresh`` file each, run under these names).
_SPLIT_RUN = {"tuning": "swe-tune", "held-out": "swe-heldout", "fresh": "swe-heldout",
              "sweagent": "sweagent-fresh", "aider": "aider-fresh"}


def node_of_name(db: Any) -> dict[tuple[str, str], str]:
    """(type, name) → the node a run's graph (an open sqlite3 connection) holds that name on: its
    own node, the node it is an alias of, or where its merge went, or further where that node was
    folded (a node that exists is the end of the chain)."""
    where: dict[tuple[str, str], str] = {}
    for node_id, label, name in db.execute("SELECT id, label, name FROM nodes"):
        where[(label, name)] = node_id
    # A name the node is no longer shown by (a fuller one of its group names it) is one of its
    # aliases; a display name of another node comes first.
    for node_id, label, alias in db.execute("SELECT a.node_id, n.label, a.alias FROM node_aliases a JOIN nodes n ON n.id = a.node_id ORDER BY a.node_id"):
        where.setdefault((label, alias), node_id)
    into = dict(db.execute("SELECT merged_id, into_id FROM merges WHERE undone_at IS NULL ORDER BY merge_id"))
    existing = set(where.values())
    for merged, restore in db.execute("SELECT merged_id, restore FROM merges WHERE undone_at IS NULL"):
        node = json.loads(restore).get("node", {})
        where.setdefault((merged.partition(":")[0], node.get("name", merged.partition(":")[2])), _end(into, merged, existing))
    # A node folded into a node of another type (a CONCEPT the judge or a person joined to a
    # PERSON, sweep36) leaves its names under the survivor's type: each of them that spells the
    # folded id (`Bing` of `CONCEPT:bing`) is found under the folded node's type too.
    folded = {(merged.partition(":")[0], fold(merged.partition(":")[2])): merged for merged, target in into.items()
              if merged.partition(":")[0] != target.partition(":")[0]}
    for (_, name), node_id in list(where.items()):
        for label in {label for label, _ in folded}:
            if (merged := folded.get((label, fold(name)))) is not None and _end(into, merged, existing) == node_id:
                where.setdefault((label, name), node_id)
    return where


def _end(into: dict[str, str], merged: str, existing: set[str]) -> str:
    """Where the merge of ``merged`` leads: its target, followed to a node that exists."""
    target, seen = into[merged], {merged}
    while target not in existing and target in into and target not in seen:
        seen.add(target)
        target = into[target]
    return target


def run_report(runs: dict[str, Path], pairs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The labelled pairs collected from a run (``run`` = its source name, bench/identity_extensions.py;
    else :data:`_SPLIT_RUN`) against the graph a run of the same sessions left in ``runs[source]`` (``rem-cycle import`` +
    ``--once`` until all are digested): a pair is *linked* when both names ended on one node,
    *reviewed* when the pair is on the review list. This is where the session context shows: the
    pairwise figures resolve two names with no session. Per split and kind of name (and ``all``): precision / recall of links,
    recall with review, review noise; per run: the review list per 100 sessions."""
    import sqlite3

    out: dict[str, Any] = {"splits": {}, "runs": {}}
    state: dict[str, tuple[dict[tuple[str, str], str], set[frozenset[str]]]] = {}
    for source, data_dir in runs.items():
        db = sqlite3.connect(f"file:{data_dir / 'graph.sqlite3'}?mode=ro", uri=True)
        where = node_of_name(db)
        # PERSON nodes holding two people's full names (`Kate Miller` and `Kate Smith`: one name
        # shared, another not), their name and aliases read as the resolver reads them.
        aliases: dict[str, list[str]] = {}
        for node_id, alias in db.execute("SELECT a.node_id, a.alias FROM node_aliases a JOIN nodes n ON n.id = a.node_id WHERE n.label = 'PERSON'"):
            aliases.setdefault(node_id, []).append(alias)
        namesake_nodes = []
        for node_id, name in db.execute("SELECT id, name FROM nodes WHERE label = 'PERSON'"):
            forms = [name_form("PERSON", f) for f in NodeRef(node_id, "PERSON", name, tuple(aliases.get(node_id, ()))).forms]
            if namesakes(forms, forms):
                namesake_nodes.append(name)
        review = {frozenset(pair) for pair in db.execute("SELECT node_id, candidate_id FROM identity_candidates")}
        rules = Counter(rule for (rule,) in db.execute("SELECT rule FROM identity_candidates"))
        sessions = db.execute("SELECT COUNT(*) FROM nodes WHERE label = 'SESSION'").fetchone()[0]
        persons = db.execute("SELECT COUNT(*) FROM nodes WHERE label = 'PERSON'").fetchone()[0]
        db.close()
        state[source] = (where, review)
        out["runs"][source] = {"sessions": sessions, "review_pairs": len(review),
                               "review_per_100_sessions": round(len(review) * 100 / sessions, 1) if sessions else 0.0,
                               "extension_pairs": rules.get("extension", 0),
                               "person_nodes": persons, "namesake_person_nodes": sorted(namesake_nodes)}
    by_split: dict[str, Counter[str]] = {}
    for pair in pairs:
        run = pair.get("run") or _SPLIT_RUN.get(pair["split"])
        if run not in state or pair["rule"] == "cross-type":
            continue
        where, review = state[run]
        one, two = where.get((pair["type"], pair["existing"]["name"])), where.get((pair["type"], pair["incoming"]["name"]))
        if one is None or two is None:
            outcome = {"absent": 1}
        else:
            linked, reviewed = one == two, frozenset((one, two)) in review
            if pair["same"]:
                outcome = {"tp" if linked else "fn": 1, "fn_reviewed": int(not linked and reviewed)}
            else:
                outcome = {"fp" if linked else "tn": 1, "tn_reviewed": int(not linked and reviewed)}
        for kind in (pair["name_kind"], "all"):
            by_split.setdefault(f"{pair['split']}/{kind}", Counter()).update(outcome)
    for split, c in sorted(by_split.items()):
        positives = c["tp"] + c["fn"]
        out["splits"][split] = {
            "pairs": sum(c[k] for k in ("tp", "fp", "fn", "tn")), "positives": positives, "absent": c["absent"],
            "precision": round(c["tp"] / (c["tp"] + c["fp"]), 3) if c["tp"] + c["fp"] else 1.0,
            "recall": round(c["tp"] / positives, 3) if positives else 1.0,
            "recall_with_review": round((c["tp"] + c["fn_reviewed"]) / positives, 3) if positives else 1.0,
            "review_noise": round(c["tn_reviewed"] / c["tn"], 3) if c["tn"] else 0.0,
            "reviewed_same": c["fn_reviewed"], "reviewed_different": c["tn_reviewed"],
        }
    return out


def cross_type_pairs(data_dir: Path) -> list[dict[str, Any]]:
    """The review list's ``cross-type`` pairs of a run whose ends are a CONCEPT and a node of
    :data:`NAMED_TYPES` with the identical name (ignoring case) of two words or more, each with
    ``typed_nodes``: how many nodes of those types hold that name (name or alias) in the graph."""
    import sqlite3

    db = sqlite3.connect(f"file:{data_dir / 'graph.sqlite3'}?mode=ro", uri=True)
    try:
        nodes = {node_id: (label, name) for node_id, label, name in db.execute("SELECT id, label, name FROM nodes")}
        holders: dict[str, set[str]] = {}
        for node_id, (label, name) in nodes.items():
            if label in NAMED_TYPES:
                holders.setdefault(fold(name), set()).add(node_id)
        for node_id, alias in db.execute("SELECT node_id, alias FROM node_aliases"):
            if nodes.get(node_id, ("", ""))[0] in NAMED_TYPES:
                holders.setdefault(fold(alias), set()).add(node_id)
        found = []
        for one, two in db.execute("SELECT node_id, candidate_id FROM identity_candidates WHERE rule = 'cross-type'"):
            if one not in nodes or two not in nodes:
                continue
            ends = {nodes[one][0]: nodes[one][1], nodes[two][0]: nodes[two][1]}
            typed = [t for t in ends if t in NAMED_TYPES]
            if "CONCEPT" not in ends or len(typed) != 1 or fold(ends["CONCEPT"]) != fold(ends[typed[0]]) or len(ends["CONCEPT"].split()) < 2:
                continue
            found.append({"concept": fold(ends["CONCEPT"]), "typed_type": typed[0], "typed": ends[typed[0]],
                          "typed_nodes": len(holders.get(fold(ends["CONCEPT"]), ()))})
        return found
    finally:
        db.close()


def cross_type_report(runs: dict[str, Path], labels: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Two cross-type rules measured on the labelled pairs of ``runs`` (what each would link, right
    or wrong): *named* — a CONCEPT links to the one PERSON/PLACE/ORGANIZATION/WORK node holding its
    identical multi-word name (never when several such nodes hold it) — and *named-person*, the same
    for a PERSON node only. Unlabelled pairs are counted apart (``unlabelled``)."""
    by_key = {(r["run"], r["concept"], r["typed_type"], r["typed"]): r for r in labels}
    out: dict[str, Any] = {}
    for source, data_dir in runs.items():
        for pair in cross_type_pairs(data_dir):
            label = by_key.get((source, pair["concept"], pair["typed_type"], pair["typed"]))
            split = label["split"] if label else "unlabelled"
            for rule in ("named", "named-person"):
                links = pair["typed_nodes"] == 1 and (rule == "named" or pair["typed_type"] == "PERSON")
                c = out.setdefault(f"{split}/{rule}", Counter())
                c["pairs"] += 1
                if label is None:
                    c["links"] += links
                    continue
                c["same"] += label["same"]
                c["tp" if links and label["same"] else "fp" if links else "fn" if label["same"] else "tn"] += 1
    for key, c in out.items():
        c["precision"] = round(c["tp"] / (c["tp"] + c["fp"]), 3) if c["tp"] + c["fp"] else 1.0
        c["recall"] = round(c["tp"] / c["same"], 3) if c["same"] else 1.0
    return out


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
    return {"index_nodes": len(names), "index_build_s": round(built, 3), "resolves": len(probes), "ms_per_resolve": round(elapsed / len(probes) * 1000, 3), "linked": links,
            **extension_speed(names, rng)}


def extension_speed(names: Sequence[str], rng: random.Random, *, sessions: int = 200, per_session: int = 20) -> dict[str, Any]:
    """The session-context rules' cost (:func:`said_together`, :func:`named_person`) against the
    whole batch's: the synthetic names as prose (``graph store queue``, every word in thousands of
    names — a worst case), sessions of ``per_session`` of them, half shortened by a word (an
    extension pair); beside them a PERSON node for every two-word name of the vocabulary, with its
    first word as an alias (`Graph Store` / `Graph`: every name holds a person's name)."""
    vocab = sorted({w for n in names for w in _split(n)})
    people = [NodeRef(f"PERSON:{a} {b}", "PERSON", f"{a} {b}", (a,)) for a in vocab for b in vocab if a != b]
    index = AliasIndex.build([*(NodeRef(f"CONCEPT:{n}", "CONCEPT", " ".join(_split(n))) for n in names), *people])
    batches = []
    for number in range(sessions):
        said = [" ".join(_split(rng.choice(names))) for _ in range(per_session)]
        said += [" ".join(name.split()[1:]) for name in said[: per_session // 2]]
        batches.append([NodeRef(f"CONCEPT:{name} {number}", "CONCEPT", name) for name in said])
    whole = rule = judged = person = 0.0
    for batch in batches:
        t0 = time.perf_counter()
        verdicts = resolve_batch(batch, index)
        t1 = time.perf_counter()
        local = AliasIndex()
        learn(local, batch, verdicts)
        t2 = time.perf_counter()
        said_together(batch, verdicts, index, local)
        t3 = time.perf_counter()
        named_person(batch, verdicts, index, local)
        t4 = time.perf_counter()
        said_together(batch, verdicts, index, local, judged=True)  # with a judge: across sessions too
        whole += t1 - t0
        rule += t3 - t2
        person += t4 - t3
        judged += time.perf_counter() - t4
    return {"session_batches": sessions, "ms_per_session_batch": round(whole / sessions * 1000, 2),
            "extension_rule_ms_per_session_batch": round(rule / sessions * 1000, 2), "extension_rule_share": round(rule / whole, 3) if whole else 0.0,
            "extension_rule_judged_ms_per_session_batch": round(judged / sessions * 1000, 2),
            "person_rule_ms_per_session_batch": round(person / sessions * 1000, 2), "person_rule_share": round(person / whole, 3) if whole else 0.0,
            "person_nodes": len(people)}


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
    parser.add_argument("--real", type=Path, default=REAL, help="labelled pairs from real sessions")
    parser.add_argument("--sessions", type=Path, default=Path(os.environ["REM_BENCH_SESSIONS"]) if os.environ.get("REM_BENCH_SESSIONS") else None,
                        help="import file of the real sessions (convert_transcripts swe --all): also measure the review list")
    parser.add_argument("--runs", nargs="*", default=[], metavar="SOURCE=DATA_DIR",
                        help="data dirs of runs over the sessions labelled pairs were collected from (bench/identity_extensions.py): "
                             "score those pairs against the graph each left (the session context)")
    parser.add_argument("--runs-only", action="store_true", help="print only the --runs figures")
    parser.add_argument("--splits", nargs="+", default=list(LABELLED_SPLITS), choices=LABELLED_SPLITS,
                        help="print the real pairs' figures of these splits only (the tuning ones while a rule is designed)")
    args = parser.parse_args(argv)
    if args.runs:
        runs = {source: Path(path) for source, _, path in (r.partition("=") for r in args.runs)}
        report = run_report(runs, load_pairs(args.real))
        for split, r in report["splits"].items():
            print(f"run {split:18} precision={r['precision']:.3f} recall={r['recall']:.3f} ({r['recall_with_review']:.3f}) "
                  f"review_noise={r['review_noise']:.3f} [{r['positives']}/{r['pairs']}] absent={r['absent']} "
                  f"reviewed same/different={r['reviewed_same']}/{r['reviewed_different']}")
        for source, r in report["runs"].items():
            print(f"run {source:18} {r}")
        labels = [json.loads(line) for line in CROSS_TYPE.read_text(encoding="utf-8").splitlines() if line.strip()]
        for key, c in sorted(cross_type_report(runs, labels).items()):
            print(f"run cross-type {key:30} {dict(c)}")
        if args.runs_only:
            return {"runs": report}
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
    print(f"speed: {s['session_batches']} sessions of 30 prose names against the same names as prose: {s['ms_per_session_batch']} ms each, "
          f"of which the extension rule {s['extension_rule_ms_per_session_batch']} ms ({s['extension_rule_share']:.1%}), "
          f"the person rule {s['person_rule_ms_per_session_batch']} ms ({s['person_rule_share']:.1%}; {s['person_nodes']} PERSON nodes indexed)")
    real = load_pairs(args.real)
    results["real"] = real_report(real)
    print(f"real pairs ({args.real.name}): precision / recall (recall with review) [positives/pairs], cross-type pairs excluded")
    for key, r in results["real"].items():
        if key.split("/")[0] not in args.splits:
            continue
        print(f"  {key:32} precision={r['precision']:.3f} recall={r['recall']:.3f} ({r['recall_with_review']:.3f}) "
              f"review_noise={r['review_noise']:.3f} [{r['positives']}/{r['pairs']}] fp={r['fp']} fn={r['fn']}")
    for key in ("tuning/all/isolated", "tuning/all/crowd", "tuning/all/names", "extension-tuning/all/persons"):  # the splits that may be looked at
        for error in results["real"][key]["errors"] if key.split("/")[0] in args.splits else ():
            print(f"  {key}: {error}")
    if args.sessions is not None:
        results["review"] = review_report(args.sessions, real)
        for split, r in results["review"].items():
            print(f"review list {split}: {r}")
    return results


if __name__ == "__main__":
    main()
