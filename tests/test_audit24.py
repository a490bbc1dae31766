"""Today's merged work (fullscan, leftalone23, commitfast, userwalk3), attacked (audit24).

Real SQLite files damaged on disk, embedded Chroma, the loopback model server, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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

HELD = "held-answers.jsonl"


async def _damaged_cycle(settings: Settings, llm_server: LLMServer, tmp_path: Path, sessions: list[dict[str, object]], *,
                         concurrency: int, slow_parts: tuple[str, ...], late_parts: tuple[str, ...] = (),
                         backup: Path | None = None) -> tuple[Settings, list[str]]:
    """``sessions`` ingested (a turn a chunk, ``concurrency`` calls at once), the graph backed up to
    ``backup``, then damaged where every chunk result's write goes (``state_count_changes``), and a
    cycle run with the chunks naming ``slow_parts`` answered 1 s late (the first answer's store,
    which meets the damage, took over 0.6 s on a loaded machine), those naming ``late_parts`` 0.3 s
    late: it fails ``database-damaged``.
    Returns the settings and the prompts the model was sent, in the order sent."""
    settings = llm_settings(settings.data_dir, llm_server, llm_concurrency=concurrency, chunk_limit_tokens=30)
    await ingested(settings, tmp_path, sessions)
    if backup is not None:
        store_backup(settings, backup)
    damage(settings.graph_path, "state_count_changes")
    for part in slow_parts:
        llm_server.script(slow(1.0), match=part)
    for part in late_parts:
        llm_server.script(slow(0.3), match=part)
    result = await run_cycle(settings)
    assert (result.outcome, result.reason_code) == ("failed", "database-damaged"), result.message
    return settings, [r.prompt for r in sorted(llm_server.chat_requests, key=lambda r: r.at)]


def _held(settings: Settings) -> list[str]:
    return (settings.data_dir / HELD).read_text().splitlines() if (settings.data_dir / HELD).exists() else []


async def test_the_answers_of_a_sessions_calls_in_flight_when_the_damage_is_met_are_held_not_thrown_away(
    settings: Settings, llm_server: LLMServer, tmp_path: Path
) -> None:
    """A session of three chunks asked at once; the first answer's store meets the damaged file
    while the other two calls are on the wire. Those two answers are paid for: they go to the held
    answers' file with the first, and the run after the restore stores all three without a call.
    Before, the first chunk's error cancelled its session's other calls: two answers paid and
    thrown away, asked (and paid) again after the restore."""
    backup = tmp_path / "backups" / "graph.sqlite3"
    mine, asked = await _damaged_cycle(settings, llm_server, tmp_path, [session("s0", TURNS[:3])], concurrency=3,
                                       slow_parts=("PartBItem", "PartCItem"), backup=backup)
    assert len(asked) == 3
    held = [json.loads(line) for line in _held(mine)]
    assert len(held) == 3 and {h["session_id"] for h in held} == {"s0"}  # before: 1 (two answers thrown away)
    assert charged(mine.graph_path) == [("s0", "undigested", 0)]

    done = run_cli("restore", str(backup), "--json", env=_env(mine), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    llm_server.reset()
    after = await run_cycle(mine)
    assert after.outcome == "completed", after.message
    assert after.phases["extract"]["sessions_digested"] == 1
    assert llm_server.chat_count == 0  # before: 2
    assert _held(mine) == []


async def test_a_chunk_not_yet_asked_when_the_damage_is_met_is_not_asked(
    settings: Settings, llm_server: LLMServer, tmp_path: Path
) -> None:
    """One call at a time: the second chunk's call is on the wire when the first answer's store
    meets the damaged file; the third, waiting for the call slot, makes no call (its answer could
    not be stored either). The two paid answers are held."""
    mine, asked = await _damaged_cycle(settings, llm_server, tmp_path, [session("s0", TURNS[:3])], concurrency=1,
                                       slow_parts=("PartBItem",))
    assert "PartCItem" not in str(asked)
    assert len(asked) == 2 and len(_held(mine)) == 2


async def test_a_session_in_flight_asks_nothing_more_once_another_met_the_damage(
    settings: Settings, llm_server: LLMServer, tmp_path: Path
) -> None:
    """Two sessions at once (two call slots): s0's one answer meets the damaged file while s1's
    first two calls are on the wire; s1's third chunk, waiting for a slot, is not asked (its
    answer could not be stored). Before, only a unit of s1's own map meeting the damage stopped
    s1's calls: its third chunk was asked as the first of its two calls ended.

    Which session reaches the call slots first is the machine's (each reads its turns in a
    thread; s0's answer comes 0.3 s late so that s1 has sent its calls by then): when s1's two
    calls took both slots before s0's, the run shows nothing (seen under load: s0's call and s1's third
    asked together once the two ended), and it is run again on a fresh data dir, up to five times."""
    for attempt in range(5):
        llm_server.reset()
        (tmp_path / f"in{attempt}").mkdir()
        mine, asked = await _damaged_cycle(
            settings.model_copy(update={"data_dir": tmp_path / f"run{attempt}"}), llm_server, tmp_path / f"in{attempt}",
            [session("s0", TURNS[:1]), session("s1", TURNS[1:4])], concurrency=2, slow_parts=("PartBItem", "PartCItem"),
            late_parts=("PartAItem",))
        if any("PartAItem" in prompt for prompt in asked[:2]) and all(any(p in a for a in asked) for p in ("PartBItem", "PartCItem")):
            break
    else:
        pytest.fail(f"no run had s0's call and s1's first two on the wire together in five runs: {asked}")
    assert "PartDItem" not in str(asked)
    assert len(asked) == 3 and len(_held(mine)) == 3
    assert [(sid, attempts) for sid, _, attempts in charged(mine.graph_path)] == [("s0", 0), ("s1", 0)]
