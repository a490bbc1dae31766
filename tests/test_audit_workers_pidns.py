"""Adversarial audit: two workers of one hostname whose processes cannot see each other — containers
given one ``hostname:`` (each its own process-id namespace), or machines cloned with one name. Real
``python -m worker --once`` processes on one SQLite file; the second runs in a new PID namespace
(``unshare --pid``), as a container's process does."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import Settings
from tests.conftest import ROOT
from tests.daemon_support import start_worker, worker_env
from tests.llm_server import LLMServer, held, ok
from tests.workers_support import corpus, graph_database, ingested, worker_settings

SESSIONS = 4


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare --pid (Linux, root or user namespaces)")
def test_a_worker_in_another_pid_namespace_takes_no_live_claim_over(tmp_path: Path, settings: Settings) -> None:
    """Worker A claims every session and waits for the model; worker B, same hostname but its own
    PID namespace, cannot see A's process. A's claims are alive, so B takes none: each session's
    text goes to the model once and A commits them all. Before, B took A's owner id (``host:pid``)
    for a process of its own host, found no such pid and deleted A's live claims as a dead
    worker's: it extracted every session again and A's commits rolled back (claim lost)."""
    answers = held()  # A's, until B has run: B must meet A's claims alive, however slowly it starts
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, corpus(SESSIONS), tmp_path))
        env = worker_env(settings.data_dir, **worker_settings(llm.url))
        a = start_worker("--once", env=env, log_path=tmp_path / "a.log")
        deadline = time.monotonic() + 60
        while llm.chat_count < SESSIONS:
            assert time.monotonic() < deadline, (tmp_path / "a.log").read_text()[-3000:]
            time.sleep(0.02)
        llm.default = ok()  # B's requests, if it (wrongly) takes a session over
        b = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "worker", "--once"],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert b.returncode == 0, b.stderr[-3000:]
        answers.release.set()
        assert a.wait(timeout=120) == 0, (tmp_path / "a.log").read_text()[-3000:]
        assert llm.chat_count == SESSIONS  # each session's text paid for once
    with graph_database(settings.data_dir) as db:
        runs = [json.loads(phases).get("extract", {}) for (phases,) in db.query("SELECT phases FROM rem_runs")]
    assert sum(run.get("sessions_claim_lost", 0) for run in runs) == 0, runs
    assert sum(run.get("sessions_digested", 0) for run in runs) == SESSIONS, runs
