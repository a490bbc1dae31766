"""What ``rem-cycle forget`` leaves in the lazy-edge queue (forgetqueue, fifteenth session).

Extraction queues a line of its own for each ``memory:``/``session:`` id a turn writes that is not
in the graph yet (``REFERENCED_BY``, pipelines/extract/commit.py): the id as the turn spelled it,
the turn as target, the session's chunk ids. Such an id is often never in Chroma (an old session,
a typo), so the line is re-queued each drain and then dead-lettered — and it stayed in
``lazy-edges.jsonl``, a crashed drain's ``.draining`` file, the dead-letter file and the queue
tables after the session or turn was forgotten, spelling what only it said. A line an agent
queued is the agent's and stays (README). Real CLI, real files, real Chroma, both engines.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from config import Settings
from pipelines.enqueue import enqueue_lazy_edges
from store.backend import open_database
from store.lazy_queue import LazyEdgeQueue
from tests.conftest import run_cli, write_sessions
from tests.lazy_fixtures import seed_chroma
from tests.test_forget_bytes import _files_holding
from tests.test_forget_rest import rows_holding
from worker.cycle import run_cycle
from worker.knowledge import forget

OLD_REF = "zqoldref5531"  # a session id only s-gone's first turn writes
LEGACY_REF = "zqlegacy7720"  # a memory id only s-gone's second turn writes
LATE_REF = "zqlateref3308"  # a session id only s-late writes
AGENT_WORD = "zqagentword4410"  # in a line an agent queued naming s-gone's first turn


def _session(sid: str, texts: list[str]) -> dict[str, object]:
    return {"sessionId": sid, "title": f"Session {sid}", "createdAt": "2026-11-01T10:00:00Z", "userId": "user-1",
            "summary": f"About {sid}.", "turns": [{"role": "user", "text": text} for text in texts]}


FIRST = [
    _session("s-gone", [f"ConfigLoader notes are in session:{OLD_REF}-archive.", f"GraphStore was in memory:{LEGACY_REF}-x."]),
    _session("s-keep", ["RetryPolicy reads memory:legacy-9 at start."]),
]
LATE = [_session("s-late", [f"GraphStore moved, see session:{LATE_REF}-notes."])]
AGENT_LINE = {"source": f"CONCEPT:{AGENT_WORD}", "target": "memory:s-gone-t0000", "relationship": "NOTED_IN"}


def _lines(path: Path) -> list[str]:
    return [line.decode().rstrip("\n") for line in LazyEdgeQueue.read_lines(path)] if path.exists() else []


def test_a_forget_withdraws_the_lines_its_extraction_queued_from_every_queue_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    queue = LazyEdgeQueue(data / "lazy-edges.jsonl")
    assert run_cli("import", str(write_sessions(tmp_path / "first.jsonl", FIRST)), env=env).returncode == 0
    # One attempt: the ids are in no Chroma row, so each line is dead-lettered at once.
    assert run_cli("--once", env=env | {"REM_LAZY_MAX_ATTEMPTS": "1"}).returncode == 0
    assert len(_lines(queue.dead_letter_path)) == 3 and not queue.path.exists()
    assert run_cli("import", str(write_sessions(tmp_path / "late.jsonl", LATE)), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0  # s-late's line is re-queued (attempt 1 of 5) …
    os.rename(queue.path, queue.draining_path)  # … and left as a drain killed after its rename leaves it
    edges = tmp_path / "agent.jsonl"
    edges.write_text(json.dumps(AGENT_LINE) + "\n")
    assert run_cli("enqueue", str(edges), env=env).returncode == 0
    for word in (OLD_REF, LEGACY_REF, LATE_REF):
        assert _files_holding(data, word), word
    kept_dead = [line for line in _lines(queue.dead_letter_path) if "legacy-9" in line]

    done = run_cli("forget", "--memory", "s-gone-t0000", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert _files_holding(data, OLD_REF) == [] and _files_holding(data, LEGACY_REF)  # the other turn's stays
    assert json.loads(done.stdout)["queue_lines_withdrawn"] == 1
    planned = run_cli("forget", "--session", "s-late", "--dry-run", "--json", env=env)
    assert json.loads(planned.stdout)["queue_lines_withdrawn"] == 1 and _files_holding(data, LATE_REF)  # counted, kept
    for sid in ("s-gone", "s-late"):
        done = run_cli("forget", "--session", sid, "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["queue_lines_withdrawn"] == 1
    for word in (OLD_REF, LEGACY_REF, LATE_REF):
        assert _files_holding(data, word) == [], word
    # Every other line is where it was, byte for byte: s-keep's dead letter, the agent's line.
    assert _lines(queue.dead_letter_path) == kept_dead
    assert [json.loads(line)["source"] for line in _lines(queue.path)] == [AGENT_LINE["source"]]
    assert _lines(queue.draining_path) == []
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["queue"]["dead_letters"] == 1

    # The agent's line is dead-lettered as it always was, and nothing it or s-gone named comes back.
    drained = run_cli("drain", "--json", env=env)
    assert drained.returncode == 0, drained.stderr
    dead = [json.loads(line) for line in _lines(queue.dead_letter_path)]
    assert [d["reason"] for d in dead] == ["max-attempts", "forgotten"] and AGENT_WORD in dead[1]["line"]
    conn = sqlite3.connect(data / "graph.sqlite3")
    try:
        ids = [r[0] for r in conn.execute("SELECT id FROM nodes")]
    finally:
        conn.close()
    assert [i for i in ids if any(w in i for w in ("s-gone", "s-late", OLD_REF, LEGACY_REF, LATE_REF, AGENT_WORD))] == []


async def _cycled_with_a_queue_table(settings: Settings, tmp_path: Path, *, late: bool = False) -> Settings:
    """``settings`` with the queue in the database, after a cycle of FIRST (one attempt: its lines
    are dead-lettered at once) and, ``late``, one more of LATE (its line stays queued)."""
    from worker.cycle import open_stores

    mine = settings.model_copy(update={"lazy_queue": "database", "lazy_max_attempts": 1})
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, FIRST, tmp_path)
        assert (await run_cycle(mine, stores=stores)).outcome == "completed"
        if late:
            await seed_chroma(stores, mine, LATE, tmp_path)
            assert (await run_cycle(mine.model_copy(update={"lazy_max_attempts": 5}), stores=stores)).outcome == "completed"
    finally:
        stores.close()
    return mine


@pytest.mark.both_backends
async def test_with_the_database_form_a_forget_deletes_the_rows_its_extraction_queued(settings: Settings, tmp_path: Path) -> None:
    mine = await _cycled_with_a_queue_table(settings, tmp_path, late=True)
    enqueue_lazy_edges(mine.lazy_queue_target, [AGENT_LINE])
    for word in (OLD_REF, LEGACY_REF, LATE_REF):
        assert rows_holding(mine, word), word

    turn = forget(mine, memory="memory:s-gone-t0000")
    assert rows_holding(mine, OLD_REF) == [] and rows_holding(mine, LEGACY_REF)
    assert turn["queue_lines_withdrawn"] == 1
    assert forget(mine, session="s-gone")["queue_lines_withdrawn"] == 1
    assert forget(mine, session="s-late")["queue_lines_withdrawn"] == 1
    for word in (OLD_REF, LEGACY_REF, LATE_REF):
        assert rows_holding(mine, word) == [], word
    db = open_database(mine)
    try:
        assert [json.loads(r[0])["source"] for r in db.query("SELECT line FROM lazy_edges")] == [AGENT_LINE["source"]]
        assert [json.loads(r[0])["source"] for r in db.query("SELECT line FROM lazy_edges_dead")] == ["memory:legacy-9"]
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_restored_backup_from_before_the_forget_loses_those_rows_again(settings: Settings, tmp_path: Path) -> None:
    # The queue table is in the backup (the files are not): the restore forgets again, rows too.
    from store.backend import backup as store_backup
    from tests.test_roundtrip_restore import _env
    mine = await _cycled_with_a_queue_table(settings, tmp_path)
    backup = tmp_path / "backups" / "graph.sqlite3"
    store_backup(mine, backup)
    forget(mine, session="s-gone")
    assert rows_holding(mine, OLD_REF) == []

    done = run_cli("restore", str(backup), "--json", env=_env(mine), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for word in (OLD_REF, LEGACY_REF):
        assert rows_holding(mine, word) == [], word
    assert [r for r in rows_holding(mine, "legacy-9") if r.startswith("lazy_edges_dead:")]  # s-keep's dead letter


@pytest.mark.both_backends
async def test_a_forget_leaves_the_lines_of_a_session_whose_id_extends_the_forgotten_ones(settings: Settings, tmp_path: Path) -> None:
    """Found by audit15: a session id may hold ``:chunk:`` (``A-Za-z0-9_.:@+=-``), and the chunks
    of ``s-gone:chunk:7`` (``s-gone:chunk:7:chunk:0``) begin as ``s-gone``'s do, so forgetting
    ``s-gone`` withdrew that other, kept session's queued line too: its reference would never link."""
    from worker.cycle import open_stores

    other = _session("s-gone:chunk:7", [f"ConfigLoader notes are in session:{LATE_REF}-notes."])
    mine = settings.model_copy(update={"lazy_queue": "database"})
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, [FIRST[0], other], tmp_path)
        assert (await run_cycle(mine, stores=stores)).outcome == "completed"
    finally:
        stores.close()
    assert rows_holding(mine, OLD_REF) and rows_holding(mine, LATE_REF)

    assert forget(mine, session="s-gone")["queue_lines_withdrawn"] == 2  # its two turns' lines, not the other's
    assert rows_holding(mine, OLD_REF) == [] and rows_holding(mine, LEGACY_REF) == []
    assert [r for r in rows_holding(mine, LATE_REF) if r.startswith("lazy_edges")], "the kept session's line was withdrawn"
    assert forget(mine, session="s-gone:chunk:7")["queue_lines_withdrawn"] == 1


async def test_a_turns_forget_run_again_after_the_queue_was_busy_withdraws_its_lines(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by audit15: when a drain held the queue files past the wait, ``forget --memory`` said
    to run the same forget again — but the first run had deleted the turn's memory index row, the
    one place its session was read from, so the second withdrew nothing and the forgotten turn's
    id stayed in the dead-letter file. (A kill between the forget's commit and its blanking left
    the same.)"""
    from worker import knowledge
    from worker.cycle import open_stores

    mine = settings.model_copy(update={"lazy_max_attempts": 1})
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, FIRST, tmp_path)
        assert (await run_cycle(mine, stores=stores)).outcome == "completed"
    finally:
        stores.close()
    queue = LazyEdgeQueue(mine.queue_path)
    assert len(_lines(queue.dead_letter_path)) == 3
    full_wait = knowledge._QUEUE_WAIT_SECONDS
    monkeypatch.setattr(knowledge, "_QUEUE_WAIT_SECONDS", 0.0)  # a drain holding the files past the wait
    started = time.monotonic()
    with queue.exclusive():
        busy = forget(mine, memory="memory:s-gone-t0000")
    # The shortened wait is the one the forget waited (a default argument bound at import had kept
    # the full 30 s, and this test waited them).
    assert time.monotonic() - started < full_wait / 2
    assert busy["queue_lines_withdrawn"] == 0 and "another drain" in busy["queue_error"]
    assert _files_holding(mine.data_dir, OLD_REF)

    again = forget(mine, memory="memory:s-gone-t0000")
    assert (again["queue_lines_withdrawn"], again.get("queue_error")) == (1, None)
    assert _files_holding(mine.data_dir, OLD_REF) == [] and _files_holding(mine.data_dir, LEGACY_REF)  # the other turn's stays
    assert len(_lines(queue.dead_letter_path)) == 2


@pytest.mark.both_backends
async def test_a_turns_forget_killed_after_its_commit_withdraws_its_rows_when_run_again(settings: Settings, tmp_path: Path) -> None:
    # The table's rows go in a transaction after the forget's own: a kill between the two left
    # them, and the same forget run again no longer knew the turn's session (audit15).
    from pipelines.forget import forget_memory
    from store.unit_of_work import DatabaseUnitOfWork

    mine = await _cycled_with_a_queue_table(settings, tmp_path)
    db = open_database(mine)
    try:
        assert forget_memory(DatabaseUnitOfWork(db), "s-gone-t0000")["session"] == "s-gone"  # committed, nothing withdrawn
    finally:
        db.close()
    assert rows_holding(mine, OLD_REF)
    planned = forget(mine, memory="s-gone-t0000", dry_run=True)
    assert planned["session"] is None and planned["queue_lines_withdrawn"] == 1
    assert forget(mine, memory="s-gone-t0000")["queue_lines_withdrawn"] == 1
    assert rows_holding(mine, OLD_REF) == [] and rows_holding(mine, LEGACY_REF)  # the other turn's stays
    assert [r for r in rows_holding(mine, "legacy-9") if r.startswith("lazy_edges_dead:")]  # s-keep's


@pytest.mark.both_backends
async def test_a_forget_withdraws_the_lines_of_an_oversized_turns_parts(settings: Settings, tmp_path: Path) -> None:
    # A turn longer than a chunk is extracted in parts, each a unit ``<session>:chunk:<N>:part:<M>``,
    # and its lines carry those ids: the rule that keeps ``s-gone:chunk:7``'s lines (above) must
    # still take them.
    from worker.cycle import open_stores

    long_turn = f"ConfigLoader notes are in session:{OLD_REF}-archive. " + "GraphStore keeps the nodes and edges here. " * 40
    mine = settings.model_copy(update={"lazy_queue": "database", "chunk_limit_tokens": 120, "prompt_envelope_tokens": 0})
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, [_session("s-gone", [long_turn])], tmp_path)
        assert (await run_cycle(mine, stores=stores)).outcome == "completed"
    finally:
        stores.close()
    queued = [r for r in rows_holding(mine, OLD_REF) if r.startswith("lazy_edges")]
    assert queued and all("s-gone:chunk:0:part:" in r for r in queued), queued
    assert forget(mine, session="s-gone")["queue_lines_withdrawn"] == len(queued)
    assert rows_holding(mine, OLD_REF) == []
