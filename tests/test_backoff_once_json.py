"""``rem-cycle --once --json`` prints its report also when a stop is cancelled after the grace
time (SIGTERM while a chunk is with a model that does not answer: a real process, the loopback
chat-completions server of tests/llm_server.py)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import make_session, run_cli, write_sessions
from tests.llm_server import LLMServer, slow

ROOT = Path(__file__).resolve().parent.parent


def test_once_json_reports_a_cycle_cancelled_after_the_grace_time(tmp_path: Path) -> None:
    """Found by the audit: the text mode said `stopped before the cycle finished (recorded as
    interrupted)`, but `--json` printed nothing at all on stdout (a script reading it got no JSON)."""
    data = tmp_path / "data"
    source = write_sessions(tmp_path / "in.jsonl", [make_session("s1", 2)])
    assert run_cli("import", str(source), env={"REM_DATA_DIR": str(data)}).returncode == 0
    with LLMServer(default=slow(30)) as server:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("REM_")}, "REM_DATA_DIR": str(data),
               "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url, "REM_LLM_MAX_RETRIES": "0",
               "REM_LOG_LEVEL": "error", "REM_GRACE_SECONDS": "1"}
        once = subprocess.Popen([sys.executable, "-m", "worker", "--once", "--json"], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while server.chat_count == 0 and once.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert once.poll() is None, once.communicate()
        once.send_signal(signal.SIGTERM)  # the model call does not end within 80 % of the grace time
        out, err = once.communicate(timeout=20)
    assert once.returncode == 0, err
    report = json.loads(out)
    assert (report["outcome"], report["reason_code"], report["failure_phase"]) == ("interrupted", "cancelled", "extract"), report
    assert report["phases"]["ingest"]["state"] == "completed" and report["phases"]["extract"]["state"] == "interrupted"
    conn = sqlite3.connect(data / "graph.sqlite3")
    try:
        recorded = conn.execute("SELECT run_id, outcome, reason_code FROM rem_runs").fetchall()
    finally:
        conn.close()
    assert recorded == [(report["run_id"], "interrupted", "cancelled")]
