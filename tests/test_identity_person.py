"""A name and the same name with words more are a review pair when a PERSON node says they are one
person (the ``person`` rule, README "Identity resolution"): the speakers of a chat are PERSON nodes,
and the first name said in a scene they speak in is an alias of theirs (`Ross` on `Ross Geller`),
so `Ross` / `Ross Geller` / `To Ross` / `Doctor Ross` said elsewhere as a CONCEPT are put before a
reviewer — while `Ross Tillman`, `Queen Victoria` beside `Victoria`, and a first name two people
share stay apart. Never a link: as one it was right 27 times in 32 on real runs (bench/RESULTS.md,
issue 11, seventh round). Real SQLite files, the worker's resolver and the extraction commit; the
rule's pure core beside."""

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


def review(db: Database) -> set[tuple[str, str, str]]:
    """The review pairs, by name: (name, candidate's name, rule), each pair once (unordered storage)."""
    names = dict(db.query("SELECT id, name FROM nodes"))
    return {(names[a], names[b], rule) for a, b, rule in db.query("SELECT node_id, candidate_id, rule FROM identity_candidates")}


def person_pairs(db: Database) -> set[frozenset[str]]:
    return {frozenset((a, b)) for a, b, rule in review(db) if rule == "person"}


def merges(db: Database) -> list[tuple[str, str]]:
    return [(a, b) for a, b in db.query("SELECT merged_id, into_id FROM merges")]


def speaker(name: str, first: str) -> Said:
    return ("PERSON", name, (first,))


def test_a_speakers_names_put_the_same_person_said_as_a_concept_before_a_reviewer(tmp_path: Path) -> None:
    db = Database(tmp_path / "graph.sqlite3")
    try:
        # Ross Geller speaks in one scene ("Ross" said there is his alias); elsewhere he is only talked about.
        commit(db, "s1", [speaker("Ross Geller", "Ross"), speaker("Chandler Bing", "Chandler")])
        commit(db, "s2", [("CONCEPT", "Ross", ())])
        commit(db, "s3", [("CONCEPT", "Ross Geller", ())])
        commit(db, "s4", [("CONCEPT", "To Ross", ()), ("CONCEPT", "Doctor Chandler", ())])
        commit(db, "s5", [("CONCEPT", "Chandler", ())])
        assert person_pairs(db) == {frozenset(("To Ross", "Ross")), frozenset(("Chandler", "Doctor Chandler"))}
        # Never merged by this rule: a person's node can hold two people of one first name. The
        # CONCEPT `Ross Geller` is the PERSON of that identical full name (the ``named`` rule), so
        # `Ross` is before a reviewer beside that PERSON (the type report), not beside a CONCEPT.
        assert merges(db) == [("CONCEPT:ross geller", "PERSON:Ross Geller")]
        assert ("Ross", "Ross Geller", "cross-type") in review(db) or ("Ross Geller", "Ross", "cross-type") in review(db)
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
        assert person_pairs(db) == set()
        # (A cross-type row — `Jill` said as a CONCEPT, two PERSON nodes called `Jill` — is the
        # type report, not a pair of this rule.)
        assert not {frozenset(p[:2]) for p in review(db) if p[2] != "cross-type"} & {frozenset(("Ross", "Ross Tillman")), frozenset(("Victoria", "Queen Victoria")),
                                                            frozenset(("Jill", "Jill Green")), frozenset(("Ross", "Naked Ross"))}
        # Only the identical full name of a PERSON joins it (the ``named`` rule); no lookalike does.
        assert [m for m in merges(db) if m[0].startswith("CONCEPT:")] == [("CONCEPT:jill green", "PERSON:Jill Green")]
    finally:
        db.close()


def test_the_session_speaking_is_context_too(tmp_path: Path) -> None:
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit(db, "s1", [("CONCEPT", "Phoebe", ())])
        # The session that names `Between Phoebe` is one Phoebe Buffay speaks in: her node is in its batch.
        commit(db, "s2", [speaker("Phoebe Buffay", "Phoebe"), ("CONCEPT", "Between Phoebe", ())])
        assert person_pairs(db) == {frozenset(("Between Phoebe", "Phoebe"))}
    finally:
        db.close()


def test_the_pure_rule_offers_every_target_and_leaves_persons_and_decided_names_alone() -> None:
    ross = NodeRef("PERSON:Ross", "PERSON", "Ross", ("Ross Geller",))
    index = AliasIndex.build([ross, NodeRef("CONCEPT:ross", "CONCEPT", "Ross")])
    (verdict,) = resolve_batch([NodeRef("CONCEPT:to ross", "CONCEPT", "To Ross")], index)
    assert (verdict.action, verdict.rule) == (CANDIDATE, "person") and verdict.candidates[0].node_id == "CONCEPT:ross"
    # The PERSON's identical full name said as a CONCEPT is that PERSON (the ``named`` rule), before this rule.
    (verdict,) = resolve_batch([NodeRef("CONCEPT:ross geller", "CONCEPT", "Ross Geller")], index)
    assert (verdict.action, verdict.rule, verdict.target) == (LINK, "named", "PERSON:Ross")
    # The shorter name beside both `Ross Geller` and `To Ross`: both are offered.
    two = AliasIndex.build([ross, NodeRef("CONCEPT:ross geller", "CONCEPT", "Ross Geller"), NodeRef("CONCEPT:to ross", "CONCEPT", "To Ross")])
    (shorter,) = resolve_batch([NodeRef("CONCEPT:ross", "CONCEPT", "Ross")], two)
    assert {m.node_id for m in shorter.candidates if m.rule == "person"} == {"CONCEPT:ross geller", "CONCEPT:to ross"}
    # Both names new in one session: one pair, not one per name.
    both = resolve_batch([NodeRef("CONCEPT:ross", "CONCEPT", "Ross"), NodeRef("CONCEPT:to ross", "CONCEPT", "To Ross")], AliasIndex.build([ross]))
    assert [(v.node_id, m.node_id) for v in both for m in v.candidates if m.rule == "person"] == [("CONCEPT:ross", "CONCEPT:to ross")]
    # PERSON names are the speakers' own business (aliases): `Doctor Mindy` beside `Mindy` stays as it is.
    people = AliasIndex.build([NodeRef("PERSON:Mindy Hunter", "PERSON", "Mindy Hunter", ("Mindy",))])
    assert resolve_batch([NodeRef("PERSON:Doctor Mindy", "PERSON", "Doctor Mindy")], people)[0].action == CREATE
    assert resolve_batch([NodeRef("CONCEPT:doctor mindy", "CONCEPT", "Doctor Mindy")], AliasIndex.build([*people.nodes.values(), NodeRef("CONCEPT:mindy", "CONCEPT", "Mindy")]))[0].rule == "person"
    # A decided verdict (a link, an ambiguity of a decisive rule) is left as it is; a blocked pair is never offered.
    node = NodeRef("CONCEPT:ross geller", "CONCEPT", "Ross Geller")
    for decided in (Verdict(node.id, LINK, "CONCEPT:other", "alias", 1.0), Verdict(node.id, CANDIDATE, None, "ambiguous-alias", 1.0)):
        assert named_person([node], [decided], index, AliasIndex()) == [decided]
    blocked = frozenset({(node.id, "CONCEPT:ross")})
    assert named_person([node], [Verdict(node.id, CREATE)], index, AliasIndex(), blocked=blocked)[0].action == CREATE
