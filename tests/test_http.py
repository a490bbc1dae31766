"""The metrics collector against a real database and queue file, and the endpoint in-process."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from config import Settings
from store.graph import Node
from store.lazy_queue import LazyEdgeQueue
from tests.conftest import SAMPLE
from worker.cycle import PHASES, Stores, heartbeat_interval, owner_id, run_cycle
from worker.http import serve_http
from store.runstate import RunStateStore, histogram_buckets
from worker.metrics import build_registry, summarize_queue_lines
from worker.report import collect_status

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_histogram_buckets_are_cumulative_and_end_at_inf() -> None:
    buckets, total = histogram_buckets([0.5, 2, 2, 50], (1, 5, math.inf))
    assert buckets == [("1.0", 1.0), ("5.0", 3.0), ("+Inf", 4.0)]
    assert total == 54.5
    assert histogram_buckets([], (1, math.inf)) == ([("1.0", 0.0), ("+Inf", 0.0)], 0.0)


def test_queue_summary_counts_lines_and_finds_the_oldest_anywhere() -> None:
    lines = [
        b'{"source":"a","target":"b","relationship":"R","timestamp":"2026-11-29T10:00:00.000Z"}\n',
        b"\n",
        b"not json\n",
        b'{"source":"a","target":"b","relationship":"R"}\n',
        # a retried line, appended back at the end with its original (older) timestamp
        b'{"source":"c","target":"d","relationship":"R","timestamp":"2026-11-28T09:00:00+00:00"}\n',
    ]
    summary = summarize_queue_lines(lines)
    assert summary.depth == 4
    assert summary.oldest_timestamp == "2026-11-28T09:00:00+00:00"
    assert summarize_queue_lines([]).depth == 0


async def test_collector_reads_runs_digests_chunks_graph_backfills_and_queue(settings: Settings, stores: Stores) -> None:
    from pipelines.importer import import_sessions

    await import_sessions(SAMPLE, chroma=stores.chroma, memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    # Without the extract phase: the test writes the extract record and chunk results it checks.
    phases = tuple(phase for phase in PHASES if phase[0] != "extract")
    first = await run_cycle(settings, stores=stores, phases=phases)
    await run_cycle(settings, stores=stores, phases=phases)
    assert first.outcome == "completed"
    stores.graph.upsert_nodes([
        Node("memory:bf-1", "MEMORY", "bf-1", {"backfilled": True}),
        Node("memory:bf-2", "MEMORY", "bf-2", {"backfilled": True}),
        Node("session:bf-s", "SESSION", "bf-s", {"backfilled": True, "minimal": True}),
    ])
    with stores.db.transaction() as conn:
        conn.executemany(
            "INSERT INTO chunk_results(session_id, chunk_id, content_hash, fingerprint, status, error_kind, attempts, "
            "tokens_in, tokens_out, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [
                ("s1", "s1:chunk:0", "h0", "fp", "ok", None, 1, 1000, 200, "2026-11-29T10:00:00Z"),
                ("s1", "s1:chunk:1", "h1", "fp", "ok", None, 1, 500, 100, "2026-11-29T10:00:00Z"),
                ("s2", "s2:chunk:0", "h2", "fp", "failed", "timeout", 2, 300, 0, "2026-11-29T10:00:00Z"),
            ],
        )
    # What an extract phase records about reused chunk results, written as the run's finish writes
    # it (the finish keeps the run statistics, migration 17), at the same moment.
    (run,) = [r for r in stores.runstate.recent_runs(5) if r["run_id"] == first.run_id]
    RunStateStore(stores.db, clock=lambda: run["finished_at"]).finish_run(
        first.run_id, outcome="completed", phases={**run["phases"], "extract": {"duration_ms": 1500, "chunks_reused": 7}})
    hour_ago = (NOW - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    LazyEdgeQueue(settings.queue_path).append([{"source": "CONCEPT:x", "target": "memory:nope", "relationship": "MENTIONED_IN", "timestamp": hour_ago}] * 3)

    samples = _samples(generate_latest(build_registry(settings)).decode())
    assert samples[("rem_cycle_cycles_total", (("outcome", "completed"),))] == 2
    assert samples[("rem_cycle_cycle_running", ())] == 0
    assert samples[("rem_cycle_cycle_duration_seconds_count", ())] == 2
    assert samples[("rem_cycle_phase_duration_seconds_count", (("phase", "extract"),))] == 1
    assert samples[("rem_cycle_phase_duration_seconds_sum", (("phase", "extract"),))] == 1.5
    assert samples[("rem_cycle_sessions", (("state", "undigested"),))] == 26
    assert samples[("rem_cycle_chunk_results", (("status", "ok"),))] == 2
    assert samples[("rem_cycle_chunk_results", (("status", "failed"),))] == 1
    assert samples[("rem_cycle_chunks_reused_total", ())] == 7
    assert samples[("rem_cycle_model_tokens", (("direction", "in"),))] == 1800
    assert samples[("rem_cycle_model_tokens", (("direction", "out"),))] == 300
    assert samples[("rem_cycle_graph_nodes", (("label", "SESSION"),))] == 27
    assert samples[("rem_cycle_graph_edges", (("relationship", "ORIGINATES_IN"),))] > 0
    assert samples[("rem_cycle_backfilled_nodes", (("label", "MEMORY"), ("reason", "backfilled")))] == 2
    assert samples[("rem_cycle_backfilled_nodes", (("label", "SESSION"), ("reason", "backfilled")))] == 0
    assert samples[("rem_cycle_backfilled_nodes", (("label", "SESSION"), ("reason", "backfilled-minimal")))] == 1
    assert samples[("rem_cycle_lazy_queue_depth", ())] == 3
    now = datetime.now(UTC)
    assert abs(samples[("rem_cycle_lazy_queue_oldest_age_seconds", ())] - (now - (NOW - timedelta(hours=1))).total_seconds()) < 60
    oldest_created = datetime(2026, 11, 9, 8, 30, tzinfo=UTC)  # examples/sessions.jsonl's first session
    assert abs(samples[("rem_cycle_oldest_undigested_session_age_seconds", ())] - (now - oldest_created).total_seconds()) < 60
    assert samples[("rem_cycle_last_cycle_finished_timestamp_seconds", (("outcome", "completed"),))] > NOW.timestamp() - 86400 * 365
    assert samples[("rem_cycle_metrics_ok", ())] == 1
    assert all(name.startswith(("rem_cycle_", "process_")) for name, _ in samples)


def test_collector_reports_not_ok_without_a_database(settings: Settings) -> None:
    samples = _samples(generate_latest(build_registry(settings)).decode())
    assert samples[("rem_cycle_metrics_ok", ())] == 0
    assert not settings.graph_path.exists()  # a scrape never creates the database


@pytest.mark.both_backends
async def test_endpoint_serves_health_readiness_and_metrics(settings: Settings, stores: Stores) -> None:
    await run_cycle(settings, stores=stores)
    async with serve_http(settings) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=20) as client:
        assert endpoint.url.startswith("http://127.0.0.1:")
        health = await client.get("/healthz")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        ready = await client.get("/readyz")
        assert (ready.status_code, ready.json()) == (200, {"ready": True, "checks": {"graph": "ok", "chroma": "ok"}})
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        assert _samples(metrics.text)[("rem_cycle_cycles_total", (("outcome", "completed"),))] == 1
        assert (await client.get("/elsewhere")).status_code == 404


async def test_readiness_fails_without_the_graph_database(settings: Settings) -> None:
    async with serve_http(settings) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=20) as client:
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert json.loads(ready.text) == {"ready": False, "checks": {"graph": "unavailable", "chroma": "ok"}}
        health = await client.get("/healthz")  # the daemon creates it before serving: gone means broken
        assert (health.status_code, health.json()) == (503, {"status": "unhealthy", "reason": "database-unreadable"})


@pytest.mark.both_backends
async def test_a_new_run_shows_in_the_next_scrape_of_the_same_registry(settings: Settings, stores: Stores) -> None:
    registry = build_registry(settings)
    await run_cycle(settings, stores=stores)
    first = _samples(generate_latest(registry).decode())
    again = _samples(generate_latest(registry).decode())
    own = [k for k in first if k[0].startswith("rem_cycle_") and "age_seconds" not in k[0]]
    assert [again[k] for k in own] == [first[k] for k in own]  # unchanged data, same answer
    await run_cycle(settings, stores=stores)
    second = _samples(generate_latest(registry).decode())
    for name in ("rem_cycle_cycle_duration_seconds_count", "rem_cycle_cycles_total"):
        key = next(k for k in first if k[0] == name and k[1] in ((), (("outcome", "completed"),)))
        assert (first[key], second[key]) == (1, 2)
    phase = ("rem_cycle_phase_duration_seconds_count", (("phase", "ingest"),))
    assert (first[phase], second[phase]) == (1, 2)


def test_heartbeat_interval_fits_the_lease() -> None:
    assert heartbeat_interval(300) == 5.0
    assert heartbeat_interval(15) == 5.0
    assert heartbeat_interval(3) == 1.0  # three beats per lease, so one late beat is not a stall


@pytest.mark.both_backends
async def test_a_silent_run_is_stalled_in_healthz_metrics_and_status(settings: Settings, stores: Stores) -> None:
    # Run rows as a wedged cycle of this process, and a killed process elsewhere, leave them.
    now = datetime.now(UTC)

    def stamp(moment: datetime) -> str:
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def running(run_id: str, owner: str, silent_for: float) -> None:
        stores.runstate.start_run(run_id, reason="test", mode="daemon", owner=owner)
        with stores.db.transaction() as conn:
            conn.execute(
                "UPDATE rem_runs SET heartbeat_at = ? WHERE run_id = ?", (stamp(now - timedelta(seconds=silent_for)), run_id)
            )

    running("run-elsewhere", "other-host:1", silent_for=900)  # older than the 300 s lease
    async with serve_http(settings) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=20) as client:
        # Another process's silent run is not this process's liveness problem...
        assert (await client.get("/healthz")).status_code == 200
        # ...but metrics and status report it.
        samples = _samples((await client.get("/metrics")).text)
        assert samples[("rem_cycle_cycle_stalled", ())] == 1
        assert samples[("rem_cycle_heartbeat_age_seconds", ())] >= 900
        assert collect_status(settings, stores)["stalled_runs"] == ["run-elsewhere"]
        stores.runstate.finish_run("run-elsewhere", outcome="abandoned", phases={})

        running("run-here-fresh", owner_id(), silent_for=10)
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert _samples((await client.get("/metrics")).text)[("rem_cycle_cycle_stalled", ())] == 0
        running("run-here-silent", owner_id(), silent_for=400)
        health = await client.get("/healthz")
        assert health.status_code == 503
        body = health.json()
        assert body["status"] == "stalled"
        assert [run["run_id"] for run in body["runs"]] == ["run-here-silent"]
        assert 400 <= body["runs"][0]["silent_seconds"] < 460
        status = collect_status(settings, stores)
        assert status["stalled_runs"] == ["run-here-silent"]
        assert next(r for r in status["runs"] if r["run_id"] == "run-here-silent")["silent_seconds"] >= 400
        # A beat clears it.
        stores.runstate.heartbeat("run-here-silent")
        assert (await client.get("/healthz")).status_code == 200
        assert collect_status(settings, stores)["stalled_runs"] == []
