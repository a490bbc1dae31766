"""The endpoint under hostile clients and a broken database: real sockets, a real SQLite file.

Idle or trickling connections are capped and cut off, so they can never take the descriptors the
cycle needs (the same with a real daemon under a low descriptor limit: tests/test_daemon_limits.py);
``/healthz`` answers 503 with a reason when the graph database cannot be read.
"""

from __future__ import annotations

import select
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from config import Settings, load_settings
from worker.cycle import Stores, run_cycle
from worker.http import serve_http


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_by_server(sock: socket.socket, *, within: float) -> bool:
    """True when the server closes ``sock`` (EOF or reset) within ``within`` seconds."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


@contextmanager
def _closing(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()


def _settings(data_dir: Path, **overrides: object) -> Settings:
    return load_settings(data_dir=data_dir, **overrides)


async def test_idle_connections_make_room_for_a_real_request_and_are_cut_off(settings: Settings, stores: Stores) -> None:
    await run_cycle(settings, stores=stores)
    limited = _settings(settings.data_dir, http_max_connections=4, http_request_timeout_seconds=1.5)
    async with serve_http(limited) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=10) as client:
        with _closing([_connect(endpoint.port) for _ in range(4)]) as idle:
            time.sleep(0.2)  # the server has accepted them all: every slot is taken
            # A real request still gets in: the connection idle the longest is closed for it.
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            time.sleep(0.2)
            evicted = [s for s in idle if select.select([s], [], [], 0)[0]]  # readable: EOF from the server
            assert len(evicted) == 1, evicted
            started = time.monotonic()
            closed = await anyio.to_thread.run_sync(lambda: [_closed_by_server(s, within=5) for s in idle if s not in evicted])
            took = time.monotonic() - started
            assert all(closed) and took < 3.5, (closed, took)
        assert (await client.get("/healthz")).json() == {"status": "ok"}


async def test_a_connection_over_the_cap_gets_503_while_every_slot_answers_a_request(settings: Settings, stores: Stores) -> None:
    await run_cycle(settings, stores=stores)
    stores.close()
    limited = _settings(settings.data_dir, http_max_connections=1)
    async with serve_http(limited) as endpoint:
        with _exclusively_locked(settings.graph_path):
            # The one slot answers a scrape that waits for the locked database (seconds).
            scrape = _connect(endpoint.port)
            scrape.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            time.sleep(0.5)
            with _connect(endpoint.port) as extra:
                extra.settimeout(5)
                answer = extra.recv(4096)
            scrape.close()
    assert answer.startswith(b"HTTP/1.0 503"), answer


async def test_a_client_trickling_its_request_is_cut_off_at_the_deadline(settings: Settings, stores: Stores) -> None:
    await run_cycle(settings, stores=stores)
    limited = _settings(settings.data_dir, http_request_timeout_seconds=1.0)
    async with serve_http(limited) as endpoint:

        def trickle() -> float:
            started = time.monotonic()
            with _connect(endpoint.port) as sock:
                try:
                    for byte in b"GET /healthz HTTP/1.0\r\nX-Slow: " + b"a" * 200:
                        sock.send(bytes([byte]))
                        time.sleep(0.2)  # each byte well inside the timeout, the whole far beyond it
                except (BrokenPipeError, ConnectionResetError):
                    return time.monotonic() - started
            return float("inf")

        took = await anyio.to_thread.run_sync(trickle)
        assert took < 4, took


def _garbage(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"this is not an SQLite database " * 200)


@contextmanager
def _exclusively_locked(path: Path) -> Iterator[None]:
    """Another program holding the database exclusively (no reader gets in)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")
    conn.execute("BEGIN EXCLUSIVE")
    conn.execute("CREATE TABLE held_by_another_program(x)")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.mark.parametrize("breakage", ["garbage", "locked", "deleted"])
async def test_healthz_is_503_with_a_reason_when_the_database_cannot_be_read(
    settings: Settings, stores: Stores, breakage: str
) -> None:
    await run_cycle(settings, stores=stores)
    stores.close()
    graph = settings.graph_path
    async with serve_http(settings) as endpoint, httpx.AsyncClient(base_url=endpoint.url, timeout=20) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        if breakage == "locked":
            with _exclusively_locked(graph):
                health = await client.get("/healthz")
        else:
            if breakage == "garbage":
                _garbage(graph)
            else:
                graph.unlink()
            health = await client.get("/healthz")
        assert health.status_code == 503
        assert health.json() == {"status": "unhealthy", "reason": "database-unreadable"}
        if breakage == "locked":  # released: healthy again
            assert (await client.get("/healthz")).json() == {"status": "ok"}
