"""What typed each PERSON node of the tuning material (issue 11, ninth round).

    python -m bench.person_evidence list --data /tmp/q3/data2 > /tmp/pt/persons.jsonl
    python -m bench.person_evidence effect --data /tmp/q3/data2 --baseline-ref ea6e681

``list`` prints one JSON line per PERSON node the current offline extractor makes on every tuning
session — the Friends ``tune`` split (all scenes) and the coding tuning material (``swe/tune``, the
tuning halves of the halved sources, aider's tuning pool) — with the evidence that typed it: ``role``
(the node is a speaker of the session), else the kinds of :data:`heuristic.PERSON_EVIDENCE` its
mentions had (``speaker``: a speaker's name or first name written in a turn; ``greeting``, ``title``,
``i'm``: a stripped word before it; ``verb``: a person verb after it; ``lead`` / ``coding-lead``: a
word before it), and a summary line of counts per evidence. Labels (``bench/data/person_type_labels.jsonl``,
``{"source", "session", "node", "person": bool, "evidence"}``) judge such nodes by reading their lines.

``effect`` compares the extractor at ``--baseline-ref`` (loaded from git into this process) with the
current one on the labelled nodes: labelled mistypes no longer PERSON (fixed), labelled persons no
longer PERSON (lost), and what each became (another type, or no node).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_extract_quality as quality  # noqa: E402
from config import Settings  # noqa: E402
from pipelines.extract import heuristic  # noqa: E402
from pipelines.extract.model import semantic_node_id  # noqa: E402

PERSON_LABELS = quality.ROOT / "bench" / "data" / "person_type_labels.jsonl"


def tuning_sessions(data: Path, settings: Settings) -> Iterator[tuple[str, dict[str, Any]]]:
    """(source, session) of every tuning session: all chat tuning scenes, and the coding tuning
    material of :func:`bench_extract_quality.tuning_nodes` (whole sessions, not only sampled nodes)."""
    for session in quality.load_sessions(data / "friends.tune.jsonl"):
        yield "friends", session
    yield from (("swe", s) for s in quality.load_sessions(data / "swe.tune.jsonl"))
    for source in quality.HALVED_SOURCES:
        sessions = quality.load_sessions(data / f"{source}.fresh.jsonl")
        chosen = quality.sampled_sessions(sessions, source, quality.PRECISION_SESSIONS[source], salt="fresh:precision")
        half_of = quality.halves(s["sessionId"] for s in chosen)
        yield from ((source, s) for s in chosen if half_of[s["sessionId"]] == "tune")
    for source in quality.POOL_SESSIONS:
        yield from ((source, s) for s in quality.pool_sessions(data, source))


def person_evidence(session: dict[str, Any], settings: Settings) -> dict[str, dict[str, Any]]:
    """The session's PERSON nodes (after validation) → name, evidence kinds, turns they are seen in."""
    units = quality.units_of(session, settings)
    kept = {i: n for i, n in quality.extract_session(units, heuristic.extract_heuristic, settings).items() if n.type == "PERSON"}
    kinds: dict[str, set[str]] = {node_id: set() for node_id in kept}
    for unit in units:
        speakers = {t.number: name for t in unit.turns if (name := heuristic.speaker_name(t.role))}
        for name in speakers.values():
            if (node_id := semantic_node_id("PERSON", name)) in kinds:
                kinds[node_id].add("role")
        for _, mentions in heuristic.mentions_per_turn(unit, speakers=speakers):
            for mention in mentions:
                if mention.node_type == "PERSON" and mention.evidence and (node_id := semantic_node_id("PERSON", mention.name)) in kinds:
                    kinds[node_id].add(mention.evidence)
    return {
        node_id: {"node": node_id, "name": node.name, "evidence": sorted(kinds[node_id]), "turns": len(node.turns)}
        for node_id, node in kept.items()
    }


def evidence_class(kinds: Sequence[str]) -> str:
    """The strongest evidence of a node: its role, else the first of :data:`heuristic.PERSON_EVIDENCE` it has."""
    if "role" in kinds:
        return "role"
    return next((k for k in heuristic.PERSON_EVIDENCE if k in kinds), "other")


def cmd_list(args: argparse.Namespace) -> None:
    settings = Settings()
    counts: Counter[str] = Counter()
    for source, session in tuning_sessions(args.data, settings):
        for row in person_evidence(session, settings).values():
            counts[f"{source}:{evidence_class(row['evidence'])}"] += 1
            print(json.dumps({"source": source, "session": session["sessionId"], **row}, ensure_ascii=False))
    print(json.dumps({"summary": dict(sorted(counts.items()))}))


def person_types(data: Path, extract: quality.Extract, settings: Settings, sessions: set[str]) -> dict[tuple[str, str], str]:
    """(session, folded name) → type of every semantic node ``extract`` makes on ``sessions``."""
    found: dict[tuple[str, str], str] = {}
    for _, session in tuning_sessions(data, settings):
        if session["sessionId"] in sessions:
            for node in quality.extract_session(quality.units_of(session, settings), extract, settings).values():
                found.setdefault((session["sessionId"], node.name.casefold()), node.type)
    return found


def cmd_effect(args: argparse.Namespace) -> None:
    settings = Settings()
    labels = quality.read_jsonl(PERSON_LABELS)
    sessions = {r["session"] for r in labels}
    before = person_types(args.data, quality.baseline_module(args.baseline_ref).extract_heuristic, settings, sessions)
    after = person_types(args.data, heuristic.extract_heuristic, settings, sessions)
    rows = []
    for r in labels:
        key = (r["session"], r["node"].partition(":")[2].casefold())
        if before.get(key) != "PERSON" or after.get(key) == "PERSON":
            continue
        rows.append({"node": r["node"], "session": r["session"], "person": r["person"], "now": after.get(key, "no node")})
    print(json.dumps({
        "labelled": len(labels), "mistypes": sum(not r["person"] for r in labels),
        "mistypes_fixed": sum(not r["person"] for r in rows), "persons_lost": sum(r["person"] for r in rows), "changed": rows,
    }, ensure_ascii=False))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="every PERSON node of the tuning material, with its evidence")
    listing.add_argument("--data", type=Path, required=True, help="directory of converted <source>.<split>.jsonl")
    listing.set_defaults(run=cmd_list)
    effect = commands.add_parser("effect", help="labelled PERSON nodes the current extractor retypes or drops")
    effect.add_argument("--data", type=Path, required=True)
    effect.add_argument("--baseline-ref", required=True, help="git ref of the heuristic to compare with")
    effect.set_defaults(run=cmd_effect)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
