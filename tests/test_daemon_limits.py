"""A real daemon under a low file-descriptor limit (``RLIMIT_NOFILE`` lowered in the child) and
real idle connections: they can no longer starve the cycle, and when descriptors do run out (an
endpoint configured above the limit) every failed cycle is recorded in ``rem_runs`` with a reason."""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.conftest import SAMPLE, free_port, run_cli
from tests.daemon_support import read_runs, start_worker, stop, wait_for, worker_env

# The daemon needs about 45 descriptors at its busiest (embedded Chroma, the database, the lock files).
FILE_LIMIT = 128


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


@contextmanager
def _idle_connections(port: int, *, count: int, keep_opening: bool) -> Iterator[list[socket.socket]]:
    """Open ``count`` connections that never send a byte (and, with ``keep_opening``, go on
    opening more in the background until the block ends, as an attacker would); close them all at
    the end."""
    held: list[socket.socket] = []
    done = threading.Event()

    def attack() -> None:
        while not done.is_set() and len(held) < 4 * count:
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                pass
            time.sleep(0.01)

    for _ in range(count):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
        except OSError:  # the backlog is full: the server no longer accepts at all
            break
    thread = threading.Thread(target=attack, daemon=True)
    if keep_opening:
        thread.start()
    try:
        yield held
    finally:
        done.set()
        if keep_opening:
            thread.join(10)
        for sock in held:
            sock.close()


def _runs_after(graph: Path, moment: str, predicate: Callable[[dict], bool]) -> list[dict]:
    return [r for r in read_runs(graph) if r["started_at"] >= moment and predicate(r)]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def _log_events(path: Path, event: str) -> list[dict]:
    found = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event:
            found.append(record)
    return found


def test_idle_connections_cannot_starve_the_cycle(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("import", str(SAMPLE), env={"REM_DATA_DIR": str(data)}).returncode == 0
    port = free_port()
    env = worker_env(data, interval_seconds="1", http_port=str(port), http_request_timeout_seconds="2")
    proc = start_worker(env=env, log_path=tmp_path / "daemon.log", preexec_fn=_limit_files)
    graph = data / "graph.sqlite3"
    try:
        wait_for(lambda: _runs_after(graph, "", lambda r: r["outcome"] == "completed"), timeout=60, interval=0.1, what="a first cycle")
        attack_started = _now()
        # Three times the descriptors the daemon may open, held idle and renewed throughout.
        with _idle_connections(port, count=3 * FILE_LIMIT, keep_opening=True):
            wait_for(
                lambda: len(_runs_after(graph, attack_started, lambda r: r["outcome"] != "running")) >= 3,
                timeout=90, interval=0.2, what="three cycles during the attack",
            )
            during = _runs_after(graph, attack_started, lambda r: r["outcome"] != "running")
            # A probe gets through during the attack: an idle connection makes room for it.
            health = wait_for(lambda: _healthz(port), timeout=10, interval=0.2, what="/healthz during the attack")
        assert proc.poll() is None
    finally:
        status = stop(proc)
    log = (tmp_path / "daemon.log").read_text()
    assert status == 0, log
    assert [r["outcome"] for r in during] == ["completed"] * len(during), [(r["outcome"], r["reason_code"]) for r in during]
    assert health == {"status": "ok"}
    assert "Too many open files" not in log


def _healthz(port: int) -> dict | None:
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


def test_every_cycle_that_runs_out_of_descriptors_is_recorded_with_a_reason(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("import", str(SAMPLE), env={"REM_DATA_DIR": str(data)}).returncode == 0
    port = free_port()
    # An endpoint allowed more connections than the process has descriptors, idle ones kept an
    # hour: the descriptors run out, as they did on every release before the cap.
    env = worker_env(
        data, interval_seconds="1", http_port=str(port), http_max_connections="1024", http_request_timeout_seconds="3600"
    )
    log_path = tmp_path / "daemon.log"
    proc = start_worker(env=env, log_path=log_path, preexec_fn=_limit_files)
    graph = data / "graph.sqlite3"
    try:
        wait_for(lambda: _runs_after(graph, "", lambda r: r["outcome"] == "completed"), timeout=60, interval=0.1, what="a first cycle")
        with _idle_connections(port, count=2 * FILE_LIMIT, keep_opening=False):
            failed = wait_for(
                lambda: _runs_after(graph, "", lambda r: r["outcome"] == "failed")[2:],
                timeout=60, interval=0.2, what="three failed cycles",
            )
        recovered = _now()
        wait_for(
            lambda: _runs_after(graph, recovered, lambda r: r["outcome"] == "completed"),
            timeout=60, interval=0.2, what="a completed cycle once the connections are gone",
        )
        assert proc.poll() is None
    finally:
        status = stop(proc)
    assert status == 0, log_path.read_text()
    assert "REM_HTTP_MAX_CONNECTIONS is high for the file-descriptor limit" in log_path.read_text()  # said at start-up
    assert {r["reason_code"] for r in failed} == {"too-many-open-files"}, failed
    assert all(r["finished_at"] and r["phases"][r["failure_phase"]]["state"] == "failed" for r in failed)
    runs = read_runs(graph)
    assert not [r for r in runs if r["outcome"] == "running"]
    # Every cycle the daemon started is a row: the finished ones and the crashed ones.
    attempts = len(_log_events(log_path, "cycle finished")) + len(_log_events(log_path, "cycle crashed"))
    assert len(runs) == attempts, (len(runs), attempts)
