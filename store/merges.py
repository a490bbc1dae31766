"""The ``merges`` table: every identity merge, with what is needed to undo it.

A merge folds node M ("merged") into node I ("into"). It happens in two ways:

- at commit time, when identity resolution links an extracted node to an existing one: the
  commit writes the node's aliases, provenance and edges onto I, and M never exists; the caller
  records what M *would have been* with :meth:`MergeStore.record_link` inside the commit's
  transaction, before its writes;
- by hand, ``rem-cycle merge M I`` (:meth:`MergeStore.merge_nodes`): M exists, its aliases,
  provenance and edges move to I and M is deleted.

The ``restore`` column holds M's node and its edges (in M's terms), the keys of I's edges the
merge created, the pre-merge state of I's edges it changed, and the aliases, tags and provenance
points it added to I (and I's description when M's replaced it). :meth:`MergeStore.unmerge`
puts M and its edges back, deletes the edges the merge created, restores the ones it changed and
removes what it added to I; the pair is then *blocked*: identity resolution never links it again.
One active record per (M, I) pair: a repeated link extends it.

``identity_candidates`` keeps the other identity decision: pairs that resolution found ambiguous
(``candidate`` verdicts: created, not merged) with the rule and score that made them candidates,
for a person to review (``rem-cycle candidates``) and merge by hand or leave. A pair disappears
when either node does (a merge deletes the merged node), and an undone merge's pair is not listed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from store.db import Database
from store.graph import Edge, GraphStore, Node, dumps, utc_now
from store.ids import normalize_graph_node_id


class MergeError(ValueError):
    """A merge or unmerge cannot be done; the message says why."""


@dataclass(frozen=True, slots=True)
class MergeRecord:
    merge_id: int
    merged_id: str
    into_id: str
    rule: str
    score: float
    evidence: dict[str, Any]
    created_at: str
    undone_at: str | None


def _edge_dict(edge: Edge) -> dict[str, Any]:
    return {"source": edge.source, "target": edge.target, "relationship": edge.relationship, "weight": edge.weight, "properties": edge.properties}


def _edge(data: Mapping[str, Any]) -> Edge:
    return Edge(data["source"], data["target"], data["relationship"], float(data["weight"]), dict(data["properties"]))


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [dict(v) for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _union(first: Iterable[Any], second: Iterable[Any]) -> list[Any]:
    """Order-preserving union of JSON-able values."""
    seen: dict[str, Any] = {}
    for value in (*first, *second):
        seen.setdefault(dumps(value), value)
    return list(seen.values())


def _minus(values: Iterable[Any], removed: Iterable[Any]) -> list[Any]:
    gone = {dumps(v) for v in removed}
    return [v for v in values if dumps(v) not in gone]


def _redirect(edge: Edge, merged_id: str, into_id: str) -> Edge:
    return Edge(
        into_id if edge.source == merged_id else edge.source,
        into_id if edge.target == merged_id else edge.target,
        edge.relationship,
        edge.weight,
        edge.properties,
    )


@dataclass(frozen=True, slots=True)
class CandidatePair:
    """One reported pair: ``node_id`` (created) may be the same thing as ``candidate_id``."""

    node_id: str
    candidate_id: str
    rule: str
    score: float
    form: str
    session_id: str


# A candidate pair (alias c) whose merge was undone is settled: keep them apart, do not list it.
_NOT_UNDONE = (
    "NOT EXISTS (SELECT 1 FROM merges b WHERE b.undone_at IS NOT NULL "
    "AND b.merged_id = c.node_id AND b.into_id = c.candidate_id)"
)


class MergeStore:
    """Records, applies and undoes merges (SQL for ``merges``; node/edge writes via :class:`GraphStore`)."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock
        self.graph = GraphStore(db, clock=clock)

    # --- reads ---------------------------------------------------------------------------
    def records(self, *, merged_id: str | None = None, into_id: str | None = None, active: bool | None = None, limit: int = 1000) -> list[MergeRecord]:
        """Merge records, newest first, filtered by merged node, target node and/or state."""
        rows = self.db.query(
            "SELECT merge_id, merged_id, into_id, rule, score, evidence, created_at, undone_at FROM merges "
            "WHERE (? IS NULL OR merged_id = ?) AND (? IS NULL OR into_id = ?) "
            "AND (? IS NULL OR (undone_at IS NULL) = ?) ORDER BY merge_id DESC LIMIT ?",
            (merged_id, merged_id, into_id, into_id, active, active, limit),
        )
        return [
            MergeRecord(r["merge_id"], r["merged_id"], r["into_id"], r["rule"], r["score"], json.loads(r["evidence"]), r["created_at"], r["undone_at"])
            for r in rows
        ]

    def blocked_pairs(self) -> frozenset[tuple[str, str]]:
        """(merged, into) pairs whose merge was undone: identity resolution must not link them again."""
        rows = self.db.query("SELECT DISTINCT merged_id, into_id FROM merges WHERE undone_at IS NOT NULL")
        return frozenset((r[0], r[1]) for r in rows)

    def candidates(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """Reported pairs whose nodes both exist and whose merge was never undone, best score first,
        with both nodes' labels and names."""
        rows = self.db.query(
            "SELECT c.node_id, n.label AS node_label, n.name AS node_name, c.candidate_id, "
            "m.label AS candidate_label, m.name AS candidate_name, c.rule, c.score, c.form, c.session_id "
            "FROM identity_candidates c JOIN nodes n ON n.id = c.node_id JOIN nodes m ON m.id = c.candidate_id "
            f"WHERE {_NOT_UNDONE} ORDER BY c.score DESC, c.node_id, c.candidate_id LIMIT ?",
            (limit,),
        )
        return [dict(r) for r in rows]

    def candidate_count(self) -> int:
        """How many pairs :meth:`candidates` would list, without a limit."""
        return self.db.query(f"SELECT COUNT(*) FROM identity_candidates c WHERE {_NOT_UNDONE}")[0][0]

    def candidate_node_count(self) -> int:
        """How many nodes those pairs start from: the unit of a run's ``identity_candidates``."""
        return self.db.query(f"SELECT COUNT(DISTINCT c.node_id) FROM identity_candidates c WHERE {_NOT_UNDONE}")[0][0]

    # --- writes --------------------------------------------------------------------------
    def record_candidates(self, pairs: Iterable[CandidatePair]) -> int:
        """Keep ``pairs`` for review (a pair already kept takes the newer rule and score). A pair
        whose nodes are not both in the graph is skipped: the record is advisory and must never
        fail the commit it is part of. Returns how many were kept."""
        kept = 0
        with self.db.transaction() as conn:
            for pair in pairs:
                cursor = conn.execute(
                    "INSERT OR REPLACE INTO identity_candidates(node_id, candidate_id, rule, score, form, session_id) "
                    "SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM nodes WHERE id = ?) "
                    "AND EXISTS (SELECT 1 FROM nodes WHERE id = ?)",
                    (pair.node_id, pair.candidate_id, pair.rule, float(pair.score), pair.form, pair.session_id,
                     pair.node_id, pair.candidate_id),
                )
                kept += cursor.rowcount
        return kept

    def record_link(
        self,
        merged: Node,
        merged_edges: Sequence[Edge],
        *,
        into_id: str,
        rule: str,
        score: float,
        evidence: Mapping[str, Any] | None = None,
    ) -> int:
        """Record that ``merged`` (with ``merged_edges``, in its own terms) is about to be folded into
        ``into_id``. Call inside the transaction that then writes the fold, *before* writing it."""
        into_id = normalize_graph_node_id(into_id)
        with self.db.transaction() as conn:
            into = self.graph.get_node(into_id)
            restore = self._restore(merged, merged_edges, into)
            active = conn.execute(
                "SELECT merge_id, restore FROM merges WHERE merged_id = ? AND into_id = ? AND undone_at IS NULL",
                (merged.id, into_id),
            ).fetchone()
            if active is not None:
                restore = _extend(json.loads(active["restore"]), restore)
                conn.execute(
                    "UPDATE merges SET restore = ?, score = MAX(score, ?) WHERE merge_id = ?",
                    (dumps(restore), score, active["merge_id"]),
                )
                return int(active["merge_id"])
            cursor = conn.execute(
                "INSERT INTO merges(merged_id, into_id, rule, score, evidence, restore, created_at) VALUES (?,?,?,?,?,?,?)",
                (merged.id, into_id, rule, float(score), dumps(dict(evidence or {})), dumps(restore), self.clock()),
            )
            return int(cursor.lastrowid)

    def _restore(self, merged: Node, merged_edges: Sequence[Edge], into: Node | None) -> dict[str, Any]:
        created, modified = [], []
        for edge in merged_edges if into is not None else ():
            folded = _redirect(edge, merged.id, into.id)
            if folded.source == folded.target:
                continue
            prior = self.graph.get_edge(folded.source, folded.target, folded.relationship)
            if prior is None:
                created.append([folded.source, folded.target, folded.relationship])
            else:
                modified.append(_edge_dict(prior))
        before = into.properties if into else {}
        aliases = _union(_strings(merged.properties.get("aliases")), [merged.name])
        description = before.get("description") if isinstance(before.get("description"), str) else ""
        incoming = merged.properties.get("description")
        return {
            "node": {"id": merged.id, "label": merged.label, "name": merged.name, "properties": merged.properties},
            "edges": [_edge_dict(e) for e in merged_edges],
            "created": created,
            "modified": modified,
            "added_aliases": _minus(aliases, [*_strings(before.get("aliases")), into.name if into else ""]),
            "added_tags": _minus(_strings(merged.properties.get("tags")), _strings(before.get("tags"))),
            "added_points": _minus(_dicts(merged.properties.get("provenance")), _dicts(before.get("provenance"))),
            "description_before": description
            if into is not None and isinstance(incoming, str) and len(incoming) > len(description)
            else None,
        }

    def merge_nodes(self, merged_id: str, into_id: str, *, rule: str = "manual", score: float = 1.0, evidence: Mapping[str, Any] | None = None) -> int:
        """Fold the existing node ``merged_id`` into the existing node ``into_id`` (one transaction):
        aliases (with M's name), tags and provenance unioned, the longer description, the higher
        confidence; M's edges moved to I (an edge I already has keeps the higher weight and gains
        M's provenance points); M deleted. Returns the merge id."""
        merged_id, into_id = normalize_graph_node_id(merged_id), normalize_graph_node_id(into_id)
        if merged_id == into_id:
            raise MergeError("a node cannot be merged into itself")
        with self.db.transaction():
            merged, into = self.graph.get_node(merged_id), self.graph.get_node(into_id)
            if merged is None or into is None:
                raise MergeError(f"no node {merged_id if merged is None else into_id}")
            edges = self.graph.edges_of(merged_id)
            merge_id = self.record_link(merged, edges, into_id=into_id, rule=rule, score=score, evidence=evidence)
            self.graph.upsert_node(Node(into.id, into.label, into.name, _fold_properties(into.properties, merged)))
            folded = []
            for edge in edges:
                moved = _redirect(edge, merged_id, into_id)
                if moved.source == moved.target:
                    continue
                prior = self.graph.get_edge(moved.source, moved.target, moved.relationship)
                folded.append(_fold_edge(prior, moved) if prior is not None else moved)
            self.graph.link_nodes(folded)
            self.graph.delete_node(merged_id)
        return merge_id

    def unmerge(self, node_id: str) -> list[dict[str, Any]]:
        """Undo every active merge of ``node_id`` into another node, newest first (one transaction).
        Returns what each undo did; raises :class:`MergeError` when there is nothing to undo or the
        target no longer exists (it was merged on: unmerge that one first)."""
        node_id = normalize_graph_node_id(node_id)
        results = []
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT merge_id, into_id, restore FROM merges WHERE merged_id = ? AND undone_at IS NULL ORDER BY merge_id DESC",
                (node_id,),
            ).fetchall()
            if not rows:
                raise MergeError(f"{node_id} has no active merge to undo")
            for row in rows:
                into = self.graph.get_node(row["into_id"])
                if into is None:
                    onward = self.records(merged_id=row["into_id"], active=True, limit=1)
                    hint = f" (it was merged into {onward[0].into_id}: unmerge {row['into_id']} first)" if onward else ""
                    raise MergeError(f"cannot unmerge {node_id}: {row['into_id']} no longer exists{hint}")
                results.append({"merge_id": row["merge_id"], "into": into.id, **self._undo(json.loads(row["restore"]), into)})
                conn.execute("UPDATE merges SET undone_at = ? WHERE merge_id = ?", (self.clock(), row["merge_id"]))
        return results

    def _undo(self, restore: Mapping[str, Any], into: Node) -> dict[str, int]:
        data = restore["node"]
        node = Node(data["id"], data["label"], data["name"], dict(data["properties"]))
        current = self.graph.get_node(node.id)
        if current is not None:  # re-created since (e.g. by a later commit): keep both sides' facts
            node = Node(current.id, current.label, current.name, _fold_properties(current.properties, node))
        self.graph.upsert_node(node)
        props = dict(into.properties)
        props["aliases"] = _minus(_strings(props.get("aliases")), restore["added_aliases"])
        props["tags"] = _minus(_strings(props.get("tags")), restore["added_tags"])
        props["provenance"] = _minus(_dicts(props.get("provenance")), restore["added_points"])
        if restore.get("description_before") is not None and props.get("description") == node.properties.get("description"):
            props["description"] = restore["description_before"]
        self.graph.upsert_node(Node(into.id, into.label, into.name, props))
        deleted = sum(self.graph.delete_edge(*key) for key in restore["created"])
        restored = self.graph.link_nodes([_edge(e) for e in restore["modified"]]).linked
        relinked = self.graph.link_nodes([_edge(e) for e in restore["edges"]])
        return {"edges_deleted": deleted, "edges_restored": restored, "edges_relinked": relinked.linked + relinked.unchanged, "edges_culled": relinked.culled}


def _fold_properties(into: Mapping[str, Any], merged: Node) -> dict[str, Any]:
    props = dict(into)
    props["aliases"] = sorted(_union(_strings(into.get("aliases")), [*_strings(merged.properties.get("aliases")), merged.name]))
    props["tags"] = sorted(_union(_strings(into.get("tags")), _strings(merged.properties.get("tags"))))
    points = _union(_dicts(into.get("provenance")), _dicts(merged.properties.get("provenance")))
    props["provenance"] = sorted(points, key=dumps)
    description, incoming = into.get("description"), merged.properties.get("description")
    if isinstance(incoming, str) and len(incoming) > len(description if isinstance(description, str) else ""):
        props["description"] = incoming
    confidences = [c for c in (into.get("confidence"), merged.properties.get("confidence")) if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if confidences:
        props["confidence"] = max(confidences)
    return props


def _fold_edge(prior: Edge, moved: Edge) -> Edge:
    props = {**moved.properties, **prior.properties}
    points = _union(_dicts(prior.properties.get("provenance")), _dicts(moved.properties.get("provenance")))
    if points:
        props["provenance"] = sorted(points, key=dumps)
    return Edge(prior.source, prior.target, prior.relationship, max(prior.weight, moved.weight), props)


def _extend(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """One restore record for two links of the same pair: union of what both need undone; an edge
    the first link created stays "created", one that existed before it keeps its oldest state."""
    known = {tuple(k) for k in old["created"]} | {(e["source"], e["target"], e["relationship"]) for e in old["modified"]}
    node = old["node"]
    merged_node = Node(node["id"], node["label"], node["name"], node["properties"])
    incoming = new["node"]
    folded = _fold_properties(merged_node.properties, Node(incoming["id"], incoming["label"], incoming["name"], incoming["properties"]))
    return {
        "node": {**node, "properties": folded},
        "edges": _union(old["edges"], new["edges"]),
        "created": old["created"] + [k for k in new["created"] if tuple(k) not in known],
        "modified": old["modified"] + [e for e in new["modified"] if (e["source"], e["target"], e["relationship"]) not in known],
        "added_aliases": _union(old["added_aliases"], new["added_aliases"]),
        "added_tags": _union(old["added_tags"], new["added_tags"]),
        "added_points": _union(old["added_points"], new["added_points"]),
        "description_before": old["description_before"] if old["description_before"] is not None else new["description_before"],
    }
