"""The knowledge nodes ``rem-cycle forget --node`` took out and keeps out (migration 33).

``suppressed_nodes`` holds one row per forgotten node (its id, type, name and the anchors that had
said it); ``suppression_keys`` the folded keys of its name and aliases under its type
(:func:`pipelines.extract.model.suppression_keys` folds them: the store only compares). Every
extraction commit asks :meth:`SuppressionStore.suppressed` about its own nodes' keys — a look-up by
the primary key per batch, whatever the number of nodes ever forgotten.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from store.db import Database, in_batches
from store.graph import utc_now


@dataclass(frozen=True, slots=True)
class Suppression:
    """One forgotten node: its id, type, name, the anchors (``session:…``, ``note:…``) that had said
    it, when, and its keys (folded name and aliases)."""

    node_id: str
    label: str
    name: str
    anchors: tuple[str, ...]
    created_at: str
    keys: tuple[str, ...]


class SuppressionStore:
    """Typed access to ``suppressed_nodes``/``suppression_keys`` (inside the caller's transaction)."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    def suppress(self, node_id: str, *, label: str, name: str, keys: Iterable[str], anchors: Iterable[str],
                 created_at: str | None = None) -> None:
        """Keep the node ``node_id`` (of ``label``, named ``name``) out under ``keys``; a key another
        suppressed node of ``label`` holds too is held by both, and stays suppressed until both are
        lifted. ``anchors``: the sources that had said it (an undo marks them for re-extraction).
        Run again, it adds keys and anchors."""
        with self.db.transaction() as conn:
            before = self.db.query("SELECT anchors FROM suppressed_nodes WHERE node_id = ?", (node_id,))
            merged = sorted(set(anchors) | (set(json.loads(before[0][0])) if before else set()))
            conn.execute(
                "INSERT INTO suppressed_nodes(node_id, label, name, anchors, created_at) VALUES (?,?,?,?,?) "
                "ON CONFLICT (node_id) DO UPDATE SET anchors = excluded.anchors",
                (node_id, label, name, json.dumps(merged), created_at or self.clock()),
            )
            conn.executemany(
                "INSERT INTO suppression_keys(key, label, node_id) VALUES (?,?,?) ON CONFLICT DO NOTHING",
                [(key, label, node_id) for key in sorted(set(keys))],
            )

    def suppressed(self, wanted: Collection[tuple[str, str]]) -> set[tuple[str, str]]:
        """Of ``wanted`` ``(label, key)`` pairs, those suppressed: one statement per batch of keys
        (the primary key's), never a read of every suppression."""
        found: set[tuple[str, str]] = set()
        pairs = set(wanted)
        for batch, marks in in_batches(sorted({key for _, key in pairs})):
            for key, label in self.db.query(f"SELECT key, label FROM suppression_keys WHERE key IN ({marks})", batch):
                if (label, key) in pairs:
                    found.add((label, key))
        return found

    def holding(self, node_id: str | None = None, *, key: str | None = None) -> list[Suppression]:
        """The suppressions of ``node_id``, or of every node one of whose keys is ``key`` (any type)."""
        if node_id is not None:
            ids = [node_id]
        else:
            ids = sorted({r[0] for r in self.db.query("SELECT node_id FROM suppression_keys WHERE key = ?", (key,))})
        return [s for i in ids for s in self._rows("WHERE node_id = ?", (i,))]

    def all(self) -> list[Suppression]:
        """Every suppression (a restore carries them into the backup it puts in place)."""
        return self._rows("", ())

    def lift(self, node_id: str) -> Suppression | None:
        """Delete the suppression of ``node_id`` (its keys by cascade); what it was, or ``None``."""
        found = self.holding(node_id)
        if found:
            with self.db.transaction() as conn:
                conn.execute("DELETE FROM suppression_keys WHERE node_id = ?", (node_id,))
                conn.execute("DELETE FROM suppressed_nodes WHERE node_id = ?", (node_id,))
        return found[0] if found else None

    def _rows(self, where: str, params: tuple[str, ...]) -> list[Suppression]:
        rows = self.db.query(f"SELECT node_id, label, name, anchors, created_at FROM suppressed_nodes {where} ORDER BY node_id", params)
        out = []
        for node_id, label, name, anchors, created_at in rows:
            keys = self.db.query("SELECT key FROM suppression_keys WHERE node_id = ? ORDER BY key", (node_id,))
            out.append(Suppression(node_id, label, name, tuple(json.loads(anchors)), created_at, tuple(r[0] for r in keys)))
        return out
