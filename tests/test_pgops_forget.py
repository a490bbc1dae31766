"""``rem-cycle forget`` beside a follower's commit on PostgreSQL, where writers do not exclude each
other: the follower's commit of the session lands *inside* the forget's transaction, between its
reads of the session's rows and its delete of the session's claim and digest. A real ``--once``
follower (REM_SHARED_EXTRACT) waiting for the loopback model, the real ``forget`` command, real
PostgreSQL (REM_TEST_POSTGRES_URL). The window is widened to seconds, not simulated: the test
holds ``LOCK TABLE node_points IN SHARE MODE`` (reads go on, writes wait) — as a slow disk, a
vacuum or a busy server stretches the real milliseconds — and lets go once the follower's commit
is under way too."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest

from config import Settings
from tests.daemon_support import start_worker
from tests.llm_server import LLMServer, held, ok
from tests.test_audit_workers_forget import env_of, follower_waiting_on_the_model, mentions
from tests.test_forget import canonical
from tests.workers_support import corpus, graph_database, ingested

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def waiting_on_a_lock(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (name,)
    ).fetchone() is not None


def test_a_follower_commit_inside_a_forgets_transaction_is_refused_or_forgotten(
    tmp_path: Path, settings: Settings, database_url: str, postgres_server_url: str
) -> None:
    """Before, the follower's commit went through while the forget waited, the forget (having read
    the session's rows before it) did not take them out, and the forgotten session's points,
    claims and nodes stayed in the graph, its digest gone (README: "its rows stay until the
    session is forgotten again"). Now a forget holds the commit-order lock from its first read,
    so a commit waits for it and then finds the session forgotten."""
    answers = held()
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, corpus(1), tmp_path, database_url=database_url))
        env = env_of(settings, llm, database_url)
        follower_env = {**env, "REM_DATABASE_URL": f"{database_url}&application_name=pgops-follower"}
        forget_env = {**env, "REM_DATABASE_URL": f"{database_url}&application_name=pgops-forget"}
        follower = follower_waiting_on_the_model(settings, llm, follower_env, tmp_path / "follower.log", requests=1)
        with psycopg.connect(postgres_server_url, autocommit=True) as watch, psycopg.connect(database_url) as holder:
            # The first MEMORY node forget deletes (in id order) once it has read the session's rows:
            # NO KEY UPDATE, so the follower's edges to it (a key-share lock) do not wait.
            holder.execute("SELECT 1 FROM nodes WHERE id = 'memory:w0000-t0' FOR NO KEY UPDATE")
            forget = start_worker("forget", "--session", "w0000", env=forget_env, log_path=tmp_path / "forget.log")
            deadline = time.monotonic() + 60
            while not waiting_on_a_lock(watch, "pgops-forget"):  # it has read the session's rows
                assert forget.poll() is None, (tmp_path / "forget.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "forget never reached its first write"
                time.sleep(0.05)
            llm.default = ok()
            answers.release.set()  # the follower commits now: inside the forget's transaction
            deadline = time.monotonic() + 60
            while follower.poll() is None and not waiting_on_a_lock(watch, "pgops-follower"):
                assert time.monotonic() < deadline, "the follower neither finished nor waited"
                time.sleep(0.05)
            holder.rollback()
        assert forget.wait(timeout=120) == 0, (tmp_path / "forget.log").read_text()[-3000:]
        assert follower.wait(timeout=120) == 0, (tmp_path / "follower.log").read_text()[-3000:]
    dump = canonical(settings)
    assert mentions(dump, "w0000") == [], mentions(dump, "w0000")[:5]
    with graph_database(settings.data_dir, database_url) as db:
        assert db.query("SELECT COUNT(*) FROM node_points")[0][0] == 0
        assert db.query("SELECT COUNT(*) FROM node_claims")[0][0] == 0
        assert db.query("SELECT COUNT(*) FROM chunk_results WHERE session_id = ?", ("w0000",))[0][0] == 0
        assert db.query("SELECT COUNT(*) FROM session_digests WHERE session_id = ?", ("w0000",))[0][0] == 0
