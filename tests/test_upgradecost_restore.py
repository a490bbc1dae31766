"""`rem-cycle restore` of a backup made before some sessions were extracted does not have the model
paid again for them: the replaced graph's chunk extractions are kept in the restored one (upgradecost
audit: every one was asked again). Real SQLite or PostgreSQL, embedded Chroma, the real CLI for
restore, the loopback chat-completions server counting requests."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.backend import backup as store_backup
from store.backend import open_database
from store.chroma import ChromaStore
from tests.conftest import run_cli, write_sessions
from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings, session
from worker.cycle import run_cycle
from worker.knowledge import export_graph, forget

TURNS = [f"turn {i:02d} of {{sid}} names the Part{chr(65 + i)}Item component and some filler" for i in range(6)]


async def _digest(settings: Settings, tmp_path: Path, *sids: str) -> dict[str, Any]:
    source = write_sessions(tmp_path / "in.jsonl", [session(sid, [t.format(sid=sid) for t in TURNS]) for sid in sids])
    await import_sessions(source, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result.phases["extract"]


def _cli(settings: Settings, *args: str) -> str:
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    if settings.database_url is not None:
        env["REM_DATABASE_URL"] = settings.database_url.get_secret_value()
    done = run_cli(*args, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _graph(settings: Settings) -> dict[str, Any]:
    out = io.StringIO()
    export_graph(settings, out, fmt="json")  # what `rem-cycle export --format json` writes
    snapshot = json.loads(out.getvalue())
    snapshot.pop("generated_at")
    return snapshot


def _answers(settings: Settings, sid: str) -> int:
    db = open_database(settings, readonly=True)
    try:
        return db.query("SELECT COUNT(*) FROM chunk_results WHERE session_id = ? AND status = 'ok'", (sid,))[0][0]
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_restored_backup_does_not_pay_again_for_what_was_extracted_since(
    settings: Settings, tmp_path: Path
) -> None:
    with LLMServer() as llm:
        mine = llm_settings(settings.data_dir, llm, database_url=settings.database_url)
        await _digest(mine, tmp_path, "before")
        backup = tmp_path / "backups" / "graph.backup"
        store_backup(mine, backup)  # what `rem-cycle backup` runs
        since = await _digest(mine, tmp_path, "since-1", "since-2")
        forget(mine, session="before")  # after the backup: final, its extractions included
        paid = llm.chat_count
        graph = _graph(mine)

        restored = json.loads(_cli(mine, "restore", str(backup), "--json"))
        assert restored["answers_kept"] == since["chunks_total"]
        assert restored["forgotten_again"] == {"sessions": 1, "memories": 0, "nodes": 0}
        assert _answers(mine, "before") == 0
        again = (await run_cycle(mine)).phases["extract"]
        # Before: every chunk of since-1 and since-2 asked again (the backup had no answer for them).
        assert llm.chat_count == paid, [r.prompt[:80] for r in llm.chat_requests[-3:]]
        assert (again["sessions_digested"], again["chunks_reused"]) == (2, since["chunks_total"])
        assert _graph(mine) == graph
