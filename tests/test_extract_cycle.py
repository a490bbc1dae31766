"""Extraction inside real REM cycles: embedded Chroma, the SQLite graph, the lazy queue and the
loopback chat-completions server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.extract.workflow import ExtractEnv, extract_sessions, open_extractor
from pipelines.importer import import_sessions
from store.provenance import ProvenanceStore
from store.chunks import ChunkResultStore
from store.lazy_queue import LazyEdgeQueue
from store.semantic_index import SemanticIndex
from tests.conftest import run_cli, write_sessions
from tests.llm_server import LLMServer, malformed, ok
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_graph import dump as graph_dump
from worker.cycle import PHASES, Stores, open_stores, run_cycle
from worker.report import collect_status, reset_failures

TURNS = [
    "CHUNK-A: the LazyEdgeQueue feeds the GraphStore every cycle.",
    "CHUNK-A: filler words about nothing in particular here.",
    "CHUNK-B: we saw the LazyEdgeQueue stall under DrainWorker load.",
    "CHUNK-B: more filler words for the second chunk, fine.",
]

# Chunk B answered under its own id with another alias: it must merge into CLASS:LazyEdgeQueue
# ("lazyedgequeue" would not: a code identifier in another case is another identifier).
CHUNK_B_REPLY = {
    "summary": "queue stalls",
    "nodes": [
        {"id": "q", "type": "class", "name": "LazyEdgeQueue", "aliases": ["lazy edge queue"], "evidence": [{"turn": 1, "quote": "LazyEdgeQueue stall"}]},
        {"id": "d", "type": "CLASS", "name": "DrainWorker", "evidence": [{"turn": 1, "quote": "DrainWorker load"}]},
    ],
    "edges": [{"source": "q", "target": "d", "relationship": "blocks", "evidence": [{"turn": 1, "quote": "stall"}]}],
}


def session(sid: str, turns: list[str]) -> dict[str, Any]:
    return {
        "sessionId": sid, "title": f"Session {sid}", "createdAt": "2026-11-01T10:00:00Z", "summary": f"about {sid}",
        "turns": [{"id": f"{sid}-t{i}", "role": "user", "text": text} for i, text in enumerate(turns)],
    }


def llm_settings(data_dir: Path, server: LLMServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir, "extractor": "openai", "llm_base_url": server.url, "llm_max_retries": 0,
        # a 48-token chunk budget: two of the ~55-character turns above per chunk, as the model is
        # shown them (`[1] (user) CHUNK-A: …`, ~68 characters)
        "chunk_limit_tokens": 48, "prompt_envelope_tokens": 0, "llm_concurrency": 4,
    }
    values.update(overrides)
    return load_settings(**values)


async def load(settings: Settings, stores: Stores, tmp_path: Path, sessions: list[dict[str, Any]]) -> None:
    path = write_sessions(tmp_path / "in.jsonl", sessions)
    await import_sessions(path, chroma=stores.chroma, memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)


@pytest.fixture
async def opened(settings: Settings, llm_server: LLMServer) -> Any:
    """(settings for the LLM server, open stores)."""
    mine = llm_settings(settings.data_dir, llm_server)
    stores = await open_stores(mine)
    try:
        yield mine, stores
    finally:
        stores.close()


async def test_entity_in_two_chunks_is_one_node_and_second_cycle_calls_nothing(
    opened: Any, llm_server: LLMServer, tmp_path: Path
) -> None:
    settings, stores = opened
    llm_server.script(ok(CHUNK_B_REPLY), match="CHUNK-B")
    await load(settings, stores, tmp_path, [session("s1", TURNS)])
    result = await run_cycle(settings, stores=stores)
    assert result.outcome == "completed", result.message
    extract = result.phases["extract"]
    assert (extract["chunks_total"], extract["chunks_ok"], extract["sessions_digested"]) == (2, 2, 1)
    assert extract["tokens_in"] > 0 and extract["tokens_out"] > 0
    assert llm_server.chat_count == 2
    queue = stores.graph.get_node("CLASS:LazyEdgeQueue")
    assert queue is not None and "lazy edge queue" in queue.properties["aliases"]
    points = ProvenanceStore(stores.db).node_points("CLASS:LazyEdgeQueue")
    assert {p.chunk_id for p in points} == {"s1:chunk:0", "s1:chunk:1"}
    assert {p.memory for p in points} == {"memory:s1-t0", "memory:s1-t2"}
    assert all(p.observed_at for p in points)  # the turns' createdAt
    blocks = stores.graph.get_edge("CLASS:LazyEdgeQueue", "CLASS:DrainWorker", "BLOCKS")
    assert blocks is not None and blocks.weight == 1.0
    assert stores.graph.get_edge("CLASS:LazyEdgeQueue", "memory:s1-t2", "MENTIONED_IN") is not None
    assert stores.graph.get_edge("CLASS:LazyEdgeQueue", "session:s1", "DISCUSSED_IN").weight == 2.0
    dump = graph_dump(settings.graph_path)

    # unchanged second cycle: zero model calls, nothing written
    llm_server.reset()
    second = await run_cycle(settings, stores=stores)
    assert second.phases["extract"]["sessions_queued"] == 0
    assert llm_server.chat_count == 0
    assert graph_dump(settings.graph_path) == dump

    # forcing the session through extraction again reuses every chunk and leaves the graph identical
    stores.db.conn.execute("UPDATE session_digests SET state = 'undigested'")
    third = await run_cycle(settings, stores=stores)
    assert third.phases["extract"]["chunks_reused"] == 2 and third.phases["extract"]["sessions_digested"] == 1
    assert third.phases["extract"]["nodes_written"] == 0 and third.phases["extract"]["edges_written"] == 0
    assert llm_server.chat_count == 0
    assert graph_dump(settings.graph_path) == dump


async def test_second_chunk_failing_commits_nothing_and_retry_resends_only_it(
    opened: Any, llm_server: LLMServer, tmp_path: Path
) -> None:
    settings, stores = opened
    llm_server.script(malformed(), malformed(), match="CHUNK-B")
    await load(settings, stores, tmp_path, [session("s1", TURNS)])
    first = await run_cycle(settings, stores=stores)
    extract = first.phases["extract"]
    assert (extract["chunks_ok"], extract["chunks_failed"], extract["sessions_failed"]) == (1, 1, 1)
    assert extract["failures_by_kind"] == {"schema-failure": 1}
    assert stores.graph.nodes_by_label("CLASS") == []  # fail-closed: chunk 0's extraction is not committed
    (failing,) = stores.runstate.failing_chunks()
    assert (failing["chunk_id"], failing["error_kind"], failing["attempts"]) == ("s1:chunk:1", "schema-failure", 1)
    digest = stores.runstate.get_digests(["s1"])["s1"]
    assert (digest.state, digest.attempts) == ("undigested", 1)
    assert "s1:chunk:1" in digest.defer_reason

    # the failed chunk is backing off: the next cycle does not claim it, sends nothing, charges no attempt
    llm_server.reset()
    second = await run_cycle(settings, stores=stores)
    assert second.phases["extract"]["sessions_queued"] == 0 and llm_server.chat_count == 0
    assert stores.runstate.get_digests(["s1"])["s1"].attempts == 1

    # retry: only the failed chunk goes to the model; then the session commits
    assert reset_failures(stores, ["s1"]) == {"sessions_reset": 1, "chunks_reset": 1}
    third = await run_cycle(settings, stores=stores)
    assert [r.prompt.count("CHUNK-B") > 0 for r in llm_server.chat_requests] == [True]
    assert third.phases["extract"]["chunks_reused"] == 1 and third.phases["extract"]["sessions_digested"] == 1
    assert stores.graph.get_node("CLASS:LazyEdgeQueue") is not None
    assert stores.runstate.failing_chunks() == []


async def test_session_becomes_undigestible_after_max_attempts(settings: Settings, llm_server: LLMServer, tmp_path: Path) -> None:
    mine = llm_settings(settings.data_dir, llm_server, max_chunk_attempts=2)
    llm_server.script(*[malformed()] * 10, match="CHUNK-B")
    stores = await open_stores(mine)
    try:
        await load(mine, stores, tmp_path, [session("s1", TURNS)])
        await run_cycle(mine, stores=stores)  # ingest + first failed attempt
        records = stores.runstate.get_digests(["s1"])
        later = datetime.now(UTC) + timedelta(hours=7)  # past any chunk backoff
        async with open_extractor(mine) as extractor:
            env = ExtractEnv(
                chroma=stores.chroma, unit=stores.unit,
                queue=LazyEdgeQueue(mine.queue_path), graph_index=SemanticIndex(stores.db), extractor=extractor,
                semantic_types=mine.semantic_types, budget_tokens=mine.chunk_budget_tokens, max_attempts=2,
                retry_base_seconds=mine.chunk_retry_base_seconds, retry_max_seconds=mine.chunk_retry_max_seconds,
                concurrency=2, run_id="run-test", now=later,
            )
            stats = await extract_sessions([records["s1"]], env)
        assert stats.sessions_undigestible == 1 and stats.chunks_reused == 1 and stats.chunks_failed == 1
        status = collect_status(mine, stores)
        assert status["undigestible"] == ["s1"]
        assert status["undigestible_sessions"][0]["attempts"] == 2
        assert status["failing_chunks"][0]["chunk_id"] == "s1:chunk:1"
        assert stores.runstate.sessions_to_extract(10) == []
        assert reset_failures(stores, None) == {"sessions_reset": 1, "chunks_reset": 1}
        assert [r.session_id for r in stores.runstate.sessions_to_extract(10)] == ["s1"]
    finally:
        stores.close()


async def test_heuristic_oversized_turn_references_and_lazy_queue(settings: Settings, tmp_path: Path) -> None:
    mine = load_settings(data_dir=settings.data_dir, chunk_limit_tokens=40, prompt_envelope_tokens=0)
    big = (
        "First paragraph names the SessionChunker class in detail here.\n\n"
        "Second paragraph points at src/extract/entities.py and issue #42 for context.\n\n"
        "Third paragraph cites memory:legacy-0117. and session:old-2) plus memory:s2-t0 too."
    )
    stores = await open_stores(mine)
    try:
        await load(mine, stores, tmp_path, [session("s2", ["Short turn about GraphStore.", big])])
        # without the drain phase, to see the queue exactly as extraction wrote it
        result = await run_cycle(mine, stores=stores, phases=tuple(p for p in PHASES if p[0] != "drain"))
        extract = result.phases["extract"]
        assert extract["sessions_digested"] == 1 and extract["chunks_failed"] == 0
        parts = [r.chunk_id for r in _chunk_rows(stores)]
        assert any(":part:" in p for p in parts), parts
        for node_id in ("CLASS:SessionChunker", "FILE:src/extract/entities.py", "ISSUE:#42", "CLASS:GraphStore"):
            assert stores.graph.get_node(node_id) is not None, node_id
        assert stores.graph.get_edge("CLASS:SessionChunker", "memory:s2-t1", "MENTIONED_IN") is not None
        assert stores.graph.get_edge("ISSUE:#42", "memory:s2-t1", "MENTIONED_IN") is not None
        # a reference to an existing memory is linked; missing rows go to the lazy queue, every field kept
        assert stores.graph.get_edge("memory:s2-t0", "memory:s2-t1", "REFERENCED_BY") is not None
        lines = [json.loads(line) for line in mine.queue_path.read_text().splitlines()]
        assert {(line["source"], line["target"]) for line in lines} == {
            ("memory:legacy-0117", "memory:s2-t1"), ("session:old-2", "memory:s2-t1")
        }
        assert extract["lazy_edges_queued"] == 2
        for line in lines:
            assert line["relationship"] == "REFERENCED_BY" and line["weight"] == 1.0 and line["timestamp"]
            assert line["properties"]["sessionId"] == "s2"
    finally:
        stores.close()


def _chunk_rows(stores: Stores) -> list[Any]:
    rows = stores.db.query("SELECT content_hash, fingerprint FROM chunk_results")
    found = ChunkResultStore(stores.db)
    return [r for row in rows for r in found.get_many([row[0]], row[1]).values()]


@pytest.mark.parametrize("before", [11, 12], ids=["joins-the-last-chunk", "starts-a-chunk"])
async def test_appended_turn_reextracts_only_the_chunk_it_is_in(
    opened: Any, llm_server: LLMServer, tmp_path: Path, before: int
) -> None:
    settings, stores = opened
    # chunks of two turns while turn numbers have one digit, then one (`[11] (user) turn 10 …`)
    turns = [f"turn {i:02d} mentions the Part{chr(65 + i)}Item component and a bit of filler" for i in range(before)]
    await load(settings, stores, tmp_path, [session("s3", turns)])
    first = await run_cycle(settings, stores=stores)
    total = first.phases["extract"]["chunks_total"]
    assert total >= 6 and llm_server.chat_count == total
    llm_server.reset()
    await load(settings, stores, tmp_path, [session("s3", [*turns, "turn 12 adds the PartZItem component"])])
    second = await run_cycle(settings, stores=stores)
    assert second.phases["extract"]["sessions_digested"] == 1
    # one request: the new turn's chunk — with turn 10 when it joins that turn's chunk; every
    # earlier chunk is the same text and reused (the reduce and the commit ask the model nothing)
    (asked,) = [r.prompt for r in llm_server.chat_requests]
    assert "PartZItem" in asked and ("PartKItem" in asked) == (before == 11)
    assert second.phases["extract"]["chunks_reused"] == second.phases["extract"]["chunks_total"] - 1
    assert stores.graph.get_node("CLASS:PartZItem") is not None


def test_cli_status_shows_failing_chunks_and_retry_resets(tmp_path: Path, llm_server: LLMServer) -> None:
    env = {
        "REM_DATA_DIR": str(tmp_path / "d"), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": llm_server.url,
        "REM_LLM_MAX_RETRIES": "0", "REM_LLM_API_KEY": "sk-never-logged",
    }
    llm_server.script(malformed(), malformed())
    assert run_cli("import", str(write_sessions(tmp_path / "in.jsonl", [session("s9", TURNS[:1])])), env=env).returncode == 0
    once = run_cli("--once", "--json", env=env)
    assert once.returncode == 0, once.stderr[-2000:]
    assert "sk-never-logged" not in once.stderr + once.stdout
    assert json.loads(once.stdout)["phases"]["extract"]["chunks_failed"] == 1
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert [c["chunk_id"] for c in status["failing_chunks"]] == ["s9:chunk:0"]
    assert "s9:chunk:0" in run_cli("status", env=env).stdout
    retry = run_cli("retry", "--session", "s9", "--json", env=env)
    assert json.loads(retry.stdout) == {"chunks_reset": 1, "sessions_reset": 1, "unknown": []}
    again = json.loads(run_cli("--once", "--json", env=env).stdout)
    assert again["phases"]["extract"]["sessions_digested"] == 1


async def test_llm_unreachable_fails_provider_ready(settings: Settings) -> None:
    from tests.conftest import free_port

    mine = load_settings(data_dir=settings.data_dir, extractor="openai", llm_base_url=f"http://127.0.0.1:{free_port()}/v1")
    result = await run_cycle(mine)
    assert (result.outcome, result.failure_phase, result.reason_code) == ("failed", "provider-ready", "llm-unavailable")


async def test_heuristic_cycle_on_the_sample_data_is_idempotent(settings: Settings, tmp_path: Path) -> None:
    from tests.conftest import SAMPLE

    stores = await open_stores(settings)
    try:
        await import_sessions(SAMPLE, chroma=stores.chroma, memory_collection=settings.memory_collection,
                              summary_collection=settings.session_collection)
        first = await run_cycle(settings, stores=stores)
        extract = first.phases["extract"]
        assert extract["sessions_digested"] == 26 and extract["chunks_failed"] == 0
        assert extract["nodes_written"] > 100 and extract["ungrounded_evidence"] == 0
        names = {n.name for n in stores.graph.nodes_by_label("CONCEPT")}
        assert not names & {"The", "This", "We", "It"}
        dump = graph_dump(settings.graph_path)
        stores.db.conn.execute("UPDATE session_digests SET state = 'undigested'")
        again = await run_cycle(settings, stores=stores)
        assert again.phases["extract"]["chunks_reused"] == extract["chunks_ok"]
        assert graph_dump(settings.graph_path) == dump
    finally:
        stores.close()


async def test_a_node_linked_to_another_of_the_same_session_keeps_both_its_points(
    opened: Any, llm_server: LLMServer, tmp_path: Path
) -> None:
    """Chunk A names the class, chunk B names it in prose: reduce keeps two nodes, the resolver links
    the second to the first within the session's own batch. The linked-to node keeps its own name
    and its own point; the linked one's point joins it (none is overwritten)."""
    def naming(name: str, quote: str) -> Any:
        return ok({"summary": "", "nodes": [{"id": "n", "type": "CLASS", "name": name, "evidence": [{"turn": 1, "quote": quote}]}], "edges": []})

    settings, stores = opened
    llm_server.script(naming("LazyEdgeQueue", "LazyEdgeQueue feeds"), match="CHUNK-A")
    llm_server.script(naming("lazy edge queue", "lazy edge queue stall"), match="CHUNK-B")
    turns = ["CHUNK-A: the LazyEdgeQueue feeds the GraphStore every cycle.", "CHUNK-A: filler words about nothing in particular here.",
             "CHUNK-B: we saw the lazy edge queue stall under load.", "CHUNK-B: more filler words for the second chunk, fine."]
    await load(settings, stores, tmp_path, [session("s1", turns)])
    result = await run_cycle(settings, stores=stores)
    assert result.outcome == "completed", result.message
    node = stores.graph.get_node("CLASS:LazyEdgeQueue")
    assert node is not None and node.name == "LazyEdgeQueue"
    assert stores.graph.get_node("CLASS:lazy edge queue") is None
    points = ProvenanceStore(stores.db).node_points("CLASS:LazyEdgeQueue")
    assert {(p.chunk_id, p.evidence) for p in points} == {
        ("s1:chunk:0", "LazyEdgeQueue feeds"), ("s1:chunk:1", "lazy edge queue stall"),
    }
