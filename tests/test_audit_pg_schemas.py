"""PostgreSQL schema names as operators spell them in ``REM_DATABASE_URL`` (``options=-csearch_path=…``):
quoted, mixed-case; ``backup`` dumps the schema holding the graph and nothing else of the database.
Through the real CLI. Needs REM_TEST_POSTGRES_URL."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from config import load_settings
from store.backend import open_database
from store.graph import GraphStore, Node
from tests.conftest import run_cli

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@pytest.fixture
def mixed_case(postgres_server_url: str) -> Iterator[tuple[str, str]]:
    """``(url, schema)`` of a fresh schema whose name needs quoting (``"RemGraph_<hex>"``: mixed case)."""
    schema = f"RemGraph_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in postgres_server_url else "?"
    option = quote(f'-csearch_path="{schema}"')
    yield f"{postgres_server_url}{separator}options={option}", schema
    from store.postgres import close_pools

    close_pools()
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def dumped_schemas(path: Path) -> set[str]:
    listed = subprocess.run(["pg_restore", "--list", str(path)], capture_output=True, text=True, check=True).stdout
    # "id; oid oid TABLE DATA schema table owner"
    return {line.split(" TABLE DATA ", 1)[1].rsplit(" ", 2)[0] for line in listed.splitlines() if " TABLE DATA " in line}


def test_backup_of_a_quoted_mixed_case_schema_dumps_that_schema_alone(
    mixed_case: tuple[str, str], database_url: str, tmp_path: Path
) -> None:
    mixed_case_url, schema = mixed_case
    # Another rem-cycle graph in the same database (the test's own schema): not part of the backup.
    for url, name in ((database_url, "other"), (mixed_case_url, "kept")):
        db = open_database(load_settings(data_dir=tmp_path / name, database_url=url))
        GraphStore(db).upsert_nodes([Node(f"CONCEPT:{name}", "CONCEPT", name)])
        db.close()
    done = run_cli("backup", str(tmp_path / "graph.dump"), env={"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": mixed_case_url})
    assert done.returncode == 0, done.stderr
    # Before: the URL's quoted name was not recognised, and pg_dump dumped every schema of the database.
    assert dumped_schemas(tmp_path / "graph.dump") == {schema}
    status = run_cli("status", "--json", env={"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": mixed_case_url})
    assert status.returncode == 0, status.stderr
