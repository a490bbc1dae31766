"""What a heuristic change does to the tuning material, before any held-out print (issue 11, eighth round).

    python -m bench.extract_changes --data /tmp/q3/data2 --baseline-ref ef28da1

compares the offline extractor at ``--baseline-ref`` (loaded from git into this process) with the
current one on tuning material only, and prints JSON lines:

- ``coding``: the labelled tuning nodes of :func:`bench.extract_evidence.labelled_material` (the
  baseline's) that the current extractor no longer makes in their session — labelled noise removed,
  labelled useful lost — and those it makes under another type (retyped);
- ``chat``: every name whose node changes on the chat tuning split (all its scenes, not only the
  labelled ones): ``-`` the baseline's node, ``+`` the current one, per scene, for a person to judge
  (a glued word dropped, a type changed), and the labelled precision / entity recall of both.

With ``--printed-except SPLIT`` (issue 11, thirteenth round) the coding material is every labelled
coding node of every split already printed — all but ``SPLIT``, the untouched sample not yet read —
that the baseline makes, with the precision and recall of the useful before and after.

Rules are chosen from these figures; the untouched and held-out splits are printed only after the
choice is committed (``bench.bench_extract_quality report``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_extract_quality as quality  # noqa: E402
from bench import extract_evidence  # noqa: E402
from config import Settings  # noqa: E402
from pipelines.extract import heuristic  # noqa: E402

CODING_SOURCES = ("swe.tune", "sweagent.fresh", "aider.fresh")


def _name_of(node_id: str) -> str:
    return node_id.partition(":")[2].casefold()


def printed_nodes(sessions: Mapping[str, dict[str, Any]], before: quality.Extract, settings: Settings, *, unread: str) -> list[tuple[str, quality.SeenNode, bool]]:
    """Every labelled coding node outside the split ``unread`` that ``before`` makes in its
    session (``sessions``: :func:`bench.bench_extract_quality.labelled_coding_sessions`), once each."""
    labels = {(r["session"], r["node"]): bool(r["useful"]) for r in quality.read_jsonl(quality.NODE_LABELS)
              if r["source"] in quality.LABELLED_CODING_FILES and r.get("split") != unread}
    made = {sid: quality.extract_session(quality.units_of(sessions[sid], settings), before, settings) for sid in {sid for sid, _ in labels}}
    return [(sid, made[sid][node_id], useful) for (sid, node_id), useful in labels.items() if node_id in made[sid]]


def coding_changes(data: Path, before: quality.Extract, after: quality.Extract, settings: Settings, *, unread: str | None = None) -> dict[str, Any]:
    """The baseline's labelled tuning nodes (with ``unread``, every printed one: :func:`printed_nodes`)
    the current extractor drops or retypes."""
    if unread is not None:
        sessions = quality.labelled_coding_sessions(data)
        labelled = printed_nodes(sessions, before, settings, unread=unread)
    else:
        labels = {(r["session"], r["node"]): bool(r["useful"]) for r in quality.read_jsonl(quality.NODE_LABELS)}
        labelled = quality.tuning_nodes(data, labels, before, settings)
        labelled += [(sid, quality.SeenNode(node_id, *node_id.split(":", 1)), labels[(sid, node_id)])
                     for sid, node_id, _ in extract_evidence.salience_pool(data, settings) if (sid, node_id) in labels]
        sessions = {s["sessionId"]: s for name in CODING_SOURCES for s in quality.load_sessions(data / f"{name}.jsonl")}
    now = {sid: quality.extract_session(quality.units_of(sessions[sid], settings), after, settings) for sid in {sid for sid, _, _ in labelled}}
    removed: list[tuple[str, str, bool]] = []
    retyped: list[tuple[str, str, list[str], bool]] = []
    for sid, node, useful in labelled:
        if node.id in now[sid]:
            continue
        other = [i for i in now[sid] if _name_of(i) == _name_of(node.id)]
        if other:
            retyped.append((sid, node.id, other, useful))
        else:
            removed.append((sid, node.id, useful))
    useful = sum(u for *_, u in labelled)
    lost = sum(u for *_, u in removed)
    kept = len(labelled) - len(removed)
    return {
        "labelled": len(labelled), "precision_before": round(useful / len(labelled), 3) if labelled else None,
        "precision_after": round((useful - lost) / kept, 3) if kept else None, "recall_after": round((useful - lost) / useful, 3) if useful else None,
        "noise_removed": len(removed) - lost, "useful_lost": lost, "removed": removed, "retyped": retyped,
    }


def chat_changes(data: Path, before: quality.Extract, after: quality.Extract, settings: Settings, split: str = "tune") -> dict[str, Any]:
    """Every node that differs between the two extractors on the chat split's scenes, and the
    labelled precision and entity recall of each."""
    changes: list[str] = []
    for session in quality.load_sessions(data / f"friends.{split}.jsonl"):
        units = quality.units_of(session, settings)
        old = set(quality.extract_session(units, before, settings))
        new = set(quality.extract_session(units, after, settings))
        changes += [f"- {node_id} {session['sessionId']}" for node_id in sorted(old - new)]
        changes += [f"+ {node_id} {session['sessionId']}" for node_id in sorted(new - old)]
    labels = {(r["session"], r["node"]): bool(r["useful"]) for r in quality.read_jsonl(quality.NODE_LABELS)}
    figures = {}
    for name, extract in (("before", before), ("after", after)):
        _, sample = quality.precision_nodes(data, "friends", split, extract, settings)
        figures[name] = {"precision": quality.precision(labels, sample),
                         "entity_recall": quality.entity_recall(data, "friends", split, extract, settings)["recall"]}
    return {"split": split, **figures, "changes": changes}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="directory of converted <source>.<split>.jsonl")
    parser.add_argument("--baseline-ref", required=True, help="git ref of the heuristic to compare with")
    parser.add_argument("--printed-except", metavar="SPLIT", help="coding material: every labelled split but this unread one")
    args = parser.parse_args(argv)
    settings = Settings()
    before = quality.baseline_module(args.baseline_ref).extract_heuristic
    coding = coding_changes(args.data, before, heuristic.extract_heuristic, settings, unread=args.printed_except)
    print(json.dumps({"coding": coding}, ensure_ascii=False))
    print(json.dumps({"chat": chat_changes(args.data, before, heuristic.extract_heuristic, settings)}, ensure_ascii=False))


if __name__ == "__main__":
    main()
