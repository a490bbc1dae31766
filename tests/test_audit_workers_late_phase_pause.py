"""A leader paused *inside* drain or finalize past its lease, while another leader (another host:
its own data dir, one PostgreSQL database, one `chroma run`) takes the single-flight lock over and
runs the same phase. Real ``python -m worker --once`` processes; the paused leader is held at the
chosen point by the loopback model server (finalize: its community naming request) or by a proxy
in front of `chroma run` (drain: its back-fill read), stopped there (SIGSTOP), let go after the other
leader's cycle (SIGCONT). PostgreSQL only: on SQLite the paused leader keeps the data dir's lock
file, so no second leader starts (``test_audit_workers_ingest_pause.py`` shows it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.enqueue import enqueue_lazy_edges
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from tests.conftest import write_sessions
from tests.daemon_support import start_worker, wait_for, worker_env
from tests.http_proxy import holding_proxy
from tests.llm_server import LLMServer, held, ok
from tests.workers_support import corpus, graph_database, worker_settings

LEASE = 2.0
# The first bytes of the model's community naming request's user message (pipelines.judge).
NAMING = '{"members": ['


@dataclass
class Hosts:
    """Two hosts' data dirs on one PostgreSQL database and one `chroma run`; ``b`` runs cycles."""

    tmp: Path
    database_url: str
    chroma_url: str
    llm_url: str
    settings: dict[str, Any]

    def env(self, host: str, **overrides: Any) -> dict[str, str]:
        return worker_env(self.tmp / host, **worker_settings(self.llm_url, **{"chroma_url": self.chroma_url, **self.settings, **overrides}))

    def put(self, sessions: list[dict[str, Any]], file: str) -> None:
        """Import ``sessions`` into Chroma (as an agent writes them)."""
        chroma = load_settings(data_dir=self.tmp / "host-b", chroma_url=self.chroma_url, **self.collections)
        asyncio.run(import_sessions(write_sessions(self.tmp / file, sessions), chroma=ChromaStore(chroma),
                                    memory_collection=chroma.memory_collection, summary_collection=chroma.session_collection))

    @property
    def collections(self) -> dict[str, str]:
        return {k: self.settings[k] for k in ("memory_collection", "session_collection")}

    def once(self, host: str, **overrides: Any) -> None:
        worker = start_worker("--once", env=self.env(host, **overrides), log_path=self.tmp / f"{host}.log")
        assert worker.wait(timeout=120) == 0, (self.tmp / f"{host}.log").read_text()[-3000:]

    def query(self, sql: str) -> list[Any]:
        with graph_database(self.tmp / "host-b", self.database_url) as db:
            return [tuple(r) for r in db.query(sql)]

    def runs(self) -> list[tuple[Any, ...]]:
        return [(r[0], r[1], r[2], sorted(json.loads(r[3]))) for r in self.query(
            "SELECT outcome, reason_code, failure_phase, phases FROM rem_runs ORDER BY started_at")]


@contextmanager
def hosts(tmp_path: Path, database_url: str | None, chroma_server: str) -> Iterator[tuple[Hosts, LLMServer]]:
    assert database_url is not None
    name = uuid.uuid4().hex[:12]
    with LLMServer(default=ok()) as llm:
        yield Hosts(tmp_path, database_url, chroma_server, llm.url, {
            "lease_timeout_seconds": LEASE, "database_url": database_url, "community_refresh_fraction": 0,
            "memory_collection": f"m-{name}", "session_collection": f"s-{name}",
        }), llm


def pause_past_the_lease(a: subprocess.Popen[bytes], release: Callable[[], None], meanwhile: Callable[[], None]) -> None:
    """Stop ``a`` (held at its chosen point), let its held answer go (it waits in A's socket),
    wait out A's lease, run ``meanwhile`` (the other leader's cycle), then let A go on."""
    os.kill(a.pid, signal.SIGSTOP)
    try:
        release()
        time.sleep(LEASE + 1.0)
        meanwhile()
    finally:
        os.kill(a.pid, signal.SIGCONT)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_leader_paused_inside_finalize_leaves_the_new_leaders_communities_alone(
    tmp_path: Path, settings: Settings, database_url: str | None, chroma_server: str
) -> None:
    """A read the graph and asked the model to name a community; B, leading meanwhile, digested a
    late session and detected the grown graph's communities. Before, A's stale plan replaced them
    (the late session's members dropped out until some later detection); now A's community write
    fails ``lock-lost`` and B's communities stay as B wrote them."""
    first, late = corpus(4)[:2], corpus(4)[2:]
    with hosts(tmp_path, database_url, chroma_server) as (h, llm):
        h.put(first, "first.jsonl")
        naming = held(ok({"label": "Held label"}))
        llm.script(naming, match=NAMING)
        a = start_worker("--once", env=h.env("host-a", llm_judge="true"), log_path=tmp_path / "host-a.log")
        wait_for(lambda: any(r.prompt.startswith(NAMING) for r in llm.chat_requests),
                 timeout=90, interval=0.05, what="leader A never asked the model to name a community")
        detected_by_b: list[tuple[Any, ...]] = []

        def b_leads() -> None:
            h.put(late, "late.jsonl")
            h.once("host-b")
            detected_by_b.extend(h.query("SELECT id, members FROM communities ORDER BY id"))

        pause_past_the_lease(a, naming.release.set, b_leads)
        a.wait(timeout=120)
    runs, log_a = h.runs(), (tmp_path / "host-a.log").read_text()[-3000:]
    assert h.query("SELECT id, members FROM communities ORDER BY id") == detected_by_b, (runs, log_a)
    assert runs[0][:3] == ("failed", "lock-lost", "finalize"), (runs, log_a)  # A, after the takeover
    assert runs[1][:2] == ("completed", None) and "finalize" in runs[1][3], runs  # B led


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_leader_paused_inside_drain_links_and_charges_nothing_twice(
    tmp_path: Path, settings: Settings, database_url: str | None, chroma_server: str
) -> None:
    """A read a batch of the queue table — a line between two sessions, a line to a memory Chroma
    does not have — and was reading Chroma for the missing endpoint; B, leading meanwhile, drained
    the same rows: linked the first, put the second back with one attempt. A resumes with the same
    fates, decided on the rows as they were: its settle finds them taken and rolls its batch back
    (``RowsTakenError``: drain's own fence, no lock needed). One edge, one attempt, no dead letter —
    on the code before this change too: the drain is harmless, so it is not fenced."""
    sessions = corpus(2)
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    source, target = (f"session:{s['sessionId']}" for s in sessions)
    with hosts(tmp_path, database_url, chroma_server) as (h, _llm):
        h.put(sessions, "sessions.jsonl")
        h.once("host-b")  # ingests and digests both sessions
        enqueue_lazy_edges(database_url, [
            {"source": source, "target": target, "relationship": "FOLLOWS_UP"},
            {"source": source, "target": f"memory:{ghost}", "relationship": "FOLLOWS_UP"},
        ])
        with holding_proxy(chroma_server, ghost.encode()) as (proxy, reading, release):
            a = start_worker("--once", env=h.env("host-a", chroma_url=proxy), log_path=tmp_path / "host-a.log")
            wait_for(reading.is_set, timeout=90, interval=0.02, what="leader A never read Chroma for the missing endpoint")
            pause_past_the_lease(a, release.set, lambda: h.once("host-b"))
            a.wait(timeout=120)
    runs, log_a = h.runs(), (tmp_path / "host-a.log").read_text()[-3000:]
    assert h.query("SELECT COUNT(*) FROM edges WHERE relationship = 'FOLLOWS_UP'") == [(1,)], (runs, log_a)
    assert h.query("SELECT attempts FROM lazy_edges") == [(1,)], (runs, log_a)  # charged once, by B
    assert h.query("SELECT COUNT(*) FROM lazy_edges_dead") == [(0,)]
    # A's drain ended (its batch skipped); the check before the next phase stopped it there.
    assert [run[:3] for run in runs] == [("completed", None, None), ("failed", "lock-lost", "finalize"), ("completed", None, None)], runs
    assert "rows taken by another drain" in (tmp_path / "host-a.log").read_text(), log_a
