"""The answers and refusals of the model servers people run (replyshape38).

Two ways a working model lost every chunk:

- A reasoning model served without a reasoning parser (DeepSeek-R1 and its distillations, Qwen3 or
  QwQ behind a server or hosted API that passes the thinking through) writes ``<think>…</think>``
  before its JSON — or only ``</think>`` when the chat template opened the block. The answer was
  unreadable, its repair round (the chunk paid for twice) thought again, and the chunk failed
  ``schema-failure`` at every attempt. A model that wrote a sentence around a fenced answer paid the
  repair round too.
- OpenAI's reasoning models (o-series, the GPT-5 family) refuse ``max_tokens`` ("Use
  'max_completion_tokens' instead") and a ``temperature`` other than 1 with HTTP 400. Each request
  failed ``provider-error``, no retry mended it, and every session ended undigestible.

Real cycles, real SQLite, embedded Chroma, and the loopback server of tests/llm_server.py answering
as those servers do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from config import Settings
from pipelines.extract.llm import OpenAIExtractor, load_reply_json
from pipelines.extract.model import ExtractionFailure, validate_extraction
from tests.llm_server import LLMServer, Reply, Status, thinking
from tests.test_extract_llm import extract, make_settings, unit
from tests.test_judgecheck37 import judged_cycles
from tests.test_named35 import model
from tests.test_sweep36 import questions_asked

GPT5 = ("max_tokens", "temperature")


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ('<think>\nThe schema says {"nodes": [...]}.\n</think>\n\n{"nodes": [1]}', {"nodes": [1]}),
        ('Let me list them.\n</think>\n{"nodes": [2]}', {"nodes": [2]}),  # the template opened the block
        ('<think>x</think>\n```json\n{"nodes": [3]}\n```', {"nodes": [3]}),
        ('Here is the graph:\n```json\n{"nodes": [4]}\n```\nAnything else?', {"nodes": [4]}),
        ('```json\n{"nodes": [5]}\n```', {"nodes": [5]}),
        ('{"summary": "a turn says </think>", "nodes": []}', {"summary": "a turn says </think>", "nodes": []}),
    ],
)
def test_an_answer_is_read_through_its_wrapping(reply: str, value: Any) -> None:
    assert load_reply_json(reply) == value


@pytest.mark.parametrize(
    "reply",
    [
        'I cannot do that. An answer looks like {"nodes": []}',  # bare JSON among words: no guess
        'First:\n```json\n{"nodes": [1]}\n```\nor:\n```json\n{"nodes": [2]}\n```',  # which one?
        "<think>I will answer next time.</think>",
        '<think>{"nodes": []}',  # never closed: the thinking is no answer
    ],
)
def test_no_answer_is_guessed_from_words(reply: str) -> None:
    with pytest.raises(ValueError):
        load_reply_json(reply)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@given(
    answer=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    thought=st.text(max_size=200).filter(lambda t: "</think>" not in t),
    opened=st.booleans(),
    fenced=st.booleans(),
)
def test_any_thinking_before_any_answer_leaves_the_answer(answer: dict[str, Any], thought: str, opened: bool, fenced: bool) -> None:
    text = json.dumps(answer, ensure_ascii=False)
    body = f"```json\n{text}\n```" if fenced else text
    assert load_reply_json(f"{'<think>' if opened else ''}{thought}</think>\n{body}") == answer


@pytest.mark.parametrize("opened", [True, False])
async def test_a_reasoning_models_answer_is_paid_for_once(tmp_path: Path, opened: bool) -> None:
    with LLMServer(default=thinking(opened=opened)) as server:
        settings = make_settings(tmp_path, server)
        work = unit("We use the LazyEdgeQueue here.")
        reply = await extract(settings, work)
        assert server.chat_count == 1  # no repair round
    extraction = validate_extraction(reply.raw, work, semantic_types=settings.semantic_types)
    assert [n.name for n in extraction.nodes] == ["LazyEdgeQueue"] and extraction.nodes[0].evidence


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_a_model_that_only_reasoned_did_not_overflow_its_context(tmp_path: Path, field: str) -> None:
    """Empty content means an overflowed context (the earlier system's lesson), unless the server
    says the model thought: then it gave no answer."""
    answer = {"choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "", field: "Hmm. The user wants JSON."}}]}
    with LLMServer(default=Status(200, json.dumps(answer))) as server:
        with pytest.raises(ExtractionFailure) as failure:
            await extract(make_settings(tmp_path, server), unit("x"))
    assert failure.value.kind == "schema-failure" and "gave no answer" in str(failure.value)


async def test_refused_parameters_are_sent_another_way_and_remembered(tmp_path: Path) -> None:
    with LLMServer(refuses=GPT5) as server:
        settings = make_settings(tmp_path, server, llm_max_retries=0)  # a refusal is no try
        async with OpenAIExtractor(settings) as extractor:
            first = await extractor.extract(unit("The ChunkPlan is here."))
            second = await extractor.extract(unit("The GraphStore is there."))
        bodies = [r.body for r in server.chat_requests]
    assert first.raw["nodes"][0]["name"] == "ChunkPlan" and second.raw["nodes"][0]["name"] == "GraphStore"
    assert len(bodies) == 4  # two refusals, then each unit once
    assert "max_tokens" in bodies[0] and "temperature" in bodies[1] and "max_tokens" not in bodies[1]
    for body in bodies[2:]:
        assert body["max_completion_tokens"] == settings.output_reserve_tokens
        assert "max_tokens" not in body and "temperature" not in body
    assert extractor.refused_parameters == set(GPT5)


async def test_calls_in_flight_together_are_each_sent_again(tmp_path: Path) -> None:
    with LLMServer(refuses=GPT5, default=Reply(None, delay=0.2)) as server:
        settings = make_settings(tmp_path, server, llm_max_retries=0, llm_concurrency=4)
        names: list[str] = []
        async with OpenAIExtractor(settings) as extractor:
            async def one(word: str) -> None:
                names.append((await extractor.extract(unit(f"The {word} is here."))).raw["nodes"][0]["name"])

            async with anyio.create_task_group() as group:
                for word in ("AlphaWidget", "BravoStore", "CharlieQueue", "DeltaIndex"):
                    group.start_soon(one, word)
        answered = [r for r in server.chat_requests if "max_completion_tokens" in r.body and "temperature" not in r.body]
    assert sorted(names) == ["AlphaWidget", "BravoStore", "CharlieQueue", "DeltaIndex"]
    assert len(answered) == 4  # each unit answered once; only refusals besides


async def test_a_server_that_refuses_the_other_way_too_fails_without_a_loop(tmp_path: Path) -> None:
    refused = Status(400, json.dumps({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this "
                                                           "model. Use 'max_completion_tokens' instead.",
                                                "param": "max_tokens", "code": "unsupported_parameter"}}))
    unknown = Status(400, json.dumps({"error": {"message": "'max_completion_tokens' is not supported"}}))
    with LLMServer() as server:
        server.script(refused, unknown, unknown)
        with pytest.raises(ExtractionFailure) as failure:
            await extract(make_settings(tmp_path, server), unit("x"))
        assert server.chat_count == 2
    assert failure.value.kind == "provider-error" and "max_completion_tokens" in str(failure.value)


def places(settings: Settings) -> set[str]:
    from store.backend import open_database

    db = open_database(settings)
    try:
        return {r[0] for r in db.query("SELECT id FROM nodes WHERE label = 'PLACE'", ())}
    finally:
        db.close()


@pytest.mark.both_backends
@pytest.mark.parametrize("server", ["reasoning", "gpt5"])
async def test_cycles_with_the_judge_digest_everything_against_such_servers(settings: Settings, tmp_path: Path, server: str) -> None:
    """Both sessions digested, each chunk answered once, and the judge (checked first, through the
    same requests) links `Vegas` to `Las Vegas` as with any capable model."""
    behaviour = thinking(model("link")) if server == "reasoning" else Reply(model("link"))
    with LLMServer(default=behaviour, refuses=GPT5 if server == "gpt5" else ()) as llm:
        phases = await judged_cycles(settings, tmp_path, llm)
        asked = questions_asked(llm)
        bodies = [r.body for r in llm.chat_requests]
    assert [p["chunks_failed"] for p in phases] == [0, 0] and all("judge_failed_check" not in p for p in phases)
    assert [q["new"]["name"] for q in asked] == ["Vegas"]
    assert places(settings) == {"PLACE:Las Vegas"}
    answered = [b for b in bodies if "max_tokens" not in b and "temperature" not in b] if server == "gpt5" else bodies
    assert len(answered) == 3  # two chunks and one question, each once
