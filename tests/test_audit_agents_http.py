"""``rem-cycle mcp --http`` as a web page, a second client and an operator would meet it: the Host
and Origin a request carries on a loopback address (DNS rebinding), driven by raw HTTP and by the
official ``mcp`` SDK client against a real server process."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from config import Settings
from tests.conftest import ROOT, free_port, run_cli
from tests.test_mcp import graph, server_env  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(120)

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextmanager
def serving(settings: Settings, host: str, **extra: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``rem-cycle mcp --http`` on ``host``; yields its URL and process."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker", "mcp", "--http"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=server_env(settings, REM_MCP_HOST=host, REM_MCP_PORT=str(port), **extra), cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            try:
                socket.create_connection((host, port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        yield f"http://{host}:{port}/mcp", proc
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
async def test_a_loopback_server_refuses_a_page_that_rebinds_a_name_to_it(graph: Settings, host: str) -> None:
    # Loopback needs no token, so the Host and Origin checks are what keep a web page (whose own
    # domain a DNS rebinding points at this address) from reading every user's memories. The SDK
    # makes them for 127.0.0.1, localhost and ::1 only: on 127.0.0.2 any page was answered.
    with serving(graph, host) as (url, _):
        port = url.split(":")[2].split("/")[0]
        for headers, status in (
            ({"Host": f"attacker.example:{port}"}, 421),
            ({"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"}, 421),
            ({"Origin": "http://attacker.example"}, 403),
            ({"Origin": f"http://{host}.attacker.example:{port}"}, 403),
        ):
            refused = httpx.post(url, json=INIT, headers={**ACCEPT, **headers}, timeout=10)
            assert refused.status_code == status, (headers, refused.status_code, refused.text)
        # A client of this machine, by address or by name, with or without a same-origin Origin.
        for headers in ({}, {"Origin": f"http://{host}:{port}"}, {"Host": f"localhost:{port}"}):
            assert httpx.post(url, json=INIT, headers={**ACCEPT, **headers}, timeout=10).status_code == 200, headers
        async with httpx2.AsyncClient(timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                answer = await client.call_tool("recall", {"query": "torn lines", "user": "alice"})
                assert not answer.is_error and answer.structured_content["turns"]


async def test_the_bearer_scheme_is_case_insensitive_and_the_token_exact(graph: Settings) -> None:
    # RFC 9110: the auth scheme is case-insensitive; a client writing `bearer <token>` was refused.
    token = "agents-Token-42"
    with serving(graph, "127.0.0.1", REM_MCP_TOKEN=token) as (url, _):
        for authorization, status in (
            (f"Bearer {token}", 200), (f"bearer {token}", 200), (f"BEARER {token}", 200), (f"Bearer  {token}", 200),
            (f"Bearer {token.lower()}", 401), (f"Bearer {token}x", 401), (f"Bearer {token[:-1]}", 401), (token, 401),
            (f"Basic {token}", 401), (f"Bearer{token}", 401), ("Bearer", 401), ("", 401),
        ):
            done = httpx.post(url, json=INIT, headers={**ACCEPT, "Authorization": authorization}, timeout=10)
            assert done.status_code == status, (authorization, done.status_code)


def test_a_port_in_use_is_one_line_and_exit_1_not_busy(graph: Settings) -> None:
    # uvicorn logged "listening", then failed to bind and exited 3 — rem-cycle's "busy: a cycle
    # holds the lock" — after an ERROR record; the first server must keep serving.
    with serving(graph, "127.0.0.1") as (url, first):
        port = url.split(":")[2].split("/")[0]
        done = run_cli("mcp", "--http", env={"REM_DATA_DIR": str(graph.data_dir), "REM_MCP_PORT": port}, timeout=60)
        assert done.returncode == 1, (done.returncode, done.stderr)
        # The line README quotes, whole (it began "[Errno 98] cannot listen …").
        assert done.stderr.splitlines()[-1] == f"rem-cycle: cannot listen on 127.0.0.1:{port}: Address already in use"
        assert "listening" not in done.stderr and "Traceback" not in done.stderr
        assert first.poll() is None
        assert httpx.post(url, json=INIT, headers=ACCEPT, timeout=10).status_code == 200


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_ends_the_http_server_with_exit_0_as_it_ends_the_daemon(graph: Settings, signum: signal.Signals) -> None:
    # uvicorn raised the signal again once it had shut down: SIGINT exited 130 ("interrupted") and
    # SIGTERM killed the process (-15) — an orchestrator's ordinary stop read as a failure.
    with serving(graph, "127.0.0.1") as (url, proc):
        assert httpx.post(url, json=INIT, headers=ACCEPT, timeout=10).status_code == 200
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert b"Traceback" not in err
