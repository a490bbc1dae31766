"""A re-extraction queues an edge's line once (leftalone22).

A session's extraction queues a line for each provenance edge whose ``memory:``/``session:``
endpoint is not in the graph (here a turn's reference to a row no Chroma holds). Extracted again
(a turn added: new words), the session queued every such line a second time, a third at the next,
and a drain linked or dead-lettered the same edge once per copy. Now the new line stands in for
the earlier extraction's line for the same edge (anchor, source, target, relationship); an agent's
line and another session's stay. Real embedded Chroma, real cycles, the queue file and the queue
table, both engines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.enqueue import enqueue_lazy_edges
from store.backend import open_database
from store.lazy_queue import LazyEdgeQueue
from tests.test_erase_due import _seed
from tests.test_forget_queue import LATE, LATE_REF, _session
from tests.test_retract_queue import _cycle, _queue_text
from tests.test_rewrite_queue import _queued_lines

DANGLING = "zqdangle5512"  # a memory id s-grow's first turn names, which no Chroma row has
AGENT_WORD = "zqagentline6630"  # in an agent's line for the same edge


def _grow(turns: int) -> dict[str, object]:
    """s-grow with its first ``turns`` turns: the first names DANGLING, the others add words."""
    texts = [f"GraphStore was in memory:{DANGLING}-x.", "RetryPolicy reads the config at start.",
             "ConfigLoader caches the config for a minute."]
    return _session("s-grow", texts[:turns])


def _records_naming(settings: Settings, word: str) -> list[dict[str, Any]]:
    """The live lines (file or table) holding ``word``, as records, sorted by their session."""
    if settings.lazy_queue == "file":
        queue = LazyEdgeQueue(settings.queue_path)
        text = "".join(p.read_text() for p in (queue.path, *queue.draining_files()) if p.exists())
        found = [json.loads(line) for line in text.splitlines() if word in line]
    else:
        db = open_database(settings)
        try:
            found = [json.loads(row[0]) for row in db.query("SELECT line FROM lazy_edges") if word in row[0]]
        finally:
            db.close()
    return sorted(found, key=lambda record: str(record["properties"].get("sessionId")))


def _queued_edges(settings: Settings) -> list[dict[str, Any]]:
    """The live lines naming DANGLING."""
    return _records_naming(settings, DANGLING)


@pytest.mark.parametrize(("backend", "queue"), [("sqlite", "file"), ("sqlite", "database"), ("postgresql", "database")],
                         indirect=["backend"])
async def test_a_session_extracted_again_queues_each_of_its_lines_once(settings: Settings, tmp_path: Path, queue: str) -> None:
    mine = settings.model_copy(update={"lazy_queue": queue})
    await _seed(mine, [_grow(1), *LATE], tmp_path)
    await _cycle(mine)
    assert [_queued_lines(mine, word) for word in (DANGLING, LATE_REF)] == [1, 1]
    (extraction_line,) = _queued_edges(mine)
    agent_line = {**{k: extraction_line[k] for k in ("source", "target", "relationship")}, "properties": {"note": AGENT_WORD}}
    enqueue_lazy_edges(mine.lazy_queue_target, [agent_line])

    for turns in (2, 3):  # new words: the session is extracted again, twice
        await _seed(mine, [_grow(turns)], tmp_path)
        result = await _cycle(mine)
        assert result.phases["extract"]["sessions_digested"] == 1
        # Before, one more copy each time: [3, 1, 1], then [4, 1, 1].
        assert [_queued_lines(mine, word) for word in (DANGLING, LATE_REF, AGENT_WORD)] == [2, 1, 1], turns

    lines = _queued_edges(mine)
    extraction = [line for line in lines if "chunk_ids" in line["properties"]]
    assert len(extraction) == 1 and len(lines) == 2  # the extraction's, and the agent's beside it
    # The newest extraction's line: its chunks are those of the session's three turns.
    assert extraction[0]["properties"]["chunk_ids"][0].startswith("s-grow:chunk:")


async def test_a_drain_holding_the_queue_file_leaves_both_lines_and_the_next_extraction_one(
    settings: Settings, tmp_path: Path,
) -> None:
    """The file form blanks the earlier line under the drain's lock: a drain holding it is working
    on that line, so the new one is queued beside it (as before); nothing is lost."""
    await _seed(settings, [_grow(1)], tmp_path)
    await _cycle(settings)
    queue = LazyEdgeQueue(settings.queue_path)
    with queue.exclusive():  # a drain, running
        await _seed(settings, [_grow(2)], tmp_path)
        await _cycle(settings)
        assert sum(DANGLING in line for line in _queue_text(queue).splitlines()) == 2
    await _seed(settings, [_grow(3)], tmp_path)
    await _cycle(settings)
    assert len(_queued_edges(settings)) == 1


@pytest.mark.parametrize("queue", ["file", "database"])
async def test_a_notes_file_imported_again_queues_its_line_once(settings: Settings, tmp_path: Path, queue: str) -> None:
    """``import-notes`` commits through the same path: a file changed and imported again queued
    its reference's line a second time."""
    from worker.knowledge import import_notes

    mine = settings.model_copy(update={"lazy_queue": queue})
    note = tmp_path / "decisions.md"
    note.write_text(f"We chose rename-then-drain; memory:{DANGLING}-t9 was lost.\n", encoding="utf-8")
    assert (await import_notes(mine, [str(note)]))["imported"] == 1
    note.write_text(f"We chose rename-then-drain; memory:{DANGLING}-t9 was lost.\nRetryPolicy stays.\n", encoding="utf-8")
    assert (await import_notes(mine, [str(note)]))["imported"] == 1
    assert len(_queued_edges(mine)) == 1  # before: 2
