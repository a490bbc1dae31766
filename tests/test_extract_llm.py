"""The openai extractor against a real chat-completions server on 127.0.0.1 (tests/llm_server.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.extract.llm import OpenAIExtractor, parse_json_reply, retry_after_seconds
from pipelines.extract.model import ExtractionFailure, UnitTurn, WorkUnit, unit_content_hash, validate_extraction
from tests.llm_server import (
    LLMServer,
    Status,
    context_overflow,
    empty,
    llm_server,  # noqa: F401 - fixture
    malformed,
    ok,
    out_of_range_turns,
    rate_limited,
    server_error,
    slow,
    truncated,
)


def make_settings(tmp_path: Path, server: LLMServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path / "d", "extractor": "openai", "llm_base_url": server.url, "llm_model": "test-model",
        "llm_max_retries": 2, "llm_timeout_seconds": 5.0,
    }
    values.update(overrides)
    return load_settings(**values)


def unit(*texts: str) -> WorkUnit:
    turns = tuple(UnitTurn(n, f"m{n}", text, "user") for n, text in enumerate(texts, start=1))
    return WorkUnit("s1:chunk:0", "s1", 0, turns, unit_content_hash("s1", turns))


async def extract(settings: Settings, work: WorkUnit):
    async with OpenAIExtractor(settings, backoff_base=0.01) as extractor:
        return await extractor.extract(work)


@pytest.fixture(autouse=True)
def _clean_env(settings: Settings) -> None:
    """Reuse the conftest fixture that clears REM_* variables."""


async def test_success_maps_turn_numbers_and_records_usage(tmp_path: Path, llm_server: LLMServer) -> None:
    settings = make_settings(tmp_path, llm_server, llm_api_key="sk-secret-value")
    work = unit("We use the LazyEdgeQueue here.", "And GraphStore reads it.")
    reply = await extract(settings, work)
    assert reply.tokens_in > 0 and reply.tokens_out > 0
    extraction = validate_extraction(reply.raw, work, semantic_types=settings.semantic_types)
    by_id = {n.id: n for n in extraction.nodes}
    assert by_id["CLASS:LazyEdgeQueue"].evidence[0].memory_id == "m1"
    assert by_id["CLASS:GraphStore"].evidence[0].memory_id == "m2"
    (request,) = llm_server.chat_requests
    assert request.headers["Authorization"] == "Bearer sk-secret-value"
    assert request.body["model"] == "test-model"
    assert request.body["response_format"]["type"] == "json_schema"
    assert "[1] (user) We use the LazyEdgeQueue here." in request.prompt
    assert "m1" not in request.prompt  # raw memory ids are never shown to the model


async def test_latency_is_waited_for_and_timeout_is_a_failure_kind(tmp_path: Path, llm_server: LLMServer) -> None:
    llm_server.script(slow(0.3))
    started = time.monotonic()
    await extract(make_settings(tmp_path, llm_server), unit("A SlowThing"))
    assert time.monotonic() - started >= 0.3
    llm_server.script(slow(1.5), slow(1.5))
    with pytest.raises(ExtractionFailure) as failure:
        await extract(make_settings(tmp_path, llm_server, llm_timeout_seconds=0.3, llm_max_retries=1), unit("x"))
    assert failure.value.kind == "timeout"


async def test_429_retry_after_is_honoured(tmp_path: Path, llm_server: LLMServer) -> None:
    llm_server.script(rate_limited(retry_after="1"), ok())
    started = time.monotonic()
    reply = await extract(make_settings(tmp_path, llm_server), unit("The RetryPolicy"))
    assert time.monotonic() - started >= 0.95
    assert llm_server.chat_count == 2
    assert reply.raw["nodes"][0]["name"] == "RetryPolicy"


async def test_500_is_retried_then_provider_error(tmp_path: Path, llm_server: LLMServer) -> None:
    llm_server.script(server_error(), ok())
    await extract(make_settings(tmp_path, llm_server), unit("x"))
    assert llm_server.chat_count == 2
    llm_server.reset()
    llm_server.script(server_error(), server_error(), server_error(), server_error())
    with pytest.raises(ExtractionFailure) as failure:
        await extract(make_settings(tmp_path, llm_server, llm_max_retries=2), unit("x"))
    assert failure.value.kind == "provider-error"
    assert llm_server.chat_count == 3  # one call + two retries


async def test_malformed_then_repaired(tmp_path: Path, llm_server: LLMServer) -> None:
    llm_server.script(malformed(), ok())
    reply = await extract(make_settings(tmp_path, llm_server), unit("The ChunkPlan"))
    assert reply.raw["nodes"][0]["name"] == "ChunkPlan"
    first, second = llm_server.chat_requests
    assert second.body["messages"][-1]["role"] == "user"
    assert "not valid JSON" in second.body["messages"][-1]["content"]
    assert second.body["messages"][-2]["content"] == first_reply_text()


def first_reply_text() -> str:
    return malformed().content  # type: ignore[return-value]


async def test_always_malformed_is_schema_failure_after_one_repair(tmp_path: Path, llm_server: LLMServer) -> None:
    llm_server.script(malformed(), malformed(), malformed())
    with pytest.raises(ExtractionFailure) as failure:
        await extract(make_settings(tmp_path, llm_server), unit("x"))
    assert failure.value.kind == "schema-failure"
    assert llm_server.chat_count == 2


@pytest.mark.parametrize(
    ("behaviour", "kind"),
    # an empty answer: the context overflowed (the earlier system's lesson), unless the server says
    # it read the prompt whole (cutprompt38: then no halves would mend it)
    [(truncated(), "truncated-output"), (empty(read=False), "context-overflow"), (empty(), "schema-failure"),
     (context_overflow(), "context-overflow")],
)
async def test_length_empty_and_overflow(tmp_path: Path, llm_server: LLMServer, behaviour: Any, kind: str) -> None:
    llm_server.script(behaviour)
    with pytest.raises(ExtractionFailure) as failure:
        await extract(make_settings(tmp_path, llm_server), unit("x"))
    assert failure.value.kind == kind
    assert llm_server.chat_count == 1  # none of these is worth a retry


async def test_turn_numbers_out_of_range_are_not_provenance(tmp_path: Path, llm_server: LLMServer) -> None:
    llm_server.script(out_of_range_turns())
    work = unit("only one turn")
    settings = make_settings(tmp_path, llm_server)
    reply = await extract(settings, work)
    extraction = validate_extraction(reply.raw, work, semantic_types=settings.semantic_types)
    assert extraction.invalid_turn_refs == 2
    assert len(extraction.ungrounded) == 2
    assert all(not n.evidence for n in extraction.nodes)


async def test_json_schema_rejected_falls_back_to_json_object(tmp_path: Path, llm_server: LLMServer) -> None:
    llm_server.script(Status(400, '{"error": {"message": "response_format json_schema is not supported"}}'))
    settings = make_settings(tmp_path, llm_server)
    async with OpenAIExtractor(settings) as extractor:
        await extractor.extract(unit("A"))
        await extractor.extract(unit("B"))
        assert extractor.json_mode == "json_object"
    formats = [r.body.get("response_format", {}).get("type") for r in llm_server.chat_requests]
    assert formats == ["json_schema", "json_object", "json_object"]


async def test_prompt_over_the_band_is_skipped_without_a_call(tmp_path: Path, llm_server: LLMServer) -> None:
    settings = make_settings(tmp_path, llm_server, context_limit_tokens=1200, output_reserve_tokens=200,
                             safe_processing_limit_tokens=1000, prompt_envelope_tokens=100)
    with pytest.raises(ExtractionFailure) as failure:
        await extract(settings, unit("x" * 6000))
    assert failure.value.kind == "skip-over-band"
    assert llm_server.chat_count == 0


async def test_ping_checks_the_server(tmp_path: Path, llm_server: LLMServer) -> None:
    async with OpenAIExtractor(make_settings(tmp_path, llm_server)) as extractor:
        await extractor.ping()
    url = llm_server.url
    llm_server.stop()
    async with OpenAIExtractor(load_settings(data_dir=tmp_path / "d", llm_base_url=url)) as extractor:
        with pytest.raises(ExtractionFailure):
            await extractor.ping()


def test_reply_parsing_and_retry_after() -> None:
    assert parse_json_reply('```json\n{"nodes": []}\n```') == {"nodes": []}
    assert parse_json_reply('{"graph": {"nodes": []}}') == {"graph": {"nodes": []}}
    for bad in ("[]", '{"summary": "no nodes"}', "not json"):
        with pytest.raises(ValueError):
            parse_json_reply(bad)
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("5000", cap=60) == 60
    assert retry_after_seconds("Sun, 29 Nov 2026 12:00:10 GMT", now=1795953600.0) == 10.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


async def test_prompt_schema_and_validation_come_from_one_model(tmp_path: Path, llm_server: LLMServer) -> None:
    from pipelines.extract.llm import system_prompt
    from pipelines.extract.model import ExtractionSpec, NodeSpec, response_schema, schema_example

    settings = make_settings(tmp_path, llm_server)
    await extract(settings, unit("We use the LazyEdgeQueue here."))
    (request,) = llm_server.chat_requests
    sent = request.body["response_format"]["json_schema"]["schema"]
    assert sent == response_schema() and "$ref" not in json.dumps(sent)
    node_schema = sent["properties"]["nodes"]["items"]
    assert set(node_schema["properties"]) == set(NodeSpec.model_fields)
    assert node_schema["required"] == [n for n, f in NodeSpec.model_fields.items() if f.is_required()]
    example = schema_example()
    ExtractionSpec.model_validate(example)  # the prompt's example is a valid answer
    assert json.dumps(example, ensure_ascii=False) in system_prompt(settings.semantic_types)
    assert json.dumps(example, ensure_ascii=False) in request.body["messages"][0]["content"]


def test_fingerprint_follows_the_prompt(tmp_path: Path) -> None:
    with LLMServer() as server:
        one = OpenAIExtractor(make_settings(tmp_path, server))
        other = OpenAIExtractor(make_settings(tmp_path, server))
        other._system += " Also extract colours."
        assert one.fingerprint != other.fingerprint
