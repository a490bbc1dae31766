"""A leader paused *inside* finalize — the graph read, its communities being named by the model —
past its lease, while another leader (another host: its own data dir, one PostgreSQL database, one
`chroma run`) takes the single-flight lock over, digests a session that arrived meanwhile and
detects the grown graph's communities. The paused leader resumes with communities of the graph as
it was. Real ``python -m worker --once`` processes, the loopback model server holding the paused
leader's naming request until the test has stopped it; SIGSTOP / SIGCONT. PostgreSQL only: on
SQLite the paused leader keeps the data dir's lock file, so no second leader can start (see the
ingest-pause test)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from tests.conftest import write_sessions
from tests.daemon_support import start_worker, wait_for, worker_env
from tests.llm_server import LLMServer, held, ok
from tests.workers_support import corpus, graph_database, worker_settings

LEASE = 2.0


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_leader_paused_inside_finalize_leaves_the_new_leaders_communities_alone(
    tmp_path: Path, settings: Settings, database_url: str | None, chroma_server: str
) -> None:
    """Before, A's stale plan replaced the communities B had just detected (the late session's
    members dropped from them, until some later detection); now A's community write fails
    ``lock-lost`` and B's communities stay as B wrote them."""
    assert database_url is not None
    name = uuid.uuid4().hex[:12]
    collections = {"memory_collection": f"m-{name}", "session_collection": f"s-{name}"}
    first, late = corpus(4)[:2], corpus(4)[2:]
    common = {"lease_timeout_seconds": LEASE, "database_url": database_url, "community_refresh_fraction": 0, **collections}
    server_side = load_settings(data_dir=tmp_path / "host-b", chroma_url=chroma_server, **collections)

    async def put(sessions: list[dict[str, Any]], file: str) -> None:
        await import_sessions(write_sessions(tmp_path / file, sessions), chroma=ChromaStore(server_side),
                              memory_collection=server_side.memory_collection, summary_collection=server_side.session_collection)

    def communities() -> list[tuple[str, list[str]]]:
        with graph_database(tmp_path / "host-b", database_url) as db:
            return [(r[0], sorted(json.loads(r[1]))) for r in db.query("SELECT id, members FROM communities ORDER BY id")]

    with LLMServer(default=ok()) as llm:
        asyncio.run(put(first, "first.jsonl"))
        naming = held(ok({"label": "Held label"}))
        llm.script(naming, match='{"members": [')  # the naming request's user message
        env_a = worker_env(tmp_path / "host-a", **worker_settings(llm.url, chroma_url=chroma_server, llm_judge="true", **common))
        a = start_worker("--once", env=env_a, log_path=tmp_path / "a.log")
        try:
            wait_for(lambda: any(r.prompt.startswith('{"members": [') for r in llm.chat_requests),
                     timeout=90, interval=0.05, what="leader A never asked the model to name a community")
            os.kill(a.pid, signal.SIGSTOP)
            naming.release.set()  # the answer waits in A's socket
            time.sleep(LEASE + 1.0)  # A's lease runs out while it is paused
            asyncio.run(put(late, "late.jsonl"))
            env_b = worker_env(tmp_path / "host-b", **worker_settings(llm.url, chroma_url=chroma_server, **common))
            b = start_worker("--once", env=env_b, log_path=tmp_path / "b.log")
            assert b.wait(timeout=120) == 0, (tmp_path / "b.log").read_text()[-3000:]
            detected_by_b = communities()
        finally:
            os.kill(a.pid, signal.SIGCONT)
        a.wait(timeout=120)
    with graph_database(tmp_path / "host-b", database_url) as db:
        runs = [(r[0], r[1], r[2], sorted(json.loads(r[3]))) for r in db.query(
            "SELECT outcome, reason_code, failure_phase, phases FROM rem_runs ORDER BY started_at")]
    late_members = {m for _, members in detected_by_b for m in members} - {m for _, members in communities() for m in members}
    log_a = (tmp_path / "a.log").read_text()[-3000:]
    assert communities() == detected_by_b, (late_members, runs, log_a)
    assert runs[0][:3] == ("failed", "lock-lost", "finalize"), (runs, log_a)  # A, after the takeover
    assert runs[1][:2] == ("completed", None) and "finalize" in runs[1][3], runs  # B led
