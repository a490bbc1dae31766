"""The worker's SQLite database: connection, transactions and forward-only schema migrations.

The graph (``nodes``, ``edges``) and the run state (``rem_runs``, ``session_digests``,
``chunk_results``) share one file so that a session's graph writes and its digest record commit in
one transaction. Table and column names are a public interface: other tools read them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from store.confined import check_confined, confined_dir
from store.dialect import SQLITE, Dialect
from store.errors import (
    ConstraintError,
    DatabaseBusyError,
    DatabaseError,
    DatabaseUnreadableError,
    QueryInterruptedError,
    SchemaTooNewError,
)

# A LIMIT that keeps every row, in a form both engines accept (SQLite's -1 is an error on PostgreSQL).
UNLIMITED = 2**63 - 1

# Values bound per ``IN (…)`` list: old SQLite builds allow 999 variables per statement, and a
# statement has a few parameters of its own. Every IN list is built by :func:`in_batches`.
SQL_IN_BATCH = 900


def in_batches(values: Iterable[Any], *, lists: int = 1) -> Iterator[tuple[list[Any], str]]:
    """``(batch, placeholders)`` for each batch of ``values``, small enough that a statement using
    the batch in ``lists`` IN lists stays within SQLite's variable limit, whatever the input size."""
    items = list(values)
    size = max(1, SQL_IN_BATCH // max(1, lists))
    for start in range(0, len(items), size):
        batch = items[start : start + size]
        yield batch, ",".join("?" * len(batch))

# Files SQLite keeps beside the database (WAL mode; the rollback journal of older files).
_COMPANIONS = ("-wal", "-shm", "-journal")

# Each entry upgrades the schema by one version; never edit a released entry, append a new one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE nodes (
        id          TEXT PRIMARY KEY,
        label       TEXT NOT NULL,
        name        TEXT NOT NULL,
        properties  TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(properties)),
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL
    );
    CREATE INDEX nodes_label ON nodes(label);
    CREATE INDEX nodes_label_name ON nodes(label, name COLLATE NOCASE);
    CREATE TABLE edges (
        source        TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        target        TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        relationship  TEXT NOT NULL,
        weight        REAL NOT NULL DEFAULT 1.0,
        properties    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(properties)),
        created_at    TEXT NOT NULL,
        updated_at    TEXT NOT NULL,
        PRIMARY KEY (source, target, relationship)
    );
    CREATE INDEX edges_target ON edges(target);
    CREATE TABLE rem_runs (
        run_id                 TEXT PRIMARY KEY,
        reason                 TEXT NOT NULL,
        mode                   TEXT NOT NULL,
        started_at             TEXT NOT NULL,
        finished_at            TEXT,
        outcome                TEXT NOT NULL,
        reason_code            TEXT,
        failure_phase          TEXT,
        last_successful_phase  TEXT,
        phases                 TEXT NOT NULL DEFAULT '{}',
        lease_owner            TEXT,
        heartbeat_at           TEXT
    );
    CREATE INDEX rem_runs_started ON rem_runs(started_at);
    CREATE TABLE session_digests (
        session_id         TEXT PRIMARY KEY,
        input_revision     TEXT NOT NULL,
        ingested_revision  TEXT,
        digested_revision  TEXT,
        state              TEXT NOT NULL DEFAULT 'undigested'
                           CHECK (state IN ('undigested', 'digested', 'undigestible')),
        attempts           INTEGER NOT NULL DEFAULT 0,
        defer_reason       TEXT,
        session_created_at TEXT,
        last_run_id        TEXT,
        updated_at         TEXT NOT NULL
    );
    CREATE INDEX session_digests_state ON session_digests(state, session_created_at);
    CREATE TABLE chunk_results (
        session_id       TEXT NOT NULL,
        chunk_id         TEXT NOT NULL,
        content_hash     TEXT NOT NULL,
        fingerprint      TEXT NOT NULL,
        status           TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
        error_kind       TEXT,
        error            TEXT,
        attempts         INTEGER NOT NULL DEFAULT 0,
        next_attempt_at  TEXT,
        tokens_in        INTEGER NOT NULL DEFAULT 0,
        tokens_out       INTEGER NOT NULL DEFAULT 0,
        latency_ms       REAL NOT NULL DEFAULT 0,
        payload          TEXT,
        run_id           TEXT,
        updated_at       TEXT NOT NULL,
        PRIMARY KEY (content_hash, fingerprint)
    );
    CREATE INDEX chunk_results_session ON chunk_results(session_id, status);
    """,
    # 2: knowledge quality — detected communities (stable ids, cached labels) and identity merges
    # (each one recorded with what is needed to undo it).
    """
    CREATE TABLE communities (
        id            TEXT PRIMARY KEY,
        label         TEXT NOT NULL,
        label_source  TEXT NOT NULL DEFAULT 'default' CHECK (label_source IN ('default', 'model')),
        members       TEXT NOT NULL CHECK (json_valid(members)),
        member_hash   TEXT NOT NULL,
        size          INTEGER NOT NULL,
        created_at    TEXT NOT NULL,
        updated_at    TEXT NOT NULL
    );
    CREATE INDEX communities_member_hash ON communities(member_hash);
    CREATE TABLE merges (
        merge_id    INTEGER PRIMARY KEY AUTOINCREMENT,
        merged_id   TEXT NOT NULL,
        into_id     TEXT NOT NULL,
        rule        TEXT NOT NULL,
        score       REAL NOT NULL,
        evidence    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(evidence)),
        restore     TEXT NOT NULL CHECK (json_valid(restore)),
        created_at  TEXT NOT NULL,
        undone_at   TEXT
    );
    CREATE INDEX merges_merged ON merges(merged_id, undone_at);
    CREATE INDEX merges_into ON merges(into_id, undone_at);
    """,
    # 3: which session each ingested memory row belongs to, so the cheap scan can read ids only.
    """
    CREATE TABLE memory_index (
        memory_id   TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL
    );
    CREATE INDEX memory_index_session ON memory_index(session_id);
    """,
    # 4: pairs identity resolution found ambiguous and did not merge, kept for review.
    """
    CREATE TABLE identity_candidates (
        node_id       TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        candidate_id  TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        rule          TEXT NOT NULL,
        score         REAL NOT NULL,
        form          TEXT NOT NULL,
        session_id    TEXT NOT NULL,
        PRIMARY KEY (node_id, candidate_id)
    );
    CREATE INDEX identity_candidates_candidate ON identity_candidates(candidate_id);
    """,
    # 5: provenance points as rows of their own tables, never a list inside a node's JSON (DESIGN
    # §3): a commit, merge, unmerge or forget touches only the rows of its own anchor. ``anchor`` is
    # the ``session:``/``note:`` id; '' in memory_id/evidence = none (NULL would defeat equality).
    # ``extracted_for`` is the node (``extracted_source``/``_target`` the edge ends) the point was
    # first extracted for, ``merge_id`` the merge that moved it here. ``node_claims`` holds what each
    # anchor said of a node (description, aliases, tags, confidence; anchor '' = said before this
    # version); a node's facts are their combination. ``node_aliases`` indexes aliases for look-ups.
    # The data of version 4 is moved in place: points out of ``properties``, merges' restore records
    # to row marks.
    """
    CREATE TABLE node_points (
        node_id        TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        anchor         TEXT NOT NULL,
        memory_id      TEXT NOT NULL DEFAULT '',
        chunk_id       TEXT NOT NULL DEFAULT '',
        evidence       TEXT NOT NULL DEFAULT '',
        observed_at    TEXT,
        extracted_for  TEXT NOT NULL,
        merge_id       INTEGER
    );
    CREATE INDEX node_points_owner ON node_points(node_id, anchor);
    CREATE INDEX node_points_anchor ON node_points(anchor, memory_id);
    CREATE INDEX node_points_merge ON node_points(merge_id) WHERE merge_id IS NOT NULL;
    CREATE TABLE edge_points (
        source            TEXT NOT NULL,
        target            TEXT NOT NULL,
        relationship      TEXT NOT NULL,
        anchor            TEXT NOT NULL,
        memory_id         TEXT NOT NULL DEFAULT '',
        chunk_id          TEXT NOT NULL DEFAULT '',
        evidence          TEXT NOT NULL DEFAULT '',
        observed_at       TEXT,
        extracted_source  TEXT NOT NULL,
        extracted_target  TEXT NOT NULL,
        merge_id          INTEGER,
        FOREIGN KEY (source, target, relationship) REFERENCES edges(source, target, relationship) ON DELETE CASCADE
    );
    CREATE INDEX edge_points_owner ON edge_points(source, target, relationship, anchor);
    CREATE INDEX edge_points_anchor ON edge_points(anchor, memory_id);
    CREATE INDEX edge_points_merge ON edge_points(merge_id) WHERE merge_id IS NOT NULL;
    CREATE TABLE node_claims (
        node_id        TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        anchor         TEXT NOT NULL,
        extracted_for  TEXT NOT NULL,
        merge_id       INTEGER,
        description    TEXT NOT NULL DEFAULT '',
        aliases        TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(aliases)),
        tags           TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags)),
        confidence     REAL NOT NULL DEFAULT 0
    );
    CREATE INDEX node_claims_owner ON node_claims(node_id, anchor);
    CREATE INDEX node_claims_anchor ON node_claims(anchor);
    CREATE INDEX node_claims_merge ON node_claims(merge_id) WHERE merge_id IS NOT NULL;
    CREATE TABLE node_aliases (
        node_id    TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        alias      TEXT NOT NULL,
        alias_key  TEXT NOT NULL,
        PRIMARY KEY (node_id, alias)
    ) WITHOUT ROWID;
    CREATE INDEX node_aliases_key ON node_aliases(alias_key);
    INSERT INTO node_points(node_id, anchor, memory_id, chunk_id, evidence, observed_at, extracted_for)
        SELECT n.id, COALESCE(json_extract(p.value, '$.session'), ''), COALESCE(json_extract(p.value, '$.memory'), ''),
               COALESCE(json_extract(p.value, '$.chunk_id'), ''), COALESCE(json_extract(p.value, '$.evidence'), ''),
               (SELECT json_extract(m.properties, '$.createdAt') FROM nodes AS m WHERE m.id = json_extract(p.value, '$.memory')),
               n.id
        FROM nodes AS n, json_each(n.properties, '$.provenance') AS p
        WHERE json_type(n.properties, '$.provenance') = 'array' AND p.type = 'object';
    INSERT INTO edge_points(source, target, relationship, anchor, memory_id, chunk_id, evidence, observed_at,
                            extracted_source, extracted_target)
        SELECT e.source, e.target, e.relationship, COALESCE(json_extract(p.value, '$.session'), ''),
               COALESCE(json_extract(p.value, '$.memory'), ''), COALESCE(json_extract(p.value, '$.chunk_id'), ''),
               COALESCE(json_extract(p.value, '$.evidence'), ''),
               (SELECT json_extract(m.properties, '$.createdAt') FROM nodes AS m WHERE m.id = json_extract(p.value, '$.memory')),
               e.source, e.target
        FROM edges AS e, json_each(e.properties, '$.provenance') AS p
        WHERE json_type(e.properties, '$.provenance') = 'array' AND p.type = 'object';
    UPDATE node_points SET extracted_for = moved.merged_id, merge_id = moved.merge_id
        FROM (SELECT m.merge_id, m.merged_id, m.into_id, COALESCE(json_extract(p.value, '$.session'), '') AS anchor,
                     COALESCE(json_extract(p.value, '$.memory'), '') AS memory_id,
                     COALESCE(json_extract(p.value, '$.chunk_id'), '') AS chunk_id,
                     COALESCE(json_extract(p.value, '$.evidence'), '') AS evidence
              FROM merges AS m, json_each(m.restore, '$.added_points') AS p WHERE m.undone_at IS NULL) AS moved
        WHERE node_points.node_id = moved.into_id AND node_points.anchor = moved.anchor
          AND node_points.memory_id = moved.memory_id AND node_points.chunk_id = moved.chunk_id
          AND node_points.evidence = moved.evidence;
    UPDATE edge_points SET
            extracted_source = CASE WHEN moved.source = moved.merged_id THEN moved.merged_id ELSE edge_points.extracted_source END,
            extracted_target = CASE WHEN moved.target = moved.merged_id THEN moved.merged_id ELSE edge_points.extracted_target END,
            merge_id = moved.merge_id
        FROM (SELECT m.merge_id, m.merged_id, m.into_id, json_extract(e.value, '$.source') AS source,
                     json_extract(e.value, '$.target') AS target, json_extract(e.value, '$.relationship') AS relationship,
                     COALESCE(json_extract(p.value, '$.session'), '') AS anchor,
                     COALESCE(json_extract(p.value, '$.memory'), '') AS memory_id,
                     COALESCE(json_extract(p.value, '$.chunk_id'), '') AS chunk_id,
                     COALESCE(json_extract(p.value, '$.evidence'), '') AS evidence
              FROM merges AS m, json_each(m.restore, '$.edges') AS e, json_each(e.value, '$.properties.provenance') AS p
              WHERE m.undone_at IS NULL AND json_type(e.value, '$.properties.provenance') = 'array') AS moved
        WHERE edge_points.source = CASE WHEN moved.source = moved.merged_id THEN moved.into_id ELSE moved.source END
          AND edge_points.target = CASE WHEN moved.target = moved.merged_id THEN moved.into_id ELSE moved.target END
          AND edge_points.relationship = moved.relationship AND edge_points.anchor = moved.anchor
          AND edge_points.memory_id = moved.memory_id AND edge_points.chunk_id = moved.chunk_id
          AND edge_points.evidence = moved.evidence;
    INSERT INTO node_claims(node_id, anchor, extracted_for, merge_id, description, aliases, tags, confidence)
        SELECT m.into_id, '', m.merged_id, m.merge_id,
               COALESCE(json_extract(m.restore, '$.node.properties.description'), ''),
               (SELECT json_group_array(DISTINCT a.value) FROM (
                   SELECT value FROM json_each(m.restore, '$.node.properties.aliases') WHERE type = 'text'
                   UNION SELECT value FROM json_each(m.restore, '$.added_aliases') WHERE type = 'text') AS a),
               (SELECT json_group_array(DISTINCT t.value) FROM json_each(m.restore, '$.node.properties.tags') AS t WHERE t.type = 'text'),
               COALESCE(json_extract(m.restore, '$.node.properties.confidence'), 0)
        FROM merges AS m JOIN nodes AS n ON n.id = m.into_id WHERE m.undone_at IS NULL;
    INSERT INTO node_claims(node_id, anchor, extracted_for, description, aliases, tags, confidence)
        SELECT n.id, '', n.id,
               COALESCE((SELECT json_extract(m.restore, '$.description_before') FROM merges AS m
                         WHERE m.into_id = n.id AND m.undone_at IS NULL
                           AND json_extract(m.restore, '$.description_before') IS NOT NULL
                           AND json_extract(m.restore, '$.node.properties.description') IS json_extract(n.properties, '$.description')
                         ORDER BY m.merge_id LIMIT 1), json_extract(n.properties, '$.description'), ''),
               (SELECT json_group_array(a.value) FROM json_each(n.properties, '$.aliases') AS a
                WHERE a.type = 'text' AND a.value NOT IN (
                    SELECT x.value FROM merges AS m, json_each(m.restore, '$.added_aliases') AS x
                    WHERE m.into_id = n.id AND m.undone_at IS NULL)),
               (SELECT json_group_array(t.value) FROM json_each(n.properties, '$.tags') AS t
                WHERE t.type = 'text' AND t.value NOT IN (
                    SELECT x.value FROM merges AS m, json_each(m.restore, '$.added_tags') AS x
                    WHERE m.into_id = n.id AND m.undone_at IS NULL)),
               COALESCE(json_extract(n.properties, '$.confidence'), 0)
        FROM nodes AS n WHERE n.id IN (SELECT into_id FROM merges WHERE undone_at IS NULL);
    INSERT OR IGNORE INTO node_aliases(node_id, alias, alias_key)
        SELECT n.id, a.value, casefold(a.value) FROM nodes AS n, json_each(n.properties, '$.aliases') AS a
        WHERE json_type(n.properties, '$.aliases') = 'array' AND a.type = 'text';
    UPDATE nodes SET properties = json_remove(properties, '$.provenance') WHERE json_type(properties, '$.provenance') IS NOT NULL;
    UPDATE edges SET properties = json_remove(properties, '$.provenance') WHERE json_type(properties, '$.provenance') IS NOT NULL
    """,
    # 6: what ``rem-cycle forget`` removed, so that a later cycle does not bring it back while the
    # source rows still exist in Chroma.
    """
    CREATE TABLE tombstones (
        kind        TEXT NOT NULL CHECK (kind IN ('session', 'memory', 'note')),
        id          TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        PRIMARY KEY (kind, id)
    ) WITHOUT ROWID
    """,
    # 7: recall's full-text indexes (FTS5, store/recall_index.py). ``recall_turns`` holds each turn's
    # text (ingest writes it in the session's transaction: the graph keeps only a hash; its FTS rows
    # are written by RecallIndex.index_turns in one statement per batch, twice as fast as a trigger
    # per row, and removed by a trigger when a turn goes; ``recall_session_users`` lists the users
    # a session's turns name, for sessions whose own row names nobody); sessions
    # and node names/claims are copied by triggers, so every write path — commit, merge, unmerge,
    # forget, node deletion — keeps them current without knowing they exist. Existing sessions and
    # nodes are indexed here; existing turns' text is not in the database: `rem-cycle reindex`
    # reads it from Chroma once.
    """
    CREATE TABLE recall_turns (
        id          INTEGER PRIMARY KEY,
        memory_id   TEXT NOT NULL UNIQUE,
        session_id  TEXT NOT NULL,
        user_id     TEXT,
        turn_index  INTEGER,
        role        TEXT,
        created_at  TEXT,
        text        TEXT NOT NULL
    );
    CREATE TABLE recall_session_users (
        session_id  TEXT NOT NULL,
        user_id     TEXT NOT NULL,
        PRIMARY KEY (user_id, session_id)
    ) WITHOUT ROWID;
    CREATE INDEX recall_turns_order ON recall_turns(session_id, turn_index);
    CREATE VIRTUAL TABLE recall_turns_fts USING fts5(
        text, content='recall_turns', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2', detail='column'
    );
    CREATE TRIGGER recall_turns_ad AFTER DELETE ON recall_turns BEGIN
        INSERT INTO recall_turns_fts(recall_turns_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    CREATE TABLE recall_sessions (
        id          INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL UNIQUE,
        user_id     TEXT,
        created_at  TEXT,
        title       TEXT NOT NULL DEFAULT '',
        summary     TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX recall_sessions_user ON recall_sessions(user_id);
    CREATE VIRTUAL TABLE recall_sessions_fts USING fts5(
        title, summary, content='recall_sessions', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER recall_sessions_ai AFTER INSERT ON recall_sessions BEGIN
        INSERT INTO recall_sessions_fts(rowid, title, summary) VALUES (new.id, new.title, new.summary);
    END;
    CREATE TRIGGER recall_sessions_ad AFTER DELETE ON recall_sessions BEGIN
        INSERT INTO recall_sessions_fts(recall_sessions_fts, rowid, title, summary) VALUES ('delete', old.id, old.title, old.summary);
        DELETE FROM recall_session_users WHERE session_id = old.session_id;
    END;
    CREATE TRIGGER recall_sessions_au AFTER UPDATE ON recall_sessions BEGIN
        INSERT INTO recall_sessions_fts(recall_sessions_fts, rowid, title, summary) VALUES ('delete', old.id, old.title, old.summary);
        INSERT INTO recall_sessions_fts(rowid, title, summary) VALUES (new.id, new.title, new.summary);
    END;
    CREATE TABLE recall_node_docs (
        id           INTEGER PRIMARY KEY,
        node_id      TEXT NOT NULL,
        anchor       TEXT NOT NULL,
        kind         TEXT NOT NULL CHECK (kind IN ('name', 'claim')),
        name         TEXT NOT NULL DEFAULT '',
        aliases      TEXT NOT NULL DEFAULT '',
        description  TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX recall_node_docs_node ON recall_node_docs(node_id, kind, anchor);
    CREATE VIRTUAL TABLE recall_node_docs_fts USING fts5(
        name, aliases, description, content='recall_node_docs', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2', detail='column'
    );
    CREATE TRIGGER recall_node_docs_ai AFTER INSERT ON recall_node_docs BEGIN
        INSERT INTO recall_node_docs_fts(rowid, name, aliases, description) VALUES (new.id, new.name, new.aliases, new.description);
    END;
    CREATE TRIGGER recall_node_docs_ad AFTER DELETE ON recall_node_docs BEGIN
        INSERT INTO recall_node_docs_fts(recall_node_docs_fts, rowid, name, aliases, description)
            VALUES ('delete', old.id, old.name, old.aliases, old.description);
    END;
    CREATE TRIGGER recall_sessions_from_nodes_ai AFTER INSERT ON nodes WHEN new.label = 'SESSION' BEGIN
        INSERT INTO recall_sessions(session_id, user_id, created_at, title, summary)
            VALUES (new.id, json_extract(new.properties, '$.userId'), json_extract(new.properties, '$.createdAt'),
                    COALESCE(json_extract(new.properties, '$.title'), ''), COALESCE(json_extract(new.properties, '$.summary'), ''));
    END;
    CREATE TRIGGER recall_node_names_ai AFTER INSERT ON nodes WHEN new.label NOT IN ('MEMORY', 'SESSION', 'NOTE') BEGIN
        INSERT INTO recall_node_docs(node_id, anchor, kind, name) VALUES (new.id, '', 'name', new.name);
    END;
    CREATE TRIGGER recall_nodes_au AFTER UPDATE ON nodes WHEN old.label != 'MEMORY' OR new.label != 'MEMORY' BEGIN
        DELETE FROM recall_sessions WHERE session_id = old.id AND new.label != 'SESSION';
        INSERT INTO recall_sessions(session_id, user_id, created_at, title, summary)
            SELECT new.id, json_extract(new.properties, '$.userId'), json_extract(new.properties, '$.createdAt'),
                   COALESCE(json_extract(new.properties, '$.title'), ''), COALESCE(json_extract(new.properties, '$.summary'), '')
            WHERE new.label = 'SESSION'
            ON CONFLICT(session_id) DO UPDATE SET user_id = excluded.user_id, created_at = excluded.created_at,
                title = excluded.title, summary = excluded.summary
            WHERE recall_sessions.user_id IS NOT excluded.user_id OR recall_sessions.created_at IS NOT excluded.created_at
               OR recall_sessions.title != excluded.title OR recall_sessions.summary != excluded.summary;
        DELETE FROM recall_node_docs WHERE node_id = old.id AND kind = 'name' AND (old.name != new.name OR old.label != new.label);
        INSERT INTO recall_node_docs(node_id, anchor, kind, name)
            SELECT new.id, '', 'name', new.name
            WHERE new.label NOT IN ('MEMORY', 'SESSION', 'NOTE') AND (old.name != new.name OR old.label != new.label);
    END;
    CREATE TRIGGER recall_turns_from_nodes_ad AFTER DELETE ON nodes WHEN old.label = 'MEMORY' BEGIN
        DELETE FROM recall_turns WHERE memory_id = old.id;
    END;
    CREATE TRIGGER recall_nodes_ad AFTER DELETE ON nodes WHEN old.label != 'MEMORY' BEGIN
        DELETE FROM recall_sessions WHERE session_id = old.id;
        DELETE FROM recall_node_docs WHERE node_id = old.id AND kind = 'name';
    END;
    CREATE TRIGGER recall_claims_ai AFTER INSERT ON node_claims BEGIN
        INSERT INTO recall_node_docs(node_id, anchor, kind, aliases, description)
            VALUES (new.node_id, new.anchor, 'claim', (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(new.aliases)), new.description);
    END;
    CREATE TRIGGER recall_claims_ad AFTER DELETE ON node_claims BEGIN
        DELETE FROM recall_node_docs WHERE id = (
            SELECT id FROM recall_node_docs WHERE node_id = old.node_id AND kind = 'claim' AND anchor = old.anchor
              AND description = old.description
              AND aliases = (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(old.aliases)) LIMIT 1);
    END;
    CREATE TRIGGER recall_claims_au AFTER UPDATE ON node_claims BEGIN
        DELETE FROM recall_node_docs WHERE id = (
            SELECT id FROM recall_node_docs WHERE node_id = old.node_id AND kind = 'claim' AND anchor = old.anchor
              AND description = old.description
              AND aliases = (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(old.aliases)) LIMIT 1);
        INSERT INTO recall_node_docs(node_id, anchor, kind, aliases, description)
            VALUES (new.node_id, new.anchor, 'claim', (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(new.aliases)), new.description);
    END;
    INSERT INTO recall_sessions(session_id, user_id, created_at, title, summary)
        SELECT id, json_extract(properties, '$.userId'), json_extract(properties, '$.createdAt'),
               COALESCE(json_extract(properties, '$.title'), ''), COALESCE(json_extract(properties, '$.summary'), '')
        FROM nodes WHERE label = 'SESSION';
    INSERT INTO recall_node_docs(node_id, anchor, kind, name)
        SELECT id, '', 'name', name FROM nodes WHERE label NOT IN ('MEMORY', 'SESSION', 'NOTE');
    INSERT INTO recall_node_docs(node_id, anchor, kind, aliases, description)
        SELECT node_id, anchor, 'claim', (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(aliases)), description
        FROM node_claims
    """,
)


# SQLite's primary result codes (https://sqlite.org/rescode.html) that name a kind of failure.
_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
_INTERRUPT_CODE = 9  # SQLITE_INTERRUPT: a progress handler stopped the statement
_UNREADABLE_CODES = frozenset({3, 10, 11, 14, 23, 26})  # PERM, IOERR, CORRUPT, CANTOPEN, AUTH, NOTADB


def store_error(exc: sqlite3.Error) -> DatabaseError:
    """The :mod:`store.errors` class for an ``sqlite3`` error, with the same message. Pure."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if isinstance(exc, sqlite3.IntegrityError):
        kind: type[DatabaseError] = ConstraintError
    elif primary in _BUSY_CODES:
        kind = DatabaseBusyError
    elif primary == _INTERRUPT_CODE:
        kind = QueryInterruptedError
    elif primary in _UNREADABLE_CODES:
        kind = DatabaseUnreadableError
    else:
        kind = DatabaseError
    return kind(str(exc))


@contextmanager
def sqlite_errors() -> Iterator[None]:
    """The adapter's boundary: an ``sqlite3`` error raised in the block leaves it as its
    :func:`store_error`, the original kept as ``__cause__``."""
    try:
        yield
    except sqlite3.Error as exc:
        raise store_error(exc) from exc


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _translating(method: _Method) -> _Method:
    """``method`` raising :func:`store_error` instead of ``sqlite3`` errors (cheaper per call than
    entering :func:`sqlite_errors`, which matters for the cursor's ``__next__``)."""

    def translated(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as exc:
            raise store_error(exc) from exc

    return translated  # type: ignore[return-value]


_new_cursor = sqlite3.Connection.cursor


class _Cursor(sqlite3.Cursor):
    """A cursor whose statements and fetches raise :mod:`store.errors` (a read can fail mid-way)."""

    execute = _translating(sqlite3.Cursor.execute)
    executemany = _translating(sqlite3.Cursor.executemany)
    fetchone = _translating(sqlite3.Cursor.fetchone)
    fetchmany = _translating(sqlite3.Cursor.fetchmany)
    fetchall = _translating(sqlite3.Cursor.fetchall)
    __next__ = _translating(sqlite3.Cursor.__next__)


class _Connection(sqlite3.Connection):
    """The connection the stores use (``Database.conn``): every statement runs on a
    :class:`_Cursor`, so no ``sqlite3`` error leaves the adapter."""

    def cursor(self, factory: type[sqlite3.Cursor] = _Cursor) -> sqlite3.Cursor:  # type: ignore[override]
        return _new_cursor(self, factory)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        return _new_cursor(self, _Cursor).execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:  # type: ignore[override]
        return _new_cursor(self, _Cursor).executemany(sql, parameters)

    commit = _translating(sqlite3.Connection.commit)
    rollback = _translating(sqlite3.Connection.rollback)
    backup = _translating(sqlite3.Connection.backup)


# Page cache of the writing connection, KiB. A commit touches a few index leaves per node and edge
# it names; with SQLite's default 2 MiB they are re-read through the OS once the file outgrows it,
# and the commit cost creeps with the graph's size (bench/RESULTS.md, "Provenance rows").
CACHE_KIB = 65_536


class Database:
    """One SQLite connection in WAL mode with foreign keys, shared by the graph and run-state stores.

    ``transaction()`` nests: only the outermost block commits (or rolls back on an exception).
    The connection may be used from worker threads (``anyio.to_thread``) but never from two at once;
    a lock enforces that.

    The file and SQLite's companions (``-wal``, ``-shm``, ``-journal``) must be regular files
    reached without links inside ``root`` (default: the database's directory), and a file whose
    schema is newer than this code is refused (:class:`SchemaTooNewError`) before anything is written.

    ``conn`` is a :class:`_Connection`: whatever fails — opening, a statement, a fetch — raises the
    :mod:`store.errors` family, never ``sqlite3``'s own exceptions.
    """

    dialect: Dialect = SQLITE

    def __init__(self, path: str | Path, *, timeout: float = 30.0, readonly: bool = False, root: str | Path | None = None) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._lock = threading.RLock()
        self._depth = 0
        root = Path(root) if root is not None else self.path.parent
        try:
            if not readonly:
                confined_dir(self.path.parent, root=root)
            # SQLite opens these by name and would follow a link planted at any of them.
            for suffix in ("", *_COMPANIONS):
                check_confined(self.path.with_name(self.path.name + suffix), root=root)
        except OSError as exc:  # callers handle a database they cannot open as a DatabaseError
            raise DatabaseUnreadableError(f"cannot open the database {self.path}: {exc.strerror or exc}") from exc
        with sqlite_errors():  # connect() itself raises sqlite3 errors (no such directory, not a database)
            if readonly:
                # Readers beside a running cycle (metrics, readiness): never create, migrate or write.
                self.conn = sqlite3.connect(
                    f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout,
                    isolation_level=None, check_same_thread=False, factory=_Connection,
                )
            else:
                self.conn = sqlite3.connect(
                    self.path, timeout=timeout, isolation_level=None, check_same_thread=False, factory=_Connection
                )
        self.conn.row_factory = sqlite3.Row
        if readonly:
            self._refuse_newer_schema()
            return
        self._refuse_newer_schema()
        register_functions(self.conn)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self.migrate()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run the block in one transaction (``BEGIN IMMEDIATE`` at the outermost level)."""
        with self._lock:
            outermost = self._depth == 0
            if outermost:
                self.conn.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self.conn
            except BaseException:
                self._depth -= 1
                if outermost:
                    self.conn.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outermost:
                self.conn.execute("COMMIT")

    def query(self, sql: str, params: tuple | list | dict = ()) -> list[sqlite3.Row]:
        """Run a read and return all rows."""
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def stream(self, sql: str, params: tuple | list | dict = ()) -> Iterator[sqlite3.Row]:
        """The rows of a read, fetched as they are consumed (never all held at once)."""
        return iter(self.conn.execute(sql, params))

    def set_deadline(self, seconds: float) -> None:
        """Stop a statement still running ``seconds`` from now (:class:`QueryInterruptedError`)."""
        deadline = time.monotonic() + seconds
        self.conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)

    @property
    def engine(self) -> str:
        """``sqlite`` or ``postgresql``: for the few callers that choose SQL by engine."""
        return self.dialect.name

    def table_exists(self, name: str) -> bool:
        """``True`` when the file has a table ``name``."""
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = ?", (name,)))

    @property
    def schema_version(self) -> int:
        return self.conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]

    def _refuse_newer_schema(self) -> None:
        """Raise :class:`SchemaTooNewError` (closing the connection) when the file's schema version
        is newer than :data:`MIGRATIONS`: this code would misread it and could damage it."""
        try:
            known = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
            version = self.schema_version if known else 0
        except BaseException:
            self.conn.close()
            raise
        if version > len(MIGRATIONS):
            self.conn.close()
            raise SchemaTooNewError(
                f"{self.path} has schema version {version}, newer than this rem-cycle knows ({len(MIGRATIONS)}); "
                "upgrade rem-cycle (or restore a backup made by this version) — the file was not changed"
            )

    def migrate(self) -> None:
        """Apply every migration newer than the file's schema version, each in its own transaction."""
        self.conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)")
        for version, script in enumerate(MIGRATIONS, start=1):
            if version <= self.schema_version:
                continue
            with self.transaction() as conn:
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version(version) VALUES (?)", (version,))

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` — ``"ok"`` when the file is sound."""
        return self.query("PRAGMA integrity_check")[0][0]

    def close(self) -> None:
        with self._lock:
            self.conn.close()


def alias_key(alias: str) -> str:
    """The look-up key of an alias or name: its Unicode case fold (``node_aliases.alias_key``)."""
    return alias.casefold()


def register_functions(conn: sqlite3.Connection) -> None:
    """SQL functions the schema's migrations use: ``casefold(text)`` = :func:`alias_key`."""
    conn.create_function("casefold", 1, lambda text: alias_key(text) if isinstance(text, str) else text, deterministic=True)


def _statements(script: str) -> list[str]:
    # executescript() would commit our open transaction; split instead, at the ';' that completes a
    # statement (a trigger's body holds several).
    statements: list[str] = []
    pending = ""
    for part in script.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                statements.append(pending.strip())
            pending = ""
    if pending.strip(" \n;"):
        statements.append(pending.strip())
    return statements


def backup_database(source: str | Path, destination: str | Path) -> dict[str, object]:
    """Copy the live database at ``source`` to ``destination`` with SQLite's online backup API.

    Safe while a cycle writes: the copy is one consistent snapshot (WAL readers never block the
    writer). The copy is written beside ``destination`` and renamed into place only after its
    ``integrity_check`` passed, so a failed backup never leaves a half-written file under that name.
    Returns ``{path, bytes, integrity}``.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    partial.unlink(missing_ok=True)
    with sqlite_errors():
        src = sqlite3.connect(f"{Path(source).resolve().as_uri()}?mode=ro", uri=True, timeout=30.0, factory=_Connection)
    try:
        with sqlite_errors():
            dst = sqlite3.connect(partial, factory=_Connection)
        try:
            # pages=-1: one step, one read snapshot; stepping would restart on every concurrent write.
            src.backup(dst, pages=-1)
            # A self-contained single file: no -wal/-shm companions to forget when copying it away.
            dst.execute("PRAGMA journal_mode=DELETE")
            integrity = dst.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            dst.close()
    finally:
        src.close()
    if integrity != "ok":
        partial.unlink(missing_ok=True)
        raise DatabaseUnreadableError(f"backup failed integrity_check: {integrity}")
    partial.replace(destination)
    return {"path": str(destination), "bytes": destination.stat().st_size, "integrity": integrity}
