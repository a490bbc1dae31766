"""The compose deployment, checked without an engine (operator audit).

The ``postgres`` profile runs two ``worker-pg`` replicas on one PostgreSQL database "which claim
sessions with leases" (README "Deploying"), but did not set ``REM_SHARED_EXTRACT``: without it a
cycle that finds the database's lock taken is skipped as busy, so the second replica skipped every
cycle (seen as processes: two daemons on one database, the second logs ``cycle skipped: another
REM cycle holds the database's single-flight lock``). The replicas now share the extraction."""

from __future__ import annotations

from pathlib import Path

from config import load_settings
from tests.test_deploy import _render, _uncommented


def test_the_postgres_profiles_replicas_share_the_extraction(tmp_path: Path) -> None:
    config = _render(tmp_path, _uncommented("POSTGRES_PASSWORD=pw\nREM_SHARED_EXTRACT=false\n"), llm=False)
    replicas, single = config["services"]["worker-pg"]["environment"], config["services"]["worker"]["environment"]
    assert replicas["REM_SHARED_EXTRACT"] == "true"  # whatever .env says: two replicas must share
    assert single["REM_SHARED_EXTRACT"] == "false"  # the single-host worker keeps .env's value
    settings = load_settings(shared_extract=replicas["REM_SHARED_EXTRACT"])
    assert settings.shared_extract is True


def test_a_database_url_whose_password_a_url_cannot_hold_is_refused_without_showing_it(tmp_path: Path) -> None:
    """A password with ``/``, ``?``, ``#`` or ``@`` written into ``REM_DATABASE_URL`` unencoded (a
    generated ``openssl rand -base64`` one; compose's ``POSTGRES_PASSWORD`` goes into the URL as it
    is) cut the URL elsewhere: the host became ``rem`` and the error printed the whole URL with the
    password, as nothing in it parsed as one. It is a configuration error that names no secret."""
    from tests.conftest import run_cli

    for secret in ("ab/cd+ef=", "ab#cdef", "ab?cdef"):
        done = run_cli("status", env={"REM_DATA_DIR": str(tmp_path), "REM_DATABASE_URL": f"postgresql://rem:{secret}@127.0.0.1:9/rem"})
        assert done.returncode == 2, done.stderr[-2000:]
        assert secret not in done.stderr and secret.split("/")[0] + "/" not in done.stderr
        assert "percent-encode" in done.stderr.splitlines()[-1]
