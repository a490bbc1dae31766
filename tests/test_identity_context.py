"""Prose names beside the same name with words more (``Pete`` / ``Pete Becker``): the session is the
context identity reads (the ``extension`` rule, README "Identity resolution"). Said together in one
session, and the longer name the only one extending the shorter, the pair goes on the review list;
otherwise the two stay apart. Never a link: on labelled real pairs no context reached link
precision (bench/RESULTS.md, issue 11, sixth round). Real SQLite files, the worker's resolver and
the extraction commit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipelines.extract.commit import commit_session
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
from pipelines.extract.reduce import reduce_session
from pipelines.identity import CANDIDATE, CREATE, LINK, AliasIndex, NodeRef, resolve_batch
from store.db import Database
from store.graph import Node
from store.unit_of_work import DatabaseUnitOfWork
from worker.knowledge import identity_resolver


def commit(db: Database, sid: str, names: Sequence[tuple[str, str]]) -> None:
    """One session saying ``names`` (type, name), through the worker's resolver and the commit."""
    unit = DatabaseUnitOfWork(db)
    turns = tuple(UnitTurn(i + 1, f"{sid}-m{i + 1}", name) for i, (_, name) in enumerate(names))
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, turns, "h")
    raw = {"summary": "", "edges": [], "nodes": [
        {"id": f"n{i}", "type": node_type, "name": name, "evidence": [{"turn": i + 1, "quote": name}]}
        for i, (node_type, name) in enumerate(names)
    ]}
    reduced = reduce_session(sid, [validate_extraction(raw, work, semantic_types=tuple({t for t, _ in names}))])
    unit.graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), *(Node(f"memory:{t.memory_id}", "MEMORY", "m") for t in turns)])
    commit_session(reduced, unit=unit, graph_index=None, queue_append=len, matcher=identity_resolver(db), merges=unit.merges,
                   on_commit=lambda: None)


def review(db: Database) -> set[tuple[str, str, str]]:
    return {(a, b, rule) for a, b, rule in db.query("SELECT node_id, candidate_id, rule FROM identity_candidates")}


def links(db: Database) -> list[tuple[str, str]]:
    return [(a, b) for a, b in db.query("SELECT merged_id, into_id FROM merges")]


def test_said_together_and_the_only_extension_is_a_review_pair_not_a_link(tmp_path: Path) -> None:
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit(db, "a", [("PERSON", "Pete Becker"), ("PERSON", "Monica")])
        commit(db, "b", [("PERSON", "Pete"), ("PERSON", "Pete Becker")])
        assert review(db) == {("PERSON:Pete", "PERSON:Pete Becker", "extension")}
        assert links(db) == [] and {r[0] for r in db.query("SELECT id FROM nodes WHERE label = 'PERSON'")} >= {"PERSON:Pete", "PERSON:Pete Becker"}
    finally:
        db.close()


def test_said_apart_or_extended_twice_the_names_stay_apart(tmp_path: Path) -> None:
    db = Database(tmp_path / "graph.sqlite3")
    try:
        # Never said in one session: nothing ties `Rachel` to `Rachel Green` but the words.
        commit(db, "a", [("PERSON", "Rachel Green")])
        commit(db, "b", [("PERSON", "Rachel")])
        # Said together, but `Joey` is extended twice (`Joey Tribbiani`, `Joey Special`): it names neither.
        commit(db, "c", [("PERSON", "Joey Tribbiani")])
        commit(db, "d", [("PERSON", "Joey Special")])
        commit(db, "e", [("PERSON", "Joey"), ("PERSON", "Joey Special")])
        assert review(db) == set() and links(db) == []
    finally:
        db.close()


def test_the_rule_is_pure_and_leaves_decisive_rules_alone() -> None:
    index = AliasIndex.build([NodeRef("PLACE:Vegas", "PLACE", "Vegas")])
    together = [NodeRef("PLACE:Las Vegas", "PLACE", "Las Vegas"), NodeRef("PLACE:Vegas", "PLACE", "Vegas")]
    longer, shorter = resolve_batch(together, index)
    # The longer name is new; the shorter one is the graph's (an exact id): the pair goes on the new one.
    assert shorter.action == LINK and longer.action == CANDIDATE and longer.rule == "extension"
    assert [m.node_id for m in longer.candidates] == ["PLACE:Vegas"]
    # Two spellings of a new shorter name in the session (`Vegas`, `the Vegas`): still one pair.
    twice = resolve_batch([NodeRef("PLACE:Vegas", "PLACE", "Vegas"), NodeRef("PLACE:the Vegas", "PLACE", "the Vegas"),
                           NodeRef("PLACE:Las Vegas", "PLACE", "Las Vegas")], AliasIndex())
    assert [(v.node_id, m.node_id) for v in twice for m in v.candidates if m.rule == "extension"] == [("PLACE:Vegas", "PLACE:Las Vegas")]
    # A name and its extension said in other sessions (only the graph holds the shorter): apart.
    assert resolve_batch(together[:1], index)[0].action == CREATE
    # A spelling rule still decides first: `Configures Django` is `Configure Django`, no extension.
    same = resolve_batch([NodeRef("CONCEPT:configures django", "CONCEPT", "Configures Django")],
                         AliasIndex.build([NodeRef("CONCEPT:configure django", "CONCEPT", "Configure Django")]))
    assert same[0].action == LINK and same[0].rule == "normalised"
