"""``rem-cycle mcp``: recall served to agents over the Model Context Protocol (official ``mcp`` SDK).

Three read-only tools — ``recall``, ``search_nodes``, ``show_node`` — over stdio (the client
starts this process) or streamable HTTP (``--http``, ``REM_MCP_HOST``:``REM_MCP_PORT``, path
``/mcp``). Over HTTP a bearer token (``REM_MCP_TOKEN``) is checked on every request when set, and
required when the host is not loopback. ``REM_MCP_USER`` pins every call to one user's sessions,
whatever the client asks: the ``user`` argument is a filter a model chooses, not an identity.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import json
import os
import re
import socket
import sys
import threading
from importlib.metadata import version
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BeforeValidator, Field, Strict
from pydantic_core import PydanticCustomError

from config import Settings
from config.redact import redact
from pipelines.recall import (
    MAX_BUDGET_TOKENS,
    MAX_LIMIT,
    MAX_QUERY_CHARS,
    RecallInputError,
    RecallRequest,
    check_user,
    compact_json,
    parse_as_of,
)
from store.backend import database_exists, database_location
from store.errors import StoreError
from store.ids import normalize_graph_node_id
from store.library_log import get_logger
from worker.http import cannot_listen
from worker.knowledge import NoGraphError
from worker.recall import RecallTimeoutError, run_recall, search_nodes, show_entity, unseen_entity
from worker.signals import stop_on_signals

if TYPE_CHECKING:
    import uvicorn

log = get_logger(__name__)

INSTRUCTIONS = (
    "rem-cycle is the long-term memory of past agent sessions, consolidated into a knowledge graph. "
    "Call `recall` with a question in plain words to get the facts and the verbatim past turns that answer it "
    "(each turn with its memory_id and session), packed into a token budget. Use `search_nodes` to find "
    "entities (classes, files, people, decisions…) by name and `show_node` for everything known about one. "
    "Every result is traceable to the turn it came from; nothing is written."
)
_READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)

Query = Annotated[str, Field(
    description="What to remember, in plain words (e.g. 'why does the drain quarantine torn lines?'). "
    f"Words are matched literally; quotes, *, NEAR, - are plain text. 1-{MAX_QUERY_CHARS} characters.",
    min_length=1, max_length=MAX_QUERY_CHARS,
)]
User = Annotated[str | None, Field(
    description="Only sessions of this user id count (omit for all sessions the server may show).", max_length=200,
)]
AsOf = Annotated[str | None, Field(
    description="Only what was known by this time: a date (2026-03-01 = end of that day), an ISO time or epoch "
    "seconds. Omit for now.", max_length=100,
)]


def _json_number(value: Any) -> Any:
    """``value`` for pydantic's integer check, unless it is JSON ``true``/``false`` or a string:
    pydantic's lax mode read ``true`` as 1 (Python's bool is an int) and ``"3"`` as 3. Refused as
    any other value that is no integer is (``2.5``), the same tool error naming the argument."""
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


# A tool argument is of the JSON type its schema names: a number (3, or 3.0, which JSON Schema
# counts as an integer) for an integer, true/false for a boolean (lax, "yes" and 1 were true). The
# bounds come before the validator: after it, pydantic wrote them into the schema as "ge"/"le",
# which no client reads, for "minimum"/"maximum".
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT), BeforeValidator(_json_number)]
Budget = Annotated[int, Field(ge=1, le=MAX_BUDGET_TOKENS), BeforeValidator(_json_number)]
Flag = Annotated[bool, Strict()]


# What a tool answers: the JSON object (its output schema) and, as the text the model reads, that
# object as compact JSON (see :func:`_answer`).
Answer = Annotated[CallToolResult, dict[str, Any]]


class McpConfigError(ValueError):
    """The MCP server cannot start as configured (the message says why)."""


def build_server(settings: Settings) -> MCPServer:
    """The MCP server with its three read-only tools over ``settings``' graph."""
    server = MCPServer(name="rem-cycle", instructions=INSTRUCTIONS)

    def scoped_user(user: str | None) -> str | None:
        pinned = settings.mcp_user
        if pinned is not None and user is not None and user != pinned:
            raise ToolError(f"this server only answers for user {pinned!r}")
        return pinned if pinned is not None else user

    async def recall(
        query: Query,
        user: User = None,
        session: Annotated[str | None, Field(description="Only this session id.", max_length=200)] = None,
        as_of: AsOf = None,
        limit: Annotated[Limit, Field(description="At most this many turns.")] = 10,
        budget_tokens: Annotated[Budget, Field(
            description="Pack the answer into about this many tokens; what does not fit is listed in `omitted`.",
        )] = settings.recall_budget_tokens,
        recency: Annotated[Flag, Field(description="Also rank newer turns higher.")] = False,
    ) -> Answer:
        """Recall facts, past turns (verbatim, with memory_id, session_id, turn_index, role, created_at and the
        signals that found them) and session summaries that answer a question. Turns are in rank order."""
        return await _answer(lambda: run_recall(settings, RecallRequest(
            query=query, user=scoped_user(user), session=session, as_of=parse_as_of(as_of), limit=limit,
            budget_tokens=budget_tokens, recency=recency,
        )))

    async def search_nodes_tool(
        query: Query,
        user: User = None,
        as_of: AsOf = None,
        limit: Annotated[Limit, Field(description="At most this many entities.")] = 10,
        budget_tokens: Annotated[Budget, Field(
            description="Pack the answer into about this many tokens: the best entities whole, in order; those that do "
            "not fit are listed in `omitted`.",
        )] = settings.recall_budget_tokens,
    ) -> Answer:
        """Find entities of the knowledge graph (concepts, classes, methods, files, issues, people, decisions…)
        whose name, aliases or description match the query; each with its description, the quote and turn
        (memory_id) it was first seen in, and its strongest relations, within a token budget. Use the returned
        `id` with show_node."""
        return await _answer(lambda: anyio.to_thread.run_sync(
            lambda: search_nodes(settings, query, user=scoped_user(user), as_of=parse_as_of(as_of), limit=limit,
                                 budget_tokens=budget_tokens)
        ))

    async def show_node_tool(
        node_id: Annotated[str, Field(description="An entity id from search_nodes or recall, e.g. CLASS:LazyEdgeQueue; "
                                      "or a session_id / memory_id recall returned.",
                                      min_length=1, max_length=512)],
        user: User = None,
        as_of: AsOf = None,
        budget_tokens: Annotated[Budget, Field(
            description="Pack the answer into about this many tokens: the entity, then as many of its turns as fit "
            "(a long one cut); the others are listed in `omitted`.",
        )] = settings.recall_budget_tokens,
    ) -> Answer:
        """Everything known about one entity: description, relations (strongest first, each with its evidence
        quote and memory_id) and the turns it was mentioned in (the 20 where it is most cited; `turns_total`
        says how many there are), verbatim, within a token budget. For a session or a turn (a session_id or
        memory_id from recall): the entities said in it, and a turn's own text."""
        async def shown() -> dict[str, Any]:
            scope = {"user": scoped_user(user), "as_of": parse_as_of(as_of)}
            view = await show_entity(settings, node_id, **scope, budget_tokens=budget_tokens)
            if view is None:
                raise ToolError(await unseen_entity(settings, normalize_graph_node_id(node_id), **scope))
            return view

        return await _answer(shown)

    for fn, name in ((recall, "recall"), (search_nodes_tool, "search_nodes"), (show_node_tool, "show_node")):
        server.add_tool(fn, name=name, annotations=_READ_ONLY, structured_output=True)
    return server


async def _answer(call: Any) -> CallToolResult:
    """Run a tool body; a bad argument, a missing graph or a graph database that cannot be read
    (down, damaged) is a tool error the model can read, and the server keeps serving. The answer's
    text is its compact JSON, the form its ``budget_tokens`` was packed by: the SDK's own text is
    indented, a quarter more (9,958 estimated tokens for the items of an 8,000-token recall)."""
    try:
        answer = await call()
        return CallToolResult(content=[TextContent(type="text", text=compact_json(answer))], structured_content=answer)
    except (RecallInputError, RecallTimeoutError, NoGraphError) as exc:
        raise ToolError(str(exc)) from exc
    except StoreError as exc:  # the operator's to fix: one line, not the SDK's bare "Error executing tool"
        message = redact(str(exc))
        log.warning("mcp tool could not read the graph", error=message)
        raise ToolError(f"the memory graph cannot be read: {message}") from exc


def is_loopback(host: str) -> bool:
    """``True`` for localhost and loopback addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = token.encode()

    def accepts(self, header: bytes) -> bool:
        """Whether an ``Authorization`` value carries the token; the scheme is case-insensitive
        (RFC 9110: ``bearer``, ``BEARER``), the token compared in constant time."""
        scheme, _, credentials = header.partition(b" ")
        return hmac.compare_digest(credentials.lstrip(b" "), self.expected) and scheme.lower() == b"bearer"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not self.accepts(given):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b'{"error":"missing or wrong bearer token"}'})
                return
        await self.app(scope, receive, send)


def http_app(settings: Settings) -> Any:
    """The streamable-HTTP ASGI app (``/mcp``), behind the bearer check when a token is set."""
    host = settings.mcp_host
    token = settings.mcp_token.get_secret_value() if settings.mcp_token else None
    if not is_loopback(host) and not token:
        raise McpConfigError(f"REM_MCP_TOKEN is required when REM_MCP_HOST ({host}) is not a loopback address")
    app = build_server(settings).streamable_http_app(host=host, transport_security=rebinding_guard(host))
    return BearerAuth(app, token) if token else app


def rebinding_guard(host: str) -> TransportSecuritySettings | None:
    """On a loopback address, the Host and Origin a request may carry: that address and the usual
    loopback names, so that a web page whose domain a DNS rebinding points at this address is
    refused (421/403). The SDK checks them only for ``127.0.0.1``, ``localhost`` and ``::1``;
    ``127.0.0.2`` served any page that asked, with no token required on loopback. Beyond
    loopback the bearer token guards it."""
    if not is_loopback(host):
        return None
    bound = f"[{host}]" if ":" in host else host
    names = list(dict.fromkeys([bound, "127.0.0.1", "localhost", "[::1]"]))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:*" for name in names],
    )


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(line: str) -> str:
    """``line`` (one JSON-RPC message) with each lone surrogate its JSON escapes spell (``"\\ud800"``,
    half of an emoji a client cut) replaced by U+FFFD, as the bytes that are not UTF-8 are. The SDK's
    parser refuses such a line and, over stdio, answers nothing: the client waited for ever for that
    call. Other lines are returned as they are (pairs of escapes decode to one character)."""
    if not _ESCAPED_SURROGATE.search(line):
        return line
    try:
        message = json.loads(line)
    except ValueError:
        return line  # not JSON: the SDK says so

    def replaced(value: Any) -> Any:
        if isinstance(value, str):
            return _SURROGATE.sub("\ufffd", value)
        if isinstance(value, list):
            return [replaced(v) for v in value]
        if isinstance(value, dict):
            return {replaced(k): replaced(v) for k, v in value.items()}
        return value

    return json.dumps(replaced(message)) + "\n"


class StdinLines:
    """The lines of file descriptor ``fd`` (stdin) for the SDK's stdio transport, read by a daemon
    thread.

    The SDK reads stdin in one of anyio's worker threads, which no cancellation can stop while it
    waits for a line: a Ctrl-C stopped nothing until the client sent something or closed the pipe
    (and the interpreter's exit waits for such a thread too). Here the waiting is on a memory stream,
    which a Ctrl-C cancels; the daemon thread, blocked in ``os.read`` (no Python buffer whose lock
    the interpreter's exit would need), ends with the process."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.send, self.receive = anyio.create_memory_object_stream[str](0)

    async def __aenter__(self) -> StdinLines:
        token = anyio.lowlevel.current_token()
        threading.Thread(target=self._pump, args=(token,), name="mcp-stdin", daemon=True).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.receive.close()

    def _pump(self, token: Any) -> None:
        def emit(line: bytes) -> None:
            anyio.from_thread.run(self.send.send, well_formed(line.decode("utf-8", errors="replace")), token=token)

        try:
            parts: list[bytes] = []
            try:
                while chunk := os.read(self.fd, 1 << 16):
                    start = 0
                    while (end := chunk.find(b"\n", start)) >= 0:
                        emit(b"".join([*parts, chunk[start:end + 1]]))
                        parts, start = [], end + 1
                    if start < len(chunk):
                        parts.append(chunk[start:])
            except OSError:
                pass  # stdin cannot be read any more: that is its end
            if parts:
                emit(b"".join(parts))
            anyio.from_thread.run_sync(self.send.close, token=token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.RunFinishedError):
            return  # the server stopped listening: nothing is left to read for

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        try:
            return await self.receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


def lowlevel_server(server: MCPServer) -> Any:
    """The SDK's low-level server inside ``server``, which :func:`serve_stdio` runs on streams of
    its own: ``MCPServer.run_stdio_async`` reads the process's stdin itself and takes no stream
    (mcp 2.3.0, the newest release; modelcontextprotocol/python-sdk#2343, which would add one, was
    closed), so the only way is the SDK's private ``_lowlevel_server``. pyproject
    pins mcp below the next minor release; an SDK that moved it anyway stops the server at start
    with :class:`McpConfigError`, never mid-session with an AttributeError."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if not all(callable(getattr(lowlevel, name, None)) for name in ("run", "create_initialization_options")):
        raise McpConfigError(
            f"the installed mcp SDK ({version('mcp')}) has no MCPServer._lowlevel_server.run, which `rem-cycle mcp` over "
            "stdio needs (the SDK offers no public way to serve given streams): install the mcp version pyproject.toml "
            "names (pip install 'mcp>=2.3,<2.4'), or use --http")
    return lowlevel


async def serve_stdio(settings: Settings) -> None:
    """Serve over stdin/stdout until the client closes stdin or the process is interrupted."""
    if sys.stdin is None:  # started with stdin closed (`rem-cycle mcp <&-`): no client can speak to it
        raise McpConfigError("stdin is closed: over stdio the MCP client starts `rem-cycle mcp` with pipes (or use --http)")
    lowlevel = lowlevel_server(build_server(settings))
    try:
        async with StdinLines(sys.stdin.fileno()) as lines, stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    except* BrokenPipeError:
        # The client stopped reading our stdout: end as every command whose reader went away does
        # (no message, exit 141), not with the task group's traceback and exit 1.
        raise BrokenPipeError(errno.EPIPE, "the client closed its end of stdout") from None


def warn_without_graph(settings: Settings) -> None:
    """Say on stderr when the server starts before its graph can be read. It serves anyway: each
    call opens the graph, so a client configured before the first cycle (or a database that is
    back) gets answers without a restart; until then every call is a tool error saying why."""
    try:
        if not database_exists(settings):
            log.warning("no graph database yet: every call is an error until a REM cycle creates it",
                        database=database_location(settings))
    except StoreError as exc:
        log.warning("the graph database cannot be read: every call is an error until it can", error=redact(str(exc)))


async def serve(settings: Settings, *, http: bool) -> None:
    """Serve until the client goes away (stdio: stdin closes) or the process is stopped (HTTP)."""
    if settings.mcp_user is not None:
        try:
            check_user(settings.mcp_user)
        except RecallInputError as exc:  # else every call would be refused with it
            raise McpConfigError(f"REM_MCP_USER: {exc}") from exc
    warn_without_graph(settings)
    if not http:
        await serve_stdio(settings)
        return
    import uvicorn

    app = http_app(settings)
    listening = listen(settings.mcp_host, settings.mcp_port)
    log.info("mcp server listening", url=f"http://{settings.mcp_host}:{settings.mcp_port}/mcp",
             auth="bearer" if settings.mcp_token else "none")
    # log_config=None: uvicorn's records go through the worker's log (worker.logs), not its own handlers.
    config = uvicorn.Config(app, host=settings.mcp_host, port=settings.mcp_port, log_level="warning", log_config=None,
                            lifespan="on", timeout_graceful_shutdown=5)
    server = _without_signal_handlers(config)
    # Stopped as the daemon is (worker.signals): SIGTERM, SIGINT or SIGHUP ends it gracefully, exit 0.
    async with stop_on_signals(grace_seconds=settings.grace_seconds) as stop, anyio.create_task_group() as tg:
        tg.start_soon(_shut_down_on, stop.event, server)
        await server.serve(sockets=[listening])
        tg.cancel_scope.cancel()


def _without_signal_handlers(config: uvicorn.Config) -> uvicorn.Server:
    """A uvicorn server that leaves signals to rem-cycle: uvicorn's own handlers raised the signal
    again once it had shut down, so SIGINT exited 130 and SIGTERM killed the process (-15), where
    the daemon exits 0."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


async def _shut_down_on(stop: anyio.Event, server: uvicorn.Server) -> None:
    """Ask ``server`` to shut down (gracefully: requests in flight finish) once ``stop`` is set."""
    await stop.wait()
    server.should_exit = True


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound here so that a port in use (or an address this host does
    not have) is one line and exit 1, said before "listening" is logged: uvicorn logged the failure
    after it and exited 3, which rem-cycle's exit codes reserve for "busy: a cycle holds the lock"."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise cannot_listen(host, port, exc) from exc
