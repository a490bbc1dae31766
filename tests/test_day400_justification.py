"""An edge's ``justification`` holds the texts of at most ``JUSTIFICATION_TEXTS`` (16) of its
sources — the least distinct ones — however many sessions gave it a text of their own: before
(day400), an edge said by N sessions each in its own words kept all N texts, read and rewritten by
every commit touching it, so a re-extraction cost grew with the edge's history. The rule is a
function of the points' texts: commits in any order, a re-extraction, a forget (which brings the
17th text in) and a build from scratch give the same text. Real commits (``commit_session``) and
``forget`` on real SQLite and PostgreSQL databases."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from config import Settings, load_settings
from pipelines.extract.commit import commit_session
from pipelines.extract.model import ChunkExtraction, Evidence, ExtractedEdge, ExtractedNode
from pipelines.extract.reduce import ReducedSession, reduce_session
from pipelines.forget import forget_session
from store.backend import open_database
from store.graph import Edge, Node
from store.provenance import JUSTIFICATION_TEXTS, EdgePointRow, PointRow, justification_text, least_texts
from store.unit_of_work import DatabaseUnitOfWork

EDGE = ("CLASS:Alpha", "CLASS:Beta", "DEPENDS_ON")


def said(session_id: str, text: str) -> ReducedSession:
    """A session saying Alpha DEPENDS_ON Beta from its first turn, justified by ``text``."""
    turn = f"{session_id}-t0"
    nodes = tuple(ExtractedNode(f"CLASS:{n}", "CLASS", n, evidence=(Evidence(turn, n),)) for n in ("Alpha", "Beta"))
    edge = ExtractedEdge(*EDGE, text, (Evidence(turn, "Alpha"),))
    return reduce_session(session_id, [ChunkExtraction(f"{session_id}:chunk:0", nodes=nodes, edges=(edge,))])


def commit(unit: DatabaseUnitOfWork, reduced: ReducedSession) -> None:
    commit_session(reduced, unit=unit, graph_index=None, on_commit=lambda: None, queue_append=lambda lines: 0,
                   matcher=lambda candidates, index: {})


def built(settings: Settings, sessions: list[tuple[str, str]]) -> str:
    """The edge's justification once ``sessions`` (id, text) are committed in this order."""
    db = open_database(settings)
    try:
        unit = DatabaseUnitOfWork(db)
        unit.graph.upsert_nodes([Node(f"session:{s}", "SESSION", s, {}) for s, _ in sessions])
        for session_id, text in sessions:
            commit(unit, said(session_id, text))
        return justification(db)
    finally:
        db.close()


def justification(db: Any) -> str:
    rows = db.query("SELECT properties FROM edges WHERE source = ? AND target = ? AND relationship = ?", EDGE)
    return json.loads(rows[0][0])["justification"]


@pytest.fixture
def scratch(settings: Settings, backend: str, request: pytest.FixtureRequest) -> Iterator[Settings]:
    """Another empty database of the test's engine (a build from scratch): a folder of its own, or
    a fresh PostgreSQL schema, dropped afterwards."""
    if backend == "sqlite":
        yield settings.model_copy(update={"data_dir": settings.data_dir / "scratch"})
        return
    import psycopg

    from store.postgres import close_pools

    server, schema = request.getfixturevalue("postgres_server_url"), f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in server else "?"
    yield load_settings(data_dir=settings.data_dir / "scratch", database_url=f"{server}{separator}options={quote(f'-csearch_path={schema}')}")
    close_pools()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


TEXTS = [(f"s{n:02d}", f"said in session {n:02d}") for n in range(JUSTIFICATION_TEXTS + 8)]


@pytest.mark.both_backends
def test_an_edge_keeps_the_least_texts_of_its_sources_however_many_gave_one(settings: Settings, scratch: Settings) -> None:
    expected = justification_text(t for _, t in TEXTS[:JUSTIFICATION_TEXTS])
    assert built(settings, TEXTS[::-1]) == expected  # newest text first: each later one is less
    assert built(scratch, TEXTS) == expected
    # Before: all 24 texts, and a 25th session's commit read and wrote every one of them.
    assert len(expected.split("; ")) == JUSTIFICATION_TEXTS < len(TEXTS)


@pytest.mark.both_backends
def test_a_reextraction_and_a_forget_give_what_a_build_from_scratch_gives(settings: Settings, scratch: Settings) -> None:
    built(settings, TEXTS)
    db = open_database(settings)
    try:
        unit = DatabaseUnitOfWork(db)
        # s03 says it again in other words (a re-extraction), then s01 is forgotten.
        commit(unit, said("s03", "zz: s03 in other words"))
        assert justification(db) == justification_text(t for _, t in [*TEXTS[:3], *TEXTS[4:JUSTIFICATION_TEXTS + 1]])
        forget_session(unit, "s01")
        kept = [*TEXTS[:1], *TEXTS[2:3], *TEXTS[4:], ("s03", "zz: s03 in other words")]
        assert justification(db) == justification_text(least_texts(t for _, t in kept))
        now = justification(db)
    finally:
        db.close()
    assert built(scratch, sorted(kept)) == now


@pytest.mark.both_backends
def test_the_read_of_other_sessions_texts_stops_at_the_least(settings: Settings) -> None:
    """``edge_texts`` seeks an edge's distinct texts through ``edge_points_reason`` and stops at
    JUSTIFICATION_TEXTS: it gives the least texts a read of every point gives — multi-part texts
    whole, the session's own points, NULL (before schema 15) and empty texts left out."""
    db = open_database(settings)
    try:
        unit = DatabaseUnitOfWork(db)
        provenance = unit.provenance
        unit.graph.upsert_nodes([Node(f"CLASS:N{i}", "CLASS", f"N{i}", {}) for i in range(4)])
        texts = {  # edge → (anchor, justification) of its points
            ("CLASS:N0", "CLASS:N1", "DEPENDS_ON"): [("session:me", "mine"), ("session:a", "b; a"), ("session:b", "a"),
                                                     ("session:c", None), ("session:d", ""), ("session:e", "z"), ("session:f", "a")],
            ("CLASS:N1", "CLASS:N2", "DEPENDS_ON"): [("session:me", "mine")],
            ("CLASS:N2", "CLASS:N3", "DEPENDS_ON"): [("session:me", "a")] + [(f"session:o{i}", f"t{i}") for i in range(JUSTIFICATION_TEXTS + 4)],
        }
        unit.graph.link_nodes([Edge(*key, 1.0, {}) for key in texts])
        provenance.add_edge_points([
            EdgePointRow(key, PointRow(anchor, f"memory:{anchor[8:]}-t{n}", "c", ""), key[0], key[1], justification=text)
            for key, points in texts.items() for n, (anchor, text) in enumerate(points)
        ])
        every = {key: [r[0] for r in db.query("SELECT justification FROM edge_points WHERE source = ? AND target = ? "
                                               "AND relationship = ? AND anchor != ?", (*key, "session:me"))] for key in texts}
        assert provenance.edge_texts(texts, besides="session:me") == {key: least_texts(found) for key, found in every.items()} == {
            ("CLASS:N0", "CLASS:N1", "DEPENDS_ON"): ("a", "b; a", "z"), ("CLASS:N1", "CLASS:N2", "DEPENDS_ON"): (),
            ("CLASS:N2", "CLASS:N3", "DEPENDS_ON"): tuple(sorted(f"t{i}" for i in range(JUSTIFICATION_TEXTS + 4))[:JUSTIFICATION_TEXTS]),
        }
        assert provenance.edge_reasons(("CLASS:N0", "CLASS:N1", "DEPENDS_ON"), besides="session:me") == {"a", "b", "z"}
        assert provenance.edge_texts(texts)[("CLASS:N2", "CLASS:N3", "DEPENDS_ON")][0] == "a"  # nobody left out
    finally:
        db.close()
