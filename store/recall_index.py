"""Recall's read side and turn-text writes over the FTS5 tables of schema version 6.

``recall_turns`` (+ ``recall_turns_fts``) holds each turn's text, written by ingest in the session's
transaction (:meth:`RecallIndex.index_memory_nodes`) and by ``rem-cycle reindex``;
``recall_sessions`` and ``recall_node_docs`` are kept by triggers (see the migration in
``store/db.py``). Every read takes a :class:`Scope`: which sessions the caller may see (``None`` =
all) and the time by which something must have been known (``as_of``). Visibility is decided here,
in SQL, so that nothing out of scope ever reaches the caller — not even as a ranking candidate.

FTS match expressions come from the caller already built out of quoted terms
(``pipelines.recall.match_expression``); this module never builds one from raw user text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from store.db import Database
from store.facts import longer_text_order
from store.graph import Node, chunked
from store.textfold import index_words, search_text

_IN_CHUNK = 400
# Matching a word within a scope of at most this many turns may go through the scope's own turns
# (see RecallIndex._through_scope); a larger scope is matched through the index's lists of rows.
SCOPE_TURNS_PROBE = 2_000
# What SQLite's scope's way pays (store.dialect.Dialect.fts_scope_source), in rows of the whole
# index's list of a word walked and checked against the scope (0.25-0.6 µs a row): for each run of
# the scope's turns with consecutive ids, one seek of the word's list, 40-180 µs (160 to 570 rows
# over scopes of 40 to 2,000 turns scattered among 32,000 others' on this machine, each turn then
# a run of its own: bench/bench_search_fold.py scope, spread); and for each turn, reading its id
# and numbering the runs, 1.3-2.2 µs (2,000 turns in one run against 300-4,000 rows: lexcount).
# The rows of a run walked are some of those the index's way walks. PostgreSQL: 0, the scope's
# turns always (a few µs a turn); counting a word's rows to decide would cost as much as matching
# them, as its GIN index hands them all over at once, however few are asked for.
SEEK_COST = {"sqlite": 300, "postgresql": 0}
TURN_COST = {"sqlite": 4, "postgresql": 0}
# Choices one RecallIndex keeps (a recall makes one or two per query word).
_WAYS_KEPT = 64
# Node name, aliases, description: a name hit says more than a word in a description.
_NODE_COLUMN_WEIGHTS = (10.0, 5.0, 1.0)


@dataclass(frozen=True, slots=True)
class Scope:
    """What a caller may see: ``sessions`` (``session:<id>`` anchors; ``None`` = every session and
    note) and ``as_of`` (ISO 8601 UTC, ``...Z``; ``None`` = now)."""

    sessions: frozenset[str] | None = None
    as_of: str | None = None

    def sessions_json(self) -> str | None:
        return None if self.sessions is None else json.dumps(sorted(self.sessions))


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One indexed turn."""

    memory_id: str
    session_id: str
    turn_index: int | None
    role: str | None
    created_at: str | None
    text: str
    user_id: str | None = None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    title: str
    summary: str
    created_at: str | None
    user_id: str | None


@dataclass(frozen=True, slots=True)
class FactEdge:
    """A semantic edge of a fact, as strong as its distinct visible places, with one quote."""

    source: str
    target: str
    relationship: str
    other_id: str
    other_name: str
    places: int
    evidence: str
    memory_id: str
    anchor: str = ""  # the session (``session:<id>``) or notes file (``note:<id>``) the quote came from


@dataclass(frozen=True, slots=True)
class FactRecord:
    node_id: str
    label: str
    name: str
    description: str
    evidence: str
    memory_id: str
    edges: list[FactEdge] = field(default_factory=list)
    anchor: str = ""  # the session or notes file of ``evidence`` (a notes file has no ``memory_id``)


# Visibility fragments; every one takes the parameters (sessions_json, sessions_json) or (as_of, as_of).
_SESSION_VISIBLE = "(? IS NULL OR {col} IN (SELECT value FROM json_each(?)))"
_KNOWN_BY = "(? IS NULL OR ({col} IS NOT NULL AND {col} <= ?))"


def _visible(col: str, scope: Scope) -> tuple[str, tuple[Any, ...]]:
    sessions = scope.sessions_json()
    return _SESSION_VISIBLE.format(col=col), (sessions, sessions)


def _known(col: str, scope: Scope) -> tuple[str, tuple[Any, ...]]:
    return _KNOWN_BY.format(col=col), (scope.as_of, scope.as_of)


def _points_seen(table: str, scope: Scope) -> tuple[str, tuple[Any, ...]]:
    """The points of ``table`` (``node_points`` or its alias) ``scope`` shows, as a condition an
    index can seek: its sessions as a plain ``IN`` (``_SESSION_VISIBLE``'s ``? IS NULL OR`` keeps
    both planners from seeking it) and its ``as_of`` as a plain bound, each left out when unset."""
    parts: list[str] = []
    params: list[Any] = []
    if scope.sessions is not None:
        parts.append(f"{table}.anchor IN (SELECT value FROM json_each(?))")
        params.append(scope.sessions_json())
    if scope.as_of is not None:
        # Beside sessions, the bound is an expression (NULL stays unknown, so not known by then):
        # a planner then seeks the scope's sessions, never every user's points before the date.
        known = f"({table}.observed_at || '')" if parts else f"{table}.observed_at"
        parts.append(f"{known} IS NOT NULL AND {known} <= ?")
        params.append(scope.as_of)
    return " AND ".join(parts) or "1 = 1", tuple(params)


# A session's summary is written after turns of it and speaks of them, and when it was written is
# kept nowhere: the summary row's createdAt (the SESSION node's, ``recall_sessions.created_at``)
# is the session's start, and a node's ``updated_at`` is when the graph last wrote it (a back-fill
# writes every session today). So it is known at ``as_of`` once every turn of its session was
# (each has a ``createdAt`` by then): it then says nothing not said by then. ``{col}`` is the session id.
_SUMMARY_KNOWN = ("(? IS NULL OR NOT EXISTS (SELECT 1 FROM recall_turns AS later WHERE later.session_id = {col} "
                  "AND (later.created_at IS NULL OR later.created_at > ?)))")


def _summary_known(col: str, scope: Scope) -> tuple[str, tuple[Any, ...]]:
    return _SUMMARY_KNOWN.format(col=col), (scope.as_of, scope.as_of)


_ANCHOR_AND_MEMORY = "anchor || ' ' || memory_id"


def term_match(term: str) -> str:
    """``term`` as an FTS match expression: its words as the indexes hold them
    (:func:`store.textfold.index_words`: folded, a Chinese or Japanese character a word of its own),
    each a quoted string of one word (never syntax), all of them required in any order — not a
    phrase: the turns' FTS5 table kept no positions before schema 21, where a phrase was an error,
    and a query's characters are matched as overlapping pairs, not in sequence; PostgreSQL reads
    the same expression the same way."""
    return " ".join('"' + word.replace('"', '""') + '"' for word in index_words(term))


class RecallIndex:
    """The recall tables of one graph database (reads need no transaction; writes join the caller's)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # _through_scope's choices, by (match, scope): one recall asks the same word's way of up
        # to four reads. Kept while this object lives (a recall, a unit of work): a choice grown
        # stale by writes only costs time, as both ways give the same answer.
        self._ways: dict[tuple[str, Scope], bool] = {}
        # The scope's turns (up to the probe) and their runs, by scope: the same for every word.
        # Kept as the choices are.
        self._turns: dict[Scope, int] = {}
        self._runs: dict[Scope, int] = {}

    # --- writes --------------------------------------------------------------------------
    def index_turns(self, turns: Iterable[TurnRecord]) -> int:
        """Insert or refresh turns (keyed by ``memory_id``) and their FTS rows; returns how many
        turns were written (an unchanged turn is not)."""
        rows = {t.memory_id: (t.memory_id, t.session_id, t.user_id, t.turn_index, t.role, t.created_at, t.text) for t in turns}
        if not rows:
            return 0
        ids = json.dumps(list(rows))
        with self.db.transaction() as conn:
            existing = conn.execute(
                "SELECT id, memory_id, session_id, user_id, turn_index, role, created_at, text FROM recall_turns "
                "WHERE memory_id IN (SELECT value FROM json_each(?))",
                (ids,),
            ).fetchall()
            known = {r["memory_id"]: r for r in existing}
            unchanged = {m for m, r in known.items() if tuple(r)[1:] == rows[m]}
            retext = [m for m, r in known.items() if r["text"] != rows[m][-1]]
            fts = self.db.dialect.fts_rows_written
            # An external-content FTS row is removed with the text it was indexed with: the folded
            # text (store.textfold), which the index holds where the table holds the turn's own.
            if fts:
                conn.executemany(
                    "INSERT INTO recall_turns_fts(recall_turns_fts, rowid, text) VALUES ('delete', ?, ?)",
                    [(known[m]["id"], search_text(known[m]["text"])) for m in retext],
                )
            fresh = [row for memory_id, row in rows.items() if memory_id not in unchanged]
            conn.executemany(
                "INSERT INTO recall_turns(memory_id, session_id, user_id, turn_index, role, created_at, text) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT(memory_id) DO UPDATE SET session_id = excluded.session_id, "
                "user_id = excluded.user_id, turn_index = excluded.turn_index, role = excluded.role, "
                "created_at = excluded.created_at, text = excluded.text",
                fresh,
            )
            if fts:
                conn.execute(
                    "INSERT INTO recall_turns_fts(rowid, text) SELECT id, rem_search_text(text) FROM recall_turns "
                    "WHERE memory_id IN (SELECT value FROM json_each(?))",
                    (json.dumps([m for m in rows if m not in known] + retext),),
                )
            conn.executemany(
                "INSERT INTO recall_session_users(session_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                sorted({(row[1], row[2]) for row in fresh if row[2] is not None}),
            )
        return len(fresh)

    def index_memory_nodes(self, nodes: Iterable[Node], texts: Mapping[str, str]) -> int:
        """Index the MEMORY ``nodes`` ingest just wrote, with their text (``texts`` by node id); a
        node without text is skipped."""
        return self.index_turns(
            memory_turn(node, texts[node.id]) for node in nodes if node.label == "MEMORY" and node.id in texts
        )

    def indexed_memory_ids(self, memory_ids: Sequence[str]) -> set[str]:
        """The subset of ``memory_ids`` whose text is indexed."""
        found: set[str] = set()
        for part in chunked(list(memory_ids), _IN_CHUNK):
            marks = ",".join("?" * len(part))
            found.update(r[0] for r in self.db.query(f"SELECT memory_id FROM recall_turns WHERE memory_id IN ({marks})", part))
        return found

    # --- scope ---------------------------------------------------------------------------
    def sessions_of_user(self, user: str) -> frozenset[str]:
        """The sessions ``user`` owns: those whose session row says so, and — for a session whose row
        names nobody — those whose turns say so."""
        rows = self.db.query(
            "SELECT session_id FROM recall_sessions WHERE user_id = ? "
            "UNION SELECT u.session_id FROM recall_session_users AS u "
            "LEFT JOIN recall_sessions AS s ON s.session_id = u.session_id "
            "WHERE u.user_id = ? AND s.user_id IS NULL",
            (user, user),
        )
        return frozenset(r[0] for r in rows)

    def term_counts(self, terms: Sequence[str], *, cap: int, scope: Scope = Scope()) -> dict[str, int]:
        """How many turns ``scope`` shows contain each term; counting stops at ``cap + 1``, so a
        common word costs no more than a rare one within the scope. The counts decide what recall
        matches and are reported back (``signals.terms``): counted beyond the caller's scope they
        told a user how often other users wrote a word. The whole index (no sessions, no
        ``as_of``) is counted from the full-text index alone."""
        if scope.sessions is None and scope.as_of is None:
            return {term: self._index_matches(term_match(term), cap=cap + 1) for term in terms}
        counted: dict[str, int] = {}
        for term in terms:
            source, params = self._matching(term_match(term), scope)
            counted[term] = self.db.query(f"SELECT COUNT(*) FROM (SELECT 1 FROM {source} LIMIT ?) AS hits", (*params, cap + 1))[0][0]
        return counted

    def _index_matches(self, match: str, *, cap: int) -> int:
        """How many turns of the whole index match ``match``, counted up to ``cap`` from the
        full-text index alone (its cost follows the count, whatever the table's size)."""
        fts = self.db.dialect
        sql = (f"SELECT COUNT(*) FROM (SELECT 1 FROM {fts.fts_index_source('recall_turns', 't')} "
               f"WHERE {fts.fts_match('recall_turns', 't')} LIMIT ?) AS hits")
        return self.db.query(sql, (match, cap))[0][0]

    def _matching(self, match: str, scope: Scope, *, ranked: bool = False) -> tuple[str, tuple[Any, ...]]:
        """``FROM ... WHERE ...`` (alias ``t``) of the turns ``scope`` shows that match ``match``,
        and its parameters, by the cheaper of two ways to the same rows: the index's lists of the
        words' rows in the whole index, each row then checked against the scope, or the scope's own
        turns (by their sessions), each tested alone (:meth:`_through_scope`). ``ranked``: the caller orders by the dialect's ``fts_rank``
        (see :meth:`store.dialect.Dialect.fts_scope_source`)."""
        fts = self.db.dialect
        known, kp = _known("t.created_at", scope)
        if self._through_scope(match, scope):
            return (f"{fts.fts_scope_source('recall_turns', 't', ranked=ranked)} AND {known}",
                    (*fts.fts_scope_params(scope.sessions_json(), match, ranked=ranked), *kp))
        visible, vp = _visible("t.session_id", scope)
        return (f"{fts.fts_source('recall_turns', 't')} WHERE {fts.fts_match('recall_turns', 't')} AND {visible} AND {known}",
                (match, *vp, *kp))

    def _through_scope(self, match: str, scope: Scope) -> bool:
        """Whether matching ``match`` through the scope's own turns costs less than through the
        words' rows in the whole index: when the scope's sessions have at most
        :data:`SCOPE_TURNS_PROBE` turns (known by ``as_of`` or not) and what reading them costs
        (:data:`TURN_COST` a turn, :data:`SEEK_COST` a run of consecutive ids), in rows of the
        index's lists, is less than the rows of the whole index matching ``match`` (on PostgreSQL,
        weighted 0: whenever the scope is that small). The counts stop where the answer is known,
        so deciding costs at most a share of the cheaper way. Either way gives the same rows,
        counts and order."""
        if scope.sessions is None:
            return False
        if (match, scope) not in self._ways:
            if len(self._ways) >= _WAYS_KEPT:
                self._ways.clear()
                self._turns.clear()
                self._runs.clear()
            self._ways[match, scope] = self._scope_is_cheaper(match, scope)
        return self._ways[match, scope]

    def _scope_is_cheaper(self, match: str, scope: Scope) -> bool:
        """:meth:`_through_scope`'s counts, for a scope that lists its sessions."""
        turns = self._scope_turns(scope)
        if turns > SCOPE_TURNS_PROBE:
            return False
        name = self.db.dialect.name
        # At least one run: a word with fewer rows than that goes through the index before the
        # runs are counted (counting them reads each turn's neighbour, ~0.6 µs a turn).
        least = turns * TURN_COST[name] + min(turns, 1) * SEEK_COST[name]
        if least == 0 or self._index_matches(match, cap=least) < least:
            return least == 0
        bound = turns * TURN_COST[name] + self._scope_runs(scope) * SEEK_COST[name]
        return bound == least or self._index_matches(match, cap=bound) >= bound

    def _scope_turns(self, scope: Scope) -> int:
        """The scope's turns, counted up to one past :data:`SCOPE_TURNS_PROBE` (kept per scope)."""
        # Session by session, all of them counted up to the probe: a user's scope is every session
        # of theirs, and a limit per session counted the whole history of one with many (an 18 ms
        # recall at 33,000 turns on SQLite, 1.9 ms since). Every turn of the sessions, ``as_of`` or
        # not: the scope's way tests each before its time is looked at (counting only those known
        # by then took that way for a few early turns before 32,000 later ones).
        if scope not in self._turns:
            self._turns[scope] = self.db.query(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM {self.db.dialect.session_rows('recall_turns', 't')} LIMIT ?) AS scoped",
                (scope.sessions_json(), SCOPE_TURNS_PROBE + 1),
            )[0][0]
        return self._turns[scope]

    def _scope_runs(self, scope: Scope) -> int:
        """The runs of consecutive ids among the scope's turns (kept per scope; asked only of a
        scope within the probe): a run starts at each turn whose id less one is no turn of the
        scope (no sort of the turns)."""
        if scope not in self._runs:
            self._runs[scope] = self.db.query(
                f"SELECT COUNT(*) FROM (SELECT t.id FROM {self.db.dialect.session_rows('recall_turns', 't')}) AS scoped "
                "WHERE NOT EXISTS (SELECT 1 FROM recall_turns AS p WHERE p.id = scoped.id - 1 "
                "AND p.session_id IN (SELECT value FROM json_each(?)))",
                (scope.sessions_json(), scope.sessions_json()),
            )[0][0]
        return self._runs[scope]

    # --- keyword -------------------------------------------------------------------------
    def keyword_turns(self, match: str, scope: Scope, *, limit: int, ranked: bool = True) -> list[str]:
        """Turns matching ``match`` by BM25, best first (``ranked=False``: newest first, without
        scoring every match)."""
        fts = self.db.dialect
        order = f"{fts.fts_rank('recall_turns', 't')}, t.id" if ranked else "t.id DESC"
        source, params = self._matching(match, scope, ranked=ranked)
        return [r[0] for r in self.db.query(f"SELECT t.memory_id FROM {source} ORDER BY {order} LIMIT ?", (*params, limit))]

    def keyword_sessions(self, match: str, scope: Scope, *, limit: int) -> list[str]:
        """Sessions whose title or summary matches ``match``, best first; as of a time before its
        summary was known (:meth:`sessions`), a session matches by neither (one index row holds both)."""
        visible, vp = _visible("s.session_id", scope)
        known, kp = _known("s.created_at", scope)
        fts = self.db.dialect
        sql = (f"SELECT s.session_id FROM {fts.fts_source('recall_sessions', 's')} "
               f"WHERE {fts.fts_match('recall_sessions', 's')} AND {visible} AND {known} "
               f"ORDER BY {fts.fts_rank('recall_sessions', 's')}, s.id LIMIT ?")
        # The best ``limit`` first, then four times as many while summaries not known yet took
        # places: asking every matching session's turns in the ranking statement cost 16 ms for a
        # word in 3,000 summaries of 20 turns each (SQLite), where ranking them costs 2.
        wanted = limit
        while True:
            ranked = [r[0] for r in self.db.query(sql, (match, *vp, *kp, wanted))]
            if scope.as_of is None:
                return ranked
            said = self._summaries_known(ranked, scope)
            kept = [s for s in ranked if s in said]
            if len(kept) >= limit or len(ranked) < wanted:
                return kept[:limit]
            wanted *= 4

    def _summaries_known(self, session_ids: Sequence[str], scope: Scope) -> set[str]:
        """Those of ``session_ids`` whose summary is known at ``as_of``."""
        summary_known, sp = _summary_known("j.value", scope)
        rows = self.db.query(f"SELECT j.value FROM json_each(?) AS j WHERE {summary_known}", (json.dumps(list(session_ids)), *sp))
        return {r[0] for r in rows}

    def term_sessions(self, terms: Sequence[str], scope: Scope) -> dict[str, dict[str, int]]:
        """For each term, the visible sessions with turns that contain it: ``{session_id: turns}``.
        Unbounded per term: the caller passes only words rare enough (``pipelines.recall.MATCH_BUDGET``)."""
        found: dict[str, dict[str, int]] = {}
        for term in terms:
            source, params = self._matching(term_match(term), scope)
            found[term] = {r[0]: r[1] for r in self.db.query(f"SELECT t.session_id, COUNT(*) FROM {source} GROUP BY t.session_id", params)}
        return found

    def term_turns(self, terms: Sequence[str], scope: Scope, *, sessions: Sequence[str]) -> dict[str, list[tuple[str, str, int | None]]]:
        """For each term, the visible turns of ``sessions`` that contain it: ``[(memory_id, session_id, turn_index)]``."""
        wanted = json.dumps(list(sessions))
        found: dict[str, list[tuple[str, str, int | None]]] = {}
        for term in terms:
            source, params = self._matching(term_match(term), scope)
            rows = self.db.query(f"SELECT t.memory_id, t.session_id, t.turn_index FROM {source} "
                                 "AND t.session_id IN (SELECT value FROM json_each(?))", (*params, wanted))
            found[term] = [(r[0], r[1], r[2]) for r in rows]
        return found

    def session_lengths(self, session_ids: Sequence[str]) -> dict[str, int]:
        """How many turns each session has in the whole index: BM25's length of a session the
        scope shows (all of it is the caller's, whatever ``as_of`` hides of it); it orders and is
        never returned."""
        rows = self.db.query(
            "SELECT session_id, COUNT(*) FROM recall_turns WHERE session_id IN (SELECT value FROM json_each(?)) GROUP BY session_id",
            (json.dumps(list(dict.fromkeys(session_ids))),),
        )
        return {r[0]: r[1] for r in rows}

    def index_size(self) -> tuple[int, int]:
        """``(turns, sessions)`` in the whole index, BM25's collection statistics for sessions. The
        turns are the highest row id (one index probe; counting 100,000 rows took ~1 ms a query and
        grows with the index): removed turns still count, which only flattens idf a little."""
        row = self.db.query("SELECT (SELECT MAX(id) FROM recall_turns), (SELECT COUNT(*) FROM recall_sessions)")[0]
        return int(row[0] or 0), int(row[1] or 0)

    def adjacent_turns(self, memory_ids: Sequence[str], scope: Scope, *, radius: int) -> list[str]:
        """The turns within ``radius`` of each of ``memory_ids`` in its session (not those turns
        themselves), in the order of ``memory_ids``, nearest first, the next turn before the previous."""
        visible, vp = _visible("b.session_id", scope)
        known, kp = _known("b.created_at", scope)
        rows = self.db.query(
            "SELECT b.memory_id FROM json_each(?) AS h JOIN recall_turns AS a ON a.memory_id = h.value "
            "JOIN recall_turns AS b ON b.session_id = a.session_id AND b.turn_index BETWEEN a.turn_index - ? AND a.turn_index + ? "
            f"AND b.id != a.id WHERE {visible} AND {known} "
            "ORDER BY h.key, ABS(b.turn_index - a.turn_index), b.turn_index DESC",
            (json.dumps(list(memory_ids)), radius, radius, *vp, *kp),
        )
        return list(dict.fromkeys(r[0] for r in rows))

    # --- entities ------------------------------------------------------------------------
    def matching_nodes(self, match: str, scope: Scope, *, limit: int) -> list[str]:
        """Nodes whose name, or a visible claim's aliases/description, match ``match``, best first;
        only nodes with at least one visible point known by ``as_of`` (for a claim: in its session)."""
        point_visible, pvp = _visible("p.anchor", scope)
        point_known, pkp = _known("p.observed_at", scope)
        claim_visible, cvp = _visible("d.anchor", scope)
        claim_known, ckp = _known("c.observed_at", scope)
        fts = self.db.dialect
        # A node has a name row and a row per claim (per session that described it): its best row
        # ranks it, chosen in SQL. Cutting the rows first (``limit`` × 4 of them) let one node said
        # in that many sessions fill them all, and the others that match were never listed. The
        # rows are materialized first: SQLite's bm25() cannot be asked under a GROUP BY.
        rows = self.db.query(
            "WITH hits AS MATERIALIZED ("
            f"SELECT d.node_id, d.id, {fts.fts_rank('recall_node_docs', 'd', _NODE_COLUMN_WEIGHTS)} AS score "
            f"FROM {fts.fts_source('recall_node_docs', 'd')} WHERE {fts.fts_match('recall_node_docs', 'd')} "
            # A claim row counts with a known point of its own session (one index probe: that point
            # is visible too); a name row with any visible known point. Asking the second of every
            # claim row scanned a speaker's 17,000 points per row under a user's scope (seconds).
            f"AND ((d.kind = 'claim' AND {claim_visible} AND EXISTS (SELECT 1 FROM node_points AS c "
            f"WHERE c.node_id = d.node_id AND c.anchor = d.anchor AND {claim_known})) "
            f"OR (d.kind = 'name' AND EXISTS (SELECT 1 FROM node_points AS p WHERE p.node_id = d.node_id AND {point_visible} AND {point_known}))) "
            ") SELECT node_id FROM hits GROUP BY node_id ORDER BY MIN(score), MIN(id) LIMIT ?",
            (match, *cvp, *ckp, *pvp, *pkp, limit),
        )
        return [r[0] for r in rows]

    def merge_seen(self, merge_id: int, scope: Scope) -> bool:
        """Whether a point that merge ``merge_id`` moved (or marked since: a re-extraction of the
        merged node's id keeps the mark) is in ``scope``'s sessions: whether the caller could see
        the node that was merged away."""
        visible, vp = _visible("anchor", scope)
        return bool(self.db.query(f"SELECT 1 FROM node_points WHERE merge_id = ? AND {visible} LIMIT 1", (merge_id, *vp)))

    def point_counts(self, node_ids: Sequence[str], scope: Scope, *, cap: int) -> dict[str, int]:
        """How many of each node's provenance points ``scope`` shows, counted up to ``cap`` (so a
        speaker cited by every turn costs no more than a rare name): like the term counts, a
        ranking statistic of the caller's own scope — a node other users cite everywhere is not
        common for one who cites it twice, and their citations say nothing through this one's
        answer (``signals.entities.common``). A scope's sessions are sought through the
        ``(node_id, anchor)`` index, an ``as_of`` through ``(node_id, observed_at)``: what is
        read is the node's points the scope shows, never all of them."""
        seen, sp = _points_seen("p", scope)
        rows = self.db.query(
            "SELECT j.value, (SELECT COUNT(*) FROM (SELECT 1 FROM node_points AS p WHERE p.node_id = j.value "
            f"AND {seen} LIMIT ?) AS capped) FROM json_each(?) AS j",
            (*sp, cap, json.dumps(list(node_ids))),
        )
        return {r[0]: r[1] for r in rows}

    def grounding_turns(self, node_ids: Sequence[str], scope: Scope) -> dict[str, list[tuple[str, int]]]:
        """For each node, the turns its visible points cite: ``[(memory_id, points)]``, most points
        first. Only the points the scope shows are read (:meth:`point_counts`): a node kept as not
        common in this scope may have many more in others'."""
        if not node_ids:
            return {}
        seen, sp = _points_seen("node_points", scope)
        rows = self.db.query(
            "SELECT node_id, memory_id, COUNT(*) AS n FROM node_points "
            f"WHERE node_id IN (SELECT value FROM json_each(?)) AND memory_id != '' AND {seen} "
            "GROUP BY node_id, memory_id ORDER BY node_id, n DESC, memory_id",
            (json.dumps(list(node_ids)), *sp),
        )
        found: dict[str, list[tuple[str, int]]] = {}
        for r in rows:
            found.setdefault(r["node_id"], []).append((r["memory_id"], r["n"]))
        return found

    def neighbours(self, node_ids: Sequence[str], scope: Scope, *, exclude_relationships: Iterable[str], limit: int) -> list[str]:
        """Nodes one semantic edge away from ``node_ids`` through visible edge points, strongest first."""
        if not node_ids:
            return []
        visible, vp = _visible("anchor", scope)
        known, kp = _known("observed_at", scope)
        ids = json.dumps(list(node_ids))
        rows = self.db.query(
            "SELECT other, COUNT(DISTINCT anchor || ' ' || memory_id || ' ' || chunk_id) AS places FROM ("
            "SELECT CASE WHEN source IN (SELECT value FROM json_each(?)) THEN target ELSE source END AS other, "
            "anchor, memory_id, chunk_id, observed_at FROM edge_points "
            "WHERE (source IN (SELECT value FROM json_each(?)) OR target IN (SELECT value FROM json_each(?))) "
            "AND relationship NOT IN (SELECT value FROM json_each(?))"
            f") AS e WHERE other NOT IN (SELECT value FROM json_each(?)) AND {visible} AND {known} "
            "AND other NOT LIKE 'memory:%' AND other NOT LIKE 'session:%' AND other NOT LIKE 'note:%' "
            "GROUP BY other ORDER BY places DESC, other LIMIT ?",
            (ids, ids, ids, json.dumps(sorted(exclude_relationships)), ids, *vp, *kp, limit),
        )
        return [r[0] for r in rows]

    # --- records ---------------------------------------------------------------------------
    def turns(self, memory_ids: Sequence[str], scope: Scope) -> dict[str, TurnRecord]:
        """The visible turns among ``memory_ids`` (missing or hidden ones are left out)."""
        visible, vp = _visible("session_id", scope)
        known, kp = _known("created_at", scope)
        found: dict[str, TurnRecord] = {}
        for part in chunked(list(dict.fromkeys(memory_ids)), _IN_CHUNK):
            rows = self.db.query(
                "SELECT memory_id, session_id, turn_index, role, created_at, text, user_id FROM recall_turns "
                f"WHERE memory_id IN (SELECT value FROM json_each(?)) AND {visible} AND {known}",
                (json.dumps(list(part)), *vp, *kp),
            )
            for r in rows:
                found[r[0]] = TurnRecord(*r)
        return found

    def sessions(self, session_ids: Sequence[str], scope: Scope) -> dict[str, SessionRecord]:
        """The visible sessions among ``session_ids``, as known at ``as_of``: a session created by
        then, its summary (``''`` before) once every turn of it was said. What of a session recall,
        ``show``, ``export`` and the MCP tools show at a time is decided here (see
        ``pipelines.asof.graph_as_of``)."""
        visible, vp = _visible("s.session_id", scope)
        known, kp = _known("s.created_at", scope)
        summary_known, sp = _summary_known("s.session_id", scope)
        rows = self.db.query(
            f"SELECT s.session_id, s.title, CASE WHEN {summary_known} THEN s.summary ELSE '' END AS summary, s.created_at, "
            "s.user_id FROM recall_sessions AS s "
            f"WHERE s.session_id IN (SELECT value FROM json_each(?)) AND {visible} AND {known}",
            (*sp, json.dumps(list(dict.fromkeys(session_ids))), *vp, *kp),
        )
        return {r[0]: SessionRecord(*r) for r in rows}

    def first_seen(self, node_id: str, scope: Scope) -> tuple[bool, str | None]:
        """Whether ``node_id`` has a point ``scope`` shows, and the earliest turn time of those
        points (``None``: none has one) — since when the caller of that scope can know the node,
        which tells nothing of a session outside it."""
        visible, vp = _visible("anchor", scope)
        known, kp = _known("observed_at", scope)
        rows = self.db.query(
            f"SELECT observed_at FROM node_points WHERE node_id = ? AND {visible} AND {known} "
            "ORDER BY observed_at IS NULL, observed_at LIMIT 1",
            (node_id, *vp, *kp),
        )
        return bool(rows), rows[0][0] if rows else None

    def facts(self, node_ids: Sequence[str], scope: Scope, *, exclude_relationships: Iterable[str], edges_per_node: int) -> list[FactRecord]:
        """Each visible node of ``node_ids`` (in that order) with the description its visible claims
        give, its first visible quote and its strongest visible semantic edges."""
        if not node_ids:
            return []
        point_visible, pvp = _visible("anchor", scope)
        point_known, pkp = _known("observed_at", scope)
        claim_visible, cvp = _visible("c.anchor", scope)
        claim_known, ckp = _known("p.observed_at", scope)
        excluded = json.dumps(sorted(exclude_relationships))
        records: list[FactRecord] = []
        for node_id in node_ids:
            node = self.db.query("SELECT id, label, name FROM nodes WHERE id = ?", (node_id,))
            # The first quote: the earliest point with evidence, else the earliest point. Two probes
            # that walk ``node_points_first`` in time order and stop at the first match, where one
            # ``ORDER BY evidence = ''`` sorted all of a popular node's points (17,000 for a Friends
            # speaker at 100,000 turns) to keep one.
            points = []
            for with_evidence in ("evidence != ''", "evidence = ''"):
                points = self.db.query(
                    f"SELECT memory_id, evidence, anchor FROM node_points WHERE node_id = ? AND {with_evidence} "
                    f"AND {point_visible} AND {point_known} ORDER BY observed_at, memory_id LIMIT 1",
                    (node_id, *pvp, *pkp),
                )
                if points:
                    break
            if not node or not points:
                continue
            # The longest visible description, then the larger (``store.facts.longer_text``'s order),
            # chosen in SQL rather than by reading every claim's description.
            best = self.db.query(
                f"SELECT c.description FROM node_claims AS c WHERE c.node_id = ? AND c.description != '' AND {claim_visible} "
                f"AND (? IS NULL OR EXISTS (SELECT 1 FROM node_points AS p WHERE p.node_id = c.node_id "
                f"AND p.anchor = c.anchor AND {claim_known})) "
                f"ORDER BY {longer_text_order('c.description')} LIMIT 1",
                (node_id, *cvp, scope.as_of, *ckp),
            )
            description = best[0][0] if best else ""
            # The quote's turn and source as one value, so that both come from one row (PostgreSQL
            # picks each aggregate's row among equal quotes on its own; ids hold no space).
            edges = self.db.query(
                "SELECT source, target, relationship, COUNT(DISTINCT anchor || ' ' || CASE WHEN memory_id != '' "
                f"THEN memory_id ELSE chunk_id END) AS places, MAX(evidence) AS evidence, "
                f"{self.db.dialect.value_at_max(_ANCHOR_AND_MEMORY, 'evidence')} AS quoted "
                "FROM edge_points WHERE (source = ? OR target = ?) AND relationship NOT IN (SELECT value FROM json_each(?)) "
                f"AND {point_visible} AND {point_known} "
                "GROUP BY source, target, relationship ORDER BY places DESC, relationship, source, target LIMIT ?",
                (node_id, node_id, excluded, *pvp, *pkp, edges_per_node),
            )
            names = {
                r[0]: r[1]
                for r in self.db.query(
                    "SELECT id, name FROM nodes WHERE id IN (SELECT value FROM json_each(?))",
                    (json.dumps([e["target"] if e["source"] == node_id else e["source"] for e in edges]),),
                )
            }
            fact_edges = []
            for e in edges:
                other = e["target"] if e["source"] == node_id else e["source"]
                anchor, _, memory_id = (e["quoted"] or "").partition(" ")
                fact_edges.append(
                    FactEdge(e["source"], e["target"], e["relationship"], other, names.get(other, other), e["places"],
                             e["evidence"] or "", memory_id, anchor)
                )
            records.append(
                FactRecord(node[0]["id"], node[0]["label"], node[0]["name"], description, points[0]["evidence"],
                           points[0]["memory_id"], fact_edges, points[0]["anchor"])
            )
        return records

    def counts(self) -> dict[str, int]:
        """Rows in each recall table."""
        return {
            table: self.db.query(f"SELECT COUNT(*) FROM {table}")[0][0]
            for table in ("recall_turns", "recall_sessions", "recall_node_docs")
        }


def memory_turn(node: Node, text: str) -> TurnRecord:
    """The index row of a MEMORY node written by ingest (its properties name session, user, order, role, time)."""
    props = node.properties
    session = props.get("sessionId")
    turn_index = props.get("turnIndex")
    return TurnRecord(
        memory_id=node.id,
        session_id=f"session:{session}" if isinstance(session, str) else "",
        turn_index=turn_index if isinstance(turn_index, int) and not isinstance(turn_index, bool) else None,
        role=props.get("role") if isinstance(props.get("role"), str) else None,
        created_at=props.get("createdAt") if isinstance(props.get("createdAt"), str) else None,
        text=text,
        user_id=props.get("userId") if isinstance(props.get("userId"), str) else None,
    )
