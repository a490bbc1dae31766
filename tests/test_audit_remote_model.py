"""The model server misbehaving in ways the fault matrix of tests/test_model_faults.py does not
cover, through real REM cycles against the loopback server of tests/llm_server.py: an answer that
trickles in past the request's timeout, one that never ends, JSON nested too deep for Python's
parser. Each fails only the chunk it answers, with a recorded kind, and never the cycle. With
``REM_LLM_JUDGE``, a junk identity verdict is no link and a community label is cleaned like any
model text.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import anyio
import pytest

from config import Settings, load_settings
from pipelines.extract.llm import OpenAIExtractor
from pipelines.identity import AuditUnanswered, NodeRef
from pipelines.importer import import_sessions
from tests.conftest import SAMPLE
from tests.test_extract_llm import unit
from tests.llm_server import Behaviour, Flood, LLMServer, Reply, Status, Trickle, held
from tests.test_model_faults import MARKER, TIMEOUT_SECONDS, bad_calls, fault_settings, load, semantic_writes
from worker.cycle import CycleResult, Stores, open_stores, run_cycle
from worker.knowledge import model_judge

DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON: Python's parser gives up on it (RecursionError)


FAULTS: list[tuple[str, Behaviour, str, int]] = [
    # (name, behaviour, recorded kind, model calls)
    ("trickle-past-the-timeout", Trickle(interval=0.05), "timeout", 1),
    ("endless-answer", Flood(size=200 * 2**20), "provider-error", 1),
    ("content-nested-too-deep", Reply(DEEP), "schema-failure", 2),
    ("body-nested-too-deep", Status(200, DEEP), "provider-error", 1),
    ("body-nested-too-deep-inside", Status(200, '{"choices": ' + DEEP + "}"), "provider-error", 1),
]


async def measured_cycle(settings: Settings, stores: Stores) -> tuple[CycleResult, float, int]:
    """One REM cycle (at most 60 s) with its seconds and its peak of traced memory in bytes."""
    started = time.monotonic()
    tracemalloc.start()
    try:
        with anyio.fail_after(60):
            result = await run_cycle(settings, stores=stores)
        return result, time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("name", "behaviour", "kind", "calls"), FAULTS, ids=[f[0] for f in FAULTS])
async def test_a_misbehaving_answer_fails_its_chunk_only(
    settings: Settings, tmp_path: Path, name: str, behaviour: Behaviour, kind: str, calls: int
) -> None:
    with LLMServer() as server:
        server.script(*[behaviour] * 4, match=MARKER)
        mine = fault_settings(settings.data_dir, server, llm_timeout_seconds=TIMEOUT_SECONDS)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            result, seconds, peak = await measured_cycle(mine, stores)
            assert result.outcome == "completed", result.message
            extract = result.phases["extract"]
            assert (extract["sessions_digested"], extract["sessions_failed"]) == (1, 1), extract
            assert extract["failures_by_kind"] == {kind: 1}
            (failing,) = stores.runstate.failing_chunks()
            assert (failing["session_id"], failing["error_kind"]) == ("bad", kind) and failing["error"]
            assert semantic_writes(stores, "bad") == [] and semantic_writes(stores, "good") != []
            assert bad_calls(server) == calls
            # bounded: the request's timeout is the whole answer's, and an answer's size is capped
            assert seconds < 20
            assert peak < 100 * 2**20, f"{peak / 2**20:.0f} MiB"
        finally:
            stores.close()


def chat_body(message: dict[str, object]) -> Status:
    return Status(200, json.dumps({"choices": [{"message": {"role": "assistant", **message}, "finish_reason": "stop"}]}))


async def test_a_refusal_is_said_and_content_parts_are_read(settings: Settings, tmp_path: Path) -> None:
    """A model's refusal (``content`` null, ``refusal`` its reason) is a ``schema-failure`` that
    quotes it, not an "empty answer" read as a context overflow (which would send the operator
    after the context settings); an answer whose ``content`` is a list of text parts is its text."""
    answer = json.dumps({"summary": "", "nodes": [{"id": "n1", "type": "CLASS", "name": "GraphStore",
                                                   "evidence": [{"turn": 1, "quote": "GraphStore"}]}], "edges": []})
    with LLMServer() as server:
        server.script(*[chat_body({"content": None, "refusal": "I can't help with that."})] * 4, match=MARKER)
        server.script(*[chat_body({"content": [{"type": "text", "text": answer[:20]}, {"type": "text", "text": answer[20:]}]})] * 4,
                      match="GraphStore")
        mine = fault_settings(settings.data_dir, server)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            result = await run_cycle(mine, stores=stores)
            assert result.phases["extract"]["failures_by_kind"] == {"schema-failure": 1}
            (failing,) = stores.runstate.failing_chunks()
            assert failing["session_id"] == "bad" and "I can't help with that." in failing["error"]
            assert stores.graph.get_node("CLASS:GraphStore") is not None  # read from the good session's parts
        finally:
            stores.close()


async def test_an_answer_past_the_timeout_is_not_asked_for_again_in_the_same_attempt(settings: Settings, tmp_path: Path) -> None:
    """A server slower than ``REM_LLM_TIMEOUT_SECONDS`` may be generating the answer when the worker
    gives up: asking again at once would pay for the same text again (four times with
    ``REM_LLM_MAX_RETRIES=3``). The chunk fails as ``timeout`` after one request and is retried
    by a later cycle, after its backoff."""
    with LLMServer() as server:
        server.script(*[held()] * 8, match=MARKER)  # still generating when the worker gives up
        mine = fault_settings(settings.data_dir, server, llm_max_retries=3, llm_timeout_seconds=TIMEOUT_SECONDS)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            result = await run_cycle(mine, stores=stores)
            assert result.phases["extract"]["failures_by_kind"] == {"timeout": 1}
            assert bad_calls(server) == 1
        finally:
            stores.close()


@pytest.mark.parametrize("models", [Trickle(interval=0.2), Flood(size=4 * 2**30)], ids=["trickle", "flood"])
async def test_the_model_list_check_reads_the_status_only(settings: Settings, tmp_path: Path, models: Trickle | Flood) -> None:
    """``provider-ready`` asks ``GET /models`` and goes by the status: a model list trickling in
    (14 s) or 4 GiB long is not waited for or read."""
    with LLMServer(models=models) as server:
        mine = fault_settings(settings.data_dir, server, llm_timeout_seconds=TIMEOUT_SECONDS)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            result, seconds, peak = await measured_cycle(mine, stores)
            assert seconds < 10 and peak < 100 * 2**20, (seconds, peak)
            assert result.outcome == "completed" and result.phases["extract"]["sessions_digested"] == 2
        finally:
            stores.close()


async def test_a_server_rejecting_json_schema_under_concurrent_calls_falls_back_one_mode(tmp_path: Path) -> None:
    """Four calls in flight are all refused ``json_schema``: each retries one mode lower than it
    sent (``json_object``), none skips to ``none`` and none fails."""
    with LLMServer() as server:
        refusal = Status(400, '{"error": {"message": "response_format json_schema is not supported"}}', delay=0.3)
        server.script(*[refusal] * 4)
        settings = load_settings(data_dir=tmp_path, extractor="openai", llm_base_url=server.url, llm_max_retries=0)
        async with OpenAIExtractor(settings) as extractor:
            replies: list[object] = []

            async def one(text: str) -> None:
                replies.append(await extractor.extract(unit(text)))

            async with anyio.create_task_group() as group:
                for text in ("The GraphStore", "The LazyQueue", "The DrainWorker", "The ChunkPlan"):
                    group.start_soon(one, text)
            assert len(replies) == 4 and extractor.json_mode == "json_object"
        formats = [r.body.get("response_format", {}).get("type") for r in server.chat_requests]
        assert formats == ["json_schema"] * 4 + ["json_object"] * 4, formats


# --- REM_LLM_JUDGE: the model's answers to the namer and the identity auditor ----------------------
JUNK_VERDICTS = [
    {"verdict": "link", "target": ["CLASS:GraphStore"]},
    {"verdict": "link", "target": {"id": "CLASS:GraphStore"}},
    {"verdict": ["link"], "target": "CLASS:GraphStore"},
    {"verdict": "link"},
]


@pytest.mark.parametrize("answer", [*JUNK_VERDICTS, DEEP], ids=["target-list", "target-object", "verdict-list", "no-target", "deep"])
async def test_a_junk_identity_verdict_is_no_answer(tmp_path: Path, answer: object) -> None:
    with LLMServer() as server:
        server.script(Reply(answer), match='"existing"')  # type: ignore[arg-type]
        settings = load_settings(data_dir=tmp_path, extractor="openai", llm_base_url=server.url, llm_judge=True, llm_max_retries=0)
        async with model_judge(settings) as judge:
            assert judge is not None
            node = NodeRef("CLASS:GraphStores", "CLASS", "GraphStores")
            # audit31: before, a new node — which settles an ``extension-asked`` pair for good.
            with pytest.raises(AuditUnanswered):
                await judge.audit_identity(node, [NodeRef("CLASS:GraphStore", "CLASS", "GraphStore")])
        assert server.chat_count == 1


@pytest.mark.both_backends
async def test_a_community_label_with_unstorable_characters_is_cleaned(settings: Settings, tmp_path: Path) -> None:
    with LLMServer() as server:
        server.script(*[Reply({"label": "Graph\ud800 stores\x00 and\tqueues " + "x" * 500})] * 10, match='"members"')
        mine = fault_settings(settings.data_dir, server, llm_judge=True)
        stores = await open_stores(mine)
        try:
            await import_sessions(SAMPLE, chroma=stores.chroma, memory_collection=mine.memory_collection,
                                  summary_collection=mine.session_collection)
            result = await run_cycle(mine, stores=stores)
            assert result.outcome == "completed", result.message
            labels = [r[0] for r in stores.db.query("SELECT label FROM communities WHERE label_source = 'model'")]
            assert labels, "the model named no community"
            assert all(label.startswith("Graph stores and queues x") and len(label) <= 80 for label in labels), labels
        finally:
            stores.close()
