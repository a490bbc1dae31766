"""A session's own names that are another of its nodes (issue 11, eighth round).

A session that names `django/contrib/admin/options.py` and then says `options.py` means that file;
a session whose extractor typed `test_srepr_dict` a TEST in one sentence and a METHOD in another
means one test. Both fold in the session's own deduplication, before the graph is consulted
(:func:`pipelines.identity.session_folds`), so neither pair reaches the review list. Across sessions
nothing changes: a bare base name said alone is its own node (and a review candidate). These tests
run sessions through the reduce step, the worker's identity resolver and the extraction commit on a
real SQLite file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from config.settings import DEFAULT_SEMANTIC_TYPES
from pipelines.extract.commit import commit_session
from pipelines.extract.heuristic import extract_heuristic
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
from pipelines.extract.reduce import reduce_session
from pipelines.identity import session_folds
from store.db import Database
from store.graph import Node
from store.unit_of_work import DatabaseUnitOfWork
from worker.knowledge import identity_resolver


def commit(db: Database, sid: str, names: Sequence[tuple[str, str]], *, chunks: int = 1, spelled: Mapping[str, Sequence[str]] = {}) -> None:
    """One session saying ``names`` (type, name), one turn each, spread over ``chunks`` chunks, through
    reduce, the worker's resolver and the commit; ``spelled``: name → more spellings the extractor
    recorded for it (aliases)."""
    turns = tuple(UnitTurn(i + 1, f"{sid}-m{i + 1}", f"see `{name}`") for i, (_, name) in enumerate(names))
    extractions = []
    for chunk in range(chunks):
        mine = [(i, kind, name) for i, (kind, name) in enumerate(names) if i % chunks == chunk]
        work = WorkUnit(f"{sid}:chunk:{chunk}", sid, chunk, tuple(turns[i] for i, _, _ in mine), "h")
        raw = {"summary": "", "edges": [], "nodes": [
            {"id": f"n{chunk}-{i}", "type": kind, "name": name, "aliases": [name, *spelled.get(name, ())], "evidence": [{"turn": i + 1, "quote": name}]}
            for i, kind, name in mine
        ]}
        extractions.append(validate_extraction(raw, work, semantic_types=DEFAULT_SEMANTIC_TYPES))
    write(db, sid, turns, reduce_session(sid, extractions))


def write(db: Database, sid: str, turns: Sequence[UnitTurn], reduced: object) -> None:
    unit = DatabaseUnitOfWork(db)
    unit.graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), *(Node(f"memory:{t.memory_id}", "MEMORY", "m") for t in turns)])
    commit_session(reduced, unit=unit, graph_index=None, queue_append=len, matcher=identity_resolver(db), merges=unit.merges,  # type: ignore[arg-type]
                   on_commit=lambda: None)


def points(db: Database) -> dict[str, set[tuple[str, str]]]:
    """Node id → (session, quote) of each of its points."""
    found: dict[str, set[tuple[str, str]]] = {}
    for node_id, anchor, evidence in db.query("SELECT node_id, anchor, evidence FROM node_points"):
        found.setdefault(node_id, set()).add((anchor.removeprefix("session:"), evidence))
    return found


def aliases(db: Database, node_id: str) -> set[str]:
    return {alias for (alias,) in db.query("SELECT alias FROM node_aliases WHERE node_id = ?", (node_id,))}


def pairs(db: Database) -> set[tuple[str, str, str]]:
    return {(a, b, rule) for a, b, rule in db.query("SELECT node_id, candidate_id, rule FROM identity_candidates")}


def test_a_bare_base_name_beside_the_sessions_one_full_path_is_that_file(tmp_path: Path) -> None:
    """`options.py` in a session that names `django/contrib/admin/options.py` (in another chunk):
    its point lands on the full path, which does not take `options.py` as an alias; no bare node,
    no review pair. A session naming two full paths of that base name, or none, keeps the bare
    name apart (a review pair as before)."""
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit(db, "s-admin", [("FILE", "django/contrib/admin/options.py"), ("FILE", "options.py")], chunks=2)
        after_one = points(db)
        review_after_one = pairs(db)
        commit(db, "s-bare", [("FILE", "options.py")])
        review = pairs(db)
        commit(db, "s-two", [("FILE", "django/db/models/options.py"), ("FILE", "django/contrib/admin/options.py"), ("FILE", "./options.py")])
        found = points(db)
        full_aliases = aliases(db, "FILE:django/contrib/admin/options.py")
    finally:
        db.close()
    assert "FILE:options.py" not in after_one and not review_after_one
    assert ("s-admin", "options.py") in after_one["FILE:django/contrib/admin/options.py"]
    assert "options.py" not in full_aliases
    assert found["FILE:options.py"] == {("s-two", "./options.py"), ("s-bare", "options.py")}
    assert ("FILE:options.py", "FILE:django/contrib/admin/options.py", "file-basename") in review or (
        "FILE:django/contrib/admin/options.py", "FILE:options.py", "file-basename") in review


def test_a_method_named_as_the_sessions_test_is_that_test(tmp_path: Path) -> None:
    """`test_srepr_dict` typed TEST in one sentence and METHOD (`test_srepr_dict()`) in another of one
    session: one TEST node with both points, no cross-type pair. A METHOD of that name said in
    another session alone stays a METHOD (a cross-type review pair, as before)."""
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit(db, "s-test", [("TEST", "test_srepr_dict"), ("METHOD", "test_srepr_dict()")])
        after_one = points(db)
        review_after_one = pairs(db)
        commit(db, "s-other", [("METHOD", "test_srepr_dict")])
        found = points(db)
        review = {rule for _, _, rule in pairs(db)}
    finally:
        db.close()
    assert "METHOD:test_srepr_dict()" not in after_one and "METHOD:test_srepr_dict" not in after_one
    assert {q for _, q in after_one["TEST:test_srepr_dict"]} == {"test_srepr_dict", "test_srepr_dict()"}
    assert not {rule for _, _, rule in review_after_one} & {"cross-type"}
    assert found["METHOD:test_srepr_dict"] == {("s-other", "test_srepr_dict")} and "cross-type" in review


def test_the_offline_extractors_session_folds_its_bare_file_name(tmp_path: Path) -> None:
    """The offline extractor on an agent's turns naming a full path, then its base name: one FILE node."""
    sid = "s-agent"
    texts = (("assistant", "The bug is in `sympy/printing/str.py`, in `StrPrinter`."),
             ("assistant", "Let me look at `str.py` again: `_print_Relational` ignores the settings."))
    turns = tuple(UnitTurn(i + 1, f"{sid}-m{i + 1}", text, role) for i, (role, text) in enumerate(texts))
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, turns, "h")
    extraction = validate_extraction(extract_heuristic(work), work, semantic_types=DEFAULT_SEMANTIC_TYPES)
    said = {(n.type, n.name) for n in extraction.nodes}
    assert {("FILE", "sympy/printing/str.py"), ("FILE", "str.py")} <= said  # what the rule has to fold
    db = Database(tmp_path / "graph.sqlite3")
    try:
        write(db, sid, turns, reduce_session(sid, [extraction]))
        files = {node_id for (node_id,) in db.query("SELECT id FROM nodes WHERE label = 'FILE'")}
    finally:
        db.close()
    assert files == {"FILE:sympy/printing/str.py"}


def test_session_folds_needs_one_full_path_and_one_test() -> None:
    """The pure rule: one full path of the base name (URLs aside, case kept), one TEST of the name
    as written (a ``()`` aside; not another case, not qualified)."""
    nodes = [("FILE:a.py", "FILE", "a.py"), ("FILE:x/a.py", "FILE", "x/a.py"),
             ("FILE:b.py", "FILE", "b.py"), ("FILE:x/b.py", "FILE", "x/b.py"), ("FILE:y/b.py", "FILE", "y/b.py"),
             ("FILE:c.py", "FILE", "c.py"), ("FILE:https://e.org/c.py", "FILE", "https://e.org/c.py"),
             ("FILE:A.py", "FILE", "A.py"),
             ("TEST:test_x", "TEST", "test_x"), ("METHOD:test_x()", "METHOD", "test_x()"), ("METHOD:Test_x", "METHOD", "Test_x"),
             ("METHOD:T.test_x", "METHOD", "T.test_x")]
    assert session_folds(nodes) == {"FILE:a.py": "FILE:x/a.py", "METHOD:test_x()": "TEST:test_x"}


def test_a_bare_base_name_beside_two_files_of_that_name_is_no_review_pair(tmp_path: Path) -> None:
    """`query.py` said alone, while the graph holds `django/db/models/query.py` and
    `django/db/models/sql/query.py`: the bare name says neither, so neither is offered beside it
    (review list only: the nodes stay as they were). Two spellings of one file
    (`tests/migrations/test_autodetector.py`, `migrations/test_autodetector.py`, one ending the
    other) are one file: a bare `test_autodetector.py` is offered beside both."""
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit(db, "s-models", [("FILE", "django/db/models/query.py")])
        commit(db, "s-sql", [("FILE", "django/db/models/sql/query.py")])
        commit(db, "s-bare", [("FILE", "query.py")])
        commit(db, "s-tests", [("FILE", "tests/migrations/test_autodetector.py")])
        commit(db, "s-short", [("FILE", "migrations/test_autodetector.py")])
        commit(db, "s-bare-test", [("FILE", "test_autodetector.py")])
        review = {frozenset((a, b)) for a, b, _ in pairs(db)}
        files = {node_id for (node_id,) in db.query("SELECT id FROM nodes WHERE label = 'FILE'")}
    finally:
        db.close()
    assert "FILE:query.py" in files and not {p for p in review if "FILE:query.py" in p}
    assert review == {frozenset(("FILE:test_autodetector.py", "FILE:tests/migrations/test_autodetector.py")),
                      frozenset(("FILE:test_autodetector.py", "FILE:migrations/test_autodetector.py"))}


def test_a_bare_method_holding_another_receivers_name_is_no_review_pair_across_sessions(tmp_path: Path) -> None:
    """A bare `mean` node that holds `weighted.mean` (one session said both for one node) is no
    review question beside `window.mean` from a session that never says `mean`: the node is
    (partly) another receiver's method. A session that says `rolling.mean` and `mean` both keeps
    that pair for review. The nodes stay apart either way (review list only)."""
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit(db, "s-weighted", [("METHOD", "mean")], spelled={"mean": ["weighted.mean()"]})
        commit(db, "s-window", [("METHOD", "window.mean")])
        after_window = {frozenset((a, b)) for a, b, _ in pairs(db)}
        commit(db, "s-rolling", [("METHOD", "rolling.mean"), ("METHOD", "mean")])
        review = {frozenset((a, b)) for a, b, _ in pairs(db)}
        methods = {node_id for (node_id,) in db.query("SELECT id FROM nodes WHERE label = 'METHOD'")}
    finally:
        db.close()
    assert {"METHOD:mean", "METHOD:window.mean", "METHOD:rolling.mean"} <= methods
    assert not after_window
    assert frozenset(("METHOD:rolling.mean", "METHOD:mean")) in review
    assert not {p for p in review if "METHOD:window.mean" in p}
