"""audit25: what agents read, attacked — recall, search, show and the MCP server."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from tests.test_recall import build
from worker.recall import search_nodes


@pytest.mark.both_backends
async def test_a_node_said_in_many_sessions_does_not_crowd_the_others_out_of_search(settings: Settings, tmp_path: Path) -> None:
    """A node has a search row per session that described it; the rows of one node said in many
    sessions took every place ``matching_nodes`` read, and ``search_nodes`` listed it alone."""
    await build(settings, tmp_path)
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            for node, sessions, description in (("CONCEPT:alpha", 45, "a widget queue"), ("CONCEPT:beta", 1, "a widget queue for the retries")):
                conn.execute("INSERT INTO nodes VALUES (?, 'CONCEPT', ?, '{}', 't', 't')", (node, node.split(":")[1]))
                for n in range(sessions):
                    anchor = "session:alice-s1" if n == 0 else f"session:x{n}"
                    conn.execute("INSERT INTO node_points(node_id, anchor, memory_id, observed_at, extracted_for) "
                                 "VALUES (?, ?, '', '2026-11-01T10:00:00Z', ?)", (node, anchor, node))
                    conn.execute("INSERT INTO node_claims(node_id, anchor, extracted_for, description) VALUES (?, ?, ?, ?)",
                                 (node, anchor, node, description))
    finally:
        db.close()
    found = [n["id"] for n in search_nodes(settings, "widget", limit=10, budget_tokens=20_000)["nodes"]]
    assert found == ["CONCEPT:alpha", "CONCEPT:beta"]
