"""A PostgreSQL password given as the URL's ``password`` query parameter (libpq takes it there as
well as in the user part) is as secret as the other form: masked in messages, and never on
``pg_dump``'s command line (which every local user sees in ``ps``)."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from config.redact import redact
from store.postgres import redacted, without_password
from tests.conftest import free_port, run_cli


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


def test_a_query_password_already_masked_keeps_the_message_around_it(tmp_path: Path) -> None:
    """The connection error quotes the URL as ``store.postgres.redacted`` masks it, and the line is
    redacted again on its way out: the second mask took the ``:`` ending the URL's clause with it
    (``…?password=*** connection failed``)."""
    port = free_port()
    url = f"postgresql://rem@127.0.0.1:{port}/rem?sslmode=disable&password=s3cret-in-the-query"
    done = run_cli("status", env={"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": url})
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"rem-cycle: cannot connect to the PostgreSQL database postgresql://rem@127.0.0.1:{port}/rem?sslmode=disable&password=***: "
        "connection failed: "), done.stderr
    assert "s3cret" not in done.stderr + done.stdout


@pytest.mark.parametrize(("text", "shown"), [
    ("postgresql://rem@db/rem?password=***: connection failed", "postgresql://rem@db/rem?password=***: connection failed"),
    ("http://u:***@h/?api_key=***: then ?secret=***)", "http://u:***@h/?api_key=***: then ?secret=***)"),
    ("http://h/x?token=***:abc rest", "http://h/x?token=*** rest"),  # begins like a mask: masked whole
    ("http://h/x?token=***abc", "http://h/x?token=***"),
])
def test_redaction_is_idempotent(text: str, shown: str) -> None:
    """A message quoting a URL something masked already comes out as it went in, and a value that
    merely begins like a mask is still masked whole."""
    assert redact(text) == shown == redact(shown)
