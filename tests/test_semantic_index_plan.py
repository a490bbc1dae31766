"""The commit's look-up of existing entities by name reads the aliases asked for, never every node
of the label: before, SQLite (which keeps no statistics here) planned the alias half of
:meth:`store.semantic_index.SemanticIndex.find` as a walk over the label's nodes, each looked up in
``node_aliases`` — a cost that grew with the graph (found by the entityfold helper's bench: 103–209 ms
a look-up at 32,000 nodes, 0.63 ms after)."""

from __future__ import annotations

from typing import Any

from config import Settings
from store.backend import open_database
from store.graph import GraphStore, Node
from store.semantic_index import SemanticIndex


class Plans:
    """A database that answers each query and keeps SQLite's plan of it."""

    def __init__(self, db: Any) -> None:
        self.db, self.plans = db, []

    def query(self, sql: str, params: Any = ()) -> Any:
        self.plans.append(" | ".join(str(r[3]) for r in self.db.query("EXPLAIN QUERY PLAN " + sql, params)))
        return self.db.query(sql, params)


def test_a_name_is_looked_up_through_its_aliases_not_the_labels_nodes(settings: Settings) -> None:
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes([Node(f"CLASS:C{i}", "CLASS", f"C{i}", {"aliases": [f"C{i}"]}) for i in range(50)])
        plans = Plans(db)
        found = SemanticIndex(plans).find("CLASS", ids=[], names=["c7", "Missing"])  # type: ignore[arg-type]
        assert [n.id for n in found] == ["CLASS:C7"]
        alias_half = next(p.split("UNION USING TEMP B-TREE")[1] for p in plans.plans if "node_aliases" in p)
        assert "node_aliases_key (alias_key=?)" in alias_half and "(label=?)" not in alias_half, alias_half
    finally:
        db.close()
