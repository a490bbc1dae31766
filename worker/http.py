"""The health and metrics endpoint: ``/healthz``, ``/readyz``, ``/metrics``.

``/healthz`` is liveness: 200 while the process answers, 503 when a cycle this process is running
has not written its heartbeat for ``REM_LEASE_TIMEOUT_SECONDS`` (a wedged cycle, which a restart
cures; the next cycle records it ``abandoned``). ``/readyz`` is readiness (the stores answer).
A stdlib ``ThreadingHTTPServer`` in its own threads, so a slow scrape can never hold up the
cycle's event loop. ``/metrics`` reads the database through its own read-only connection.
``/readyz`` checks the graph database from the request thread and Chroma through the daemon's
event loop (a blocking portal: the async Chroma client lives on that loop), each with a timeout.
Responses carry check names and states only — never settings, URLs or error texts, which could
hold credentials; the reasons go to the (secret-masking) log.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import structlog
from anyio.from_thread import BlockingPortal
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from config import Settings
from store.chroma import ChromaStore
from store.db import Database
from store.runstate import RunStateStore
from worker.cycle import owner_id
from worker.metrics import build_registry, silent_seconds

log = structlog.get_logger(__name__)

READY_TIMEOUT_SECONDS = 5.0

ReadyCheck = Callable[[], dict[str, bool]]
LiveCheck = Callable[[], list[dict[str, Any]]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a hung request must not keep the process alive at exit
    registry: CollectorRegistry
    ready: ReadyCheck
    stalled: LiveCheck


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "rem-cycle"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            stalled = self.server.stalled()
            body = {"status": "stalled", "runs": stalled} if stalled else {"status": "ok"}
            self._send(503 if stalled else 200, "application/json", json.dumps(body).encode())
        elif path == "/readyz":
            checks = self.server.ready()
            ready = all(checks.values())
            body = {"ready": ready, "checks": {name: "ok" if ok else "unavailable" for name, ok in checks.items()}}
            self._send(200 if ready else 503, "application/json", json.dumps(body).encode())
        elif path == "/metrics":
            try:
                payload = generate_latest(self.server.registry)
            except Exception:  # noqa: BLE001 - answer 500 and keep serving
                log.exception("metrics rendering failed")
                self._send(500, "text/plain", b"metrics unavailable\n")
                return
            self._send(200, CONTENT_TYPE_LATEST, payload)
        else:
            self._send(404, "text/plain", b"not found\n")

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        log.debug("http request", client=self.client_address[0], request=format % args)


@dataclass
class HttpEndpoint:
    """A running endpoint; ``close()`` stops it."""

    server: _Server
    thread: threading.Thread

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        host = self.server.server_address[0]
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def start_endpoint(
    *, host: str, port: int, registry: CollectorRegistry, ready: ReadyCheck, stalled: LiveCheck
) -> HttpEndpoint:
    """Bind ``host:port`` (port 0 = any free port) and serve in a background thread; raises
    ``OSError`` when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_cls = type("_BoundServer", (_Server,), {"address_family": family})
    server = server_cls((host, port), _Handler)
    server.registry, server.ready, server.stalled = registry, ready, stalled
    thread = threading.Thread(target=server.serve_forever, name="rem-cycle-http", daemon=True)
    thread.start()
    return HttpEndpoint(server=server, thread=thread)


def stalled_runs(settings: Settings, *, owner: str | None = None) -> list[dict[str, Any]]:
    """Running cycles (``owner``'s only, when given) silent for longer than the lease timeout, as
    ``{run_id, heartbeat_at, silent_seconds}``. A database that cannot be read says nothing about
    liveness (``/readyz`` reports it): the answer is then an empty list."""
    now = datetime.now(UTC)
    try:
        db = Database(settings.graph_path, readonly=True, timeout=READY_TIMEOUT_SECONDS)
        try:
            silent = RunStateStore(db).silent_runs(older_than_seconds=settings.lease_timeout_seconds, now=now, owner=owner)
        finally:
            db.close()
    except sqlite3.Error as exc:
        log.warning("liveness: run state unreadable", error=str(exc))
        return []
    return [
        {"run_id": run["run_id"], "heartbeat_at": run["heartbeat_at"], "silent_seconds": silent_seconds(run, now)}
        for run in silent
    ]


class Readiness:
    """``/readyz``: the graph database answers a read, and Chroma answers a heartbeat."""

    def __init__(self, settings: Settings, portal: BlockingPortal) -> None:
        self.settings = settings
        self.portal = portal
        self._chroma: ChromaStore | None = None

    def check(self) -> dict[str, bool]:
        """Run in a request thread."""
        return {"graph": self._graph_ok(), "chroma": self._chroma_ok()}

    def _graph_ok(self) -> bool:
        try:
            db = Database(self.settings.graph_path, readonly=True, timeout=READY_TIMEOUT_SECONDS)
            try:
                return db.schema_version > 0
            finally:
                db.close()
        except sqlite3.Error as exc:
            log.warning("readiness: graph database unavailable", error=str(exc))
            return False

    def _chroma_ok(self) -> bool:
        try:
            self.portal.start_task_soon(self._ping_chroma).result(timeout=READY_TIMEOUT_SECONDS + 1)
            return True
        except TimeoutError:
            log.warning("readiness: chroma did not answer in time")
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
            log.warning("readiness: chroma unavailable", error=str(exc))
        return False

    async def _ping_chroma(self) -> None:
        # One store for all probes: it connects on first use and retries while Chroma is down.
        self._chroma = self._chroma or ChromaStore(self.settings)
        with anyio.fail_after(READY_TIMEOUT_SECONDS):
            await self._chroma.ping()


@asynccontextmanager
async def serve_http(settings: Settings, *, registry: CollectorRegistry | None = None) -> AsyncIterator[HttpEndpoint]:
    """Serve the endpoint on ``REM_HTTP_HOST:REM_HTTP_PORT`` while the block runs (call from the
    daemon's event loop: readiness reaches Chroma through it). Raises ``OSError`` at once when
    the address cannot be bound."""
    readiness: Readiness | None = None

    def ready() -> dict[str, bool]:
        # Requests that arrive before the portal is up (a split second) are simply not ready yet.
        return readiness.check() if readiness else {"graph": False, "chroma": False}

    # Bind before the portal's task group exists, so a taken port is a plain OSError.
    endpoint = await anyio.to_thread.run_sync(
        lambda: start_endpoint(
            host=settings.http_host,
            port=settings.http_port,
            registry=registry or build_registry(settings),
            ready=ready,
            stalled=lambda: stalled_runs(settings, owner=owner_id()),
        )
    )
    try:
        async with BlockingPortal() as portal:
            readiness = Readiness(settings, portal)
            yield endpoint
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(endpoint.close)
