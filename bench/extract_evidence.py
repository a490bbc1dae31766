"""What else a coding chunk says about a name, and whether it separates noise (issue 11, seventh round).

The offline extractor keeps a code name that a person or the agent writes once; on the labelled
tuning material such a one-off is useful about half the time. This module measures kinds of
evidence no rule used before, per node and chunk, and what a rule built on each would do to the
labelled tuning nodes (never to a held-out or untouched split):

- **turn salience**: how many distinct names the turn that shows the name yields (a name in a
  long dump is incidental, one of few in a short answer is what the session is about);
- **agent action**: where in the agent's message the name is (:mod:`pipelines.extract.message_parts`)
  — its prose, the command line it runs, an edit it makes (changed lines or unchanged context), a
  quoted code block; versus a user turn or tool output;
- **task**: in a user turn (the issue or request);
- **provenance**: imported (``from m import Name``, ``import m``) from a package that is no
  directory of any path the chunk shows (a library's name, not the project's).

    python -m bench.extract_evidence --data /tmp/q3/data2 [--material untouched7]

prints the table of candidates: labelled noise removed / labelled useful lost (a session's node is
removed only when every chunk that keeps it would drop it). The tuning material is the sixth
round's plus :func:`salience_pool` (nodes shown once in a busy turn, which it lacked).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_extract_quality as quality  # noqa: E402
from config import Settings  # noqa: E402
from pipelines.extract import heuristic  # noqa: E402
from pipelines.extract.message_parts import agent_zones, zone_at  # noqa: E402
from pipelines.extract.model import WorkUnit, semantic_node_id, validate_extraction  # noqa: E402

CODE_TYPES = frozenset({"CLASS", "METHOD", "TEST"})
# An import line, also as a file view shows it (`  12 from x import y`, `12│from x import y`).
_LINE_PREFIX = r"^[ \t>+\-\d│|:]*"
_IMPORT_FROM = re.compile(_LINE_PREFIX + r"from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_IMPORT = re.compile(_LINE_PREFIX + r"import[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*)", re.M)
_DIRECTORY = re.compile(r"[\w.-]+(?=/)")


@dataclass(slots=True)
class NameEvidence:
    """What one chunk shows of one name."""

    type: str
    name: str
    kinds: set[str] = field(default_factory=set)  # user, prose, command, edit, edit-context, quote, tool
    turn_names: dict[int, int] = field(default_factory=dict)  # turn number → distinct names it yields
    imported_from: str | None = None
    library_import: bool = False

    @property
    def turns(self) -> int:
        return len(self.turn_names)

    @property
    def salience(self) -> int:
        """Names yielded by the busiest turn that shows it."""
        return max(self.turn_names.values())


def _imports(unit: WorkUnit) -> tuple[dict[str, str], set[str]]:
    """Names the chunk imports → their module, and every directory name its paths show."""
    imported: dict[str, str] = {}
    directories: set[str] = set()
    for turn in unit.turns:
        for match in heuristic._PATH.finditer(turn.text):
            directories.update(_DIRECTORY.findall(match.group(0)))
        for match in _IMPORT_FROM.finditer(turn.text):
            for part in re.split(r"[,()\n]", match.group(2)):
                words = part.split()
                name = words[-1] if len(words) == 3 and words[1] == "as" else (words[0] if words else "")
                if re.fullmatch(r"\w+", name):
                    imported.setdefault(name, match.group(1))
        for match in _IMPORT.finditer(turn.text):
            for part in match.group(1).split(","):
                words = part.split()
                if words:
                    imported.setdefault(words[-1] if len(words) == 3 else words[0].split(".")[0], words[0])
    return imported, directories


def unit_evidence(unit: WorkUnit) -> dict[str, NameEvidence]:
    """Every name the extractor finds in a chunk (kept or not), by node id, with its evidence."""
    found: dict[str, NameEvidence] = {}
    for turn, mentions in heuristic.mentions_per_turn(unit):
        role = turn.role or ""
        ids = {node_id for m in mentions if (node_id := semantic_node_id(m.node_type, m.name))}
        zones = agent_zones(turn.text) if role in heuristic._AGENT_ROLES else []
        for mention in mentions:
            node_id = semantic_node_id(mention.node_type, mention.name)
            if node_id is None:
                continue
            if role in heuristic.TOOL_ROLES or mention.pasted:
                kind = "tool"
            elif role in heuristic._AGENT_ROLES:
                kind = zone_at(zones, mention.start)
            else:
                kind = "user"
            evidence = found.setdefault(node_id, NameEvidence(mention.node_type, mention.name))
            evidence.kinds.add(kind)
            evidence.turn_names[turn.number] = len(ids)
    imported, directories = _imports(unit)
    for evidence in found.values():
        module = imported.get(evidence.name.split(".")[0])
        evidence.imported_from = module
        evidence.library_import = module is not None and not module.startswith(".") and module.split(".")[0] not in directories
    return found


Predicate = Callable[[str, NameEvidence], bool]


def _said(evidence: NameEvidence) -> bool:
    return bool(evidence.kinds & {"user", "prose"})


def candidates() -> list[tuple[str, Predicate]]:
    """The rules measured: each says, for a node a chunk keeps (its type, its evidence), "no node"."""
    rules: list[tuple[str, Predicate]] = []
    for k in (5, 10, 15, 20, 30):
        rules.append((f"salience: code name in one turn, which yields > {k} names",
                      lambda t, e, k=k: t in CODE_TYPES and e.turns == 1 and e.salience > k))
    for k in (10, 20):
        rules.append((f"salience: any name incl. files, one turn yielding > {k}",
                      lambda t, e, k=k: (t in CODE_TYPES or t == "FILE") and e.turns == 1 and e.salience > k))
        rules.append((f"salience + action: code name, one turn yielding > {k}, in no prose, user turn or command",
                      lambda t, e, k=k: t in CODE_TYPES and e.turns == 1 and e.salience > k and not e.kinds & {"user", "prose", "command"}))
    for k in (10, 15, 20, 30):
        rules.append((f"salience + action: any name in one turn yielding > {k} names, in no edit (changed or context lines)",
                      lambda t, e, k=k: e.turns == 1 and e.salience > k and not e.kinds & {"edit", "edit-context"}))
        rules.append((f"salience + action + task: any name in one turn yielding > {k} names, in no edit and no user turn",
                      lambda t, e, k=k: e.turns == 1 and e.salience > k and not e.kinds & {"edit", "edit-context", "user"}))
        rules.append((f"salience: any name in one turn yielding > {k} names", lambda t, e, k=k: e.turns == 1 and e.salience > k))
    rules.append(("salience + action + task: code name or file in one tool-output turn yielding > 20 names, in no agent message or user turn",
                  lambda t, e: (t in CODE_TYPES or t == "FILE") and e.turns == 1 and e.salience > 20 and e.kinds == {"tool"}))
    rules += [
        ("action: code name in no user turn nor agent prose (only code, commands, tool output)",
         lambda t, e: t in CODE_TYPES and not _said(e)),
        ("action: … and in one turn", lambda t, e: t in CODE_TYPES and e.turns == 1 and not _said(e)),
        ("action: code name in no command, edit, user turn or prose (quoted code, tool output)",
         lambda t, e: t in CODE_TYPES and not e.kinds & {"user", "prose", "command", "edit", "edit-context"}),
        ("action: code name in no command line, user turn or prose", lambda t, e: t in CODE_TYPES and not e.kinds & {"user", "prose", "command"}),
        ("action: code name only inside edits", lambda t, e: t in CODE_TYPES and e.kinds <= {"edit", "edit-context"}),
        ("action: … in one turn", lambda t, e: t in CODE_TYPES and e.turns == 1 and e.kinds <= {"edit", "edit-context"}),
        ("action: code name only on an edit's unchanged context lines (and tool output)",
         lambda t, e: t in CODE_TYPES and e.kinds <= {"edit-context", "tool"}),
        ("action: file in one turn, in no prose, user turn or command", lambda t, e: t == "FILE" and e.turns == 1 and not e.kinds & {"user", "prose", "command"}),
        ("task: code name in no user turn", lambda t, e: t in CODE_TYPES and "user" not in e.kinds),
        ("task: … and in one turn", lambda t, e: t in CODE_TYPES and e.turns == 1 and "user" not in e.kinds),
        ("task: code name in one user turn only", lambda t, e: t in CODE_TYPES and e.turns == 1 and e.kinds == {"user"}),
        ("provenance: code name imported from a package outside the chunk's paths", lambda t, e: t in CODE_TYPES and e.library_import),
        ("provenance: … in at most two turns", lambda t, e: t in CODE_TYPES and e.library_import and e.turns <= 2),
        ("provenance: … in no prose or user turn", lambda t, e: t in CODE_TYPES and e.library_import and not _said(e)),
    ]
    return rules


def session_chunks(session: dict[str, Any], settings: Settings) -> list[tuple[dict[str, str], dict[str, NameEvidence]]]:
    """Per chunk of a session: the nodes the extractor keeps (id → type, after validation) and the
    evidence of every name."""
    chunks = []
    for unit in quality.units_of(session, settings):
        kept = validate_extraction(heuristic.extract_heuristic(unit), unit, semantic_types=settings.semantic_types)
        chunks.append(({node.id: node.type for node in kept.nodes}, unit_evidence(unit)))
    return chunks


def removes(rule: Predicate, chunks: Sequence[tuple[dict[str, str], dict[str, NameEvidence]]], node_id: str) -> bool:
    """Whether ``rule`` removes a session's node: every chunk that keeps it drops it."""
    keeping = [(kept[node_id], found[node_id]) for kept, found in chunks if node_id in kept and node_id in found]
    return bool(keeping) and all(rule(node_type, evidence) for node_type, evidence in keeping)


SALIENCE_POOL_BAND = (10, 20)  # nodes shown in one turn of more than 10 names; 30 up to 20, 30 beyond
SALIENCE_POOL_PER_BAND = 30


def salience_pool(data: Path, settings: Settings) -> list[tuple[str, str, int]]:
    """The seventh round's extra tuning material for turn salience (the tuning material held no
    labelled node shown only in a busy turn): ``(session, node id, names of its busiest turn)``
    for nodes the extractor keeps that a one-busy-turn rule would remove, on tuning sessions
    outside every sample — ``swe/tune`` minus its precision sample, aider's sessions outside its
    precision sample, pool and untouched splits — ordered by SHA-256 of
    ``round7-salience|<session>|<node>``, :data:`SALIENCE_POOL_PER_BAND` per band."""
    swe = quality.load_sessions(data / "swe.tune.jsonl")
    used = {s["sessionId"] for s in quality.sampled_sessions(swe, "swe", quality.PRECISION_SESSIONS["swe"], salt="tune:precision")}
    aider = quality.load_sessions(data / "aider.fresh.jsonl")
    used |= {s["sessionId"] for s in quality.sampled_sessions(aider, "aider", quality.PRECISION_SESSIONS["aider"], salt="fresh:precision")}
    used |= {s["sessionId"] for s in quality.pool_sessions(data, "aider")}
    for split in ("untouched", "untouched7", "untouched8"):  # the splits drawn before this pool
        used |= {s["sessionId"] for s in quality.untouched_sessions(data, "aider", split)}
    found: list[tuple[str, str, int]] = []
    for session in (s for s in swe + aider if s["sessionId"] not in used and len(s["turns"]) >= 2):
        chunks = [c for c, unit in zip(session_chunks(session, settings), quality.units_of(session, settings)) if heuristic._is_coding_unit(unit)]
        for node_id in {node_id for kept, _ in chunks for node_id in kept}:
            busiest = min(e.salience if e.turns == 1 else 0 for kept, evidence in chunks if node_id in kept and (e := evidence.get(node_id)))
            if busiest > SALIENCE_POOL_BAND[0]:
                found.append((session["sessionId"], node_id, busiest))
    order = sorted(found, key=lambda row: hashlib.sha256(f"round7-salience|{row[0]}|{row[1]}".encode()).hexdigest())
    low = [row for row in order if row[2] <= SALIENCE_POOL_BAND[1]][:SALIENCE_POOL_PER_BAND]
    return low + [row for row in order if row[2] > SALIENCE_POOL_BAND[1]][:SALIENCE_POOL_PER_BAND]


def labelled_material(data: Path, material: str, settings: Settings) -> tuple[list[tuple[str, quality.SeenNode, bool]], dict[str, dict[str, Any]]]:
    """The labelled nodes (session, node, useful) the current extractor makes on ``material`` —
    ``tune`` (the tuning material) or an untouched split's sample — and their sessions by id."""
    labels = {(r["session"], r["node"]): bool(r["useful"]) for r in quality.read_jsonl(quality.NODE_LABELS)}
    if material == "tune":
        labelled = quality.tuning_nodes(data, labels, heuristic.extract_heuristic, settings)
        labelled += [(sid, quality.SeenNode(node_id, node_id.partition(":")[0], node_id.partition(":")[2]), labels[(sid, node_id)])
                     for sid, node_id, _ in salience_pool(data, settings) if (sid, node_id) in labels]
        sessions = {s["sessionId"]: s for name in ("swe.tune", "sweagent.fresh", "aider.fresh") for s in quality.load_sessions(data / f"{name}.jsonl")}
        return labelled, sessions
    labelled, sessions = [], {}
    for source in quality.UNTOUCHED_SESSIONS:
        sessions.update({s["sessionId"]: s for s in quality.untouched_sessions(data, source, material)})
        sample = quality.untouched_nodes(data, source, heuristic.extract_heuristic, settings, material)
        labelled += [(sid, node, labels[(sid, node.id)]) for sid, node in sample if (sid, node.id) in labels]
    return labelled, sessions


def candidate_table(data: Path, settings: Settings, material: str = "tune") -> list[dict[str, Any]]:
    """Each candidate's effect on labelled material (its nodes as the current extractor makes
    them): labelled noise removed, labelled useful lost, and the lost names. Rules are chosen on
    ``tune`` only; an untouched split is reported after the choice is committed."""
    labelled, sessions = labelled_material(data, material, settings)
    chunks = {sid: session_chunks(sessions[sid], settings) for sid in {sid for sid, _, _ in labelled}}
    rows = []
    for name, rule in candidates():
        hit = [(node.id, useful) for sid, node, useful in labelled if removes(rule, chunks[sid], node.id)]
        noise = sum(not useful for _, useful in hit)
        lost = [node_id for node_id, useful in hit if useful]
        rows.append({
            "candidate": name, "noise_removed": noise, "useful_lost": len(lost),
            "worth_it": noise > 0 and len(lost) * 3 <= noise, "lost": lost[:6],
        })
    return [{"labelled": len(labelled), "useful": sum(u for _, _, u in labelled)}, *rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="directory of converted <source>.<split>.jsonl")
    parser.add_argument("--material", default="tune", choices=("tune", *quality.UNTOUCHED_SALTS),
                        help="tune: the tuning material (choose here); an untouched split only after the choice is committed")
    args = parser.parse_args(argv)
    for row in candidate_table(args.data, Settings(), args.material):
        print(json.dumps(row, ensure_ascii=False))


if __name__ == "__main__":
    main()
