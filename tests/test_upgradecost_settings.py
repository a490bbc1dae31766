"""Which settings have the model paid again (upgradecost audit): a setting that changes nothing the
model is sent (concurrency, timeouts, retries, the JSON mode, the key, the server's URL, the judge, a
token limit that does not bind) re-extracts no chunk — a session grown by a turn pays that turn's
chunk only; one that changes what is sent (the model, the node types, the chunk budget) pays every
chunk of a session extracted again, and no digested session is extracted again for it alone. Real
cycles, embedded Chroma, SQLite, the loopback chat-completions server counting requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings, load, session
from worker.cycle import open_stores, run_cycle

# Unchanged: what the model is sent is the same, and no chunk is paid again.
SENT_THE_SAME: list[tuple[str, dict[str, Any]]] = [
    ("REM_LLM_CONCURRENCY", {"llm_concurrency": 1}),
    ("REM_LLM_TIMEOUT_SECONDS", {"llm_timeout_seconds": 30}),
    ("REM_LLM_MAX_RETRIES", {"llm_max_retries": 5}),
    ("REM_LLM_JSON_MODE", {"llm_json_mode": "json_object"}),
    ("REM_LLM_API_KEY", {"llm_api_key": "sk-test"}),
    ("REM_LLM_JUDGE", {"llm_judge": True}),
    ("REM_MAX_CHUNK_ATTEMPTS", {"max_chunk_attempts": 5}),
    ("REM_OUTPUT_RESERVE_TOKENS", {"output_reserve_tokens": 1000}),  # the 48-token chunk limit binds
    ("REM_CONTEXT_LIMIT_TOKENS", {"context_limit_tokens": 65536}),
]
# What the model is sent changes: every chunk of a session extracted again is paid again.
SENT_OTHERWISE: list[tuple[str, dict[str, Any]]] = [
    ("REM_LLM_MODEL", {"llm_model": "another-model"}),
    ("REM_SEMANTIC_TYPES", {"semantic_types": ("CLASS", "FILE")}),
    ("REM_CHUNK_LIMIT_TOKENS", {"chunk_limit_tokens": 96}),
]


async def test_only_settings_that_change_what_the_model_is_sent_pay_again(tmp_path: Path) -> None:
    turns = [f"turn {i:02d} mentions the Part{chr(65 + i)}Item component and a bit of filler" for i in range(8)]
    with LLMServer() as llm, LLMServer() as elsewhere:

        async def grow(name: str, server: LLMServer, overrides: dict[str, Any]) -> tuple[int, int, int]:
            """(requests of a cycle with nothing new, requests and chunks once the session grew)."""
            settings = llm_settings(tmp_path / "data", server, **overrides)
            stores = await open_stores(settings)
            try:
                server.reset()
                assert (await run_cycle(settings, stores=stores)).outcome == "completed"
                idle = server.chat_count
                turns.append(f"turn {len(turns):02d} under {name} adds the Grown{len(turns)}Thing")
                await load(settings, stores, tmp_path, [session("s1", turns)])
                server.reset()
                extract = (await run_cycle(settings, stores=stores)).phases["extract"]
                assert extract["sessions_digested"] == 1
                return idle, server.chat_count, extract["chunks_total"]
            finally:
                stores.close()

        await grow("the first run", llm, {})
        # all at once: any one of them changing what is sent would pay for every chunk
        changed = {key: value for _, overrides in SENT_THE_SAME for key, value in overrides.items()}
        assert (await grow("settings sent the same", llm, changed))[:2] == (0, 1)
        assert (await grow("REM_LLM_BASE_URL", elsewhere, {}))[:2] == (0, 1)  # another server, same model
        for name, overrides in SENT_OTHERWISE:
            idle, paid, chunks = await grow(name, llm, overrides)
            assert (idle, paid) == (0, chunks), name
