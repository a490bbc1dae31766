"""What a cycle's retraction leaves in the lazy-edge queue (retractq, sixteenth session).

A session whose rows all left Chroma, or a turn whose row did, is retracted by the next cycle's
ingest — forgotten as ``rem-cycle forget`` forgets it. The lines its extraction queued (the
``REFERENCED_BY`` line of an id a turn wrote that no Chroma row has, tests/test_forget_queue.py)
stayed in ``lazy-edges.jsonl``, a crashed drain's ``.draining`` file, the dead-letter file and the
queue tables, spelling what only it said. Now they go, as a forget's do; an agent's lines and the
other sessions' and turns' stay. Real embedded Chroma, real files, both engines for the tables.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.enqueue import enqueue_lazy_edges
from store.backend import open_database
from store.chroma import ChromaStore
from store.lazy_queue import LazyEdgeQueue, LineFilter
from tests.conftest import run_cli
from tests.lazy_fixtures import seed_chroma
from tests.test_forget_bytes import _files_holding
from tests.test_forget_queue import AGENT_LINE, AGENT_WORD, FIRST, LATE, LATE_REF, LEGACY_REF, OLD_REF, _lines
from tests.test_forget_rest import rows_holding
from worker.cycle import CycleResult, open_stores, run_cycle


async def _cycle(settings: Settings, **update: Any) -> CycleResult:
    # A full scan every cycle: only a full scan sees rows go.
    result = await run_cycle(settings.model_copy(update={"full_scan_interval_seconds": 0, **update}))
    assert result.outcome == "completed", result.message
    return result


async def _built(settings: Settings, tmp_path: Path, **update: Any) -> Settings:
    """``settings`` (with ``update``) after a cycle of FIRST with one attempt (its three lines are
    dead-lettered at once: s-gone's two, s-keep's one) and one of LATE (s-late's line stays queued)."""
    mine = settings.model_copy(update=update)
    stores = await open_stores(mine)
    try:
        await seed_chroma(stores, mine, FIRST, tmp_path)
        await _cycle(mine, lazy_max_attempts=1)
        await seed_chroma(stores, mine, LATE, tmp_path)
        await _cycle(mine)
    finally:
        stores.close()
    return mine


async def _delete_rows(settings: Settings, memory_ids: list[str], *, sessions: tuple[str, ...] = ()) -> None:
    chroma = ChromaStore(settings)
    (await chroma.memories()).delete(ids=memory_ids)
    for sid in sessions:
        (await chroma.summaries()).delete(where={"sessionId": sid})


def _queue_text(queue: LazyEdgeQueue) -> str:
    return "".join(path.read_text() for path in (queue.path, *queue.draining_files(), queue.dead_letter_path) if path.exists())


async def test_a_retracted_session_takes_its_queued_lines_out_of_every_queue_file(settings: Settings, tmp_path: Path) -> None:
    mine = await _built(settings, tmp_path)
    queue = LazyEdgeQueue(mine.queue_path)
    os.rename(queue.path, queue.draining_path)  # s-late's line, as a drain killed after its rename leaves it
    enqueue_lazy_edges(mine.lazy_queue_target, [AGENT_LINE])
    for word in (OLD_REF, LEGACY_REF, LATE_REF, AGENT_WORD):
        assert word in _queue_text(queue), word
    kept_dead = [line for line in _lines(queue.dead_letter_path) if "legacy-9" in line]

    # Two sessions' rows go at once: one retraction, one pass over the queue.
    await _delete_rows(mine, ["s-gone-t0000", "s-gone-t0001", "s-late-t0000"], sessions=("s-gone", "s-late"))
    ingest = (await _cycle(mine)).phases["ingest"]

    for word in (OLD_REF, LEGACY_REF, LATE_REF):
        assert _files_holding(mine.data_dir, word) == [], word
    # The other lines are where they were: s-keep's dead letter, the agent's line naming s-gone's turn.
    assert _lines(queue.dead_letter_path) == kept_dead
    assert AGENT_WORD in _queue_text(queue)
    assert _lines(queue.draining_path) == []
    assert (ingest["sessions_retracted"], ingest["queue_lines_withdrawn"]) == (2, 3)


async def test_a_retracted_turn_takes_only_its_own_queued_lines(settings: Settings, tmp_path: Path) -> None:
    mine = await _built(settings, tmp_path)
    queue = LazyEdgeQueue(mine.queue_path)

    await _delete_rows(mine, ["s-gone-t0000"])  # the turn that wrote OLD_REF; its session's other turn stays
    ingest = (await _cycle(mine)).phases["ingest"]

    assert _files_holding(mine.data_dir, OLD_REF) == []
    assert LEGACY_REF in _queue_text(queue) and LATE_REF in _queue_text(queue)
    assert (ingest["sessions_retracted"], ingest["turns_retracted"], ingest["queue_lines_withdrawn"]) == (0, 1, 1)


async def test_a_turn_a_backfill_takes_out_takes_its_queued_lines_too(settings: Settings, tmp_path: Path) -> None:
    # ``rem-cycle backfill`` syncs as a cycle's ingest does, turns whose rows left Chroma included;
    # the next cycle finds those turns gone already, so only the backfill can withdraw their lines.
    mine = await _built(settings, tmp_path)
    queue = LazyEdgeQueue(mine.queue_path)
    await _delete_rows(mine, ["s-gone-t0000"])

    done = run_cli("backfill", "--days", "3650", "--json", env={"REM_DATA_DIR": str(mine.data_dir)})
    assert done.returncode == 0, done.stderr
    assert OLD_REF not in _queue_text(queue)  # (the graph holds what the session said until the next cycle re-extracts it)
    assert LEGACY_REF in _queue_text(queue) and LATE_REF in _queue_text(queue)
    report = json.loads(done.stdout)
    assert (report["turns_retracted"], report["queue_lines_withdrawn"]) == (1, 1)


async def test_a_cycle_that_retracts_nothing_withdraws_nothing(settings: Settings, tmp_path: Path) -> None:
    mine = await _built(settings, tmp_path)
    queue = LazyEdgeQueue(mine.queue_path)
    before = _queue_text(queue)
    ingest = (await _cycle(mine)).phases["ingest"]
    assert (ingest["sessions_retracted"], ingest["turns_retracted"], ingest["queue_lines_withdrawn"]) == (0, 0, 0)
    assert "queue_error" not in ingest
    assert all(word in _queue_text(queue) for word in (OLD_REF, LEGACY_REF, LATE_REF)) and before


def _table_sources(settings: Settings, table: str) -> list[str]:
    db = open_database(settings)
    try:
        return sorted(json.loads(row[0])["source"] for row in db.query(f"SELECT line FROM {table}"))
    finally:
        db.close()


@pytest.mark.both_backends
async def test_with_the_database_form_a_retraction_deletes_the_rows_its_extraction_queued(settings: Settings, tmp_path: Path) -> None:
    mine = await _built(settings, tmp_path, lazy_queue="database")
    enqueue_lazy_edges(mine.lazy_queue_target, [AGENT_LINE])
    for word in (OLD_REF, LEGACY_REF, LATE_REF):
        assert rows_holding(mine, word), word

    await _delete_rows(mine, ["s-gone-t0000"])  # one turn: its row only
    ingest = (await _cycle(mine)).phases["ingest"]
    assert rows_holding(mine, OLD_REF) == [] and rows_holding(mine, LEGACY_REF) and rows_holding(mine, LATE_REF)
    assert (ingest["turns_retracted"], ingest["queue_lines_withdrawn"]) == (1, 1)

    await _delete_rows(mine, ["s-gone-t0001", "s-late-t0000"], sessions=("s-gone", "s-late"))  # two whole sessions
    ingest = (await _cycle(mine)).phases["ingest"]
    for word in (OLD_REF, LEGACY_REF, LATE_REF):
        assert rows_holding(mine, word) == [], word
    assert AGENT_LINE["source"] in _table_sources(mine, "lazy_edges") + _table_sources(mine, "lazy_edges_dead")
    assert _table_sources(mine, "lazy_edges_dead").count("memory:legacy-9") == 1  # s-keep's dead letter
    # s-gone's dead letter, the line its re-extraction queued again (the turn left), s-late's line.
    assert (ingest["sessions_retracted"], ingest["queue_lines_withdrawn"]) == (2, 3)


def test_many_anchors_are_matched_by_what_each_line_names_not_one_filter_each() -> None:
    # Past a few anchors the filter is the text every extraction line holds, and each line is
    # matched by its own chunk key: the lines of nine of ten sessions go, the tenth's and an
    # agent's stay — the tenth's too when its id starts with a taken one's chunk prefix.
    from pipelines.lazy_edge import ExtractionLines, dead_letter_record
    from store.lazy_queue import edge_line

    def line(sid: str, target: str) -> bytes:
        return edge_line({"source": "memory:elsewhere", "target": target, "relationship": "REFERENCED_BY",
                          "properties": {"sessionId": sid, "chunk_ids": [f"{sid}:chunk:0", f"{sid}:chunk:1"]}})

    sessions = [f"s{i}" for i in range(9)] + ["s0:chunk:9"]
    taken = ExtractionLines.union([*(ExtractionLines.of(sid) for sid in sessions[:8]), ExtractionLines.of("s8", turn="memory:s8-t1")])
    assert taken.filters == LineFilter(texts=('"chunk_ids":[',))  # the text every extraction line holds
    picked = [sid for sid in sessions if taken.matches(line(sid, f"memory:{sid}-t1"))]
    assert picked == sessions[:9]
    assert not taken.matches(line("s8", "memory:s8-t2"))  # s8's other turn
    assert not taken.matches(edge_line({"source": "CONCEPT:x", "target": "memory:s0-t1", "relationship": "NOTED_IN"}))
    assert ExtractionLines.union([ExtractionLines.of("s8", turn="memory:s8-t1"), ExtractionLines.of("s8")]).taken == {"s8": None}
    for few in (taken, ExtractionLines.of("s0"), ExtractionLines.of("sé")):  # the escaped filters of dead letters
        dead = [(json.dumps(dead_letter_record(line(sid, f"memory:{sid}-t1"), reason="max-attempts", detail="",
                                               attempts=5, at="2026-11-01T10:00:00.000Z"), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
                for sid in ("s0", "s9", "sé")]
        assert [few.matches_dead_letter(record) for record in dead] == [few.matches(line(sid, f"memory:{sid}-t1")) for sid in ("s0", "s9", "sé")]
    assert [ExtractionLines.of("sé").matches(line(sid, f"memory:{sid}-t1")) for sid in ("s0", "sé")] == [False, True]


@pytest.mark.both_backends
def test_the_queue_table_withdraws_many_anchors_lines_a_page_at_a_time(settings: Settings) -> None:
    # Ten anchors: the filter is the text every extraction line holds, so every row is a
    # candidate. The table is read a page at a time (store.lazy_table.APPEND_BATCH_ROWS rows): the
    # taken anchors' rows go on every page, across the pages' edges, in both tables; the others stay.
    from pipelines.lazy_edge import ExtractionLines
    from store.lazy_queue import edge_line
    from store.lazy_table import APPEND_BATCH_ROWS, LazyEdgeTable

    def line(sid: str, n: int) -> str:
        return edge_line({"source": f"memory:{sid}-{n}", "target": f"memory:{sid}-t{n}", "relationship": "REFERENCED_BY",
                          "properties": {"sessionId": sid, "chunk_ids": [f"{sid}:chunk:0"]}}).decode().rstrip("\n")

    sessions = [f"s{i}" for i in range(12)]
    lines = [line(sessions[n % 12], n) for n in range(APPEND_BATCH_ROWS * 2 + 37)]
    db = open_database(settings)
    try:
        table = LazyEdgeTable(db)
        table.append_lines(lines)
        with db.transaction() as conn:  # a few dead letters too, past the first page's ids
            conn.execute("INSERT INTO lazy_edges_dead(line, reason, detail, attempts, enqueued_at, dead_lettered_at) "
                         "SELECT line, 'max-attempts', '', 5, enqueued_at, enqueued_at FROM lazy_edges WHERE id % 500 = 0")
        taken = ExtractionLines.union([ExtractionLines.of(sid) for sid in sessions[:10]])
        assert taken.filters == LineFilter(texts=('"chunk_ids":[',))  # the text every extraction line holds
        expected = sum(1 for text in lines if taken.matches(text)) + sum(
            1 for (text,) in db.query("SELECT line FROM lazy_edges_dead") if taken.matches(text))
        assert expected > APPEND_BATCH_ROWS and taken.matches(lines[0]) and not taken.matches(lines[10])
        assert table.withdraw(taken.filters, taken.matches, dry_run=True) == expected
        assert table.withdraw(taken.filters, taken.matches) == expected
        left = [text for (text,) in db.query("SELECT line FROM lazy_edges ORDER BY id")]
        assert left == [text for text in lines if json.loads(text)["properties"]["sessionId"] in sessions[10:]]
        assert all(not taken.matches(text) for (text,) in db.query("SELECT line FROM lazy_edges_dead"))
    finally:
        db.close()
