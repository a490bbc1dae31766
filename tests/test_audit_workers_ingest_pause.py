"""A leader paused *inside* ingest — its change scan read, its writes not made — past its lease,
while another leader (another host: its own data dir, one PostgreSQL database, one `chroma run`)
takes the single-flight lock over and ingests a session that arrived meanwhile. The paused leader
resumes with a scan that predates that session. Real ``python -m worker --once`` processes, a real
`chroma run` behind a loopback proxy that holds the paused leader's last scan read until the test
has stopped it, the loopback model server; SIGSTOP / SIGCONT."""

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
from tests.http_proxy import holding_proxy
from tests.llm_server import LLMServer, ok
from tests.workers_support import corpus, graph_database, worker_settings

LEASE = 2.0


@pytest.mark.both_backends
def test_a_leader_paused_inside_ingest_leaves_what_the_new_leader_ingested_alone(
    tmp_path: Path, settings: Settings, database_url: str | None, chroma_server: str
) -> None:
    """PostgreSQL: before, A's stale full scan retracted the late session B had ingested and
    digested (its nodes and digest gone, the model to be paid again by the next cycle); now A's
    ingest fails ``lock-lost`` at its first write, nothing written or charged. SQLite (one host):
    A keeps the data dir's lock file while paused, so B only follows (extract) and A, resumed,
    finishes as the one leader; the next cycle ingests the late session."""
    name = uuid.uuid4().hex[:12]
    collections = {"memory_collection": f"m-{name}", "session_collection": f"s-{name}"}
    first, late = corpus(3)[:2], corpus(3)[2:]
    common = {"lease_timeout_seconds": LEASE, **collections, **({"database_url": database_url} if database_url else {})}
    host_a = tmp_path / "host-a"
    host_b = tmp_path / "host-b" if database_url else host_a  # SQLite: one host, one data dir
    server_side = load_settings(data_dir=host_b, chroma_url=chroma_server, **collections)

    async def put(sessions: list[dict[str, Any]], file: str) -> None:
        await import_sessions(write_sessions(tmp_path / file, sessions), chroma=ChromaStore(server_side),
                              memory_collection=server_side.memory_collection, summary_collection=server_side.session_collection)

    def once(env: dict[str, str], log: str) -> None:
        worker = start_worker("--once", env=env, log_path=tmp_path / log)
        assert worker.wait(timeout=120) == 0, (tmp_path / log).read_text()[-3000:]

    with LLMServer(default=ok()) as llm:
        asyncio.run(put(first, "first.jsonl"))
        env_b = worker_env(host_b, **worker_settings(llm.url, chroma_url=chroma_server, **common))
        once(env_b, "b0.log")
        # A's last read of its full scan: the summaries, read whole (metadata and documents).
        with holding_proxy(chroma_server, b'"documents"') as (proxy, held, release):
            env_a = worker_env(host_a, **worker_settings(llm.url, chroma_url=proxy, full_scan_interval_seconds=0, **common))
            a = start_worker("--once", env=env_a, log_path=tmp_path / "a.log")
            try:
                wait_for(held.is_set, timeout=60, interval=0.02, what="leader A never read the summaries")
                os.kill(a.pid, signal.SIGSTOP)
                release.set()  # the answer, read before the late session exists, waits in A's socket
                time.sleep(LEASE + 1.0)  # A's lease runs out while it is paused
                asyncio.run(put(late, "late.jsonl"))
                once(env_b, "b.log")
            finally:
                os.kill(a.pid, signal.SIGCONT)
            # PostgreSQL: A's run fails (lock-lost), exit 1; SQLite: it completes.
            assert a.wait(timeout=120) == (1 if database_url else 0), (tmp_path / "a.log").read_text()[-3000:]
        if database_url is None:
            once(env_b, "b2.log")  # the one leader's next cycle
    late_id = late[0]["sessionId"]
    with graph_database(host_b, database_url) as db:
        digests = {r[0]: (r[1], r[2]) for r in db.query("SELECT session_id, state, attempts FROM session_digests")}
        nodes = db.query("SELECT COUNT(*) FROM nodes WHERE id = ?", (f"session:{late_id}",))[0][0]
        runs = [(r[0], r[1], r[2], sorted(json.loads(r[3]))) for r in db.query(
            "SELECT outcome, reason_code, failure_phase, phases FROM rem_runs ORDER BY started_at")]
    log_a = (tmp_path / "a.log").read_text()[-3000:]
    assert nodes == 1, (digests, runs, log_a)
    assert digests == {s["sessionId"]: ("digested", 0) for s in first + late}, (digests, runs, log_a)
    if database_url is not None:
        assert runs[1][:3] == ("failed", "lock-lost", "ingest"), (runs, log_a)  # A, after the takeover
        assert runs[2][:2] == ("completed", None) and "ingest" in runs[2][3], runs  # B led
    else:
        assert [run[:2] for run in runs] == [("completed", None)] * 4, runs
        assert "ingest" not in runs[2][3], runs  # B, started while A was paused, only followed
