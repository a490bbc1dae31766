"""The ``merges`` table: every identity merge, and the rows it moved, so that it can be undone exactly.

A merge folds node M ("merged") into node I ("into"). It happens in two ways:

- at commit time, when identity resolution links an extracted node to an existing one: M never
  exists; the commit records the link with :meth:`MergeStore.record_link` and writes the points and
  claims it extracted for M onto I (and onto I's edges) carrying the merge's id;
- by hand, ``rem-cycle merge M I`` (:meth:`MergeStore.merge_nodes`): M exists; all its points and
  claims move to I carrying the merge's id, its edges' points move to I's edges, M's name becomes
  an alias of I (a claim of its own) and M is deleted.

:meth:`MergeStore.unmerge` moves exactly the rows carrying the merge's id back to M (re-created),
so points that later sessions added stay where they belong, and recombines both nodes' facts from
their claims: I says what it would say without the merge. Edges without points (written by hand or
by other tools) are kept in the ``restore`` column — M's edges, the keys of I's edges the merge
created and the prior state of those it changed — and restored from there. The pair is then
*blocked*: identity resolution never links it again. One active record per (M, I) pair: a
repeated link reuses it. :meth:`MergeStore.split` undoes a short name's links the same way inside
an extraction commit (``pipelines.hubs``) but blocks nothing: its records keep ``evidence.split``.

``identity_candidates`` keeps the other identity decision: pairs that resolution found ambiguous
(``candidate`` verdicts: created, not merged) with the rule and score that made them candidates,
for a person to review (``rem-cycle candidates``) and merge by hand or leave. A pair is kept once,
unordered: a later session finding the other node ambiguous against the first updates the same row
(a unique index on the pair, ``store.db.CANDIDATE_PAIR_KEY``). A pair disappears when either node
does (a merge, either way round, deletes the merged node), and a pair whose merge was undone (either
way round) is not listed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from store.db import CANDIDATE_PAIR_KEY, UNLIMITED, Database, in_batches
from store.facts import NodeFacts, with_facts
from store.graph import Edge, GraphStore, Node, dumps, utc_now
from store.ids import MAX_NODE_ID_LENGTH, normalize_graph_node_id
from store.provenance import (
    DISCUSSED_IN,
    MENTIONED_IN,
    ClaimRow,
    EdgeKey,
    ProvenanceStore,
    anchor_edges,
    facts_from_claims,
    first_claim,
    justification_parts,
    name_from_claims,
    with_justification,
)


# How many of the nodes merged into a node an unmerge refusal names.
_NAMED = 5


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
    # A record of the release before rows carries points in ``provenance``: they are rows now.
    properties = {k: v for k, v in data["properties"].items() if k != "provenance"}
    return Edge(data["source"], data["target"], data["relationship"], float(data["weight"]), properties)


def _union(first: Iterable[Any], second: Iterable[Any]) -> list[Any]:
    """Order-preserving union of JSON-able values."""
    seen: dict[str, Any] = {}
    for value in (*first, *second):
        seen.setdefault(dumps(value), value)
    return list(seen.values())


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


# Who said two nodes are different things (``identity_apart.decided_by``): a person, or the model
# judge answering the review list (pipelines/review.py).
OPERATOR = "operator"
JUDGE = "judge"
# A merge undone by a commit's split (a short name that stopped naming one thing) is no operator's
# decision: its pair is not blocked and stays listed. Marked in its evidence (``{"split": …}``).
_SPLIT = "evidence LIKE '%\"split\":%'"
# A candidate pair (alias c) whose merge was undone is settled: keep them apart, do not list it —
# whichever of the two the reviewer merged into the other.
_NOT_UNDONE = (
    "NOT EXISTS (SELECT 1 FROM merges b WHERE b.undone_at IS NOT NULL "
    "AND ((b.merged_id = c.node_id AND b.into_id = c.candidate_id) OR (b.merged_id = c.candidate_id AND b.into_id = c.node_id)) "
    f"AND NOT b.{_SPLIT}) "
    # Nor two nodes a person said are different things (keep_apart; one row a pair, ids in order).
    "AND NOT EXISTS (SELECT 1 FROM identity_apart a WHERE (a.node_id = c.node_id AND a.other_id = c.candidate_id) "
    "OR (a.node_id = c.candidate_id AND a.other_id = c.node_id))"
)


class MergeStore:
    """Records, applies and undoes merges (SQL for ``merges``; node/edge writes via :class:`GraphStore`)."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock
        self.graph = GraphStore(db, clock=clock)
        self.provenance = ProvenanceStore(db)

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
        """(merged, into) pairs whose merge was undone by an operator (not by a split), and the pairs
        an operator kept apart (:meth:`keep_apart`, in both orders): identity resolution must not
        link, pair or ask about them again."""
        rows = self.db.query(f"SELECT DISTINCT merged_id, into_id FROM merges WHERE undone_at IS NOT NULL AND NOT {_SPLIT}")
        apart = self.db.query("SELECT node_id, other_id FROM identity_apart")
        return frozenset((r[0], r[1]) for r in rows) | frozenset(pair for r in apart for pair in ((r[0], r[1]), (r[1], r[0])))

    def redirects(self, *, besides: Collection[str] = ()) -> dict[str, str]:
        """The ids folded into a node of another type by a merge still in force (of a rule not in
        ``besides``), each by the node it lives on as now (a chain of merges followed to a node that
        exists): identity resolution links the id's next mention there (``merged-id``), since names
        are looked up within a type. Reads the active merges, once an identity index is built."""
        rows = self.db.query("SELECT merged_id, into_id, rule FROM merges WHERE undone_at IS NULL ORDER BY merge_id")
        into = {r[0]: r[1] for r in rows}
        across = [r[0] for r in rows if r[0].partition(":")[0] != r[1].partition(":")[0] and r[2] not in besides]
        if not across:
            return {}
        ends: dict[str, str] = {}
        for merged in across:
            target, seen = into[merged], {merged}
            while target in into and target not in seen:
                seen.add(target)
                target = into[target]
            ends[merged] = target
        present = self.graph.existing_ids(set(ends.values()))
        return {merged: target for merged, target in ends.items() if target in present}

    def keep_apart(
        self, node_id: str, *other_ids: str, anchor_labels: frozenset[str] = frozenset(), decided_by: str = OPERATOR,
    ) -> int:
        """Record that ``node_id`` is none of ``other_ids`` (existing knowledge nodes: not one of
        ``anchor_labels``), as ``decided_by`` said (:data:`OPERATOR` or :data:`JUDGE`), and take
        those pairs off the review list, all in one transaction (any refusal — a node missing or an
        anchor — changes nothing). Returns how many pairs were new (a pair already kept apart keeps
        who said it first). A new identity epoch follows, so every worker's identity index learns
        the pairs at its next commit (:meth:`store.runstate.RunStateStore.begin_commit`)."""
        node_id = normalize_graph_node_id(node_id)
        pairs = [tuple(sorted((node_id, normalize_graph_node_id(other)))) for other in other_ids]
        if any(one == other for one, other in pairs):
            raise MergeError("a node is not apart from itself")
        added = 0
        with self.db.transaction() as conn:
            for given in dict.fromkeys(given for pair in pairs for given in pair):
                node = self.graph.get_node(given)
                if node is None:
                    onward = self.records(merged_id=given, active=True, limit=1)
                    where = f" (it was merged into {onward[0].into_id})" if onward else ""
                    raise MergeError(f"no node {given}{where}")
                if node.label in anchor_labels:
                    raise MergeError(f"{given} is a {node.label} node, a provenance anchor: only knowledge nodes are kept apart")
            for one, other in pairs:
                added += conn.execute(
                    "INSERT INTO identity_apart(node_id, other_id, created_at, decided_by) VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
                    (one, other, self.clock(), decided_by),
                ).rowcount
                conn.execute(
                    "DELETE FROM identity_candidates WHERE (node_id = ? AND candidate_id = ?) OR (node_id = ? AND candidate_id = ?)",
                    (one, other, other, one),
                )
            conn.execute("UPDATE rem_counters SET value = value + 1 WHERE name = 'identity'")
        return added

    def undo_apart(self, node_id: str, other_id: str) -> bool:
        """Take back :meth:`keep_apart` of the two ids (whether or not the nodes still exist):
        identity resolution may link or pair them again from the next commit on (a new epoch).
        Returns whether there was such a record."""
        node_id, other_id = sorted((normalize_graph_node_id(node_id), normalize_graph_node_id(other_id)))
        with self.db.transaction() as conn:
            removed = conn.execute("DELETE FROM identity_apart WHERE node_id = ? AND other_id = ?", (node_id, other_id)).rowcount
            if removed:
                conn.execute("UPDATE rem_counters SET value = value + 1 WHERE name = 'identity'")
        return removed == 1

    def kept_apart(self, *, limit: int | None = 100) -> list[dict[str, Any]]:
        """The pairs kept apart, newest first, with who said so and both nodes' labels and names
        where they still exist (``None`` where not); at most ``limit`` (``None``: all)."""
        rows = self.db.query(
            "SELECT a.node_id, n.label AS node_label, n.name AS node_name, a.other_id, m.label AS other_label, "
            "m.name AS other_name, a.decided_by, a.created_at FROM identity_apart a "
            "LEFT JOIN nodes n ON n.id = a.node_id LEFT JOIN nodes m ON m.id = a.other_id "
            "ORDER BY a.created_at DESC, a.node_id, a.other_id LIMIT ?",
            (UNLIMITED if limit is None else limit,),
        )
        return [dict(r) for r in rows]

    def kept_apart_count(self) -> int:
        """How many pairs are kept apart."""
        return self.db.query("SELECT COUNT(*) FROM identity_apart")[0][0]

    def candidates(self, *, limit: int | None = 100) -> list[dict[str, Any]]:
        """Reported pairs whose nodes both exist and whose merge was never undone, best score first,
        with both nodes' labels and names; at most ``limit`` (``None``: all)."""
        rows = self.db.query(
            "SELECT c.node_id, n.label AS node_label, n.name AS node_name, c.candidate_id, "
            "m.label AS candidate_label, m.name AS candidate_name, c.rule, c.score, c.form, c.session_id "
            "FROM identity_candidates c JOIN nodes n ON n.id = c.node_id JOIN nodes m ON m.id = c.candidate_id "
            f"WHERE {_NOT_UNDONE} ORDER BY c.score DESC, c.node_id, c.candidate_id LIMIT ?",
            (UNLIMITED if limit is None else limit,),
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
        """Keep ``pairs`` for review, each once whichever way round it comes (a pair already kept,
        either way, keeps its direction and takes the newer rule and score). A pair whose nodes are
        not both in the graph is skipped: the record is advisory and must never fail the commit it
        is part of. Returns how many were kept."""
        kept = 0
        with self.db.transaction() as conn:
            for pair in pairs:
                cursor = conn.execute(
                    "INSERT INTO identity_candidates(node_id, candidate_id, rule, score, form, session_id) "
                    "SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM nodes WHERE id = ?) "
                    f"AND EXISTS (SELECT 1 FROM nodes WHERE id = ?) ON CONFLICT{CANDIDATE_PAIR_KEY} DO UPDATE SET "
                    "rule = excluded.rule, score = excluded.score, form = excluded.form, session_id = excluded.session_id",
                    (pair.node_id, pair.candidate_id, pair.rule, float(pair.score), pair.form, pair.session_id,
                     pair.node_id, pair.candidate_id),
                )
                kept += cursor.rowcount
        return kept

    def record_link(
        self, merged: Node, *, into_id: str, rule: str, score: float, evidence: Mapping[str, Any] | None = None,
        restore: Mapping[str, Any] | None = None,
    ) -> int:
        """The id of the active merge of ``merged`` into ``into_id`` — a new record, or the existing
        one (its score raised, ``restore`` extended). Rows written for ``merged`` on ``into_id`` must
        carry this id."""
        into_id = normalize_graph_node_id(into_id)
        record = dict(restore or {})
        record["node"] = {"id": merged.id, "label": merged.label, "name": merged.name}
        with self.db.transaction() as conn:
            active = conn.execute(
                "SELECT merge_id, restore FROM merges WHERE merged_id = ? AND into_id = ? AND undone_at IS NULL",
                (merged.id, into_id),
            ).fetchone()
            if active is not None:
                conn.execute(
                    "UPDATE merges SET restore = ?, score = CASE WHEN score >= ? THEN score ELSE ? END WHERE merge_id = ?",
                    (dumps(_extend(json.loads(active["restore"]), record)), score, score, active["merge_id"]),
                )
                return int(active["merge_id"])
            cursor = conn.execute(
                "INSERT INTO merges(merged_id, into_id, rule, score, evidence, restore, created_at) VALUES (?,?,?,?,?,?,?) "
                "RETURNING merge_id",
                (merged.id, into_id, rule, float(score), dumps(dict(evidence or {})), dumps(record), self.clock()),
            )
            return int(cursor.fetchone()[0])

    def merge_nodes(
        self, merged_id: str, into_id: str, *, rule: str = "manual", score: float = 1.0,
        evidence: Mapping[str, Any] | None = None, name_as_alias: bool = True, anchor_labels: frozenset[str] = frozenset(),
    ) -> int:
        """Fold the existing node ``merged_id`` into the existing node ``into_id`` (one transaction):
        M's points and claims move to I (its name becomes an alias of I — by a claim of its own
        unless ``name_as_alias`` is False: the extraction commit's folds, whose claims name it
        already), I's facts and name are recomputed from its claims, M's edges' points move to the
        matching edges of I (created when missing; an edge without points keeps the higher weight),
        and M is deleted. Returns the merge id. A node labelled one of ``anchor_labels`` (provenance
        anchors: turns, sessions, notes files) is never merged nor merged into (:class:`MergeError`)."""
        merged_id, into_id = normalize_graph_node_id(merged_id), normalize_graph_node_id(into_id)
        if merged_id == into_id:
            raise MergeError("a node cannot be merged into itself")
        with self.db.transaction() as conn:
            merged, into = self.graph.get_node(merged_id), self.graph.get_node(into_id)
            if merged is None or into is None:
                missing = merged_id if merged is None else into_id
                onward = self.records(merged_id=missing, active=True, limit=1)
                # A node merged away is gone by its id; say where it went, as `show` does.
                where = f" (it was merged into {onward[0].into_id}: rem-cycle unmerge {shlex.quote(missing)} brings it back)" if onward else ""
                raise MergeError(f"no node {missing}{where}")
            if anchor := next((n for n in (merged, into) if n.label in anchor_labels), None):
                raise MergeError(
                    f"{anchor.id} is a {anchor.label} node, a provenance anchor: only knowledge nodes are merged "
                    "(rem-cycle forget takes a session, turn or notes file out)"
                )
            edges = [e for e in self.graph.edges_of(merged_id) if e.relationship not in _DERIVED]
            # Edges with points come back through their rows; only those without are kept whole, and
            # the edges between the two nodes (they vanish with M, so their points need them back).
            kept = [
                e for e in edges
                if {e.source, e.target} == {merged_id, into_id} or not self.provenance.edge_has_points((e.source, e.target, e.relationship))
            ]
            restore: dict[str, Any] = {
                "edges": [_edge_dict(e) for e in kept], "created": [], "modified": [], "loop_points": [], "pointed": [], "justifications": [],
            }
            for edge in edges:
                moved = _redirect(edge, merged_id, into_id)
                if moved.source == moved.target:
                    continue
                prior = self.graph.get_edge(moved.source, moved.target, moved.relationship)
                restore["justifications"].append(self._unsourced(edge))
                if prior is None:
                    restore["created"].append([moved.source, moved.target, moved.relationship])
                else:
                    restore["modified"].append(_edge_dict(prior))
                    restore["justifications"].append(self._unsourced(prior))
                    if self.provenance.edge_has_points(_key(prior)):
                        restore["pointed"].append(list(_key(prior)))
            restore["prior_merges"] = [
                [r[0], r[1]] for r in conn.execute(
                    "SELECT DISTINCT extracted_for, merge_id FROM node_points WHERE node_id = ? AND merge_id IS NOT NULL", (merged_id,)
                )
            ]
            restore["loop_points"] = [
                dict(r) for r in conn.execute(
                    "SELECT * FROM edge_points WHERE (source = ? AND target = ?) OR (source = ? AND target = ?)",
                    (merged_id, into_id, into_id, merged_id),
                )
            ]
            merge_id = self.record_link(merged, into_id=into_id, rule=rule, score=score, evidence=evidence, restore=restore)
            self._ensure_claims([merged, into])
            anchors = self.provenance.move_node_rows(from_id=merged_id, to_id=into_id, new_merge_id=merge_id)
            if name_as_alias:
                self.provenance.add_claims([ClaimRow(into_id, f"merge:{merge_id}", merged_id, NodeFacts.of(aliases=[merged.name]), merge_id)])
            for edge in edges:
                moved = _redirect(edge, merged_id, into_id)
                if moved.source == moved.target:
                    continue
                prior = self.graph.get_edge(moved.source, moved.target, moved.relationship)
                self.graph.link_nodes([_fold_edge(prior, moved) if prior is not None else moved])
                key = (edge.source, edge.target, edge.relationship)
                new_key = (moved.source, moved.target, moved.relationship)
                self.provenance.rekey_edge_points(key, new_key, node_id=merged_id, new_merge_id=merge_id)
                places = self.provenance.edge_places(new_key)
                if places:
                    self.graph.link_nodes([Edge(*new_key, float(places), self.graph.get_edge(*new_key).properties)])
            self.graph.delete_node(merged_id)
            self._refacts(into_id)
            self._refresh_anchor_edges(into_id, anchors)
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
                # The node others were merged into is the one an operator sees (`show` redirects
                # there), so "undo a node's merges" is tried on it first: name the ones to unmerge.
                absorbed = [r.merged_id for r in self.records(into_id=node_id, active=True, limit=_NAMED + 1)]
                named = ", ".join(absorbed[:_NAMED]) + (", …" if len(absorbed) > _NAMED else "")
                hint = f" (merged into it, newest first: {named}; undo one with rem-cycle unmerge {shlex.quote(absorbed[0])})" if absorbed else ""
                raise MergeError(f"{node_id} has no active merge to undo{hint}")
            for row in rows:
                into = self.graph.get_node(row["into_id"])
                if into is None:
                    onward = self.records(merged_id=row["into_id"], active=True, limit=1)
                    hint = f" (it was merged into {onward[0].into_id}: unmerge {row['into_id']} first)" if onward else ""
                    raise MergeError(f"cannot unmerge {node_id}: {row['into_id']} no longer exists{hint}")
                undone = self._undo(int(row["merge_id"]), json.loads(row["restore"]), into)
                results.append({"merge_id": row["merge_id"], "into": into.id, **undone})
                conn.execute("UPDATE merges SET undone_at = ? WHERE merge_id = ?", (self.clock(), row["merge_id"]))
        return results

    def split(self, merged_id: str, *, rules: Iterable[str], evidence: Mapping[str, Any]) -> int:
        """Move ``merged_id`` (a name linked into another node by one of ``rules``) back out, as
        :meth:`unmerge` does — exactly the rows carrying its merges' ids — inside the caller's
        transaction, but without blocking the pair: each undone record's evidence gets ``split``
        (why), and identity resolution may link the two again. When the node it joined was folded
        on into a third (``M → I → J``), the folds after its own link are undone first and made
        again once it is out. Returns how many of its links were undone."""
        merged_id = normalize_graph_node_id(merged_id)
        wanted = set(rules)
        undone = 0
        with self.db.transaction() as conn:
            for first in self.records(merged_id=merged_id, active=True):
                if first.rule not in wanted:
                    continue
                chain = [first]
                while self.graph.get_node(chain[-1].into_id) is None:
                    onward = self.records(merged_id=chain[-1].into_id, active=True, limit=1)
                    if not onward:
                        break
                    chain.append(onward[0])
                if self.graph.get_node(chain[-1].into_id) is None:
                    continue
                for record in reversed(chain):
                    restore = json.loads(conn.execute("SELECT restore FROM merges WHERE merge_id = ?", (record.merge_id,)).fetchone()[0])
                    self._undo(record.merge_id, restore, self.graph.get_node(record.into_id))
                    why = {**record.evidence, "split": dict(evidence)}
                    conn.execute("UPDATE merges SET undone_at = ?, evidence = ? WHERE merge_id = ?", (self.clock(), dumps(why), record.merge_id))
                for record in chain[1:]:
                    # A fold after the split name's link: the folded node goes back where it was.
                    self.merge_nodes(record.merged_id, record.into_id, rule=record.rule, score=record.score,
                                     evidence={**record.evidence, "again_after_split": first.merge_id},
                                     name_as_alias="survivor" not in record.evidence)
                undone += 1
            if undone:
                # Names left a node inside a commit: every worker's identity index may still send
                # them there (under any spelling), so the split starts a new identity epoch, which
                # makes each index rebuild before its next resolution (pipelines/resolver.py).
                conn.execute("UPDATE rem_counters SET value = value + 1 WHERE name = 'identity_epoch'")
        return undone

    def _undo(self, merge_id: int, restore: Mapping[str, Any], into: Node) -> dict[str, int]:
        data = restore["node"]
        merged_id = data["id"]
        if self.graph.get_node(merged_id) is None:
            self.graph.upsert_node(Node(merged_id, data["label"], data["name"], {}))
        conn = self.db.conn
        conn.execute("DELETE FROM node_claims WHERE anchor = ? AND node_id = ?", (f"merge:{merge_id}", into.id))
        anchors = self.provenance.merged_anchors(into.id, merge_id)
        before = {a: {p.memory for p in self.provenance.node_anchor_points(into.id, a)} for a in anchors}
        self._release_node_rows(merge_id, restore, from_id=into.id, to_id=merged_id)
        saved = {(e["source"], e["target"], e["relationship"]): _edge(e) for e in restore.get("edges", ())}
        touched: set[tuple[str, str, str]] = set()
        # What the merged edges said before their points part, and what their points carried (the
        # rest is text no point carries, which the rebuilt edges may keep).
        said: dict[EdgeKey, set[str]] = {}
        carried: dict[EdgeKey, set[str]] = {}
        for key in [tuple(r) for r in conn.execute(
            "SELECT DISTINCT source, target, relationship FROM edge_points WHERE merge_id = ?", (merge_id,)
        ).fetchall()]:
            back = (merged_id if key[0] == into.id else key[0], merged_id if key[1] == into.id else key[1], key[2])
            for edge in (self.graph.get_edge(*key), self.graph.get_edge(*back)):
                if edge is not None:
                    text = justification_parts(edge.properties.get("justification"))
                    said[key], said[back] = said.get(key, set()) | text, said.get(back, set()) | text
            reasons = self.provenance.edge_reasons(key) | self.provenance.edge_reasons(back)
            carried[key], carried[back] = carried.get(key, set()) | reasons, carried.get(back, set()) | reasons
            if self.graph.get_edge(*back) is None:
                current = self.graph.get_edge(*key)
                template = saved.get(back) or Edge(*back, 1.0, current.properties if current else {})
                self.graph.link_nodes([Edge(*back, template.weight, template.properties)])
            conn.execute(
                "UPDATE edge_points SET source = ?, target = ?, merge_id = NULL WHERE merge_id = ? AND source = ? AND target = ? AND relationship = ?",
                (*back[:2], merge_id, *key),
            )
            touched.update((key, back))
        loops = restore.get("loop_points", ())
        for point in loops:
            key = (point["source"], point["target"], point["relationship"])
            if self.graph.get_edge(*key) is None:
                # A record written before loop edges were kept has only the points: weight and
                # properties are then rebuilt from them.
                self.graph.link_nodes([saved.get(key) or Edge(*key, 1.0, {})])
            touched.add(key)
        if loops:
            columns = [c for c in loops[0] if c != "rowid"]
            conn.executemany(
                f"INSERT INTO edge_points({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                [[p[c] for c in columns] for p in loops],
            )
        deleted = self._reweigh(sorted(touched), restore)
        self._rejustify(said, carried, restore, loops={(p["source"], p["target"], p["relationship"]) for p in loops})
        created = {tuple(k) for k in restore.get("created", ())}
        deleted += self.graph.delete_edges(
            k for k in created if self.graph.get_edge(*k) is not None and not self.provenance.edge_has_points(k)
        )
        pointed = {tuple(k) for k in restore.get("pointed", ())}
        restored = self.graph.link_nodes(
            [_edge(e) for e in restore.get("modified", ())
             if _key(e) not in pointed and not self.provenance.edge_has_points(_key(e))]
        ).linked
        # A record of the release before rows kept every edge with its points in ``provenance``:
        # those come back through their rows (or not at all, when their points were forgotten).
        kept_whole = {
            (e["source"], e["target"], e["relationship"]) for e in restore.get("edges", ()) if "provenance" not in e.get("properties", {})
        }
        pointless = [
            e for k, e in saved.items()
            if k in kept_whole and k not in touched and not self.provenance.edge_has_points(k) and self.graph.get_edge(*k) is None
        ]
        relinked = self.graph.link_nodes(pointless)
        self._refacts(merged_id)
        self._refacts(into.id)
        self._refresh_anchor_edges(merged_id, anchors)
        deleted += self._refresh_anchor_edges(into.id, anchors, before=before)
        return {"edges_deleted": deleted, "edges_restored": restored, "edges_relinked": relinked.linked + len(touched), "edges_culled": relinked.culled}

    # --- forgetting --------------------------------------------------------------------------
    def carried(self, node_ids: Iterable[str]) -> set[int]:
        """The active merges into ``node_ids`` (by the ``merges_into`` index) whose id some row
        carries (:meth:`carries`): what :meth:`forget_traces` looks at again after a forget."""
        found: set[int] = set()
        for batch, marks in in_batches(sorted(set(node_ids))):
            for row in self.db.query(f"SELECT merge_id FROM merges WHERE into_id IN ({marks}) AND undone_at IS NULL", batch):
                if self.carries(int(row[0])):
                    found.add(int(row[0]))
        return found

    def forget_traces(
        self, carried_before: Collection[int], *, removed: Iterable[str], touched: Iterable[str], near: Collection[int] = (),
        session: str | None = None, anchor: str | None = "", memory_id: str | None = None,
    ) -> tuple[dict[str, int], set[str]]:
        """After a forget took an anchor's (``anchor``; ``session``, its session id, when it was a
        session's) or one turn's (``memory_id``) rows out, inside its transaction, take what the
        merge records held of them (names, quotes) out too, touching only the records of the
        nodes it ``touched`` (the ``merges_merged``/``merges_into`` indexes) and the records
        ``near`` the nodes it could remove (:meth:`records_near`, read before they went: a record
        of a node the forget did not touch may have saved an edge to one it removed):

        - an active merge that carried rows before (``carried_before``, :meth:`carried`) and
          carries none now merged what only the forgotten source said: its alias claim goes, the
          node it went into is recombined, and the record goes (nothing is left to undo);
        - a record into a node the forget ``removed``, or of one that no row carries the record's
          id for (an undone one too: the pair it kept apart no longer exists), goes, and so does a
          pair kept apart (:meth:`keep_apart`) with a removed node;
        - the others keep their records, without the forgotten source's points in what an
          unmerge would put back (``restore.loop_points``), nor the edges it saved to or from a
          removed node (an unmerge could not link them again anyway) and, for a session, without the
          evidence it gave (the name form it matched, a short name's rivals): ``{"forgotten":
          "session"}`` stands in (a split's marker stays).

        Returns ``{"merges_dropped": …, "merges_rewritten": …}`` and the merged node ids of the
        records dropped (a stored community may still list one)."""
        removed, touched = set(removed), set(touched) | set(removed)
        dropped: set[int] = set()
        merged_ids: set[str] = set()
        emptied = [m for m in sorted(carried_before) if not self.carries(m)]
        for merge_id in emptied:
            for merged_id, into_id in self.db.query("SELECT merged_id, into_id FROM merges WHERE merge_id = ?", (merge_id,)):
                self.db.conn.execute("DELETE FROM node_claims WHERE anchor = ? AND node_id = ?", (f"merge:{merge_id}", into_id))
                self._refacts(into_id)
                dropped.add(merge_id)
                merged_ids.add(merged_id)
        rows: dict[int, Any] = {}
        for batch, marks in in_batches(sorted(touched), lists=2):
            for row in self.db.query(
                f"SELECT merge_id, merged_id, into_id, evidence, restore FROM merges WHERE merged_id IN ({marks}) "
                f"UNION SELECT merge_id, merged_id, into_id, evidence, restore FROM merges WHERE into_id IN ({marks})", batch + batch,
            ):
                rows[int(row["merge_id"])] = row
        for batch, marks in in_batches(sorted(set(near) - set(rows))):
            for row in self.db.query(f"SELECT merge_id, merged_id, into_id, evidence, restore FROM merges WHERE merge_id IN ({marks})", batch):
                rows[int(row["merge_id"])] = row
        rewritten = 0
        for merge_id, row in sorted(rows.items()):
            if merge_id in dropped or row["into_id"] in removed or (row["merged_id"] in removed and not self.carries(merge_id)):
                dropped.add(merge_id)
                merged_ids.add(row["merged_id"])
                continue
            evidence, restore = json.loads(row["evidence"]), json.loads(row["restore"])
            new_evidence = _evidence_without(evidence, session) if session is not None else evidence
            new_restore = _restore_without(restore, removed, anchor=anchor, memory_id=memory_id)
            if new_evidence != evidence or new_restore != restore:
                self.db.conn.execute("UPDATE merges SET evidence = ?, restore = ? WHERE merge_id = ?",
                                     (dumps(new_evidence), dumps(new_restore), merge_id))
                rewritten += 1
        for batch, marks in in_batches(sorted(dropped)):
            self.db.conn.execute(f"DELETE FROM merges WHERE merge_id IN ({marks})", batch)
        # A pair kept apart (keep_apart) with a node the forget removed: it names what was forgotten.
        for batch, marks in in_batches(sorted(removed), lists=2):
            self.db.conn.execute(f"DELETE FROM identity_apart WHERE node_id IN ({marks}) OR other_id IN ({marks})", batch + batch)
        return {"merges_dropped": len(dropped), "merges_rewritten": rewritten}, merged_ids

    def carries(self, merge_id: int) -> bool:
        """Whether a row carries ``merge_id`` (a point, or a claim but a hand merge's own alias
        claim): one probe of each table's ``*_merge`` index, whatever the merge moved."""
        return bool(self.db.query(
            "SELECT EXISTS (SELECT 1 FROM node_points WHERE merge_id = ?) OR EXISTS (SELECT 1 FROM edge_points WHERE merge_id = ?) "
            "OR EXISTS (SELECT 1 FROM node_claims WHERE merge_id = ? AND anchor != ?)",
            (merge_id, merge_id, merge_id, f"merge:{merge_id}"),
        )[0][0])

    def records_near(self, node_ids: Iterable[str]) -> set[int]:
        """The merge records that may hold an edge of ``node_ids`` in what they saved: those of the
        nodes and of their neighbours in the graph (a record saves edges of its own two nodes), and,
        following each record's merged node, the records into it (a chain ``M → I → J`` left
        ``I``'s edges on ``J``). Read by the ``merges_merged``/``merges_into`` indexes and the
        edges' primary key and ``edges_target``: what it costs is the nodes' edges and the records
        of their neighbours, not the graph's history. Call before the nodes' edges go."""
        ids = {normalize_graph_node_id(i) for i in node_ids}
        for batch, marks in in_batches(sorted(ids), lists=2):
            ids.update(r[0] for r in self.db.query(
                f"SELECT target FROM edges WHERE source IN ({marks}) UNION SELECT source FROM edges WHERE target IN ({marks})", batch + batch,
            ))
        found: set[int] = set()
        seen: set[str] = set()
        frontier = ids
        while frontier:
            seen |= frontier
            merged: set[str] = set()
            for batch, marks in in_batches(sorted(frontier), lists=2):
                for row in self.db.query(
                    f"SELECT merge_id, merged_id FROM merges WHERE merged_id IN ({marks}) "
                    f"UNION SELECT merge_id, merged_id FROM merges WHERE into_id IN ({marks})", batch + batch,
                ):
                    found.add(int(row[0]))
                    merged.add(row[1])
            frontier = merged - seen
        return found

    def drop_saved_edges(self, near: Collection[int], removed: Collection[str]) -> int:
        """Take the edges to or from a ``removed`` node out of what the records ``near`` them saved
        (:meth:`records_near`, read before the nodes went), inside the transaction that removed
        them: an unmerge could not link such an edge again, and a later forget of the source that
        named the node would find no index leading to the record. Returns the records rewritten."""
        gone, rewritten = set(removed), 0
        for batch, marks in in_batches(sorted(near)):
            for row in self.db.query(f"SELECT merge_id, restore FROM merges WHERE merge_id IN ({marks})", batch):
                restore = json.loads(row["restore"])
                kept = _restore_without(restore, gone, anchor=None)
                if kept != restore:
                    self.db.conn.execute("UPDATE merges SET restore = ? WHERE merge_id = ?", (dumps(kept), row["merge_id"]))
                    rewritten += 1
        return rewritten

    def rekey_unsupported(self, node_ids: Iterable[str]) -> dict[str, str]:
        """After a forget took its rows out (inside its transaction): each node of ``node_ids``
        that exists and has rows, none of them extracted for its id any more (``extracted_for`` of
        its claims and points: the id its source's own name made), takes the least id its rows
        were extracted for — the survivor rule of a commit (``pipelines.identity.survivors``)
        among the names left, less those recorded as merged into another node (the first links of
        a chain that ends in it) — or, when another node has that id, the id with ``~2``, ``~3``… (a
        node an operator kept apart is not joined behind their back). A merge of the node whose
        merged node's id it takes is dissolved: the node is that node now, so its rows lose the
        merge's mark (taking back an earlier merge's, as an unmerge does), and its alias claim and
        record go. The id is then rewritten wherever it is stored (:meth:`_rekey`). A node whose
        id some row still gives keeps it, and so does one whose id is already the one it would
        take (a suffixed id: no row is ever extracted for it). Returns ``{old id: new id}``."""
        renamed: dict[str, str] = {}
        for node_id in self._unsupported(node_ids):
            # Each id its rows were extracted for (it has rows: _unsupported), and whether that name
            # is recorded as merged into another node (the first link of a chain M → I → node): the
            # node is I, and taking M's id would make it the merged node of its own chain.
            given = {r[0]: bool(r[1]) for r in self.db.query(
                "SELECT f.id, EXISTS (SELECT 1 FROM merges m WHERE m.merged_id = f.id AND m.into_id != ? AND m.undone_at IS NULL) "
                "FROM (SELECT extracted_for AS id FROM node_claims WHERE node_id = ? "
                "UNION SELECT extracted_for FROM node_points WHERE node_id = ?) AS f",
                (node_id, node_id, node_id),
            )}
            wanted = min([name for name, merged_away in given.items() if not merged_away] or given)
            new_id = self._free_id(wanted, holder=node_id)
            if new_id == node_id:
                continue
            for row in self.db.query(
                "SELECT merge_id, restore FROM merges WHERE merged_id = ? AND into_id = ? AND undone_at IS NULL", (wanted, node_id),
            ):
                self._dissolve(int(row["merge_id"]), json.loads(row["restore"]), node_id)
            self._rekey(node_id, new_id)
            self._refacts(new_id)
            renamed[node_id] = new_id
        return renamed

    # --- helpers ---------------------------------------------------------------------------
    def _unsupported(self, node_ids: Iterable[str]) -> list[str]:
        """The nodes of ``node_ids`` that exist and have rows, none extracted for their id: one
        statement per batch, each node's probes (``EXISTS`` on ``node_claims_owner`` and
        ``node_points_owner``) stopping at the first row that answers."""
        found: list[str] = []
        for batch, marks in in_batches(sorted(set(node_ids))):
            found.extend(r[0] for r in self.db.query(
                f"SELECT n.id FROM nodes n WHERE n.id IN ({marks}) "
                "AND NOT EXISTS (SELECT 1 FROM node_claims c WHERE c.node_id = n.id AND c.extracted_for = n.id) "
                "AND NOT EXISTS (SELECT 1 FROM node_points p WHERE p.node_id = n.id AND p.extracted_for = n.id) "
                "AND (EXISTS (SELECT 1 FROM node_claims c WHERE c.node_id = n.id) OR EXISTS (SELECT 1 FROM node_points p WHERE p.node_id = n.id)) "
                "ORDER BY n.id", batch,
            ))
        return found

    def _free_id(self, node_id: str, *, holder: str) -> str:
        """``node_id``, or, when a node other than ``holder`` has it, the first of ``node_id~2``,
        ``~3``… that no node but ``holder`` has. ``holder`` keeps any of them it already has: a
        lower one freed since (the node that had it removed) is no reason to rename it again."""
        candidate, n = node_id, 1
        while candidate != holder and self.graph.get_node(candidate) is not None:
            n += 1
            candidate = _suffixed(node_id, n)
        _, tilde, number = holder.rpartition("~")
        if tilde and number.isascii() and number.isdigit() and int(number) >= 2 and _suffixed(node_id, int(number)) == holder:
            return holder
        return candidate

    def _release_node_rows(self, merge_id: int, restore: Mapping[str, Any], *, from_id: str, to_id: str) -> None:
        """The points and claims ``merge_id`` moved onto ``from_id`` to ``to_id``, unmarked, each
        taking back the mark of the merge that had moved it onto the merged node before
        (``restore.prior_merges``)."""
        for table in ("node_points", "node_claims"):
            self.db.conn.execute(f"UPDATE {table} SET node_id = ?, merge_id = NULL WHERE merge_id = ? AND node_id = ?", (to_id, merge_id, from_id))
            for extracted_for, prior in restore.get("prior_merges", ()):
                self.db.conn.execute(f"UPDATE {table} SET merge_id = ? WHERE node_id = ? AND extracted_for = ? AND merge_id IS NULL",
                                     (prior, to_id, extracted_for))

    def _dissolve(self, merge_id: int, restore: Mapping[str, Any], node_id: str) -> None:
        """Merge ``merge_id`` into ``node_id`` is no merge any more (the node is its merged node):
        the rows it moved stay, unmarked; its alias claim and record go."""
        conn = self.db.conn
        conn.execute("DELETE FROM node_claims WHERE anchor = ? AND node_id = ?", (f"merge:{merge_id}", node_id))
        self._release_node_rows(merge_id, restore, from_id=node_id, to_id=node_id)
        conn.execute("UPDATE edge_points SET merge_id = NULL WHERE merge_id = ?", (merge_id,))
        conn.execute("DELETE FROM merges WHERE merge_id = ?", (merge_id,))

    def _rekey(self, old_id: str, new_id: str) -> None:
        """Node ``old_id`` becomes ``new_id`` (no node has it) everywhere the id is stored: the
        node, its edges (copied under the new key, their points moved onto them, the old ones
        deleted with the old node), points, claims, aliases, identity candidates, the merge
        records of it and near it (:meth:`records_near`: columns, saved edges, evidence). The
        recall index follows through its triggers."""
        conn = self.db.conn
        near = self.records_near([old_id])
        conn.execute("INSERT INTO nodes(id, label, name, properties, created_at, updated_at) "
                     "SELECT ?, label, name, properties, created_at, updated_at FROM nodes WHERE id = ?", (new_id, old_id))
        swap = "CASE WHEN {0} = ? THEN ? ELSE {0} END"
        conn.execute(
            f"INSERT INTO edges(source, target, relationship, weight, properties, created_at, updated_at) "
            f"SELECT {swap.format('source')}, {swap.format('target')}, relationship, weight, properties, created_at, updated_at "
            "FROM edges WHERE source = ? OR target = ?", (old_id, new_id, old_id, new_id, old_id, old_id),
        )
        for end in ("source", "target"):
            conn.execute(
                f"UPDATE edge_points SET source = {swap.format('source')}, target = {swap.format('target')}, "
                f"extracted_source = {swap.format('extracted_source')}, extracted_target = {swap.format('extracted_target')} "
                f"WHERE {end} = ?", (old_id, new_id) * 4 + (old_id,),
            )
        for table, column in (("node_points", "node_id"), ("node_claims", "node_id"), ("node_aliases", "node_id"),
                              ("identity_candidates", "node_id"), ("identity_candidates", "candidate_id")):
            conn.execute(f"UPDATE {table} SET {column} = ? WHERE {column} = ?", (new_id, old_id))
        for batch, marks in in_batches(sorted(near)):
            for row in self.db.query(f"SELECT merge_id, merged_id, into_id, evidence, restore FROM merges WHERE merge_id IN ({marks})", batch):
                conn.execute(
                    "UPDATE merges SET merged_id = ?, into_id = ?, evidence = ?, restore = ? WHERE merge_id = ?",
                    (*(new_id if row[c] == old_id else row[c] for c in ("merged_id", "into_id")),
                     dumps(_renamed(json.loads(row["evidence"]), old_id, new_id)),
                     dumps(_renamed(json.loads(row["restore"]), old_id, new_id)), row["merge_id"]),
                )
        # A pair kept apart (an undone merge) of the node and the one it now is, is no pair.
        conn.execute("DELETE FROM merges WHERE merged_id = ? AND into_id = ?", (new_id, new_id))
        self.graph.delete_node(old_id)

    def _ensure_claims(self, nodes: Sequence[Node]) -> None:
        """A node with no claim (written by hand, or before claims existed) gets its first (:func:`store.provenance.first_claim`)."""
        claimed = self.provenance.with_claims(n.id for n in nodes)
        self.provenance.add_claims(first_claim(n) for n in nodes if n.id not in claimed)

    def _refacts(self, node_id: str) -> None:
        """The node's facts and name recomputed from its claims."""
        node = self.graph.get_node(node_id)
        if node is not None:
            claims = self.provenance.claims(node_id)
            name = name_from_claims(node.id, claims, current=node.name)
            self.graph.upsert_node(Node(node.id, node.label, name, with_facts(node.properties, facts_from_claims(claims))))

    def _reweigh(self, keys: Iterable[tuple[str, str, str]], restore: Mapping[str, Any]) -> int:
        """Weights of edges whose points moved: from their places; an edge left without points
        goes back to its state before the merge (``modified``) or, when the merge made it, goes."""
        # An edge whose points the merge found is no hand-written edge: left without points since
        # (forgotten, re-extracted away), it goes, never back to its old state and text.
        pointed = {tuple(k) for k in restore.get("pointed", ())}
        prior = {_key(e): _edge(e) for e in restore.get("modified", ()) if _key(e) not in pointed}
        deleted = 0
        for key in keys:
            edge = self.graph.get_edge(*key)
            if edge is None:
                continue
            places = self.provenance.edge_places(key)
            if places:
                self.graph.link_nodes([Edge(*key, float(places), edge.properties)])
            elif key in prior:
                self.graph.link_nodes([prior[key]])
            else:
                deleted += self.graph.delete_edges([key])
        return deleted

    def _unsourced(self, edge: Edge) -> list[Any]:
        """``[source, target, relationship, parts]``: the parts of ``edge``'s justification that no
        point of it carries (written before schema 15, or by a lazy edge's producer) — what an
        unmerge gives back to this edge alone, if the merged edge still says it."""
        key = _key(edge)
        known = self.provenance.edge_reasons(key)
        return [*key, sorted(justification_parts(edge.properties.get("justification")) - known)]

    def _rejustify(
        self, said: Mapping[EdgeKey, set[str]], carried: Mapping[EdgeKey, set[str]], restore: Mapping[str, Any], *, loops: set[EdgeKey],
    ) -> None:
        """After an undo, each edge whose points moved (``said``: the merged edge's text before;
        ``carried``: what its points carried) says what its own points say, and of the text no
        point carries only what it said before the merge and the merged edge still says (a forget
        since took a source's text off the merged edge: it stays off). A record that did not keep
        that text (a link made by a commit, a merge of an earlier release) gives it to both edges."""
        unsourced: dict[EdgeKey, set[str]] | None = None
        if "justifications" in restore:
            unsourced = {}
            for *key, parts in restore["justifications"]:
                unsourced.setdefault((key[0], key[1], key[2]), set()).update(parts)
        for key in sorted(set(said) - loops):
            edge = self.graph.get_edge(*key)
            if edge is None or not self.provenance.edge_has_points(key):
                continue
            known = self.provenance.edge_reasons(key)
            kept = said[key] & unsourced.get(key, set()) if unsourced is not None else said[key] - carried[key]
            self.graph.link_nodes([Edge(*key, edge.weight, with_justification(edge.properties, known | kept))])

    def _refresh_anchor_edges(self, node_id: str, anchors: Iterable[str], *, before: Mapping[str, set[str]] | None = None) -> int:
        """Rebuild ``node_id``'s provenance edges for ``anchors`` from its points; with ``before``
        (the turns it had per anchor), delete those it no longer has. Returns edges deleted."""
        deleted = 0
        for anchor in sorted(anchors):
            points = self.provenance.node_anchor_points(node_id, anchor)
            self.graph.link_nodes(anchor_edges(node_id, anchor, points))
            if before is not None:
                kept = {p.memory for p in points}
                stale = [(node_id, m, MENTIONED_IN) for m in sorted(before.get(anchor, set()) - kept) if m]
                if not points:
                    stale.append((node_id, anchor, DISCUSSED_IN))
                deleted += self.graph.delete_edges(stale)
        return deleted


_DERIVED = frozenset({MENTIONED_IN, DISCUSSED_IN})


def _key(edge: Edge | Mapping[str, Any]) -> EdgeKey:
    if isinstance(edge, Edge):
        return edge.source, edge.target, edge.relationship
    return edge["source"], edge["target"], edge["relationship"]


def _fold_edge(prior: Edge, moved: Edge) -> Edge:
    """An edge of M landing on an edge I already has: I's properties win, but for the justification,
    which says what both said (every source's text); the higher weight (points, when there are any,
    set the weight afterwards)."""
    parts = justification_parts(prior.properties.get("justification")) | justification_parts(moved.properties.get("justification"))
    return Edge(prior.source, prior.target, prior.relationship, max(prior.weight, moved.weight),
                with_justification({**moved.properties, **prior.properties}, parts))


# What a session gave a merge record's evidence: its id, the name form it matched, a short name's
# rival (``pipelines.extract.commit``); node ids and the rule's own words stay.
_SESSION_EVIDENCE = ("session", "form", "short", "ambiguous_with")


def _evidence_without(evidence: Mapping[str, Any], session: str) -> dict[str, Any]:
    """``evidence`` without what the forgotten ``session`` gave it (a split's, nested, too)."""
    out = dict(evidence)
    if isinstance(out.get("split"), Mapping) and out["split"].get("session") == session:
        out["split"] = {"forgotten": "session"}  # still a split: the pair stays unblocked
    if out.get("session") == session:
        out = {k: v for k, v in out.items() if k not in _SESSION_EVIDENCE} | {"forgotten": "session"}
    return out


def _restore_without(restore: Mapping[str, Any], removed: set[str], *, anchor: str | None, memory_id: str | None = None) -> dict[str, Any]:
    """A merge's ``restore`` record without the points of the forgotten ``anchor`` (or of its turn
    ``memory_id``; ``None``: no source was forgotten) and without every saved edge that touches a
    ``removed`` node."""
    def kept(key: Sequence[Any]) -> bool:
        return key[0] not in removed and key[1] not in removed

    out = dict(restore)
    for field in ("edges", "modified"):
        if field in out:
            out[field] = [e for e in out[field] if kept((e["source"], e["target"]))]
    for field in ("created", "pointed", "justifications"):
        if field in out:
            out[field] = [k for k in out[field] if kept(k)]
    if "loop_points" in out:
        out["loop_points"] = [
            p for p in out["loop_points"]
            if not (anchor is not None and p.get("anchor") == anchor and (memory_id is None or p.get("memory_id") == memory_id))
            and kept((p["source"], p["target"]))
        ]
    return out


def _renamed(value: Any, old_id: str, new_id: str) -> Any:
    """A merge record's JSON (``evidence``, ``restore``) with every string that is ``old_id`` as
    ``new_id`` (ids are whole strings there; names never carry the ``TYPE:`` prefix of an id)."""
    if value == old_id:
        return new_id
    if isinstance(value, list):
        return [_renamed(v, old_id, new_id) for v in value]
    if isinstance(value, dict):
        return {k: _renamed(v, old_id, new_id) for k, v in value.items()}
    return value


def _extend(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """One restore record for two links of the same pair: an edge the first link created stays
    "created", one that existed before it keeps its oldest state; lists are unioned."""
    known = {tuple(k) for k in old.get("created", ())} | {(e["source"], e["target"], e["relationship"]) for e in old.get("modified", ())}
    return {
        **new,
        **{k: v for k, v in old.items() if k not in ("edges", "created", "modified", "loop_points", "prior_merges", "pointed", "justifications")},
        "edges": _union(old.get("edges", ()), new.get("edges", ())),
        "created": list(old.get("created", ())) + [k for k in new.get("created", ()) if tuple(k) not in known],
        "modified": list(old.get("modified", ())) + [e for e in new.get("modified", ()) if (e["source"], e["target"], e["relationship"]) not in known],
        "loop_points": _union(old.get("loop_points", ()), new.get("loop_points", ())),
        "prior_merges": _union(old.get("prior_merges", ()), new.get("prior_merges", ())),
        # Whether an edge had points goes with its kept state: the oldest.
        "pointed": list(old.get("pointed", ())) + [k for k in new.get("pointed", ()) if tuple(k) not in known],
        **({"justifications": _union(old.get("justifications", ()), new.get("justifications", ()))}
           if "justifications" in old or "justifications" in new else {}),
    }


def _suffixed(node_id: str, n: int) -> str:
    """``node_id`` with the suffix ``~n`` (cut to fit :data:`MAX_NODE_ID_LENGTH`). Pure."""
    suffix = f"~{n}"
    return node_id[: MAX_NODE_ID_LENGTH - len(suffix)].rstrip() + suffix
