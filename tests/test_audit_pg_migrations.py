"""PostgreSQL databases an older rem-cycle wrote, migrated by this one as operators run it: under
their own ``statement_timeout`` (set on the role, the database or in the URL). Needs
REM_TEST_POSTGRES_URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from config import load_settings
from store.backend import open_database
from store.db import MIGRATIONS
from store.errors import QueryInterruptedError
from tests.migrations_support import IDENTITY_VERDICTS_VERSION, rolled_back

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def test_a_migration_runs_to_its_end_whatever_the_statement_timeout(database_url: str, tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, database_url=database_url)
    rolled_back(settings, "postgresql", to=IDENTITY_VERDICTS_VERSION - 1)
    db = open_database(settings, readonly=True)  # opened read-only: not migrated yet
    with db.transaction() as conn:  # a graph with 100,000 edge points: migration 16 indexes them
        conn.execute("SET TRANSACTION READ WRITE")
        conn.execute("INSERT INTO nodes(id, label, name, created_at, updated_at) "
                     "SELECT 'CONCEPT:n' || g, 'CONCEPT', 'n' || g, 't', 't' FROM generate_series(0, 100) g")
        conn.execute("INSERT INTO edges(source, target, relationship, created_at, updated_at) "
                     "SELECT 'CONCEPT:n0', 'CONCEPT:n' || g, 'RELATES_TO', 't', 't' FROM generate_series(1, 100) g")
        conn.execute("INSERT INTO edge_points(source, target, relationship, anchor, extracted_source, extracted_target, justification) "
                     "SELECT 'CONCEPT:n0', 'CONCEPT:n' || (1 + g % 100), 'RELATES_TO', 'session:s' || g, 'n0', 'n', 'why ' || g "
                     "FROM generate_series(1, 100000) g")
    db.close()
    hurried = load_settings(data_dir=tmp_path, database_url=database_url + quote(" -c statement_timeout=20"))
    # Before: the index build was cancelled at 20 ms, and so at every later start, for good.
    migrated = open_database(hurried)
    try:
        assert migrated.schema_version == len(MIGRATIONS)
        assert migrated.table_exists("identity_verdicts")
        assert migrated.query("SHOW statement_timeout")[0][0] == "20ms"  # the operator's bound holds after it
        with pytest.raises(QueryInterruptedError):
            migrated.query("SELECT pg_sleep(0.5)")
    finally:
        migrated.close()
