"""``ProvenanceStore.first_texts`` (the judge's quotes of a node) orders its points the same on both
engines: by turn time, then turn, the points with no turn time after every timed one (la32out:
SQLite put them first, PostgreSQL last — NULL's place in an ``ORDER BY``)."""

from __future__ import annotations

import pytest

from config import Settings
from store.backend import open_database
from store.graph import GraphStore, Node
from store.provenance import ProvenanceStore


@pytest.mark.both_backends
def test_points_with_no_turn_time_come_after_the_timed_ones(settings: Settings) -> None:
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            GraphStore(db).upsert_node(Node("PERSON:Ross", "PERSON", "Ross"))
            for memory, evidence, time in [
                ("m-b", "untimed b", None), ("m-late", "late", "2026-11-03T00:00:00Z"), ("m-a", "untimed a", None),
                ("m-early", "early", "2026-11-01T00:00:00Z"), ("m-mid", "mid", "2026-11-02T00:00:00Z"),
            ]:
                conn.execute(
                    "INSERT INTO node_points(node_id, anchor, memory_id, chunk_id, evidence, observed_at, extracted_for) "
                    "VALUES (?, 's', ?, '', ?, ?, 'PERSON:Ross')",
                    ("PERSON:Ross", memory, evidence, time),
                )
        provenance = ProvenanceStore(db)
        assert provenance.first_texts("PERSON:Ross", points=12) == ["early", "mid", "late", "untimed a", "untimed b"]
        assert provenance.first_texts("PERSON:Ross", points=2) == ["early", "mid"]
        assert provenance.first_texts("PERSON:Ross", points=4) == ["early", "mid", "late", "untimed a"]
    finally:
        db.close()
