"""Model fault matrix: every way the chat-completions server can fail, through real REM cycles.

Two sessions per test — ``good`` and ``bad`` (its turns carry the marker FAULTY) — against the
loopback server of tests/llm_server.py, which answers ``bad``'s chunk with the fault and ``good``'s
normally. For each fault: the failure kind is recorded in ``chunk_results``, the graph is untouched
for ``bad`` (fail-closed) while ``good`` commits, the chunk is retried by the next cycle once its
backoff has passed, the session becomes ``undigestible`` at ``REM_MAX_CHUNK_ATTEMPTS``, no further
call is made for it, and ``retry`` plus a healthy server digests it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from config import Settings, load_settings
from pipelines.importer import import_sessions
from store.provenance import ProvenanceStore
from tests.conftest import write_sessions
from tests.llm_server import (
    Behaviour,
    LLMServer,
    Reply,
    Status,
    context_overflow,
    empty,
    hang_up,
    held,
    malformed,
    ok,
    server_error,
    truncated,
)
from worker.cycle import Stores, open_stores, run_cycle
from worker.report import reset_failures

MARKER = "FAULTY"
MAX_ATTEMPTS = 2
GOOD = ["The GraphStore keeps every LazyEdgeQueue line.", "Then the DrainWorker links them."]
BAD = [f"{MARKER}: the BrokenWidget talks to the FlakyService.", f"{MARKER}: and the RetryPolicy gives up."]


def session(sid: str, turns: list[str]) -> dict[str, Any]:
    return {
        "sessionId": sid, "title": sid, "createdAt": "2026-11-01T10:00:00Z", "summary": f"about {sid}",
        "turns": [{"id": f"{sid}-t{i}", "role": "user", "text": text} for i, text in enumerate(turns)],
    }


# A healthy answer from the loopback server must never time out, however loaded the machine
# (0.5 s did: provider-ready's model list and good sessions' answers, under pauses of 0.5 s).
# A test of the timeout holds its answer (``held()``) and sets TIMEOUT_SECONDS.
TIMEOUT_SECONDS = 1.5


def fault_settings(data_dir: Path, server: LLMServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir, "extractor": "openai", "llm_base_url": server.url, "llm_max_retries": 0,
        "llm_timeout_seconds": 30, "max_chunk_attempts": MAX_ATTEMPTS, "llm_concurrency": 2,
    }
    values.update(overrides)
    return load_settings(**values)


async def load(settings: Settings, stores: Stores, tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "in.jsonl", [session("good", GOOD), session("bad", BAD)])
    await import_sessions(path, chroma=stores.chroma, memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)


def semantic_writes(stores: Stores, sid: str) -> list[tuple[str, str, str]]:
    """Every graph write extraction made for session ``sid``: provenance edges into its session or
    memories (ingest's ORIGINATES_IN excluded) and nodes whose provenance names it."""
    edges = stores.db.query(
        "SELECT source, target, relationship FROM edges WHERE relationship != 'ORIGINATES_IN' "
        "AND (target = ? OR target LIKE ?)", (f"session:{sid}", f"memory:{sid}-%"),
    )
    nodes = stores.db.query(
        "SELECT DISTINCT n.id, n.label, '' FROM nodes AS n JOIN node_points AS p ON p.node_id = n.id "
        "WHERE n.label NOT IN ('MEMORY', 'SESSION') AND p.anchor = ?",
        (f"session:{sid}",),
    )
    return [tuple(r) for r in [*edges, *nodes]]


def expire_backoff(stores: Stores) -> None:
    """Time passes: every failed chunk's backoff is over (the run state's clock is wall time)."""
    stores.db.conn.execute("UPDATE chunk_results SET next_attempt_at = '2000-01-01T00:00:00.000Z' WHERE status = 'failed'")


def bad_calls(server: LLMServer) -> int:
    return sum(1 for r in server.chat_requests if MARKER in r.prompt)


# A good answer whose usage figures are junk (a string, a float too big): the answer counts.
BAD_USAGE = Status(200, json.dumps({
    "choices": [{"message": {"role": "assistant", "content": '{"summary": "", "nodes": [], "edges": []}'},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": "many", "completion_tokens": 1e400},
}).replace("Infinity", "1e400"))

FAULTS: list[tuple[str, Behaviour, str, int]] = [
    # (name, behaviour, recorded kind, model calls per attempt)
    # (429, 502, 503 and a refused connection are outages, which charge no attempt:
    # tests/test_audit_llm_outage.py)
    ("timeout", held(), "timeout", 1),  # never answered within TIMEOUT_SECONDS
    ("http-500", server_error(500), "provider-error", 1),
    ("hang-up", hang_up(), "provider-error", 1),
    ("not-chat-completions", Status(200, "<html>502 Bad Gateway</html>"), "provider-error", 1),
    ("malformed-json", malformed(), "schema-failure", 2),
    ("json-without-nodes", Reply('{"summary": "I found nothing worth a list"}'), "schema-failure", 2),
    ("json-array", Reply("[1, 2, 3]"), "schema-failure", 2),
    ("nodes-not-a-list", Reply('{"nodes": {"n1": "x"}, "edges": []}'), "schema-failure", 2),
    ("truncated-output", truncated(), "truncated-output", 1),
    ("empty-output", empty(read=False), "context-overflow", 1),
    ("empty-output-read-whole", empty(), "schema-failure", 1),
    ("context-overflow", context_overflow(), "context-overflow", 1),
]


@pytest.mark.parametrize(("name", "behaviour", "kind", "calls"), FAULTS, ids=[f[0] for f in FAULTS])
async def test_fault_is_recorded_fail_closed_retried_then_undigestible(
    settings: Settings, tmp_path: Path, name: str, behaviour: Behaviour, kind: str, calls: int
) -> None:
    with LLMServer() as server:
        server.script(*[behaviour] * 20, match=MARKER)
        mine = fault_settings(settings.data_dir, server, **({"llm_timeout_seconds": TIMEOUT_SECONDS} if kind == "timeout" else {}))
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            first = await run_cycle(mine, stores=stores)
            assert first.outcome == "completed", first.message
            extract = first.phases["extract"]
            assert (extract["sessions_digested"], extract["sessions_failed"]) == (1, 1), extract
            assert extract["failures_by_kind"] == {kind: 1}
            (failing,) = stores.runstate.failing_chunks()
            assert (failing["session_id"], failing["error_kind"], failing["attempts"]) == ("bad", kind, 1)
            assert failing["error"]  # explained, not just classified
            assert semantic_writes(stores, "bad") == []  # fail-closed
            assert semantic_writes(stores, "good") != []
            assert bad_calls(server) == calls

            # still backing off: the next cycle does not claim it, makes no call and charges no attempt
            deferred = await run_cycle(mine, stores=stores)
            assert deferred.phases["extract"]["sessions_queued"] == 0 and bad_calls(server) == calls

            expire_backoff(stores)
            second = await run_cycle(mine, stores=stores)
            assert second.phases["extract"]["sessions_undigestible"] == 1
            assert bad_calls(server) == 2 * calls  # retried exactly once more
            digest = stores.runstate.get_digests(["bad"])["bad"]
            assert (digest.state, digest.attempts) == ("undigestible", MAX_ATTEMPTS)
            assert kind in (digest.defer_reason or "")
            assert stores.runstate.failing_chunks()[0]["attempts"] == MAX_ATTEMPTS
            assert semantic_writes(stores, "bad") == []

            expire_backoff(stores)
            third = await run_cycle(mine, stores=stores)
            assert third.phases["extract"]["sessions_queued"] == 0 and bad_calls(server) == 2 * calls

            # the operator's retry with a healthy server digests the session
            server.reset()
            assert reset_failures(stores, ["bad"]) == {"sessions_reset": 1, "chunks_reset": 1}
            healed = await run_cycle(mine, stores=stores)
            assert healed.phases["extract"]["sessions_digested"] == 1
            assert semantic_writes(stores, "bad") != []
            assert stores.db.integrity_check() == "ok"
        finally:
            stores.close()


async def test_failed_chunk_waits_the_configured_backoff(settings: Settings, tmp_path: Path) -> None:
    """``REM_CHUNK_RETRY_BASE_SECONDS`` / ``_MAX_SECONDS`` set the failed chunk's ``next_attempt_at``:
    the base after the first failure, double that capped at the max after the second."""
    with LLMServer() as server:
        server.script(*[server_error(500)] * 4, match=MARKER)
        mine = fault_settings(settings.data_dir, server, chunk_retry_base_seconds=7, chunk_retry_max_seconds=10)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            for attempts, wait in ((1, 7), (2, 10)):
                expire_backoff(stores)
                before = datetime.now(UTC) - timedelta(milliseconds=1)  # next_attempt_at keeps milliseconds
                await run_cycle(mine, stores=stores)
                after = datetime.now(UTC)
                (failing,) = stores.runstate.failing_chunks()
                assert (failing["session_id"], failing["attempts"]) == ("bad", attempts)
                due = datetime.fromisoformat(failing["next_attempt_at"])
                assert before + timedelta(seconds=wait) <= due <= after + timedelta(seconds=wait), (attempts, due)
        finally:
            stores.close()


async def test_junk_usage_figures_do_not_fail_the_chunk(settings: Settings, tmp_path: Path) -> None:
    with LLMServer() as server:
        server.script(BAD_USAGE, match=MARKER)
        mine = fault_settings(settings.data_dir, server)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            result = await run_cycle(mine, stores=stores)
            assert result.phases["extract"]["sessions_digested"] == 2, result.phases["extract"]
            (row,) = stores.db.query("SELECT tokens_in, tokens_out FROM chunk_results WHERE session_id = 'bad'")
            assert tuple(row) == (0, 0)
        finally:
            stores.close()


async def test_connection_refused_fails_provider_ready_and_charges_nothing(settings: Settings, tmp_path: Path) -> None:
    server = LLMServer().start()
    mine = fault_settings(settings.data_dir, server)
    stores = await open_stores(mine)
    try:
        await load(mine, stores, tmp_path)
        server.stop()  # nothing listens on the port any more: connection refused
        down = await run_cycle(mine, stores=stores)
        assert (down.outcome, down.failure_phase, down.reason_code) == ("failed", "provider-ready", "llm-unavailable")
        assert stores.graph.counts().get("nodes", 0) == 0 or semantic_writes(stores, "bad") == []
        assert stores.db.query("SELECT COUNT(*) FROM chunk_results")[0][0] == 0
        with LLMServer(port=server.port) as back:
            up = await run_cycle(mine, stores=stores)
            assert up.outcome == "completed" and up.phases["extract"]["sessions_digested"] == 2
            assert back.chat_count == 2
    finally:
        stores.close()


async def test_server_going_away_mid_cycle(settings: Settings, tmp_path: Path) -> None:
    """The server process dies while answering the first session (sessions run one at a time):
    that answer is cut off, the next session's connection is refused — both ``provider-error``,
    nothing of theirs committed, no chunk lost; the refused session is deferred, not charged an
    attempt (an outage is no fault of it), and no try of its chunk is recorded (its request never
    left: leftalone23) — and the next cycle after the server is back digests them."""
    server = LLMServer().start()
    mine = fault_settings(settings.data_dir, server, llm_concurrency=1)
    server.script(held())  # the first answer is in flight when the server dies (the kill cuts it)
    stores = await open_stores(mine)
    try:
        await load(mine, stores, tmp_path)

        async def kill_when_called() -> None:
            while server.chat_count == 0:
                await anyio.sleep(0.01)
            await anyio.to_thread.run_sync(server.kill)

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_when_called)
            result = await run_cycle(mine, stores=stores)
        assert result.outcome == "completed", result.message
        extract = result.phases["extract"]
        assert (extract["sessions_digested"], extract["sessions_failed"], extract["sessions_deferred"]) == (0, 1, 1), extract
        assert extract["failures_by_kind"] == {"provider-error": 2}
        errors = {c["session_id"]: c["error"] for c in stores.runstate.failing_chunks()}
        assert list(errors) == ["bad"] and "disconnected" in errors["bad"], errors  # before: good's ConnectError too
        assert semantic_writes(stores, "good") == [] and semantic_writes(stores, "bad") == []
        digests = stores.runstate.get_digests()
        assert sorted((d.state, d.attempts) for d in digests.values()) == [("undigested", 0), ("undigested", 1)]

        with LLMServer(port=server.port):
            expire_backoff(stores)
            again = await run_cycle(mine, stores=stores)
            assert again.phases["extract"]["sessions_digested"] == 2
            assert semantic_writes(stores, "good") != [] and semantic_writes(stores, "bad") != []
    finally:
        stores.close()


def nonsense(body: dict[str, Any]) -> dict[str, Any]:
    """Schema-valid nonsense: unknown types and relationships, edges to undeclared nodes and to
    themselves, turn numbers out of range or of the wrong type, quotes that are not in the text,
    ids that are no ids, wrong-typed fields."""
    return {
        "summary": "nonsense",
        "nodes": [
            {"id": "n1", "type": "SPACESHIP", "name": "BrokenWidget", "evidence": [{"turn": 1, "quote": "BrokenWidget"}]},
            {"id": "n2", "type": "CLASS", "name": "FlakyService", "evidence": [{"turn": 99, "quote": "FlakyService"}]},
            {"id": "n3", "type": "CLASS", "name": "Ghost", "evidence": [{"turn": 0, "quote": "never said"},
                                                                         {"turn": -4, "quote": "zqxj"}, {"turn": "two", "quote": "qqzz"}]},
            {"id": "n4", "type": "CLASS", "name": "", "evidence": []},
            {"id": "n5", "type": "CLASS", "name": "memory:bad-t0"},
            {"id": "n6", "type": "CLASS", "name": "x" * 5000, "aliases": 7, "tags": "not-a-list", "confidence": "high"},
            {"id": "n7", "type": ["CLASS"], "name": {"nested": True}},
            "not an object",
        ],
        "edges": [
            {"source": "n1", "target": "n404", "relationship": "DEPENDS_ON"},
            {"source": "n1", "target": "n1", "relationship": "DEPENDS_ON"},
            {"source": "n1", "target": "n2", "relationship": "EATS", "evidence": [{"turn": 7, "quote": "FlakyService"}]},
            {"source": 1, "target": None, "relationship": 3},
        ],
    }


async def test_schema_valid_nonsense_is_sanitised_counted_and_explained(settings: Settings, tmp_path: Path) -> None:
    with LLMServer() as server:
        server.script(ok(nonsense), match=MARKER)
        mine = fault_settings(settings.data_dir, server)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            result = await run_cycle(mine, stores=stores)
            extract = result.phases["extract"]
            assert extract["sessions_digested"] == 2 and extract["chunks_failed"] == 0, extract
            labels = {r[0] for r in stores.db.query("SELECT DISTINCT label FROM nodes")}
            assert labels <= {"MEMORY", "SESSION", *mine.semantic_types}
            assert stores.graph.get_node("CONCEPT:brokenwidget") is not None  # unknown type → CONCEPT
            relationships = {r[0] for r in stores.db.query("SELECT DISTINCT relationship FROM edges")}
            assert "EATS" not in relationships and "RELATES_TO" in relationships  # unknown → RELATES_TO
            assert stores.graph.get_edge("CONCEPT:brokenwidget", "CLASS:FlakyService", "RELATES_TO") is not None
            # nothing points at an undeclared node, nothing at itself, no semantic node is a row id
            assert stores.db.query("SELECT COUNT(*) FROM edges WHERE source = target")[0][0] == 0
            assert stores.graph.get_node("memory:bad-t0").label == "MEMORY"
            ghost = stores.graph.get_node("CLASS:Ghost")
            assert ghost is not None and ProvenanceStore(stores.db).node_points(ghost.id)[0].memory == ""  # no grounded turn
            # turn 99 is out of range, but the quote is in turn 1: provenance comes from the text
            flaky = stores.graph.get_node("CLASS:FlakyService")
            assert {p.memory for p in ProvenanceStore(stores.db).node_points(flaky.id) if p.memory} == {"memory:bad-t0"}
            assert extract["invalid_turn_refs"] == 4  # 99, 0, -4 (nodes), 7 (edge); "two" is no number at all
            assert extract["ungrounded_evidence"] == 3  # Ghost's three quotes are in no turn
            assert extract["items_rejected"] == 6
            assert extract["rejected_reasons"] == {
                "node-name-invalid": 2,  # "" and {"nested": true}
                "node-not-an-object": 1,
                "edge-endpoint-unknown": 2,  # n404 and the junk edge
                "edge-self-loop": 1,
            }
        finally:
            stores.close()


async def test_a_slow_answer_does_not_change_the_graph(settings: Settings, tmp_path: Path) -> None:
    """Sessions commit oldest first even when a younger session's extraction finishes first, so
    which spelling of a shared entity keeps the id never depends on the model's latency."""

    def naming(spelling: str) -> Any:
        return ok({"summary": "", "nodes": [{"id": "n", "type": "CLASS", "name": spelling,
                                             "evidence": [{"turn": 1, "quote": spelling}]}], "edges": []})

    with LLMServer() as server:
        server.script(Reply(naming("WidgetPool").content, delay=0.6), match="OLDER")
        server.script(naming("widget pool"), match="YOUNGER")
        mine = fault_settings(settings.data_dir, server, llm_timeout_seconds=5.0)
        stores = await open_stores(mine)
        try:
            older = session("a-older", ["OLDER: the WidgetPool leaks."])
            younger = session("b-younger", ["YOUNGER: the widget pool leaks."])
            path = write_sessions(tmp_path / "in.jsonl", [older, younger])
            await import_sessions(path, chroma=stores.chroma, memory_collection=mine.memory_collection,
                                  summary_collection=mine.session_collection)
            result = await run_cycle(mine, stores=stores)
            assert result.phases["extract"]["sessions_digested"] == 2
            at = {("OLDER" in r.prompt): r.at for r in server.chat_requests}
            assert at[False] < at[True] + 0.6  # the younger answer came back before the older one …
            node = stores.graph.get_node("CLASS:WidgetPool")  # … yet the older session's spelling won
            assert node is not None and stores.graph.get_node("CLASS:widget pool") is None
            assert sorted(node.properties["aliases"]) == ["WidgetPool", "widget pool"]
        finally:
            stores.close()
