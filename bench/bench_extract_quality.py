"""Offline extraction quality on real transcripts: node precision, chat entity recall, turns/s.

Data: ``bench/convert_transcripts.py`` turns public transcripts into import JSONL, split into a
tuning and a held-out half before anything was labelled. Labels (committed, small):

- ``bench/data/extract_node_labels.jsonl`` — ``{"session", "node", "useful": bool}``: nodes drawn at
  random from the extractor's output on sampled sessions, each judged useful or noise;
- ``bench/data/chat_entities.jsonl`` — ``{"source", "split", "session", "entities": [{"name", "type",
  "aliases"}]}``: for sampled conversations of a chat source (:data:`CHAT_SOURCES`), the named
  people, places, works and organisations a person would list.

    python -m bench.bench_extract_quality report --data /tmp/qe-data --splits tune heldout --speed
    python -m bench.bench_extract_quality sample --data /tmp/qe-data --source swe --split tune [--before|--tool-only]
    python -m bench.bench_extract_quality sample --data /tmp/q3/data2 --source aider --split untouched   # sixth round
    python -m bench.bench_extract_quality sample --data /tmp/q3/data2 --source swe --split untouched7    # seventh round
    python -m bench.bench_extract_quality sample --data /tmp/q3/data2 --source aider --split untouched9  # eighth round
    python -m bench.bench_extract_quality sample --data /tmp/q3/data2 --source swe --split untouched10   # tenth round
    python -m bench.bench_extract_quality sample --data /tmp/q3/data2 --source swe --split untouched15   # fourteenth round
    python -m bench.bench_extract_quality sample --data /tmp/q3/data2 --source office --split heldout   # second chat corpus
    python -m bench.bench_extract_quality show --data /tmp/q3/data2 --source office --split heldout     # its recall conversations
    REM_TRANSCRIPTS=/tmp/qe-data python bench/run_all.py extract_quality

``report`` prints, per source and split, node precision over the labelled nodes the extractor
still makes, chat entity recall, and turns/s against the baseline extractor (the heuristic module
at ``--baseline-ref``, loaded from git into this process). ``sample`` lists sampled nodes that
have no label yet (to be labelled by a person, never by the extractor).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import Settings  # noqa: E402
from pipelines.extract import heuristic  # noqa: E402
from pipelines.extract.model import WorkUnit, validate_extraction  # noqa: E402
from pipelines.extract.units import SourceTurn, plan_units  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NODE_LABELS = ROOT / "bench" / "data" / "extract_node_labels.jsonl"
CHAT_ENTITIES = ROOT / "bench" / "data" / "chat_entities.jsonl"
SOURCES = ("friends", "office", "swe", "sweagent", "aider")
# Conversations between named people: entity recall is measured on them (labels carry the source).
# ``office`` (The Office scripts) is a second chat corpus nobody tuned on (issue 11).
CHAT_SOURCES = ("friends", "office")
# The converted files that hold each coding source's labelled sessions (mini-swe-agent's held-out
# and untouched samples come from its held-out split).
LABELLED_CODING_FILES = {"swe": ("swe.tune", "swe.heldout"), "aider": ("aider.fresh",), "sweagent": ("sweagent.fresh",)}
# ``fresh``: held-out sessions never sampled for a label before issue 11's second round (labelled
# before its rule changes; see bench/RESULTS.md).
# ``untouched``: the sixth round's sample (:data:`UNTOUCHED_SESSIONS`), labelled before its rules.
# ``untouched7``, ``untouched8``: the seventh round's samples (same shape, sessions in none of the
# above; the second drawn after the first had been read for the evidence candidates).
# ``untouched9``: the eighth round's sample (same shape; also none of the seventh round's salience
# pool sessions).
# ``untouched10``: the tenth round's sample (same shape), drawn and labelled before that round
# measured anything.
# ``untouched13``: the thirteenth round's sample (same shape), drawn and labelled before that round
# measured anything; ``untouched14``: its second (same shape), drawn after the first's labels had
# been read (so, as ``untouched8`` for the seventh round, the one nobody had read when the round's
# rule was frozen). ``untouched15``: the fourteenth round's (same shape, heuristic v12's nodes),
# drawn and labelled before that round's rules were frozen.
SPLITS = ("tune", "heldout", "fresh", "untouched", "untouched7", "untouched8", "untouched9", "untouched10", "untouched13", "untouched14", "untouched15")
# Sessions whose nodes are sampled for precision labels, and conversations labelled for recall.
# ``sweagent``: SWE-agent's own trajectories (issue 11's third round; 15 sessions, all sampled);
# ``aider``: aider's own chat history (third round, held out).
PRECISION_SESSIONS = {"friends": 40, "office": 40, "swe": 12, "sweagent": 15, "aider": 60}
NODES_PER_SPLIT = 80
# Issue 11's fourth round: the third round's two new sources (``sweagent``, ``aider``; split
# ``fresh``) had been seen as aggregate figures, so each is cut by session into a tuning half and
# a held-out half, fixed before any node was looked at: the sessions of the source's precision
# sample, ordered by SHA-256 of "round4|<session id>", the first half (rounded up) tunes.
HALVED_SOURCES = ("sweagent", "aider")
# Issue 11's fifth round: more tuning material for aider, whose tuning half holds 50 nodes — 60
# of the sessions outside the precision sample (neither half), ordered by SHA-256 of
# "round5-pool|<session id>"; 60 of their nodes were labelled (``"pool": "outside-sample"``).
POOL_SESSIONS = {"aider": 60}
# Issue 11's sixth round: a new untouched sample, drawn before any rule of that round changed —
# sessions in no earlier precision sample or pool, ordered by SHA-256 of "round6-untouched|<id>".
# SWE-agent's 15 sessions are all in its precision sample, so the coding agent side comes from
# mini-swe-agent's held-out split (minus its round-1 and round-2 samples).
UNTOUCHED_SESSIONS = {"swe": 12, "aider": 60}
UNTOUCHED_NODES = 60
# Issue 11's seventh round: another untouched sample, drawn the same way from the sessions left
# (none of the sixth round's), ordered by SHA-256 of "round7-untouched|<id>". Untouched splits in
# the order they were drawn: each excludes the sessions of the ones before it.
UNTOUCHED_SALTS = {
    "untouched": "round6-untouched", "untouched7": "round7-untouched", "untouched8": "round8-untouched",
    "untouched9": "round9-untouched", "untouched10": "round10-untouched", "untouched13": "round13-untouched",
    "untouched14": "round13-second-untouched", "untouched15": "round14-untouched",
}
# Tuning pools drawn from the sessions outside every sample (their labels carry ``"pool"``): the
# untouched splits drawn after a pool (value: the first such split) also exclude its sessions.
LATER_POOLS = {"round7-salience": "untouched9"}
# ``swe/tune`` nodes in the tuning material: 160 until the fifth round, 220 from the sixth (its 60
# new labels were made before its rules changed).
TUNING_SWE_NODES = 220
# Evidence a code or name node of a coding session has (fifth round's trade-off): distinct turns
# (at most 3), said by the person (a ``user`` turn), seen in tool output too.
EVIDENCE_TYPES = ("CLASS", "METHOD", "TEST", "CONCEPT", "PERSON", "PLACE", "ORGANIZATION", "WORK")
EVIDENCE_THRESHOLDS = (0, 2, 3, 4, 5)
RECALL_CONVERSATIONS = 20
SEED = 11

Extract = Callable[[WorkUnit], dict[str, Any]]


@dataclass(slots=True)
class SeenNode:
    """One node of a session's extraction, with where it was seen."""

    id: str
    type: str
    name: str
    roles: Counter[str] = field(default_factory=Counter)
    quotes: list[str] = field(default_factory=list)
    turns: set[str] = field(default_factory=set)  # memory ids of its evidence


def load_sessions(path: Path) -> list[dict[str, Any]]:
    """The import lines of one converted file."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def labelled_coding_sessions(data: Path) -> dict[str, dict[str, Any]]:
    """Every session of :data:`LABELLED_CODING_FILES` under ``data``, by id."""
    return {s["sessionId"]: s for names in LABELLED_CODING_FILES.values() for name in names for s in load_sessions(data / f"{name}.jsonl")}


def units_of(session: dict[str, Any], settings: Settings) -> list[WorkUnit]:
    """The work units the worker would plan for a session."""
    turns = [SourceTurn(t["id"], t["text"], t.get("role")) for t in session["turns"]]
    return plan_units(session["sessionId"], turns, budget_tokens=settings.chunk_budget_tokens)


def extract_session(units: Sequence[WorkUnit], extract: Extract, settings: Settings) -> dict[str, SeenNode]:
    """The validated nodes of a session (every extractor's validation applies), by id."""
    seen: dict[str, SeenNode] = {}
    for unit in units:
        role_of = {t.memory_id: t.role or "" for t in unit.turns}
        extraction = validate_extraction(extract(unit), unit, semantic_types=settings.semantic_types)
        for node in extraction.nodes:
            entry = seen.setdefault(node.id, SeenNode(node.id, node.type, node.name))
            for evidence in node.evidence:
                entry.roles[role_of.get(evidence.memory_id, "")] += 1
                entry.turns.add(evidence.memory_id)
                if len(entry.quotes) < 2:
                    entry.quotes.append(evidence.quote)
    return seen


def baseline_module(ref: str, path: str = "pipelines/extract/heuristic.py") -> types.ModuleType:
    """The module at ``path`` (by default the heuristic extractor) as it was at git ``ref``, loaded
    beside the current one."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], check=True, capture_output=True, text=True).stdout
    module = types.ModuleType("baseline_" + Path(path).stem)
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{ref}:{Path(path).name}", "exec"), module.__dict__)
    return module


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file (none when it does not exist yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def sampled_sessions(sessions: Sequence[dict[str, Any]], source: str, count: int, *, salt: str) -> list[dict[str, Any]]:
    """A fixed random sample of sessions (with at least two turns)."""
    pool = sorted((s for s in sessions if len(s["turns"]) >= 2), key=lambda s: s["sessionId"])
    return random.Random(f"{SEED}:{source}:{salt}").sample(pool, min(count, len(pool)))


def node_sample(
    nodes: dict[str, dict[str, SeenNode]], source: str, split: str, *, count: int = NODES_PER_SPLIT
) -> list[tuple[str, SeenNode]]:
    """A fixed random sample of (session, node) out of every node made on the sampled sessions.

    The order is drawn once over the sorted pool, so a node keeps its place when the extractor
    changes; the sample is the first ``count`` of the current extractor's nodes in that order.
    """
    pool = [(sid, node_id) for sid, found in nodes.items() for node_id in found]
    pool.sort(key=lambda pair: hashlib.sha256(f"{SEED}|{source}|{split}|{pair[0]}|{pair[1]}".encode()).hexdigest())
    return [(sid, nodes[sid][node_id]) for sid, node_id in pool[:count]]


def precision_nodes(
    data: Path, source: str, split: str, extract: Extract, settings: Settings, *, count: int = NODES_PER_SPLIT
) -> tuple[dict[str, dict[str, SeenNode]], list[tuple[str, SeenNode]]]:
    """Every node ``extract`` makes on the split's precision sessions, and the node sample."""
    sessions = load_sessions(data / f"{source}.{split}.jsonl")
    chosen = sampled_sessions(sessions, source, PRECISION_SESSIONS[source], salt=f"{split}:precision")
    found = {s["sessionId"]: extract_session(units_of(s, settings), extract, settings) for s in chosen}
    return found, node_sample(found, source, split, count=count)


def pool_sessions(data: Path, source: str) -> list[dict[str, Any]]:
    """The source's tuning pool: sessions outside its precision sample (:data:`POOL_SESSIONS`)."""
    sessions = load_sessions(data / f"{source}.fresh.jsonl")
    sampled = {s["sessionId"] for s in sampled_sessions(sessions, source, PRECISION_SESSIONS[source], salt="fresh:precision")}
    return sorted(
        (s for s in sessions if s["sessionId"] not in sampled and len(s["turns"]) >= 2),
        key=lambda s: hashlib.sha256(f"round5-pool|{s['sessionId']}".encode()).hexdigest(),
    )[: POOL_SESSIONS[source]]


def untouched_sessions(data: Path, source: str, split: str = "untouched") -> list[dict[str, Any]]:
    """The source's sessions of an untouched split (:data:`UNTOUCHED_SESSIONS` of them): in no
    earlier precision sample, tool-only sample, tuning pool or earlier untouched split."""
    if source == "swe":
        sessions = load_sessions(data / "swe.heldout.jsonl")
        used = {s["sessionId"] for name in ("heldout", "fresh")
                for s in sampled_sessions(load_sessions(data / f"swe.{name}.jsonl"), source, PRECISION_SESSIONS[source], salt=f"{name}:precision")}
    else:
        sessions = load_sessions(data / f"{source}.fresh.jsonl")
        used = {s["sessionId"] for s in sampled_sessions(sessions, source, PRECISION_SESSIONS[source], salt="fresh:precision")}
        used |= {s["sessionId"] for s in pool_sessions(data, source)}
    for earlier in UNTOUCHED_SALTS:
        if earlier == split:
            break
        used |= {s["sessionId"] for s in untouched_sessions(data, source, earlier)}
    order = list(UNTOUCHED_SALTS)
    pools = {pool for pool, first in LATER_POOLS.items() if order.index(first) <= order.index(split)}
    used |= {r["session"] for r in read_jsonl(NODE_LABELS) if r.get("pool") in pools}
    return sorted(
        (s for s in sessions if s["sessionId"] not in used and len(s["turns"]) >= 2),
        key=lambda s: hashlib.sha256(f"{UNTOUCHED_SALTS[split]}|{s['sessionId']}".encode()).hexdigest(),
    )[: UNTOUCHED_SESSIONS[source]]


def untouched_nodes(data: Path, source: str, extract: Extract, settings: Settings, split: str = "untouched") -> list[tuple[str, SeenNode]]:
    """An untouched split's node sample: :data:`UNTOUCHED_NODES` drawn at random from every node
    ``extract`` makes on the source's sessions of that split."""
    found = {s["sessionId"]: extract_session(units_of(s, settings), extract, settings) for s in untouched_sessions(data, source, split)}
    return node_sample(found, source, split, count=UNTOUCHED_NODES)


def pool_nodes(data: Path, source: str, extract: Extract, settings: Settings) -> list[tuple[str, SeenNode]]:
    """Every node ``extract`` makes on the source's tuning pool."""
    return [(s["sessionId"], n) for s in pool_sessions(data, source) for n in extract_session(units_of(s, settings), extract, settings).values()]


def evidence(node: SeenNode) -> int:
    """How much a session says about a node: distinct turns (at most 3), +1 if a ``user`` turn
    names it, +1 if tool output shows it too."""
    return min(len(node.turns), 3) + ("user" in node.roles) + bool(set(node.roles) & heuristic.TOOL_ROLES)


def evidence_tradeoff(labelled: Sequence[tuple[SeenNode, bool]]) -> list[dict[str, Any]]:
    """Precision and recall of the labelled tuning nodes if a code or name node needed at least
    each :data:`EVIDENCE_THRESHOLDS` of :func:`evidence` (files, URLs and issues always kept)."""
    useful = sum(v for _, v in labelled)
    rows = []
    for threshold in EVIDENCE_THRESHOLDS:
        kept = [v for node, v in labelled if node.type not in EVIDENCE_TYPES or evidence(node) >= threshold]
        rows.append({
            "min_evidence": threshold, "kept": len(kept), "precision": round(sum(kept) / len(kept), 3),
            "recall": round(sum(kept) / useful, 3), "noise_removed": len(labelled) - useful - (len(kept) - sum(kept)),
            "useful_lost": useful - sum(kept),
        })
    return rows


def halves(session_ids: Iterable[str]) -> dict[str, str]:
    """Each session of a halved source's precision sample → ``"tune"`` or ``"heldout"``."""
    ordered = sorted(session_ids, key=lambda sid: hashlib.sha256(f"round4|{sid}".encode()).hexdigest())
    cut = (len(ordered) + 1) // 2
    return {sid: "tune" if index < cut else "heldout" for index, sid in enumerate(ordered)}


def cmd_sample(args: argparse.Namespace) -> None:
    """Print the sampled nodes that have no label yet, for a person to label."""
    settings = Settings()
    labelled = {(r["session"], r["node"]) for r in read_jsonl(NODE_LABELS)}
    if args.tool_only:
        sample = tool_only_pool(args.data, args.split, settings)
    elif args.split in UNTOUCHED_SALTS:
        sample = untouched_nodes(args.data, args.source, heuristic.extract_heuristic, settings, args.split)
    else:
        extract = baseline_module(args.baseline_ref).extract_heuristic if args.before else heuristic.extract_heuristic
        _, sample = precision_nodes(args.data, args.source, args.split, extract, settings)
    for sid, node in sample:
        if (sid, node.id) not in labelled:
            print(json.dumps({"session": sid, "node": node.id, "roles": dict(node.roles), "quotes": node.quotes}, ensure_ascii=False))


def cmd_show(args: argparse.Namespace) -> None:
    """Print sampled conversations (for entity labelling), without any extractor output."""
    sessions = load_sessions(args.data / f"{args.source}.{args.split}.jsonl")
    for session in sampled_sessions(sessions, args.source, RECALL_CONVERSATIONS, salt=f"{args.split}:recall"):
        print(f"=== {session['sessionId']}")
        for turn in session["turns"]:
            print(f"{turn.get('role')}: {turn['text']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("report", "sample", "show"):
        command = sub.add_parser(name)
        command.add_argument("--data", type=Path, required=True, help="directory of converted <source>.<split>.jsonl")
        if name != "report":
            command.add_argument("--source", choices=SOURCES, required=True)
            command.add_argument("--split", choices=SPLITS, required=True)
            command.add_argument("--tool-only", action="store_true", help="the tool-only reference sample (swe)")
            command.add_argument("--before", action="store_true", help="sample the baseline extractor's nodes")
            command.add_argument("--baseline-ref", default="fb81ed7")
        else:
            command.add_argument("--baseline-ref", default="fb81ed7", help="git ref of the heuristic to compare with")
            command.add_argument("--splits", nargs="+", choices=SPLITS, default=["tune"])
            command.add_argument("--speed", action="store_true", help="also time both extractors")
            command.add_argument("--evidence", action="store_true", help="the evidence trade-off on the tuning material")
            command.add_argument("--nodes", type=int, default=NODES_PER_SPLIT, help="nodes sampled per split for precision")
    if argv is not None and not argv:  # from bench/run_all.py: the data are fetched by hand
        data = os.environ.get("REM_TRANSCRIPTS")
        if not data:
            print("skipped: set REM_TRANSCRIPTS to the converted transcripts (see this module's docstring)")
            return
        argv = ["report", "--data", data, "--splits", "tune", "heldout", "--speed"]
    args = parser.parse_args(argv)
    {"report": cmd_report, "sample": cmd_sample, "show": cmd_show}[args.command](args)


NEVER = 10**6
TOOL_THRESHOLDS = (1, 2, 3, 4, 6, NEVER)
TOOL_ONLY_SAMPLE = 100
SPEED_SESSIONS = {"friends": 400, "office": 400, "swe": 30}


def precision(labels: dict[tuple[str, str], bool], sample: Sequence[tuple[str, SeenNode]]) -> dict[str, Any]:
    """Useful share of the labelled nodes in a sample (and how many sampled nodes have a label)."""
    judged = [labels[(sid, node.id)] for sid, node in sample if (sid, node.id) in labels]
    return {"sampled": len(sample), "labelled": len(judged), "precision": round(sum(judged) / len(judged), 3) if judged else None}


def entity_rows(source: str, split: str) -> list[dict[str, Any]]:
    """The labelled conversations of a chat source's split (:data:`CHAT_ENTITIES`)."""
    return [r for r in read_jsonl(CHAT_ENTITIES) if r["source"] == source and r["split"] == split]


def entity_recall(data: Path, source: str, split: str, extract: Extract, settings: Settings) -> dict[str, Any]:
    """Share of the labelled entities of each conversation of a chat source that some node names
    (name or alias equal, case-insensitive); ``said`` counts only entities that are not a speaker
    of the session."""
    sessions = {s["sessionId"]: s for s in load_sessions(data / f"{source}.{split}.jsonl")}
    hits = total = said_hits = said_total = 0
    missed: list[str] = []
    rows = entity_rows(source, split)
    for row in rows:
        session = sessions[row["session"]]
        names = {n.name.casefold() for n in extract_session(units_of(session, settings), extract, settings).values()}
        roles = {str(t.get("role", "")).casefold() for t in session["turns"]}
        for entity in row["entities"]:
            forms = {f.casefold() for f in (entity["name"], *entity.get("aliases", ()))}
            found = bool(forms & names)
            hits += found
            total += 1
            if not forms & roles:
                said_hits += found
                said_total += 1
                if not found:
                    missed.append(entity["name"])
    return {
        "conversations": len(rows),
        "entities": total, "recall": round(hits / total, 3) if total else None,
        "said_entities": said_total, "said_recall": round(said_hits / said_total, 3) if said_total else None,
        "missed_said": missed[:15],
    }


def tool_only_pool(data: Path, split: str, settings: Settings) -> list[tuple[str, SeenNode]]:
    """A fixed random sample of the coding nodes seen only in tool output, every one of them kept
    (threshold 1): the reference for the tool-only trade-off."""
    found, _ = precision_nodes(data, "swe", split, partial(heuristic.extract_heuristic, tool_only_min_turns=1), settings)
    pool = [(sid, node_id) for sid, nodes in found.items() for node_id, node in nodes.items()
            if set(node.roles) <= heuristic.TOOL_ROLES]
    pool.sort(key=lambda pair: hashlib.sha256(f"{SEED}|tool-only|{split}|{pair[0]}|{pair[1]}".encode()).hexdigest())
    return [(sid, found[sid][node_id]) for sid, node_id in pool[:TOOL_ONLY_SAMPLE]]


def tool_only_tradeoff(data: Path, split: str, labels: dict[tuple[str, str], bool], settings: Settings) -> list[dict[str, Any]]:
    """Precision and recall among labelled tool-only nodes as the number of tool turns required
    to keep one varies (a node also named in prose is kept whatever the threshold)."""
    reference = [(node, labels[(sid, node.id)]) for sid, node in tool_only_pool(data, split, settings) if (sid, node.id) in labels]
    useful = sum(v for _, v in reference)
    rows = []
    for threshold in TOOL_THRESHOLDS:
        kept = [v for node, v in reference if len(node.turns) >= threshold]
        rows.append({
            "tool_only_min_turns": "never" if threshold == NEVER else threshold, "labelled": len(reference), "kept": len(kept),
            "precision": round(sum(kept) / len(kept), 3) if kept else None,
            "recall": round(sum(kept) / useful, 3) if useful else None,
        })
    return rows


def speed(data: Path, source: str, extractors: Mapping[str, Extract], settings: Settings) -> dict[str, Any]:
    """Turns/s of each extractor over the same units (planned once), timed in this process."""
    if source in POOL_SESSIONS:  # no tuning split: its tuning pool
        units = [u for s in pool_sessions(data, source) for u in units_of(s, settings)]
    else:
        sessions = sampled_sessions(load_sessions(data / f"{source}.tune.jsonl"), source, SPEED_SESSIONS[source], salt="speed")
        units = [u for s in sessions for u in units_of(s, settings)]
    turns = sum(len(u.turns) for u in units)
    timings: dict[str, float] = {}
    for _ in range(2):  # interleaved, best of two: the machine is shared
        for name, extract in extractors.items():
            started = time.perf_counter()
            for unit in units:
                extract(unit)
            elapsed = time.perf_counter() - started
            timings[name] = min(timings.get(name, elapsed), elapsed)
    result: dict[str, Any] = {"turns": turns}
    for name, elapsed in timings.items():
        result[f"{name}_turns_per_s"] = round(turns / elapsed)
    names = list(extractors)
    result["ratio"] = round(timings[names[0]] / timings[names[1]], 2)  # > 1: the second is faster
    return result


def tuning_nodes(data: Path, labels: dict[tuple[str, str], bool], extract: Extract, settings: Settings) -> list[tuple[str, SeenNode, bool]]:
    """The labelled coding nodes ``extract`` makes on the tuning material, with their session: the
    first :data:`TUNING_SWE_NODES` of ``swe/tune``'s sample, the tuning halves of the halved
    sources, aider's tuning pool."""
    _, sample = precision_nodes(data, "swe", "tune", extract, settings, count=TUNING_SWE_NODES)
    nodes = list(sample)
    for source in HALVED_SOURCES:
        found, _ = precision_nodes(data, source, "fresh", extract, settings)
        half_of = halves(found)
        nodes += [(sid, node) for sid, seen in found.items() if half_of[sid] == "tune" for node in seen.values()]
    for source in POOL_SESSIONS:
        nodes += pool_nodes(data, source, extract, settings)
    return [(sid, node, labels[(sid, node.id)]) for sid, node in nodes if (sid, node.id) in labels]


def tuning_material(data: Path, labels: dict[tuple[str, str], bool], extract: Extract, settings: Settings) -> list[tuple[SeenNode, bool]]:
    """The labelled coding nodes ``extract`` makes on the tuning material (:func:`tuning_nodes`)."""
    return [(node, useful) for _, node, useful in tuning_nodes(data, labels, extract, settings)]


def heldout_halves(data: Path, labels: dict[tuple[str, str], bool], extract: Extract, settings: Settings) -> list[tuple[SeenNode, bool]]:
    """The labelled nodes ``extract`` makes on the held-out halves' sampled nodes."""
    nodes: list[tuple[SeenNode, bool]] = []
    for source in HALVED_SOURCES:
        found, sample = precision_nodes(data, source, "fresh", extract, settings)
        half_of = halves(found)
        nodes += [(node, labels[(sid, node.id)]) for sid, node in sample if half_of[sid] == "heldout" and (sid, node.id) in labels]
    return nodes


def cmd_report(args: argparse.Namespace) -> None:
    """Print precision, recall, the tool-only trade-off and (``--speed``) turns/s as JSON."""
    settings = Settings()
    labels = {(r["session"], r["node"]): bool(r["useful"]) for r in read_jsonl(NODE_LABELS)}
    before = baseline_module(args.baseline_ref).extract_heuristic
    after = heuristic.extract_heuristic
    report: dict[str, Any] = {"baseline_ref": args.baseline_ref}
    for split in args.splits:
        if split in UNTOUCHED_SALTS:
            report.update({
                f"{source}/{split}": {f"precision_{name}": precision(labels, untouched_nodes(args.data, source, extract, settings, split))
                                        for name, extract in (("before", before), ("after", after))}
                for source in UNTOUCHED_SESSIONS
            })
            continue
        for source in SOURCES:
            if not (args.data / f"{source}.{split}.jsonl").exists():
                continue  # the fresh split is coding sessions only
            entry: dict[str, Any] = {}
            for name, extract in (("before", before), ("after", after)):
                found, sample = precision_nodes(args.data, source, split, extract, settings, count=args.nodes)
                entry[f"precision_{name}"] = precision(labels, sample)
                if source in HALVED_SOURCES:
                    half_of = halves(found)
                    for half in ("tune", "heldout"):
                        entry[f"precision_{name}_{half}_half"] = precision(labels, [(sid, n) for sid, n in sample if half_of[sid] == half])
                if source in POOL_SESSIONS and split == "fresh":
                    entry[f"precision_{name}_tuning_pool"] = precision(labels, pool_nodes(args.data, source, extract, settings))
            if source in CHAT_SOURCES:
                for name, extract in (("before", before), ("after", after)):
                    entry[f"entity_recall_{name}"] = entity_recall(args.data, source, split, extract, settings)
            elif source == "swe":
                entry["tool_only_tradeoff"] = tool_only_tradeoff(args.data, split, labels, settings)
            report[f"{source}/{split}"] = entry
    if args.evidence:
        report["evidence_tradeoff_tuning"] = evidence_tradeoff(tuning_material(args.data, labels, after, settings))
        # Reported, never used to choose: the threshold was decided on the tuning material (none).
        report["evidence_tradeoff_heldout_halves"] = evidence_tradeoff(heldout_halves(args.data, labels, after, settings))
    if args.speed:
        report["speed"] = {
            source: speed(args.data, source, {"before": before, "after": after}, settings)
            for source in SOURCES if (args.data / f"{source}.tune.jsonl").exists() or source in POOL_SESSIONS
        }
    print(json.dumps(report, indent=1, ensure_ascii=False))




if __name__ == "__main__":
    main()
