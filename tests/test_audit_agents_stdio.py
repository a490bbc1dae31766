"""``rem-cycle mcp`` over stdio as a terminal and a client's pipe treat it: Ctrl-C, messages torn
across writes or sent together, and nothing but protocol on stdout — a real server process spoken
to in raw JSON-RPC lines."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from typing import Any

import pytest

from config import Settings
from tests.conftest import ROOT
from tests.test_mcp import graph, server_env  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(120)

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(request_id: int, query: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "recall", "arguments": {"query": query, "user": "alice"}}}


def line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


@contextmanager
def started(settings: Settings) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``rem-cycle mcp`` over pipes, killed at the end if it is still running."""
    proc = subprocess.Popen([sys.executable, "-m", "worker", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=server_env(settings), cwd=ROOT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def answer(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    return json.loads(proc.stdout.readline())  # every stdout line is a JSON-RPC message


def test_ctrl_c_stops_a_waiting_stdio_server_at_once(graph: Settings) -> None:
    # A terminal's Ctrl-C while the server waits for its client's next line: it went on waiting
    # (the SDK's stdin reader is a thread no cancellation stops) until the client wrote or closed.
    with started(graph) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(line(INIT) + line(INITIALIZED) + line(call(2, "torn lines")))
        proc.stdin.flush()
        assert answer(proc)["id"] == 1
        assert answer(proc)["result"]["structuredContent"]["turns"]
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        assert proc.wait(timeout=15) == 128 + signal.SIGINT
        assert time.monotonic() - signalled < 10
        err = proc.stderr.read().decode()
        assert "interrupted by SIGINT" in err and "Traceback" not in err and "Fatal Python error" not in err, err


def test_messages_torn_across_writes_or_sent_together_are_each_answered(graph: Settings) -> None:
    with started(graph) as proc:
        assert proc.stdin is not None
        proc.stdin.write(line(INIT) + line(INITIALIZED))
        proc.stdin.flush()
        assert answer(proc)["id"] == 1
        torn = line(call(2, "torn lines drain"))
        for piece in (torn[:7], torn[7:40], torn[40:]):  # one message in three writes
            proc.stdin.write(piece)
            proc.stdin.flush()
            time.sleep(0.2)
        assert answer(proc)["id"] == 2
        proc.stdin.write(line(call(3, "drain")) + line(call(4, "LazyEdgeQueue")))  # two in one write
        proc.stdin.flush()
        assert {answer(proc)["id"], answer(proc)["id"]} == {3, 4}
        proc.stdin.close()
        assert proc.wait(timeout=20) == 0
        assert proc.stdout.read() == b""  # type: ignore[union-attr]


def test_the_servers_log_is_json_lines_like_the_workers(graph: Settings) -> None:
    # REM_LOG_FORMAT=json: every stderr line is one JSON object. The MCP SDK, finding no handler for
    # the standard library's logging, installed its own: a rich console of multi-line INFO records
    # (each rejected call, each HTTP session) amid the worker's JSON.
    with started(graph) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        bad_limit = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "recall", "arguments": {"query": "drain", "limit": 0}}}
        unknown = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}
        proc.stdin.write(line(INIT) + line(INITIALIZED) + line(bad_limit) + line(unknown) + line(call(4, "torn lines")))
        proc.stdin.flush()
        assert sorted(answer(proc)["id"] for _ in range(4)) == [1, 2, 3, 4]
        proc.stdin.close()
        assert proc.wait(timeout=20) == 0
        for text in proc.stderr.read().decode().splitlines():
            assert isinstance(json.loads(text), dict), text


def test_a_client_that_stops_reading_ends_the_server_as_sigpipe_quietly(graph: Settings) -> None:
    # The client closed its read end (crashed, or `rem-cycle mcp | head -1`) and the server's next
    # answer hit a broken pipe: a 60-line ExceptionGroup traceback and exit 1. Every rem-cycle
    # command whose reader went away ends without a message and exit 141 (128 + SIGPIPE).
    with started(graph) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(line(INIT) + line(INITIALIZED))
        proc.stdin.flush()
        assert answer(proc)["id"] == 1
        proc.stdout.close()
        proc.stdin.write(line(call(2, "torn lines")))
        proc.stdin.flush()
        assert proc.wait(timeout=20) == 128 + signal.SIGPIPE
        err = proc.stderr.read().decode()
        assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_server_started_with_stdin_closed_says_so(graph: Settings) -> None:
    # `rem-cycle mcp <&-` (a supervisor that closes stdin): an AttributeError traceback, exit 1.
    done = subprocess.run(["sh", "-c", f"exec {sys.executable} -m worker mcp <&-"], capture_output=True, text=True,
                          env=server_env(graph), cwd=ROOT, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "stdin is closed" in done.stderr and "Traceback" not in done.stderr


# An mcp release whose low-level server no longer has the ``run`` that ``rem-cycle mcp`` over stdio
# calls through the SDK's private ``MCPServer._lowlevel_server`` (no public API takes our stdin):
# the SDK's class is changed before rem-cycle starts, as an upgrade would; nothing of rem-cycle's.
UPGRADED_SDK = """
import sys
from mcp.server.lowlevel import Server
del Server.run
from worker.entry import main
raise SystemExit(main(["mcp"]))
"""


def test_an_sdk_without_the_private_server_the_stdio_server_runs_on_stops_it_at_start(graph: Settings) -> None:
    """Before, it started, waited for the client, and died at its first message with an
    AttributeError traceback (exit 1): now it refuses at start, in one line that says what to install."""
    done = subprocess.run([sys.executable, "-c", UPGRADED_SDK], input=b"", capture_output=True, env=server_env(graph), cwd=ROOT, timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 2, (done.returncode, err)
    assert "Traceback" not in err and done.stdout == b""
    assert f"the installed mcp SDK ({version('mcp')}) has no MCPServer._lowlevel_server.run" in err
    assert "pip install 'mcp>=2.3,<2.4'" in err
