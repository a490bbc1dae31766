"""A chunk whose answer overran the model's output limit is asked again as two halves (halves37).

The loopback server of tests/llm_server.py answers as a real one does when ``bounded``: an answer
longer than the request's ``max_tokens`` (``REM_OUTPUT_RESERVE_TOKENS``) is cut there with
``finish_reason: length``. Before, such a chunk failed ``truncated-output`` at every attempt (the
same words, the same limit) and its session became undigestible; now its halves are asked in the
same cycle, their answers joined are stored as the chunk's own, and no later cycle pays for the
whole or the halves again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.chunker import estimate_tokens
from pipelines.extract.model import UnitTurn, WorkUnit, turn_line, unit_content_hash
from pipelines.extract.units import HALF, MAX_HALVINGS, SourceTurn, halve_unit, plan_units
from pipelines.importer import import_sessions
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, bounded, server_error
from tests.test_model_faults import expire_backoff
from worker.cycle import Stores, open_stores, run_cycle
from worker.report import reset_failures

# Eight turns, each naming one class amid filler: the loopback server's answer is one CLASS node
# (about 45 tokens) a turn, so the whole chunk's (about 360) overruns a 200-token limit, each
# half's (about 180) fits it, and the chunk's words (about 8 × 45 tokens) are more than the limit.
CLASSES = ["AlphaWidget", "BravoStore", "CharlieQueue", "DeltaIndex", "EchoParser", "FoxtrotCache", "GolfRouter", "HotelLedger"]
FILLER = "while we walked through the code path slowly and carefully for the review today"
LIMIT = 200


def long_session(sid: str = "dense") -> dict[str, Any]:
    return {
        "sessionId": sid, "title": sid, "createdAt": "2026-11-01T10:00:00Z", "summary": f"about {sid}",
        "turns": [{"id": f"{sid}-t{i}", "role": "user", "text": f"The {name} matters {FILLER}."} for i, name in enumerate(CLASSES)],
    }


def model_settings(settings: Settings, server: LLMServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": settings.data_dir, "extractor": "openai", "llm_base_url": server.url, "llm_max_retries": 0,
        "llm_timeout_seconds": 30, "output_reserve_tokens": LIMIT, "max_chunk_attempts": 3, "llm_concurrency": 2,
    }
    if settings.database_url is not None:
        values["database_url"] = settings.database_url
    return load_settings(**(values | overrides))


@asynccontextmanager
async def dense_cycle(settings: Settings, tmp_path: Path, server: LLMServer, **overrides: Any) -> AsyncIterator[tuple[Settings, Stores, dict[str, Any]]]:
    """:func:`long_session` imported and a first cycle run against ``server``: the settings, the
    open stores and that cycle's extract phase."""
    mine = model_settings(settings, server, **overrides)
    stores = await open_stores(mine)
    try:
        path = write_sessions(tmp_path / "in.jsonl", [long_session()])
        await import_sessions(path, chroma=stores.chroma, memory_collection=mine.memory_collection,
                              summary_collection=mine.session_collection)
        first = await run_cycle(mine, stores=stores)
        yield mine, stores, first.phases["extract"]
    finally:
        stores.close()


def class_points(stores: Stores) -> dict[str, set[str]]:
    """Each CLASS node's provenance: the chunk ids of its points."""
    found: dict[str, set[str]] = {}
    for node_id, chunk_id in stores.db.query(
        "SELECT n.id, p.chunk_id FROM nodes AS n JOIN node_points AS p ON p.node_id = n.id WHERE n.label = 'CLASS'", ()
    ):
        found.setdefault(node_id, set()).add(chunk_id)
    return found


def unit(turns: list[str], *, unit_id: str = "s:chunk:0") -> WorkUnit:
    unit_turns = tuple(UnitTurn(n, f"m{n}", text, "user") for n, text in enumerate(turns, start=1))
    return WorkUnit(unit_id, "s", 0, unit_turns, unit_content_hash("s", unit_turns))


def test_halves_split_turns_by_size_and_number_them_as_chunks() -> None:
    whole = unit(["a" * 30, "b" * 30, "c" * 300, "d" * 30])
    first, second = halve_unit(whole)
    assert [t.text for t in first.turns] == ["a" * 30, "b" * 30]  # the big turn's side gets it alone
    assert [t.text for t in second.turns] == ["c" * 300, "d" * 30]
    assert [t.number for t in first.turns] == [1, 2] and [t.number for t in second.turns] == [1, 2]
    assert [t.memory_id for t in (*first.turns, *second.turns)] == ["m1", "m2", "m3", "m4"]
    assert (first.unit_id, second.unit_id) == (f"s:chunk:0{HALF}0", f"s:chunk:0{HALF}1")
    assert first.content_hash != second.content_hash != whole.content_hash
    assert halve_unit(whole) == (first, second)  # deterministic: the same halves in every cycle


def test_one_turn_is_cut_in_its_text_and_nothing_is_lost() -> None:
    text = " ".join(f"Sentence {i} names the Widget{i} class." for i in range(40))
    first, second = halve_unit(unit([text]))
    assert first.turns[0].text + second.turns[0].text == text
    assert first.turns[0].memory_id == second.turns[0].memory_id == "m1"
    assert abs(estimate_tokens(first.turns[0].text) - estimate_tokens(second.turns[0].text)) < estimate_tokens(text) // 4
    assert halve_unit(unit(["abc"])) is None  # one token: nothing to cut


def test_halving_stops_where_it_cannot_help() -> None:
    turns = [f"The {name} matters {FILLER}." for name in CLASSES]
    words = sum(estimate_tokens(turn_line(n, "user", t)) for n, t in enumerate(turns, start=1))
    assert halve_unit(unit(turns), answer_tokens=words - 1) is not None
    # an answer that overran the limit on fewer words than the limit: a model repeating itself
    assert halve_unit(unit(turns), answer_tokens=words) is None
    deep = unit(turns, unit_id="s:chunk:0" + f"{HALF}0" * MAX_HALVINGS)
    assert halve_unit(deep) is None


@pytest.mark.both_backends
async def test_an_overflowing_chunk_is_answered_by_its_halves_and_never_asked_again(settings: Settings, tmp_path: Path) -> None:
    with LLMServer(default=bounded()) as server:
        async with dense_cycle(settings, tmp_path, server) as (mine, stores, extract):
            assert (extract["sessions_digested"], extract["chunks_total"], extract["chunks_halved"]) == (1, 1, 1), extract
            assert extract["failures_by_kind"] == {}
            assert server.chat_count == 3  # the whole (cut at the limit), then each half
            assert [len([line for line in r.prompt.splitlines() if line.startswith("[")]) for r in server.chat_requests] == [8, 4, 4]
            assert all(r.body["max_tokens"] == LIMIT for r in server.chat_requests)
            # every class found, each point naming the session's own chunk, not a half
            points = class_points(stores)
            assert sorted(points) == sorted(f"CLASS:{name}" for name in CLASSES)
            assert set().union(*points.values()) == {"dense:chunk:0"}
            # one row: the chunk's, holding the halves' answers joined and every call's cost
            rows = stores.db.query("SELECT chunk_id, status, tokens_out FROM chunk_results WHERE session_id = 'dense'", ())
            assert [(r[0], r[1]) for r in rows] == [("dense:chunk:0", "ok")]
            assert rows[0][2] > LIMIT
            assert stores.runstate.failing_chunks() == []

            # an unchanged session is not extracted again: no call
            again = await run_cycle(mine, stores=stores)
            assert again.phases["extract"]["sessions_queued"] == 0 and server.chat_count == 3


@pytest.mark.parametrize("wait_ends", ["backoff", "retry"])
async def test_a_half_that_fails_leaves_the_session_to_retry_its_halves_only(settings: Settings, tmp_path: Path, wait_ends: str) -> None:
    """A half that fails (an HTTP 500) fails the session as any chunk does; the whole's overflow
    stays recorded, so the next attempt — after the backoff, or at once after the operator's
    ``retry`` — asks the failed half alone: never the whole again, nor the half already answered."""
    with LLMServer(default=bounded()) as server:
        server.script(bounded(), match="AlphaWidget")  # the whole (it says both names): cut at the limit
        server.script(server_error(500), match="HotelLedger")  # then the second half's first call
        async with dense_cycle(settings, tmp_path, server) as (mine, stores, extract):
            assert (extract["sessions_failed"], extract["chunks_halved"]) == (1, 1), extract
            assert extract["failures_by_kind"] == {"provider-error": 1}
            assert server.chat_count == 3
            kinds = dict(stores.db.query("SELECT chunk_id, COALESCE(error_kind, status) FROM chunk_results", ()))
            assert kinds == {"dense:chunk:0": "truncated-output", f"dense:chunk:0{HALF}0": "ok",
                             f"dense:chunk:0{HALF}1": "provider-error"}
            if wait_ends == "backoff":
                expire_backoff(stores)
            else:  # the whole's overflow is kept, its wait cleared; the failed half's row goes
                assert reset_failures(stores, ["dense"]) == {"sessions_reset": 1, "chunks_reset": 2}
            second = await run_cycle(mine, stores=stores)
            assert second.phases["extract"]["sessions_digested"] == 1, second.phases["extract"]
            assert server.chat_count == 4  # the failed half alone
            assert "HotelLedger" in server.chat_requests[-1].prompt and "AlphaWidget" not in server.chat_requests[-1].prompt
            assert sorted(class_points(stores)) == sorted(f"CLASS:{name}" for name in CLASSES)
            rows = stores.db.query("SELECT chunk_id, status FROM chunk_results WHERE session_id = 'dense'", ())
            assert [tuple(r) for r in rows] == [("dense:chunk:0", "ok")]  # the halves' rows went with the commit


async def test_a_model_that_repeats_itself_is_not_asked_ever_smaller_halves(settings: Settings, tmp_path: Path) -> None:
    """A model that answers every request with the same runaway text (a small model looping) cuts
    every answer at the limit: the chunk's words are more than the limit, so its halves are asked
    once; theirs are not (fewer words than the answer they overran), and the failure stands."""
    runaway = bounded('{"summary": "' + "the same words again " * 400 + '"}')
    with LLMServer(default=runaway) as server:
        async with dense_cycle(settings, tmp_path, server, max_chunk_attempts=2) as (mine, stores, extract):
            assert (extract["sessions_failed"], extract["failures_by_kind"]) == (1, {"truncated-output": 1}), extract
            words = sum(estimate_tokens(turn_line(n, "user", t["text"])) for n, t in enumerate(long_session()["turns"], start=1))
            assert words // 2 < LIMIT < words  # the halves are the smallest worth asking here
            assert server.chat_count == 3
            expire_backoff(stores)
            second = await run_cycle(mine, stores=stores)
            assert second.phases["extract"]["sessions_undigestible"] == 1
            assert server.chat_count == 5  # the two halves again, not the whole
            digest = stores.runstate.get_digests(["dense"])["dense"]
            assert "truncated-output" in (digest.defer_reason or "")


def test_plan_units_is_untouched_by_halving() -> None:
    """Halves are made only for a unit whose answer overran: the plan of a session stays its chunks."""
    turns = [SourceTurn(f"m{i}", f"The {name} matters {FILLER}.", "user") for i, name in enumerate(CLASSES)]
    assert [u.unit_id for u in plan_units("s", turns, budget_tokens=10_000)] == ["s:chunk:0"]


def test_the_loopback_server_cuts_a_bounded_answer_at_max_tokens() -> None:
    """The loopback server's ``bounded`` cuts an answer longer than ``max_tokens`` as a real one does."""
    import httpx

    with LLMServer(default=bounded("x" * 100)) as server:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        answer = httpx.post(f"{server.url}/chat/completions", json=body).json()["choices"][0]
        assert (len(answer["message"]["content"]), answer["finish_reason"]) == (40, "length")
        answer = httpx.post(f"{server.url}/chat/completions", json=body | {"max_tokens": 25}).json()["choices"][0]
        assert (len(answer["message"]["content"]), answer["finish_reason"]) == (100, "stop")
