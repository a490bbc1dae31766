"""A loopback HTTP proxy in front of a real server (``chroma run``), which lets a test stall or
withhold the answer to chosen requests: a read that never answers, a leader held inside a scan."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from tests.conftest import free_port


@contextmanager
def forwarding_proxy(upstream_url: str, before_forward: Callable[[bytes], bool]) -> Iterator[str]:
    """A proxy to ``upstream_url`` on 127.0.0.1; yields its URL. Each request's body goes to
    ``before_forward`` first, on the request's own thread (so it may block it): True forwards the
    request and relays the answer, False drops it unanswered. A caller that blocks requests
    releases them before leaving this block (the server's shutdown waits for none of them)."""
    upstream = httpx.Client(base_url=upstream_url, timeout=60)

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not before_forward(body):
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
            answer = upstream.request(self.command, self.path, content=body, headers=headers)
            self.send_response(answer.status_code)
            for key, value in answer.headers.items():
                if key.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        def log_message(self, *args: Any) -> None:
            pass

    try:
        with serving(Handler) as url:
            yield url
    finally:
        upstream.close()


@contextmanager
def serving(handler: Callable[..., BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server of ``handler`` on 127.0.0.1; yields its URL, shut down at the end."""
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def holding_proxy(upstream_url: str, marker: bytes) -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A loopback proxy to ``upstream_url`` that holds the first request whose body holds
    ``marker`` until ``release`` is set, then forwards it; yields ``(url, held, release)``."""
    held, release = threading.Event(), threading.Event()

    def hold_the_first_marked(body: bytes) -> bool:
        if marker in body and not held.is_set():
            held.set()
            release.wait(120)
        return True

    with forwarding_proxy(upstream_url, hold_the_first_marked) as url:
        try:
            yield url, held, release
        finally:
            release.set()
