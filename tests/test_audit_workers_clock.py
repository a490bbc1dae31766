"""Adversarial audit: workers on hosts whose clocks disagree, sharing one PostgreSQL database. A
second host cannot run here: the skewed worker is a real ``python -m worker --once`` process whose
clock, as rem-cycle's lease code reads it (``store.claims``), runs an hour ahead."""

from __future__ import annotations

import asyncio
import json
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
# This host's clock an hour ahead, for the lease code: datetime.now as store.claims reads it.
_AN_HOUR_AHEAD = (
    "import datetime as d, runpy, store.claims as claims\n"
    "class Ahead(d.datetime):\n"
    "    @classmethod\n"
    "    def now(cls, tz=None):\n"
    "        return d.datetime.now(tz) + d.timedelta(hours=1)\n"
    "claims.datetime = Ahead\n"
    "runpy.run_module('worker', run_name='__main__', alter_sys=True)\n"
)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_host_whose_clock_runs_ahead_takes_no_live_claim_over(tmp_path: Path, settings: Settings, database_url: str) -> None:
    """Worker A claims every session and waits for the model; worker B, whose clock is an hour
    ahead (well past the 5-minute lease), starts beside it. Leases are stamped and compared on the
    database server's clock, so B sees A's claims alive and takes none: every session's text goes
    to the model once and A commits them all. Before, B read A's leases as an hour expired, took
    every session over and paid the model again, and A's commits rolled back (claim lost)."""
    answers = held()  # A's, until B has run: B must meet A's claims alive, however slowly it starts
    with LLMServer(default=answers) as llm:
        asyncio.run(ingested(settings.data_dir, corpus(SESSIONS), tmp_path, database_url=database_url))
        env = worker_env(settings.data_dir, **worker_settings(llm.url), database_url=database_url)
        a = start_worker("--once", "--json", env=env, log_path=tmp_path / "a.log")
        deadline = time.monotonic() + 60
        while llm.chat_count < SESSIONS:
            assert time.monotonic() < deadline, (tmp_path / "a.log").read_text()[-3000:]
            time.sleep(0.02)
        llm.default = ok()  # B's requests, if it (wrongly) takes a session over
        b = subprocess.run([sys.executable, "-c", _AN_HOUR_AHEAD, "--once"], env=env, cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert b.returncode == 0, b.stderr[-3000:]
        answers.release.set()
        assert a.wait(timeout=120) == 0, (tmp_path / "a.log").read_text()[-3000:]
        assert llm.chat_count == SESSIONS  # each session's text paid for once
    with graph_database(settings.data_dir, database_url) as db:
        runs = [json.loads(phases).get("extract", {}) for (phases,) in db.query("SELECT phases FROM rem_runs")]
        states = dict(db.query("SELECT state, COUNT(*) FROM session_digests GROUP BY state"))
    assert states == {"digested": SESSIONS}
    assert sum(run.get("sessions_claim_lost", 0) for run in runs) == 0, runs
    assert sum(run.get("sessions_digested", 0) for run in runs) == SESSIONS, runs
