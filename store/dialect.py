"""What the SQL of the stores says differently on SQLite and on PostgreSQL, in one place.

The stores write one statement for both engines wherever the engines share the SQL (``ON CONFLICT``,
``RETURNING``; the columns an upsert compares are NOT NULL, so ``!=`` says what SQLite's ``IS NOT``
said, without needing SQLite 3.39's ``IS DISTINCT FROM``). PostgreSQL gets SQLite's ``json_each``
over an array, ``json_group_array``, ``json_valid`` and ``json_extract`` as functions of its schema
(see :mod:`store.postgres`). The
few fragments that cannot be shared are methods of a :class:`Dialect`; a store reads
``self.db.dialect``.

Full-text search: SQLite keeps an FTS5 table ``<table>_fts`` beside each recall table (rows joined by
``rowid``, BM25 ranking); PostgreSQL a generated ``search`` tsvector column of the table itself
(GIN index, ``ts_rank``). A statement takes the three fragments :meth:`Dialect.fts_source`,
:meth:`Dialect.fts_match` and :meth:`Dialect.fts_rank`; between them they bind exactly one parameter,
the match expression (built by ``pipelines.recall.match_expression``: quoted terms joined by ``OR``,
which PostgreSQL's ``websearch_to_tsquery`` reads the same way), before any other parameter of the
WHERE clause.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Dialect:
    """The SQL fragments one engine writes its own way (table, alias and key arguments are
    constants of the caller, never user input)."""

    name: str
    # Full-text rows are written by the store (SQLite's external-content FTS5 tables); PostgreSQL's
    # tsvector columns are generated from the row itself.
    fts_rows_written: bool

    @property
    def postgres(self) -> bool:
        """``True`` for PostgreSQL."""
        return self.name == "postgresql"

    def json_flag(self, document: str, key: str) -> str:
        """A boolean expression, never NULL: the JSON object in the text column ``document`` has
        ``key`` set to ``true`` (or ``1``)."""
        if self.postgres:
            # A ``\u0000`` anywhere in the document (a NUL, which PostgreSQL's text cannot hold) makes
            # every JSON operator refuse it: read as ``\ufffd``, an escape of the same shape, the
            # document stays JSON whatever precedes it (an escaped backslash too), and the flag is read.
            return f"COALESCE(replace({document}, '\\u0000', '\\ufffd')::jsonb -> '{key}' IN ('true'::jsonb, '1'::jsonb), false)"
        return f"COALESCE(json_extract({document}, '$.{key}') = 1, 0)"

    def json_text(self, document: str, key: str) -> str:
        """The text value of ``key`` in the JSON object in the text column ``document`` (NULL when
        missing): SQLite's ``json_extract``; on PostgreSQL the ``->>`` operator, which costs a
        fraction of the schema's ``json_extract`` function (a path parsed per row) over many rows."""
        if self.postgres:
            return f"(({document})::jsonb ->> '{key}')"
        return f"json_extract({document}, '$.{key}')"

    def value_at_max(self, column: str, by: str) -> str:
        """In a grouped query that also selects ``MAX(by)``: ``column`` of the row holding that
        maximum (SQLite gives a bare column that row's value; PostgreSQL needs it spelled out)."""
        if self.postgres:
            return f"(array_agg({column} ORDER BY {by} DESC))[1]"
        return column

    def fold(self, expression: str) -> str:
        """``expression`` (text) folded by the search rule (store/textfold.py), for comparing names in
        SQL: ``rem_fold`` on both engines, and the rule's own short way for ASCII text written in SQL
        (SQLite's ``lower`` lowers ASCII only; PostgreSQL's under ``"C"`` too), so that a name of
        ASCII costs no call of a function per row (a Python one on SQLite, PL/pgSQL on PostgreSQL)."""
        if self.postgres:
            return f'(CASE WHEN octet_length({expression}) = length({expression}) THEN lower({expression} COLLATE "C") ELSE rem_fold({expression}) END)'
        return f"(CASE WHEN {expression} GLOB '*[^ -~]*' THEN rem_fold({expression}) ELSE lower({expression}) END)"

    def queue_first_chunk(self) -> str:
        """A queue line's first chunk id (``properties.chunk_ids[0]`` of the text column ``line``;
        NULL for a line that is no JSON or has none), as the queue tables' first-chunk indexes hold
        it (migration 27): a read must spell it so for either engine to use them, and their
        migration's text is frozen, so this never changes. ``json_valid`` keeps a malformed line (a
        drain dead-letters it) from failing its insert. PostgreSQL's is built-in operators under
        ``"C"`` (bytewise, as SQLite's): an index expression runs where the schema is not on the
        search path (``pg_dump``, autovacuum), and the schema's ``json_extract`` calls another of
        its functions by name; ``json_valid`` calls none. No braces: a read's text is a
        ``str.format`` template (store.lazy_table.holding_read)."""
        if self.postgres:
            return "((CASE WHEN json_valid(line) THEN line::jsonb #>> ARRAY['properties', 'chunk_ids', '0'] END) COLLATE \"C\")"
        return "(CASE WHEN json_valid(line) THEN json_extract(line, '$.properties.chunk_ids[0]') END)"

    def edge_digest(self, source: str, target: str, relationship: str) -> str:
        """PostgreSQL's digest of an edge key (the SQL expressions ``source``, ``target``,
        ``relationship``): the leading key of its ``edge_points_reason`` index (migration 31), 33
        bytes where the key itself is up to ~2.5 kB, which with a 2 kB justification was over the
        btree's 2,704 bytes an entry. The index holds this expression, so it never changes. U+001F
        separates the parts; two keys with one digest cost a recheck of the exact key, no error."""
        return f"md5({source} || chr(31) || {target} || chr(31) || {relationship})"

    def same_edge(self, point: str, key: str) -> str:
        """The condition: the ``edge_points`` row ``point`` (an alias) is of the edge ``key``.s,
        .t, .r, as the engine's ``edge_points_reason`` index is keyed: on PostgreSQL by the edge's
        digest (:meth:`edge_digest`), the exact key compared beside it; on SQLite by the key."""
        exact = f"{point}.source = {key}.s AND {point}.target = {key}.t AND {point}.relationship = {key}.r"
        if self.postgres:
            digest = self.edge_digest(f"{point}.source", f"{point}.target", f"{point}.relationship")
            return f"{digest} = {self.edge_digest(f'{key}.s', f'{key}.t', f'{key}.r')} AND {exact}"
        return exact

    def skip_locked(self, alias: str) -> str:
        """The clause that ends a query picking work rows (``alias``'s) for one of several workers:
        on PostgreSQL each picked row is locked and rows another worker's open transaction holds
        are skipped, so concurrent pickers never choose the same row nor wait for each other; on
        SQLite nothing (the picking transaction is ``BEGIN IMMEDIATE``: one writer at a time)."""
        if self.postgres:
            return f"FOR UPDATE OF {alias} SKIP LOCKED"
        return ""

    def for_update(self) -> str:
        """The clause that ends a read whose rows the transaction must hold until it ends: on
        PostgreSQL a row lock that other writers of those rows wait for; on SQLite nothing (its
        ``BEGIN IMMEDIATE`` transactions already exclude every other writer)."""
        return "FOR UPDATE" if self.postgres else ""

    def fts_source(self, table: str, alias: str) -> str:
        """The FROM part giving the rows of ``table`` (as ``alias``) with their full-text index."""
        if self.postgres:
            return f"{table} AS {alias} CROSS JOIN websearch_to_tsquery('english', ?) AS {alias}_query"
        return f"{table}_fts JOIN {table} AS {alias} ON {alias}.id = {table}_fts.rowid"

    def fts_index_source(self, table: str, alias: str) -> str:
        """Like :meth:`fts_source`, for a read that needs no column of ``table`` (counting matches):
        on SQLite the full-text index alone — joining the table read one row per match, 15× the
        time of counting 10 words' matches at 100,000 turns."""
        if self.postgres:
            return self.fts_source(table, alias)
        return f"{table}_fts"

    def session_rows(self, table: str, alias: str) -> str:
        """The FROM part giving the rows of ``table`` (as ``alias``) in a list of sessions (binds
        one parameter, the sessions as a JSON array), found session by session by the table's
        index on ``session_id``, never by a scan of the table. PostgreSQL: LATERAL and OFFSET 0,
        one btree probe per session whatever the planner guesses of json_each (a hash join over
        the whole table was its choice without statistics)."""
        if self.postgres:
            return (f"json_each(?) AS {alias}_scope CROSS JOIN LATERAL "
                    f"(SELECT * FROM {table} WHERE session_id = {alias}_scope.value OFFSET 0) AS {alias}")
        return f"json_each(?) AS {alias}_scope JOIN {table} AS {alias} ON {alias}.session_id = {alias}_scope.value"

    def fts_scope_source(self, table: str, alias: str, *, ranked: bool = False) -> str:
        """Like :meth:`fts_source` with its match, for a read of the rows of ``table`` (as
        ``alias``) in a list of sessions that finds them through those sessions (``session_id``, by
        the table's index on it) rather than through the index's list of a word's rows. Binds what
        :meth:`fts_scope_params` gives, in its order.

        PostgreSQL: each session's rows by the btree (:meth:`session_rows`), each tested alone with
        ``ts_match_vq`` (the function of ``@@``, which the GIN index does not serve); ``ts_rank``
        reads the row alone, so ranked or not. SQLite: the sessions' rows as runs of consecutive
        ids (a session's turns are written together), each run one rowid-bounded ``MATCH``: one
        seek of each word's list per run, then only the run's own rows of it (testing each row
        alone seeked the list anew for each, ~120 µs a row for a word in 4,000 turns or more).
        ``ranked`` on SQLite: BM25 needs the cursor that counts each word's rows in the whole index
        (its idf; a bounded cursor per run would count them again for each), so one cursor walks
        the word's list between the scope's first and last row, each row kept when its rowid is
        among the sessions' (a set built once), without reading the table for the others."""
        if self.postgres:
            return (f"{self.session_rows(table, alias)} CROSS JOIN websearch_to_tsquery('english', ?) AS {alias}_query "
                    f"WHERE ts_match_vq({alias}.search, {alias}_query)")
        scope_ids = f"SELECT {alias}_in.id FROM {self.session_rows(table, f'{alias}_in')}"
        if ranked:
            # ``+``: the rowid set filters the walk; as a constraint FTS5 would be asked once per rowid.
            return (f"{table}_fts JOIN {table} AS {alias} ON {alias}.id = {table}_fts.rowid "
                    f"WHERE +{table}_fts.rowid IN ({scope_ids}) AND {table}_fts.rowid BETWEEN "
                    f"(SELECT MIN(id) FROM ({scope_ids}) AS {alias}_first) AND (SELECT MAX(id) FROM ({scope_ids}) AS {alias}_last) "
                    f"AND {table}_fts MATCH ?")
        # CROSS JOIN: the runs first, each bounding one FTS5 cursor (the planner walked the word's
        # whole list once and tested every row against every run).
        return (f"(SELECT MIN(id) AS low, MAX(id) AS high FROM (SELECT id, id - ROW_NUMBER() OVER (ORDER BY id) AS run "
                f"FROM ({scope_ids}) AS {alias}_ids) AS {alias}_numbered GROUP BY run) AS {alias}_runs "
                f"CROSS JOIN {table}_fts ON {table}_fts.rowid BETWEEN {alias}_runs.low AND {alias}_runs.high "
                f"JOIN {table} AS {alias} ON {alias}.id = {table}_fts.rowid WHERE {table}_fts MATCH ?")

    def fts_scope_params(self, sessions: str | None, match: str, *, ranked: bool = False) -> tuple[str | None, ...]:
        """The parameters of :meth:`fts_scope_source` (same ``ranked``), in the order it binds them:
        ``sessions`` (a JSON array) as often as it reads the sessions' rows, then ``match``."""
        reads = 3 if ranked and not self.postgres else 1
        return (*(sessions,) * reads, match)

    def fts_match(self, table: str, alias: str) -> str:
        """The condition: the row matches the match expression."""
        if self.postgres:
            return f"{alias}.search @@ {alias}_query"
        return f"{table}_fts MATCH ?"

    def fts_rank(self, table: str, alias: str, weights: Sequence[float] | None = None) -> str:
        """A score, lower = better, of the row against the match expression; ``weights`` = one per
        indexed column, in the table's column order (SQLite's BM25 weights; on PostgreSQL the
        columns are weighted A, B, D in that order)."""
        if self.postgres:
            if weights is None:
                return f"-ts_rank({alias}.search, {alias}_query)"
            # The A, B and D columns; ts_rank takes {D, C, B, A}, each at most 1 (the order is what counts).
            first, second, third = (w / max(weights) for w in weights)
            return f"-ts_rank('{{{third}, 0, {second}, {first}}}', {alias}.search, {alias}_query)"
        if weights is None:
            return f"{table}_fts.rank"
        return f"bm25({table}_fts, {', '.join(str(w) for w in weights)})"


SQLITE = Dialect("sqlite", fts_rows_written=True)
POSTGRESQL = Dialect("postgresql", fts_rows_written=False)
