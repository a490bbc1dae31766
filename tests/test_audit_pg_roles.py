"""PostgreSQL as operators set it up: the owner creates and upgrades the tables, the workers connect
as a role with rights on the tables alone (no ``CREATE`` on the schema); and a ``search_path`` that
names no schema. Through the real CLI. Needs REM_TEST_POSTGRES_URL, and its role may create roles
(``.ci/run``: ``CREATEROLE``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import psycopg
import pytest

from config import load_settings
from store.backend import open_database
from tests.conftest import run_cli

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def schema_of(url: str) -> str:
    options = dict(parse_qsl(urlsplit(url).query))["options"]
    return options.split("search_path=", 1)[1]


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.rsplit('@', 1)[-1]}"))


@contextmanager
def login_role(database_url: str, *, attributes: str = "") -> Iterator[str]:
    """A new login role (``attributes``: e.g. ``CONNECTION LIMIT 2``) with ``USAGE`` on the test's
    schema and nothing else yet (no ``CREATE``); dropped afterwards, with what was granted to it."""
    role = f"rem_app_{uuid.uuid4().hex[:10]}"
    schema = schema_of(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        try:
            conn.execute(f"CREATE ROLE {role} LOGIN {attributes}")
        except psycopg.errors.InsufficientPrivilege:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail("the REM_TEST_POSTGRES_URL role must have CREATEROLE (see .ci/run)")
            pytest.skip("the REM_TEST_POSTGRES_URL role may not create roles (ALTER ROLE … CREATEROLE)")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    try:
        yield role
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:  # DROP OWNED needs membership: revoke by hand
            conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}")
            conn.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM {role}")
            conn.execute(f"REVOKE ALL ON SCHEMA {schema} FROM {role}")
            conn.execute(f"DROP ROLE {role}")


@pytest.fixture
def table_role(database_url: str) -> Iterator[str]:
    """A login role with ``USAGE`` on the test's schema and nothing else yet (no ``CREATE``)."""
    with login_role(database_url) as role:
        yield role


def grant_table_rights(database_url: str, role: str) -> None:
    schema = schema_of(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")


def test_a_role_with_rights_on_the_tables_alone_runs_the_commands_once_the_owner_migrated(
    database_url: str, table_role: str, tmp_path: Path
) -> None:
    open_database(load_settings(data_dir=tmp_path / "owner", database_url=database_url)).close()  # the owner migrates
    grant_table_rights(database_url, table_role)
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": as_user(database_url, table_role)}
    for command in (["--once"], ["status"], ["retry", "--all"], ["candidates"]):
        done = run_cli(*command, env=env)
        # Before: every open ran each migration's CREATE TABLE IF NOT EXISTS, which PostgreSQL
        # refuses without CREATE on the schema even when the table exists.
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert "permission denied" not in done.stderr


@pytest.mark.empty_schema  # the tables are not there yet: the role would have to create them
def test_a_role_that_may_not_create_the_tables_is_told_what_to_grant(database_url: str, table_role: str, tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": as_user(database_url, table_role)}
    done = run_cli("--once", "--json", env=env)  # a cycle is what creates the tables
    assert done.returncode != 0
    message = done.stdout + done.stderr
    assert "cannot create or upgrade rem-cycle's tables" in message, message
    assert "GRANT CREATE ON SCHEMA" in message and "owner" in message
    assert "LINE 1" not in message  # not psycopg's quote of the statement


def test_a_search_path_naming_no_schema_is_named_in_the_error(database_url: str, tmp_path: Path) -> None:
    missing = f"nosuch_{uuid.uuid4().hex[:8]}"
    url = database_url.rsplit("options=", 1)[0] + "options=" + quote(f"-csearch_path={missing}")
    done = run_cli("--once", env={"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": url})
    assert done.returncode != 0
    assert f"no schema of its search_path ({missing}) exists with USAGE granted to the role" in done.stderr + done.stdout
