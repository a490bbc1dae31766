"""Audit of the model path's chunk bounds: what the model is shown fits the band it is checked
against, whatever the shape of the session (real cycles, embedded Chroma, the SQLite graph and
the loopback chat-completions server of tests/llm_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config import Settings, load_settings
from pipelines.chunker import estimate_tokens
from pipelines.importer import import_sessions
from tests.conftest import write_sessions
from tests.llm_server import LLMServer
from worker.cycle import open_stores, run_cycle

# A model of 4,000 tokens: chunks of at most 2,000 estimated tokens, prompts of at most 3,000.
SMALL_MODEL: dict[str, Any] = {
    "context_limit_tokens": 4000, "safe_processing_limit_tokens": 3000, "output_reserve_tokens": 500,
    "chunk_limit_tokens": 3000, "prompt_envelope_tokens": 1000,
}
BAND = 3000


def chat(sid: str, texts: list[str], *, role: str | None = None) -> dict[str, Any]:
    return {
        "sessionId": sid, "title": sid, "createdAt": "2026-11-01T10:00:00Z", "noSummary": True,
        "turns": [{"id": f"{sid}-t{i}", "role": role or ("user" if i % 2 == 0 else "assistant"), "text": text}
                  for i, text in enumerate(texts)],
    }


def llm_settings(data_dir: Path, server: LLMServer, **overrides: Any) -> Settings:
    return load_settings(data_dir=data_dir, extractor="openai", llm_base_url=server.url, llm_max_retries=0,
                         llm_concurrency=4, **{**SMALL_MODEL, **overrides})


async def digest(settings: Settings, tmp_path: Path, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    stores = await open_stores(settings)
    try:
        path = write_sessions(tmp_path / "in.jsonl", sessions)
        imported = await import_sessions(path, chroma=stores.chroma, memory_collection=settings.memory_collection,
                                         summary_collection=settings.session_collection)
        assert not imported.bad_lines, imported.bad_lines
        result = await run_cycle(settings, stores=stores)
        assert result.outcome == "completed", result.message
        return {"extract": result.phases["extract"], "digests": stores.runstate.digest_counts(),
                "mentioned": {r[0] for r in stores.db.query(
                    "SELECT target FROM edges WHERE relationship = 'MENTIONED_IN'")}}
    finally:
        stores.close()


def prompt_tokens(body: dict[str, Any]) -> int:
    return sum(estimate_tokens(m["content"]) for m in body["messages"])


async def test_a_chat_of_thousands_of_short_turns_is_chunked_to_what_the_model_is_shown(
    settings: Settings, tmp_path: Path
) -> None:
    """Found by the audit: 1,900 turns of `ok` fit one chunk's budget by their text (about 6,000
    bytes: two chunks), but the model is shown each as `[N] (assistant) ok`, six times that: the
    prompts were ~9,300 and ~4,200 tokens against a 3,000-token band, so the chunks failed
    `skip-over-band` at every attempt and the session became undigestible without one model call (a 30,000-turn chat with the
    default settings: ~217,000 tokens against 100,000)."""
    texts = ["ok" if i % 2 else "go on" for i in range(1900)]
    texts[7] = "The LazyEdgeQueue holds every line."
    texts[1850] = "And the DrainWorker links them."
    with LLMServer() as server:
        done = await digest(llm_settings(settings.data_dir, server), tmp_path, [chat("chatty", texts)])
        extract = done["extract"]
        assert extract["failures_by_kind"] == {}, extract
        assert extract["sessions_digested"] == 1 and done["digests"].get("digested") == 1
        assert extract["chunks_total"] > 1 and server.chat_count == extract["chunks_ok"]
        assert max(prompt_tokens(r.body) for r in server.chat_requests) <= BAND
        assert {"memory:chatty-t7", "memory:chatty-t1850"} <= done["mentioned"]  # both ends reached the model


async def test_a_long_role_counts_towards_the_chunk(settings: Settings, tmp_path: Path) -> None:
    """The role is shown before every turn (`[N] (role) text`): a speaker with a long name costs
    tokens on each of its turns, and a chunk is sized with them."""
    role = "Dr. Evangelina Montgomery-Castellanos, Cardiothoracic Surgery"  # 60 of import's 64
    texts = [f"Turn {i}: the LazyEdgeQueue again." for i in range(400)]
    with LLMServer() as server:
        done = await digest(llm_settings(settings.data_dir, server), tmp_path, [chat("speaker", texts, role=role)])
        assert done["extract"]["failures_by_kind"] == {}, done["extract"]
        assert done["digests"].get("digested") == 1
        assert max(prompt_tokens(r.body) for r in server.chat_requests) <= BAND
