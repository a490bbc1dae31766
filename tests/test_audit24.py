"""Today's merged work (fullscan, leftalone23, commitfast, userwalk3), attacked (audit24).

Real SQLite files damaged on disk, embedded Chroma, the loopback model server, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from config import Settings
from store.backend import backup as store_backup
from tests.conftest import run_cli
from tests.llm_server import LLMServer, slow
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_extract_cycle import llm_settings, session
from tests.test_inplace import TURNS
from tests.test_leftalone_damaged import charged, damage, ingested
from tests.test_roundtrip_restore import _env
from worker.cycle import run_cycle


async def test_the_answers_of_a_sessions_calls_in_flight_when_the_damage_is_met_are_held_not_thrown_away(
    settings: Settings, llm_server: LLMServer, tmp_path: Path
) -> None:
    """A session of three chunks asked at once; the first answer's store meets the damaged file
    while the other two calls are on the wire. Those two answers are paid for: they go to the held
    answers' file with the first, and the run after the restore stores all three without a call.
    Before, the first chunk's error cancelled its session's other calls: two answers paid and
    thrown away, asked (and paid) again after the restore."""
    mine = llm_settings(settings.data_dir, llm_server, llm_concurrency=3, chunk_limit_tokens=30)  # a turn a chunk
    await ingested(mine, tmp_path, [session("s0", TURNS[:3])])
    backup = tmp_path / "backups" / "graph.sqlite3"
    store_backup(mine, backup)
    damage(mine.graph_path, "state_count_changes")  # every chunk result's write appends to it
    llm_server.script(slow(0.6), match="PartBItem")
    llm_server.script(slow(0.6), match="PartCItem")
    result = await run_cycle(mine)
    assert (result.outcome, result.reason_code) == ("failed", "database-damaged"), result.message
    assert llm_server.chat_count == 3
    held = [json.loads(line) for line in (mine.data_dir / "held-answers.jsonl").read_text().splitlines()]
    assert len(held) == 3  # before: 1 (the two answers in flight thrown away)
    assert charged(mine.graph_path) == [("s0", "undigested", 0)]

    done = run_cli("restore", str(backup), "--json", env=_env(mine), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    llm_server.reset()
    after = await run_cycle(mine)
    assert after.outcome == "completed", after.message
    assert after.phases["extract"]["sessions_digested"] == 1
    assert llm_server.chat_count == 0  # before: 2
    assert not (mine.data_dir / "held-answers.jsonl").exists() or not (mine.data_dir / "held-answers.jsonl").read_text().strip()


async def test_a_chunk_not_yet_asked_when_the_damage_is_met_is_not_asked(
    settings: Settings, llm_server: LLMServer, tmp_path: Path
) -> None:
    """One call at a time: the second chunk's call is on the wire when the first answer's store
    meets the damaged file; the third, waiting for the call slot, makes no call (its answer could
    not be stored either). The two paid answers are held."""
    mine = llm_settings(settings.data_dir, llm_server, llm_concurrency=1, chunk_limit_tokens=30)
    await ingested(mine, tmp_path, [session("s0", TURNS[:3])])
    damage(mine.graph_path, "state_count_changes")
    llm_server.script(slow(0.6), match="PartBItem")
    result = await run_cycle(mine)
    assert (result.outcome, result.reason_code) == ("failed", "database-damaged"), result.message
    assert "PartCItem" not in str([r.prompt for r in llm_server.chat_requests])
    assert llm_server.chat_count == 2
    assert len((mine.data_dir / "held-answers.jsonl").read_text().splitlines()) == 2


async def test_a_session_in_flight_asks_nothing_more_once_another_met_the_damage(
    settings: Settings, llm_server: LLMServer, tmp_path: Path
) -> None:
    """Two sessions at once (two call slots): s0's one answer meets the damaged file while s1's
    first two calls are on the wire; s1's third chunk, waiting for a slot, is not asked (its
    answer could not be stored). Before, only a unit of s1's own map meeting the damage stopped
    s1's calls: its third chunk was asked as the first of its two calls ended."""
    mine = llm_settings(settings.data_dir, llm_server, llm_concurrency=2, chunk_limit_tokens=30)
    await ingested(mine, tmp_path, [session("s0", TURNS[:1]), session("s1", TURNS[1:4])])
    damage(mine.graph_path, "state_count_changes")
    llm_server.script(slow(0.6), match="PartBItem")
    llm_server.script(slow(0.6), match="PartCItem")
    result = await run_cycle(mine)
    assert (result.outcome, result.reason_code) == ("failed", "database-damaged"), result.message
    assert "PartDItem" not in str([r.prompt for r in llm_server.chat_requests])
    assert llm_server.chat_count == 3
    assert len((mine.data_dir / "held-answers.jsonl").read_text().splitlines()) == 3
    assert [(sid, attempts) for sid, _, attempts in charged(mine.graph_path)] == [("s0", 0), ("s1", 0)]
