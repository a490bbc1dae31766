"""PostgreSQL backups as operators move them: ``rem-cycle backup`` on one server, restored into
another (whose roles differ) or over the graph it was taken from with ``rem-cycle restore``.
Real PostgreSQL (REM_TEST_POSTGRES_URL; its role may create roles and databases, as in .ci/run),
real ``pg_dump``/``pg_restore``, the real CLI."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg
import pytest

from config import load_settings
from store.backend import open_database
from store.graph import GraphStore, Node
from tests.conftest import drop_database, run_cli
from tests.test_audit_pg_roles import schema_of

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def _env(tmp_path: Path, url: str) -> dict[str, str]:
    return {"REM_DATA_DIR": str(tmp_path / "data"), "REM_DATABASE_URL": url}


def _names(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT name FROM nodes ORDER BY name")]


def _graph_at(url: str, tmp_path: Path, *names: str) -> None:
    """A graph at ``url`` (created there) holding a CONCEPT node of each of ``names``."""
    db = open_database(load_settings(data_dir=tmp_path / "owner", database_url=url))
    try:
        GraphStore(db).upsert_nodes([Node(f"CONCEPT:{name}", "CONCEPT", name) for name in names])
    finally:
        db.close()


@pytest.fixture
def graph(database_url: str, tmp_path: Path) -> str:
    """The test schema holding a small graph (two nodes); its URL."""
    _graph_at(database_url, tmp_path, "kept", "also")
    return database_url


@pytest.fixture
def other_database(postgres_server_url: str) -> Iterator[str]:
    """A new, empty database on the test server (the "other cluster"); its URL without options."""
    name = f"pgops_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield urlsplit(postgres_server_url)._replace(path=f"/{name}", query="").geturl()
    finally:
        from store.postgres import close_pools

        close_pools()
        drop_database(postgres_server_url, name)


def _with_schema(url: str, schema: str) -> str:
    return f"{url}?options={quote(f'-csearch_path={schema}')}"


def test_a_backup_restores_where_the_roles_it_granted_to_do_not_exist(graph: str, other_database: str, tmp_path: Path) -> None:
    """The operator granted a dashboard role read access; the backup is restored on a server that
    has no such role. Before, the archive carried the GRANTs and ``pg_restore`` failed on each
    (``role "…" does not exist``, exit 1); ``rem-cycle restore`` there failed likewise."""
    schema = schema_of(graph)
    reader = f"pgops_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(graph, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {reader}")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {reader}")
        conn.execute(f"GRANT SELECT ON nodes, edges TO {reader}")
    try:
        done = run_cli("backup", str(tmp_path / "graph.dump"), env=_env(tmp_path, graph))
        assert done.returncode == 0, done.stderr
    finally:
        with psycopg.connect(graph, autocommit=True) as conn:  # the other cluster has no such role
            conn.execute(f"REVOKE ALL ON nodes, edges FROM {reader}")
            conn.execute(f"REVOKE ALL ON SCHEMA {schema} FROM {reader}")
            conn.execute(f"DROP ROLE {reader}")
    by_hand = subprocess.run(["pg_restore", "--no-owner", f"--dbname={other_database}", str(tmp_path / "graph.dump")],
                             capture_output=True, text=True, check=False)
    assert by_hand.returncode == 0, by_hand.stderr
    with psycopg.connect(other_database, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    restored = run_cli("restore", str(tmp_path / "graph.dump"), env=_env(tmp_path / "other", _with_schema(other_database, schema)))
    assert restored.returncode == 0, restored.stderr
    assert _names(_with_schema(other_database, schema)) == ["also", "kept"]


def test_restore_puts_a_postgresql_backup_in_place_of_the_graph(graph: str, tmp_path: Path) -> None:
    """``rem-cycle restore`` on PostgreSQL replaces the graph with the backup's, in one transaction;
    the next cycle runs on it. Before, it refused (exit 2: "restore puts an SQLite backup …")."""
    env = _env(tmp_path, graph)
    assert run_cli("backup", str(tmp_path / "graph.dump"), env=env).returncode == 0
    with psycopg.connect(graph, autocommit=True) as conn:
        conn.execute("DELETE FROM nodes WHERE id = 'CONCEPT:kept'")
        conn.execute("INSERT INTO nodes(id, label, name, properties, created_at, updated_at) "
                     "VALUES ('CONCEPT:later', 'CONCEPT', 'later', '{}', 'now', 'now')")
    restored = run_cli("restore", str(tmp_path / "graph.dump"), "--json", env=env)
    assert restored.returncode == 0, restored.stderr
    with psycopg.connect(graph) as conn:
        newest = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    assert json.loads(restored.stdout) == {"path": graph, "bytes": (tmp_path / "graph.dump").stat().st_size,
                                           "integrity": "ok", "schema_version": newest, "forgotten_again": {}, "answers_kept": 0}
    assert _names(graph) == ["also", "kept"]
    again = run_cli("status", env=env)
    assert again.returncode == 0, again.stderr


def test_a_restore_that_cannot_apply_changes_nothing(graph: str, tmp_path: Path, postgres_server_url: str) -> None:
    """Refused with nothing changed, exit 1 and a reason: a file that is no pg_dump archive, a
    graph another session holds locked, an archive of another schema than the URL resolves to."""
    env = _env(tmp_path, graph)
    schema = schema_of(graph)
    junk = tmp_path / "junk.dump"
    junk.write_bytes(b"not an archive\n" * 10)
    done = run_cli("restore", str(junk), env=env)
    assert done.returncode == 1 and "cannot be read as a PostgreSQL backup" in done.stderr, done.stderr
    assert _names(graph) == ["also", "kept"]

    # A session in a transaction that read the graph (a forgotten psql, a report): pg_restore's
    # DROPs would wait for it for ever, and every reader behind them. Before: the restore hung.
    assert run_cli("backup", str(tmp_path / "graph.dump"), env=env).returncode == 0
    with psycopg.connect(graph, autocommit=True) as conn:
        conn.execute("DELETE FROM nodes WHERE id = 'CONCEPT:also'")
    with psycopg.connect(f"{graph}&application_name=pgops-report") as reader:
        reader.execute("SELECT COUNT(*) FROM nodes")
        done = run_cli("restore", str(tmp_path / "graph.dump"), env=env, timeout=60)
    assert done.returncode == 1 and "other sessions hold locks on the graph's tables" in done.stderr, done.stderr
    assert "(pgops-report, idle in transaction)" in done.stderr
    assert _names(graph) == ["kept"]

    # The backup of this schema, restored through a URL that resolves to another one.
    elsewhere = f"pgops_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {elsewhere}")
    try:
        done = run_cli("restore", str(tmp_path / "graph.dump"), env=_env(tmp_path / "x", _with_schema(postgres_server_url, elsewhere)))
        assert done.returncode == 1 and f"backup of schema '{schema}'" in done.stderr, done.stderr
        assert f"csearch_path%3D{schema}" in done.stderr
        with psycopg.connect(postgres_server_url) as conn:
            assert conn.execute("SELECT to_regclass(%s)", (f"{elsewhere}.nodes",)).fetchone()[0] is None
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {elsewhere} CASCADE")


def test_a_backup_older_than_the_graph_in_place_is_refused(graph: str, tmp_path: Path) -> None:
    """The graph's newer tables would outlive the restore: exit 1, nothing changed."""
    env = _env(tmp_path, graph)
    with psycopg.connect(graph, autocommit=True) as conn:  # a backup one schema version behind
        newest = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        conn.execute("DELETE FROM schema_version WHERE version = %s", (newest,))
    assert run_cli("backup", str(tmp_path / "older.dump"), env=env).returncode == 0
    with psycopg.connect(graph, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version(version) VALUES (%s)", (newest,))
        conn.execute("DELETE FROM nodes WHERE id = 'CONCEPT:also'")
    done = run_cli("restore", str(tmp_path / "older.dump"), env=env)
    assert done.returncode == 1 and f"newer than the backup's ({newest - 1})" in done.stderr, done.stderr
    assert _names(graph) == ["kept"]


def test_a_schema_whose_name_needs_quoting_restores_into_a_new_database(
    backend: str, other_database: str, postgres_server_url: str, tmp_path: Path
) -> None:
    """``"Rem Graph <hex>"`` (a space, capitals): backed up, then restored into a new database where
    the schema does not exist yet. Before the fix of restore's archive reading, such a backup was
    "no rem-cycle graph" (the listed schema name holds a space)."""
    schema = f"Rem Graph {uuid.uuid4().hex[:6]}"
    option = quote("-csearch_path=" + '"' + schema.replace(" ", "\\ ") + '"')  # libpq options escape spaces
    source = f"{postgres_server_url}?options={option}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        env = _env(tmp_path, source)
        _graph_at(source, tmp_path, "spaced")
        assert run_cli("backup", str(tmp_path / "graph.dump"), env=env).returncode == 0
        target = f"{other_database}?options={option}"
        restored = run_cli("restore", str(tmp_path / "graph.dump"), env=_env(tmp_path / "other", target))
        assert restored.returncode == 0, restored.stderr
        assert _names(target) == ["spaced"]
    finally:
        from store.postgres import close_pools

        close_pools()
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def as_role(conn: psycopg.Connection, role: str) -> Iterator[None]:
    """Act as ``role`` on ``conn`` (made a member for the block only)."""
    conn.execute(f"GRANT {role} TO CURRENT_USER")
    conn.execute(f"SET ROLE {role}")
    try:
        yield
    finally:
        conn.execute("RESET ROLE")
        conn.execute(f"REVOKE {role} FROM CURRENT_USER")


def test_a_public_schema_graph_backs_up_and_restores_alone(backend: str, other_database: str, tmp_path: Path) -> None:
    """A graph in ``public`` of a database shared with another application (schema ``shop``, which
    rem-cycle's role may not read). Before, ``backup`` dumped the whole database and failed on it
    (``permission denied for schema shop``); and a restore of such a whole-database backup rolled
    the other application's tables back to their state at the backup."""
    env = _env(tmp_path, other_database)
    _graph_at(other_database, tmp_path, "kept")
    shopkeeper = f"pgops_shop_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(other_database, autocommit=True) as conn:
        database = urlsplit(other_database).path.lstrip("/")
        conn.execute(f"CREATE ROLE {shopkeeper}")
        conn.execute(f"GRANT CREATE ON DATABASE {database} TO {shopkeeper}")
        try:
            with as_role(conn, shopkeeper):
                conn.execute("CREATE SCHEMA shop")
                conn.execute("CREATE TABLE shop.orders(id int)")
                conn.execute("INSERT INTO shop.orders VALUES (1)")
            done = run_cli("backup", str(tmp_path / "graph.dump"), env=env)
            assert done.returncode == 0, done.stderr
            with as_role(conn, shopkeeper):
                conn.execute("INSERT INTO shop.orders VALUES (2), (3)")
            conn.execute("DELETE FROM nodes")
            restored = run_cli("restore", str(tmp_path / "graph.dump"), env=env)
            assert restored.returncode == 0, restored.stderr
            assert _names(other_database) == ["kept"]
            with as_role(conn, shopkeeper):
                assert conn.execute("SELECT COUNT(*) FROM shop.orders").fetchone()[0] == 3
        finally:
            with as_role(conn, shopkeeper):
                conn.execute("DROP SCHEMA IF EXISTS shop CASCADE")
            conn.execute(f"REVOKE CREATE ON DATABASE {database} FROM {shopkeeper}")
            conn.execute(f"DROP ROLE {shopkeeper}")


def test_a_backup_of_the_other_engine_is_named_as_such(graph: str, tmp_path: Path) -> None:
    """A pg_dump archive restored without REM_DATABASE_URL, an SQLite backup with it: exit 1, the
    file named for what it is, nothing changed. Before: "file is not a database", and "not a
    backup `rem-cycle backup` wrote on PostgreSQL"."""
    assert run_cli("backup", str(tmp_path / "graph.dump"), env=_env(tmp_path, graph)).returncode == 0
    sqlite_dir = tmp_path / "sqlite"
    open_database(load_settings(data_dir=sqlite_dir)).close()
    assert run_cli("backup", str(tmp_path / "graph.sqlite3"), env={"REM_DATA_DIR": str(sqlite_dir)}).returncode == 0
    done = run_cli("restore", str(tmp_path / "graph.dump"), env={"REM_DATA_DIR": str(sqlite_dir)})
    assert done.returncode == 1 and "is a PostgreSQL backup (a pg_dump archive)" in done.stderr, done.stderr
    done = run_cli("restore", str(tmp_path / "graph.sqlite3"), env=_env(tmp_path, graph))
    assert done.returncode == 1 and "is an SQLite backup: restore it without REM_DATABASE_URL" in done.stderr, done.stderr
    assert _names(graph) == ["also", "kept"]
