"""Every command's PostgreSQL path (``REM_DATABASE_URL``) as an operator meets it, through the real
CLI. Needs REM_TEST_POSTGRES_URL."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.conftest import run_cli
from tests.test_audit_pg_roles import schema_of

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def tables_in(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT COUNT(*) FROM pg_tables WHERE schemaname = %s", (schema_of(database_url),)).fetchone()[0]


@pytest.mark.parametrize("command", [["status"], ["retry", "--all"], ["reindex"], ["backup", "graph.dump"]])
def test_a_graph_command_on_a_database_without_the_schema_says_so_and_creates_nothing(
    database_url: str, tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "d").mkdir()
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": database_url}
    done = run_cli(*command, env=env, cwd=tmp_path)
    # Before: status, retry and reindex created rem-cycle's 30 tables in whatever database the URL
    # named (a mistyped one included) and answered as if a graph were there; backup said
    # "backup failed its check". SQLite says there is no graph, and so does PostgreSQL now.
    assert done.returncode == 1, done.stdout
    assert "no graph database at postgresql://" in done.stderr and "run a REM cycle first" in done.stderr
    assert tables_in(database_url) == 0
