"""A pair on the identity review list is one review, whichever node a session found ambiguous: a
session saying `joseph francis` and `joseph francis tribbiani` (both new) made the shorter name's
`extension` candidate the longer and the longer's `token-set` candidate the shorter — the same pair
twice, seen on real runs (bench/RESULTS.md, "Review pairs stored once"). Stored once, unordered
(migration 12's unique index); a reviewer's merge or unmerge settles it from either node's id; an
older database's doubled pairs are folded by the migration. Real SQLite files and a real PostgreSQL
server (``both_backends``), the worker's resolver and the extraction commit."""

from __future__ import annotations

import json

import pytest

from config import Settings
from store.backend import open_database
from store.db import MIGRATIONS, Database
from store.merges import CandidatePair, MergeStore
from tests.conftest import run_cli
from tests.test_identity_context import commit
from tests.migrations_support import roll_back
from worker.knowledge import identity_candidates, merge_node, unmerge_node

SHORT, LONG = "CONCEPT:joseph francis", "CONCEPT:joseph francis tribbiani"
PAIRS_VERSION = 12


def rows(db: Database) -> list[tuple[str, str, str]]:
    return [(a, b, rule) for a, b, rule in db.query("SELECT node_id, candidate_id, rule FROM identity_candidates ORDER BY node_id")]


def said_from_both_sides(settings: Settings) -> None:
    db = open_database(settings)
    try:
        commit(db, "a", [("CONCEPT", "joseph francis"), ("CONCEPT", "joseph francis tribbiani")])
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_pair_found_from_both_sides_is_listed_once(settings: Settings) -> None:
    said_from_both_sides(settings)
    db = open_database(settings)
    try:
        # The first side's row is kept and takes the later side's rule and score.
        assert rows(db) == [(SHORT, LONG, "token-set")]
        merges = MergeStore(db)
        assert merges.candidate_count() == 1 and merges.candidate_node_count() == 1
        # A later session reporting the pair the other way round (or the same way) updates that row.
        assert merges.record_candidates([CandidatePair(LONG, SHORT, "extension", 0.6, "joseph francis tribbiani", "b"),
                                         CandidatePair(SHORT, LONG, "fuzzy", 0.7, "joseph francis", "c")]) == 2
        assert [tuple(r) for r in db.query("SELECT node_id, candidate_id, rule, session_id FROM identity_candidates")] == [
            (SHORT, LONG, "fuzzy", "c")]
    finally:
        db.close()
    pairs, total = identity_candidates(settings)
    assert total == 1 and [(p["node_id"], p["candidate_id"]) for p in pairs] == [(SHORT, LONG)]


@pytest.mark.both_backends
@pytest.mark.parametrize("merged, into", [(SHORT, LONG), (LONG, SHORT)])
def test_a_reviewer_settles_the_pair_from_either_node(settings: Settings, merged: str, into: str) -> None:
    """`rem-cycle merge` either way takes the pair off the list; `rem-cycle unmerge` of that merge
    keeps it off (the two are kept apart) even when later sessions report it again, either way
    round — whichever node the stored row starts from."""
    said_from_both_sides(settings)
    merge_node(settings, merged, into)
    assert identity_candidates(settings) == ([], 0)
    unmerge_node(settings, merged)
    db = open_database(settings)
    try:
        merges = MergeStore(db)
        assert merges.blocked_pairs() == frozenset({(merged, into)})
        assert merges.record_candidates([CandidatePair(SHORT, LONG, "extension", 0.6, "joseph francis", "b"),
                                         CandidatePair(LONG, SHORT, "token-set", 0.667, "joseph francis tribbiani", "b")]) == 2
        assert len(rows(db)) == 1 and merges.candidate_node_count() == 0
    finally:
        db.close()
    assert identity_candidates(settings) == ([], 0)


@pytest.mark.both_backends
def test_the_migration_folds_pairs_kept_twice(settings: Settings, backend: str) -> None:
    """A database written before migration 12 (its index dropped, its version removed) holding
    pairs both ways: reopening folds each to the row with the higher score (ties: the one from the
    lesser id) and adds the index; pairs kept once are untouched."""
    db = open_database(settings)
    try:
        commit(db, "a", [("CONCEPT", "joseph francis"), ("CONCEPT", "joseph francis tribbiani"), ("CONCEPT", "retry backoff"),
                         ("CONCEPT", "backoff retry policy"), ("PERSON", "Paris"), ("PLACE", "Paris")])
        with db.transaction() as conn:
            roll_back(conn, backend, to=PAIRS_VERSION)  # the later migrations, then this one
            conn.execute("DROP INDEX identity_candidates_pair")
            conn.execute("DELETE FROM schema_version WHERE version = ?", (PAIRS_VERSION,))
            conn.execute("DELETE FROM identity_candidates")
            conn.executemany(
                "INSERT INTO identity_candidates(node_id, candidate_id, rule, score, form, session_id) VALUES (?, ?, ?, ?, ?, 'a')",
                [(SHORT, LONG, "extension", 0.6, "s"), (LONG, SHORT, "token-set", 0.667, "l"),  # the higher score wins
                 ("CONCEPT:retry backoff", "CONCEPT:backoff retry policy", "token-set", 0.667, "r"),  # a tie: the lesser id's row
                 ("CONCEPT:backoff retry policy", "CONCEPT:retry backoff", "token-set", 0.667, "b"),
                 ("PLACE:Paris", "PERSON:Paris", "cross-type", 0.5, "p")],  # once: kept
            )
        assert db.schema_version == PAIRS_VERSION - 1
    finally:
        db.close()
    db = open_database(settings)
    try:
        assert db.schema_version == len(MIGRATIONS)
        assert rows(db) == [("CONCEPT:backoff retry policy", "CONCEPT:retry backoff", "token-set"), (LONG, SHORT, "token-set"),
                            ("PLACE:Paris", "PERSON:Paris", "cross-type")]
        MergeStore(db).record_candidates([CandidatePair("PERSON:Paris", "PLACE:Paris", "cross-type", 0.5, "Paris", "b")])
        assert len(rows(db)) == 3
    finally:
        db.close()


def test_the_command_line_lists_the_pair_once_and_settles_it_from_the_other_node(settings: Settings) -> None:
    """`rem-cycle candidates` and `status` count the pair once; `rem-cycle merge` of the node the row
    does not start from, then `unmerge`, leave nothing to review though the pair is reported again."""
    said_from_both_sides(settings)
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    listed = json.loads(run_cli("candidates", "--json", env=env).stdout)
    assert listed["total"] == 1 and [(p["node_id"], p["candidate_id"]) for p in listed["candidates"]] == [(SHORT, LONG)]
    for args in (("merge", LONG, SHORT), ("unmerge", LONG)):
        done = run_cli(*args, env=env)
        assert done.returncode == 0, done.stderr
    db = open_database(settings)
    try:
        MergeStore(db).record_candidates([CandidatePair(SHORT, LONG, "extension", 0.6, "joseph francis", "b")])
    finally:
        db.close()
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert (status["identity_candidates"], status["identity_candidate_pairs"]) == (0, 0)
