"""Recall as of a moment: its boundaries (asof, twenty-sixth session). A turn, a point, a node, an
edge, a term, a ``common`` count and a grounding turn observed exactly at the as-of moment are in;
one millisecond later they are out, on SQLite and PostgreSQL, whatever form the stored time and the
argument were written in (both become ``YYYY-MM-DDTHH:MM:SS.mmmZ``, compared as text). A written
date names midnight without a colon, a zone name means the same on every machine, and a turn
without a time is known at no date by any reader. Real SQLite
files and the test PostgreSQL server, embedded Chroma, a real cycle and real ``rem-cycle`` processes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.asof import parse_as_of as show_as_of
from pipelines.recall import RecallInputError, parse_as_of
from pipelines.vocabulary import PROVENANCE_RELATIONSHIPS
from store.backend import open_database
from store.recall_index import RecallIndex, Scope, term_match
from store.timeparse import iso_to_utc
from tests.conftest import run_cli
from tests.test_forget import _env
from tests.test_recall import ask, build

pytestmark = pytest.mark.timeout(180)

# The first turn's time written with an offset, the second's without a zone (UTC): ingest stores
# both as 10:00:00.000Z and 10:00:00.250Z.
SESSIONS: list[dict[str, Any]] = [
    {"sessionId": "s1", "title": "Queue work", "createdAt": "2026-12-04T12:00:00+02:00", "userId": "alice",
     "summary": "Alice and the LazyEdgeQueue drain.",
     "turns": [{"id": "t1", "role": "user", "createdAt": "2026-12-04T12:00:00+02:00",
                "text": "The LazyEdgeQueue drain() loses torn lines in the OspreyStore."},
               {"id": "t2", "role": "assistant", "createdAt": "2026-12-04T10:00:00.250",
                "text": "OspreyStore calls drain() on the LazyEdgeQueue."}]},
]
NODES = ["CLASS:LazyEdgeQueue", "CLASS:OspreyStore", "METHOD:drain"]
# 2026-12-04T10:00:00.000Z, the first turn's moment, in each form recall reads.
AT_FIRST = ["2026-12-04T10:00Z", "2026-12-04T10:00:00.000000Z", "2026-12-04T12:00:00+02:00", "2026-12-04T10:00:00",
            "2026-12-04T10:00:00.000+00:00", "20261204T100000Z", "Dec 4 2026 10:00 UTC", "1796378400", "1796378400000"]
BEFORE_FIRST = ["2026-12-04T09:59:59.999Z", "2026-12-04T11:59:59.999+02:00", "2026-12-04T09:59:59.999999Z", "1796378399.999"]
AT_SECOND = ["2026-12-04T10:00:00.25Z", "2026-12-04T10:00:00.250000+00:00", "2026-12-04T11:00:00.250+01:00", "2026-12-04"]
BEFORE_SECOND = ["2026-12-04T10:00:00.249Z", "2026-12-04T10:00:00.2499Z", "2026-12-04T10:00:00.249999"]


@pytest.fixture
async def graph(settings: Settings, tmp_path: Path) -> Settings:
    await build(settings, tmp_path, SESSIONS)
    return settings


def view(settings: Settings, scope: Scope) -> dict[str, Any]:
    """What every reader of ``store.recall_index`` sees of the graph in ``scope``."""
    db = open_database(settings, readonly=True)
    try:
        index = RecallIndex(db)
        return {
            "turns": sorted(index.turns(["memory:t1", "memory:t2"], scope)),
            "keyword": sorted(index.keyword_turns(term_match("drain"), scope, limit=10)),
            "sessions": {k: v.summary != "" for k, v in index.sessions(["session:s1"], scope).items()},
            "nodes": sorted(index.matching_nodes(term_match("ospreystore"), scope, limit=10)),
            "common": index.point_counts(NODES, scope, cap=100),
            "grounding": index.grounding_turns(NODES, scope),
            "neighbours": index.neighbours(["CLASS:LazyEdgeQueue"], scope, exclude_relationships=PROVENANCE_RELATIONSHIPS, limit=10),
            "terms": index.term_sessions(["torn", "calls"], scope),
            "facts": [(f.node_id, f.memory_id, [(e.other_id, e.places) for e in f.edges])
                      for f in index.facts(NODES[:1], scope, exclude_relationships=PROVENANCE_RELATIONSHIPS, edges_per_node=5)],
        }
    finally:
        db.close()


def expected(turns: int) -> dict[str, Any]:
    """The view when the first ``turns`` turns were said (0, 1 or 2)."""
    said = ["memory:t1", "memory:t2"][:turns]
    return {
        "turns": said, "keyword": said,
        "sessions": {"session:s1": turns == 2} if turns else {},
        "nodes": NODES if turns else [],  # a claim of each speaks of the OspreyStore
        "common": dict.fromkeys(NODES, turns),
        "grounding": {n: [(m, 1) for m in said] for n in NODES} if turns else {},
        "neighbours": ["CLASS:OspreyStore", "METHOD:drain"] if turns else [],
        "terms": {"torn": {"session:s1": 1} if turns else {}, "calls": {"session:s1": 1} if turns == 2 else {}},
        "facts": [("CLASS:LazyEdgeQueue", "memory:t1", [("CLASS:OspreyStore", turns), ("METHOD:drain", turns)])] if turns else [],
    }


@pytest.mark.both_backends
async def test_what_was_observed_exactly_at_the_moment_is_in_and_a_millisecond_later_out(graph: Settings) -> None:
    """Every reader (turns, sessions and summaries, nodes, edges, terms, ``common`` counts,
    grounding turns, facts) takes what was observed at the moment itself, with and without a
    user's scope (``_points_seen`` bounds the points differently beside sessions), whichever form
    the moment and the stored time were written in."""
    for sessions in (None, frozenset({"session:s1"})):
        for forms, turns in ((BEFORE_FIRST, 0), (AT_FIRST, 1), (BEFORE_SECOND, 1), (AT_SECOND, 2)):
            for text in forms:
                assert view(graph, Scope(sessions=sessions, as_of=parse_as_of(text))) == expected(turns), (text, sessions)
    # A moment after everything (the future) is the graph as it is now, no error.
    assert view(graph, Scope(as_of=parse_as_of("2999-01-01"))) == view(graph, Scope()) == expected(2)
    answer = ask(graph, "OspreyStore drain", as_of=parse_as_of("2026-12-04T12:00+02:00"))
    assert [t["memory_id"] for t in answer["turns"]] == ["memory:t1"]
    assert "CLASS:OspreyStore" in [f["id"] for f in answer["facts"]]


@pytest.mark.both_backends
def test_the_cli_reads_the_moment_as_recall_does(graph: Settings) -> None:
    """``rem-cycle recall --as-of`` at the moment with an offset, and ``show --as-of`` one
    millisecond before it (not known yet, exit 1) and at it."""
    env = _env(graph)
    done = run_cli("recall", "drain", "--as-of", "2026-12-04T12:00+02:00", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert [t["memory_id"] for t in json.loads(done.stdout)["turns"]] == ["memory:t1"]
    before = run_cli("show", "CLASS:OspreyStore", "--as-of", "2026-12-04T11:59:59.999+02:00", env=env)
    at = run_cli("show", "CLASS:OspreyStore", "--as-of", "2026-12-04T12:00+02:00", env=env)
    assert (before.returncode, at.returncode) == (1, 0), (before.stderr, at.stderr)
    assert "not known yet as of 2026-12-04T09:59:59.999Z (first seen 2026-12-04T10:00:00.000Z)" in before.stderr


@pytest.mark.parametrize(("text", "moment"), [
    ("Dec 4 2026 12am", "2026-12-04T00:00:00.000Z"),
    ("December 4, 2026 at 12 AM", "2026-12-04T00:00:00.000Z"),
    ("2026/12/04 0000", "2026-12-04T00:00:00.000Z"),
    ("Dec 4 2026 0h", "2026-12-04T00:00:00.000Z"),
    ("Dec 4 2026 12 AM UTC", "2026-12-04T00:00:00.000Z"),
    ("Dec 4 2026", "2026-12-04T23:59:59.999Z"),
    ("Dec 4 2026 10pm", "2026-12-04T22:00:00.000Z"),
])
def test_a_written_midnight_is_the_start_of_its_day_not_the_end(text: str, moment: str) -> None:
    """A written time of midnight without a colon (``12am``, ``0000``) was taken for no time at
    all, so for the end of that day: 24 hours of turns too many."""
    assert parse_as_of(text) == moment


@pytest.fixture(params=["UTC", "Europe/Paris", "America/New_York"])
def local_zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The process's local zone set to ``request.param`` (``TZ``), put back after."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("zone", ["CET", "CEST", "EST", "EDT", "PST"])
def test_a_zone_name_is_read_the_same_on_every_machine(local_zone: str, zone: str) -> None:
    """dateutil read a name of the machine's own zone as that zone's offset on the date, not the
    one the name says (``10:00 CEST`` on the 4th of December on a Paris machine was 09:00Z, not
    08:00Z; ``EDT`` in New York 15:00Z, not 14:00Z) and refused it on any other machine. A name
    other than UTC/GMT/Z is now refused everywhere; an offset and UTC read the same everywhere."""
    with pytest.raises(RecallInputError, match="names a time zone not understood: give an offset"):
        parse_as_of(f"4 Dec 2026 10:00 {zone}")
    assert parse_as_of("4 Dec 2026 10:00 +02:00") == "2026-12-04T08:00:00.000Z"
    assert parse_as_of("4 Dec 2026 10:00 GMT") == parse_as_of("4 Dec 2026 10:00") == "2026-12-04T10:00:00.000Z"


def test_a_lower_case_z_is_utc_for_show_as_for_recall_and_the_turns_times() -> None:
    """``show``/``search``/``export --as-of 2026-12-04T10:00z`` was refused as no ISO 8601 time,
    where recall read it as UTC and ingest reads a turn's ``createdAt`` so (``iso_to_utc``)."""
    assert show_as_of("2026-12-04t10:00:00.5z") == parse_as_of("2026-12-04t10:00:00.5z") == iso_to_utc("2026-12-04t10:00:00.5z")
    assert show_as_of("2026-12-04T10:00z") == "2026-12-04T10:00:00.000Z"


@pytest.mark.both_backends
async def test_a_turn_without_a_time_is_known_at_no_date_by_every_reader(settings: Settings, tmp_path: Path) -> None:
    """A turn with no ``createdAt`` (nor its session's) is known at no date by recall and MCP
    ``show_node`` (``_known``: NULL is not known), and its session by every reader; ``show`` and
    ``export`` as of any date showed the turn (``graph_as_of`` kept an anchor without a time)."""
    untimed = {"sessionId": "s0", "title": "Untimed", "userId": "alice",
               "turns": [{"id": "u1", "role": "user", "text": "The OspreyStore keeps no clock."}]}
    await build(settings, tmp_path, [*SESSIONS, untimed])
    env = _env(settings)
    exported = run_cli("export", "--as-of", "2999-01-01", "--include-anchors", env=env)
    assert exported.returncode == 0, exported.stderr
    ids = {n["id"] for n in json.loads(exported.stdout)["nodes"]}
    assert {"memory:t1", "memory:t2", "session:s1"} <= ids and not ids & {"memory:u1", "session:s0"}, ids
    shown = run_cli("show", "memory:u1", "--as-of", "2999-01-01", env=env)
    assert shown.returncode == 1, (shown.stdout, shown.stderr)
    assert view(settings, Scope(as_of=parse_as_of("2999-01-01")))["turns"] == ["memory:t1", "memory:t2"]
