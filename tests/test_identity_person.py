"""A name and the same name with words more link when a PERSON node says they are one person (the
``person`` rule, README "Identity resolution"): the speakers of a chat are PERSON nodes, and the
first name said in a scene they speak in is an alias of theirs (`Ross` on `Ross Geller`), so
`Ross` / `Ross Geller` / `To Ross` / `Doctor Ross` said elsewhere as a CONCEPT are one — while
`Ross Tillman`, `Queen Victoria` beside `Victoria`, and a first name two people share stay apart.
Real SQLite files, the worker's resolver and the extraction commit; the rule's pure core beside."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipelines.extract.commit import commit_session
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
from pipelines.extract.reduce import reduce_session
from pipelines.identity import CANDIDATE, CREATE, LINK, AliasIndex, NodeRef, Verdict, named_person, resolve_batch
from store.db import Database
from store.graph import Node
from store.unit_of_work import DatabaseUnitOfWork
from worker.knowledge import identity_resolver

Said = tuple[str, str, tuple[str, ...]]  # type, name, aliases (what else the session called it)


def commit(db: Database, sid: str, names: Sequence[Said]) -> None:
    """One session saying ``names``, each in a turn of its own, through the worker's resolver and the commit."""
    unit = DatabaseUnitOfWork(db)
    turns = tuple(UnitTurn(i + 1, f"{sid}-m{i + 1}", " / ".join((name, *aliases))) for i, (_, name, aliases) in enumerate(names))
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, turns, "h")
    raw = {"summary": "", "edges": [], "nodes": [
        {"id": f"n{i}", "type": node_type, "name": name, "aliases": list(aliases), "evidence": [{"turn": i + 1, "quote": name}]}
        for i, (node_type, name, aliases) in enumerate(names)
    ]}
    reduced = reduce_session(sid, [validate_extraction(raw, work, semantic_types=tuple({t for t, _, _ in names}))])
    unit.graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), *(Node(f"memory:{t.memory_id}", "MEMORY", "m") for t in turns)])
    commit_session(reduced, unit=unit, graph_index=None, queue_append=len, matcher=identity_resolver(db), merges=unit.merges,
                   on_commit=lambda: None)


def node_of(db: Database, label: str, name: str) -> str:
    """The node a name ended on: its own, or the one it was linked into."""
    own = db.query("SELECT id FROM nodes WHERE label = ? AND name = ?", (label, name))
    if own:
        return own[0][0]
    for (into,) in db.query("SELECT into_id FROM merges WHERE merged_id LIKE ? AND json_extract(restore, '$.node.name') = ?"
                            " AND undone_at IS NULL", (f"{label}:%", name)):
        return into
    raise AssertionError(f"{label} {name!r} is nowhere")


def rules(db: Database) -> set[str]:
    return {r for (r,) in db.query("SELECT rule FROM merges")}


def speaker(name: str, first: str) -> Said:
    return ("PERSON", name, (first,))


def test_a_speakers_names_link_the_same_person_said_as_a_concept(tmp_path: Path) -> None:
    db = Database(tmp_path / "graph.sqlite3")
    try:
        # Ross Geller speaks in one scene ("Ross" said there is his alias); elsewhere he is only talked about.
        commit(db, "s1", [speaker("Ross Geller", "Ross"), speaker("Chandler Bing", "Chandler")])
        commit(db, "s2", [("CONCEPT", "Ross", ())])
        commit(db, "s3", [("CONCEPT", "Ross Geller", ())])
        commit(db, "s4", [("CONCEPT", "To Ross", ()), ("CONCEPT", "Doctor Chandler", ())])
        commit(db, "s5", [("CONCEPT", "Chandler", ())])
        ross = node_of(db, "CONCEPT", "Ross")
        assert node_of(db, "CONCEPT", "Ross Geller") == ross and node_of(db, "CONCEPT", "To Ross") == ross
        assert node_of(db, "CONCEPT", "Chandler") == node_of(db, "CONCEPT", "Doctor Chandler")
        assert rules(db) == {"person"}
        # A PERSON and a CONCEPT are never merged: the speaker stays a node of its own.
        assert node_of(db, "PERSON", "Ross Geller") != ross
    finally:
        db.close()


def test_lookalikes_nobody_is_named_stay_apart(tmp_path: Path) -> None:
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit(db, "s1", [speaker("Ross Geller", "Ross"), speaker("Jill Goodacre", "Jill"), speaker("Jill Green", "Jill")])
        commit(db, "s2", [("CONCEPT", "Ross", ()), ("CONCEPT", "Victoria", ()), ("CONCEPT", "Jill", ())])
        # Ross Tillman speaks nowhere; Victoria is nobody's name; two people are called Jill.
        commit(db, "s3", [("CONCEPT", "Ross Tillman", ()), ("CONCEPT", "Queen Victoria", ()), ("CONCEPT", "Jill Green", ()),
                          ("CONCEPT", "Naked Ross", ())])
        assert db.query("SELECT merged_id, into_id FROM merges WHERE merged_id LIKE 'CONCEPT:%' OR into_id LIKE 'CONCEPT:%'") == []
        assert len({node_of(db, "CONCEPT", n) for n in ("Ross", "Ross Tillman", "Victoria", "Queen Victoria", "Jill", "Jill Green", "Naked Ross")}) == 7
    finally:
        db.close()


def test_the_session_speaking_is_context_too(tmp_path: Path) -> None:
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit(db, "s1", [("CONCEPT", "Phoebe", ())])
        # The session that names `Between Phoebe` is one Phoebe Buffay speaks in: her node is in its batch.
        commit(db, "s2", [speaker("Phoebe Buffay", "Phoebe"), ("CONCEPT", "Between Phoebe", ())])
        assert node_of(db, "CONCEPT", "Between Phoebe") == node_of(db, "CONCEPT", "Phoebe")
    finally:
        db.close()


def test_the_pure_rule_links_one_target_and_leaves_persons_and_decided_names_alone() -> None:
    ross = NodeRef("PERSON:Ross", "PERSON", "Ross", ("Ross Geller",))
    index = AliasIndex.build([ross, NodeRef("CONCEPT:ross", "CONCEPT", "Ross")])
    (verdict,) = resolve_batch([NodeRef("CONCEPT:ross geller", "CONCEPT", "Ross Geller")], index)
    assert (verdict.action, verdict.target, verdict.rule) == (LINK, "CONCEPT:ross", "person")
    # Two nodes the rule could link (`Ross Geller`, `To Ross`): it names neither.
    two = AliasIndex.build([ross, NodeRef("CONCEPT:ross geller", "CONCEPT", "Ross Geller"), NodeRef("CONCEPT:to ross", "CONCEPT", "To Ross")])
    assert resolve_batch([NodeRef("CONCEPT:ross", "CONCEPT", "Ross")], two)[0].rule != "person"
    # PERSON names are the speakers' own business (aliases): `Mindy` / `Mindy Hunter` stay as they are.
    people = AliasIndex.build([NodeRef("PERSON:Mindy Hunter", "PERSON", "Mindy Hunter", ("Mindy",))])
    assert resolve_batch([NodeRef("PERSON:Mindy X", "PERSON", "Mindy")], people)[0].rule != "person"
    # A decided verdict (a link, an ambiguity of a decisive rule) is left as it is; a blocked pair never links.
    node = NodeRef("CONCEPT:ross geller", "CONCEPT", "Ross Geller")
    for verdict in (Verdict(node.id, LINK, "CONCEPT:other", "alias", 1.0), Verdict(node.id, CANDIDATE, None, "ambiguous-alias", 1.0)):
        assert named_person([node], [verdict], index, AliasIndex()) == [verdict]
    blocked = frozenset({(node.id, "CONCEPT:ross")})
    assert named_person([node], [Verdict(node.id, CREATE)], index, AliasIndex(), blocked=blocked)[0].action == CREATE
