"""``pg_restore`` replaces the graph in one transaction, and its script sets ``lock_timeout = 0``
(PGOPTIONS cannot change it). Restore refuses to start while other sessions hold locks on the
graph's tables, but a transaction begun after that check made ``pg_restore`` wait for ever —
and every reader of the graph queue behind its DROPs. Now its wait is bounded: past it the
restore is cancelled, nothing changed, with an error naming the session it waited for. Real
PostgreSQL, real pg_dump / pg_restore."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import psycopg
import pytest

from config import Settings
from store.backend import open_database
from store.errors import DatabaseBusyError
from store.postgres import backup_postgres, run_pg_restore
from tests.graph_fixtures import build_sample_graph

pytestmark = pytest.mark.skipif(shutil.which("pg_restore") is None, reason="needs pg_restore")


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_lock_taken_after_the_check_stops_the_restore_in_bounded_time_with_nothing_changed(settings: Settings, tmp_path: Path) -> None:
    build_sample_graph(settings.graph_path, opener=lambda _path: open_database(settings)).close()
    url = settings.database_url.get_secret_value()  # type: ignore[union-attr]
    archive = tmp_path / "graph.dump"
    backup_postgres(url, archive)
    # What restore_postgres runs once its check found no lock holder.
    command = [shutil.which("pg_restore") or "", "--clean", "--if-exists", "--single-transaction", "--exit-on-error",
               "--no-owner", "--no-privileges", f"--dbname={url}", str(archive)]
    with psycopg.connect(url, application_name="a late reader") as reader:
        reader.execute("SELECT count(*) FROM nodes")  # its transaction stays open: ACCESS SHARE on nodes
        started = time.monotonic()
        with pytest.raises(DatabaseBusyError) as refused:
            run_pg_restore(command, {}, url=url, password=None, location="the test's database", lock_wait_seconds=1.0)
        waited = time.monotonic() - started
        pid = reader.info.backend_pid
        assert reader.execute("SELECT count(*) FROM nodes").fetchone()[0] > 0  # still there, unchanged
    assert waited < 15, waited
    assert f"pid {pid} (a late reader, idle in transaction)" in str(refused.value)
    assert "the database was not changed" in str(refused.value)
