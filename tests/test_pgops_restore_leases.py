"""A backup taken while a cycle ran holds that cycle's leases (its single-flight lock, its session
claims). Restored, they belonged to processes long gone — on another host, this one cannot even
tell — and the next cycles waited them out. The real CLI on both engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.claims import CYCLE_LOCK, LockStore
from tests.conftest import run_cli


def _env(settings: Settings) -> dict[str, str]:
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    if settings.database_url is not None:
        env["REM_DATABASE_URL"] = settings.database_url.get_secret_value()
    return env


@pytest.mark.both_backends
def test_a_restore_drops_the_leases_its_backup_held(settings: Settings, tmp_path: Path) -> None:
    """Before: ``--once`` right after the restore said "another REM cycle holds the database's
    single-flight lock (otherhost:4242:…)" until the backup's lease ran out (5 minutes)."""
    elsewhere = LockStore(open_database(settings), owner="otherhost:4242:cafe", lease_seconds=300)
    try:
        assert elsewhere.acquire(CYCLE_LOCK)  # a cycle of another host runs while the backup is taken
        backup = tmp_path / ("graph.dump" if settings.database_url else "graph.sqlite3")
        done = run_cli("backup", str(backup), env=_env(settings))
        assert done.returncode == 0, done.stderr
        elsewhere.release(CYCLE_LOCK)
    finally:
        elsewhere.db.close()
    restored = run_cli("restore", str(backup), env=_env(settings))
    assert restored.returncode == 0, restored.stderr
    db = open_database(settings)
    try:
        assert LockStore(db, owner="here:1:x", lease_seconds=300).holder(CYCLE_LOCK) is None
        assert LockStore(db, owner="here:1:x", lease_seconds=300).acquire(CYCLE_LOCK)
    finally:
        db.close()
