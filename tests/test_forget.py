"""``rem-cycle forget``: a forgotten session leaves the graph a graph built without it would be; a
tombstone keeps it out; rows deleted from Chroma are retracted by the next cycle; a forgotten turn
is never read again. Real Chroma (embedded), real cycles, real SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.forget import forget_memory, forget_session
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from store.db import Database
from store.graph import GraphStore
from store.unit_of_work import DatabaseUnitOfWork
from tests.conftest import run_cli, write_sessions
from worker.cycle import run_cycle


def _session(sid: str, created: str, turns: list[str]) -> dict[str, Any]:
    return {
        "sessionId": sid, "title": f"Session {sid}", "createdAt": created, "summary": f"about {sid}",
        "turns": [{"id": f"{sid}-t{i}", "role": "user", "text": t} for i, t in enumerate(turns)],
    }


SESSIONS = {
    "a": _session("a", "2026-11-01T10:00:00Z", ["The LazyEdgeQueue feeds GraphStore through src/queue/lazy.py.", "GraphStore keeps nodes."]),
    "b": _session("b", "2026-11-02T10:00:00Z", ["GraphStore and DrainWorker fight over the LazyEdgeQueue lock, see #42.", "DrainWorker retries."]),
    "c": _session("c", "2026-11-03T10:00:00Z", ["The LazyEdgeQueue and RetryPolicy live in src/queue/lazy.py.", "RetryPolicy backs off."]),
}


async def _build(settings: Settings, tmp_path: Path, names: list[str]) -> None:
    await import_sessions(
        write_sessions(tmp_path / f"in-{''.join(names)}.jsonl", [SESSIONS[n] for n in names]),
        chroma=ChromaStore(settings), memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message


def canonical(source: Settings | Path) -> dict[str, Any]:
    """The graph as data: nodes, edges, points and claims, without write times (of the graph
    database ``source`` settings name, or of the SQLite file at a path)."""
    db = Database(source) if isinstance(source, Path) else open_database(source)
    try:
        return {
            "nodes": [tuple(r) for r in db.query("SELECT id, label, name, properties FROM nodes ORDER BY id")],
            "edges": [tuple(r) for r in db.query("SELECT source, target, relationship, weight, properties FROM edges ORDER BY 1, 2, 3")],
            "node_points": sorted(tuple(r) for r in db.query("SELECT node_id, anchor, memory_id, chunk_id, evidence, observed_at FROM node_points")),
            "edge_points": sorted(tuple(r) for r in db.query("SELECT source, target, relationship, anchor, memory_id, chunk_id, evidence FROM edge_points")),
            "claims": sorted(tuple(r) for r in db.query("SELECT node_id, anchor, description, aliases, tags, confidence FROM node_claims")),
        }
    finally:
        db.close()


def _settings(path: Path) -> Settings:
    """A reference graph built apart: always an SQLite file in ``path``."""
    return load_settings(data_dir=path, database_url="")


def _env(settings: Settings) -> dict[str, str]:
    """The environment of a ``rem-cycle`` subprocess on the test's data dir and graph database."""
    url = settings.database_url.get_secret_value() if settings.database_url else None
    return {"REM_DATA_DIR": str(settings.data_dir), **({"REM_DATABASE_URL": url} if url else {})}


@pytest.mark.both_backends
async def test_forgetting_a_session_leaves_the_graph_built_without_it(settings: Settings, tmp_path: Path, clean_env) -> None:
    await _build(settings, tmp_path, ["a", "b", "c"])
    env = _env(settings)
    full = canonical(settings)

    dry = run_cli("forget", "--session", "b", "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] and "CLASS:DrainWorker" in planned["knowledge_nodes_removed"] and planned["points"] > 0
    assert canonical(settings) == full  # a dry run changes nothing

    done = run_cli("forget", "--session", "b", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # ``erased``: what a real run did after its commit (the text out of the files), not what went.
    assert {k: v for k, v in report.items() if k not in ("dry_run", "erased")} == {k: v for k, v in planned.items() if k != "dry_run"}
    assert report["memories"] == 2 and report["digests"] == 1 and report["chunk_results"] >= 1 and report["erased"] is True

    other = tmp_path / "without-b"
    clean_env.setenv("REM_DATA_DIR", str(other))
    await _build(_settings(other), tmp_path, ["a", "c"])
    without_b = canonical(other / "graph.sqlite3")
    assert canonical(settings) == without_b != full

    # b's rows are still in Chroma: the tombstone keeps a later cycle from bringing it back
    clean_env.setenv("REM_DATA_DIR", str(settings.data_dir))
    again = await run_cycle(settings)
    assert again.outcome == "completed" and again.phases["ingest"]["sessions_changed"] == 0
    assert canonical(settings) == without_b != full


@pytest.mark.both_backends
async def test_rows_deleted_from_chroma_are_retracted_by_the_next_cycle(settings: Settings, tmp_path: Path, clean_env) -> None:
    await _build(settings, tmp_path, ["a", "c"])
    chroma = ChromaStore(settings)
    (await chroma.memories()).delete(ids=["c-t0", "c-t1"])
    (await chroma.summaries()).delete(where={"sessionId": "c"})
    result = await run_cycle(settings)
    assert result.outcome == "completed" and result.phases["ingest"]["sessions_retracted"] == 1

    other = tmp_path / "only-a"
    clean_env.setenv("REM_DATA_DIR", str(other))
    await _build(_settings(other), tmp_path, ["a"])
    assert canonical(settings) == canonical(other / "graph.sqlite3")


@pytest.mark.both_backends
async def test_a_forgotten_turn_is_gone_and_never_read_again(settings: Settings, tmp_path: Path) -> None:
    await _build(settings, tmp_path, ["b"])
    env = _env(settings)
    done = run_cli("forget", "--memory", "memory:b-t1", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["session"] == "b"
    result = await run_cycle(settings)  # re-extracts b without the turn
    assert result.outcome == "completed" and result.phases["extract"]["sessions_digested"] == 1
    db = open_database(settings)
    try:
        assert db.query("SELECT COUNT(*) FROM node_points WHERE memory_id = 'memory:b-t1'")[0][0] == 0
        assert db.query("SELECT COUNT(*) FROM edges WHERE target = 'memory:b-t1' AND relationship = 'MENTIONED_IN'")[0][0] == 0
        assert db.query("SELECT COUNT(*) FROM node_points WHERE memory_id = 'memory:b-t0'")[0][0] > 0
    finally:
        db.close()
    bad = run_cli("forget", "--session", "no such/id", env=env)
    assert bad.returncode == 1 and "session id" in bad.stderr


async def test_what_forget_reports_removed_is_what_left_the_graph(settings: Settings, tmp_path: Path) -> None:
    """The report counts only the nodes that can go and the edges touching them (never all of a
    popular node's edges): the counts still equal the difference in the whole graph."""
    await _build(settings, tmp_path, ["a", "b", "c"])
    db = Database(settings.graph_path)
    try:
        _forget_counting((forget_memory, "b-t0"), (forget_session, "a"), (forget_memory, "c-t1"), (forget_session, "b"), db=db)
    finally:
        db.close()


def _forget_counting(*forgets: tuple[Any, str], db: Any) -> None:
    """Each ``(forget, item)`` in turn, its report's removal counts checked against the graph's totals."""
    graph = GraphStore(db)

    def totals() -> tuple[int, int]:
        counts = graph.counts()
        return counts["node_total"], counts["edge_total"]

    for forget, item in forgets:
        nodes, edges = totals()
        report = forget(DatabaseUnitOfWork(db), item)
        after = totals()
        assert (report["nodes_removed"], report["edges_removed"]) == (nodes - after[0], edges - after[1]), item
        assert report["edges_removed"] > 0


@pytest.mark.both_backends
async def test_forget_reads_the_edges_it_counts_and_rewrites_in_batches(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forget reads the edges it counts (before and after) and the edges whose points a turn
    took with ``GraphStore.get_edges``, a statement per batch, never one ``get_edge`` — on
    PostgreSQL a round trip — per key; what it removes and reports is what it did before, and
    what the graph says it lost."""
    await _build(settings, tmp_path, ["a", "b", "c"])
    one_by_one: list[tuple[str, str, str]] = []
    single = GraphStore.get_edge

    def counted(self: GraphStore, source: str, target: str, relationship: str):  # type: ignore[no-untyped-def]
        one_by_one.append((source, target, relationship))
        return single(self, source, target, relationship)

    monkeypatch.setattr(GraphStore, "get_edge", counted)
    db = open_database(settings)
    try:
        _forget_counting((forget_memory, "b-t0"), (forget_session, "a"), (forget_memory, "c-t1"), db=db)
    finally:
        db.close()
    assert one_by_one == []
    # The same graph as forgetting through the CLI's path of old: forgetting ``a`` and two turns
    # leaves what a graph built from the rest says of b and c, checked by the tests above; here
    # the edges no forgotten point supports are gone and those of the other turns are kept.
    db = open_database(settings)
    try:
        assert db.query("SELECT COUNT(*) FROM edge_points WHERE memory_id IN ('memory:b-t0', 'memory:c-t1')")[0][0] == 0
        assert db.query("SELECT COUNT(*) FROM edge_points WHERE anchor = 'session:a'")[0][0] == 0
        assert db.query("SELECT COUNT(*) FROM edge_points WHERE memory_id IN ('memory:b-t1', 'memory:c-t0')")[0][0] > 0
    finally:
        db.close()
