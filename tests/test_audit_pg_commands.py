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


@pytest.mark.parametrize("command", [
    ["status"], ["retry", "--all"], ["reindex"], ["backup", "graph.dump"], ["drain"], ["drain", "--dry-run"],
])
@pytest.mark.empty_schema  # a database rem-cycle has not made its tables in yet
def test_a_graph_command_on_a_database_without_the_schema_says_so_and_creates_nothing(
    database_url: str, tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "d").mkdir()
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": database_url}
    done = run_cli(*command, env=env, cwd=tmp_path)
    # Before: status, retry and reindex created rem-cycle's 30 tables in whatever database the URL
    # named (a mistyped one included) and answered as if a graph were there; backup said
    # "backup failed its check". SQLite says there is no graph, and so does PostgreSQL now. (drain
    # and drain --dry-run created the schema too, until the drainleft branch.)
    assert done.returncode == 1, done.stdout
    assert "no graph database at postgresql://" in done.stderr and "run a REM cycle first" in done.stderr
    assert tables_in(database_url) == 0


def test_a_connection_the_server_closed_is_named_as_such(database_url: str, tmp_path: Path, postgres_server_url: str) -> None:
    from config import load_settings
    from store.backend import open_database
    from store.errors import DatabaseUnreadableError

    url = f"{database_url}&application_name=closed-{tmp_path.name[-8:]}"
    db = open_database(load_settings(data_dir=tmp_path, database_url=url))
    try:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:  # what a restart does
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (url.rsplit("=", 1)[1],))
        # Before: "terminating connection due to administrator command", then "the connection is
        # closed" — which connection, and why, left to guess.
        with pytest.raises(DatabaseUnreadableError, match="^the PostgreSQL server closed the connection \\(a restart"):
            db.query("SELECT 1")  # the statement that finds it broken
        assert db.query("SELECT 1")[0][0] == 1  # the next runs on a new connection (tests/test_pgops_drain.py)
    finally:
        db.close()


def test_status_and_the_readers_answer_from_a_read_only_server(database_url: str, tmp_path: Path) -> None:
    """A hot standby (or a URL whose sessions are read-only) answers every command that only reads."""
    from urllib.parse import quote

    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": database_url}
    assert run_cli("--once", env=env).returncode == 0
    read_only = {**env, "REM_DATABASE_URL": database_url + quote(" -c default_transaction_read_only=on")}
    for command in (["status"], ["candidates"], ["search", "x"], ["export", "--out", str(tmp_path / "g.json")]):
        done = run_cli(*command, env=read_only)
        # Before: status and candidates migrated on open, "cannot execute CREATE TABLE in a read-only transaction".
        assert done.returncode == 0, (command, done.stderr[-1500:])
