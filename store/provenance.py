"""Provenance as rows: ``node_points``, ``edge_points`` and ``node_claims`` (schema version 5).

A *point* says where a node or edge was seen: its anchor (``session:<id>`` or ``note:<hash>``), the
turn (``memory:<id>``, '' when the extractor gave no grounded quote), the chunk, the verbatim
evidence and the turn's time. A *claim* is what one anchor said of a node (description, aliases,
tags, confidence). Every write here is keyed by anchor or by merge, so a commit, merge, unmerge or
forget touches only the rows of its own source — never a list that grows with the graph's history.

The derived numbers: an edge's ``weight`` is the number of distinct places (anchor, and the turn —
or the chunk when there is no turn) among its points, at least 1; a ``MENTIONED_IN`` edge (node →
turn) weighs the node's distinct points in that turn, a ``DISCUSSED_IN`` edge (node → anchor) the
node's distinct points from that anchor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Any

from store.db import UNLIMITED, Database, in_batches, value_rows
from store.dialect import Dialect
from store.facts import NodeFacts, combine_all, facts_of, least_name, longer_text_order
from store.graph import Edge, Node, chunked, dumps

# The provenance relationships derived from points (their names are a public interface).
MENTIONED_IN = "MENTIONED_IN"
DISCUSSED_IN = "DISCUSSED_IN"

_IN_CHUNK = 400

EdgeKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True, order=True)
class PointRow:
    """One provenance point (of a node or an edge). ``memory``/``evidence`` are '' when absent."""

    anchor: str
    memory: str
    chunk_id: str
    evidence: str
    observed_at: str | None = None

    @property
    def place(self) -> tuple[str, str]:
        """What an edge's weight counts once: the anchor and the turn (the chunk without a turn)."""
        return self.anchor, self.memory or self.chunk_id

    def as_dict(self) -> dict[str, Any]:
        """The point as ``show``/``export`` print it (``session`` = the anchor)."""
        return {
            "session": self.anchor,
            "memory": self.memory or None,
            "chunk_id": self.chunk_id,
            "evidence": self.evidence or None,
            "observed_at": self.observed_at,
        }

POINT_ROW_ORDER: Callable[[PointRow], tuple[Any, ...]] = attrgetter(*(f.name for f in fields(PointRow)))
""":class:`PointRow`'s order (``order=True``'s: its fields in turn) as a sort key read in C. Sorting
by it gives the same order; the generated ``__lt__`` builds two tuples in Python per comparison,
which is most of a sort of a big session's points."""


@dataclass(frozen=True, slots=True)
class NodePointRow:
    node_id: str
    point: PointRow
    extracted_for: str
    merge_id: int | None = None


@dataclass(frozen=True, slots=True)
class EdgePointRow:
    key: EdgeKey
    point: PointRow
    extracted_source: str
    extracted_target: str
    merge_id: int | None = None
    # What the extraction that gave this point wrote of the edge ("; "-joined parts, "" when it
    # wrote nothing); ``None``: written before schema 15, its source unknown.
    justification: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimRow:
    node_id: str
    anchor: str
    extracted_for: str
    facts: NodeFacts
    merge_id: int | None = None
    # The spelling this claim named the node with ("" when unknown: written before schema 8).
    name: str = ""


def first_claim(node: Node) -> ClaimRow:
    """The claim a node with none gets (written by hand, or before claims existed) when a commit or
    merge first touches it: its current facts, with its own name among its aliases, as an
    extracted node's claim holds its name (:func:`pipelines.extract.model.validate_extraction`). So a name
    it is no longer shown by (another name of its group is fuller, :func:`store.facts.name_order`)
    or lost with its id (folded into another node) stays an alias of the node."""
    facts = facts_of(node.properties)
    return ClaimRow(node.id, "", node.id, replace(facts, aliases=tuple(sorted({*facts.aliases, node.name} - {""}))), name=node.name)


@dataclass(frozen=True, slots=True)
class AnchorRows:
    """Every row one anchor wrote."""

    node_points: list[NodePointRow]
    edge_points: list[EdgePointRow]
    claims: list[ClaimRow]


def _point(row: Any) -> PointRow:
    return PointRow(row["anchor"], row["memory_id"], row["chunk_id"], row["evidence"], row["observed_at"])


def _claim(row: Any) -> ClaimRow:
    facts = NodeFacts.of(
        description=row["description"], aliases=json.loads(row["aliases"]), tags=json.loads(row["tags"]),
        confidence=row["confidence"],
    )
    return ClaimRow(row["node_id"], row["anchor"], row["extracted_for"], facts, row["merge_id"], row["name"])


def justification_parts(text: object) -> set[str]:
    """The parts of a ``"; "``-joined justification (nothing when ``text`` is not a string)."""
    return {part for part in text.split("; ") if part} if isinstance(text, str) else set()


# An edge's justification is made of at most this many of its points' texts: the least distinct
# ones (bytewise, as both engines order ``edge_points_reason``). An edge whose every session writes
# its own text would otherwise keep a text — read, rebuilt and written at each commit touching the
# edge — that grows with its history (bench/bench_reextract.py); at most 16 texts are read, seek by
# seek, whatever the points. The rule is a function of the points' texts, so a commit, a forget and
# a build from scratch agree.
JUSTIFICATION_TEXTS = 16


def least_texts(texts: Iterable[str | None]) -> tuple[str, ...]:
    """The :data:`JUSTIFICATION_TEXTS` least distinct non-empty ``texts``, in order (pure)."""
    return tuple(sorted({t for t in texts if t})[:JUSTIFICATION_TEXTS])


def justification_of(texts: Iterable[str | None]) -> set[str]:
    """The justification parts of an edge whose points carry ``texts``: the parts of its
    :func:`least_texts` (pure)."""
    return {part for text in least_texts(texts) for part in justification_parts(text)}


def justification_text(parts: Iterable[str]) -> str:
    """An edge's ``justification`` property made of ``parts`` (sorted, ``"; "``-joined)."""
    return "; ".join(sorted(set(parts)))


def with_justification(properties: dict[str, Any], parts: Iterable[str]) -> dict[str, Any]:
    """An edge's ``properties`` with its ``justification`` made of ``parts`` (an edge that never had
    one and gets none is left as it is)."""
    text = justification_text(parts)
    return {**properties, "justification": text} if text or "justification" in properties else dict(properties)


def place_count(points: Iterable[PointRow]) -> int:
    """How many distinct places (see :attr:`PointRow.place`) ``points`` name."""
    return len({p.place for p in points})


_POINT_COLUMNS = "anchor, memory_id, chunk_id, evidence, observed_at"
# The least justification of an edge (``{at}``.s, .t, .r) after ``{after}`` among other anchors'
# points: one seek of ``edge_points_reason`` (after ``''`` first: NULL and empty texts are no
# reasons), whose key the dialect spells (PostgreSQL's leads with a digest of the edge, migration 31).
def _reason_after(dialect: Dialect, at: str, after: str) -> str:
    return (
        f"SELECT p.justification FROM edge_points p WHERE {dialect.same_edge('p', at)} "
        f"AND p.justification > {after} AND p.anchor != ? ORDER BY p.justification LIMIT 1"
    )


class ProvenanceStore:
    """Reads and writes of the point and claim tables (inside the caller's transaction)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- reads ---------------------------------------------------------------------------
    def anchor_rows(self, anchor: str) -> AnchorRows:
        """Every point and claim ``anchor`` wrote."""
        nodes = self.db.query(
            f"SELECT node_id, {_POINT_COLUMNS}, extracted_for, merge_id FROM node_points WHERE anchor = ?", (anchor,)
        )
        edges = self.db.query(
            f"SELECT source, target, relationship, {_POINT_COLUMNS}, extracted_source, extracted_target, merge_id, justification "
            "FROM edge_points WHERE anchor = ?",
            (anchor,),
        )
        claims = self.db.query("SELECT * FROM node_claims WHERE anchor = ?", (anchor,))
        return AnchorRows(
            [NodePointRow(r["node_id"], _point(r), r["extracted_for"], r["merge_id"]) for r in nodes],
            [
                EdgePointRow(
                    (r["source"], r["target"], r["relationship"]), _point(r), r["extracted_source"], r["extracted_target"], r["merge_id"],
                    r["justification"],
                )
                for r in edges
            ],
            [_claim(r) for r in claims],
        )

    def node_points(self, node_id: str) -> list[PointRow]:
        """The points of one node (sorted, distinct)."""
        rows = self.db.query(f"SELECT DISTINCT {_POINT_COLUMNS} FROM node_points WHERE node_id = ?", (node_id,))
        return sorted((_point(r) for r in rows), key=POINT_ROW_ORDER)

    def turn_memories(self, node_id: str, *, limit: int | None) -> tuple[list[str], int]:
        """The first ``limit`` (sorted; all when ``None``) ``memory:`` ids of the turns ``node_id``
        came from — its points' turns and its ``MENTIONED_IN`` targets — and how many there are."""
        union = (
            "SELECT memory_id AS m FROM node_points WHERE node_id = :n AND memory_id != '' "
            "UNION SELECT target FROM edges WHERE source = :n AND relationship = :rel"
        )
        params = {"n": node_id, "rel": MENTIONED_IN, "limit": UNLIMITED if limit is None else limit}
        total = self.db.query(f"SELECT COUNT(*) FROM ({union}) AS u", params)[0][0]
        return [r[0] for r in self.db.query(f"SELECT m FROM ({union}) AS u ORDER BY m LIMIT :limit", params)], total

    def node_turn_points(self, node_id: str, memory_ids: Iterable[str]) -> list[PointRow]:
        """The points of ``node_id`` from the turns ``memory_ids`` (sorted, distinct)."""
        found: set[PointRow] = set()
        for part in chunked(sorted(set(memory_ids)), _IN_CHUNK):
            marks = ",".join("?" * len(part))
            rows = self.db.query(f"SELECT {_POINT_COLUMNS} FROM node_points WHERE node_id = ? AND memory_id IN ({marks})", (node_id, *part))
            found.update(_point(r) for r in rows)
        return sorted(found)

    def first_texts(self, node_id: str, *, points: int) -> list[str]:
        """The texts ``node_id`` was first grounded in: for each of its ``points`` earliest points
        (turn time, then turn; points with no turn time after all timed ones, on both engines), the
        text of its turn (``recall_turns``, written by ingest) or, for a point with no readable turn
        (a notes file's, a turn since forgotten), its evidence quote; in that order, distinct, empty
        ones left out. One query: two walks of ``node_points_first`` (the timed points in time order,
        then the untimed), each stopping after ``points`` rows, so its cost does not grow with the
        node's history. A plain ``ORDER BY observed_at`` put the untimed first on SQLite and last on
        PostgreSQL (la32out)."""
        walk = "SELECT * FROM (SELECT {untimed} AS untimed, memory_id, evidence, observed_at FROM node_points " \
            "WHERE node_id = ? AND observed_at IS {null} ORDER BY observed_at, memory_id LIMIT ?) AS {name}"
        rows = self.db.query(
            f"SELECT p.evidence, t.text FROM ({walk.format(untimed=0, null='NOT NULL', name='timed')} UNION ALL "
            f"{walk.format(untimed=1, null='NULL', name='untimed')}) AS p LEFT JOIN recall_turns AS t "
            "ON p.memory_id != '' AND t.memory_id = p.memory_id ORDER BY p.untimed, p.observed_at, p.memory_id LIMIT ?",
            (node_id, points, node_id, points, points),
        )
        return list(dict.fromkeys(text for row in rows if (text := row[1] or row[0])))

    def node_seen(self, node_id: str) -> tuple[str | None, str | None]:
        """(first, last) turn time among ``node_id``'s points (one indexed aggregate)."""
        row = self.db.query("SELECT MIN(observed_at), MAX(observed_at) FROM node_points WHERE node_id = ?", (node_id,))[0]
        return row[0], row[1]

    def iter_node_points(self) -> Iterator[tuple[str, PointRow]]:
        """Every node's points, distinct, ordered by node and then as :meth:`node_points` sorts
        them, read from a cursor (one row at a time) so an export never holds them all."""
        rows = self.db.stream(
            f"SELECT DISTINCT node_id, {_POINT_COLUMNS} FROM node_points "
            "ORDER BY node_id, anchor, memory_id, chunk_id, evidence, observed_at"
        )
        for row in rows:
            yield row["node_id"], _point(row)

    def point_places_by_node(self) -> dict[str, list[PointRow]]:
        """Per node, one point per anchor (per turn for points without an anchor), with the first
        and the last turn time of those points: what an export says of a node's points besides
        listing them (its sources, ``first_seen``/``last_seen``), in size of its sources, not of
        its points."""
        rows = self.db.query(
            "SELECT node_id, anchor, CASE WHEN anchor = '' THEN memory_id ELSE '' END AS memory_id, '' AS chunk_id, "
            "'' AS evidence, MIN(observed_at) AS first, MAX(observed_at) AS last FROM node_points "
            "GROUP BY node_id, anchor, CASE WHEN anchor = '' THEN memory_id ELSE '' END"
        )
        found: dict[str, list[PointRow]] = {}
        for row in rows:
            for time in {row["first"], row["last"]}:
                found.setdefault(row["node_id"], []).append(PointRow(row["anchor"], row["memory_id"], "", "", time))
        return found

    def points_by_node(self, node_ids: Iterable[str] | None = None) -> dict[str, list[PointRow]]:
        """Points of the given nodes (of every node when ``None``), by node id, sorted."""
        found: dict[str, set[PointRow]] = {}
        if node_ids is None:
            for row in self.db.query(f"SELECT node_id, {_POINT_COLUMNS} FROM node_points"):
                found.setdefault(row["node_id"], set()).add(_point(row))
        else:
            for part in chunked(sorted(set(node_ids)), _IN_CHUNK):
                marks = ",".join("?" * len(part))
                for row in self.db.query(f"SELECT node_id, {_POINT_COLUMNS} FROM node_points WHERE node_id IN ({marks})", part):
                    found.setdefault(row["node_id"], set()).add(_point(row))
        return {k: sorted(v, key=POINT_ROW_ORDER) for k, v in sorted(found.items())}

    def points_by_edge(self, keys: Iterable[EdgeKey] | None = None) -> dict[EdgeKey, list[PointRow]]:
        """Points of the given edges (of every edge when ``None``), by key, sorted."""
        found: dict[EdgeKey, set[PointRow]] = {}
        select = f"SELECT source, target, relationship, {_POINT_COLUMNS} FROM edge_points"
        rows = self.db.query(select) if keys is None else [
            r for key in sorted(set(keys)) for r in self.db.query(select + " WHERE source = ? AND target = ? AND relationship = ?", key)
        ]
        for row in rows:
            found.setdefault((row["source"], row["target"], row["relationship"]), set()).add(_point(row))
        return {k: sorted(v, key=POINT_ROW_ORDER) for k, v in sorted(found.items())}

    def edge_seen(self) -> dict[EdgeKey, tuple[str | None, str | None]]:
        """Every edge with points: (first, last) turn time among them (one grouped pass)."""
        rows = self.db.query(
            "SELECT source, target, relationship, MIN(observed_at), MAX(observed_at) FROM edge_points GROUP BY source, target, relationship"
        )
        return {(r[0], r[1], r[2]): (r[3], r[4]) for r in rows}

    def claims_by_node(self, node_ids: Iterable[str] | None = None) -> dict[str, list[ClaimRow]]:
        """Claims of the given nodes (of every node when ``None``), by node id."""
        rows = self.db.query("SELECT * FROM node_claims") if node_ids is None else [
            r for node_id in sorted(set(node_ids)) for r in self.db.query("SELECT * FROM node_claims WHERE node_id = ?", (node_id,))
        ]
        found: dict[str, list[ClaimRow]] = {}
        for row in rows:
            found.setdefault(row["node_id"], []).append(_claim(row))
        return found

    def claims(self, node_id: str) -> list[ClaimRow]:
        """Every claim on ``node_id``."""
        return [_claim(r) for r in self.db.query("SELECT * FROM node_claims WHERE node_id = ?", (node_id,))]

    def claim_lookup(self, node_id: str) -> "NodeClaimLookup":
        """Questions about ``node_id``'s claims for :func:`store.facts.without_claim`."""
        return NodeClaimLookup(self.db, node_id)

    def claimed_names(self, node_id: str) -> set[str]:
        """The names ``node_id``'s claims spelled (an edit must not give it a kept-out one:
        ``pipelines.forget.refusing_kept_out``); its claims only, not its points."""
        return {r[0] for r in self.db.query("SELECT DISTINCT name FROM node_claims WHERE node_id = ?", (node_id,)) if r[0]}

    def node_sources(self, node_id: str) -> tuple[set[str], set[str]]:
        """The anchors that gave ``node_id`` a point or a claim, and the names its claims spelled
        (a ``forget --node`` keeps the node out under them and re-extracts the anchors on undo).
        Read by the ``*_owner`` indexes: the node's own rows."""
        rows = self.db.query(
            "SELECT anchor, '' FROM node_points WHERE node_id = ? UNION SELECT anchor, name FROM node_claims WHERE node_id = ?",
            (node_id, node_id),
        )
        return {r[0] for r in rows if r[0]}, {r[1] for r in rows if r[1]}

    def claimed_by(self, anchors: Iterable[str]) -> set[str]:
        """The nodes that ``anchors`` (``session:<id>`` …) have claims on."""
        found: set[str] = set()
        for part, marks in in_batches(sorted(set(anchors))):
            found.update(r[0] for r in self.db.query(f"SELECT DISTINCT node_id FROM node_claims WHERE anchor IN ({marks})", part))
        return found

    def with_claims(self, node_ids: Iterable[str]) -> set[str]:
        """The subset of ``node_ids`` that has at least one claim."""
        return self._having("node_claims", "node_id", node_ids)

    def pointed_elsewhere(self, node_ids: Iterable[str], anchor: str, memory_id: str | None = None) -> set[str]:
        """The subset of ``node_ids`` with a point of another anchor than ``anchor`` (with
        ``memory_id``: of another turn than that one of ``anchor``). Each probe walks the node's
        ``node_points_owner`` entries only until the first such point: a popular node's history is
        not read."""
        other = "anchor != ?" if memory_id is None else "(anchor != ? OR memory_id != ?)"
        params = (anchor,) if memory_id is None else (anchor, memory_id)
        found: set[str] = set()
        for part in chunked(sorted(set(node_ids)), _IN_CHUNK):
            rows = self.db.query(
                f"SELECT value FROM json_each(?) WHERE EXISTS (SELECT 1 FROM node_points WHERE node_id = json_each.value AND {other})",
                (dumps(list(part)), *params),
            )
            found.update(r[0] for r in rows)
        return found

    def supported(self, node_ids: Iterable[str]) -> set[str]:
        """The subset of ``node_ids`` that has at least one point."""
        return self._having("node_points", "node_id", node_ids)

    def _having(self, table: str, column: str, ids: Iterable[str]) -> set[str]:
        # One index probe per id (EXISTS stops at the first row): a popular node's thousands of
        # rows are never read, as ``SELECT DISTINCT … IN (…)`` would.
        found: set[str] = set()
        for part in chunked(sorted(set(ids)), _IN_CHUNK):
            rows = self.db.query(
                f"SELECT value FROM json_each(?) WHERE EXISTS (SELECT 1 FROM {table} WHERE {column} = json_each.value)",
                (dumps(list(part)),),
            )
            found.update(r[0] for r in rows)
        return found

    def edge_has_points(self, key: EdgeKey) -> bool:
        """``True`` when the edge has at least one point."""
        return bool(self.db.query("SELECT 1 FROM edge_points WHERE source = ? AND target = ? AND relationship = ? LIMIT 1", key))

    def edge_places(self, key: EdgeKey) -> int:
        """The distinct places among the edge's points (reads all of them: for merges, not commits)."""
        return self.db.query(
            "SELECT COUNT(*) FROM (SELECT DISTINCT anchor, CASE WHEN memory_id != '' THEN memory_id ELSE chunk_id END "
            "FROM edge_points WHERE source = ? AND target = ? AND relationship = ?) AS places",
            key,
        )[0][0]

    def edge_reasons(self, key: EdgeKey, *, besides: str = "") -> set[str]:
        """The justification parts the edge shows from its points (those of anchor ``besides`` left
        out): :func:`justification_of` its :meth:`edge_texts`; a point written before schema 15 (no
        known source) gives none."""
        return justification_of(self.edge_texts([key], besides=besides)[key])

    def edge_texts(self, keys: Iterable[EdgeKey], *, besides: str = "") -> dict[EdgeKey, tuple[str, ...]]:
        """For each edge of ``keys`` (every key given is in the answer) the :func:`least_texts` its
        points carry, those of anchor ``besides`` left out: one query per batch of keys, each
        edge's texts found by seeking through ``edge_points_reason`` from one to the next and
        stopping at :data:`JUSTIFICATION_TEXTS` — the cost of at most that many seeks an edge,
        however many points and texts its history gave it."""
        found: dict[EdgeKey, list[str]] = {key: [] for key in keys}
        first, after = _reason_after(self.db.dialect, "k", "''"), _reason_after(self.db.dialect, "d", "d.j")
        for batch, _ in in_batches(sorted(found), lists=3):
            keys, params = value_rows(batch)
            rows = self.db.query_seeking(
                f"WITH RECURSIVE k(s, t, r) AS (VALUES {keys}), d(s, t, r, j, n) AS (SELECT s, t, r, ({first}), 1 FROM k "
                f"UNION ALL SELECT s, t, r, ({after}), n + 1 FROM d WHERE d.j IS NOT NULL AND d.n < {JUSTIFICATION_TEXTS:d}) "
                "SELECT s, t, r, j FROM d WHERE j IS NOT NULL",
                (*params, besides, besides),
            )
            for row in rows:
                found[(row[0], row[1], row[2])].append(row[3])
        return {key: least_texts(texts) for key, texts in found.items()}

    def node_anchor_points(self, node_id: str, anchor: str) -> list[PointRow]:
        """The node's distinct points from one anchor (what its provenance edges to it are made of)."""
        rows = self.db.query(f"SELECT DISTINCT {_POINT_COLUMNS} FROM node_points WHERE node_id = ? AND anchor = ?", (node_id, anchor))
        return sorted((_point(r) for r in rows), key=POINT_ROW_ORDER)

    # --- writes --------------------------------------------------------------------------
    def delete_anchor(self, anchor: str) -> None:
        """Remove every point and claim ``anchor`` wrote."""
        with self.db.transaction() as conn:
            for table in ("node_points", "edge_points", "node_claims"):
                conn.execute(f"DELETE FROM {table} WHERE anchor = ?", (anchor,))

    def add_node_points(self, rows: Iterable[NodePointRow]) -> None:
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO node_points(node_id, anchor, memory_id, chunk_id, evidence, observed_at, extracted_for, merge_id) "
                "VALUES (?,?,?,?,?,?,?,?)",
                [(r.node_id, *_point_values(r.point), r.extracted_for, r.merge_id) for r in rows],
            )

    def add_edge_points(self, rows: Iterable[EdgePointRow]) -> None:
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO edge_points(source, target, relationship, anchor, memory_id, chunk_id, evidence, observed_at, "
                "extracted_source, extracted_target, merge_id, justification) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [(*r.key, *_point_values(r.point), r.extracted_source, r.extracted_target, r.merge_id, r.justification) for r in rows],
            )

    def add_claims(self, rows: Iterable[ClaimRow]) -> None:
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO node_claims(node_id, anchor, extracted_for, merge_id, description, aliases, tags, confidence, name) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                [
                    (r.node_id, r.anchor, r.extracted_for, r.merge_id, r.facts.description, dumps(list(r.facts.aliases)),
                     dumps(list(r.facts.tags)), r.facts.confidence, r.name)
                    for r in rows
                ],
            )

    def turn_owners(self, anchor: str, memory_id: str) -> set[str]:
        """The nodes that have a point from one turn (``memory_id``) of ``anchor``."""
        return {r[0] for r in self.db.query("SELECT DISTINCT node_id FROM node_points WHERE anchor = ? AND memory_id = ?", (anchor, memory_id))}

    def turn_edges(self, anchor: str, memory_id: str) -> set[EdgeKey]:
        """The edges that have a point from one turn (``memory_id``) of ``anchor``."""
        rows = self.db.query("SELECT DISTINCT source, target, relationship FROM edge_points WHERE anchor = ? AND memory_id = ?", (anchor, memory_id))
        return {(r[0], r[1], r[2]) for r in rows}

    def delete_turn_points(self, anchor: str, memory_id: str) -> tuple[set[str], set[EdgeKey]]:
        """Delete the points one turn gave (of nodes and edges); returns the nodes and edges that had some."""
        params = (anchor, memory_id)
        nodes, edges = self.turn_owners(anchor, memory_id), self.turn_edges(anchor, memory_id)
        with self.db.transaction() as conn:
            for table in ("node_points", "edge_points"):
                conn.execute(f"DELETE FROM {table} WHERE anchor = ? AND memory_id = ?", params)
        return nodes, edges

    def take_claims(self, anchor: str, node_ids: Iterable[str]) -> dict[str, list[ClaimRow]]:
        """Delete ``anchor``'s claims on ``node_ids``; returns the deleted claims by node id."""
        taken: dict[str, list[ClaimRow]] = {}
        for node_id in sorted(set(node_ids)):
            rows = self.db.query("SELECT * FROM node_claims WHERE node_id = ? AND anchor = ?", (node_id, anchor))
            if rows:
                taken[node_id] = [_claim(r) for r in rows]
        with self.db.transaction() as conn:
            conn.executemany("DELETE FROM node_claims WHERE node_id = ? AND anchor = ?", [(n, anchor) for n in taken])
        return taken

    # --- merges ----------------------------------------------------------------------------
    def move_node_rows(self, *, from_id: str, to_id: str, new_merge_id: int) -> set[str]:
        """Move all of ``from_id``'s points and claims to ``to_id``, marked as moved by merge
        ``new_merge_id``. Returns the anchors of the moved points."""
        anchors = {r[0] for r in self.db.query("SELECT DISTINCT anchor FROM node_points WHERE node_id = ?", (from_id,))}
        with self.db.transaction() as conn:
            for table in ("node_points", "node_claims"):
                conn.execute(f"UPDATE {table} SET node_id = ?, merge_id = ? WHERE node_id = ?", (to_id, new_merge_id, from_id))
        return anchors

    def rekey_edge_points(self, old: EdgeKey, new: EdgeKey, *, node_id: str, new_merge_id: int) -> None:
        """Move every point of edge ``old`` (an edge of ``node_id``) to edge ``new``, marked as moved
        by merge ``new_merge_id``; the caller creates edge ``new`` first (foreign key)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE edge_points SET source = ?, target = ?, merge_id = ? WHERE source = ? AND target = ? AND relationship = ?",
                (new[0], new[1], new_merge_id, *old),
            )

    def merged_anchors(self, node_id: str, merge_id: int) -> set[str]:
        """Anchors of the points ``merge_id`` moved onto ``node_id``."""
        rows = self.db.query("SELECT DISTINCT anchor FROM node_points WHERE merge_id = ? AND node_id = ?", (merge_id, node_id))
        return {r[0] for r in rows}


def _point_values(point: PointRow) -> tuple[str, str, str, str, str | None]:
    return point.anchor, point.memory, point.chunk_id, point.evidence, point.observed_at


@dataclass(frozen=True, slots=True)
class NodeClaimLookup:
    """:class:`store.facts.ClaimLookup` over one node's rows of ``node_claims``. A ``says_…``
    question stops at the first claim that says it (through ``node_claims_owner``); only a value no
    other claim says, and the best description or confidence when the winner was withdrawn, read
    all the node's claims — in SQL, not as decoded rows."""

    db: Database
    node_id: str

    def _any(self, sql: str, value: object) -> bool:
        return bool(self.db.query(f"SELECT 1 FROM node_claims AS c{sql} LIMIT 1", (self.node_id, value)))

    def says_description(self, text: str) -> bool:
        return self._any(" WHERE c.node_id = ? AND c.description = ?", text)

    def says_confidence(self, value: float) -> bool:
        return self._any(" WHERE c.node_id = ? AND c.confidence = ?", value)

    def says_alias(self, alias: str) -> bool:
        return self._any(", json_each(c.aliases) AS j WHERE c.node_id = ? AND j.value = ?", alias)

    def says_tag(self, tag: str) -> bool:
        return self._any(", json_each(c.tags) AS j WHERE c.node_id = ? AND j.value = ?", tag)

    def says_name(self, name: str) -> bool:
        """Whether another claim used the spelling ``name``."""
        return self._any(" WHERE c.node_id = ? AND c.name = ?", name)

    def names(self) -> list[str]:
        """The distinct spellings the node's claims used (few, whatever its history)."""
        return [r[0] for r in self.db.query("SELECT DISTINCT name FROM node_claims WHERE node_id = ? AND name <> ''", (self.node_id,))]

    def best_description(self) -> str:
        rows = self.db.query(
            f"SELECT description FROM node_claims WHERE node_id = ? ORDER BY {longer_text_order('description')} LIMIT 1",
            (self.node_id,),
        )
        return rows[0][0] if rows else ""

    def max_confidence(self) -> float:
        rows = self.db.query("SELECT MAX(confidence) FROM node_claims WHERE node_id = ?", (self.node_id,))
        return float(rows[0][0]) if rows and rows[0][0] is not None else 0.0


def facts_from_claims(claims: Iterable[ClaimRow]) -> NodeFacts:
    """The combination of ``claims``' facts."""
    return combine_all(c.facts for c in claims)


def name_from_claims(node_id: str, claims: Iterable[ClaimRow], *, current: str) -> str:
    """A node's display name recomputed from its claims (:func:`store.facts.least_name` of their
    spellings); ``current`` when no claim carries one (all written before schema 8)."""
    return least_name((c.name for c in claims), node_id=node_id) or current


def anchor_edges(node_id: str, anchor: str, points: Iterable[PointRow]) -> list[Edge]:
    """The provenance edges of ``node_id`` for one anchor, derived from its points from there (pure):
    one ``MENTIONED_IN`` per turn (weight = its points in that turn, with their chunks and quotes)
    and one ``DISCUSSED_IN`` to the anchor (weight = its points from there, at least 1, with the
    chunks). No points: no edges."""
    own = set(points)  # no order needed: what is built from them is sorted
    if not own:
        return []
    by_memory: dict[str, set[tuple[str, str]]] = {}
    for point in own:
        if point.memory:
            by_memory.setdefault(point.memory, set()).add((point.chunk_id, point.evidence))
    edges: list[Edge] = []
    for memory, found in sorted(by_memory.items()):
        chunks, quotes = zip(*found)  # in C: this runs once per turn of the node's sessions
        edges.append(Edge(node_id, memory, MENTIONED_IN, float(len(found)), {"chunk_ids": sorted(set(chunks)), "evidence": sorted(set(quotes))}))
    distinct = {(p.memory, p.chunk_id, p.evidence) for p in own}
    edges.append(Edge(node_id, anchor, DISCUSSED_IN, float(max(1, len(distinct))), {"chunk_ids": sorted({p.chunk_id for p in own})}))
    return edges
