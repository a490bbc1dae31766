"""Query surface: `search` by name/alias (LIKE escaping, case-insensitive) and `show` with the
turns a node came from, read from a real embedded Chroma."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.graph import GraphStore, Node
from tests.conftest import run_cli, write_sessions
from tests.graph_fixtures import build_sample_graph
from worker.knowledge import search_graph, show_node

SESSIONS = [
    {
        "sessionId": "s1",
        "title": "Fix the lazy edge queue drain",
        "createdAt": "2026-11-01T10:00:00Z",
        "turns": [
            {"id": "m1", "role": "user", "text": "The LazyEdgeQueue drain loses lines when it crashes."},
            {"id": "m2", "role": "assistant", "text": "Agreed: drain() must rename the queue first, then read it."},
        ],
    },
    {
        "sessionId": "s2",
        "title": "Chunker performance",
        "createdAt": "2026-11-02T10:00:00Z",
        "turns": [{"id": "m3", "role": "user", "text": "chunk_session is quadratic on big sessions."}],
    },
]


@pytest.fixture
async def graph_settings(settings: Settings, tmp_path: Path) -> Settings:
    await import_sessions(
        write_sessions(tmp_path / "in.jsonl", SESSIONS),
        chroma=ChromaStore(settings),
        memory_collection=settings.memory_collection,
        summary_collection=settings.session_collection,
    )
    db = build_sample_graph(settings.graph_path)
    GraphStore(db).upsert_nodes(
        [
            Node("CONCEPT:100%_done", "CONCEPT", "100%_done", {"aliases": ["percent"]}),
            Node("CONCEPT:100 done", "CONCEPT", "100 done", {"aliases": []}),
            Node("CLASS:GraphStore", "CLASS", "GraphStore", {"aliases": ["graph store"]}),
        ]
    )
    db.close()
    return settings


def test_search_by_name_and_alias_case_insensitive(graph_settings: Settings) -> None:
    assert [r["id"] for r in search_graph(graph_settings, "lazyedgequeue")] == ["CLASS:LazyEdgeQueue"]
    # Alias-only hit ("lazy edge queue" is an alias, not the name).
    assert [r["id"] for r in search_graph(graph_settings, "LAZY EDGE")] == ["CLASS:LazyEdgeQueue"]
    # Exact name first, then prefix, then substring; anchors (memory previews) are never hits.
    hits = [r["id"] for r in search_graph(graph_settings, "drain")]
    assert hits[0] == "METHOD:drain" and "DECISION:Rename before drain" in hits
    assert not any(h.startswith(("memory:", "session:")) for h in hits)
    assert [r["id"] for r in search_graph(graph_settings, "store", label="CLASS")] == ["CLASS:GraphStore"]


def test_search_like_wildcards_are_literal(graph_settings: Settings) -> None:
    assert [r["id"] for r in search_graph(graph_settings, "100%_")] == ["CONCEPT:100%_done"]
    assert [r["id"] for r in search_graph(graph_settings, "0_d")] == []
    assert search_graph(graph_settings, "'; DROP TABLE nodes; --") == []
    assert len(search_graph(graph_settings, "e", limit=2)) == 2


async def test_show_node_with_turns_and_evidence(graph_settings: Settings) -> None:
    view = await show_node(graph_settings, "FILE:store/lazy_queue.py")
    assert view is not None and view["turns_error"] is None
    assert view["aliases"] == ["store/lazy_queue.py"]
    assert [t["memory"] for t in view["turns"]] == ["memory:m1", "memory:m2"]
    first = view["turns"][0]
    assert first["text"].startswith("The LazyEdgeQueue drain loses lines")
    assert first["evidence"] == ["The LazyEdgeQueue drain loses lines"] and first["session"] == "session:s1"
    assert first["turn_index"] == 0 and first["chunks"] == ["s1:chunk:0"]
    assert {(e["direction"], e["relationship"], e["node"]) for e in view["edges"]} == {
        ("in", "RELATES_TO", "CLASS:LazyEdgeQueue"),
        ("in", "RELATES_TO", "METHOD:drain"),
        ("in", "RELATES_TO", "FILE:pipelines/chunker.py"),
    }
    assert view["sources"] == [{"id": "session:s1", "label": "SESSION", "title": "Fix the lazy edge queue drain", "evidence": [], "chunks": []}]
    assert await show_node(graph_settings, "CLASS:Nope") is None


def test_cli_show_and_search(graph_settings: Settings) -> None:
    env = {"REM_DATA_DIR": str(graph_settings.data_dir)}
    shown = run_cli("show", "METHOD:drain", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["turns"][0]["evidence"] == ["drain() must rename"]
    text = run_cli("show", "lazy edge queue", env=env)  # an exact alias resolves to its node
    assert text.returncode == 0, text.stderr
    assert "CLASS:LazyEdgeQueue" in text.stdout and "evidence" in text.stdout and "loses lines" in text.stdout
    missing = run_cli("show", "Queue", env=env)
    assert missing.returncode == 1 and "did you mean" in missing.stderr
    found = run_cli("search", "chunk", "--json", env=env)
    assert found.returncode == 0, found.stderr
    assert [r["id"] for r in json.loads(found.stdout)["results"]][:1] == ["METHOD:chunk_session"]


async def test_show_is_bounded_and_says_what_it_left_out(graph_settings: Settings) -> None:
    full = await show_node(graph_settings, "FILE:store/lazy_queue.py")
    assert full is not None and full["edges_total"] == len(full["edges"]) >= 2 and full["turns_total"] == len(full["turns"]) >= 2
    weights = [e["weight"] for e in full["edges"]]
    assert weights == sorted(weights, reverse=True)  # the heaviest first
    one = await show_node(graph_settings, "FILE:store/lazy_queue.py", limit=1)
    assert one["edges"] == full["edges"][:1] and [t["memory"] for t in one["turns"]] == [full["turns"][0]["memory"]]
    assert (one["edges_total"], one["turns_total"]) == (full["edges_total"], full["turns_total"])
    env = {"REM_DATA_DIR": str(graph_settings.data_dir)}
    text = run_cli("show", "FILE:store/lazy_queue.py", "--limit", "1", env=env)
    assert text.returncode == 0, text.stderr
    assert f"… {full['turns_total'] - 1} more turns (rem-cycle show FILE:store/lazy_queue.py --limit 0 for all)" in text.stdout
    assert "more edges" in text.stdout
    everything = run_cli("show", "FILE:store/lazy_queue.py", "--limit", "0", env=env).stdout
    assert "more turns" not in everything and "more edges" not in everything
    bad = run_cli("show", "FILE:store/lazy_queue.py", "--limit", "-1", env=env)
    assert bad.returncode == 2 and "must be 0 or more" in bad.stderr
