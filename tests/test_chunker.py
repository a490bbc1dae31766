"""The chunker contract (DESIGN §4.1) and its properties."""

from __future__ import annotations

import functools
import math
import tracemalloc

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.chunker import chunk_session, estimate_tokens, split_oversized_text


def test_estimate_tokens_contract_values() -> None:
    assert estimate_tokens("a" * 300) == 100
    assert estimate_tokens("a" * 301) == 101
    assert estimate_tokens("a" * 400_000) == 133_334
    assert estimate_tokens("") == 0
    assert estimate_tokens(None) == 0
    assert estimate_tokens(42) == 0
    assert estimate_tokens("é") == 1  # two utf-8 bytes
    assert estimate_tokens("aaaa", bytes_per_token=4) == 1


def test_four_turns_pack_two_by_two() -> None:
    plan = chunk_session(["a" * 300] * 4, session_id="s1", safe_processing_limit_tokens=250)
    assert plan.chunked is True
    assert [c.turn_indices for c in plan.chunks] == [(0, 1), (2, 3)]
    assert [c.chunk_id for c in plan.chunks] == ["s1:chunk:0", "s1:chunk:1"]
    assert plan.chunks[0].text == "a" * 300 + "\n" + "a" * 300
    assert all(c.estimated_tokens == estimate_tokens(c.text) == 201 for c in plan.chunks)
    assert plan.total_estimated_tokens == estimate_tokens("\n".join(["a" * 300] * 4))


def test_oversized_middle_turn_stands_alone_intact() -> None:
    big = "b" * 3000
    plan = chunk_session(["a" * 30, big, "c" * 30], session_id="s", safe_processing_limit_tokens=100)
    assert [c.turn_indices for c in plan.chunks] == [(0,), (1,), (2,)]
    assert [c.oversized_turn for c in plan.chunks] == [False, True, False]
    assert plan.chunks[1].text == big


def test_small_session_is_a_single_pass() -> None:
    plan = chunk_session(["hello", "world"], session_id="s", safe_processing_limit_tokens=1000)
    assert plan.chunked is False
    assert len(plan.chunks) == 1
    assert plan.chunks[0].text == "hello\nworld"
    assert plan.chunks[0].turn_indices == (0, 1)


def test_empty_and_none_input_give_one_empty_chunk() -> None:
    for turns in ([], None):
        plan = chunk_session(turns, session_id="s", safe_processing_limit_tokens=10)
        assert plan.chunked is False
        assert plan.total_estimated_tokens == 0
        (only,) = plan.chunks
        assert (only.chunk_id, only.turn_indices, only.text, only.estimated_tokens) == ("s:chunk:0", (), "", 0)


def test_non_string_turn_counts_as_empty() -> None:
    plan = chunk_session(["abc", None, 7], session_id="s", safe_processing_limit_tokens=10)
    assert plan.chunks[0].text == "abc\n\n"


def test_unusable_limits_never_chunk() -> None:
    turns = ["x" * 3000] * 5
    for limit in (0, None, math.inf, -5, math.nan, "100"):
        plan = chunk_session(turns, session_id="s", safe_processing_limit_tokens=limit)  # type: ignore[arg-type]
        assert plan.chunked is False
        assert len(plan.chunks) == 1
        assert plan.chunks[0].oversized_turn is False


def test_custom_estimator_is_used() -> None:
    words = functools.partial(estimate_tokens, bytes_per_token=1)
    plan = chunk_session(["ab", "cd", "ef"], session_id="s", safe_processing_limit_tokens=5, estimate=words)
    assert [c.turn_indices for c in plan.chunks] == [(0, 1), (2,)]

    def by_turn(text: object) -> int:
        return 0 if not isinstance(text, str) else text.count("|") + 1

    plan = chunk_session(["a", "b", "c", "d"], session_id="s", safe_processing_limit_tokens=3, estimate=by_turn)
    assert all(c.estimated_tokens == by_turn(c.text) for c in plan.chunks)


def _quadratic_reference(turns: list[str], limit: int) -> list[tuple[int, ...]]:
    """The earlier system's packing: re-join and re-estimate the chunk for every added turn."""
    groups: list[list[int]] = []
    current: list[int] = []
    for index, text in enumerate(turns):
        if estimate_tokens(text) > limit:
            if current:
                groups.append(current)
            groups.append([index])
            current = []
        elif not current or estimate_tokens("\n".join(turns[i] for i in [*current, index])) <= limit:
            current.append(index)
        else:
            groups.append(current)
            current = [index]
    if current:
        groups.append(current)
    return [tuple(g) for g in groups]


turn_lists = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120), max_size=40)


@settings(max_examples=300, deadline=None)
@given(turns=turn_lists, limit=st.integers(min_value=1, max_value=80))
def test_properties(turns: list[str], limit: int) -> None:
    plan = chunk_session(turns, session_id="p", safe_processing_limit_tokens=limit)
    # every turn in exactly one chunk, in order
    flat = [i for c in plan.chunks for i in c.turn_indices]
    assert flat == list(range(len(turns)))
    for number, chunk in enumerate(plan.chunks):
        assert chunk.chunk_id == f"p:chunk:{number}"
        assert chunk.text == "\n".join(turns[i] for i in chunk.turn_indices)
        assert chunk.estimated_tokens == estimate_tokens(chunk.text)
        if plan.chunked:
            # bound respected except by a lone oversized turn
            if chunk.estimated_tokens > limit:
                assert chunk.oversized_turn and len(chunk.turn_indices) == 1
            assert chunk.oversized_turn == (len(chunk.turn_indices) == 1 and chunk.estimated_tokens > limit)
    assert plan.chunked == (estimate_tokens("\n".join(turns)) > limit)
    # deterministic, and identical to the quadratic packing of the earlier system
    assert chunk_session(turns, session_id="p", safe_processing_limit_tokens=limit) == plan
    if plan.chunked:
        assert [c.turn_indices for c in plan.chunks] == _quadratic_reference(turns, limit)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="ab .\n", max_size=400), limit=st.integers(min_value=1, max_value=40))
def test_split_oversized_text_parts_fit_and_rejoin(text: str, limit: int) -> None:
    parts = split_oversized_text(text, limit_tokens=limit)
    assert "".join(parts) == text
    if estimate_tokens(text) > limit:
        assert all(estimate_tokens(p) <= limit for p in parts)
        assert all(parts)


def test_split_prefers_paragraphs() -> None:
    text = "first paragraph here.\n\nsecond paragraph here.\n\nthird one."
    parts = split_oversized_text(text, limit_tokens=9)
    assert parts == ["first paragraph here.\n\n", "second paragraph here.\n\n", "third one."]


def test_chunk_text_is_built_on_first_read_only() -> None:
    # The extractor reads turn_indices, never chunk.text: chunking a big session must not hold a
    # second copy of it. 400 turns of 10 kB at a 50k-token limit: 4 MB of text, 14 turns a chunk.
    turns = [chr(ord("a") + i % 26) * 10_000 for i in range(400)]
    tracemalloc.start()
    try:
        plan = chunk_session(turns, session_id="big", safe_processing_limit_tokens=50_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert plan.chunked and len(plan.chunks) == 29 and len(plan.chunks[0].turn_indices) == 14
    assert peak < 100_000  # bytes: the plan's bookkeeping, none of the 4 MB of text
    first = plan.chunks[0]
    assert first.text == "\n".join(turns[i] for i in first.turn_indices)
    assert first.text is first.text  # built once, then kept


def test_chunk_is_immutable_and_compares_by_content() -> None:
    plan = chunk_session(["ab", "cd", "ef"], session_id="s", safe_processing_limit_tokens=1)
    chunk = plan.chunks[0]
    with pytest.raises(AttributeError):
        chunk.turn_indices = (5,)  # type: ignore[misc]
    again = chunk_session(["ab", "cd", "ef"], session_id="s", safe_processing_limit_tokens=1)
    other = chunk_session(["ab", "cd", "eX"], session_id="s", safe_processing_limit_tokens=1)
    assert again.chunks == plan.chunks and hash(again.chunks[0]) == hash(chunk)
    assert other.chunks[2] != plan.chunks[2]  # same ids and sizes, different text
    assert "ab" not in repr(chunk)  # a repr never dumps a chunk's text


def test_caller_may_reuse_its_list() -> None:
    turns = ["one", "two", "three"]
    plan = chunk_session(turns, session_id="s", safe_processing_limit_tokens=2)
    turns[0] = "changed"
    assert plan.chunks[0].text == "one"
