"""A chunk whose prompt the model server's context did not hold (cutprompt38).

Ollama serves a model with a context window of 4,096 tokens unless told otherwise
(``OLLAMA_CONTEXT_LENGTH``), whatever ``REM_CONTEXT_LIMIT_TOKENS`` says. Given a longer prompt it
keeps about half the window from the end, answers that, reports only what it kept as the prompt's
tokens, and says nothing else. The answer, of the chunk's last turns, was stored as the chunk's:
the turns before were lost without a word. A server that refuses such a prompt (llama.cpp: HTTP 400
"exceeds the available context size") failed the chunk ``context-overflow`` at every attempt until
its session was undigestible. Now a prompt the server read less than 2 in 5 of is a
``context-overflow``, and a chunk that did not fit is asked as its halves, as halves37 does for an
answer that overran the output limit.

Real cycles, real SQLite and PostgreSQL, embedded Chroma, and the loopback server of
tests/llm_server.py with a context window (``context_window``: cut as Ollama does, or refused).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.extract.model import FITS_EVERY_WINDOW, ExtractionFailure, prompt_cut
from pipelines.importer import import_sessions
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, empty
from tests.test_extract_llm import extract, make_settings, unit
from pipelines.extract.units import HALF, MAX_HALVINGS
from tests.test_halves37 import class_points, model_settings
from worker.cycle import CycleResult, open_stores, run_cycle

NAMES = [f"{word}Widget" for word in "Alpha Bravo Charlie Delta Echo Foxtrot Golf Hotel India Juliet Kilo Lima Mike November Oscar Papa".split()]
FILLER = "while we walked through the code path slowly and carefully for the review today, " * 40
# Ollama's default window. The whole chunk's prompt is about 14,000 tokens as the loopback server
# counts them (4 bytes a token), each half's about 7,100, each quarter's about 3,700.
WINDOW = 4096


def wide_session(shape: str) -> dict[str, Any]:
    """Sixteen turns each naming one class (``turns``), or one turn of sixteen paragraphs."""
    texts = [f"The {name} matters {FILLER}" for name in NAMES]
    turns = [{"id": f"wide-t{i}", "role": "user", "text": text} for i, text in enumerate(texts)] if shape == "turns" else [
        {"id": "wide-t0", "role": "user", "text": "\n\n".join(texts)}
    ]
    return {"sessionId": "wide", "title": "wide", "createdAt": "2026-11-01T10:00:00Z", "summary": "about wide", "turns": turns}


async def wide_cycles(settings: Settings, tmp_path: Path, server: LLMServer, shape: str = "turns",
                      cycles: int = 1) -> tuple[list[CycleResult], list[int], dict[str, set[str]]]:
    """:func:`wide_session` imported and ``cycles`` cycles run against ``server``: their results,
    the server's chat count after each, and the CLASS nodes' chunks."""
    mine = model_settings(settings, server, output_reserve_tokens=2000)
    stores = await open_stores(mine)
    try:
        path = write_sessions(tmp_path / "in.jsonl", [wide_session(shape)])
        await import_sessions(path, chroma=stores.chroma, memory_collection=mine.memory_collection,
                              summary_collection=mine.session_collection)
        results, counts = [], []
        for _ in range(cycles):
            results.append(await run_cycle(mine, stores=stores))
            counts.append(server.chat_count)
        return results, counts, class_points(stores)
    finally:
        stores.close()


def test_a_prompt_is_cut_when_less_than_two_in_five_of_it_was_read() -> None:
    assert not prompt_cut(2000, 0)  # the server said nothing
    assert not prompt_cut(2000, 800) and prompt_cut(2000, 799)
    assert not prompt_cut(2000, 1136)  # the fewest a real prompt read whole reported: 0.568 (bench/prompt_tokens.py)
    # every window holds a prompt this small: a server counting only what it had not cached (its
    # system prompt shared by every request) is not taken for a cut
    assert not prompt_cut(FITS_EVERY_WINDOW, 100) and prompt_cut(FITS_EVERY_WINDOW + 1, 100)


async def test_an_answer_to_a_cut_prompt_is_no_answer(tmp_path: Path) -> None:
    with LLMServer(context_window=WINDOW) as server:
        with pytest.raises(ExtractionFailure) as failure:
            await extract(make_settings(tmp_path, server), unit(*(f"The {name} matters {FILLER}" for name in NAMES)))
        assert server.chat_count == 1  # nothing asked again: the map asks the halves
    assert failure.value.kind == "context-overflow" and failure.value.tokens_in == WINDOW // 2 + 2
    assert f"read {WINDOW // 2 + 2} of the prompt" in str(failure.value) and "OLLAMA_CONTEXT_LENGTH" in str(failure.value)


async def test_a_cut_prompt_answered_empty_is_still_a_cut(tmp_path: Path) -> None:
    """The cut is told by what the server read, whatever the answer: an empty one is no sign the
    context held the prompt, and the chunk goes to its halves like any cut one."""
    with LLMServer(context_window=WINDOW, default=empty()) as server:
        with pytest.raises(ExtractionFailure) as failure:
            await extract(make_settings(tmp_path, server), unit(*(f"The {name} matters {FILLER}" for name in NAMES)))
    assert failure.value.kind == "context-overflow" and "cut the prompt" in str(failure.value)


@pytest.mark.both_backends
@pytest.mark.parametrize("shape", ["turns", "one turn"])
@pytest.mark.parametrize("over_window", ["cut", "refuse"])
async def test_a_chunk_the_context_did_not_hold_is_answered_by_its_quarters(
    settings: Settings, tmp_path: Path, over_window: str, shape: str,
) -> None:
    with LLMServer(context_window=WINDOW, over_window=over_window) as server:
        (first, second), (calls, after), points = await wide_cycles(settings, tmp_path, server, shape, cycles=2)
    extract_phase = first.phases["extract"]
    assert (extract_phase["chunks_failed"], extract_phase["chunks_halved"], extract_phase["sessions_digested"]) == (0, 1, 1)
    # the whole, its two halves, their four halves (answered); cut at paragraphs, one quarter of the
    # one turn holds five of the sixteen and is over the window: its halves too
    assert calls == (7 if shape == "turns" else 9)
    assert sorted(node.removeprefix("CLASS:") for node in points) == sorted(NAMES)  # not the last few only
    assert all(chunks == {"wide:chunk:0"} for chunks in points.values())  # provenance names the chunk
    assert second.outcome == "completed" and after == calls  # nothing asked again


async def test_a_chunk_many_windows_long_is_halved_as_deep_as_it_takes(settings: Settings, tmp_path: Path) -> None:
    """Fourteen windows of words: five levels of halves (deeper than an overrun answer is halved,
    MAX_HALVINGS), until each piece is half a turn; every class found."""
    with LLMServer(context_window=1000, over_window="refuse") as server:
        (first,), _, points = await wide_cycles(settings, tmp_path, server)
        depth = max(r.prompt.split("Turns:")[0].count(HALF) for r in server.chat_requests)
    assert first.phases["extract"]["sessions_digested"] == 1
    assert depth == 5 > MAX_HALVINGS
    assert sorted(node.removeprefix("CLASS:") for node in points) == sorted(NAMES)


def test_a_small_chunk_the_server_says_overflowed_is_not_halved() -> None:
    """No window servers use is too small for it: the server says so of any prompt."""
    from pipelines.extract.map import _halves

    refused = "HTTP 400: request (9000 tokens) exceeds the available context size (4096 tokens)"
    assert _halves(unit("The ChunkPlan is here."), "context-overflow", refused, 0) is None
    assert _halves(unit(*(f"The {name} matters {FILLER}" for name in NAMES)), "context-overflow", refused, 0) is not None


@pytest.mark.parametrize(("behaviour", "kind"), [(empty(), "schema-failure"), (empty(read=False), "context-overflow")])
async def test_an_empty_answer_is_not_asked_in_halves(
    settings: Settings, tmp_path: Path, behaviour: Any, kind: str,
) -> None:
    """An empty answer to a prompt the server says it read whole is the model's failure, and one to
    a prompt it says nothing of is an overflow (the earlier system's reading) with no sign of where
    the context ends: neither is asked in halves, so a server that answers everything empty costs
    one call a chunk, not a tree of 127."""
    with LLMServer(default=behaviour) as server:
        (first,), _, _ = await wide_cycles(settings, tmp_path, server)
    assert first.phases["extract"]["failures_by_kind"] == {kind: 1}
    assert server.chat_count == 1
