"""Look-ups of existing semantic nodes by id, name or alias (for identity at commit time)."""

from __future__ import annotations

from collections.abc import Sequence

from store.db import Database, alias_key, in_batches
from store.graph import Node, node_from_row


class SemanticIndex:
    """Finds nodes of a label by exact id, by name (ASCII case-insensitive) or by one of their
    ``aliases`` — the graph side of :func:`pipelines.extract.commit.match_existing`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def find(self, label: str, *, ids: Sequence[str], names: Sequence[str]) -> list[Node]:
        """Nodes of ``label`` whose id is in ``ids`` or whose name or an alias is in ``names``."""
        found: dict[str, Node] = {}
        for part, marks in in_batches(sorted(set(ids))):
            rows = self.db.query(f"SELECT id, label, name, properties FROM nodes WHERE id IN ({marks})", part)
            found.update((r["id"], node_from_row(r)) for r in rows if r["label"] == label)
        for part, marks in in_batches(sorted(set(names)), lists=2):
            keys = sorted({alias_key(n) for n in part})
            rows = self.db.query(
                f"SELECT id, label, name, properties FROM nodes WHERE label = ? AND name COLLATE NOCASE IN ({marks}) "
                # CROSS JOIN: the aliases first (SQLite keeps the order). Without statistics SQLite
                # read every node of the label and looked its aliases up: a cost that grew with them.
                "UNION SELECT n.id, n.label, n.name, n.properties FROM node_aliases AS a CROSS JOIN nodes AS n "
                f"WHERE a.alias_key IN ({','.join('?' * len(keys))}) AND n.id = a.node_id AND n.label = ?",
                [label, *part, *keys, label],
            )
            found.update((r["id"], node_from_row(r)) for r in rows)
        return [found[k] for k in sorted(found)]
