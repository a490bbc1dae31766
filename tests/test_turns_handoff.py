"""The turns a cycle's ingest phase read, handed to its extract phase (store.chroma.TurnsHandOff):
given only while Chroma still holds them as read. Real embedded Chroma; the rewrite is the one
``import`` makes (``ChromaStore.rewrite``: delete and add again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import load_settings
from store.chroma import ChromaStore, MemoryRow, TurnsHandOff


def words(rows: list[MemoryRow]) -> list[str]:
    return [r.document for r in rows]


async def test_turns_are_handed_over_only_while_chroma_still_holds_them(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    settings = load_settings(data_dir=tmp_path / "d")
    chroma = await ChromaStore.connect(settings)
    name = settings.memory_collection
    ids = [f"big-t{i}" for i in range(4)]
    meta = [{"sessionId": "big", "turnIndex": i} for i in range(4)]
    await chroma.upsert(name, ids, [f"turn {i}" for i in range(4)], meta)
    await chroma.upsert(name, ["small-t0"], ["small turn"], [{"sessionId": "small", "turnIndex": 0}])
    turns = TurnsHandOff(chroma, name, min_turns=3)
    wanted = {"big": ids, "small": ["small-t0"]}

    # Nothing written since the read: the rows read are handed over (the same list, no read).
    read = await turns.read(["big", "small"], wanted)
    assert await turns.memories_for_session("big", memory_ids=ids) is read["big"]
    # Once only; and a session under ``min_turns`` was never kept (read again, equal).
    again = await turns.memories_for_session("big", memory_ids=ids)
    assert again is not read["big"] and words(again) == words(read["big"])
    small = await turns.memories_for_session("small", memory_ids=["small-t0"])
    assert small is not read["small"] and words(small) == ["small turn"]

    # A turn rewritten between the phases (it goes to the end of the collection): its new words.
    read = await turns.read(["big"], wanted)
    await chroma.rewrite(name, ["big-t1"], ["turn 1, said again"], [meta[1]])
    assert words(await turns.memories_for_session("big", memory_ids=ids)) == ["turn 0", "turn 1, said again", "turn 2", "turn 3"]

    # The collection's last row rewritten (it stays last, under the same id): its new words too.
    read = await turns.read(["big"], wanted)
    last = (await chroma.ids_from(name, offset=4, limit=1))[0]
    assert last == "big-t1"
    await chroma.rewrite(name, ["big-t1"], ["turn 1, a third time"], [meta[1]])
    assert words(await turns.memories_for_session("big", memory_ids=ids)) == ["turn 0", "turn 1, a third time", "turn 2", "turn 3"]

    # A turn added to the session (not among the ids read) and one deleted: read again.
    read = await turns.read(["big"], wanted)
    await chroma.upsert(name, ["big-t4"], ["turn 4"], [{"sessionId": "big", "turnIndex": 4}])
    assert words(await turns.memories_for_session("big", memory_ids=[*ids, "big-t4"]))[-1] == "turn 4"
    read = await turns.read(["big"], {"big": [*ids, "big-t4"]})
    coll = await chroma.memories()
    coll.delete(ids=["big-t0"])  # as an agent deletes a turn
    assert words(await turns.memories_for_session("big", memory_ids=[*ids, "big-t4"]))[0] == "turn 1, a third time"
