"""A turn written again under its id reaches the graph: a re-imported transcript with an edited
turn, `import --allow-move`, and an agent that deletes a turn and adds it back with other text.
Real cycles over real embedded Chroma, both engines (roundtrip audit)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import chromadb
import pytest
from chromadb.config import Settings as ChromaSettings

from config import Settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from tests.test_change_scan import _query
from tests.conftest import write_sessions
from worker.cycle import run_cycle
from pipelines.recall import RecallRequest
from worker.recall import run_recall


def _session(sid: str, texts: list[str], *, created: str, ids: list[str] | None = None) -> dict[str, Any]:
    turns = [{"id": (ids or [f"{sid}-t{i}" for i in range(len(texts))])[i], "role": "user", "text": text} for i, text in enumerate(texts)]
    return {"sessionId": sid, "title": f"Session {sid}", "createdAt": created, "summary": f"about {sid}", "turns": turns}


A = ["The LazyEdgeQueue drains lines from the queue file.", "My password is hunter2, keep it secret.", "The Drainer renames the file."]
B = ["The RecallIndex ranks turns with BM25.", "The Chunker cuts sessions into chunks."]


async def _import(settings: Settings, path: Path, sessions: list[dict[str, Any]], *, allow_move: bool = False) -> Any:
    write_sessions(path, sessions)
    stats = await import_sessions(path, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                                  summary_collection=settings.session_collection, allow_move=allow_move)
    assert not stats.bad_lines, stats.bad_lines
    return stats


async def _cycle(settings: Settings) -> dict[str, Any]:
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result.phases


def _served(settings: Settings, memory_id: str) -> str | None:
    """The text recall serves for the turn (its recall index row)."""
    rows = _query(settings, "SELECT text FROM recall_turns WHERE memory_id = ?", (memory_id,))
    return rows[0][0] if rows else None


def _node(settings: Settings, node_id: str) -> dict[str, Any]:
    return json.loads(_query(settings, "SELECT properties FROM nodes WHERE id = ?", (node_id,))[0][0])


def _quoted(settings: Settings, memory_id: str) -> set[str]:
    """The evidence quotes the extraction took from the turn."""
    return {r[0] for r in _query(settings, "SELECT evidence FROM node_points WHERE memory_id = ?", (memory_id,))}


async def _recalled(settings: Settings, query: str) -> dict[str, str]:
    answer = await run_recall(settings, RecallRequest(query=query, budget_tokens=20_000))
    return {t["memory_id"]: t["text"] for t in answer["turns"]}


@pytest.mark.both_backends
async def test_a_reimported_transcript_with_an_edited_turn_is_read_again_by_the_next_cycle(settings: Settings, tmp_path: Path) -> None:
    sessions = [_session("a", A, created="2026-11-01T10:00:00Z"), _session("b", B, created="2026-11-02T10:00:00Z")]
    await _import(settings, tmp_path / "in.jsonl", sessions)
    await _cycle(settings)
    assert "hunter2" in (_served(settings, "memory:a-t1") or "")

    # The user redacts the turn in the transcript and imports it again: the import says it wrote it.
    redacted = [_session("a", [A[0], "My password is [redacted]; the Redactor took it out.", A[2]], created="2026-11-01T10:00:00Z"), sessions[1]]
    stats = await _import(settings, tmp_path / "redacted.jsonl", redacted)
    assert (stats.memories_written, stats.memories_unchanged) == (1, 4)
    phases = await _cycle(settings)

    # Before: the revision (ids and summary) had not changed, so nothing was read again: recall
    # served the secret word for word, and the graph kept what the old text said, for ever.
    assert phases["ingest"]["sessions_synced"] == 1 and phases["extract"]["sessions_digested"] == 1
    assert _served(settings, "memory:a-t1") == redacted[0]["turns"][1]["text"]
    assert _node(settings, "memory:a-t1")["contentHash"] == hashlib.sha256(redacted[0]["turns"][1]["text"].encode()).hexdigest()
    assert not any("hunter2" in quote for quote in _quoted(settings, "memory:a-t1"))
    assert "hunter2" not in json.dumps(await _recalled(settings, "password hunter2"))
    # The other turns' chunks are not asked again, and session b is left alone.
    assert _query(settings, "SELECT session_id FROM session_digests WHERE state = 'digested' ORDER BY session_id") == [("a",), ("b",)]
    # Nothing is left for a full scan to find.
    again = await _cycle(settings.model_copy(update={"full_scan_interval_seconds": 0}))
    assert (again["ingest"]["scan"], again["ingest"]["sessions_synced"], again["extract"]["sessions_digested"]) == ("full", 0, 0)


@pytest.mark.both_backends
@pytest.mark.parametrize("b_created", ["2026-11-02T10:00:00Z", "2026-10-31T10:00:00Z"], ids=["old-session-synced-first", "new-session-synced-first"])
async def test_import_allow_move_moves_the_turn_in_the_graph(settings: Settings, tmp_path: Path, b_created: str) -> None:
    await _import(settings, tmp_path / "in.jsonl", [_session("a", A, created="2026-11-01T10:00:00Z"), _session("b", B, created=b_created)])
    await _cycle(settings)
    moved = _session("b", [*B, A[2]], created=b_created, ids=["b-t0", "b-t1", "a-t2"])
    stats = await _import(settings, tmp_path / "move.jsonl", [moved], allow_move=True)
    assert [(m["turn"], m["from_session"], m["to_session"]) for m in stats.moves] == [("a-t2", "a", "b")]
    # One session per cycle, oldest first: the two sessions are synced apart, in either order.
    one_by_one = settings.model_copy(update={"batch_limit": 1})
    synced = [(await _cycle(one_by_one))["ingest"]["sessions_synced"] for _ in range(2)]

    # Before: the import moved the row in place, which no scan looks at again (not even a full
    # one: a known turn's session is taken from the memory index), so the graph kept the turn in
    # session a for good; and a turn synced into b before a was synced kept its link to a.
    assert synced == [1, 1]
    assert _node(settings, "memory:a-t2")["sessionId"] == "b"
    assert _query(settings, "SELECT target FROM edges WHERE source = 'memory:a-t2' AND relationship = 'ORIGINATES_IN'") == [("session:b",)]
    assert _query(settings, "SELECT session_id FROM memory_index WHERE memory_id = 'a-t2'") == [("b",)]
    assert _query(settings, "SELECT session_id FROM recall_turns WHERE memory_id = 'memory:a-t2'") == [("session:b",)]
    anchors = {r[0] for r in _query(settings, "SELECT anchor FROM node_points WHERE memory_id = 'memory:a-t2'")}
    assert anchors <= {"session:b"}
    again = await _cycle(settings.model_copy(update={"full_scan_interval_seconds": 0}))
    assert (again["ingest"]["scan"], again["ingest"]["sessions_synced"]) == ("full", 0)


async def test_a_turn_an_agent_deletes_and_adds_back_with_other_text_is_read_again(settings: Settings, tmp_path: Path) -> None:
    await _import(settings, tmp_path / "in.jsonl", [_session("a", A, created="2026-11-01T10:00:00Z"), _session("b", B, created="2026-11-02T10:00:00Z")])
    await _cycle(settings)
    chroma = ChromaStore(settings)
    memories = await chroma.memories()
    row = memories.get(ids=["a-t0"], include=["metadatas"])
    memories.delete(ids=["a-t0"])
    new_text = "The LazyEdgeQueue moved to the TableQueue."
    memories.add(ids=["a-t0"], documents=[new_text], metadatas=row["metadatas"])
    await ChromaStore(settings).upsert(settings.memory_collection, ["b-t9"], ["The Chunker also counts tokens."],
                                       [{"sessionId": "b", "turnIndex": 9, "role": "user"}])
    phases = await _cycle(settings)
    assert phases["ingest"]["sessions_synced"] == 2 and phases["extract"]["sessions_digested"] == 2
    assert _served(settings, "memory:a-t0") == new_text
    assert new_text in (await _recalled(settings, "TableQueue")).values()


async def test_a_collection_made_again_with_the_same_rows_in_the_same_order_is_read_again(settings: Settings, tmp_path: Path) -> None:
    sessions = [_session("a", A, created="2026-11-01T10:00:00Z"), _session("b", B, created="2026-11-02T10:00:00Z")]
    await _import(settings, tmp_path / "in.jsonl", sessions)
    await _cycle(settings)
    # The agents re-index their store: both collections dropped and written again, row for row in
    # the same order — one turn redacted on the way.
    client = chromadb.PersistentClient(path=str(settings.chroma_path), settings=ChromaSettings(anonymized_telemetry=False))
    for name in (settings.memory_collection, settings.session_collection):
        client.delete_collection(name)
    redacted = [_session("a", [A[0], "My password is [redacted].", A[2]], created="2026-11-01T10:00:00Z"), sessions[1]]
    await _import(settings, tmp_path / "again.jsonl", redacted)
    phases = await _cycle(settings)

    # Before: the scan marks' ids were where they had been, so nothing was read again, ever.
    assert (phases["ingest"]["scan"], phases["ingest"]["sessions_synced"], phases["extract"]["sessions_digested"]) == ("full", 2, 1)
    assert _served(settings, "memory:a-t1") == "My password is [redacted]."
    again = await _cycle(settings)
    assert (again["ingest"]["scan"], again["ingest"]["sessions_synced"]) == ("new rows", 0)


@pytest.mark.parametrize(("order", "after"), [
    (["p", "a", "b", "c"], []),                    # nothing changed
    (["p", "a", "b", "c", "x"], ["x"]),            # a new row
    (["p", "a", "c", "b"], ["b"]),                 # b deleted and added again
    (["p", "a", "b", "x", "c"], ["x", "c"]),       # the last row deleted, a new one, the last added again
    (["b", "c", "p"], ["p"]),                      # a deleted, p (before the tail) added again
    (["p", "x"], []),                              # every tail row gone: nothing to tell by
], ids=["same", "new-row", "readded", "last-readded-after-a-new-row", "before-the-tail-readded", "tail-gone"])
def test_the_rows_after_a_marks_tail(order: list[str], after: list[str]) -> None:
    from pipelines.ingest import _RowsAfterMark

    rows = _RowsAfterMark(["a", "b", "c"])
    for page in (order[:2], order[2:]):  # read page by page
        rows.read(page)
    assert rows.ids() == after
