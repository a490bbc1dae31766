"""The person context of the labelled extension pairs (issue 11, seventh round): for each pair
collected from a run (``"round": 6`` in bench/data/identity_real_pairs.jsonl, field ``run``), the
PERSON nodes that run's graph holds whose names share a word with either name of the pair — the
people the graph knows (speakers of its sessions above all: a speaker's role is a PERSON node, and
the first name said in a scene they speak in is its alias, ``Ross`` on ``Ross Geller``).

    python bench/identity_context.py friends-tune=DIR friends-heldout=DIR swe-tune=DIR --out bench/data/identity_pair_persons.jsonl
    python bench/identity_context.py friends-tune=DIR friends-heldout=DIR --signals extension-tuning   # what each candidate context does on one part

``DIR``: the data dir of the run the pairs were collected from (``rem-cycle import`` + ``--once``
until digested; bench/RESULTS.md, sixth round). Deterministic and read-only; the labels are not
read when writing, and only the given part's labels with ``--signals``. The file holds names only,
one line per pair: ``{"run", "type", "existing", "incoming", "persons": [{"id", "name", "aliases"}]}``;
bench/bench_identity.py puts those PERSON nodes beside the pair's existing node (setting ``persons``).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.identity import NAME_PREPOSITIONS, NAME_TITLES, prose_key  # noqa: E402

LABELS = Path(__file__).resolve().parent / "data" / "identity_real_pairs.jsonl"
CONTEXT = Path(__file__).resolve().parent / "data" / "identity_pair_persons.jsonl"
# The leading words the candidates below drop, one kind at a time: the rule's own lists.
PREPOSITIONS, TITLES = NAME_PREPOSITIONS, NAME_TITLES


def extension_rows(labels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The labelled pairs that came from a run: the sixth round's extension pairs, and the seventh
    round's audit of the ``person`` rule's links (split ``person-audit``)."""
    return [r for r in labels if r.get("round") in (6, 7) and r.get("run")]


def persons_of(data_dir: Path) -> list[dict[str, Any]]:
    """Every PERSON node of a run's graph: id, name, aliases, and whether it is a speaker."""
    db = sqlite3.connect(f"file:{data_dir / 'graph.sqlite3'}?mode=ro", uri=True)
    out = []
    for node_id, name, props in db.execute("SELECT id, name, properties FROM nodes WHERE label = 'PERSON' ORDER BY id"):
        properties = json.loads(props)
        aliases = [a for a in properties.get("aliases", []) if isinstance(a, str)]
        out.append({"id": node_id, "name": name, "aliases": aliases, "speaker": "speaker" in properties.get("tags", [])})
    db.close()
    return out


def context(runs: dict[str, Path], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair with the PERSON nodes of its run sharing a word with either of its names."""
    people: dict[str, tuple[list[dict[str, Any]], dict[str, set[int]]]] = {}
    out = []
    for row in rows:
        run = row["run"]
        if run not in runs:
            continue
        if run not in people:
            persons = persons_of(runs[run])
            by_word: dict[str, set[int]] = defaultdict(set)
            for number, person in enumerate(persons):
                for form in (person["name"], *person["aliases"]):
                    for word in prose_key("PERSON", form).split():
                        by_word[word].add(number)
            people[run] = (persons, by_word)
        persons, by_word = people[run]
        words = {w for side in ("existing", "incoming") for w in prose_key(row["type"], row[side]["name"]).split()}
        chosen = sorted(set().union(*(by_word.get(w, set()) for w in words)))
        out.append({
            "run": run, "type": row["type"], "existing": row["existing"]["name"], "incoming": row["incoming"]["name"],
            "persons": [{"id": persons[n]["id"], "name": persons[n]["name"], "aliases": persons[n]["aliases"], "speaker": persons[n]["speaker"]} for n in chosen],
        })
    return out


def load_context(path: Path = CONTEXT) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    """(run, type, existing name, incoming name) → the PERSON nodes of that pair's context."""
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(r["run"], r["type"], r["existing"], r["incoming"]): r["persons"] for r in rows}


def own_context(row: dict[str, Any], persons: dict[tuple[str, str, str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The PERSON nodes of a pair's context, without the pair's own nodes: for a PERSON pair, the
    run's nodes that carry either of its names are its two ends (or the one they were merged into),
    no third witness."""
    found = persons.get((row["run"], row["type"], row["existing"]["name"], row["incoming"]["name"]), [])
    if row["type"] != "PERSON":
        return found
    ends = {prose_key("PERSON", row[side]["name"]) for side in ("existing", "incoming")}
    return [p for p in found if not (ends & _forms(p))]


def _forms(person: dict[str, Any]) -> set[str]:
    return {prose_key("PERSON", f) for f in (person["name"], *person["aliases"], person["id"].partition(":")[2])}


def _core(words: list[str], leads: frozenset[str]) -> list[str]:
    return words[1:] if len(words) > 1 and words[0] in leads else words


def _sub_run(short: list[str], long: list[str]) -> bool:
    return 0 < len(short) < len(long) and any(long[i : i + len(short)] == short for i in range(len(long) - len(short) + 1))


def signals(rows: list[dict[str, Any]], persons: dict[tuple[str, str, str, str], list[dict[str, Any]]], *, part: str) -> list[tuple[str, int, int]]:
    """What each candidate person context would link on one part's labelled pairs: (context, pairs
    linked, same among them). ``evidence``: one PERSON node, not either end of the pair, has the
    shorter name and the longer (after the leading word is dropped) among its names, and no other
    name of it extends the shorter."""
    mine = [r for r in rows if r["split"] == part]

    def evidence(row: dict[str, Any], leads: frozenset[str], *, speakers_only: bool = False, need_person: bool = True) -> bool:
        kind = row["type"]
        short, long = sorted((row["existing"]["name"], row["incoming"]["name"]), key=lambda n: len(prose_key(kind, n).split()))
        s, c = prose_key(kind, short).split(), _core(prose_key(kind, long).split(), leads)
        if not (s == c or _sub_run(s, c)):
            return False
        if not need_person:
            return s == c
        found = [p for p in own_context(row, persons)
                 if (p["speaker"] or not speakers_only) and {" ".join(s), " ".join(c)} <= _forms(p)]
        if s == c:
            return bool(found)
        if len(found) != 1:
            return False
        extending = {f for f in _forms(found[0]) if _sub_run(s, f.split())}
        return extending == {" ".join(c)}

    contexts = {
        "both names are names of one PERSON node (no leading word dropped)": lambda r: evidence(r, frozenset()),
        "... of one speaker's PERSON node": lambda r: evidence(r, frozenset(), speakers_only=True),
        "a leading preposition dropped, the rest is the shorter name (no person)": lambda r: evidence(r, PREPOSITIONS, need_person=False),
        "a leading title dropped, the rest is the shorter name (no person)": lambda r: evidence(r, TITLES, need_person=False),
        "a leading preposition dropped, then one PERSON node": lambda r: evidence(r, PREPOSITIONS),
        "a leading title dropped, then one PERSON node": lambda r: evidence(r, TITLES),
        "a leading preposition or title dropped, then one PERSON node (the rule)": lambda r: evidence(r, PREPOSITIONS | TITLES),
    }
    return [(name, len(hit := [r for r in mine if rule(r)]), sum(r["same"] for r in hit)) for name, rule in contexts.items()]


def speaker_signals(runs: dict[str, Path], rows: list[dict[str, Any]], *, part: str) -> list[tuple[str, int, int]]:
    """What the session's speakers would link on one part's labelled pairs, read from the run's
    graph (a speaker: a turn's role that is a person's name, :func:`pipelines.extract.heuristic.speaker_name`):
    the longer name is a speaker of a session the shorter is said in; the shorter is one word,
    the first or last word of exactly one speaker of such a session."""
    from pipelines.extract.heuristic import speaker_name

    graphs: dict[str, tuple[dict[tuple[str, str], str], dict[str, set[str]], dict[str, set[str]]]] = {}
    found: dict[str, list[bool]] = {"the longer name is a speaker of a session the shorter is said in": [],
                                    "the shorter (one word) is the first or last word of exactly one speaker of such a session": []}
    for row in rows:
        if row["split"] != part or row["run"] not in runs:
            continue
        if row["run"] not in graphs:
            db = sqlite3.connect(f"file:{runs[row['run']] / 'graph.sqlite3'}?mode=ro", uri=True)
            named = {(label, name): i for i, label, name in db.execute("SELECT id, label, name FROM nodes")}
            grounded: dict[str, set[str]] = defaultdict(set)
            for node_id, anchor in db.execute("SELECT node_id, anchor FROM node_points"):
                grounded[node_id].add(anchor)
            speakers: dict[str, set[str]] = defaultdict(set)
            for session, role in db.execute("SELECT DISTINCT session_id, role FROM recall_turns"):
                if (name := speaker_name(role)) is not None:
                    speakers[session].add(prose_key("PERSON", name))
            db.close()
            graphs[row["run"]] = (named, grounded, speakers)
        named, grounded, speakers = graphs[row["run"]]
        kind = row["type"]
        short, long = sorted((row["existing"]["name"], row["incoming"]["name"]), key=lambda n: len(prose_key(kind, n).split()))
        s, l = prose_key(kind, short), prose_key(kind, long)
        sessions = grounded[named[(kind, short)]]
        if any(l in speakers[a] for a in sessions):
            found["the longer name is a speaker of a session the shorter is said in"].append(row["same"])
        if " " not in s and any(len([p for p in speakers[a] if " " in p and s in (p.split()[0], p.split()[-1])]) == 1 for a in sessions):
            found["the shorter (one word) is the first or last word of exactly one speaker of such a session"].append(row["same"])
    return [(name, len(labels), sum(labels)) for name, labels in found.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="SOURCE=DATA_DIR of the runs the pairs were collected from")
    parser.add_argument("--out", type=Path, help="write the context file here")
    parser.add_argument("--signals", metavar="PART", help="what each candidate context does on this part's labelled pairs (reads --context)")
    parser.add_argument("--context", type=Path, default=CONTEXT)
    args = parser.parse_args(argv)
    labels = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = extension_rows(labels)
    if args.out:
        runs = {source: Path(path) for source, _, path in (r.partition("=") for r in args.runs)}
        unlabelled = [{k: v for k, v in r.items() if k != "same"} for r in rows]
        written = context(runs, unlabelled)
        with args.out.open("w", encoding="utf-8") as out:
            for line in written:
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
        print(f"{len(written)} pairs with their person context → {args.out}")
    if args.signals:
        positives = sum(r["same"] for r in rows if r["split"] == args.signals)
        runs = {source: Path(path) for source, _, path in (r.partition("=") for r in args.runs)}
        for name, hits, same in [*speaker_signals(runs, rows, part=args.signals), *signals(rows, load_context(args.context), part=args.signals)]:
            print(f"{name:74} links={hits:3} right={same:3} wrong={hits - same:3} precision={same / hits if hits else 1:.3f} recall={same / positives:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
