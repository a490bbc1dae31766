"""The SQLite adapter raises only the store.errors family, each kind from a real failure of a real
file, with SQLite's own exception kept as ``__cause__`` and its message unchanged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from store.db import Database, backup_database
from store.errors import (
    ConstraintError,
    DatabaseBusyError,
    DatabaseError,
    DatabaseFullError,
    DatabaseUnreadableError,
    QueryInterruptedError,
    SchemaTooNewError,
    StoreError,
)


def test_a_broken_constraint_is_a_constraint_error(tmp_path: Path) -> None:
    db = Database(tmp_path / "g.sqlite3")
    with pytest.raises(ConstraintError, match="FOREIGN KEY constraint failed") as caught:
        with db.transaction() as conn:
            conn.execute("INSERT INTO edges(source, target, relationship, created_at, updated_at) VALUES ('x','y','R','t','t')")
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert db.query("SELECT COUNT(*) FROM edges")[0][0] == 0  # rolled back, the connection still usable
    db.close()


def test_a_database_held_by_another_writer_is_busy(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite3"
    Database(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    db = Database(path, timeout=0.05)
    try:
        with pytest.raises(DatabaseBusyError, match="locked"):
            with db.transaction():
                pass
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        db.close()


def test_a_file_that_is_not_a_database_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite3"
    path.write_bytes(b"not a database at all " * 100)
    for readonly in (True, False):
        with pytest.raises(DatabaseUnreadableError, match="not a database") as caught:
            Database(path, readonly=readonly)
        assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)
    assert path.read_bytes() == b"not a database at all " * 100
    with pytest.raises(DatabaseUnreadableError, match="unable to open"):
        Database(tmp_path / "missing.sqlite3", readonly=True)
    with pytest.raises(DatabaseUnreadableError):
        backup_database(path, tmp_path / "copy.sqlite3")


def test_a_read_stopped_mid_way_is_interrupted(tmp_path: Path) -> None:
    db = Database(tmp_path / "g.sqlite3")
    db.conn.set_progress_handler(lambda: 1, 100)
    rows = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) SELECT i FROM n"
    with pytest.raises(QueryInterruptedError, match="interrupted"):
        db.conn.execute(rows).fetchall()
    db.conn.set_progress_handler(None, 0)
    assert len(db.conn.execute(rows).fetchall()) == 100000
    db.close()


def test_a_newer_schema_is_refused_as_part_of_the_family(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite3"
    Database(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version(version) VALUES (999)")
    with pytest.raises(SchemaTooNewError) as caught:
        Database(path)
    assert isinstance(caught.value, DatabaseError) and caught.value.reason_code == "database-error"


def test_every_database_error_is_a_store_error() -> None:
    for kind in (DatabaseError, DatabaseUnreadableError, DatabaseBusyError, DatabaseFullError, ConstraintError, QueryInterruptedError,
                 SchemaTooNewError):
        assert issubclass(kind, StoreError) and not issubclass(kind, sqlite3.Error)
