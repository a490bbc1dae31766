"""A damaged SQLite graph file (bytes overwritten: ``database disk image is malformed``) ends the
cycle with one error that says to restore a backup, charging no session (leftalone). Before, the
extract phase deferred every session it claimed as if the database were briefly out, cycle after
cycle, and the cycle "completed" (``--once`` exit 0) — or crashed with a bare repr. Real SQLite
files damaged on disk, embedded Chroma, the real CLI, the loopback model server."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from config import Settings
from tests.conftest import run_cli
from tests.llm_server import LLMServer
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_extract_cycle import TURNS, llm_settings, load, session
from store.db import Database, DatabaseUnreadableError, restore_database
from worker.cycle import PHASES, open_stores, run_cycle
from worker.http import Liveness

RESTORE = "stop the workers and restore it from a backup (rem-cycle restore BACKUP)"


def damage(graph: Path, table: str) -> None:
    """Overwrite the root page of ``table`` (its WAL checkpointed into the file first): every read
    or write of the table then meets ``database disk image is malformed``."""
    conn = sqlite3.connect(graph)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()[0]
    finally:
        conn.close()
    with graph.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\xab" * page_size)


def charged(graph: Path) -> list[tuple[str, str, int]]:
    """Every session's state and attempts (``session_digests`` is not the damaged table)."""
    with sqlite3.connect(graph) as conn:
        return conn.execute("SELECT session_id, state, attempts FROM session_digests ORDER BY session_id").fetchall()


async def ingested(settings: Settings, tmp_path: Path, sessions: list[dict[str, object]]) -> None:
    """``sessions`` in Chroma and ingested into the graph, none extracted yet."""
    stores = await open_stores(settings)
    try:
        await load(settings, stores, tmp_path, sessions)
        result = await run_cycle(settings, stores=stores, phases=PHASES[:2])  # provider-ready, ingest
        assert result.outcome == "completed", result.message
    finally:
        stores.close()


async def test_once_on_a_damaged_graph_fails_saying_to_restore_and_charges_no_session(settings: Settings, tmp_path: Path) -> None:
    """The chunk results' table damaged: every session's map reads it. ``--once`` exits 1 with the
    restore advice (``database-damaged``), no session charged; ``/healthz`` says why."""
    await ingested(settings, tmp_path, [session("s1", TURNS), session("s2", [t.replace("CHUNK", "OTHER") for t in TURNS])])
    damage(settings.graph_path, "chunk_results")
    done = run_cli("--once", "--json", env={"REM_DATA_DIR": str(settings.data_dir)})
    report = json.loads(done.stdout)
    # Before: exit 0, outcome completed, both sessions deferred (sessions_deferred 2).
    assert (done.returncode, report["outcome"], report["reason_code"]) == (1, "failed", "database-damaged"), done.stdout
    assert report["failure_phase"] == "extract"
    assert report["message"].startswith("the graph database is damaged (database disk image is malformed)")
    assert report["message"].endswith(RESTORE)
    assert charged(settings.graph_path) == [("s1", "undigested", 0), ("s2", "undigested", 0)]
    assert Liveness(settings).check() == {"status": "unhealthy", "reason": "database-damaged"}


async def test_a_paid_answer_the_damaged_graph_refuses_is_held_and_no_other_session_pays(
    settings: Settings, llm_server: LLMServer, tmp_path: Path
) -> None:
    """The table every write of a chunk result appends to (``state_count_changes``, by trigger)
    damaged: the model answers the first session's chunk, and its store is refused. The phase ends
    there: the answer goes to the held answers' file (the run after the restore stores it), no
    other session asks the model, none is charged; ``status`` says what to do. Before, each
    session asked the model, was refused and deferred, and the cycle went on."""
    mine = llm_settings(settings.data_dir, llm_server, llm_concurrency=1)
    await ingested(mine, tmp_path, [session(f"s{i}", [t.replace("CHUNK", f"S{i}") for t in TURNS[:2]]) for i in range(4)])
    damage(mine.graph_path, "state_count_changes")
    result = await run_cycle(mine)
    assert llm_server.chat_count == 1  # before: 4, one a session
    assert (result.outcome, result.reason_code, result.failure_phase) == ("failed", "database-damaged", "extract")
    assert result.message is not None and result.message.endswith(RESTORE)
    assert [(sid, attempts) for sid, _, attempts in charged(mine.graph_path)] == [(f"s{i}", 0) for i in range(4)]
    held = (mine.data_dir / "held-answers.jsonl").read_text().splitlines()
    assert len(held) == 1 and json.loads(held[0])["session_id"] == "s0"
    status = run_cli("status", env={"REM_DATA_DIR": str(mine.data_dir)})  # it reads the damaged table too
    assert status.returncode == 1
    # Before: 'rem-cycle: database disk image is malformed'.
    damaged = "the graph database is damaged (database disk image is malformed)"
    assert status.stderr == f"rem-cycle: {damaged}: no cycle can mend it; {RESTORE}\n"


async def test_drain_on_a_damaged_graph_says_to_restore_as_the_cycle_does(settings: Settings, tmp_path: Path) -> None:
    """``rem-cycle drain`` meeting the damage (the edges' table, which linking a queued line writes)
    exits 1 with the cycle's one-line advice, not "the unsettled ones wait for the next drain" (no
    drain mends it); the queued line is kept for the drain after the restore."""
    await ingested(settings, tmp_path, [session("s1", TURNS)])
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    line = tmp_path / "line.jsonl"
    line.write_text(json.dumps({"source": "session:s1", "target": "memory:s1-t0", "relationship": "NOTED_IN"}) + "\n")
    assert run_cli("enqueue", str(line), env=env).returncode == 0
    damage(settings.graph_path, "edges")
    once = run_cli("--once", "--json", env=env)
    drained = run_cli("drain", env=env)
    advice = json.loads(once.stdout)["message"]
    assert advice.endswith(RESTORE)
    assert (drained.returncode, drained.stderr.splitlines()) == (once.returncode, [f"rem-cycle: {advice}"]) == (1, [f"rem-cycle: {advice}"])
    assert any("NOTED_IN" in kept.read_text() for kept in settings.data_dir.glob("lazy-edges.jsonl*"))  # .draining too


def pages_never_used(graph: Path, extra: int) -> None:
    """Claim ``extra`` more pages in the file's header than any b-tree or free list holds (zeroed
    pages appended): ``integrity_check`` then reports each ``Page N is never used``, in one row
    of several lines."""
    data = bytearray(graph.read_bytes())
    page_size, pages = int.from_bytes(data[16:18], "big"), int.from_bytes(data[28:32], "big")
    data[28:32] = (pages + extra).to_bytes(4, "big")
    graph.write_bytes(bytes(data) + b"\0" * page_size * extra)


async def test_restore_of_a_damaged_backup_refuses_it_in_one_line(settings: Settings, tmp_path: Path) -> None:
    """A backup ``integrity_check`` finds damaged is refused, nothing changed, with one line: how
    many problems and the first — not SQLite's report, a line per problem under its heading."""
    await ingested(settings, tmp_path, [session("s1", TURNS)])
    env = {"REM_DATA_DIR": str(settings.data_dir)}
    backup = tmp_path / "backup.sqlite3"
    assert run_cli("backup", str(backup), env=env).returncode == 0
    pages_never_used(backup, 3)
    before = charged(settings.graph_path)
    done = run_cli("restore", str(backup), env=env)
    assert done.returncode == 1
    assert [line for line in done.stderr.splitlines() if not line.startswith("{")] == [
        f"rem-cycle: restore from {backup} failed, nothing was changed: {backup} failed integrity_check: "
        f"3 problems, the first: Page {int.from_bytes(backup.read_bytes()[28:32], 'big') - 2} is never used"
    ], done.stderr
    assert charged(settings.graph_path) == before


@pytest.mark.parametrize(("extra", "said"), [(100, "100 problems"), (101, "more than 100 problems"), (250, "more than 100 problems")])
def test_a_backups_problems_are_counted_exactly_up_to_100(tmp_path: Path, extra: int, said: str) -> None:
    """SQLite stops its report at the limit it is given: exactly 100 problems are said as 100, and
    only a report cut short as "more than 100" (before, both were "100 or more")."""
    backup = tmp_path / "backup.sqlite3"
    Database(backup).close()
    pages_never_used(backup, extra)
    first = int.from_bytes(backup.read_bytes()[28:32], "big") - extra + 1
    with pytest.raises(DatabaseUnreadableError) as refused:
        restore_database(backup, tmp_path / "graph.sqlite3")
    assert str(refused.value) == f"{backup} failed integrity_check: {said}, the first: Page {first} is never used"
    assert not (tmp_path / "graph.sqlite3").exists()
