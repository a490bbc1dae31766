"""The daemon as a real process: scheduling, the HTTP endpoint, surviving a failed cycle."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import SAMPLE, free_port, run_cli, start_chroma_server
from tests.daemon_support import read_runs, start_worker, stop, wait_for, wait_for_http, worker_env
from tests.llm_server import LLMServer, ok, slow
from worker.daemon import next_delay


@pytest.mark.parametrize(
    ("started", "finished", "expected"),
    [
        (0.0, 10.0, 50.0),  # a quick cycle: the next one starts one interval after this one started
        (0.0, 0.0, 60.0),
        (0.0, 59.9, pytest.approx(0.1)),
        (0.0, 60.0, 60.0),  # exactly overran: cool down a full interval from completion
        (100.0, 250.0, 60.0),  # overran by far: still a full interval, never a burst of catch-up cycles
    ],
)
def test_next_delay(started: float, finished: float, expected: float) -> None:
    assert next_delay(interval=60.0, started=started, finished=finished) == expected


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_daemon_runs_cycles_on_its_interval_and_serves_endpoints(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("import", str(SAMPLE), env={"REM_DATA_DIR": str(data)}).returncode == 0
    port = free_port()
    env = worker_env(data, interval_seconds="1", http_port=str(port))
    proc = start_worker(env=env, log_path=tmp_path / "daemon.log")
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_for_http(f"{base}/healthz").json() == {"status": "ok"}
        wait_for(
            lambda: sum(r["outcome"] == "completed" for r in read_runs(data / "graph.sqlite3")) >= 2,
            timeout=60, interval=0.1, what="two completed cycles",
        )
        ready = httpx.get(f"{base}/readyz", timeout=10)
        assert ready.status_code == 200
        assert ready.json() == {"ready": True, "checks": {"graph": "ok", "chroma": "ok"}}
        metrics = httpx.get(f"{base}/metrics", timeout=10)
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].startswith("text/plain")
        samples = _samples(metrics.text)
        assert httpx.get(f"{base}/nope", timeout=5).status_code == 404
        assert proc.poll() is None, "the daemon exited on its own"
    finally:
        status = stop(proc)
    assert status == 0, (tmp_path / "daemon.log").read_text()
    assert samples[("rem_cycle_cycles_total", (("outcome", "completed"),))] >= 2
    assert samples[("rem_cycle_cycles_total", (("outcome", "failed"),))] == 0
    assert samples[("rem_cycle_cycle_duration_seconds_count", ())] >= 2
    assert samples[("rem_cycle_phase_duration_seconds_count", (("phase", "ingest"),))] >= 2
    assert samples[("rem_cycle_graph_nodes", (("label", "SESSION"),))] == 26
    assert samples[("rem_cycle_graph_edges", (("relationship", "ORIGINATES_IN"),))] > 0
    assert samples[("rem_cycle_sessions", (("state", "undigested"),))] + samples[
        ("rem_cycle_sessions", (("state", "digested"),))
    ] == 26
    assert samples[("rem_cycle_lazy_queue_depth", ())] >= 0
    assert samples[("rem_cycle_metrics_ok", ())] == 1
    runs = read_runs(data / "graph.sqlite3")
    assert all(r["mode"] == "daemon" and r["reason"] == "scheduled" for r in runs)
    # One-second cadence: consecutive cycles start about an interval apart, not back to back.
    assert runs[1]["started_at"] > runs[0]["finished_at"]


def test_daemon_survives_chroma_down_and_retries_next_cycle(tmp_path: Path) -> None:
    """Chroma down from the start → each cycle fails and is recorded, the daemon lives on, /readyz
    says 503 (without leaking the URL); once a server answers there, /readyz says 200 and the next
    cycle completes. (tests/test_chroma_faults.py kills a server under a working daemon.)"""
    data = tmp_path / "data"
    port, http_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    env = worker_env(data, interval_seconds="1", http_port=str(http_port), chroma_url=url)
    proc = start_worker(env=env, log_path=tmp_path / "daemon.log")
    chroma: subprocess.Popen[bytes] | None = None
    try:
        failed = wait_for(
            lambda: [r for r in read_runs(data / "graph.sqlite3") if r["outcome"] == "failed"][1:],
            timeout=60, interval=0.1, what="two failed cycles",
        )
        assert failed[0]["reason_code"] == "chroma-unavailable"
        assert failed[0]["failure_phase"] == "provider-ready"
        ready = httpx.get(f"http://127.0.0.1:{http_port}/readyz", timeout=15)
        assert ready.status_code == 503
        assert ready.json()["checks"] == {"graph": "ok", "chroma": "unavailable"}
        assert url not in ready.text  # no configuration leaks through the endpoint
        assert proc.poll() is None

        chroma = start_chroma_server(tmp_path / "chroma", port)
        assert run_cli("import", str(SAMPLE), env={"REM_DATA_DIR": str(data), "REM_CHROMA_URL": url}).returncode == 0
        # A cycle may run while the import is half-way; the next ones read the rows added since.
        completed = wait_for(
            lambda: [r for r in read_runs(data / "graph.sqlite3")
                     if r["outcome"] == "completed" and r["phases"]["finalize"]["graph"]["nodes"].get("SESSION") == 26],
            timeout=60, interval=0.1, what="a completed cycle after Chroma came back",
        )
        assert completed[0]["phases"]["finalize"]["graph"]["nodes"]["SESSION"] == 26
        assert httpx.get(f"http://127.0.0.1:{http_port}/readyz", timeout=15).status_code == 200
    finally:
        status = stop(proc)
        if chroma is not None:
            chroma.terminate()
            chroma.wait(10)
    assert status == 0, (tmp_path / "daemon.log").read_text()


def test_daemon_with_its_http_port_taken_exits_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(env={"REM_DATA_DIR": str(tmp_path / "data"), "REM_HTTP_PORT": str(port)}, timeout=60)
    assert done.returncode == 1
    # One line, as `mcp --http` says it (it began "[Errno 98] Address already in use").
    assert done.stderr.splitlines()[-1] == (
        f"rem-cycle: cannot start the daemon: cannot listen on 127.0.0.1:{port}: Address already in use")
    assert "Traceback" not in done.stderr


def test_daemon_without_run_at_startup_waits_and_stops_at_once_while_waiting(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    env = worker_env(data, interval_seconds="3600", run_at_startup="false", http_port=str(port))
    proc = start_worker(env=env, log_path=tmp_path / "daemon.log")
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz")
        time.sleep(1.0)
        assert read_runs(data / "graph.sqlite3") == []  # the schema exists, no cycle has started
        sent = time.monotonic()
        status = stop(proc, timeout=20)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert status == 0, (tmp_path / "daemon.log").read_text()
    assert took < 5, took  # a stop while sleeping does not wait for the interval
    assert read_runs(data / "graph.sqlite3") == []


def test_a_cycle_stuck_on_a_lock_is_reported_stalled_then_recovers(tmp_path: Path) -> None:
    # A real stall, no hooks: the cycle waits on the model (1 s a chunk) while another program
    # holds graph.sqlite3's write lock, so neither its commits nor its heartbeats get through.
    data = tmp_path / "data"
    graph = data / "graph.sqlite3"
    assert run_cli("import", str(SAMPLE), env={"REM_DATA_DIR": str(data)}).returncode == 0
    port = free_port()
    with LLMServer(default=slow(1.0)) as llm:
        env = worker_env(
            data, http_port=str(port), lease_timeout_seconds="2", extractor="openai",
            llm_base_url=llm.url, llm_model="test-model", interval_seconds="3600",
        )
        proc = start_worker(env=env, log_path=tmp_path / "daemon.log")
        try:
            base = f"http://127.0.0.1:{port}"
            assert wait_for_http(f"{base}/healthz").status_code == 200
            wait_for(lambda: llm.chat_count >= 1, timeout=60, interval=0.05, what="the extract phase")
            (run,) = [r for r in read_runs(graph) if r["outcome"] == "running"]
            blocker = sqlite3.connect(graph, timeout=30, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")
            try:
                stalled = wait_for(
                    lambda: (answer := httpx.get(f"{base}/healthz", timeout=10)).status_code == 503 and answer,
                    timeout=30, interval=0.2, what="/healthz to report the stall",
                )
                body = stalled.json()
                assert body["status"] == "stalled"
                assert [r["run_id"] for r in body["runs"]] == [run["run_id"]]
                assert body["runs"][0]["silent_seconds"] >= 2  # rounded to 0.1 s
                samples = _samples(httpx.get(f"{base}/metrics", timeout=10).text)
                assert samples[("rem_cycle_cycle_stalled", ())] == 1
                assert proc.poll() is None
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            # The stall is shown: the model answers at once from now on, so the cycle's other
            # chunks (a second each) no longer hold the test while it waits for the cycle's end.
            llm.default = ok()
            wait_for(
                lambda: httpx.get(f"{base}/healthz", timeout=10).status_code == 200,
                timeout=30, interval=0.2, what="/healthz to recover",
            )
            done = wait_for(
                lambda: next((r for r in read_runs(graph) if r["run_id"] == run["run_id"] and r["outcome"] != "running"), None),
                timeout=180, interval=0.2, what="the stalled cycle to finish",
            )
            assert done["outcome"] == "completed"
        finally:
            assert stop(proc) == 0
