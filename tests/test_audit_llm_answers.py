"""Audit of what the model path accepts as an answer (real cycles, embedded Chroma, the SQLite graph
and the loopback chat-completions server of tests/llm_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from tests.llm_server import LLMServer, Reply
from tests.test_model_faults import MARKER, fault_settings, load, semantic_writes
from worker.cycle import open_stores, run_cycle

WHOLE = '{"summary": "s", "nodes": [{"id": "w", "type": "CLASS", "name": "BrokenWidget", "evidence": [{"turn": 1, "quote": "BrokenWidget"}]}], "edges": []}'


@pytest.mark.parametrize("content", [WHOLE, ""], ids=["valid-json", "empty"])
async def test_an_answer_cut_by_the_content_filter_is_not_taken_as_the_extraction(
    settings: Settings, tmp_path: Path, content: str
) -> None:
    """Found by the audit: an answer whose `finish_reason` is `content_filter` (the server's
    policy cut the output) was taken as the chunk's whole extraction when what was left parsed —
    the chunk marked `ok`, the session committed without what the filter cut — and, when nothing
    was left, reported as an empty answer, a `context-overflow`, which points the operator at the
    context settings. It is a `schema-failure` saying the filter cut it."""
    with LLMServer() as server:
        server.script(*[Reply(content, finish_reason="content_filter")] * 4, match=MARKER)
        mine = fault_settings(settings.data_dir, server)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            result = await run_cycle(mine, stores=stores)
            extract = result.phases["extract"]
            assert extract["failures_by_kind"] == {"schema-failure": 1}, extract
            (failing,) = stores.runstate.failing_chunks()
            assert failing["session_id"] == "bad" and "content_filter" in failing["error"], failing
            assert semantic_writes(stores, "bad") == [] and semantic_writes(stores, "good") != []
        finally:
            stores.close()
