"""Audit of the model path under SIGKILL: a real ``rem-cycle --once`` with ``REM_EXTRACTOR=openai``
against the loopback chat-completions server (tests/llm_server.py), killed again and again while
its chunks are with the model, then run to the end. Every chunk answered before a kill is kept
(``chunk_results``) and never asked again: the model is paid twice only for what was in flight at a
kill (at most ``REM_LLM_CONCURRENCY`` requests each), and the graph equals an uninterrupted run's."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

from config import load_settings
from pipelines.importer import import_sessions
from tests.conftest import SAMPLE
from tests.llm_server import LLMServer, slow
from tests.test_crash_matrix import ForkServer, alive, canonical_dump, dump_diff
from worker.cycle import open_stores

CONCURRENCY = 4
KILL_AFTER = (5, 9, 14)  # kill when this many more chat requests have arrived


def env(data: Path, server: LLMServer) -> dict[str, str]:
    return {"REM_DATA_DIR": str(data), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url,
            "REM_LLM_MAX_RETRIES": "0", "REM_LLM_CONCURRENCY": str(CONCURRENCY), "REM_LOG_LEVEL": "error",
            "REM_CHUNK_LIMIT_TOKENS": "3000", "REM_PROMPT_ENVELOPE_TOKENS": "500"}


def chunk_states(data: Path) -> Counter[str]:
    conn = sqlite3.connect(data / "graph.sqlite3")
    try:
        return Counter(r[0] for r in conn.execute("SELECT status FROM chunk_results"))
    finally:
        conn.close()


async def test_kills_mid_map_pay_only_for_what_was_in_flight(tmp_path: Path) -> None:
    template = tmp_path / "template"
    stores = await open_stores(load_settings(data_dir=template))
    try:
        await import_sessions(SAMPLE, chroma=stores.chroma, memory_collection="neo-agent-memory",
                              summary_collection="neo-agent-sessions")
    finally:
        stores.close()
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    shutil.copytree(template, reference)
    shutil.copytree(template, killed)
    forks = ForkServer()
    try:
        with LLMServer(default=slow(0.05)) as server:
            assert forks.wait(forks.run(["--once"], env(reference, server))) == 0
            prompts = Counter(r.prompt for r in server.chat_requests)
            units = len(prompts)
            assert units > 30 and set(prompts.values()) == {1}
            server.reset()

            for step in KILL_AFTER:
                before = server.chat_count
                pid = forks.run(["--once"], env(killed, server))
                deadline = time.monotonic() + 60
                while server.chat_count < before + step and alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.002)
                assert alive(pid), "the cycle ended before the kill"
                os.kill(pid, signal.SIGKILL)
                forks.wait(pid)
            assert forks.wait(forks.run(["--once"], env(killed, server))) == 0
            assert forks.wait(forks.run(["--once"], env(killed, server))) == 0  # nothing left to ask

            # (a request the kill cut off before its body was sent reaches the server without one)
            asked = Counter(r.prompt for r in server.chat_requests if r.prompt)
            assert set(asked) == set(prompts), "every chunk asked, and only those"
            paid_twice = sum(n - 1 for n in asked.values())
            assert paid_twice <= CONCURRENCY * len(KILL_AFTER), asked.most_common(5)
            assert chunk_states(killed) == Counter({"ok": units})
        got, want = canonical_dump(killed / "graph.sqlite3"), canonical_dump(reference / "graph.sqlite3")
        assert got == want, dump_diff(got, want)
        conn = sqlite3.connect(killed / "graph.sqlite3")
        try:
            outcomes = Counter(r[0] for r in conn.execute("SELECT outcome FROM rem_runs"))
            states = Counter(r[0] for r in conn.execute("SELECT state FROM session_digests"))
        finally:
            conn.close()
        assert outcomes == Counter({"abandoned": len(KILL_AFTER), "completed": 2}), outcomes
        assert states == Counter({"digested": 26})
    finally:
        forks.close()
