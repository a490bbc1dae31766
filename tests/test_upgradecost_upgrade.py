"""Upgrading never pays the model again: a data dir an older release digested with the model
extractor (its code taken from git history, run as a real CLI subprocess against the loopback
chat-completions server) is taken over by this version — its migrations apply, its cycles send no
chat request for the unchanged sessions, the graph is the one the older release exported, and a
session that grows by a turn pays for that turn's chunk only (upgradecost audit)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from store.db import MIGRATIONS
from tests.conftest import ROOT, write_sessions
from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings, session
from worker.cycle import run_cycle
from worker.knowledge import export_graph

# The last commit before migration 15 (schema 14): the oldest schema this audit upgrades from
# whose chunking is this version's (chunks sized by the turn as shown, 5c0d0a7).
OLD_RELEASE = "faa23f52ff577820c71108f485fdcc785b003a19"
SESSIONS = {sid: [f"turn {i:02d} of {sid} names the Part{chr(65 + i)}Item component, and some filler" for i in range(5)]
            for sid in ("up-1", "up-2", "up-3")}


def old_release(destination: Path) -> Path:
    """The older release's code (its packages, from git history) at ``destination``."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD_RELEASE}^{{commit}}"], capture_output=True)
    except FileNotFoundError:  # no git on PATH
        listed = None
    if listed is None or listed.returncode != 0:
        # A skip, even in CI: a shallow clone has no history to take the old release from, and
        # that says nothing of this version's upgrade (a full clone runs it).
        pytest.skip(f"commit {OLD_RELEASE[:7]} is not in this checkout's git history (a shallow clone, or no git?)")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", OLD_RELEASE, "config", "pipelines",
                              "store", "worker"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(destination, filter="data")
    return destination


def run_old_release(code: Path, settings: Settings, *commands: list[str]) -> None:
    """The older release's ``rem-cycle`` commands, one after the other in one interpreter (its
    start-up loaded chromadb: seconds a command on a loaded machine), configured as ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env.update(PYTHONPATH=str(code), REM_DATA_DIR=str(settings.data_dir), REM_EXTRACTOR="openai",
               REM_LLM_BASE_URL=settings.llm_base_url, REM_LLM_MAX_RETRIES="0", REM_LOG_LEVEL="error",
               REM_CHUNK_LIMIT_TOKENS=str(settings.chunk_limit_tokens), REM_PROMPT_ENVELOPE_TOKENS="0")
    script = ("import json, sys; from worker.entry import main\n"
              "for argv in json.loads(sys.argv[1]):\n    assert main(argv) == 0, argv\n")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(commands)], capture_output=True, text=True, env=env,
                          cwd=code, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def graph(exported: str) -> dict[str, Any]:
    snapshot = json.loads(exported)
    snapshot.pop("generated_at")
    return snapshot


def count(settings: Settings, sql: str) -> int:
    """One number from the graph database as it is (a read-only open migrates nothing)."""
    db = open_database(settings, readonly=True)
    try:
        return db.query(sql)[0][0]
    finally:
        db.close()


def schema_version(settings: Settings) -> int:
    return count(settings, "SELECT MAX(version) FROM schema_version")


def answers(settings: Settings) -> int:
    return count(settings, "SELECT COUNT(*) FROM chunk_results WHERE status = 'ok'")


async def test_an_upgraded_data_dir_pays_the_model_for_nothing_it_was_paid_for(tmp_path: Path) -> None:
    code = old_release(tmp_path / "old")
    with LLMServer() as llm:
        settings = llm_settings(tmp_path / "data", llm)
        source = write_sessions(tmp_path / "in.jsonl", [session(sid, turns) for sid, turns in SESSIONS.items()])
        exported = tmp_path / "before.json"
        run_old_release(code, settings, ["import", str(source)], ["--once"], ["export", "--format", "json", "--out", str(exported)])
        before = graph(exported.read_text(encoding="utf-8"))
        assert schema_version(settings) == 14
        assert len(before["sessions"]) == len(SESSIONS) and llm.chat_count == answers(settings) > len(SESSIONS)
        llm.reset()

        for _ in range(2):  # the first reads every row once (its scan marks name no collection id)
            result = await run_cycle(settings)
            assert result.outcome == "completed", result.message
            assert llm.chat_count == 0, [r.prompt[:80] for r in llm.chat_requests]
        assert schema_version(settings) == len(MIGRATIONS)
        out = io.StringIO()
        export_graph(settings, out, fmt="json")
        assert graph(out.getvalue()) == before

        grown = session("up-2", [*SESSIONS["up-2"], "turn 05 of up-2 adds the GrownItem component"])
        await import_sessions(write_sessions(tmp_path / "grown.jsonl", [grown]), chroma=ChromaStore(settings),
                              memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
        extract = (await run_cycle(settings)).phases["extract"]
        assert extract["sessions_digested"] == 1 and extract["chunks_reused"] == extract["chunks_total"] - 1
        assert [r.prompt.count("GrownItem") for r in llm.chat_requests] == [1]
