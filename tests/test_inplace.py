"""A memory row updated in place is seen by the next full scan (fullscan, twenty-second session).

Chroma's ``update``/``upsert`` of an existing id keeps the row's place in insertion order, and a
session's input revision is its memory ids and summary: no cycle saw such a row unless it was the
collection's last — many agent-memory frameworks correct or redact a turn that way, and the graph,
the recall index and the extraction kept the old words for good. Nor did any scan see more than the
32 last rows rewritten together in their order (the rows before the mark's tail). The full scan
now reads every memory row and compares it with its MEMORY node's payload hash: a row that says
something else is read as re-added (its session synced, only the chunk with the turn extracted
again, the old words erased). Real embedded Chroma, real cycles, real files, the loopback
chat-completions server counting requests, both engines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from pipelines.recall import RecallRequest
from store.backend import open_database
from store.chroma import ChromaStore
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, llm_server  # noqa: F401 - the fixture
from tests.test_extract_cycle import llm_settings, session
from tests.test_forget_bytes import _files_holding
from tests.test_forget_rest import rows_holding
from worker.cycle import CycleResult, run_cycle
from worker.recall import run_recall, show_node

SECRET = "zqinplacesecret5521"  # one word to the tokenizer, so the full-text index holds it whole
# One turn a chunk under a 30-token chunk limit (tests/test_upgradecost_moved_chunk.py).
TURNS = [f"turn {i:02d} mentions the Part{chr(65 + i)}Item component and a bit of filler" for i in range(6)]


async def _import(settings: Settings, tmp_path: Path, sessions: list[dict[str, Any]]) -> None:
    stats = await import_sessions(write_sessions(tmp_path / "sessions.jsonl", sessions), chroma=ChromaStore(settings),
                                  memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    assert not stats.bad_lines


async def _update_in_place(settings: Settings, row_id: str, *, document: str | None = None, **metadata: Any) -> None:
    """Chroma's own ``collection.update`` of an existing row: its place in the order is kept."""
    chroma = ChromaStore(settings)
    coll = await chroma.collection(settings.memory_collection)
    assert coll is not None
    (before,) = coll.get(ids=[row_id], include=["documents", "metadatas"])["metadatas"]
    coll.update(ids=[row_id], documents=[document] if document is not None else None,
                metadatas=[{**before, **metadata}] if metadata else None)


async def _cycle(settings: Settings) -> CycleResult:
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result


async def _recalled(settings: Settings, query: str) -> dict[str, str]:
    """The turns recall serves for ``query``: memory id -> text."""
    answer = await run_recall(settings, RecallRequest(query=query, budget_tokens=20_000))
    return {t["memory_id"]: t["text"] for t in answer["turns"]}


def _gone(settings: Settings, word: str) -> None:
    """No row of the graph database holds ``word``, nor (SQLite) any byte of its files."""
    assert rows_holding(settings, word) == [], word
    if settings.database_url is None:
        assert _files_holding(settings.data_dir, word) == [], word


def _full(settings: Settings) -> Settings:
    return settings.model_copy(update={"full_scan_interval_seconds": 0})


@pytest.mark.both_backends
async def test_a_middle_turn_updated_in_place_leaves_the_graph_at_the_next_full_scan_and_only_its_chunk_is_paid_again(
    settings: Settings, llm_server: LLMServer, tmp_path: Path,
) -> None:
    mine = llm_settings(settings.data_dir, llm_server, chunk_limit_tokens=30)
    turns = [*TURNS[:2], f"{TURNS[2]}, password {SECRET}", *TURNS[3:]]
    await _import(mine, tmp_path, [session("s", turns), session("t", ["turn 00 mentions the PartZItem component"])])
    first = (await _cycle(mine)).phases["extract"]
    assert first["chunks_total"] > len(TURNS) and llm_server.chat_count == first["chunks_total"]
    assert rows_holding(mine, SECRET) and "memory:s-t2" in await _recalled(mine, SECRET)
    await _update_in_place(mine, "s-t2", document=TURNS[2].replace("PartCItem", "PartQItem"))
    llm_server.reset()

    # The scan of the new rows does not look at rows it read before: within the full-scan interval.
    unseen = (await _cycle(mine)).phases["ingest"]
    assert unseen["scan"] == "new rows" and unseen["sessions_changed"] == 0, unseen
    result = await _cycle(_full(mine))

    ingest, extract = result.phases["ingest"], result.phases["extract"]
    assert ingest["scan"] == "full" and ingest["sessions_changed"] == 1 and ingest["sessions_synced"] == 1, ingest
    assert extract["sessions_digested"] == 1 and extract["chunks_total"] - extract["chunks_reused"] == 1, extract
    (asked,) = [r.prompt for r in llm_server.chat_requests]  # the changed turn's chunk alone
    assert "PartQItem" in asked and SECRET not in asked
    _gone(mine, SECRET)
    assert result.phases["finalize"]["erased"] is True
    shown = show_node(mine, "CLASS:PartQItem")  # with the turn it came from, verbatim
    assert shown is not None and "turn 02 mentions the PartQItem" in str(shown), shown
    assert show_node(mine, "CLASS:PartCItem") is None  # only the old words named it
    assert await _recalled(mine, SECRET) == {}
    assert "PartQItem" in (await _recalled(mine, "PartQItem"))["memory:s-t2"]

    # An unchanged collection's full scan syncs nothing and pays nothing.
    llm_server.reset()
    again = await _cycle(_full(mine))
    assert again.phases["ingest"]["sessions_changed"] == 0 and again.phases["extract"]["sessions_digested"] == 0
    assert llm_server.chat_count == 0


def _session_of(settings: Settings, memory_id: str) -> tuple[str | None, list[str], str | None]:
    """(the MEMORY node's ``sessionId``, the sessions it ``ORIGINATES_IN``, its memory index's session)."""
    db = open_database(settings, readonly=True)
    try:
        from store.graph import GraphStore

        graph = GraphStore(db)
        node = graph.get_node(f"memory:{memory_id}")
        links = sorted(e.target for e in graph.edges_of(f"memory:{memory_id}") if e.relationship == "ORIGINATES_IN")
        indexed = db.query("SELECT session_id FROM memory_index WHERE memory_id = ?", (memory_id,))
        return (node.properties.get("sessionId") if node else None), links, (indexed[0][0] if indexed else None)
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_turn_moved_to_another_session_in_place_is_moved_at_the_next_full_scan(settings: Settings, tmp_path: Path) -> None:
    full = _full(settings)
    await _import(full, tmp_path, [session("s-a", TURNS[:3]), session("s-b", TURNS[3:])])
    await _cycle(full)
    assert _session_of(full, "s-a-t1") == ("s-a", ["session:s-a"], "s-a")
    await _update_in_place(full, "s-a-t1", sessionId="s-b")

    result = await _cycle(full)

    ingest = result.phases["ingest"]
    assert ingest["sessions_changed"] == 2 and ingest["sessions_synced"] == 2, ingest
    assert result.phases["extract"]["sessions_digested"] == 2
    assert _session_of(full, "s-a-t1") == ("s-b", ["session:s-b"], "s-b")
    assert (await _cycle(full)).phases["ingest"]["sessions_changed"] == 0
    # Metadata rem-cycle does not read changes nothing it holds: nothing to sync.
    await _update_in_place(full, "s-a-t0", source="mobile-app")
    assert (await _cycle(full)).phases["ingest"]["sessions_changed"] == 0


@pytest.mark.both_backends
async def test_more_than_the_32_last_rows_rewritten_together_in_their_order_are_seen_by_the_full_scan(
    settings: Settings, tmp_path: Path,
) -> None:
    """s-early's 8 turns, then s-late's 32 (the mark's tail), all deleted and added back in their
    order with s-early's words changed: the count, the tail's ids and its last row are the same."""
    full = _full(settings)
    early = [f"{TURNS[0]}, password {SECRET}", *(f"early turn {i} about GraphStore" for i in range(1, 8))]
    late = [f"late turn {i} about ConfigLoader" for i in range(32)]
    await _import(full, tmp_path, [session("s-early", early), session("s-late", late)])
    await _cycle(full)
    assert rows_holding(full, SECRET)
    chroma = ChromaStore(full)
    ids = [f"s-early-t{i}" for i in range(8)] + [f"s-late-t{i}" for i in range(32)]
    rows = await chroma.get_existing(full.memory_collection, ids)
    documents = [rows[i][0].replace(f", password {SECRET}", "") for i in ids]
    await chroma.rewrite(full.memory_collection, ids, documents, [rows[i][1] for i in ids])

    result = await _cycle(full)

    ingest = result.phases["ingest"]
    assert ingest["scan"] == "full" and ingest["sessions_changed"] == 1 and ingest["sessions_synced"] == 1, ingest
    assert result.phases["extract"]["sessions_digested"] == 1
    _gone(full, SECRET)


@pytest.mark.both_backends
async def test_a_turn_readded_while_the_cycle_that_would_have_seen_it_stopped_is_seen_by_the_next(
    settings: Settings, tmp_path: Path,
) -> None:
    """A cycle of a version before audit23 stopped mid-ingest had cleared the scan marks before its
    first write (its sessions half-synced; now the marks are kept, with a full scan due): the next
    reads every row, with no mark to find a re-added row after — it finds the row unlike its MEMORY
    node instead."""
    await _import(settings, tmp_path, [session("s-a", [f"{TURNS[0]}, password {SECRET}", *TURNS[1:3]]),
                                       session("s-b", TURNS[3:])])
    await _cycle(settings)
    chroma = ChromaStore(settings)
    ((_, metadata),) = (await chroma.get_existing(settings.memory_collection, ["s-a-t0"])).values()
    await chroma.rewrite(settings.memory_collection, ["s-a-t0"], [TURNS[0]], [metadata])
    db = open_database(settings)
    try:
        with db.transaction() as conn:  # what the older stopped cycle left: it synced nothing yet
            conn.execute("DELETE FROM chroma_scan_state")
    finally:
        db.close()

    result = await _cycle(settings)

    ingest = result.phases["ingest"]
    assert ingest["scan"] == "full" and ingest["sessions_changed"] == 1 and ingest["sessions_synced"] == 1, ingest
    _gone(settings, SECRET)
