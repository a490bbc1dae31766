"""What ``rem-cycle forget`` takes out leaves rem-cycle's files, not only its queries: a turn that
held a password must not be readable in the raw bytes of the data dir afterwards (forgetbytes,
thirteenth session). SQLite kept a forgotten turn's words in the recall index's full-text segments
(FTS5 writes a delete marker beside them until the segments merge) and, while another process held
the database open (a daemon, ``rem-cycle mcp``), the pages as they were in ``graph.sqlite3-wal``.
PostgreSQL keeps a deleted row in its page until a ``VACUUM``. Through the real CLI on real files
and a real server; Chroma's own rows stay (rem-cycle does not own them) and are not looked at."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from config import Settings, load_settings
from tests.conftest import run_cli, write_sessions
from tests.lazy_fixtures import seed_chroma
from tests.llm_server import LLMServer, Status
from tests.test_model_faults import fault_settings
from store.chroma import ChromaStore
from worker.cycle import Stores, open_stores, run_cycle
from worker.knowledge import forget

TURN_SECRET = "zqturnsecret8842"  # one word to the tokenizer, so the full-text index holds it whole
SESSION_SECRET = "zqsessionsecret5531"


def _sessions() -> list[dict[str, object]]:
    """Three sessions; s-keep's turn 1 holds TURN_SECRET, s-gone's turns and summary SESSION_SECRET."""
    def session(sid: str, texts: list[str], summary: str) -> dict[str, object]:
        return {"sessionId": sid, "title": f"Session {sid}", "createdAt": "2026-11-01T10:00:00Z", "userId": "user-1",
                "summary": summary, "turns": [{"role": "user", "text": text} for text in texts]}
    return [
        session("s-keep", ["We moved ConfigLoader to src/config.py.",
                           f"The staging password for ConfigLoader is {TURN_SECRET}, keep it out of git.",
                           "GraphStore reads ConfigLoader at start."], "ConfigLoader moved."),
        session("s-gone", [f"The deploy token for GraphStore is {SESSION_SECRET}.", "GraphStore retries three times."],
                f"GraphStore's token {SESSION_SECRET}."),
        session("s-other", ["RetryPolicy wraps GraphStore.", "ConfigLoader has a test now."], "RetryPolicy added."),
    ]


def _files_holding(data: Path, secret: str) -> list[str]:
    """Every file under ``data`` (but Chroma's, which are the agents') whose raw bytes hold ``secret``."""
    return sorted(
        str(path.relative_to(data)) for path in data.rglob("*")
        if path.is_file() and "chroma" not in path.relative_to(data).parts and secret.encode() in path.read_bytes()
    )


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    """A data dir with the three sessions imported into its Chroma (no cycle yet)."""
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("import", str(write_sessions(tmp_path / "sessions.jsonl", _sessions())), env=env).returncode == 0
    return data


def test_a_forgotten_turn_and_session_leave_the_database_files_while_another_process_holds_them(imported: Path) -> None:
    env = {"REM_DATA_DIR": str(imported)}
    # Another process has the database open for the whole time, as a daemon or ``rem-cycle mcp``
    # does: SQLite then neither checkpoints nor deletes graph.sqlite3-wal when a command exits.
    holder = sqlite3.connect(imported / "graph.sqlite3")
    try:
        holder.execute("PRAGMA journal_mode=WAL")
        holder.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()  # maps the WAL index: open, as a reader
        assert run_cli("--once", env=env).returncode == 0
        assert _files_holding(imported, TURN_SECRET) == ["graph.sqlite3-wal"]  # all of the cycle is in the log yet
        assert _files_holding(imported, SESSION_SECRET) == ["graph.sqlite3-wal"]
        done = run_cli("forget", "--memory", "s-keep-t0001", "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert _files_holding(imported, TURN_SECRET) == []
        assert json.loads(done.stdout)["erased"] is True
        assert _files_holding(imported, SESSION_SECRET)  # not asked for yet
        assert run_cli("forget", "--session", "s-gone", env=env).returncode == 0
        assert _files_holding(imported, SESSION_SECRET) == []
    finally:
        holder.close()
    # What is left still works: recall finds the turns kept, the file is sound.
    recall = run_cli("recall", "ConfigLoader", "--json", env=env)
    assert recall.returncode == 0 and "s-keep-t0000" in recall.stdout and TURN_SECRET not in recall.stdout
    conn = sqlite3.connect(imported / "graph.sqlite3")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for table in ("recall_turns_fts", "recall_sessions_fts", "recall_node_docs_fts"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")  # the merged segments are sound
    finally:
        conn.close()


def test_a_restored_backup_from_before_a_forget_does_not_bring_the_text_back_into_the_files(imported: Path, tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(imported)}
    assert run_cli("--once", env=env).returncode == 0
    backup = tmp_path / "before.sqlite3"
    assert run_cli("backup", str(backup), env=env).returncode == 0
    assert run_cli("forget", "--memory", "s-keep-t0001", env=env).returncode == 0
    done = run_cli("restore", str(backup), env=env)
    assert done.returncode == 0, done.stderr
    assert _files_holding(imported, TURN_SECRET) == []
    assert TURN_SECRET.encode() in backup.read_bytes()  # the backup itself is the operator's (README)


def test_the_erase_says_so_when_a_reader_of_the_old_pages_keeps_the_log(tmp_path: Path) -> None:
    # A reader still inside a snapshot from before the forget (a slow ``show`` of another process)
    # keeps the old pages in the log: the erase cannot truncate it, says False (the CLI's
    # ``"erased": false``), and succeeds once the reader has gone.
    from store.db import Database

    path = tmp_path / "graph.sqlite3"
    writer = Database(path, timeout=0.2)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        with writer.transaction() as conn:
            conn.execute("INSERT INTO recall_turns(memory_id, session_id, role, text) VALUES ('m-1', 's-1', 'user', ?)",
                         (TURN_SECRET,))
            # indexed as store.recall_index does it (the table's delete trigger takes the row out of it)
            conn.execute("INSERT INTO recall_turns_fts(rowid, text) SELECT id, rem_search_text(text) FROM recall_turns")
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM recall_turns").fetchall()
        with writer.transaction() as conn:
            conn.execute("DELETE FROM recall_turns WHERE memory_id = 'm-1'")
        assert writer.erase_deleted() is False
        assert path.with_name("graph.sqlite3-wal").stat().st_size > 0
        reader.execute("COMMIT")
        assert writer.erase_deleted() is True
        assert path.with_name("graph.sqlite3-wal").stat().st_size == 0
        assert TURN_SECRET.encode() not in path.read_bytes()
    finally:
        reader.close()
        writer.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_postgresql_vacuums_the_tables_a_forget_wrote_once_it_has_committed(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    # A role that does not own the server cannot read the relation files or use pageinspect: what
    # shows that the dead rows were reclaimed is the server's count of manual VACUUMs per table.
    await seed_chroma(stores, settings, _sessions(), tmp_path)
    assert (await run_cycle(settings, stores=stores)).outcome == "completed"
    tables = ("nodes", "node_points", "recall_turns", "recall_sessions", "chunk_results", "session_digests")

    def vacuums() -> dict[str, int]:
        rows = stores.db.query(
            "SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE schemaname = current_schema()"
        )
        return {name: count for name, count in rows if name in tables}

    before = vacuums()
    report = forget(settings, session="s-gone")
    after = vacuums()
    assert sorted(name for name in tables if after[name] > before[name]) == sorted(tables)
    assert report["erased"] is True and report["memories"] == 2
    assert stores.db.query("SELECT COUNT(*) FROM recall_turns WHERE text LIKE ?", (f"%{SESSION_SECRET}%",))[0][0] == 0
    dry = forget(settings, session="s-keep", dry_run=True)  # a dry run erases nothing: it changed nothing
    assert "erased" not in dry and vacuums() == after


async def test_a_forgotten_turn_takes_the_models_refusal_that_quoted_it_with_it(settings: Settings, tmp_path: Path) -> None:
    # The model refused the chunk holding the turn, quoting it: the failed attempt's error (what
    # ``status`` lists) held the text after the turn was forgotten — a forget took out only the
    # chunk results with an answer that quoted the turn.
    refusal = Status(200, json.dumps({"choices": [{"message": {
        "role": "assistant", "content": None, "refusal": f"I will not repeat the password {TURN_SECRET}."}, "finish_reason": "stop"}]}))
    with LLMServer() as server:
        server.script(*[refusal] * 4, match=TURN_SECRET)
        mine = fault_settings(settings.data_dir, server)
        stores = await open_stores(mine)
        try:
            await seed_chroma(stores, mine, _sessions(), tmp_path)
            assert (await run_cycle(mine, stores=stores)).outcome == "completed"
            assert any(TURN_SECRET in (row["error"] or "") for row in stores.runstate.failing_chunks())
            report = forget(mine, memory="s-keep-t0001")
            assert [row for row in stores.runstate.failing_chunks() if row["session_id"] == "s-keep"] == []
            assert report["chunk_results"] >= 1
            assert stores.runstate.get_digests(["s-keep"])["s-keep"].defer_reason is None
        finally:
            stores.close()
    assert _files_holding(settings.data_dir, TURN_SECRET) == []


async def test_rows_an_agent_deletes_from_chroma_leave_the_files_at_the_end_of_the_cycle_that_retracts_them(
    imported: Path, clean_env: pytest.MonkeyPatch,
) -> None:
    # An agent deleting its rows asks to forget them: the cycle that retracts a session (all its
    # rows gone) or a turn (one row gone) took them out of the graph, but their words stayed in
    # the full-text index's older segments until some later forget merged them.
    env = {"REM_DATA_DIR": str(imported), "REM_FULL_SCAN_INTERVAL_SECONDS": "0"}  # a full scan sees rows go
    assert run_cli("--once", env=env).returncode == 0
    for name, value in env.items():
        clean_env.setenv(name, value)
    chroma = ChromaStore(load_settings())
    (await chroma.memories()).delete(ids=["s-gone-t0000", "s-gone-t0001", "s-keep-t0001"])
    (await chroma.summaries()).delete(where={"sessionId": "s-gone"})
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 0, done.stderr
    phases = json.loads(done.stdout)["phases"]
    assert (phases["ingest"]["sessions_retracted"], phases["ingest"]["turns_retracted"]) == (1, 1)
    assert phases["finalize"]["erased"] is True
    assert _files_holding(imported, SESSION_SECRET) == []
    assert _files_holding(imported, TURN_SECRET) == []
    quiet = run_cli("--once", "--json", env=env)  # nothing retracted: no erase (it rewrites the full-text index)
    assert quiet.returncode == 0 and "erased" not in json.loads(quiet.stdout)["phases"]["finalize"]
