"""Two people who share a first name are never joined (issue 11, seventh round, second wave).

The offline extractor makes a chat's speaker a PERSON node and files a first name said in a scene
they speak in as that node's alias (`Kate` on `Kate Miller`). Across sessions, the alias rule used to
join through that first name: `Kate Smith` (alias `Kate`) linked to `Kate Miller` (alias `Kate`), or
both to a bare `Kate` of a third session. These tests run chat sessions through the real offline
extractor, the worker's identity resolver and the extraction commit on a real SQLite file, in every
order of arrival.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from pipelines.extract.commit import CommitStats, commit_session
from pipelines.extract.heuristic import extract_heuristic
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
from pipelines.extract.reduce import reduce_session
from pipelines.identity import CANDIDATE, LINK, AliasIndex, NodeRef, name_form, namesakes, resolve
from config import Settings
from config.settings import DEFAULT_SEMANTIC_TYPES
from store.backend import open_database
from store.db import Database
from store.graph import Node
from store.unit_of_work import DatabaseUnitOfWork
from tests.test_forget import canonical
from worker.knowledge import identity_resolver

Scene = tuple[str, tuple[tuple[str, str], ...]]  # session id, (speaker role, text) per turn


def spoken_by(first: str, last: str) -> Scene:
    """A scene where ``first last`` speaks and is called by the first name: the extractor makes
    the PERSON `first last` with the alias `first`."""
    full = f"{first} {last}"
    return (f"s-{first}-{last}".lower(), (
        (full, "Hello everyone, I am so glad to be here."),
        ("Joey", f"You were great tonight, {first}."),
        (full, "Thanks Joey, that means a lot."),
        ("Joey", f"I told {first} about the play."),
    ))


def said_of(first: str) -> Scene:
    """A scene where nobody of that name speaks and ``first`` is said as a person: the PERSON `first`."""
    return (f"s-{first}-bare".lower(), (
        ("Ross", f"I met {first} yesterday at the museum."),
        ("Rachel", f"Oh really? How is {first} doing?"),
    ))


MILLER, SMITH, BARE = spoken_by("Kate", "Miller"), spoken_by("Kate", "Smith"), said_of("Kate")


def commit_scene(db: Database, scene: Scene, *, index_per_session: bool, resolver: object) -> CommitStats:
    """Extract ``scene`` with the offline extractor and commit it through the worker's resolver;
    what the commit counted."""
    sid, lines = scene
    turns = tuple(UnitTurn(i + 1, f"{sid}-m{i + 1}", text, role) for i, (role, text) in enumerate(lines))
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, turns, "h")
    reduced = reduce_session(sid, [validate_extraction(extract_heuristic(work), work, semantic_types=DEFAULT_SEMANTIC_TYPES)])
    unit = DatabaseUnitOfWork(db)
    unit.graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), *(Node(f"memory:{t.memory_id}", "MEMORY", "m") for t in turns)])
    matcher = identity_resolver(db) if index_per_session else resolver
    stats = commit_session(reduced, unit=unit, graph_index=None, queue_append=len, matcher=matcher, merges=unit.merges,
                           on_commit=lambda: None)
    if stats.nodes_removed or stats.nodes_folded:
        matcher.reset()  # type: ignore[attr-defined]  # as the extract phase does
    return stats


def person_names(db: Database) -> dict[str, set[str]]:
    """PERSON node id → its name and aliases."""
    names = {node_id: {name} for node_id, name in db.query("SELECT id, name FROM nodes WHERE label = 'PERSON'")}
    for node_id, alias in db.query("SELECT node_id, alias FROM node_aliases"):
        if node_id in names:
            names[node_id].add(alias)
    return names


def build(path: Path, scenes: Sequence[Scene], *, index_per_session: bool) -> dict[str, set[str]]:
    db = Database(path)
    try:
        resolver = identity_resolver(db)
        for scene in scenes:
            commit_scene(db, scene, index_per_session=index_per_session, resolver=resolver)
        return person_names(db)
    finally:
        db.close()


def claims(path: Path) -> set[frozenset[str]]:
    """The sessions whose claims on a `Kate` ended on one node (the grouping, whatever the node ids)."""
    db = Database(path)
    try:
        by_node: dict[str, set[str]] = {}
        for node_id, anchor in db.query("SELECT c.node_id, c.anchor FROM node_claims c JOIN nodes n ON n.id = c.node_id WHERE n.label = 'PERSON' AND c.node_id LIKE 'PERSON:Kate%'"):
            by_node.setdefault(node_id, set()).add(anchor.removeprefix("session:"))
        return {frozenset(anchors) for anchors in by_node.values()}
    finally:
        db.close()


@pytest.mark.parametrize("index_per_session", [False, True], ids=["one-index", "index-per-session"])
def test_two_full_names_of_one_first_name_never_end_in_one_node(tmp_path: Path, index_per_session: bool) -> None:
    """`Kate Miller`, `Kate Smith` (each speaking, called `Kate`) and a bare `Kate` said elsewhere,
    in every order: never one node for both full names, and the same three nodes whatever the
    order — the bare first name, joined to the first full name, leaves it when the second arrives."""
    for number, order in enumerate(itertools.permutations([MILLER, SMITH, BARE])):
        path = tmp_path / f"order{number}.sqlite3"
        people = build(path, order, index_per_session=index_per_session)
        holders = {full: [n for n, names in people.items() if full in names] for full in ("Kate Miller", "Kate Smith")}
        assert all(len(ids) == 1 for ids in holders.values()), (order, people)
        assert holders["Kate Miller"] != holders["Kate Smith"], (order, people)
        assert claims(path) == {frozenset({MILLER[0]}), frozenset({SMITH[0]}), frozenset({BARE[0]})}, order


@pytest.mark.both_backends
def test_the_split_of_a_first_name_on_either_engine(tmp_path: Path, settings: Settings) -> None:
    """`Kate` (bare), `Kate Miller` (joins it), `Kate Smith` (splits them): on SQLite and PostgreSQL
    the undone link record says why, blocks nothing, the pair is listed for review, and the graph
    equals the one SQLite builds when `Kate Smith` comes first (no split)."""
    reference = canonical(_built_graph(tmp_path / "reference.sqlite3", [SMITH, BARE, MILLER]))
    db = open_database(settings)
    try:
        resolver = identity_resolver(db)
        for scene in (BARE, MILLER, SMITH):
            commit_scene(db, scene, index_per_session=False, resolver=resolver)
        unit = DatabaseUnitOfWork(db)
        records = unit.merges.records(merged_id="PERSON:Kate Miller")
        assert [(r.into_id, r.undone_at is not None, r.evidence.get("split", {}).get("ambiguous_with")) for r in records] == [
            ("PERSON:Kate", True, "Kate Smith")]
        assert unit.merges.blocked_pairs() == frozenset()
        assert ("PERSON:Kate Miller", "PERSON:Kate") in {(c["node_id"], c["candidate_id"]) for c in unit.merges.candidates()}
    finally:
        db.close()
    assert canonical(settings) == reference


def _built_graph(path: Path, scenes: Sequence[Scene]) -> Path:
    build(path, scenes, index_per_session=False)
    return path


def test_a_name_split_out_does_not_go_straight_back_in(tmp_path: Path) -> None:
    """`Kate` joined `Kate Miller`; then one scene where Kate Miller and Kate Smith both speak (the
    extractor maps `Kate` to neither): the split and that scene's `Kate Miller` land in one commit,
    and she stays out of the bare `Kate`'s node."""
    both = ("s-kate-both", (("Kate Miller", "Hello everyone, I am so glad to be here."), ("Kate Smith", "Nice to meet you, I am new here."),
                             ("Kate Miller", "Welcome to the show."), ("Kate Smith", "Thanks, the theatre is lovely.")))
    path = tmp_path / "graph.sqlite3"
    build(path, [BARE, MILLER, both], index_per_session=False)
    assert claims(path) == {frozenset({MILLER[0], both[0]}), frozenset({both[0]}), frozenset({BARE[0]})}


def test_a_bare_first_name_still_joins_the_one_full_name_it_can_be(tmp_path: Path) -> None:
    """With one `Kate` of a full name in the graph, a bare `Kate` said elsewhere joins her, in either order."""
    for order in ([MILLER, BARE], [BARE, MILLER]):
        path = tmp_path / f"{order[0][0]}.sqlite3"
        build(path, order, index_per_session=False)
        assert claims(path) == {frozenset({MILLER[0], BARE[0]})}, order


def test_one_person_in_several_sessions_is_still_one_node(tmp_path: Path) -> None:
    """The same speaker in two scenes (and `Ross` said where Ross Geller speaks) stays one node; a
    bare first name said elsewhere still joins the one full name it can be."""
    ross = spoken_by("Ross", "Geller")
    again = (ross[0] + "-again", ross[1])
    for order in itertools.permutations([ross, again, said_of("Ross")]):
        people = build(tmp_path / "ross.sqlite3", order, index_per_session=False)
        (tmp_path / "ross.sqlite3").unlink()
        holders = [names for names in people.values() if "Ross Geller" in names]
        assert len(holders) == 1 and "Ross" in holders[0], (order, people)
        assert not [n for n, names in people.items() if "Ross" in names and "Ross Geller" not in names], (order, people)


def _person(name: str, *aliases: str) -> NodeRef:
    return NodeRef(f"PERSON:{name}", "PERSON", name, aliases)


def test_the_resolver_neither_links_nor_bridges_namesakes() -> None:
    """Pure: a full name never links to a node holding another full name of its first name, and a
    bare first name beside two such nodes is a review question, not a bridge (identity.BRIDGING_RULES)."""
    miller, smith = _person("Kate Miller", "Kate"), _person("Kate Smith", "Kate")
    assert resolve(smith, AliasIndex.build([miller])).action != LINK
    assert resolve(smith, AliasIndex.build([_person("Kate", "Kate Miller")])).action != LINK
    assert resolve(miller, AliasIndex.build([_person("Kate")])).action == LINK  # one full name: still joins
    both = resolve(_person("Kate"), AliasIndex.build([miller, smith]))
    assert both.action == CANDIDATE and both.rule == "ambiguous-namesakes"
    assert {m.node_id for m in both.candidates} == {miller.id, smith.id}
    # Not namesakes: a title, a full name within a longer one, a nickname sharing no word.
    forms = lambda *names: [name_form("PERSON", n) for n in names]  # noqa: E731
    assert not namesakes(forms("Ross Geller"), forms("Doctor Ross Geller", "Ross"))
    assert not namesakes(forms("Robert Tables", "Bob"), forms("Bobby T."))
    assert namesakes(forms("Ross Geller"), forms("Monica Geller"))


@pytest.mark.parametrize("order", [("CONCEPT", "PERSON"), ("PERSON", "CONCEPT")], ids=["concept-first", "person-first"])
def test_a_concept_and_a_person_of_one_full_name_are_one_person_node(tmp_path: Path, order: tuple[str, str]) -> None:
    """`Bug report from Jonas Weber` (a CONCEPT) and `Jonas Weber said` (a PERSON) in two sessions,
    either first: one node, the PERSON's, holding both sessions' claims; a one-word name and a name
    typed twice (PLACE and PERSON `New York`) stay apart."""
    db = Database(tmp_path / "graph.sqlite3")
    try:
        for number, kind in enumerate(order):
            commit_named(db, f"s{number}", [(kind, "Jonas Weber"), (kind, "Weber")])
        commit_named(db, "s2", [("PLACE", "New York")])
        commit_named(db, "s3", [("PERSON", "New York")])
        commit_named(db, "s4", [("CONCEPT", "New York")])
        nodes = {node_id: label for node_id, label in db.query("SELECT id, label FROM nodes WHERE label NOT IN ('SESSION', 'MEMORY')")}
        held = {anchor for (anchor,) in db.query("SELECT anchor FROM node_claims WHERE node_id = 'PERSON:Jonas Weber'")}
    finally:
        db.close()
    assert "CONCEPT:jonas weber" not in nodes and nodes["PERSON:Jonas Weber"] == "PERSON"
    assert held == {"session:s0", "session:s1"}
    assert {"CONCEPT:weber", "PERSON:Weber"} <= set(nodes)  # one word: apart
    assert {"PLACE:New York", "PERSON:New York", "CONCEPT:new york"} <= set(nodes)  # two typed nodes hold it: apart


def commit_named(db: Database, sid: str, names: Sequence[tuple[str, str]]) -> None:
    """One session naming ``names`` (type, name), through the worker's resolver and the commit."""
    turns = tuple(UnitTurn(i + 1, f"{sid}-m{i + 1}", name) for i, (_, name) in enumerate(names))
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, turns, "h")
    raw = {"summary": "", "edges": [], "nodes": [
        {"id": f"n{i}", "type": kind, "name": name, "aliases": [], "evidence": [{"turn": i + 1, "quote": name}]} for i, (kind, name) in enumerate(names)
    ]}
    reduced = reduce_session(sid, [validate_extraction(raw, work, semantic_types=DEFAULT_SEMANTIC_TYPES)])
    unit = DatabaseUnitOfWork(db)
    unit.graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), *(Node(f"memory:{t.memory_id}", "MEMORY", "m") for t in turns)])
    commit_session(reduced, unit=unit, graph_index=None, queue_append=len, matcher=identity_resolver(db), merges=unit.merges, on_commit=lambda: None)


def test_a_first_name_never_bridges_the_nodes_it_was_split_from(tmp_path: Path) -> None:
    """After the split (by a `Kate Smith` nobody called `Kate`), `Kate` and `Kate Miller` both go
    by `Kate`: a later person called only `Kate` (`Katie` with the alias `Kate`) joins neither and
    folds nothing back together; it is a review question."""
    path = tmp_path / "graph.sqlite3"
    build(path, [BARE, MILLER], index_per_session=False)
    db = Database(path)
    try:
        commit_named_aliases(db, SMITH[0], "Kate Smith", ())
        commit_named_aliases(db, "s-katie", "Katie", ("Kate",))
        people = person_names(db)
        offered = {other for one, other in db.query("SELECT node_id, candidate_id FROM identity_candidates") for other in (one, other)
                   if "PERSON:Katie" in (one, other) and other != "PERSON:Katie"}
    finally:
        db.close()
    assert claims(path) == {frozenset({MILLER[0]}), frozenset({SMITH[0]}), frozenset({BARE[0]})}
    assert "PERSON:Katie" in people and offered == {"PERSON:Kate", "PERSON:Kate Miller"}


def commit_named_aliases(db: Database, sid: str, name: str, aliases: tuple[str, ...]) -> None:
    """One session naming the PERSON ``name`` with ``aliases``, through the worker's resolver and the commit."""
    turns = (UnitTurn(1, f"{sid}-m1", " / ".join((name, *aliases))),)
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, turns, "h")
    raw = {"summary": "", "edges": [], "nodes": [
        {"id": "n0", "type": "PERSON", "name": name, "aliases": list(aliases), "evidence": [{"turn": 1, "quote": name}]}]}
    reduced = reduce_session(sid, [validate_extraction(raw, work, semantic_types=DEFAULT_SEMANTIC_TYPES)])
    unit = DatabaseUnitOfWork(db)
    unit.graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), Node(f"memory:{sid}-m1", "MEMORY", "m")])
    commit_session(reduced, unit=unit, graph_index=None, queue_append=len, matcher=identity_resolver(db), merges=unit.merges, on_commit=lambda: None)
