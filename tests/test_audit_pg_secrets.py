"""A PostgreSQL password given as the URL's ``password`` query parameter (libpq takes it there as
well as in the user part) is as secret as the other form: masked in messages, and never on
``pg_dump``'s command line (which every local user sees in ``ps``)."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from store.postgres import redacted, without_password
from tests.conftest import run_cli


def test_a_password_in_the_query_is_masked_and_taken_out() -> None:
    url = "postgresql://rem@db:5432/rem?options=-csearch_path%3Dg&password=p%40ss"
    assert redacted(url) == "postgresql://rem@db:5432/rem?options=-csearch_path%3Dg&password=***"
    assert without_password(url) == ("postgresql://rem@db:5432/rem?options=-csearch_path%3Dg", "p@ss")
    assert without_password("postgresql://rem:pw@db/rem?sslmode=require") == ("postgresql://rem@db/rem?sslmode=require", "pw")
    assert redacted("postgresql://rem@db/rem") == "postgresql://rem@db/rem"


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_backup_never_puts_a_query_password_on_pg_dumps_command_line(database_url: str, tmp_path: Path) -> None:
    secret = "s3cret-in-the-query"
    url = f"{database_url}&password={secret}"  # the test server trusts loopback: any password works
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": url}
    assert run_cli("--once", env=env).returncode == 0
    # pg_dump as found on PATH, wrapped to record what it was given.
    shim = tmp_path / "bin"
    shim.mkdir()
    record = tmp_path / "pg_dump.args"
    (shim / "pg_dump").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\necho "PGPASSWORD=$PGPASSWORD" >> {record}\nexec {shutil.which("pg_dump")} "$@"\n'
    )
    (shim / "pg_dump").chmod(stat.S_IRWXU)
    path = f"{shim}:{Path(shutil.which('pg_restore') or '/usr/bin/pg_restore').parent}:/usr/bin:/bin"
    done = run_cli("backup", str(tmp_path / "graph.dump"), "--json", env={**env, "PATH": path})
    assert done.returncode == 0, done.stderr
    arguments = record.read_text().splitlines()
    # Before: --dbname=postgresql://…&password=s3cret-in-the-query, and the message printed it.
    assert not any(secret in a for a in arguments if not a.startswith("PGPASSWORD=")), arguments
    assert f"PGPASSWORD={secret}" in arguments  # given to pg_dump through its environment
    assert secret not in done.stdout + done.stderr
    assert json.loads(done.stdout)["integrity"] == "ok"
