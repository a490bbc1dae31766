"""Which engine holds the graph: the SQLite file in the data dir (default) or the PostgreSQL
database ``REM_DATABASE_URL`` names. Everything that opens the graph database goes through
:func:`open_database`, so the choice is made once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from config.settings import Settings
from store.db import MIGRATIONS, Database

if TYPE_CHECKING:
    from store.postgres import PostgresDatabase



def open_database(settings: Settings, *, readonly: bool = False, timeout: float = 30.0) -> Database | PostgresDatabase:
    """The graph database of ``settings``, migrated unless ``readonly``. Raises the
    :mod:`store.errors` family when it cannot be opened."""
    if settings.database_url is None:
        return Database(settings.graph_path, readonly=readonly, timeout=timeout)
    from store.postgres import PostgresDatabase  # psycopg is loaded only by those who use it

    return PostgresDatabase(
        settings.database_url.get_secret_value(), readonly=readonly, timeout=timeout,
        known_versions=len(MIGRATIONS), sqlite_migrations=MIGRATIONS,
    )


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


def database_location(settings: Settings) -> str:
    """The graph database as messages name it (a PostgreSQL URL without its password)."""
    if settings.database_url is None:
        return str(settings.graph_path)
    from store.postgres import redacted

    return redacted(settings.database_url.get_secret_value())
