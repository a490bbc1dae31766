"""Migration 5 converts a graph written by the release before provenance rows in place, and the
migrated graph says what that release said: counts, weights, export, ``show``, ``search``
(tests/fixtures/release_v4: a real database of that release and its own answers)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.db import Database
from store.graph import GraphStore
from store.merges import MergeStore
from store.provenance import ProvenanceStore
from worker.cli import SHOW_LIMIT
from worker.knowledge import search_graph, show_node, snapshot_from_db
from tests.test_graph import counted_by_scan

FIXTURE = Path(__file__).parent / "fixtures" / "release_v4"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sessions.jsonl"


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    with gzip.open(FIXTURE / "expected.json.gz", "rt", encoding="utf-8") as handle:
        return json.load(handle)


def load_release_graph(path: Path) -> None:
    """The fixture's SQL dump as a database file of schema version 4."""
    with gzip.open(FIXTURE / "graph.sql.gz", "rt", encoding="utf-8") as handle:
        script = handle.read()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript(script)
    finally:
        conn.close()


def without_times(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({k: v for k, v in p.items() if k != "observed_at"} for p in points), key=lambda p: json.dumps(p, sort_keys=True))


def test_migrated_graph_exports_what_the_release_exported(tmp_path: Path, expected: dict[str, Any]) -> None:
    path = tmp_path / "graph.sqlite3"
    load_release_graph(path)
    db = Database(path)
    try:
        assert db.schema_version >= 5
        assert db.query("SELECT COUNT(*) FROM nodes WHERE json_type(properties, '$.provenance') IS NOT NULL")[0][0] == 0
        # Migration 10 counted the migrated graph once; the counts equal a full count.
        assert GraphStore(db).counts() == counted_by_scan(db)
        snapshot = snapshot_from_db(db, include_anchors=True)
        old = expected["export_all"]
        old_edge_points = {
            (e["source"], e["target"], e["relationship"]): e["properties"].pop("provenance") for e in old["edges"] if "provenance" in e["properties"]
        }
        assert snapshot["counts"] == old["counts"]
        new_times = ("first_seen", "last_seen")
        assert [{k: v for k, v in n.items() if k not in new_times} for n in snapshot["nodes"]] == old["nodes"]
        # every weight and property, provenance aside
        assert [{k: v for k, v in e.items() if k not in new_times} for e in snapshot["edges"]] == old["edges"]
        assert all(n["first_seen"] for n in snapshot["nodes"] if n["id"] in snapshot["provenance"] and n["id"] not in snapshot["file_sources"])
        for key in ("sessions", "file_sources", "node_sessions", "communities"):
            assert snapshot[key] == old[key], key
        assert {k: without_times(v) for k, v in snapshot["provenance"].items()} == {k: without_times(v) for k, v in old["provenance"].items()}
        rows: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for r in db.query("SELECT * FROM edge_points"):
            rows.setdefault((r["source"], r["target"], r["relationship"]), []).append(
                {"session": r["anchor"], "memory": r["memory_id"] or None, "chunk_id": r["chunk_id"], "evidence": r["evidence"] or None}
            )
        assert {k: without_times(v) for k, v in rows.items()} == {k: without_times(v) for k, v in old_edge_points.items()}
        # every turn's time came along: points of turns carry the turn's createdAt
        assert db.query("SELECT COUNT(*) FROM node_points WHERE memory_id != '' AND observed_at IS NULL")[0][0] == 0
        # aliases are rows now, one per alias of every node
        aliases = sum(len(n["properties"].get("aliases", [])) for n in old["nodes"])
        assert db.query("SELECT COUNT(*) FROM node_aliases")[0][0] == aliases
    finally:
        db.close()


async def test_migrated_graph_shows_and_finds_what_the_release_did(settings: Settings, expected: dict[str, Any]) -> None:
    load_release_graph(settings.graph_path)
    await import_sessions(
        EXAMPLES, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
        summary_collection=settings.session_collection,
    )
    for node_id, old in expected["show"].items():
        view = await show_node(settings, node_id, limit=SHOW_LIMIT)
        assert view is not None
        new = {k: v for k, v in view.items() if k not in ("first_seen", "last_seen", "sources_total")}
        # Each source's quotes and chunks (a notes file's) and their total are shown since; the release's fields must be as they were.
        new["sources"] = [{k: v for k, v in source.items() if k not in ("evidence", "chunks")} for source in new["sources"]]
        assert new == old, node_id
        assert view["first_seen"] and view["first_seen"] <= view["last_seen"]
    assert search_graph(settings, "retry") == expected["search_retry"]["results"]


def test_a_merge_made_by_the_release_unmerges_exactly_on_rows(tmp_path: Path, expected: dict[str, Any]) -> None:
    path = tmp_path / "graph.sqlite3"
    load_release_graph(path)
    db = Database(path)
    try:
        graph, provenance = GraphStore(db), ProvenanceStore(db)
        before = graph.get_node("CLASS:RetryPolicy")
        assert "FakeRetryPolicy" in before.properties["aliases"]
        moved = db.query("SELECT COUNT(*) FROM node_points WHERE merge_id = 1")[0][0]
        assert moved == 1
        MergeStore(db).unmerge("CLASS:FakeRetryPolicy")
        fake, policy = graph.get_node("CLASS:FakeRetryPolicy"), graph.get_node("CLASS:RetryPolicy")
        assert fake is not None and "FakeRetryPolicy" in fake.properties["aliases"]
        assert "FakeRetryPolicy" not in policy.properties["aliases"]
        assert policy.properties["description"] == before.properties["description"]
        assert {p.memory for p in provenance.node_points("CLASS:FakeRetryPolicy")} == {"memory:sess-2026-11-10-f805d4-t0024"}
        assert graph.get_edge("CLASS:FakeRetryPolicy", "FILE:src/worker/retry.py", "RELATES_TO") is not None
        assert graph.get_edge("CLASS:FakeRetryPolicy", "memory:sess-2026-11-10-f805d4-t0024", "MENTIONED_IN") is not None
        # what the release's export said of the merged node before the merge is back
        old = next(n for n in expected["export_all"]["nodes"] if n["id"] == "CLASS:RetryPolicy")
        assert len(provenance.node_points("CLASS:RetryPolicy")) == len(expected["export_all"]["provenance"]["CLASS:RetryPolicy"]) - 1
        assert old["properties"]["aliases"] == ["FakeRetryPolicy", *policy.properties["aliases"]]
    finally:
        db.close()
