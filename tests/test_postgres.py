"""The PostgreSQL backend: the whole cycle on the shipped sample gives the graph and export SQLite
gives; placeholders, rows and errors behave as the SQLite adapter's; migrations refuse a newer
schema; ``status`` and ``backup`` answer. Needs REM_TEST_POSTGRES_URL (see tests/conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import psycopg
import pytest

from config import load_settings
from store.backend import canonical_dump, open_database
from store.db import MIGRATIONS
from store.errors import ConstraintError, DatabaseBusyError, DatabaseError, DatabaseFullError, DatabaseUnreadableError, QueryInterruptedError, SchemaTooNewError
from store.postgres import PostgresDatabase, Row, close_pools, redacted, store_error, to_pyformat
from tests.conftest import SAMPLE, drop_database, free_port, replay_migrated_schema, run_cli, schema_script
from tests.test_audit_pg_roles import schema_of


def test_placeholders_become_psycopg_style_outside_literals() -> None:
    sql = "SELECT a FROM t WHERE (? IS NULL OR b = ?) AND c LIKE 'memory:%' AND d = :name AND e::json IS NOT NULL -- 5% ?"
    assert to_pyformat(sql) == (
        "SELECT a FROM t WHERE (CAST(%s AS text) IS NULL OR b = %s) AND c LIKE 'memory:%%' AND d = %(name)s "
        "AND e::json IS NOT NULL -- 5%% ?"
    )
    assert to_pyformat("SELECT '?', \"a?\" FROM t WHERE x = ?") == "SELECT '?', \"a?\" FROM t WHERE x = %s"


def test_rows_read_like_sqlite_rows() -> None:
    row = Row({"a": 0, "b": 1}, (1, "x"))
    assert (row[0], row["b"], tuple(row), dict(row), len(row)) == (1, "x", (1, "x"), {"a": 1, "b": "x"}, 2)


def test_errors_map_onto_the_store_error_family() -> None:
    assert isinstance(store_error(psycopg.errors.UniqueViolation("dup")), ConstraintError)
    assert isinstance(store_error(psycopg.errors.ForeignKeyViolation("fk")), ConstraintError)
    assert isinstance(store_error(psycopg.errors.LockNotAvailable("lock")), DatabaseBusyError)
    assert isinstance(store_error(psycopg.errors.DeadlockDetected("dead")), DatabaseBusyError)
    assert isinstance(store_error(psycopg.errors.QueryCanceled("slow")), QueryInterruptedError)
    assert isinstance(store_error(psycopg.errors.DiskFull("could not extend file")), DatabaseFullError)  # SQLite's SQLITE_FULL too
    assert isinstance(store_error(psycopg.OperationalError("refused")), DatabaseUnreadableError)
    assert type(store_error(psycopg.errors.SyntaxError("bad"))) is DatabaseError


def test_a_password_never_appears_in_messages() -> None:
    assert redacted("postgresql://rem:s3cret@db:5432/rem") == "postgresql://rem:***@db:5432/rem"
    assert redacted("postgresql://rem@db/rem") == "postgresql://rem@db/rem"


def test_an_unreachable_server_is_an_unreadable_database() -> None:
    url = f"postgresql://rem@127.0.0.1:{free_port()}/rem"
    with pytest.raises(DatabaseUnreadableError, match="cannot connect"):
        PostgresDatabase(url, timeout=1.0, known_versions=len(MIGRATIONS), sqlite_migrations=MIGRATIONS)
    close_pools()


def _pg(url: str, **options: object) -> PostgresDatabase:
    return PostgresDatabase(url, known_versions=len(MIGRATIONS), sqlite_migrations=MIGRATIONS, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.empty_schema  # the first migration is what it checks
def test_schema_migrates_once_and_refuses_a_newer_one(database_url: str) -> None:
    db = _pg(database_url)
    assert db.schema_version == len(MIGRATIONS)
    db.close()
    again = _pg(database_url)  # a second open applies nothing
    assert again.query("SELECT COUNT(*) FROM schema_version")[0][0] == len(MIGRATIONS) - 6
    with again.transaction() as conn:
        conn.execute("INSERT INTO schema_version(version) VALUES (?)", (len(MIGRATIONS) + 1,))
    again.close()
    with pytest.raises(SchemaTooNewError, match="newer than this rem-cycle knows"):
        _pg(database_url)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.empty_schema  # migrated here, as a test's schema was before the script
def test_a_test_schema_is_the_one_migrating_an_empty_schema_makes(database_url: str, postgres_server_url: str,
                                                                  migrated_schema_script: str) -> None:
    """The tests' PostgreSQL schemas are replayed from pg_dump's script of a migrated schema
    (tests/conftest.py): what pg_dump sees of a replayed schema — tables, columns, indexes,
    constraints, triggers, functions, collations, rows — is what it sees of one migrated here,
    but for the database instance each draws at random."""
    _pg(database_url).close()
    replayed = f"replayed_{schema_of(database_url)}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        replay_migrated_schema(conn, migrated_schema_script, replayed)
    try:
        migrated, copied = (schema_script(postgres_server_url, name) for name in (schema_of(database_url), replayed))
        instance = re.compile(r"\('instance', (\d+)\)")
        assert "CREATE TABLE" in migrated and len(instance.findall(migrated)) == 1
        assert instance.findall(copied) != instance.findall(migrated_schema_script)  # its own, not the template's
        # Sorted lines: the new instance is a row version written after the others, and pg_dump
        # writes a table's rows in the order they are stored.
        assert (sorted(instance.sub("", copied.replace(replayed, "S")).splitlines())
                == sorted(instance.sub("", migrated.replace(schema_of(database_url), "S")).splitlines()))
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {replayed} CASCADE")  # type: ignore[arg-type]  # a name made here


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_readonly_sessions_refuse_writes_and_transactions_nest(database_url: str) -> None:
    db = _pg(database_url)
    with pytest.raises(RuntimeError):
        with db.transaction() as conn:
            with db.transaction():
                conn.execute("INSERT INTO tombstones(kind, id, created_at) VALUES ('session', 's', 't')")
            raise RuntimeError("the outer block fails: the inner write goes too")
    assert db.query("SELECT COUNT(*) FROM tombstones")[0][0] == 0
    with pytest.raises(ConstraintError):
        with db.transaction() as conn:
            conn.execute("INSERT INTO edges(source, target, relationship, created_at, updated_at) VALUES ('x','y','R','t','t')")
    db.close()
    reader = _pg(database_url, readonly=True)
    with pytest.raises(DatabaseError, match="read-only"):
        with reader.transaction() as conn:
            conn.execute("INSERT INTO tombstones(kind, id, created_at) VALUES ('session', 's', 't')")
    reader.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_sample_cycle_builds_the_same_graph_and_export_on_both_engines(database_url: str, tmp_path: Path) -> None:
    """README's first line (import the sample, ``--once``) on SQLite and on PostgreSQL, over the
    same Chroma data: equal canonical dumps and the same JSON export, byte for byte but its time."""
    sqlite_env = {"REM_DATA_DIR": str(tmp_path / "data")}
    postgres_env = {**sqlite_env, "REM_DATABASE_URL": database_url}
    assert run_cli("import", str(SAMPLE), env=sqlite_env).returncode == 0
    exports = {}
    for name, env in (("sqlite", sqlite_env), ("postgresql", postgres_env)):
        done = run_cli("--once", "--json", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["phases"]["extract"]["sessions_digested"] == 26
        out = tmp_path / f"{name}.json"
        assert run_cli("export", "--include-anchors", "--out", str(out), env=env).returncode == 0
        exports[name] = {k: v for k, v in json.loads(out.read_text(encoding="utf-8")).items() if k != "generated_at"}
    assert exports["sqlite"] == exports["postgresql"]
    assert len(exports["sqlite"]["nodes"]) > 1000
    settings = load_settings(data_dir=tmp_path / "data")
    sqlite_db, postgres_db = open_database(settings), open_database(load_settings(data_dir=tmp_path / "data", database_url=database_url))
    try:
        assert canonical_dump(sqlite_db) == canonical_dump(postgres_db)
    finally:
        sqlite_db.close()
        postgres_db.close()
    status = run_cli("status", "--json", env=postgres_env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["graph"]["node_total"] == len(exports["postgresql"]["nodes"])


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_backup_uses_pg_dump_and_restores(database_url: str, settings, tmp_path: Path, postgres_server_url: str) -> None:
    from store.graph import GraphStore, Node

    db = open_database(settings)
    GraphStore(db).upsert_nodes([Node("CONCEPT:kept", "CONCEPT", "kept")])
    db.close()
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": database_url}
    done = run_cli("backup", str(tmp_path / "graph.dump"), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["bytes"] == (tmp_path / "graph.dump").stat().st_size > 0
    assert not (tmp_path / "graph.dump.partial").exists()
    # pg_restore puts it back (here: into a fresh database of the test server).
    restored = f"restore_{tmp_path.name[-8:].lower().replace('-', '_')}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {restored}")
        conn.execute(f"CREATE DATABASE {restored}")
    try:
        target = postgres_server_url.rsplit("/", 1)[0] + f"/{restored}"
        subprocess.run(["pg_restore", "--no-owner", f"--dbname={target}", str(tmp_path / "graph.dump")], check=True, capture_output=True)
        with psycopg.connect(target) as conn:
            schema = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'test_%'").fetchone()[0]
            assert conn.execute(f"SELECT name FROM {schema}.nodes").fetchall() == [("kept",)]
    finally:
        drop_database(postgres_server_url, restored)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_backup_without_pg_dump_says_what_to_use(settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from store.backend import backup

    monkeypatch.setenv("PATH", str(tmp_path))  # no pg_dump on PATH
    with pytest.raises(DatabaseError, match="needs pg_dump and pg_restore on PATH"):
        backup(settings, tmp_path / "graph.dump")
    assert not (tmp_path / "graph.dump").exists()


@pytest.mark.both_backends
def test_bulk_writes_count_and_resolve_repeats_as_sqlite_does(open_graph_database, tmp_path: Path) -> None:
    """More rows than one multi-row statement takes, a key repeated within a batch (the later row
    wins, as in SQLite's row-by-row order), and the changed-row counts the stores report."""
    from store.graph import Edge, GraphStore, Node

    db = open_graph_database(tmp_path / "g.sqlite3")
    graph = GraphStore(db)
    nodes = [Node(f"CONCEPT:n{i:05d}", "CONCEPT", f"n{i}", {"aliases": [f"alias {i}"]}) for i in range(2_500)]
    assert graph.upsert_nodes(nodes) == 2_500
    assert graph.upsert_nodes(nodes) == 0
    edges = [Edge(f"CONCEPT:n{i:05d}", f"CONCEPT:n{i + 1:05d}", "NEXT", 1.0) for i in range(2_499)]
    repeated = [*edges[:10], Edge("CONCEPT:n00000", "CONCEPT:n00001", "NEXT", 7.0)]
    assert graph.link_nodes(edges).linked == 2_499
    stats = graph.link_nodes(repeated)
    assert (stats.linked, stats.unchanged) == (1, 10)
    assert graph.get_edge("CONCEPT:n00000", "CONCEPT:n00001", "NEXT").weight == 7.0
    assert db.query("SELECT COUNT(*) FROM node_aliases")[0][0] == 2_500
    assert [tuple(r) for r in db.stream("SELECT id FROM nodes ORDER BY id")][:2] == [("CONCEPT:n00000",), ("CONCEPT:n00001",)]
    db.close()


def test_a_later_sqlite_migration_gets_identity_ids_and_bytewise_text_on_postgresql() -> None:
    from store.postgres_schema import postgres_form

    sqlite = (
        "CREATE TABLE queue (\n    id INTEGER PRIMARY KEY AUTOINCREMENT,\n    line TEXT NOT NULL CHECK (length(line) <= 10),\n"
        "    note TEXT COLLATE \"C\"\n);\nALTER TABLE nodes ADD COLUMN spelling TEXT NOT NULL DEFAULT '';\n"
        "INSERT INTO t(a) SELECT CAST(x AS TEXT) FROM u"
    )
    assert postgres_form(sqlite) == (
        "CREATE TABLE queue (\n    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n"
        "    line TEXT COLLATE \"C\" NOT NULL CHECK (length(line) <= 10),\n    note TEXT COLLATE \"C\"\n);\n"
        "ALTER TABLE nodes ADD COLUMN spelling TEXT COLLATE \"C\" NOT NULL DEFAULT '';\n"
        "INSERT INTO t(a) SELECT CAST(x AS TEXT) FROM u"
    )


@pytest.mark.both_backends
def test_a_failed_nested_block_leaves_the_transaction_usable(open_graph_database, tmp_path: Path) -> None:
    """What worker/failures.py relies on: a duplicate run row inside a transaction is handled and the
    transaction goes on (SQLite undoes the failed statement; PostgreSQL rolls back to a savepoint)."""
    from store.runstate import RunStateStore

    db = open_graph_database(tmp_path / "g.sqlite3")
    runs = RunStateStore(db)
    runs.start_run("run-1", reason="test", mode="once", owner="me")
    with db.transaction():
        with pytest.raises(ConstraintError):
            runs.start_run("run-1", reason="test", mode="once", owner="me")
        runs.finish_run("run-1", outcome="failed", phases={})
    assert [(r["run_id"], r["outcome"]) for r in runs.recent_runs()] == [("run-1", "failed")]
    db.close()


def test_an_unreachable_database_is_one_line_and_the_password_stays_secret(tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_DATABASE_URL": f"postgresql://rem:s3cret-pw@127.0.0.1:{free_port()}/rem"}
    status = run_cli("status", env=env, timeout=60)
    assert status.returncode == 1 and "cannot connect to the PostgreSQL database postgresql://rem:***@" in status.stderr
    cycle = run_cli("--once", "--json", env=env, timeout=60)
    assert cycle.returncode == 1 and json.loads(cycle.stdout)["reason_code"] == "database-error"
    assert "s3cret-pw" not in status.stdout + status.stderr + cycle.stdout + cycle.stderr
    bad = run_cli("status", env={**env, "REM_DATABASE_URL": "mysql://rem@db/rem"})
    assert bad.returncode == 2 and "REM_DATABASE_URL: must start with postgresql://" in bad.stderr


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_sqlite_json_functions_mean_the_same_on_postgresql(database_url: str) -> None:
    """The SQLite functions PostgreSQL's schema provides answer as SQLite does for what the stores
    ask (json_extract's scalars come back as text there)."""
    db = _pg(database_url)
    doc = '{"extract": {"state": "completed", "n": 5, "ok": true, "l": [1, {"x": "y"}]}, "a b": {"c": null}}'
    cases = {"$.\"extract\".state": "completed", "$.extract.n": "5", "$.extract.ok": "1", "$.extract.l[1].x": "y", "$.\"a b\".c": None, "$.nope": None}
    assert {path: db.query("SELECT json_extract(?, ?)", (doc, path))[0][0] for path in cases} == cases
    assert [tuple(r) for r in db.query("SELECT json_valid('{'), json_valid('[1]')")] == [(False, True)]
    assert [tuple(r) for r in db.query("SELECT key, value FROM json_each(?) ORDER BY key", ('["b","a"]',))] == [(0, "b"), (1, "a")]
    assert db.query("SELECT json_group_array(v) FROM (SELECT 'x' AS v UNION ALL SELECT 'y') AS t")[0][0] == '["x","y"]'
    db.close()


@pytest.mark.both_backends
def test_a_database_says_its_engine(open_graph_database, backend: str, tmp_path: Path) -> None:
    db = open_graph_database(tmp_path / "g.sqlite3")
    assert db.dialect.name == backend
    db.close()
