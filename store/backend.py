"""Which engine holds the graph: the SQLite file in the data dir (default) or the PostgreSQL
database ``REM_DATABASE_URL`` names. Everything that opens the graph database goes through
:func:`open_database`, so the choice is made once."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from config.settings import Settings
from store.claims import drop_every_lease
from store.db import MIGRATIONS, Database, backup_database, restore_database
from store.errors import DatabaseUnreadableError

if TYPE_CHECKING:
    from store.postgres import PostgresDatabase


def open_database(settings: Settings, *, readonly: bool = False, timeout: float = 30.0) -> Database | PostgresDatabase:
    """The graph database of ``settings``, migrated unless ``readonly``. Raises the
    :mod:`store.errors` family when it cannot be opened."""
    url = settings.database_url.get_secret_value() if settings.database_url is not None else None
    return open_database_at(path=settings.graph_path, url=url, readonly=readonly, timeout=timeout)


def open_database_at(*, path: Path, url: str | None, readonly: bool = False, timeout: float = 30.0) -> Database | PostgresDatabase:
    """The SQLite file at ``path`` when ``url`` is None, else the PostgreSQL database ``url``."""
    if url is None:
        return Database(path, readonly=readonly, timeout=timeout)
    from store.postgres import PostgresDatabase  # psycopg is loaded only by those who use it

    return PostgresDatabase(url, readonly=readonly, timeout=timeout, known_versions=len(MIGRATIONS), sqlite_migrations=MIGRATIONS)


def database_exists(settings: Settings) -> bool:
    """Whether a cycle has created the graph database yet (the SQLite file exists; the PostgreSQL
    database has rem-cycle's schema). A PostgreSQL server that cannot be reached raises."""
    if settings.database_url is None:
        return settings.graph_path.is_file()
    db = open_database(settings, readonly=True, timeout=10.0)
    try:
        return db.schema_version > 0
    finally:
        db.close()


def backup(settings: Settings, destination: Path) -> dict[str, object]:
    """Copy the graph database to ``destination`` with the engine's own tool: SQLite's online backup
    API, or ``pg_dump`` for PostgreSQL. Returns ``{path, bytes, integrity}``."""
    if settings.database_url is None:
        return backup_database(settings.graph_path, destination)
    from store.postgres import backup_postgres

    return backup_postgres(settings.database_url.get_secret_value(), destination)


def restore(
    settings: Settings, source: Path, *, carry: Callable[[], Callable[[Database], object] | None] | None = None
) -> dict[str, object]:
    """Put the backup at ``source`` in place of the graph database: the SQLite file (see
    :func:`store.db.restore_database`), or the PostgreSQL graph from a ``pg_dump`` archive (see
    :func:`store.postgres.restore_postgres`), then drop the leases the backup held
    (:func:`store.claims.drop_every_lease`). ``carry`` is called while the graph it replaces is
    still in place (on SQLite once the backup is checked, so a refused backup leaves the data dir
    untouched) and returns what must run on the restored graph before anything reads it, or None:
    on SQLite on the checked copy before it goes in place (raising, it changes nothing), on
    PostgreSQL once ``pg_restore`` has committed. Returns ``{path, bytes, integrity, schema_version}``."""
    _refuse_what_is_no_backup_here(source, postgres=settings.database_url is not None)
    step: Callable[[Database], object] | None = None
    if settings.database_url is None:
        restored = restore_database(source, settings.graph_path, prepare=None if carry is None else partial(_on_copy, carry))
    else:
        from store.postgres import restore_postgres

        step = carry() if carry is not None else None
        restored = restore_postgres(settings.database_url.get_secret_value(), source, known_versions=len(MIGRATIONS))
    db = open_database(settings)
    try:
        if step is not None:
            step(db)
        drop_every_lease(db)  # the backup's, of processes long gone: the next cycle must not wait them out
    finally:
        db.close()
    return restored


def _on_copy(carry: Callable[[], Callable[[Database], object] | None], copy: Path) -> None:
    """Run what ``carry`` returns, if anything, on the SQLite database file at ``copy``."""
    if (step := carry()) is None:
        return
    db = Database(copy)
    try:
        step(db)
    finally:
        db.close()


# How each engine's backup file begins: SQLite's header, pg_dump's custom-format archive.
_SQLITE_MAGIC, _PG_DUMP_MAGIC = b"SQLite format 3\x00", b"PGDMP"


def _refuse_what_is_no_backup_here(source: Path, *, postgres: bool) -> None:
    """Raise :class:`DatabaseUnreadableError` saying what ``source`` is when it is empty or the
    other engine's backup: each engine's own check would only say it is not one of its own (SQLite
    reads an empty file as an empty database, "no rem-cycle graph", when a backup that was never
    written — a full disk, a copy cut short — is what a user needs to hear)."""
    try:
        with open(source, "rb") as file:
            head = file.read(len(_SQLITE_MAGIC))
    except OSError:
        return  # the restore itself says why it cannot read it
    if not head:
        raise DatabaseUnreadableError(f"{source} is empty (0 bytes): no backup was written to it")
    if postgres and head.startswith(_SQLITE_MAGIC):
        raise DatabaseUnreadableError(f"{source} is an SQLite backup: restore it without REM_DATABASE_URL (into a data dir's graph.sqlite3)")
    if not postgres and head.startswith(_PG_DUMP_MAGIC):
        raise DatabaseUnreadableError(f"{source} is a PostgreSQL backup (a pg_dump archive): restore it with REM_DATABASE_URL set to the database")


def database_location(settings: Settings) -> str:
    """The graph database as messages name it: the SQLite file's absolute path (an MCP server a
    client started said ``no graph database at .rem-data/graph.sqlite3``, relative to a working
    directory its user never saw), or a PostgreSQL URL without its password."""
    if settings.database_url is None:
        return os.path.abspath(settings.graph_path)
    from store.postgres import redacted

    return redacted(settings.database_url.get_secret_value())


# The public tables whose content a cycle decides (the graph and its provenance, identity and
# forgetting records), each with the columns that do not record when a row was written.
_CANONICAL_TABLES: dict[str, str] = {
    "nodes": "id, label, name, properties",
    "edges": "source, target, relationship, weight, properties",
    "node_points": "node_id, anchor, memory_id, chunk_id, evidence, observed_at, extracted_for, merge_id",
    "edge_points": "source, target, relationship, anchor, memory_id, chunk_id, evidence, observed_at, extracted_source, extracted_target, merge_id",
    "node_claims": "node_id, anchor, extracted_for, merge_id, description, aliases, tags, confidence",
    "node_aliases": "node_id, alias, alias_key",
    "merges": "merge_id, merged_id, into_id, rule, score, evidence, restore, undone_at IS NULL",
    "identity_candidates": "node_id, candidate_id, rule, score, form, session_id",
    "communities": "id, label, label_source, members, member_hash, size",
    "memory_index": "memory_id, session_id",
    "session_digests": "session_id, input_revision, ingested_revision, digested_revision, state, attempts, defer_reason, session_created_at",
}


def canonical_dump(db: Database | PostgresDatabase) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the tables a cycle decides, without write times and run ids, sorted in Python
    (not by the engine's collation): equal dumps = the same graph, whichever engine holds it."""
    return {
        table: sorted((tuple(row) for row in db.query(f"SELECT {columns} FROM {table}")), key=repr)
        for table, columns in _CANONICAL_TABLES.items()
    }
