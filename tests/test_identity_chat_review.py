"""The chat review list (issue 11, twelfth round): what it no longer offers.

Three review-list rules, no link changes, each from the labelled pairs of the Friends tuning run's
list: a name the extractor typed several ways is asked about once per new node, not once per two
nodes (:func:`pipelines.identity.cross_type_rank`); a near-identical spelling that is the other
name with letters added at its end is a word made from it, not a typo (:func:`pipelines.identity.derived`);
a longer name that says the shorter one as an owner or after *of* names something of its, not it
(:func:`pipelines.identity.owned`). Sessions go through reduce, the worker's resolver and the
extraction commit on a real SQLite file; the review list is the ``identity_candidates`` table.
"""

from __future__ import annotations

from pathlib import Path

from store.db import Database
from tests.test_identity_session_files import commit, pairs


def review(tmp_path: Path, sessions: list[list[tuple[str, str]]]) -> tuple[set[frozenset[str]], set[str]]:
    """The review pairs (unordered) and the node ids after committing ``sessions`` in order."""
    db = Database(tmp_path / "graph.sqlite3")
    try:
        for n, names in enumerate(sessions):
            commit(db, f"s{n}", names)
        listed = {frozenset((a, b)) for a, b, _ in pairs(db)}
        nodes = {node_id for (node_id,) in db.query("SELECT id FROM nodes WHERE label NOT IN ('SESSION', 'MEMORY')")}
    finally:
        db.close()
    return listed, nodes


def test_a_name_typed_four_ways_is_three_review_pairs_not_six(tmp_path: Path) -> None:
    """`Emma` said as a CONCEPT, a PLACE, a WORK and a PERSON in four sessions: four nodes (never
    merged), and each new one is offered beside one earlier node — the PERSON before any other type,
    a CONCEPT last — so three pairs join all four (every two of them made six before)."""
    listed, nodes = review(tmp_path, [[("CONCEPT", "Emma")], [("PLACE", "Emma")], [("WORK", "Emma")], [("PERSON", "Emma")]])
    assert {"CONCEPT:emma", "PLACE:Emma", "WORK:Emma", "PERSON:Emma"} <= nodes
    assert listed == {frozenset(("PLACE:Emma", "CONCEPT:emma")), frozenset(("WORK:Emma", "PLACE:Emma")),
                      frozenset(("PERSON:Emma", "PLACE:Emma"))}
    listed, _ = review(tmp_path / "person-first", [[("PERSON", "Emma")], [("CONCEPT", "Emma")], [("PLACE", "Emma")]])
    assert listed == {frozenset(("CONCEPT:emma", "PERSON:Emma")), frozenset(("PLACE:Emma", "PERSON:Emma"))}


def test_a_word_with_letters_added_at_its_end_is_no_typo_pair(tmp_path: Path) -> None:
    """`Victorian` beside `Victoria`, `Martina` beside `Martin`: a word made from the other, no
    ``fuzzy`` pair; `Mount Tibidaybo` beside `Mount Tibidabo` (a letter changed inside) still is."""
    listed, nodes = review(tmp_path, [[("CONCEPT", "Victoria"), ("CONCEPT", "Martin"), ("CONCEPT", "Mount Tibidabo")],
                                      [("CONCEPT", "Victorian"), ("CONCEPT", "Martina"), ("CONCEPT", "Mount Tibidaybo")]])
    assert {"CONCEPT:victorian", "CONCEPT:martina", "CONCEPT:mount tibidaybo"} <= nodes
    assert listed == {frozenset(("CONCEPT:mount tibidaybo", "CONCEPT:mount tibidabo"))}


def test_a_longer_name_of_the_shorter_ones_is_no_extension_pair(tmp_path: Path) -> None:
    """One session says `Pete` and `Pete's Mom`, another `London` and `Tower of London`, a third
    `Johnny` and `Johnny Shapiro`: only the last is an ``extension`` pair for review; the owner's
    and the *of* names stay apart, unlisted."""
    listed, nodes = review(tmp_path, [[("PERSON", "Pete"), ("PERSON", "Pete's Mom")],
                                      [("PLACE", "London"), ("PLACE", "Tower of London")],
                                      [("PERSON", "Johnny"), ("PERSON", "Johnny Shapiro")]])
    assert {"PERSON:Pete", "PERSON:Pete's Mom", "PLACE:London", "PLACE:Tower of London"} <= nodes
    assert listed == {frozenset(("PERSON:Johnny", "PERSON:Johnny Shapiro"))}
