"""Taking the newest migrations out of a test database, so that a test can reopen it as a release
before them wrote it and see those migrations applied (tests/test_migrations_*.py and the tests of
earlier migrations, which must take the later ones out first)."""

from __future__ import annotations

from typing import Any

from store.db import (
    APART_BY_VERSION, APART_VERSION, BACKFILL_COUNTS_VERSION, CHUNK_TEXT_VERSION, FOLD_FILLER_VERSION, SEARCH_BOUND_VERSION, REASON_DIGEST_VERSION, SEARCH_SHARE_VERSION, SUPPRESSIONS_VERSION, ERASE_AT_COMMIT_VERSION, FIRST_CHUNK_VERSION, FOLD_RANK_VERSION, LAST_ROW_VERSION, MIGRATIONS, POINTS_BY_MEMORY_VERSION, QUEUE_WITHDRAWALS_VERSION,
    SEARCH_FOLD_VERSION, TEXT_CLAIMS_VERSION, TURN_INDEX_VERSION, WORD_SPLIT_VERSION,
    _statements,
)
from store.postgres_schema import INDEXED_TEXT_MOST, SHARED_TABLES, search_vectors
from store.textfold import NFC_STEP, postgres_functions

RUN_COUNTS_VERSION = 13
COMMUNITY_NAMES_VERSION = 14
EDGE_JUSTIFICATIONS_VERSION = 15
IDENTITY_VERDICTS_VERSION = 16
STATE_COUNTS_VERSION = 17
RECALL_INDEX_VERSION = 7  # the full-text tables and triggers that SEARCH_FOLD_VERSION replaces

_FOLDED_FTS = ("recall_turns_fts", "recall_sessions_fts", "recall_node_docs_fts")
_FOLDED_TRIGGERS = ("recall_turns_ad", "recall_sessions_ai", "recall_sessions_ad", "recall_sessions_au",
                    "recall_node_docs_ai", "recall_node_docs_ad")
# Those tables and triggers as version 7 made them (unfolded text, SQLite's own tokenizer folding).
_UNFOLDED_RECALL = tuple(
    statement for statement in _statements(MIGRATIONS[RECALL_INDEX_VERSION - 1])
    if any(statement.startswith((f"CREATE VIRTUAL TABLE {name} ", f"CREATE TRIGGER {name} ")) for name in (*_FOLDED_FTS, *_FOLDED_TRIGGERS))
)
assert len(_UNFOLDED_RECALL) == len(_FOLDED_FTS) + len(_FOLDED_TRIGGERS)
# The position-less tables FOLD_RANK_VERSION replaces, as SEARCH_FOLD_VERSION made them, and how
# each is filled with its rows' folded text.
_RANKED_FTS = {"recall_turns_fts": "INSERT INTO recall_turns_fts(rowid, text) SELECT id, rem_search_text(text) FROM recall_turns",
               "recall_node_docs_fts": "INSERT INTO recall_node_docs_fts(rowid, name, aliases, description) SELECT id, "
                                       "rem_search_text(name), rem_search_text(aliases), rem_search_text(description) FROM recall_node_docs"}
_POSITIONLESS = tuple(statement for statement in _statements(MIGRATIONS[SEARCH_FOLD_VERSION - 1])
                      if statement.startswith(tuple(f"CREATE VIRTUAL TABLE {name} " for name in _RANKED_FTS)))
assert len(_POSITIONLESS) == len(_RANKED_FTS) and all("detail='column'" in s for s in _POSITIONLESS)
_UNFOLDED_SEARCH = {
    "recall_turns": "to_tsvector('english', text)",
    "recall_sessions": "setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', summary), 'D')",
    "recall_node_docs": "setweight(to_tsvector('english', name), 'A') || setweight(to_tsvector('english', aliases), 'B') "
                        "|| setweight(to_tsvector('english', description), 'D')",
}


def _search_columns(vectors: dict[str, str]) -> tuple[str, ...]:
    """PostgreSQL: each recall table's ``search`` column made again as ``vectors`` gives it, with its index."""
    return tuple(statement for table, vector in vectors.items() for statement in (
        f"ALTER TABLE {table} DROP COLUMN search",
        f"ALTER TABLE {table} ADD COLUMN search tsvector GENERATED ALWAYS AS ({vector}) STORED",
        f"CREATE INDEX {table}_search ON {table} USING gin(search)"))


# The folding functions before FOLD_FILLER_VERSION: PostgreSQL's NFC over the whole text, which
# drops a U+11A7 after a Hangul syllable; one statement a function.
_FILLER_DROPPING_FUNCTIONS = tuple(
    f"CREATE OR REPLACE FUNCTION {function}" for function in postgres_functions().replace(
        NFC_STEP, "    IF d IS NOT NFC NORMALIZED THEN\n        d := normalize(d, NFC);\n    END IF;\n"
    ).split("CREATE OR REPLACE FUNCTION ")[1:]
)
assert len(_FILLER_DROPPING_FUNCTIONS) == 3 and NFC_STEP not in "".join(_FILLER_DROPPING_FUNCTIONS)


# What each migration adds, as each engine drops it.
UNDO: dict[int, dict[str, tuple[str, ...]]] = {
    RUN_COUNTS_VERSION: {
        "sqlite": ("DROP TRIGGER rem_run_counts_ai", "DROP TRIGGER rem_run_counts_ad", "DROP TRIGGER rem_run_counts_au",
                   "DROP TABLE rem_run_counts", "DROP INDEX rem_runs_outcome_finished", "DROP INDEX rem_runs_running"),
        "postgresql": ("DROP TRIGGER rem_run_counts_aid ON rem_runs", "DROP TRIGGER rem_run_counts_au ON rem_runs",
                       "DROP FUNCTION rem_count_runs()", "DROP TABLE rem_run_counts", "DROP INDEX rem_runs_outcome_finished",
                       "DROP INDEX rem_runs_running"),
    },
    COMMUNITY_NAMES_VERSION: {"sqlite": ("DROP TABLE community_names",), "postgresql": ("DROP TABLE community_names",)},
    EDGE_JUSTIFICATIONS_VERSION: {
        "sqlite": ("ALTER TABLE edge_points DROP COLUMN justification",),
        "postgresql": ("ALTER TABLE edge_points DROP COLUMN justification",),
    },
    IDENTITY_VERDICTS_VERSION: {
        "sqlite": ("DROP TABLE identity_verdicts", "DROP INDEX edge_points_reason"),
        "postgresql": ("DROP TABLE identity_verdicts", "DROP INDEX edge_points_reason"),
    },
    STATE_COUNTS_VERSION: {
        "sqlite": (*(f"DROP TRIGGER state_counts_{t}_{op}" for t in ("digests", "chunks") for op in ("ai", "ad", "au")),
                   "DROP TABLE state_count_changes", "DROP TABLE state_counts", "DROP TABLE run_stats",
                   "DELETE FROM rem_counters WHERE name = 'run_stats'", "DROP INDEX session_digests_updated",
                   *(f"DROP TRIGGER memory_index_turns_{op}" for op in ("ai", "ad", "au")), "DROP INDEX session_digests_no_turns",
                   "ALTER TABLE session_digests DROP COLUMN turns"),
        "postgresql": ("DROP TRIGGER state_counts_digests_aid ON session_digests", "DROP TRIGGER state_counts_digests_au ON session_digests",
                       "DROP TRIGGER state_counts_chunks_aid ON chunk_results", "DROP TRIGGER state_counts_chunks_au ON chunk_results",
                       "DROP FUNCTION rem_count_digests()", "DROP FUNCTION rem_count_chunks()",
                       "DROP TABLE state_count_changes", "DROP TABLE state_counts", "DROP TABLE run_stats",
                       "DELETE FROM rem_counters WHERE name = 'run_stats'", "DROP INDEX session_digests_updated",
                       "DROP TRIGGER memory_index_turns_aid ON memory_index", "DROP TRIGGER memory_index_turns_au ON memory_index",
                       "DROP FUNCTION rem_count_turns()", "DROP INDEX session_digests_no_turns",
                       "ALTER TABLE session_digests DROP COLUMN turns"),
    },
    SEARCH_FOLD_VERSION: {
        "sqlite": (*(f"DROP TRIGGER {t}" for t in _FOLDED_TRIGGERS), *(f"DROP TABLE {t}" for t in _FOLDED_FTS),
                   *_UNFOLDED_RECALL, *(f"INSERT INTO {t}({t}) VALUES ('rebuild')" for t in _FOLDED_FTS)),
        "postgresql": (*_search_columns(_UNFOLDED_SEARCH), "DROP FUNCTION rem_search_text(text)", "DROP FUNCTION rem_fold(text)"),
    },
    CHUNK_TEXT_VERSION: {
        "sqlite": ("DROP INDEX chunk_results_text", "ALTER TABLE chunk_results DROP COLUMN memory_ids",
                   "ALTER TABLE chunk_results DROP COLUMN text_hash"),
        "postgresql": ("DROP INDEX chunk_results_text", "ALTER TABLE chunk_results DROP COLUMN memory_ids",
                       "ALTER TABLE chunk_results DROP COLUMN text_hash"),
    },
    TEXT_CLAIMS_VERSION: {"sqlite": ("DROP TABLE text_claims",), "postgresql": ("DROP TABLE text_claims",)},
    FOLD_RANK_VERSION: {"sqlite": (*(f"DROP TABLE {t}" for t in _RANKED_FTS), *_POSITIONLESS, *_RANKED_FTS.values()),
                        "postgresql": ()},
    QUEUE_WITHDRAWALS_VERSION: {"sqlite": ("DROP TABLE queue_withdrawals",), "postgresql": ("DROP TABLE queue_withdrawals",)},
    ERASE_AT_COMMIT_VERSION: {"sqlite": ("ALTER TABLE session_digests DROP COLUMN erase_at_commit",),
                              "postgresql": ("ALTER TABLE session_digests DROP COLUMN erase_at_commit",)},
    POINTS_BY_MEMORY_VERSION: {"sqlite": ("DROP INDEX node_points_memory", "DROP INDEX edge_points_memory"),
                               "postgresql": ("DROP INDEX node_points_memory", "DROP INDEX edge_points_memory")},
    LAST_ROW_VERSION: {"sqlite": ("ALTER TABLE chroma_scan_state DROP COLUMN last_row",),
                       "postgresql": ("ALTER TABLE chroma_scan_state DROP COLUMN last_row",)},
    # SQLite's index is unchanged by it; PostgreSQL's columns go back to the folded text, which its
    # parser reads as hosts, files, URLs, e-mail addresses and versions.
    WORD_SPLIT_VERSION: {"sqlite": (),
                         "postgresql": (*_search_columns(search_vectors("rem_search_text")), "DROP FUNCTION rem_index_text(text)")},
    FIRST_CHUNK_VERSION: {engine: ("DROP INDEX lazy_edges_first_chunk", "DROP INDEX lazy_edges_dead_first_chunk")
                          for engine in ("sqlite", "postgresql")},
    BACKFILL_COUNTS_VERSION: {
        "sqlite": (*(f"DROP TRIGGER backfill_counts_nodes_{op}" for op in ("ai", "ad", "au")),
                   "DROP TABLE backfill_count_changes", "DROP TABLE backfill_counts"),
        "postgresql": (*(f"DROP TRIGGER backfill_counts_nodes_{op} ON nodes" for op in ("ai", "ad", "au")),
                       "DROP FUNCTION rem_count_backfill()", "DROP TABLE backfill_count_changes", "DROP TABLE backfill_counts"),
    },
    TURN_INDEX_VERSION: {"sqlite": (), "postgresql": ("ALTER TABLE recall_turns ALTER COLUMN turn_index TYPE INTEGER",)},
    SEARCH_BOUND_VERSION: {"sqlite": (), "postgresql": _search_columns(search_vectors("rem_index_text"))},
    REASON_DIGEST_VERSION: {"sqlite": (), "postgresql": (
        "DROP INDEX edge_points_reason", "CREATE INDEX edge_points_reason ON edge_points(source, target, relationship, justification)",
        "DROP INDEX edge_points_owner", "CREATE INDEX edge_points_owner ON edge_points(source, target, relationship, anchor)")},
    SEARCH_SHARE_VERSION: {"sqlite": (), "postgresql": _search_columns(
        {table: vector for table, vector in search_vectors("rem_index_text", most=INDEXED_TEXT_MOST).items() if table in SHARED_TABLES})},
    SUPPRESSIONS_VERSION: {engine: ("DROP TABLE suppression_keys", "DROP TABLE suppressed_nodes") for engine in ("sqlite", "postgresql")},
    FOLD_FILLER_VERSION: {"sqlite": (), "postgresql": _FILLER_DROPPING_FUNCTIONS},
    APART_VERSION: {engine: ("DROP TABLE identity_apart",) for engine in ("sqlite", "postgresql")},
    APART_BY_VERSION: {engine: ("ALTER TABLE identity_apart DROP COLUMN decided_by",) for engine in ("sqlite", "postgresql")},
}
assert "rem_run_counts" in MIGRATIONS[RUN_COUNTS_VERSION - 1] and "community_names" in MIGRATIONS[COMMUNITY_NAMES_VERSION - 1]
assert "justification" in MIGRATIONS[EDGE_JUSTIFICATIONS_VERSION - 1]
assert "identity_verdicts" in MIGRATIONS[IDENTITY_VERDICTS_VERSION - 1]
assert "state_counts" in MIGRATIONS[STATE_COUNTS_VERSION - 1]


def rolled_back(settings: Any, backend: str, *, to: int) -> None:
    """Make the test's graph database one of schema version ``to`` (:func:`roll_back`), closed:
    opening it again migrates it."""
    from store.backend import open_database

    db = open_database(settings)
    try:
        with db.transaction() as conn:
            roll_back(conn, backend, to=to)
        assert db.schema_version == to
    finally:
        db.close()


def roll_back(conn: Any, backend: str, *, to: int) -> None:
    """Take every migration after version ``to`` out of the database (inside ``conn``'s
    transaction), newest first; a migration before :data:`RUN_COUNTS_VERSION` cannot be undone here."""
    for version in range(len(MIGRATIONS), to, -1):
        if version not in UNDO:
            raise ValueError(f"no undo for migration {version}: the test undoes it itself")
        for statement in UNDO[version][backend]:
            conn.execute(statement)
        conn.execute("DELETE FROM schema_version WHERE version = ?", (version,))
