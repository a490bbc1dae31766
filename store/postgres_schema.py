"""The PostgreSQL schema of the graph database and its migrations (:mod:`store.postgres` applies them).

Version :data:`BASELINE` is SQLite's versions 1-7 as one script (no PostgreSQL database predates
them); every later version is SQLite's own migration in :func:`postgres_form`, or its
:data:`OVERRIDES` entry when PostgreSQL needs another text.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from store.db import (
    BACKFILL_COUNTS_VERSION,
    FOLD_FILLER_VERSION,
    REASON_DIGEST_VERSION,
    SEARCH_BOUND_VERSION,
    SEARCH_FOLD_MIGRATION,
    SEARCH_SHARE_VERSION,
    TURN_INDEX_VERSION,
    WORD_SPLIT_MIGRATION,
    backfill_counts_script,
    backfill_reason,
    counted_backfill,
)
from store.dialect import POSTGRESQL
from store.textfold import HANGUL_FILLER, postgres_functions

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

def _count_triggers(table: str, column: str, kind: str) -> str:
    """Migration 10's PostgreSQL triggers (a PL/pgSQL function and two triggers) that append each
    change of ``table``'s ``column`` to ``graph_count_changes`` as ``kind``."""
    return f"""CREATE FUNCTION rem_count_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO graph_count_changes(kind, name, delta) VALUES ('{kind}', OLD.{column}, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO graph_count_changes(kind, name, delta) VALUES ('{kind}', NEW.{column}, 1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER graph_counts_{table}_aid AFTER INSERT OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION rem_count_{table}();
CREATE TRIGGER graph_counts_{table}_au AFTER UPDATE OF {column} ON {table} FOR EACH ROW
    WHEN (OLD.{column} IS DISTINCT FROM NEW.{column}) EXECUTE FUNCTION rem_count_{table}();
"""


# Versions after BASELINE whose SQLite text PostgreSQL cannot run even in :func:`postgres_form`:
# their PostgreSQL script.
OVERRIDES: dict[int, str] = {
    # 31 (store.db.REASON_DIGEST_MIGRATION): ``edge_points_reason`` keyed by the edge's digest, so
    # that an entry is at most ~2 kB (a 500-character justification of 4-byte characters), and
    # ``edge_points_owner`` by the edge's key alone, no longer than the ``edges`` key it refers to
    # (the anchor after it, up to 208 bytes, put it over the limit under a long REM_SEMANTIC_TYPES
    # type; no read seeks an edge's points by key and anchor: by anchor, ``edge_points_anchor``).
    REASON_DIGEST_VERSION: f"""
DROP INDEX edge_points_reason;
CREATE INDEX edge_points_reason ON edge_points({POSTGRESQL.edge_digest("source", "target", "relationship")}, justification);
DROP INDEX edge_points_owner;
CREATE INDEX edge_points_owner ON edge_points(source, target, relationship)
""",
    # 29 (store.db.TURN_INDEX_MIGRATION): a turn index past 32 bits (up to 2**53 - 1) fits.
    TURN_INDEX_VERSION: "ALTER TABLE recall_turns ALTER COLUMN turn_index TYPE BIGINT",
    # 28 (store.db.BACKFILL_COUNTS_MIGRATION): the back-fill count triggers as a PL/pgSQL function.
    BACKFILL_COUNTS_VERSION: backfill_counts_script(POSTGRESQL, key='TEXT COLLATE "C"') + f"""CREATE FUNCTION rem_count_backfill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        IF {counted_backfill(POSTGRESQL, "OLD")} THEN
            INSERT INTO backfill_count_changes(kind, name, delta) VALUES (OLD.label, {backfill_reason(POSTGRESQL, "OLD.properties")}, -1);
        END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF {counted_backfill(POSTGRESQL, "NEW")} THEN
            INSERT INTO backfill_count_changes(kind, name, delta) VALUES (NEW.label, {backfill_reason(POSTGRESQL, "NEW.properties")}, 1);
        END IF;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER backfill_counts_nodes_ai AFTER INSERT ON nodes FOR EACH ROW
    WHEN ({counted_backfill(POSTGRESQL, "NEW")}) EXECUTE FUNCTION rem_count_backfill();
CREATE TRIGGER backfill_counts_nodes_ad AFTER DELETE ON nodes FOR EACH ROW
    WHEN ({counted_backfill(POSTGRESQL, "OLD")}) EXECUTE FUNCTION rem_count_backfill();
CREATE TRIGGER backfill_counts_nodes_au AFTER UPDATE OF label, properties ON nodes FOR EACH ROW
    WHEN (({counted_backfill(POSTGRESQL, "OLD")} OR {counted_backfill(POSTGRESQL, "NEW")})
          AND (OLD.label IS DISTINCT FROM NEW.label
               OR {backfill_reason(POSTGRESQL, "OLD.properties")} IS DISTINCT FROM {backfill_reason(POSTGRESQL, "NEW.properties")}))
    EXECUTE FUNCTION rem_count_backfill();
""",
    # 27 (store.db.FIRST_CHUNK_MIGRATION): the first-chunk indexes on PostgreSQL's expression.
    27: f"""
CREATE INDEX lazy_edges_first_chunk ON lazy_edges({POSTGRESQL.queue_first_chunk()}, id);
CREATE INDEX lazy_edges_dead_first_chunk ON lazy_edges_dead({POSTGRESQL.queue_first_chunk()}, id)
""",
    # 21 (store.db.FOLD_RANK_MIGRATION): nothing to do. ``ts_rank`` counts a word by the positions
    # the ``search`` column keeps of the folded text (migration 18): the folded words already.
    21: "SELECT 1",
    # 10 (store.db.GRAPH_COUNTS_MIGRATION): the count triggers as PL/pgSQL functions.
    10: r"""
CREATE TABLE graph_counts (
    kind   TEXT COLLATE "C" NOT NULL CHECK (kind IN ('node', 'edge')),
    name   TEXT COLLATE "C" NOT NULL,
    total  BIGINT NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE TABLE graph_count_changes (
    kind   TEXT COLLATE "C" NOT NULL,
    name   TEXT COLLATE "C" NOT NULL,
    delta  INTEGER NOT NULL
);
""" + _count_triggers("nodes", "label", "node") + _count_triggers("edges", "relationship", "edge") + r"""INSERT INTO graph_counts(kind, name, total) SELECT 'node', label, COUNT(*) FROM nodes GROUP BY label;
INSERT INTO graph_counts(kind, name, total) SELECT 'edge', relationship, COUNT(*) FROM edges GROUP BY relationship;
CREATE TABLE chroma_scan_state (
    collection    TEXT COLLATE "C" PRIMARY KEY,
    location      TEXT COLLATE "C" NOT NULL,
    rows_applied  BIGINT NOT NULL,
    tail_ids      TEXT COLLATE "C" NOT NULL,
    full_scan_at  TEXT COLLATE "C" NOT NULL
);
INSERT INTO rem_counters(name, value) VALUES ('identity', 0), ('identity_at_commit', 0), ('identity_epoch', 0),
    ('instance', floor(random() * 9007199254740991)::bigint);
CREATE FUNCTION rem_count_identity() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rem_counters SET value = value + 1 WHERE name = 'identity';
    RETURN NULL;
END $$;
CREATE TRIGGER identity_nodes_ai AFTER INSERT ON nodes FOR EACH ROW
    WHEN (NEW.label NOT IN ('MEMORY', 'SESSION', 'NOTE')) EXECUTE FUNCTION rem_count_identity();
CREATE TRIGGER identity_nodes_ad AFTER DELETE ON nodes FOR EACH ROW
    WHEN (OLD.label NOT IN ('MEMORY', 'SESSION', 'NOTE')) EXECUTE FUNCTION rem_count_identity();
CREATE TRIGGER identity_nodes_au AFTER UPDATE OF name, label ON nodes FOR EACH ROW
    WHEN ((OLD.name IS DISTINCT FROM NEW.name OR OLD.label IS DISTINCT FROM NEW.label)
          AND (OLD.label NOT IN ('MEMORY', 'SESSION', 'NOTE') OR NEW.label NOT IN ('MEMORY', 'SESSION', 'NOTE')))
    EXECUTE FUNCTION rem_count_identity();
CREATE TRIGGER identity_aliases AFTER INSERT OR UPDATE OR DELETE ON node_aliases FOR EACH ROW EXECUTE FUNCTION rem_count_identity();
""",
    # 13 (store.db.RUN_COUNTS_MIGRATION): the run-count triggers as a PL/pgSQL function.
    13: r"""
CREATE INDEX rem_runs_outcome_finished ON rem_runs(outcome, finished_at);
CREATE INDEX rem_runs_running ON rem_runs(started_at) WHERE outcome = 'running';
CREATE TABLE rem_run_counts (
    outcome  TEXT COLLATE "C" PRIMARY KEY,
    total    BIGINT NOT NULL
);
INSERT INTO rem_run_counts(outcome, total) SELECT outcome, COUNT(*) FROM rem_runs GROUP BY outcome;
CREATE FUNCTION rem_count_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE rem_run_counts SET total = total - 1 WHERE outcome = OLD.outcome;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO rem_run_counts(outcome, total) VALUES (NEW.outcome, 1)
            ON CONFLICT (outcome) DO UPDATE SET total = rem_run_counts.total + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER rem_run_counts_aid AFTER INSERT OR DELETE ON rem_runs FOR EACH ROW EXECUTE FUNCTION rem_count_runs();
CREATE TRIGGER rem_run_counts_au AFTER UPDATE OF outcome ON rem_runs FOR EACH ROW
    WHEN (OLD.outcome IS DISTINCT FROM NEW.outcome) EXECUTE FUNCTION rem_count_runs();
""",
    # 17 (store.db.STATE_COUNTS_MIGRATION): the state-count triggers as PL/pgSQL functions.
    17: r"""
CREATE TABLE run_stats (
    series  TEXT COLLATE "C" NOT NULL,
    bound   TEXT COLLATE "C" NOT NULL,
    value   DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (series, bound)
);
INSERT INTO rem_counters(name, value) VALUES ('run_stats', 0);
CREATE INDEX session_digests_updated ON session_digests(state, updated_at);
ALTER TABLE session_digests ADD COLUMN turns INTEGER NOT NULL DEFAULT 0;
UPDATE session_digests SET turns = (SELECT COUNT(*) FROM memory_index AS m WHERE m.session_id = session_digests.session_id);
CREATE INDEX session_digests_no_turns ON session_digests(turns) WHERE turns = 0;
CREATE FUNCTION rem_count_turns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE session_digests SET turns = turns - 1 WHERE session_id = OLD.session_id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        UPDATE session_digests SET turns = turns + 1 WHERE session_id = NEW.session_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_index_turns_aid AFTER INSERT OR DELETE ON memory_index FOR EACH ROW EXECUTE FUNCTION rem_count_turns();
CREATE TRIGGER memory_index_turns_au AFTER UPDATE OF session_id ON memory_index FOR EACH ROW
    WHEN (OLD.session_id IS DISTINCT FROM NEW.session_id) EXECUTE FUNCTION rem_count_turns();
CREATE TABLE state_counts (
    kind        TEXT COLLATE "C" NOT NULL CHECK (kind IN ('session', 'chunk')),
    name        TEXT COLLATE "C" NOT NULL,
    total       BIGINT NOT NULL,
    tokens_in   BIGINT NOT NULL DEFAULT 0,
    tokens_out  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, name)
);
CREATE TABLE state_count_changes (
    kind        TEXT COLLATE "C" NOT NULL,
    name        TEXT COLLATE "C" NOT NULL,
    delta       INTEGER NOT NULL,
    tokens_in   BIGINT NOT NULL DEFAULT 0,
    tokens_out  BIGINT NOT NULL DEFAULT 0
);
INSERT INTO state_counts(kind, name, total) SELECT 'session', state, COUNT(*) FROM session_digests GROUP BY state;
INSERT INTO state_counts(kind, name, total, tokens_in, tokens_out)
    SELECT 'chunk', status, COUNT(*), COALESCE(SUM(tokens_in), 0), COALESCE(SUM(tokens_out), 0) FROM chunk_results GROUP BY status;
CREATE FUNCTION rem_count_digests() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO state_count_changes(kind, name, delta) VALUES ('session', OLD.state, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO state_count_changes(kind, name, delta) VALUES ('session', NEW.state, 1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER state_counts_digests_aid AFTER INSERT OR DELETE ON session_digests FOR EACH ROW EXECUTE FUNCTION rem_count_digests();
CREATE TRIGGER state_counts_digests_au AFTER UPDATE OF state ON session_digests FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION rem_count_digests();
CREATE FUNCTION rem_count_chunks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO state_count_changes(kind, name, delta, tokens_in, tokens_out) VALUES ('chunk', OLD.status, -1, -OLD.tokens_in, -OLD.tokens_out);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO state_count_changes(kind, name, delta, tokens_in, tokens_out) VALUES ('chunk', NEW.status, 1, NEW.tokens_in, NEW.tokens_out);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER state_counts_chunks_aid AFTER INSERT OR DELETE ON chunk_results FOR EACH ROW EXECUTE FUNCTION rem_count_chunks();
CREATE TRIGGER state_counts_chunks_au AFTER UPDATE OF status, tokens_in, tokens_out ON chunk_results FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.tokens_in IS DISTINCT FROM NEW.tokens_in
          OR OLD.tokens_out IS DISTINCT FROM NEW.tokens_out) EXECUTE FUNCTION rem_count_chunks();
""",
}



# The characters of a text PostgreSQL's ``search`` columns index (migration 30): a ``tsvector``
# holds at most 1 MB (1,048,575 bytes), and every word costs its lexeme, a 4-byte entry and its
# positions. The worst measured of 100,000 characters, distinct two-character words outside the
# Basic Multilingual Plane, is a 489 kB vector (ASCII words: 211 kB). A longer text (a pasted log)
# is found by the words of its first 100,000 characters on PostgreSQL, by all of them on SQLite.
INDEXED_TEXT_MOST = 100_000

# What each text column of a recall table indexes since migration 32 (audit27): the columns of one
# row share INDEXED_TEXT_MOST, as the 1 MB holds the words of all of them. A character folds to at
# most 9 bytes of a word (a Tibetan vowel sign; an Arabic ligature of a word, 8), so 100,000
# characters are at most 900 kB whatever they are; a session's title and summary each of 100,000
# characters of such words were 1.4 MB under migration 30's bound of each text alone.
SHARED_TEXT_MOST: dict[str, int] = {
    "text": INDEXED_TEXT_MOST,
    "title": 10_000, "summary": INDEXED_TEXT_MOST - 10_000,
    "name": 10_000, "aliases": 10_000, "description": INDEXED_TEXT_MOST - 20_000,
}


def search_vectors(function: str, *, most: int | Mapping[str, int] | None = None) -> dict[str, str]:
    """Each recall table's ``search`` column: the ``tsvector`` of its text columns as the SQL
    function ``function`` gives them (weights A, B, D in the columns' order), of the first ``most``
    characters of each when given (a mapping: each column's own). Pure."""
    def vector(column: str) -> str:
        bound = most.get(column) if isinstance(most, Mapping) else most
        text = f"{function}({column})" if bound is None else f"{function}(left({column}, {bound}))"
        return f"to_tsvector('english', {text})"

    return {
        "recall_turns": vector("text"),
        "recall_sessions": f"setweight({vector('title')}, 'A') || setweight({vector('summary')}, 'D')",
        "recall_node_docs": f"setweight({vector('name')}, 'A') || setweight({vector('aliases')}, 'B') "
                            f"|| setweight({vector('description')}, 'D')",
    }


def _search_columns(function: str, *, most: int | Mapping[str, int] | None = None, tables: Collection[str] | None = None) -> str:
    """The folding functions (:func:`store.textfold.postgres_functions`), then each recall table's
    (or each of ``tables``') ``search`` column made again from ``function``'s text
    (:func:`search_vectors`, ``most``), with its GIN index: every row's vector computed anew, the
    table rewritten."""
    return postgres_functions() + "".join(
        f"ALTER TABLE {table} DROP COLUMN search;\n"
        f"ALTER TABLE {table} ADD COLUMN search tsvector GENERATED ALWAYS AS ({vector}) STORED;\n"
        f"CREATE INDEX {table}_search ON {table} USING gin(search);\n"
        for table, vector in search_vectors(function, most=most).items() if tables is None or table in tables
    )


# 30 (store.db.SEARCH_BOUND_MIGRATION): the ``search`` columns of each text's first
# INDEXED_TEXT_MOST characters (written here: the columns' text is this module's).
OVERRIDES[SEARCH_BOUND_VERSION] = _search_columns("rem_index_text", most=INDEXED_TEXT_MOST)
# 32 (store.db.SEARCH_SHARE_MIGRATION): the columns of a session's and a node document's row share
# the bound (SHARED_TEXT_MOST); the turns' single column is as migration 30 made it.
SHARED_TABLES = ("recall_sessions", "recall_node_docs")
OVERRIDES[SEARCH_SHARE_VERSION] = _search_columns("rem_index_text", most=SHARED_TEXT_MOST, tables=SHARED_TABLES)
# 34 (store.db.FOLD_FILLER_MIGRATION): the folding functions keep U+11A7 (store.textfold.NFC_STEP);
# a row holding one is written again, which makes its generated ``search`` column again (each
# table read once; every other row's column is what the new functions give it).
RECALL_TEXT_COLUMNS: dict[str, tuple[str, ...]] = {
    "recall_turns": ("text",), "recall_sessions": ("title", "summary"), "recall_node_docs": ("name", "aliases", "description"),
}
OVERRIDES[FOLD_FILLER_VERSION] = postgres_functions() + "".join(
    f"UPDATE {table} SET {columns[0]} = {columns[0]} WHERE "
    + " OR ".join(f"strpos({column}, chr({ord(HANGUL_FILLER)})) > 0" for column in columns) + ";\n"
    for table, columns in RECALL_TEXT_COLUMNS.items()
)


# Versions whose PostgreSQL script is written from store.textfold's rule (each SQLite migration
# text, compared as OVERRIDES compares versions): migration 18 (store.db.SEARCH_FOLD_MIGRATION)
# generates the ``search`` columns from the folded text — ``to_tsvector`` over the raw text folded
# no accent, and case by the server's locale only; migration 26 (store.db.WORD_SPLIT_MIGRATION)
# from the folded text's words as SQLite's tokenizer cuts them (``rem_index_text``): PostgreSQL's
# parser kept ``recall.py`` (a host), ``store/lazy_queue.py`` (a file), a URL, an e-mail address
# and ``1.2.3`` (a version) as one token each, which no query word matched (pgfts26).
_FOLDED_COLUMNS: dict[str, str] = {SEARCH_FOLD_MIGRATION: "rem_search_text", WORD_SPLIT_MIGRATION: "rem_index_text"}


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
        (v, _search_columns(_FOLDED_COLUMNS[script]) if script in _FOLDED_COLUMNS else OVERRIDES.get(v) or postgres_form(script))
        for v, script in enumerate(sqlite_migrations[BASELINE:], start=BASELINE + 1)
    ]
    return [(BASELINE, SCHEMA), *later]
