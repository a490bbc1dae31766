"""A ``rem-cycle drain`` (one process, one set of stores for all its batches) when PostgreSQL drops
its connections mid-drain, as ``pg_ctl restart -m fast`` or a failover does. The test server is
shared with other tests, so it is not restarted: the drain's own backends are terminated (what its
connections see of a restart), while it waits on a lock the test holds on ``edges`` — the moment a
restart cuts a batch in flight. Real CLI, real PostgreSQL (REM_TEST_POSTGRES_URL)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from config import load_settings
from store.backend import open_database
from store.graph import GraphStore, Node
from tests.conftest import run_cli
from tests.daemon_support import start_worker, worker_env
from tests.test_audit_pg_roles import as_user, grant_table_rights, login_role
from tests.test_audit_remote_postgres import app_name, app_url, cut_connections  # noqa: F401 - app_url is a fixture

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)

NODES = 24
EDGES = NODES - 1
RELATIONSHIP = "LINKED_LATER"


def _graph_and_queue(url: str, tmp_path: Path, env: dict[str, str]) -> None:
    """A graph of ``NODES`` nodes and ``EDGES`` queued edges between them (``rem-cycle enqueue``,
    into the data dir a worker there would have made: into the file, enqueue creates none)."""
    Path(env["REM_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
    db = open_database(load_settings(data_dir=tmp_path / "owner", database_url=url))
    try:
        GraphStore(db).upsert_nodes([Node(f"CONCEPT:n{i:02d}", "CONCEPT", f"n{i:02d}") for i in range(NODES)])
    finally:
        db.close()
    lines = tmp_path / "edges.jsonl"
    lines.write_text("".join(
        json.dumps({"source": f"CONCEPT:n{i:02d}", "target": f"CONCEPT:n{i + 1:02d}", "relationship": RELATIONSHIP}) + "\n"
        for i in range(EDGES)
    ))
    done = run_cli("enqueue", str(lines), env=env)
    assert done.returncode == 0, done.stderr


@contextmanager
def edges_locked(url: str) -> Iterator[None]:
    """Writes to ``edges`` wait (a DBA's ``LOCK TABLE``) until the block ends."""
    with psycopg.connect(url) as conn:
        conn.execute("LOCK TABLE edges IN EXCLUSIVE MODE")
        yield
        conn.rollback()


def wait_until_waiting_on_a_lock(server_url: str, url: str) -> None:
    deadline = time.monotonic() + 60
    with psycopg.connect(server_url, autocommit=True) as conn:
        while not conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (app_name(url),)
        ).fetchone():
            assert time.monotonic() < deadline, "the drain never reached its first write"
            time.sleep(0.05)


def linked(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT COUNT(*) FROM edges WHERE relationship = %s", (RELATIONSHIP,)).fetchone()[0]


def queued_attempts(data_dir: Path) -> list[int]:
    """The ``attempts`` of every line still in the file queue (live or ``.draining``)."""
    return [json.loads(line).get("attempts", 0) for path in sorted(data_dir.glob("lazy-edges.jsonl*"))
            if not path.name.endswith(".lock") for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("queue", ["file", "database"])
def test_a_drain_goes_on_after_the_server_dropped_its_connections(
    database_url: str, app_url: str, postgres_server_url: str, tmp_path: Path, queue: str
) -> None:
    """Before, every batch after the restart failed on the closed connection (file form: all
    23 lines re-queued with an attempt charged, exit 0 — five restarts dead-lettered them)."""
    env = {**worker_env(tmp_path / "data", database_url=app_url), "REM_WRITE_BATCH_SIZE": "5", "REM_LAZY_QUEUE": queue}
    _graph_and_queue(app_url, tmp_path, env)
    with edges_locked(database_url):  # not the drain's application name: this one is not cut
        drain = start_worker("drain", "--json", env=env, log_path=tmp_path / "drain.log")
        wait_until_waiting_on_a_lock(postgres_server_url, app_url)
        assert cut_connections(postgres_server_url, app_url) >= 1
    assert drain.wait(timeout=120) == 0, (tmp_path / "drain.log").read_text()[-3000:]
    report = json.loads((tmp_path / "drain.log").read_text().splitlines()[-1])
    assert (report["succeeded"], report["failed"], report["requeued"]) == (EDGES, 0, 0), report
    assert linked(app_url) == EDGES
    assert queued_attempts(tmp_path / "data") == []
    assert "PostgreSQL connection replaced" in (tmp_path / "drain.log").read_text()


def test_a_drain_the_database_refuses_ends_and_charges_no_line(database_url: str, tmp_path: Path) -> None:
    """The database fails every batch for a reason that is no line's (here: the role lost its
    rights on the tables; likewise a server that stays down past the timeout): the drain exits 1
    saying so, its lines wait uncharged, and the next drain links them all. Before, it retried
    line by line, exited 0 and charged every line an attempt (five such drains dead-lettered them)."""
    with login_role(database_url) as role:
        open_database(load_settings(data_dir=tmp_path / "owner", database_url=database_url)).close()
        grant_table_rights(database_url, role)
        url = as_user(database_url, role)
        env = {**worker_env(tmp_path / "data", database_url=url), "REM_WRITE_BATCH_SIZE": "5"}
        _graph_and_queue(database_url, tmp_path, env)
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"REVOKE INSERT, UPDATE ON edges FROM {role}")
            done = run_cli("drain", "--json", env=env)
            assert done.returncode == 1, done.stdout + done.stderr
            assert "rem-cycle: drain stopped:" in done.stderr and "permission denied" in done.stderr, done.stderr
            assert linked(database_url) == 0
            assert queued_attempts(tmp_path / "data") == [0] * EDGES
            admin.execute(f"GRANT INSERT, UPDATE ON edges TO {role}")
        again = run_cli("drain", "--json", env=env)
        assert again.returncode == 0, again.stderr
        assert (json.loads(again.stdout)["succeeded"], linked(database_url)) == (EDGES, EDGES)
        assert queued_attempts(tmp_path / "data") == []
