"""What a forget leaves in the graph's other records (forgetrest, thirteenth session): a name that
only the forgotten turn or session said outlived the forget in the merge records (the merged
node's name and the alias claim of a hand merge, an unmerge's saved edges) and in the stored
communities (a member id, a label), until the next detection or forever. Real CLI on real SQLite
and Chroma, and the same on a real PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config import Settings
from store.backend import open_database
from store.chroma import ChromaStore
from pipelines.importer import import_sessions
from tests.conftest import write_sessions
from worker.cycle import run_cycle
from worker.knowledge import forget, merge_node, unmerge_node

TURN_NAME, SESSION_NAME = "ZqSecretWidget", "ZqGoneGadget"


def _session(sid: str, texts: list[str], summary: str) -> dict[str, object]:
    return {"sessionId": sid, "title": f"Session {sid}", "createdAt": "2026-11-01T10:00:00Z", "userId": "user-1",
            "summary": summary, "turns": [{"role": "user", "text": text} for text in texts]}


SESSIONS = [
    _session("s-keep", ["We moved ConfigLoader to src/config.py.",
                        f"{TURN_NAME} wraps GraphStore and calls RetryPolicy and ConfigLoader.",
                        "GraphStore reads ConfigLoader at start. RetryPolicy wraps GraphStore."], "ConfigLoader moved."),
    _session("s-gone", [f"{SESSION_NAME} depends on GraphStore and ConfigLoader.", "GraphStore retries three times via RetryPolicy."],
             "GraphStore retries."),
    _session("s-other", ["RetryPolicy wraps GraphStore.", "ConfigLoader has a test now; ConfigLoader uses RetryPolicy."], "RetryPolicy added."),
]


def rows_holding(settings: Settings, word: str, *, case: bool = False) -> list[str]:
    """``table: row`` for every row of every table of the graph database (but SQLite's full-text
    shadow tables, whose bytes tests/test_forget_bytes.py reads) whose text holds ``word``, any
    case (exactly, with ``case``)."""
    db = open_database(settings)
    try:
        if settings.database_url is None:
            tables = [r[0] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%'")]
        else:
            tables = [r[0] for r in db.query(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'")]
        found = []
        for table in tables:
            for row in db.query(f'SELECT * FROM "{table}"'):
                text = " ".join(str(value) for value in tuple(row))
                if (word in text) if case else (word.lower() in text.lower()):
                    found.append(f"{table}: {text[:200]}")
        return found
    finally:
        db.close()


async def _built(settings: Settings, tmp_path: Path) -> None:
    await import_sessions(write_sessions(tmp_path / "in.jsonl", SESSIONS), chroma=ChromaStore(settings),
                          memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message


def _communities(settings: Settings) -> list[dict[str, Any]]:
    db = open_database(settings)
    try:
        return [dict(r) for r in db.query("SELECT id, label, label_source, members, size FROM communities ORDER BY id")]
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_forgotten_name_leaves_the_merge_records_and_the_alias_a_hand_merge_gave(settings: Settings, tmp_path: Path) -> None:
    await _built(settings, tmp_path)
    merge_node(settings, f"CLASS:{TURN_NAME}", "CLASS:GraphStore")  # the operator folds each into a node that stays
    merge_node(settings, f"CLASS:{SESSION_NAME}", "CLASS:ConfigLoader")
    merge_node(settings, "CLASS:RetryPolicy", "CLASS:GraphStore")  # two nodes that both stay
    assert rows_holding(settings, TURN_NAME) and rows_holding(settings, SESSION_NAME)

    report = forget(settings, memory="s-keep-t0001")
    assert report["merges_dropped"] == 1
    assert rows_holding(settings, TURN_NAME) == []
    report = forget(settings, session="s-gone")
    assert report["merges_dropped"] == 1
    assert rows_holding(settings, SESSION_NAME) == []
    # What the rest of the graph says stays: the merge of two nodes that keep their points is
    # still recorded and still undone exactly.
    undone = unmerge_node(settings, "CLASS:RetryPolicy")
    assert [u["into"] for u in undone] == ["CLASS:GraphStore"]
    assert "s-other" in str(rows_holding(settings, "RetryPolicy"))


@pytest.mark.both_backends
async def test_a_community_no_longer_lists_or_is_labelled_by_a_forgotten_node(settings: Settings, tmp_path: Path) -> None:
    await _built(settings, tmp_path)
    [community] = _communities(settings)
    assert TURN_NAME in community["members"] and SESSION_NAME in community["members"]
    db = open_database(settings)
    try:  # as the model's label would be kept (REM_LLM_JUDGE), naming the forgotten node
        with db.transaction() as conn:
            conn.execute("UPDATE communities SET label = ?, label_source = 'model'", (f"{TURN_NAME} and friends",))
    finally:
        db.close()

    assert forget(settings, memory="s-keep-t0001")["communities_rewritten"] == 1
    [community] = _communities(settings)
    assert TURN_NAME not in str(community) and community["label_source"] == "default" and community["size"] == 5
    assert forget(settings, session="s-gone")["communities_rewritten"] == 1
    [after] = _communities(settings)
    assert after["id"] == community["id"] and after["size"] == 4 and SESSION_NAME not in str(after)
    assert rows_holding(settings, TURN_NAME) == rows_holding(settings, SESSION_NAME) == []
    # The next detection finds the same member set and keeps the id.
    assert (await run_cycle(settings)).outcome == "completed"
    assert [c["id"] for c in _communities(settings)] == [community["id"]]
