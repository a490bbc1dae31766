"""The graph store: nodes and edges in SQLite behind a small typed surface.

Writes are idempotent: an upsert whose label, name, properties (or weight) are unchanged touches
nothing, not even ``updated_at``, so re-running a cycle leaves the file's content identical.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from store.db import BACKFILL_LABELS, BACKFILL_REASONS, UNLIMITED, Database, alias_key, fold_changes, in_batches, value_rows
from store.ids import normalize_graph_node_id
from store.library_log import get_logger
from store.textfold import fold

log = get_logger(__name__)

# SQLite's default limit on host parameters is 32766 (>= 3.32); stay well below it.


def utc_now() -> str:
    """Current UTC time as ISO 8601 with milliseconds and a ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces) so equal values are equal strings."""
    return _CANONICAL.encode(value)


# Above every character a key can go on with: ``start + _LAST_CODE_POINT`` ends the range of keys
# beginning with ``start`` (UTF-8 bytes and PostgreSQL's "C" collation both order by code point).
_LAST_CODE_POINT = "\U0010ffff"


def _like_escaped(text: str) -> str:
    """``text`` as a ``LIKE`` pattern matching itself (``ESCAPE '!'``)."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    label: str
    name: str
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    relationship: str
    weight: float = 1.0
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class LinkStats:
    linked: int = 0
    unchanged: int = 0
    culled: int = 0
    culled_edges: list[Edge] = field(default_factory=list)


def escape_like(text: str) -> str:
    """``text`` with LIKE wildcards escaped (escape character ``\\``) so it matches literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of at most ``size`` items, taken as they come (a large or lazy input is
    never held whole)."""
    iterator = iter(items)
    while part := list(islice(iterator, size)):
        yield part


class GraphStore:
    """Typed access to ``nodes`` and ``edges``. Ids are normalised on the way in."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    # --- reads ---------------------------------------------------------------------------
    def get_node(self, node_id: str) -> Node | None:
        rows = self.db.query(
            "SELECT id, label, name, properties FROM nodes WHERE id = ?", (normalize_graph_node_id(node_id),)
        )
        return node_from_row(rows[0]) if rows else None

    def get_nodes(self, node_ids: Iterable[str]) -> dict[str, Node]:
        """The nodes that exist among ``node_ids``, by id."""
        ids = sorted({normalize_graph_node_id(i) for i in node_ids})
        found: dict[str, Node] = {}
        for part, marks in in_batches(ids):
            for row in self.db.query(f"SELECT id, label, name, properties FROM nodes WHERE id IN ({marks})", part):
                found[row["id"]] = node_from_row(row)
        return found

    def existing_ids(self, node_ids: Iterable[str]) -> set[str]:
        """The subset of ``node_ids`` (normalised) present in the graph."""
        return self._existing({normalize_graph_node_id(i) for i in node_ids})

    def _existing(self, normalised: set[str]) -> set[str]:
        ids = sorted(normalised)
        found: set[str] = set()
        for part, marks in in_batches(ids):
            found.update(r[0] for r in self.db.query(f"SELECT id FROM nodes WHERE id IN ({marks})", part))
        return found

    def aliases_with_words(self, wanted: Iterable[tuple[str, tuple[str, ...]]]) -> set[tuple[str, str, str]]:
        """``(node id, label, alias)`` of the nodes of each ``(label, words)`` holding an alias whose
        key (:func:`store.db.alias_key`) begins with the first of ``words`` and holds the others
        after it, in order: a range of the alias index (its keys compare by code point on both
        engines) narrowed by a ``LIKE``, one statement per batch. A caller compares each alias it
        gets by its own key (an alias's case fold is not a canonical name: ``jane-doe``)."""
        found: set[tuple[str, str, str]] = set()
        for part, _ in in_batches(sorted(set(wanted)), lists=4):
            ranges = " OR ".join(["(n.label = ? AND a.alias_key >= ? AND a.alias_key < ? AND a.alias_key LIKE ? ESCAPE '!')"] * len(part))
            params = [value for label, words in part
                      for value in (label, words[0], words[0] + _LAST_CODE_POINT, "%".join(_like_escaped(w) for w in words) + "%")]
            found.update((r[0], r[1], r[2]) for r in self.db.query(
                f"SELECT a.node_id, n.label, a.alias FROM node_aliases AS a JOIN nodes AS n ON n.id = a.node_id WHERE {ranges}",
                params))
        return found

    def nodes_by_label(self, label: str) -> list[Node]:
        rows = self.db.query("SELECT id, label, name, properties FROM nodes WHERE label = ? ORDER BY id", (label,))
        return [node_from_row(r) for r in rows]

    def edges_of(self, node_id: str) -> list[Edge]:
        """Every edge touching ``node_id``, outgoing first."""
        nid = normalize_graph_node_id(node_id)
        rows = self.db.query(
            "SELECT source, target, relationship, weight, properties FROM edges WHERE source = ? "
            "UNION ALL SELECT source, target, relationship, weight, properties FROM edges WHERE target = ? AND source != ?",
            (nid, nid, nid),
        )
        return [_edge(r) for r in rows]

    def heaviest_edges_of(
        self, node_id: str, *, exclude_relationships: Iterable[str], exclude_labels: Iterable[str], limit: int | None,
    ) -> tuple[list[Edge], int]:
        """The ``limit`` heaviest edges touching ``node_id`` (all when ``None``) whose relationship
        is not excluded and whose other end is not a node with an excluded label, ordered as
        ``show`` lists them (weight, outgoing first, relationship, other end); and how many such
        edges there are. Only those edges' documents are read, so a node with a hundred thousand
        provenance edges costs what it shows."""
        nid = normalize_graph_node_id(node_id)
        matching = (
            "FROM (SELECT source, target, relationship, weight, properties, target AS other, 0 AS incoming FROM edges WHERE source = :n "
            "UNION ALL SELECT source, target, relationship, weight, properties, source, 1 FROM edges WHERE target = :n AND source != :n) t "
            "LEFT JOIN nodes o ON o.id = t.other "
            "WHERE t.relationship NOT IN (SELECT value FROM json_each(:rels)) "
            "AND (o.label IS NULL OR o.label NOT IN (SELECT value FROM json_each(:labels)))"
        )
        params = {"n": nid, "rels": dumps(sorted(exclude_relationships)), "labels": dumps(sorted(exclude_labels)),
                  "limit": UNLIMITED if limit is None else limit}
        total = self.db.query(f"SELECT COUNT(*) {matching}", params)[0][0]
        rows = self.db.query(
            f"SELECT t.source, t.target, t.relationship, t.weight, t.properties {matching} "
            "ORDER BY t.weight DESC, t.incoming, t.relationship, t.other LIMIT :limit",
            params,
        )
        return [_edge(r) for r in rows], total

    def edge_targets(self, node_id: str, relationship: str, *, limit: int | None) -> tuple[list[str], int]:
        """The first ``limit`` targets (sorted; all when ``None``) of ``node_id``'s ``relationship``
        edges, and how many there are (index reads only)."""
        nid = normalize_graph_node_id(node_id)
        rows = self.db.query(
            "SELECT target FROM edges WHERE source = ? AND relationship = ? ORDER BY target LIMIT ?",
            (nid, relationship, UNLIMITED if limit is None else limit),
        )
        total = self.db.query("SELECT COUNT(*) FROM edges WHERE source = ? AND relationship = ?", (nid, relationship))[0][0]
        return [r[0] for r in rows], int(total)

    def count_edges_touching(self, node_ids: Iterable[str]) -> int:
        """How many edges have an end among ``node_ids`` (counted by index, no document read)."""
        ids = dumps(sorted({normalize_graph_node_id(i) for i in node_ids}))
        return self.db.query(
            "SELECT COUNT(*) FROM edges WHERE source IN (SELECT value FROM json_each(?)) OR target IN (SELECT value FROM json_each(?))",
            (ids, ids),
        )[0][0]

    def get_edge(self, source: str, target: str, relationship: str) -> Edge | None:
        rows = self.db.query(
            "SELECT source, target, relationship, weight, properties FROM edges "
            "WHERE source = ? AND target = ? AND relationship = ?",
            (normalize_graph_node_id(source), normalize_graph_node_id(target), relationship),
        )
        return _edge(rows[0]) if rows else None

    def get_edges(self, keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], Edge]:
        """The edges that exist among ``keys`` (source, target, relationship), by the key as given:
        one read per batch of keys, where :meth:`get_edge` in a loop is a statement — on
        PostgreSQL a round trip — per edge."""
        given = {key: (normalize_graph_node_id(key[0]), normalize_graph_node_id(key[1]), key[2]) for key in keys}
        found: dict[tuple[str, str, str], Edge] = {}
        for batch, _ in in_batches(sorted(set(given.values())), lists=3):
            values, params = value_rows(batch)
            rows = self.db.query(
                f"WITH k(s, t, r) AS (VALUES {values}) SELECT e.source, e.target, e.relationship, e.weight, e.properties "
                "FROM k JOIN edges AS e ON e.source = k.s AND e.target = k.t AND e.relationship = k.r",
                params,
            )
            found.update(((r["source"], r["target"], r["relationship"]), _edge(r)) for r in rows)
        return {key: found[stored] for key, stored in given.items() if stored in found}

    def all_nodes(self) -> list[Node]:
        """Every node, ordered by id."""
        return [node_from_row(r) for r in self.db.query("SELECT id, label, name, properties FROM nodes ORDER BY id")]

    def all_edges(self, *, bare_relationships: Iterable[str] = ()) -> list[Edge]:
        """Every edge, ordered by (source, target, relationship); those whose relationship is among
        ``bare_relationships`` without their property document (``properties`` is empty), for a
        reader that never looks at theirs (an export leaving provenance edges out: most edges)."""
        rows = self.db.query(
            "SELECT source, target, relationship, weight, CASE WHEN relationship IN (SELECT value FROM json_each(?)) "
            "THEN '{}' ELSE properties END AS properties FROM edges ORDER BY source, target, relationship",
            (dumps(sorted(set(bare_relationships))),),
        )
        return [_edge(r) for r in rows]

    def skeleton(
        self, *, exclude_labels: Iterable[str] = (), exclude_relationships: Iterable[str] = ()
    ) -> tuple[list[Node], list[Edge]]:
        """Nodes whose label and edges whose relationship is not excluded, in the order of
        :meth:`all_nodes` / :meth:`all_edges`, **without their property documents** (``properties``
        is empty): the shape of the graph for algorithms that read ids, labels, names and weights
        only (community detection), without decoding every document."""
        node_rows = self.db.query(
            "SELECT id, label, name FROM nodes WHERE label NOT IN (SELECT value FROM json_each(?)) ORDER BY id",
            (dumps(sorted(set(exclude_labels))),),
        )
        edge_rows = self.db.query(
            "SELECT source, target, relationship, weight FROM edges "
            "WHERE relationship NOT IN (SELECT value FROM json_each(?)) ORDER BY source, target, relationship",
            (dumps(sorted(set(exclude_relationships))),),
        )
        return (
            [Node(r["id"], r["label"], r["name"], {}) for r in node_rows],
            [Edge(r["source"], r["target"], r["relationship"], r["weight"], {}) for r in edge_rows],
        )

    def node_names(self, *, exclude_labels: Iterable[str] = (), ids: Iterable[str] | None = None) -> list[tuple[str, str, str, Any]]:
        """(id, label, name, aliases) of every node (of those among ``ids``, when given) whose label
        is not excluded — what identity resolution indexes, without reading whole property documents."""
        # One JSON parameter, not an IN list: PostgreSQL rejects an empty ``IN ()``.
        excluded = (dumps(sorted(set(exclude_labels))),)
        sql = (
            "SELECT id, label, name, (SELECT json_group_array(a.alias) FROM node_aliases AS a WHERE a.node_id = nodes.id) "
            "AS aliases FROM nodes WHERE label NOT IN (SELECT value FROM json_each(?))"
        )
        if ids is None:
            rows = self.db.query(sql, excluded)
        else:
            rows = []
            for part, id_marks in in_batches(sorted({normalize_graph_node_id(i) for i in ids})):
                rows += self.db.query(f"{sql} AND id IN ({id_marks})", (*excluded, *part))
        return [(r["id"], r["label"], r["name"], json.loads(r["aliases"]) if r["aliases"] else None) for r in rows]

    def search_nodes(self, text: str, *, limit: int | None = 50, exclude_labels: Iterable[str] = (),
                     label: str | None = None) -> list[Node]:
        """Nodes whose name, id or one of whose ``aliases`` contains ``text``, compared as
        :func:`store.textfold.fold` folds them (case and accents: ``ecole`` finds ``École``,
        ``STRASSE`` finds ``Straße``; :meth:`store.dialect.Dialect.fold` in SQL); ``%`` and ``_`` match
        literally. Exact name matches first, then name prefixes, then other name matches, then
        alias-only matches; ties by name. At most ``limit`` (``None``: all)."""
        folded = escape_like(fold(text))
        pattern = "%" + folded + "%"
        name, key = self.db.dialect.fold("name"), self.db.dialect.fold("id")
        alias = self.db.dialect.fold("a.alias")
        rows = self.db.query(
            "SELECT id, label, name, properties FROM nodes "
            "WHERE label NOT IN (SELECT value FROM json_each(?)) AND (? IS NULL OR label = ?) AND ("
            # The aliases as one uncorrelated set (read once; a correlated EXISTS was costed per node,
            # and PostgreSQL's estimate of millions compiled the query with JIT, ~0.5 s a search).
            f"{name} LIKE ? ESCAPE '\\' OR {key} LIKE ? ESCAPE '\\' OR id IN (SELECT a.node_id FROM node_aliases AS a "
            f"WHERE {alias} LIKE ? ESCAPE '\\')) "
            f"ORDER BY CASE WHEN {name} = ? THEN 0 WHEN {name} LIKE ? ESCAPE '\\' THEN 1 "
            f"WHEN {name} LIKE ? ESCAPE '\\' THEN 2 ELSE 3 END, name COLLATE NOCASE, id LIMIT ?",
            (dumps(sorted(set(exclude_labels))), label, label, pattern, pattern, pattern, fold(text), folded + "%", pattern,
             UNLIMITED if limit is None else limit),
        )
        return [node_from_row(r) for r in rows]

    def counts(self) -> dict[str, Any]:
        """Node counts by label and edge counts by relationship: the folded counts plus the changes
        the count triggers recorded since (migration 10) — O(labels + changes), never O(graph)."""
        rows = self.db.query(
            "SELECT kind, name, SUM(total) FROM (SELECT kind, name, total FROM graph_counts "
            "UNION ALL SELECT kind, name, delta FROM graph_count_changes) AS c "
            "GROUP BY kind, name HAVING SUM(total) != 0 ORDER BY kind, name"
        )
        nodes = {r[1]: int(r[2]) for r in rows if r[0] == "node"}
        edges = {r[1]: int(r[2]) for r in rows if r[0] == "edge"}
        return {"nodes": nodes, "edges": edges, "node_total": sum(nodes.values()), "edge_total": sum(edges.values())}

    def fold_counts(self) -> int:
        """Fold the recorded count changes into ``graph_counts`` and ``backfill_counts``
        (:func:`store.db.fold_changes`); returns how many were folded."""
        with self.db.transaction() as conn:
            return sum(fold_changes(conn, changes=changes, totals=totals)
                       for changes, totals in (("graph_count_changes", "graph_counts"), ("backfill_count_changes", "backfill_counts")))

    def backfill_counts(self) -> dict[str, dict[str, int]]:
        """Nodes back-fill made, by label and reason: ``{label: {backfilled, backfilled-minimal}}``
        for each of MEMORY and SESSION (0 where there are none; a minimal session counts once, as
        ``backfilled-minimal``). The folded counts plus the changes since (migration 28), as
        :meth:`counts`: O(changes since the last fold), never O(graph)."""
        counted = {(r[0], r[1]): int(r[2]) for r in self.db.query(
            "SELECT kind, name, SUM(total) FROM (SELECT kind, name, total FROM backfill_counts "
            "UNION ALL SELECT kind, name, delta FROM backfill_count_changes) AS c GROUP BY kind, name"
        )}
        return {label: {reason: counted.get((label, reason), 0) for reason in BACKFILL_REASONS} for label in BACKFILL_LABELS}

    # --- writes --------------------------------------------------------------------------
    def upsert_nodes(self, nodes: Iterable[Node]) -> int:
        """Insert or update nodes in one transaction; returns how many rows actually changed. A node
        whose row changed gets its ``node_aliases`` rows rewritten from its ``aliases`` property.

        The stored rows of these ids are read first (one statement per batch of ids) and only the
        new or different ones are written, in one ``executemany`` — a round trip per batch, not per
        node, which is what a server database costs. The upsert keeps its own ``WHERE`` so a row
        another writer made identical meanwhile is still left untouched."""
        now = self.clock()
        wanted: dict[str, Node] = {}
        for n in nodes:
            node_id = normalize_graph_node_id(n.id)
            wanted[node_id] = Node(node_id, n.label, n.name, n.properties)
        if not wanted:
            return 0
        documents = {node_id: dumps(n.properties) for node_id, n in wanted.items()}
        with self.db.transaction() as conn:
            stored: dict[str, tuple[str, str, str]] = {}
            for part, marks in in_batches(list(wanted)):
                for r in conn.execute(f"SELECT id, label, name, properties FROM nodes WHERE id IN ({marks})", part):
                    stored[r[0]] = (r[1], r[2], r[3])
            fresh = [n for node_id, n in wanted.items() if stored.get(node_id) != (n.label, n.name, documents[node_id])]
            changed = conn.executemany(
                "INSERT INTO nodes(id, label, name, properties, created_at, updated_at) VALUES (?,?,?,?,?,?) "
                "ON CONFLICT(id) DO UPDATE SET label = excluded.label, name = excluded.name, "
                "properties = excluded.properties, updated_at = excluded.updated_at "
                "WHERE nodes.label != excluded.label OR nodes.name != excluded.name "
                "OR nodes.properties != excluded.properties",
                [(n.id, n.label, n.name, documents[n.id], now, now) for n in fresh],
            ).rowcount
            self._index_aliases(conn, fresh, stored)
            return changed

    @staticmethod
    def _index_aliases(conn: Any, nodes: Sequence[Node], stored: Container[str]) -> None:
        # A node that was not stored has no alias rows to remove.
        conn.executemany("DELETE FROM node_aliases WHERE node_id = ?", [(n.id,) for n in nodes if n.id in stored])
        conn.executemany(
            "INSERT INTO node_aliases(node_id, alias, alias_key) VALUES (?,?,?) ON CONFLICT DO NOTHING",
            [
                (n.id, a, alias_key(a))
                for n in nodes if isinstance(aliases := n.properties.get("aliases"), list)
                for a in aliases if isinstance(a, str)
            ],
        )

    def upsert_node(self, node: Node) -> bool:
        """Insert or update one node; ``True`` when something changed."""
        return self.upsert_nodes([node]) > 0

    def link_nodes(self, edges: Iterable[Edge], *, present: Container[str] = frozenset()) -> LinkStats:
        """Insert or update edges whose endpoints both exist; an edge with a missing endpoint is culled,
        counted and logged (never silently). Re-linking an identical edge changes nothing.
        ``present``: ids the caller knows exist in this transaction (read or written in it, as
        :meth:`get_nodes` returns them) — not looked up again; only the other endpoints are."""
        stats = LinkStats()
        normalised = [
            Edge(normalize_graph_node_id(e.source), normalize_graph_node_id(e.target), e.relationship, e.weight, e.properties)
            for e in edges
        ]
        if not normalised:
            return stats
        now = self.clock()
        with self.db.transaction() as conn:
            endpoints = {e.source for e in normalised} | {e.target for e in normalised}
            known = {i for i in endpoints if i in present}
            exist = known | self._existing(endpoints - known)
            rows = []
            for edge in normalised:
                if edge.source in exist and edge.target in exist:
                    props = dumps(edge.properties) if edge.properties else "{}"
                    rows.append((edge.source, edge.target, edge.relationship, float(edge.weight), props, now, now))
                else:
                    stats.culled += 1
                    stats.culled_edges.append(edge)
            linked = conn.executemany(
                "INSERT INTO edges(source, target, relationship, weight, properties, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT(source, target, relationship) DO UPDATE SET "
                "weight = excluded.weight, properties = excluded.properties, updated_at = excluded.updated_at "
                "WHERE edges.weight != excluded.weight OR edges.properties != excluded.properties",
                rows,
            )
            stats.linked = linked.rowcount
            stats.unchanged = len(rows) - stats.linked
        for edge in stats.culled_edges[:20]:
            log.warning("edge culled: endpoint missing", source=edge.source, target=edge.target, relationship=edge.relationship)
        if stats.culled > 20:
            log.warning("more edges culled", count=stats.culled - 20)
        return stats

    def delete_node(self, node_id: str) -> bool:
        """Delete a node and (by cascade) its edges; ``True`` when it existed."""
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM nodes WHERE id = ?", (normalize_graph_node_id(node_id),)).rowcount > 0

    def delete_edges(self, keys: Iterable[tuple[str, str, str]]) -> int:
        """Delete edges by (source, target, relationship); returns how many existed."""
        with self.db.transaction() as conn:
            return conn.executemany("DELETE FROM edges WHERE source = ? AND target = ? AND relationship = ?", list(keys)).rowcount

    def delete_edge(self, source: str, target: str, relationship: str) -> bool:
        """Delete one edge; ``True`` when it existed."""
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "DELETE FROM edges WHERE source = ? AND target = ? AND relationship = ?",
                (normalize_graph_node_id(source), normalize_graph_node_id(target), relationship),
            )
            return cursor.rowcount > 0


def read_properties(document: str) -> dict[str, Any]:
    """A stored ``properties`` document as a dict. The empty one — every ``ORIGINATES_IN`` edge's
    (a quarter of a session's edges), many nodes' — is not run through the JSON decoder, which an
    export or a full read of the graph pays per row (bench/RESULTS.md, "Empty properties"); it is
    a new dict each time, as ``json.loads`` gives, since callers change theirs."""
    return {} if document == "{}" else json.loads(document)


def node_from_row(row: Any) -> Node:
    """A node from a row of ``id, label, name, properties``."""
    return Node(row["id"], row["label"], row["name"], read_properties(row["properties"]))


def _edge(row: Any) -> Edge:
    return Edge(row["source"], row["target"], row["relationship"], row["weight"], read_properties(row["properties"]))
