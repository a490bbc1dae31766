"""The graph store on real databases (SQLite files; PostgreSQL schemas where marked)."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store.db import MIGRATIONS, Database
from store.errors import ConstraintError
from store.graph import Edge, GraphStore, Node
from store.ids import InvalidIdError


pytestmark = pytest.mark.both_backends


@pytest.fixture
def graph(tmp_path: Path, open_graph_database: Callable[[Path], Any]) -> Iterator[GraphStore]:
    db = open_graph_database(tmp_path / "g.sqlite3")
    yield GraphStore(db)
    db.close()


def dump(target: Path | Any) -> list[tuple]:
    """Every node and edge row, columns and all, of an open database or of the SQLite file at a path."""
    db = Database(target) if isinstance(target, Path) else target
    try:
        return [tuple(r) for r in db.query("SELECT * FROM nodes ORDER BY id")] + [
            tuple(r) for r in db.query("SELECT * FROM edges ORDER BY source, target, relationship")]
    finally:
        if db is not target:
            db.close()


def test_schema_pragmas_and_version(tmp_path: Path) -> None:
    db = Database(tmp_path / "g.sqlite3")
    assert db.query("PRAGMA journal_mode")[0][0] == "wal"
    assert db.query("PRAGMA foreign_keys")[0][0] == 1
    assert db.schema_version == len(MIGRATIONS)
    db.close()
    # Re-opening migrates nothing and keeps the version.
    again = Database(tmp_path / "g.sqlite3")
    assert again.schema_version == len(MIGRATIONS)
    cols = {r[1] for r in again.query("PRAGMA table_info(edges)")}
    assert {"source", "target", "relationship", "weight", "properties"} <= cols


def test_upsert_is_idempotent_and_normalises(graph: GraphStore, tmp_path: Path) -> None:
    nodes = [Node("SESSION:S1", "SESSION", "s1", {"a": 1}), Node("MEMORY:M1", "MEMORY", "m1", {"b": [1, 2]})]
    assert graph.upsert_nodes(nodes) == 2
    assert graph.get_node("session:S1") is not None
    assert graph.get_node("memory:M1").properties == {"b": [1, 2]}
    before = dump(graph.db)
    assert graph.upsert_nodes(nodes) == 0
    assert dump(graph.db) == before
    assert graph.upsert_node(Node("memory:M1", "MEMORY", "m1", {"b": [1, 3]})) is True


def test_link_culls_missing_endpoints_and_counts(graph: GraphStore) -> None:
    graph.upsert_nodes([Node("memory:a", "MEMORY", "a"), Node("session:s", "SESSION", "s")])
    stats = graph.link_nodes([
        Edge("MEMORY:a", "session:s", "ORIGINATES_IN"),
        Edge("memory:a", "session:missing", "ORIGINATES_IN"),
        Edge("CONCEPT:x", "memory:a", "MENTIONED_IN"),
    ])
    assert (stats.linked, stats.culled) == (1, 2)
    assert {(e.source, e.target) for e in stats.culled_edges} == {("memory:a", "session:missing"), ("CONCEPT:x", "memory:a")}
    assert graph.get_edge("memory:a", "session:s", "ORIGINATES_IN") is not None
    again = graph.link_nodes([Edge("memory:a", "session:s", "ORIGINATES_IN")])
    assert (again.linked, again.unchanged) == (0, 1)
    assert graph.counts()["edge_total"] == 1


def test_edges_read_by_key_in_batches_are_those_read_one_by_one(graph: GraphStore) -> None:
    # More keys than one statement's batch (SQL_IN_BATCH // 3), ids given as a caller may spell
    # them, keys of no edge, a key given twice: what get_edge says of each key.
    graph.upsert_nodes([Node("CLASS:A", "CLASS", "A"), *(Node(f"memory:m{i:03d}", "MEMORY", f"m{i}") for i in range(400))])
    graph.link_nodes([Edge("CLASS:A", f"memory:m{i:03d}", "MENTIONED_IN", float(i), {"chunk_ids": [f"c{i}"]}) for i in range(0, 400, 2)])
    keys = [*(("CLASS:A", f"MEMORY:m{i:03d}", "MENTIONED_IN") for i in range(400)), ("CLASS:A", "memory:m002", "MENTIONED_IN"),
            ("CLASS:A", "memory:m002", "DISCUSSED_IN"), ("CLASS:B", "memory:m002", "MENTIONED_IN")]
    one_by_one = {key: edge for key in keys if (edge := graph.get_edge(*key)) is not None}
    assert graph.get_edges(keys) == one_by_one
    assert len(one_by_one) == 201 and one_by_one[("CLASS:A", "MEMORY:m004", "MENTIONED_IN")].properties == {"chunk_ids": ["c4"]}
    assert graph.get_edges([]) == {}


def test_one_edge_per_triple_weight_not_bumped(graph: GraphStore) -> None:
    graph.upsert_nodes([Node("CONCEPT:a", "CONCEPT", "a"), Node("CONCEPT:b", "CONCEPT", "b")])
    for _ in range(3):
        graph.link_nodes([Edge("CONCEPT:a", "CONCEPT:b", "RELATES_TO", 2.0)])
    assert graph.get_edge("CONCEPT:a", "CONCEPT:b", "RELATES_TO").weight == 2.0
    assert graph.counts()["edges"] == {"RELATES_TO": 1}


def test_foreign_keys_enforced(graph: GraphStore) -> None:
    with pytest.raises(ConstraintError):
        with graph.db.transaction() as conn:
            conn.execute(
                "INSERT INTO edges(source, target, relationship, created_at, updated_at) VALUES ('x','y','R','t','t')")


def test_transaction_rolls_back_everything(graph: GraphStore) -> None:
    with pytest.raises(RuntimeError):
        with graph.db.transaction():
            graph.upsert_nodes([Node("CONCEPT:a", "CONCEPT", "a")])
            raise RuntimeError("boom")
    assert graph.get_node("CONCEPT:a") is None


def test_invalid_id_rejected(graph: GraphStore) -> None:
    with pytest.raises(InvalidIdError):
        graph.upsert_nodes([Node("memory:bad id", "MEMORY", "x")])
    assert graph.counts()["node_total"] == 0


def counted_by_scan(db: Any) -> dict[str, Any]:
    """The counts a full ``GROUP BY`` over the graph gives (what the count triggers must equal)."""
    nodes = {r[0]: r[1] for r in db.query("SELECT label, COUNT(*) FROM nodes GROUP BY label")}
    edges = {r[0]: r[1] for r in db.query("SELECT relationship, COUNT(*) FROM edges GROUP BY relationship")}
    return {"nodes": nodes, "edges": edges, "node_total": sum(nodes.values()), "edge_total": sum(edges.values())}


def test_counts_kept_by_triggers_equal_a_full_count_before_and_after_a_fold(graph: GraphStore) -> None:
    graph.upsert_nodes([Node(f"class:c{i}", "CLASS", f"c{i}", {}) for i in range(5)] + [Node("file:f", "FILE", "f", {})])
    graph.link_nodes([Edge(f"class:c{i}", "file:f", "DEFINED_IN") for i in range(5)] + [Edge("class:c0", "class:c1", "USES")])
    assert graph.counts() == counted_by_scan(graph.db) == {
        "nodes": {"CLASS": 5, "FILE": 1}, "edges": {"DEFINED_IN": 5, "USES": 1}, "node_total": 6, "edge_total": 6}
    assert graph.fold_counts() == 12
    assert graph.counts() == counted_by_scan(graph.db)
    # A label change, a delete that cascades to edges, an edge delete, a re-upsert that changes nothing.
    with graph.db.transaction() as conn:
        conn.execute("UPDATE nodes SET label = 'INTERFACE' WHERE id = 'class:c4'")
        conn.execute("UPDATE edges SET relationship = 'DECLARED_IN' WHERE source = 'class:c3'")
    assert graph.delete_node("file:f")
    assert graph.delete_edges([("class:c0", "class:c1", "USES")]) == 1
    graph.upsert_nodes([Node("class:c0", "CLASS", "c0", {"x": 1})])
    assert graph.counts() == counted_by_scan(graph.db) == {
        "nodes": {"CLASS": 4, "INTERFACE": 1}, "edges": {}, "node_total": 5, "edge_total": 0}
    graph.fold_counts()
    assert graph.counts() == counted_by_scan(graph.db)
    assert graph.db.query("SELECT COUNT(*) FROM graph_count_changes")[0][0] == 0
    assert {r[1] for r in graph.db.query("SELECT kind, name FROM graph_counts")} == {"CLASS", "INTERFACE"}
