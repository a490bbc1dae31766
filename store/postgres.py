"""The worker's PostgreSQL database: the same surface as :class:`store.db.Database`, on psycopg 3.

Selected by ``REM_DATABASE_URL=postgresql://…`` (:func:`store.backend.open_database`). The stores'
SQL is shared with SQLite: statements are written with ``?`` (and ``:name``) placeholders and in the
SQL both engines accept (``ON CONFLICT``, ``RETURNING``); this module rewrites
the placeholders to psycopg's (:func:`to_pyformat`), returns rows readable by index and by column
name like ``sqlite3.Row`` (:class:`Row`), and turns every psycopg error into the
:mod:`store.errors` family (:func:`store_error`). What the engines do not share lives in two places:
:class:`store.dialect.Dialect` (a few SQL fragments) and :data:`SCHEMA`, which gives PostgreSQL the
handful of SQLite functions the statements use (``json_each`` over an array, ``json_group_array``,
``json_valid``, ``json_extract``) with SQLite's meaning, and the ``nocase`` collation.

Connections come from one :class:`psycopg_pool.ConnectionPool` per URL and process: a
:class:`PostgresDatabase` holds one connection for its life (the stores' transactions nest on it,
as on the SQLite connection) and gives it back on :meth:`~PostgresDatabase.close`, so the short
reads of ``/healthz``, ``/metrics`` and ``status`` reuse connections instead of opening new ones.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import psycopg
import psycopg.errors
from psycopg.types.string import StrDumper
from psycopg_pool import ConnectionPool, PoolTimeout

from store.dialect import POSTGRESQL, Dialect
from store.errors import (
    ConstraintError,
    DatabaseBusyError,
    DatabaseError,
    DatabaseUnreadableError,
    QueryInterruptedError,
    SchemaTooNewError,
)

# The SQLite schema versions 1..BASELINE exist on PostgreSQL as one script (no PostgreSQL database
# predates them); later versions follow store.db.MIGRATIONS one by one (see :func:`migrations`).
BASELINE = 7

# Schema version BASELINE: the tables of SQLite's versions 1-7 with the same names and columns.
# Differences, each for a reason: REAL is float8 (SQLite's REAL is 8 bytes; float4 would change
# weights and scores); JSON documents stay TEXT (the stores compare and return the exact canonical
# string) with a CHECK that they parse; merges.merge_id is an identity column (AUTOINCREMENT);
# rem_runs has an explicit ``rowid`` (insertion order, which SQLite keeps implicitly and
# ``recent_runs`` sorts by); text columns compare bytewise (``COLLATE "C"``, SQLite's BINARY), so
# ORDER BY, MIN and MAX give the same order as SQLite whatever the database's locale. The recall tables keep their turn text and session/node documents;
# their full-text search is PostgreSQL's (tsvector + GIN, store/recall_index.py's dialect part).
SCHEMA = r"""
CREATE COLLATION IF NOT EXISTS nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false);

-- SQLite's json_each(X) over a JSON array, as the stores use it: (key = 0-based index, value as text).
CREATE FUNCTION json_each(list text) RETURNS TABLE (key bigint, value text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT e.ordinality - 1, e.value FROM json_array_elements_text(list::json) WITH ORDINALITY AS e(value, ordinality) $$;
-- SQLite's json_group_array(X) over text: the JSON array (text) of the group's values, '[]' for none.
CREATE FUNCTION rem_json_text_array(items text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT array_to_json(items)::text $$;
CREATE AGGREGATE json_group_array(text) (SFUNC = array_append, STYPE = text[], FINALFUNC = rem_json_text_array, INITCOND = '{}');
-- SQLite's json_valid(X) and json_extract(X, path) for paths of keys and indexes ($.a."b c"[0]).
-- json_extract returns text: a string's value, a number's digits, 1/0 for true/false (as SQLite),
-- NULL for null, an object's or array's JSON text; comparing it with a number is an error here,
-- never a silent mismatch.
CREATE FUNCTION json_valid(doc text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    PERFORM doc::json;
    RETURN doc IS NOT NULL;
EXCEPTION WHEN others THEN
    RETURN false;
END $$;
CREATE FUNCTION rem_json_path(path text) RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT COALESCE(array_agg(COALESCE(r.m[1], r.m[2], r.m[3]) ORDER BY r.n), '{}')
    FROM regexp_matches(path, '\.(?:"([^"]*)"|([^."\[]+))|\[(\d+)\]', 'g') WITH ORDINALITY AS r(m, n) $$;
CREATE FUNCTION json_extract(doc text, path text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE jsonb_typeof(v) WHEN 'string' THEN v #>> '{}' WHEN 'null' THEN NULL
                WHEN 'boolean' THEN CASE WHEN v = 'true'::jsonb THEN '1' ELSE '0' END ELSE v::text END
    FROM (SELECT doc::jsonb #> rem_json_path(path) AS v) AS found $$;

CREATE TABLE nodes (
    id          TEXT COLLATE "C" PRIMARY KEY,
    label       TEXT COLLATE "C" NOT NULL,
    name        TEXT COLLATE "C" NOT NULL,
    properties  TEXT COLLATE "C" NOT NULL DEFAULT '{}' CHECK (properties::json IS NOT NULL),
    created_at  TEXT COLLATE "C" NOT NULL,
    updated_at  TEXT COLLATE "C" NOT NULL
);
CREATE INDEX nodes_label ON nodes(label);
CREATE INDEX nodes_label_name ON nodes(label, name COLLATE nocase);
CREATE TABLE edges (
    source        TEXT COLLATE "C" NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    target        TEXT COLLATE "C" NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    relationship  TEXT COLLATE "C" NOT NULL,
    weight        DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    properties    TEXT COLLATE "C" NOT NULL DEFAULT '{}' CHECK (properties::json IS NOT NULL),
    created_at    TEXT COLLATE "C" NOT NULL,
    updated_at    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (source, target, relationship)
);
CREATE INDEX edges_target ON edges(target);
CREATE TABLE rem_runs (
    run_id                 TEXT COLLATE "C" PRIMARY KEY,
    reason                 TEXT COLLATE "C" NOT NULL,
    mode                   TEXT COLLATE "C" NOT NULL,
    started_at             TEXT COLLATE "C" NOT NULL,
    finished_at            TEXT COLLATE "C",
    outcome                TEXT COLLATE "C" NOT NULL,
    reason_code            TEXT COLLATE "C",
    failure_phase          TEXT COLLATE "C",
    last_successful_phase  TEXT COLLATE "C",
    phases                 TEXT COLLATE "C" NOT NULL DEFAULT '{}',
    lease_owner            TEXT COLLATE "C",
    heartbeat_at           TEXT COLLATE "C",
    rowid                  BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE
);
CREATE INDEX rem_runs_started ON rem_runs(started_at);
CREATE TABLE session_digests (
    session_id         TEXT COLLATE "C" PRIMARY KEY,
    input_revision     TEXT COLLATE "C" NOT NULL,
    ingested_revision  TEXT COLLATE "C",
    digested_revision  TEXT COLLATE "C",
    state              TEXT COLLATE "C" NOT NULL DEFAULT 'undigested'
                       CHECK (state IN ('undigested', 'digested', 'undigestible')),
    attempts           INTEGER NOT NULL DEFAULT 0,
    defer_reason       TEXT COLLATE "C",
    session_created_at TEXT COLLATE "C",
    last_run_id        TEXT COLLATE "C",
    updated_at         TEXT COLLATE "C" NOT NULL
);
CREATE INDEX session_digests_state ON session_digests(state, session_created_at);
CREATE TABLE chunk_results (
    session_id       TEXT COLLATE "C" NOT NULL,
    chunk_id         TEXT COLLATE "C" NOT NULL,
    content_hash     TEXT COLLATE "C" NOT NULL,
    fingerprint      TEXT COLLATE "C" NOT NULL,
    status           TEXT COLLATE "C" NOT NULL CHECK (status IN ('ok', 'failed')),
    error_kind       TEXT COLLATE "C",
    error            TEXT COLLATE "C",
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT COLLATE "C",
    tokens_in        BIGINT NOT NULL DEFAULT 0,
    tokens_out       BIGINT NOT NULL DEFAULT 0,
    latency_ms       DOUBLE PRECISION NOT NULL DEFAULT 0,
    payload          TEXT COLLATE "C",
    run_id           TEXT COLLATE "C",
    updated_at       TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (content_hash, fingerprint)
);
CREATE INDEX chunk_results_session ON chunk_results(session_id, status);
CREATE TABLE communities (
    id            TEXT COLLATE "C" PRIMARY KEY,
    label         TEXT COLLATE "C" NOT NULL,
    label_source  TEXT COLLATE "C" NOT NULL DEFAULT 'default' CHECK (label_source IN ('default', 'model')),
    members       TEXT COLLATE "C" NOT NULL CHECK (members::json IS NOT NULL),
    member_hash   TEXT COLLATE "C" NOT NULL,
    size          INTEGER NOT NULL,
    created_at    TEXT COLLATE "C" NOT NULL,
    updated_at    TEXT COLLATE "C" NOT NULL
);
CREATE INDEX communities_member_hash ON communities(member_hash);
CREATE TABLE merges (
    merge_id    BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    merged_id   TEXT COLLATE "C" NOT NULL,
    into_id     TEXT COLLATE "C" NOT NULL,
    rule        TEXT COLLATE "C" NOT NULL,
    score       DOUBLE PRECISION NOT NULL,
    evidence    TEXT COLLATE "C" NOT NULL DEFAULT '{}' CHECK (evidence::json IS NOT NULL),
    restore     TEXT COLLATE "C" NOT NULL CHECK (restore::json IS NOT NULL),
    created_at  TEXT COLLATE "C" NOT NULL,
    undone_at   TEXT COLLATE "C"
);
CREATE INDEX merges_merged ON merges(merged_id, undone_at);
CREATE INDEX merges_into ON merges(into_id, undone_at);
CREATE TABLE memory_index (
    memory_id   TEXT COLLATE "C" PRIMARY KEY,
    session_id  TEXT COLLATE "C" NOT NULL
);
CREATE INDEX memory_index_session ON memory_index(session_id);
CREATE TABLE identity_candidates (
    node_id       TEXT COLLATE "C" NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    candidate_id  TEXT COLLATE "C" NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    rule          TEXT COLLATE "C" NOT NULL,
    score         DOUBLE PRECISION NOT NULL,
    form          TEXT COLLATE "C" NOT NULL,
    session_id    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (node_id, candidate_id)
);
CREATE INDEX identity_candidates_candidate ON identity_candidates(candidate_id);
CREATE TABLE node_points (
    node_id        TEXT COLLATE "C" NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    anchor         TEXT COLLATE "C" NOT NULL,
    memory_id      TEXT COLLATE "C" NOT NULL DEFAULT '',
    chunk_id       TEXT COLLATE "C" NOT NULL DEFAULT '',
    evidence       TEXT COLLATE "C" NOT NULL DEFAULT '',
    observed_at    TEXT COLLATE "C",
    extracted_for  TEXT COLLATE "C" NOT NULL,
    merge_id       BIGINT
);
CREATE INDEX node_points_owner ON node_points(node_id, anchor);
CREATE INDEX node_points_anchor ON node_points(anchor, memory_id);
CREATE INDEX node_points_merge ON node_points(merge_id) WHERE merge_id IS NOT NULL;
CREATE TABLE edge_points (
    source            TEXT COLLATE "C" NOT NULL,
    target            TEXT COLLATE "C" NOT NULL,
    relationship      TEXT COLLATE "C" NOT NULL,
    anchor            TEXT COLLATE "C" NOT NULL,
    memory_id         TEXT COLLATE "C" NOT NULL DEFAULT '',
    chunk_id          TEXT COLLATE "C" NOT NULL DEFAULT '',
    evidence          TEXT COLLATE "C" NOT NULL DEFAULT '',
    observed_at       TEXT COLLATE "C",
    extracted_source  TEXT COLLATE "C" NOT NULL,
    extracted_target  TEXT COLLATE "C" NOT NULL,
    merge_id          BIGINT,
    FOREIGN KEY (source, target, relationship) REFERENCES edges(source, target, relationship) ON DELETE CASCADE
);
CREATE INDEX edge_points_owner ON edge_points(source, target, relationship, anchor);
CREATE INDEX edge_points_anchor ON edge_points(anchor, memory_id);
CREATE INDEX edge_points_merge ON edge_points(merge_id) WHERE merge_id IS NOT NULL;
CREATE TABLE node_claims (
    node_id        TEXT COLLATE "C" NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    anchor         TEXT COLLATE "C" NOT NULL,
    extracted_for  TEXT COLLATE "C" NOT NULL,
    merge_id       BIGINT,
    description    TEXT COLLATE "C" NOT NULL DEFAULT '',
    aliases        TEXT COLLATE "C" NOT NULL DEFAULT '[]' CHECK (aliases::json IS NOT NULL),
    tags           TEXT COLLATE "C" NOT NULL DEFAULT '[]' CHECK (tags::json IS NOT NULL),
    confidence     DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX node_claims_owner ON node_claims(node_id, anchor);
CREATE INDEX node_claims_anchor ON node_claims(anchor);
CREATE INDEX node_claims_merge ON node_claims(merge_id) WHERE merge_id IS NOT NULL;
CREATE TABLE node_aliases (
    node_id    TEXT COLLATE "C" NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    alias      TEXT COLLATE "C" NOT NULL,
    alias_key  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (node_id, alias)
);
CREATE INDEX node_aliases_key ON node_aliases(alias_key);
CREATE TABLE tombstones (
    kind        TEXT COLLATE "C" NOT NULL CHECK (kind IN ('session', 'memory', 'note')),
    id          TEXT COLLATE "C" NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (kind, id)
);
""" + r"""
-- Recall (SQLite version 7): the same tables; a generated tsvector column with a GIN index stands
-- in for each FTS5 table, and the triggers that keep sessions and node documents current are
-- PL/pgSQL versions of SQLite's.
CREATE TABLE recall_turns (
    id          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    memory_id   TEXT COLLATE "C" NOT NULL UNIQUE,
    session_id  TEXT COLLATE "C" NOT NULL,
    user_id     TEXT COLLATE "C",
    turn_index  INTEGER,
    role        TEXT COLLATE "C",
    created_at  TEXT COLLATE "C",
    text        TEXT COLLATE "C" NOT NULL,
    search      tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX recall_turns_search ON recall_turns USING gin(search);
CREATE TABLE recall_session_users (
    session_id  TEXT COLLATE "C" NOT NULL,
    user_id     TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (user_id, session_id)
);
CREATE INDEX recall_turns_order ON recall_turns(session_id, turn_index);
CREATE TABLE recall_sessions (
    id          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    session_id  TEXT COLLATE "C" NOT NULL UNIQUE,
    user_id     TEXT COLLATE "C",
    created_at  TEXT COLLATE "C",
    title       TEXT COLLATE "C" NOT NULL DEFAULT '',
    summary     TEXT COLLATE "C" NOT NULL DEFAULT '',
    search      tsvector GENERATED ALWAYS AS (
                    setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', summary), 'D')) STORED
);
CREATE INDEX recall_sessions_user ON recall_sessions(user_id);
CREATE INDEX recall_sessions_search ON recall_sessions USING gin(search);
CREATE TABLE recall_node_docs (
    id           BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    node_id      TEXT COLLATE "C" NOT NULL,
    anchor       TEXT COLLATE "C" NOT NULL,
    kind         TEXT COLLATE "C" NOT NULL CHECK (kind IN ('name', 'claim')),
    name         TEXT COLLATE "C" NOT NULL DEFAULT '',
    aliases      TEXT COLLATE "C" NOT NULL DEFAULT '',
    description  TEXT COLLATE "C" NOT NULL DEFAULT '',
    search       tsvector GENERATED ALWAYS AS (
                     setweight(to_tsvector('english', name), 'A') || setweight(to_tsvector('english', aliases), 'B')
                     || setweight(to_tsvector('english', description), 'D')) STORED
);
CREATE INDEX recall_node_docs_node ON recall_node_docs(node_id, kind, anchor);
CREATE INDEX recall_node_docs_search ON recall_node_docs USING gin(search);

CREATE FUNCTION rem_json_words(list text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT COALESCE(string_agg(value, ' '), '') FROM json_each(list) $$;

CREATE FUNCTION rem_recall_sessions_del() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM recall_session_users WHERE session_id = OLD.session_id;
    RETURN NULL;
END $$;
CREATE TRIGGER recall_sessions_ad AFTER DELETE ON recall_sessions FOR EACH ROW EXECUTE FUNCTION rem_recall_sessions_del();

-- SQLite's recall_sessions_from_nodes_ai, recall_node_names_ai and recall_nodes_au in one function.
CREATE FUNCTION rem_recall_nodes_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.label = 'MEMORY' AND NEW.label = 'MEMORY' THEN
        RETURN NULL;
    END IF;
    IF NEW.label = 'SESSION' THEN
        INSERT INTO recall_sessions(session_id, user_id, created_at, title, summary)
            VALUES (NEW.id, NEW.properties::json ->> 'userId', NEW.properties::json ->> 'createdAt',
                    COALESCE(NEW.properties::json ->> 'title', ''), COALESCE(NEW.properties::json ->> 'summary', ''))
            ON CONFLICT (session_id) DO UPDATE SET user_id = excluded.user_id, created_at = excluded.created_at,
                title = excluded.title, summary = excluded.summary
            WHERE recall_sessions.user_id IS DISTINCT FROM excluded.user_id
               OR recall_sessions.created_at IS DISTINCT FROM excluded.created_at
               OR recall_sessions.title != excluded.title OR recall_sessions.summary != excluded.summary;
    ELSIF TG_OP = 'UPDATE' THEN
        DELETE FROM recall_sessions WHERE session_id = OLD.id;
    END IF;
    IF TG_OP = 'INSERT' OR OLD.name != NEW.name OR OLD.label != NEW.label THEN
        IF TG_OP = 'UPDATE' THEN
            DELETE FROM recall_node_docs WHERE node_id = OLD.id AND kind = 'name';
        END IF;
        IF NEW.label NOT IN ('MEMORY', 'SESSION', 'NOTE') THEN
            INSERT INTO recall_node_docs(node_id, anchor, kind, name) VALUES (NEW.id, '', 'name', NEW.name);
        END IF;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER recall_nodes_aiu AFTER INSERT OR UPDATE ON nodes FOR EACH ROW EXECUTE FUNCTION rem_recall_nodes_write();

CREATE FUNCTION rem_recall_nodes_del() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.label = 'MEMORY' THEN
        DELETE FROM recall_turns WHERE memory_id = OLD.id;
    ELSE
        DELETE FROM recall_sessions WHERE session_id = OLD.id;
        DELETE FROM recall_node_docs WHERE node_id = OLD.id AND kind = 'name';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER recall_nodes_ad AFTER DELETE ON nodes FOR EACH ROW EXECUTE FUNCTION rem_recall_nodes_del();

CREATE FUNCTION rem_recall_claims() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        DELETE FROM recall_node_docs WHERE id = (
            SELECT id FROM recall_node_docs WHERE node_id = OLD.node_id AND kind = 'claim' AND anchor = OLD.anchor
              AND description = OLD.description AND aliases = rem_json_words(OLD.aliases) LIMIT 1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO recall_node_docs(node_id, anchor, kind, aliases, description)
            VALUES (NEW.node_id, NEW.anchor, 'claim', rem_json_words(NEW.aliases), NEW.description);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER recall_claims AFTER INSERT OR UPDATE OR DELETE ON node_claims FOR EACH ROW EXECUTE FUNCTION rem_recall_claims();
"""

# Versions after BASELINE whose SQLite text PostgreSQL cannot run even in :func:`postgres_form`:
# their PostgreSQL script.
OVERRIDES: dict[int, str] = {}

# The two spellings a later migration may use that PostgreSQL reads otherwise.
_AUTOINCREMENT_ID = re.compile(r"\bINTEGER\s+PRIMARY\s+KEY\s+AUTOINCREMENT\b", re.IGNORECASE)
_TEXT_COLUMN = re.compile(r"(?im)^(\s*(?:ALTER\s+TABLE\s+\w+\s+ADD\s+COLUMN\s+)?\w+\s+)TEXT\b(?!\s+COLLATE)")


def postgres_form(script: str) -> str:
    """A later SQLite migration as PostgreSQL runs it: an ``INTEGER PRIMARY KEY AUTOINCREMENT`` id
    becomes an identity column, and a text column compares bytewise (``COLLATE "C"``, SQLite's
    BINARY) like every text column of :data:`SCHEMA`. Pure."""
    script = _AUTOINCREMENT_ID.sub("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", script)
    return _TEXT_COLUMN.sub(r'\1TEXT COLLATE "C"', script)


def migrations(sqlite_migrations: Sequence[str]) -> list[tuple[int, str]]:
    """``(version, script)`` for PostgreSQL: :data:`SCHEMA` as version :data:`BASELINE`, then each
    later SQLite migration in :func:`postgres_form`, or its :data:`OVERRIDES` entry."""
    later = [
        (v, OVERRIDES.get(v) or postgres_form(sqlite_migrations[v - 1]))
        for v in range(BASELINE + 1, len(sqlite_migrations) + 1)
    ]
    return [(BASELINE, SCHEMA), *later]


# --- placeholders ------------------------------------------------------------------------
# A string literal, a quoted identifier, a comment, a cast (``::``), a ``?``, a ``:name`` or a ``%``.
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|::|\?|(?<![\w:]):([A-Za-z_]\w*)|%")


@functools.lru_cache(maxsize=4096)
def to_pyformat(sql: str) -> str:
    """``sql`` with SQLite's placeholders in psycopg's style: ``?`` → ``%s``, ``:name`` →
    ``%(name)s``, every ``%`` doubled (psycopg formats the whole text, literals included); what is
    inside literals, quoted names and comments is otherwise untouched. A ``?`` tested for NULL
    (``? IS NULL``) is cast to text: PostgreSQL must know each parameter's type, and a NULL test
    holds for any. Pure."""

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "?":
            return "CAST(%s AS text)" if _NULL_TEST.match(sql, match.end()) else "%s"
        if token == "%":
            return "%%"
        if match.group(1):
            return f"%({match.group(1)})s"
        return token.replace("%", "%%")  # inside a literal, a quoted name or a comment

    return _TOKENS.sub(replace, sql)


_NULL_TEST = re.compile(r"\s+IS\s+(?:NOT\s+)?NULL\b", re.IGNORECASE)


# --- rows --------------------------------------------------------------------------------
class Row(Sequence[Any]):
    """A result row readable like ``sqlite3.Row``: by index, by column name, ``keys()``, iteration
    over the values (so ``tuple(row)`` and ``dict(row)`` work)."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: dict[str, int], values: tuple[Any, ...]) -> None:
        self._names = names
        self._values = values

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._values[self._names[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Row) and self._values == other._values and self._names == other._names

    __hash__ = None  # type: ignore[assignment]

    def keys(self) -> list[str]:
        return list(self._names)

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._names, self._values, strict=True))!r})"


def _row_factory(cursor: psycopg.Cursor[Any]) -> Any:
    names = {column.name: index for index, column in enumerate(cursor.description or ())}
    return lambda values: Row(names, tuple(values))


# --- errors ------------------------------------------------------------------------------
_BUSY_STATES = frozenset({"40001", "40P01", "55P03", "53300"})  # serialization, deadlock, lock, too many connections
_INTERRUPT_STATES = frozenset({"57014"})  # query_canceled (statement_timeout)


def store_error(exc: BaseException) -> DatabaseError:
    """The :mod:`store.errors` class for a psycopg (or pool) error, with its message. Pure."""
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, psycopg.IntegrityError):
        kind: type[DatabaseError] = ConstraintError
    elif state in _BUSY_STATES or isinstance(exc, PoolTimeout):
        kind = DatabaseBusyError
    elif state in _INTERRUPT_STATES:
        kind = QueryInterruptedError
    elif isinstance(exc, psycopg.OperationalError) or state.startswith(("08", "28", "3D")) or state == "42501":
        kind = DatabaseUnreadableError  # cannot connect, authenticate, no such database, no privilege
    else:
        kind = DatabaseError
    message = str(exc).strip() or type(exc).__name__
    return kind(message)


@contextmanager
def psycopg_errors() -> Iterator[None]:
    """The adapter's boundary: a psycopg error raised in the block leaves it as its :func:`store_error`."""
    try:
        yield
    except (psycopg.Error, PoolTimeout) as exc:
        raise store_error(exc) from exc


# ``INSERT INTO t(cols) VALUES (?, …) [ON CONFLICT …]``: one row of placeholders.
_SINGLE_ROW_INSERT = re.compile(
    r"^\s*(INSERT\s+INTO\s+\w+\s*\(([^)]*)\)\s*VALUES\s*)\((\s*\?\s*(?:,\s*\?\s*)*)\)(.*)$", re.IGNORECASE | re.DOTALL
)
_CONFLICT_UPDATE = re.compile(r"ON\s+CONFLICT\s*\(([^)]*)\)\s*DO\s+UPDATE", re.IGNORECASE)
_MAX_PARAMETERS = 30_000  # PostgreSQL takes 65,535 per statement


@dataclass(frozen=True, slots=True)
class _MultiRowPlan:
    """How ``executemany`` of a one-row INSERT becomes one statement per chunk of rows: a round trip
    per chunk instead of per row (most of a bulk write's cost on a server database)."""

    head: str
    width: int
    tail: str
    rows_per_statement: int
    key: tuple[int, ...]  # positions of the ON CONFLICT … DO UPDATE key, if any

    def statement(self, rows: int) -> str:
        """The statement for ``rows`` rows, in PostgreSQL's own ``$n`` placeholders."""
        return _multi_row_statement(self, rows)


@functools.lru_cache(maxsize=256)
def _multi_row_plan(sql: str) -> _MultiRowPlan | None:
    match = _SINGLE_ROW_INSERT.match(sql)
    if match is None or "?" in match.group(4) or "RETURNING" in match.group(4).upper():
        return None
    columns = [c.strip() for c in match.group(2).split(",")]
    width = match.group(3).count("?")
    conflict = _CONFLICT_UPDATE.search(match.group(4))
    key = tuple(columns.index(c.strip()) for c in conflict.group(1).split(",")) if conflict else ()
    return _MultiRowPlan(
        head=match.group(1), width=width, tail=" " + match.group(4).strip(),
        rows_per_statement=max(1, min(1_000, _MAX_PARAMETERS // width)), key=key,
    )


@functools.lru_cache(maxsize=64)
def _multi_row_statement(plan: _MultiRowPlan, rows: int) -> str:
    width = plan.width
    values = ", ".join("(" + ", ".join(f"${r * width + c + 1}" for c in range(width)) + ")" for r in range(rows))
    return plan.head + values + plan.tail


class _Cursor:
    """A cursor whose statements take ``?`` placeholders and whose failures are :mod:`store.errors`."""

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor
        self._rowcount: int | None = None  # of a multi-row executemany (several statements)

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        self._rowcount = None
        with psycopg_errors():
            self._cursor.execute(to_pyformat(sql), params)  # always formatted: a literal % was doubled
        return self

    def executemany(self, sql: str, params_seq: Any) -> _Cursor:
        rows = list(params_seq)
        with psycopg_errors():
            if not rows:
                self._cursor = self._cursor.connection.cursor()  # rowcount 0, like sqlite3
                return self
            plan = _multi_row_plan(sql)
            if plan is None:
                self._cursor.executemany(to_pyformat(sql), rows)
                return self
            affected = 0
            raw = psycopg.RawCursor(self._cursor.connection)  # $n placeholders: no client-side parsing
            for start in range(0, len(rows), plan.rows_per_statement):
                chunk = rows[start : start + plan.rows_per_statement]
                if plan.key and len({tuple(r[i] for i in plan.key) for r in chunk}) < len(chunk):
                    # A key twice in one statement is an error for DO UPDATE: row by row, as SQLite does.
                    self._cursor.executemany(to_pyformat(sql), chunk)
                    affected += max(0, self._cursor.rowcount)
                else:
                    raw.execute(plan.statement(len(chunk)), [value for row in chunk for value in row])
                    affected += max(0, raw.rowcount)
            self._rowcount = affected
        return self

    @property
    def rowcount(self) -> int:
        if self._rowcount is not None:
            return self._rowcount
        return max(0, self._cursor.rowcount)

    def fetchone(self) -> Any:
        with psycopg_errors():
            return self._cursor.fetchone() if self._cursor.description else None

    def fetchall(self) -> list[Any]:
        with psycopg_errors():
            return self._cursor.fetchall() if self._cursor.description else []

    def fetchmany(self, size: int = 1) -> list[Any]:
        with psycopg_errors():
            return self._cursor.fetchmany(size) if self._cursor.description else []

    def __iter__(self) -> Iterator[Any]:
        if not self._cursor.description:
            return
        while True:
            with psycopg_errors():
                rows = self._cursor.fetchmany(500)
            if not rows:
                return
            yield from rows


class _Connection:
    """What the stores call ``conn``: ``execute``/``executemany`` returning a :class:`_Cursor`."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def cursor(self) -> _Cursor:
        return _Cursor(self.raw.cursor())

    def execute(self, sql: str, params: Any = (), /) -> _Cursor:
        return self.cursor().execute(sql, params)

    def executemany(self, sql: str, params_seq: Any, /) -> _Cursor:
        return self.cursor().executemany(sql, params_seq)


# --- pools -------------------------------------------------------------------------------
_pools: dict[str, ConnectionPool] = {}
_pools_lock = threading.Lock()
POOL_MAX_SIZE = 8
_STREAM_PAGE = 2_000


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.autocommit = True
    # Strings are sent as ``text`` (not psycopg's default "unknown"): a parameter then has a type
    # wherever it appears, and ``json_each(?)`` finds the schema's text function.
    conn.adapters.register_dumper(str, StrDumper)
    conn.row_factory = _row_factory  # type: ignore[assignment]


def _reset(conn: psycopg.Connection[Any]) -> None:
    # A connection comes back as it left: session settings (read-only, timeouts) do not leak to the
    # next borrower.
    conn.execute("RESET ALL")


def pool_for(url: str, *, timeout: float) -> ConnectionPool:
    """The process's pool for ``url`` (created on first use, after one direct connection showed
    the server answers: a pool would retry a refused connection until its timeout)."""
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            with psycopg_errors():
                psycopg.connect(url, connect_timeout=max(1, int(timeout))).close()
            pool = ConnectionPool(
                url, min_size=1, max_size=POOL_MAX_SIZE, open=False, configure=_configure, reset=_reset,
                kwargs={"connect_timeout": max(1, int(timeout))}, name="rem-cycle", timeout=timeout,
            )
            pool.open(wait=False)
            _pools[url] = pool
        return pool


def _discard_pool(url: str) -> None:
    with _pools_lock:
        pool = _pools.pop(url, None)
    if pool is not None:
        pool.close(timeout=1.0)


def close_pools() -> None:
    """Close every pool (their connections and threads); a later open starts a new one."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


atexit.register(close_pools)


def redacted(url: str) -> str:
    """``url`` without its password (for messages and logs). Pure."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


class PostgresDatabase:
    """One pooled PostgreSQL connection shared by the stores, with the interface of
    :class:`store.db.Database`: ``transaction()`` nests (only the outermost block commits),
    ``query()``, ``conn``, ``schema_version``, ``migrate()``, ``close()``.

    Reads outside a transaction run in autocommit mode. ``readonly`` sessions refuse writes
    (``default_transaction_read_only``) and never migrate; ``timeout`` bounds waiting for a
    connection and for a lock. A database whose schema is newer than this code is refused
    (:class:`SchemaTooNewError`) before anything is written; migrations run under an advisory lock,
    so several workers starting at once apply each version once.
    """

    dialect: Dialect = POSTGRESQL

    def __init__(self, url: str, *, timeout: float = 30.0, readonly: bool = False, known_versions: int,
                 sqlite_migrations: Sequence[str] = ()) -> None:
        self.url = url
        self.location = redacted(url)
        self._known = known_versions
        self._migrations = migrations(sqlite_migrations) if sqlite_migrations else []
        self._lock = threading.RLock()
        self._depth = 0
        try:
            self._pool = pool_for(url, timeout=timeout)
            with psycopg_errors():
                raw = self._pool.getconn(timeout=timeout)
        except DatabaseBusyError as exc:  # the pool could not connect within the timeout
            _discard_pool(url)  # no pool left retrying in the background for a server that is down
            raise DatabaseUnreadableError(f"cannot connect to the PostgreSQL database {self.location}: {exc}") from exc
        except DatabaseUnreadableError as exc:  # refused, unknown host, authentication, no such database
            raise DatabaseUnreadableError(f"cannot connect to the PostgreSQL database {self.location}: {exc}") from exc
        self._raw: psycopg.Connection[Any] | None = raw
        self.conn = _Connection(raw)
        try:
            with psycopg_errors():
                raw.execute(f"SET lock_timeout = {int(timeout * 1000)}")
                if readonly:
                    raw.execute("SET default_transaction_read_only = on")
            self._refuse_newer_schema()
            if not readonly:
                self.migrate()
        except BaseException:
            self.close()
            raise

    @contextmanager
    def transaction(self) -> Iterator[_Connection]:
        """Run the block in one transaction (``BEGIN`` at the outermost level). A nested block is a
        savepoint: when it fails, what it wrote is undone and the transaction stays usable, so a
        caller that handles the error goes on as on SQLite (where a failed statement is undone
        alone); PostgreSQL would otherwise refuse every later statement of the transaction."""
        with self._lock:
            outermost = self._depth == 0
            savepoint = f"rem_{self._depth}"
            self.conn.execute("BEGIN" if outermost else f"SAVEPOINT {savepoint}")
            self._depth += 1
            try:
                yield self.conn
            except BaseException:
                self._depth -= 1
                if outermost:
                    self._rollback()
                else:
                    self.conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                raise
            self._depth -= 1
            self.conn.execute("COMMIT" if outermost else f"RELEASE SAVEPOINT {savepoint}")

    def _rollback(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        except DatabaseError:
            pass  # the connection broke: the server rolled back; the original error is what matters

    def query(self, sql: str, params: tuple | list | dict = ()) -> list[Any]:
        """Run a read and return all rows."""
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def stream(self, sql: str, params: tuple | list | dict = ()) -> Iterator[Any]:
        """The rows of a read, fetched in pages from a server-side cursor as they are consumed
        (a client-side cursor would hold every row at once). ``WITH HOLD``: the cursor outlives
        the autocommit statement that opened it; it is closed when the iteration ends."""
        with self._lock, psycopg_errors():
            cursor = self.conn.raw.cursor(name=f"rem_stream_{uuid.uuid4().hex}", withhold=True)
            cursor.execute(to_pyformat(sql), params)
        try:
            while True:
                with self._lock, psycopg_errors():
                    page = cursor.fetchmany(_STREAM_PAGE)
                if not page:
                    return
                yield from page
        finally:
            with self._lock:
                cursor.close()

    def set_deadline(self, seconds: float) -> None:
        """Stop each later statement that runs longer than ``seconds`` (:class:`QueryInterruptedError`;
        PostgreSQL bounds statements one by one, where SQLite's deadline is one moment for all)."""
        with self._lock, psycopg_errors():
            self.conn.raw.execute(f"SET statement_timeout = {max(1, int(seconds * 1000))}")

    @property
    def engine(self) -> str:
        """``sqlite`` or ``postgresql``: for the few callers that choose SQL by engine."""
        return self.dialect.name

    def table_exists(self, name: str) -> bool:
        """``True`` when the schema has a table ``name`` (in the connection's search path)."""
        return bool(self.query("SELECT 1 WHERE to_regclass(?) IS NOT NULL", (name,)))

    @property
    def schema_version(self) -> int:
        if not self.table_exists("schema_version"):
            return 0
        return int(self.query("SELECT COALESCE(MAX(version), 0) FROM schema_version")[0][0])

    def _refuse_newer_schema(self) -> None:
        version = self.schema_version
        if version > self._known:
            raise SchemaTooNewError(
                f"{self.location} has schema version {version}, newer than this rem-cycle knows ({self._known}); "
                "upgrade rem-cycle (or restore a backup made by this version) — the database was not changed"
            )

    def migrate(self) -> None:
        """Apply every migration newer than the database's version, each in its own transaction,
        holding a transaction-scoped advisory lock (concurrent starters wait, then find it done)."""
        for version, script in self._migrations:
            with self.transaction() as conn:
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('rem-cycle schema'))")
                conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)")
                if conn.execute("SELECT 1 FROM schema_version WHERE version >= ?", (version,)).fetchone():
                    continue
                with psycopg_errors():
                    self.conn.raw.execute(script)  # type: ignore[arg-type]  # several statements, no parameters
                conn.execute("INSERT INTO schema_version(version) VALUES (?)", (version,))

    def integrity_check(self) -> str:
        """``"ok"`` when the server answers and the schema's tables are readable (PostgreSQL checks
        its pages itself; ``amcheck`` is the tool for a deeper look)."""
        self.query("SELECT COUNT(*) FROM schema_version")
        return "ok"

    def close(self) -> None:
        with self._lock:
            raw, self._raw = self._raw, None
            if raw is not None:
                if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    try:
                        raw.rollback()
                    except psycopg.Error:
                        pass
                self._pool.putconn(raw)


def backup_postgres(url: str, destination: str | Path) -> dict[str, object]:
    """Dump the database at ``url`` with ``pg_dump`` (custom format: ``pg_restore`` reads it) to
    ``destination``: written beside it and renamed into place only after ``pg_restore --list``
    read it back, so a failed backup never leaves a half-written file under that name. One
    consistent snapshot (pg_dump's own transaction), safe while cycles write. The password goes
    to pg_dump through its environment, never its command line. Returns ``{path, bytes, integrity}``;
    :class:`DatabaseError` when ``pg_dump`` is missing or fails (its message says what to do)."""
    pg_dump, pg_restore = shutil.which("pg_dump"), shutil.which("pg_restore")
    if pg_dump is None or pg_restore is None:
        raise DatabaseError(
            "backup of a PostgreSQL graph needs pg_dump and pg_restore on PATH (Debian/Ubuntu: apt-get install "
            "postgresql-client; use a version at least the server's), or back the database up with your "
            "PostgreSQL's own tools (pg_dump, pg_basebackup, your provider's snapshots)"
        )
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    partial.unlink(missing_ok=True)
    parts = urlsplit(url)
    env = {**os.environ}
    if parts.password is not None:
        env["PGPASSWORD"] = unquote(parts.password)
        credentials, host = parts.netloc.rsplit("@", 1)
        url = urlunsplit(parts._replace(netloc=f"{credentials.split(':', 1)[0]}@{host}"))
    schemas = re.findall(r"-c\s*search_path=([\w$]+)", unquote(dict(parse_qsl(parts.query)).get("options", "")))
    command = [pg_dump, "--format=custom", "--no-owner", f"--file={partial}", *(f"--schema={s}" for s in schemas), f"--dbname={url}"]
    try:
        dumped = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600, check=False)
        if dumped.returncode != 0:
            raise DatabaseError(f"pg_dump failed: {dumped.stderr.strip() or dumped.returncode}")
        listed = subprocess.run([pg_restore, "--list", str(partial)], capture_output=True, text=True, timeout=600, check=False)
        if listed.returncode != 0 or "TABLE" not in listed.stdout:
            raise DatabaseUnreadableError(f"backup failed its check (pg_restore --list): {listed.stderr.strip()}")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(destination)
    return {"path": str(destination), "bytes": destination.stat().st_size, "integrity": "ok"}
