"""The health and metrics endpoint: ``/healthz``, ``/readyz``, ``/metrics``.

``/healthz`` is liveness: 200 while the process answers and can read its graph database (or, on
PostgreSQL, finds its own connections all busy, for up to ``REM_LEASE_TIMEOUT_SECONDS``), 503 when
it cannot, or when a cycle this process is running has not written its heartbeat for
``REM_LEASE_TIMEOUT_SECONDS`` (a wedged cycle, which a restart cures; the next cycle records it
``abandoned``). ``/readyz`` is readiness (the stores answer).
A stdlib ``ThreadingHTTPServer`` in its own threads, so a slow scrape can never hold up the
cycle's event loop. ``/metrics`` reads the database through its own read-only connection.
``/readyz`` checks the graph database from the request thread and Chroma through the daemon's
event loop (a blocking portal: the async Chroma client lives on that loop), each with a timeout.
Responses carry check names and states only — never settings, URLs or error texts, which could
hold credentials; the reasons go to the (secret-masking) log.

Every connection holds a file descriptor the cycle may need: the endpoint serves at most
``REM_HTTP_MAX_CONNECTIONS`` at once and closes a connection that has not sent its whole request
within ``REM_HTTP_REQUEST_TIMEOUT_SECONDS``, so idle or trickling clients can never exhaust the
process's descriptors. When all slots are taken, the connection that has waited longest for its
request is closed to make room, so they cannot lock out a health probe either; a newcomer is
answered 503 and closed only when every slot is busy answering a request.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from config import Settings
from store.chroma import ChromaStore
from store.backend import open_database
from store.errors import ConnectionsExhaustedError, DatabaseDamagedError, StoreError
from store.library_log import get_logger
from store.runstate import RunStateStore
from worker.cycle import owner_id
from worker.metrics import build_registry, silent_seconds

log = get_logger(__name__)

READY_TIMEOUT_SECONDS = 5.0
# /healthz waits this long for a locked database before calling it unreadable (probes time out soon).
HEALTH_DB_TIMEOUT_SECONDS = 2.0

ReadyCheck = Callable[[], dict[str, bool]]
LiveCheck = Callable[[], dict[str, Any]]


# Sent to a connection over the cap before closing it (a fresh socket's send buffer takes it whole).
_BUSY_RESPONSE = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
# Out of descriptors, accept() fails while the listening socket stays readable: pause instead of
# spinning, and say so at most once a minute.
ACCEPT_BACKOFF_SECONDS = 0.1
ACCEPT_WARNING_INTERVAL_SECONDS = 60.0
# When full, the connection waiting longest for its request is closed to make room; the newcomer
# waits this long for the freed slot.
EVICTION_WAIT_SECONDS = 0.5
# Descriptors one connection may hold: its socket and a read-only database connection (file, WAL, shm).
DESCRIPTORS_PER_CONNECTION = 4
# What the process needs besides the endpoint at its busiest (embedded Chroma, database, locks; ~45 measured).
DESCRIPTORS_FOR_THE_CYCLE = 64


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a hung request must not keep the process alive at exit
    # A burst of probes and scrapes waits in the kernel's accept queue (no descriptor of ours)
    # instead of being refused; socketserver's default is 5.
    request_queue_size = 128
    registry: CollectorRegistry
    ready: ReadyCheck
    live: LiveCheck
    request_timeout: float
    _slots: threading.BoundedSemaphore
    _waiting: dict[_Handler, float]  # connections that have not sent their request yet, since when
    _waiting_lock: threading.Lock
    _warned_at: float = -ACCEPT_WARNING_INTERVAL_SECONDS

    def waiting(self, handler: _Handler, *, since: float | None) -> None:
        """Note that ``handler`` waits for its request (``since`` a monotonic time), or no longer."""
        with self._waiting_lock:
            if since is None:
                self._waiting.pop(handler, None)
            else:
                self._waiting[handler] = since

    def _evict_longest_waiting(self) -> bool:
        with self._waiting_lock:
            if not self._waiting:
                return False
            oldest = min(self._waiting, key=self._waiting.__getitem__)
            del self._waiting[oldest]
        oldest.cut_off()
        return True

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                if time.monotonic() - self._warned_at >= ACCEPT_WARNING_INTERVAL_SECONDS:
                    self._warned_at = time.monotonic()
                    log.warning("http: out of file descriptors, not accepting connections for now")
                time.sleep(ACCEPT_BACKOFF_SECONDS)
            raise

    def verify_request(self, request: Any, client_address: Any) -> bool:
        if self._slots.acquire(blocking=False):
            return True
        # Full. Idle or trickling clients must not lock out a real request: close the one that has
        # waited longest for its request and take its slot. Only when every slot is answering a
        # request is the newcomer refused.
        if self._evict_longest_waiting() and self._slots.acquire(timeout=EVICTION_WAIT_SECONDS):
            return True
        log.debug("http: connection refused, REM_HTTP_MAX_CONNECTIONS reached", client=client_address[0])
        try:
            request.setblocking(False)
            request.send(_BUSY_RESPONSE)
        except OSError:
            pass
        return False  # socketserver closes it

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # no thread was started to release it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "rem-cycle"

    def setup(self) -> None:
        # The socket timeout bounds each wait for bytes (and each send); the deadline bounds the
        # whole request, so a client trickling a byte at a time cannot hold the connection either.
        self.timeout = self.server.request_timeout
        super().setup()
        self._deadline = threading.Timer(self.server.request_timeout, self.cut_off)
        self._deadline.daemon = True
        self._deadline.start()
        self.server.waiting(self, since=time.monotonic())

    def cut_off(self) -> None:
        """End the connection: the blocked read returns, and the handler with it."""
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed

    def _request_in(self) -> None:
        self._deadline.cancel()
        self.server.waiting(self, since=None)

    def finish(self) -> None:
        self._request_in()
        super().finish()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._request_in()  # the answer may take longer than the deadline, and is never evicted
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            body = self.server.live()
            self._send(200 if body["status"] == "ok" else 503, "application/json", json.dumps(body).encode())
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


def cannot_listen(host: str, port: int, exc: OSError) -> OSError:
    """The error to show for a failed bind of ``host:port``: one line, ``cannot listen on
    HOST:PORT: REASON``. Built with one argument, not ``(errno, text)``: that form prints
    ``[Errno 98] `` before the line. A host name that does not resolve (``socket.gaierror``, whose
    negative errno ``os.strerror`` calls ``Unknown error -2``) is said in the resolver's words."""
    reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
    return OSError(f"cannot listen on {host}:{port}: {reason}")


def start_endpoint(
    *,
    host: str,
    port: int,
    registry: CollectorRegistry,
    ready: ReadyCheck,
    live: LiveCheck,
    max_connections: int,
    request_timeout: float,
) -> HttpEndpoint:
    """Bind ``host:port`` (port 0 = any free port) and serve in a background thread, at most
    ``max_connections`` at once, each given ``request_timeout`` seconds to send its request;
    raises ``OSError`` when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_cls = type("_BoundServer", (_Server,), {"address_family": family})
    try:
        server = server_cls((host, port), _Handler)
    except OSError as exc:
        raise cannot_listen(host, port, exc) from exc
    server.registry, server.ready, server.live = registry, ready, live
    server.request_timeout, server._slots = request_timeout, threading.BoundedSemaphore(max_connections)
    server._waiting, server._waiting_lock = {}, threading.Lock()
    thread = threading.Thread(target=server.serve_forever, name="rem-cycle-http", daemon=True)
    thread.start()
    return HttpEndpoint(server=server, thread=thread)


@dataclass
class Liveness:
    """``/healthz``'s check (:meth:`check`), with what it remembers between probes: since when
    every probe found this process's database connections all in use."""

    settings: Settings
    owner: Callable[[], str | None] = lambda: None
    clock: Callable[[], float] = time.monotonic
    _busy_since: float | None = field(default=None, init=False, repr=False)

    def check(self) -> dict[str, Any]:
        """The ``/healthz`` body: ``{"status": "ok"}``; ``{"status": "stalled", "runs": [{run_id,
        heartbeat_at, silent_seconds}]}`` when running cycles (``owner()``'s only, when it names
        one) have been silent for longer than the lease timeout; ``{"status": "unhealthy",
        "reason": "database-unreadable"}`` when the graph database cannot be read (missing, not a
        database, unreadable, locked), since no cycle can then do its work; ``{"status":
        "unhealthy", "reason": "database-damaged"}`` when the run that finished last failed on a
        damaged file (the probe's read may pass: the damage is where the cycle read), until a
        restore puts a backup in place.

        On PostgreSQL, no connection to be had while the server answers — every connection of this
        process's pool in use (its cycle and a burst of slow scrapes), or the server's or the
        role's connection limit reached — is ``{"status": "ok", "database": "busy"}``: a restart
        would not give it one, and would kill the work that holds them. Only when every probe has
        found it so for longer than the lease timeout (connections leaked, or held by a wedged
        thread, which a restart cures) is it ``{"status": "unhealthy", "reason":
        "connections-exhausted"}``. The error text goes to the log only."""
        now = datetime.now(UTC)
        try:
            db = open_database(self.settings, readonly=True, timeout=HEALTH_DB_TIMEOUT_SECONDS)
            try:
                runs = RunStateStore(db)
                silent = runs.silent_runs(older_than_seconds=self.settings.lease_timeout_seconds, now=now, owner=self.owner())
                newest = runs.newest_finished()
            finally:
                db.close()
        except ConnectionsExhaustedError as exc:
            if self._busy_since is None:
                self._busy_since = self.clock()
            busy_seconds = self.clock() - self._busy_since
            if busy_seconds > self.settings.lease_timeout_seconds:
                log.error("liveness: no database connection to be had for longer than the lease timeout", error=str(exc),
                          busy_seconds=round(busy_seconds))
                return {"status": "unhealthy", "reason": "connections-exhausted"}
            log.warning("liveness: no database connection to be had; the server answers", error=str(exc))
            return {"status": "ok", "database": "busy"}
        except StoreError as exc:
            self._busy_since = None
            log.warning("liveness: graph database unreadable", error=str(exc))
            return {"status": "unhealthy", "reason": "database-unreadable"}
        self._busy_since = None
        if newest is not None and newest["reason_code"] == DatabaseDamagedError.reason_code:
            log.error("liveness: the last cycle found the graph database damaged; restore it from a backup",
                      run_id=newest["run_id"])
            return {"status": "unhealthy", "reason": DatabaseDamagedError.reason_code}
        if not silent:
            return {"status": "ok"}
        runs = [
            {"run_id": run["run_id"], "heartbeat_at": run["heartbeat_at"], "silent_seconds": silent_seconds(run, now)}
            for run in silent
        ]
        return {"status": "stalled", "runs": runs}


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
            db = open_database(self.settings, readonly=True, timeout=READY_TIMEOUT_SECONDS)
            try:
                return db.schema_version > 0
            finally:
                db.close()
        except StoreError as exc:
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


def warn_if_descriptors_short(max_connections: int) -> None:
    """Log a warning when ``max_connections`` busy connections and a cycle could need more file
    descriptors than the process may open (``RLIMIT_NOFILE``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = max_connections * DESCRIPTORS_PER_CONNECTION + DESCRIPTORS_FOR_THE_CYCLE
    if soft != resource.RLIM_INFINITY and needed > soft:
        log.warning(
            "REM_HTTP_MAX_CONNECTIONS is high for the file-descriptor limit: busy connections could starve the cycle",
            max_connections=max_connections, descriptors_needed=needed, descriptor_limit=soft,
        )


@asynccontextmanager
async def serve_http(settings: Settings, *, registry: CollectorRegistry | None = None) -> AsyncIterator[HttpEndpoint]:
    """Serve the endpoint on ``REM_HTTP_HOST:REM_HTTP_PORT`` while the block runs (call from the
    daemon's event loop: readiness reaches Chroma through it). Raises ``OSError`` at once when
    the address cannot be bound."""
    readiness: Readiness | None = None

    def ready() -> dict[str, bool]:
        # Requests that arrive before the portal is up (a split second) are simply not ready yet.
        return readiness.check() if readiness else {"graph": False, "chroma": False}

    warn_if_descriptors_short(settings.http_max_connections)
    # Bind before the portal's task group exists, so a taken port is a plain OSError.
    endpoint = await anyio.to_thread.run_sync(
        lambda: start_endpoint(
            host=settings.http_host,
            port=settings.http_port,
            registry=registry or build_registry(settings),
            ready=ready,
            live=Liveness(settings, owner=owner_id).check,
            max_connections=settings.http_max_connections,
            request_timeout=settings.http_request_timeout_seconds,
        )
    )
    try:
        async with BlockingPortal() as portal:
            readiness = Readiness(settings, portal)
            yield endpoint
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(endpoint.close)
