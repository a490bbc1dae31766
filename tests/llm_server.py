"""A real OpenAI-compatible chat-completions server on 127.0.0.1 with scripted behaviour, for tests
and benchmarks (no mocks: the extractor talks HTTP to it like to Ollama or vLLM).

    with LLMServer() as llm:                      # or the ``llm_server`` pytest fixture
        llm.script(rate_limited(retry_after="1"), ok())          # next two chat requests
        llm.script(malformed(), match="CHUNK-B")                 # first request whose prompt has CHUNK-B
        answer = held(); llm.script(answer); ...; answer.release.set()  # in flight until the test says
        settings = load_settings(..., llm_base_url=llm.url, extractor="openai")
        ...
        assert llm.chat_count == 3

Behaviours are consumed in order per script; a request no script matches gets the default
(:func:`ok`, an extraction derived from the prompt: one CLASS node per CamelCase word of each turn,
cited with that turn's number). ``GET /v1/models`` answers a model list. Every request is recorded.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Content = str | dict[str, Any] | Callable[[dict[str, Any]], Any] | None


@dataclass(frozen=True)
class Reply:
    """A 200 answer. ``content``: a string (sent verbatim), a dict (sent as JSON), a callable of the
    request body, or ``None`` for :func:`auto_extraction`."""

    content: Content = None
    finish_reason: str = "stop"
    delay: float = 0.0
    usage: tuple[int, int] | None = None
    # as a real server: an answer longer than the request's ``max_tokens`` (4 characters a token)
    # is cut there, ``finish_reason: length``
    bounded: bool = False


@dataclass(frozen=True)
class Status:
    """A non-200 answer."""

    status: int
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class HangUp:
    """Close the connection without answering (a crashed or restarted server process)."""

    delay: float = 0.0


@dataclass(frozen=True)
class Trickle:
    """A 200 whose body arrives one byte every ``interval`` seconds: each read well within a read
    timeout, the whole answer far beyond the request's (a slow proxy, a server streaming slowly)."""

    content: Content = None
    interval: float = 0.1
    delay: float = 0.0
    finish_reason: str = "stop"
    usage: tuple[int, int] | None = None


@dataclass(frozen=True)
class Flood:
    """A 200 announcing and sending ``size`` bytes of a chat-completions answer, generated piece
    by piece (the server never holds it whole): a runaway or hostile server."""

    size: int
    delay: float = 0.0


# The longest a held answer waits for its release (a test that never releases it ends anyway).
HOLD_LIMIT_SECONDS = 300.0


@dataclass(frozen=True)
class Held:
    """``behaviour``, sent only once ``release`` is set or the server stops — never when it is
    killed (:meth:`LLMServer.kill` cuts the connection first). A test that must act while an
    answer is in flight (pause or kill the worker, kill the server) holds the answer instead of
    racing a delay, which a loaded machine can outlast before the test acts."""

    behaviour: "Reply | Status | HangUp | Trickle | Flood"
    release: threading.Event = field(default_factory=threading.Event, compare=False)


Behaviour = Reply | Status | HangUp | Trickle | Flood | Held


def ok(content: Content = None, *, delay: float = 0.0) -> Reply:
    return Reply(content, delay=delay)


def slow(seconds: float, content: Content = None) -> Reply:
    return Reply(content, delay=seconds)


def held(behaviour: Reply | Status | HangUp | Trickle | Flood | None = None) -> Held:
    """``behaviour`` (default :func:`ok`) held until the test sets ``.release``."""
    return Held(behaviour or ok())


def rate_limited(*, retry_after: str | None = "1") -> Status:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Status(429, '{"error": {"message": "rate limited"}}', headers)


def server_error(status: int = 500) -> Status:
    return Status(status, '{"error": {"message": "internal error"}}')


def context_overflow() -> Status:
    return Status(400, '{"error": {"message": "This model\'s maximum context length is 8192 tokens"}}')


def hang_up() -> HangUp:
    return HangUp()


def malformed() -> Reply:
    return Reply('{"nodes": [ {"name": "oops", ')


def truncated() -> Reply:
    return Reply('{"summary": "cut', finish_reason="length")


def bounded(content: Content = None) -> Reply:
    """An answer cut at the request's ``max_tokens`` when longer, as a model's output limit cuts it."""
    return Reply(content, bounded=True)


def empty(*, read: bool = True) -> Reply:
    """An empty answer; ``read=False``: with no prompt tokens reported (the server says nothing of
    what it read)."""
    return Reply("") if read else Reply("", usage=(0, 0))


def out_of_range_turns() -> Reply:
    """An extraction citing turn 99 (and 0): numbers the chunk does not have."""
    return Reply(
        lambda body: {
            "summary": "",
            "nodes": [
                {"id": "n1", "type": "CONCEPT", "name": "phantom", "evidence": [{"turn": 99, "quote": "anything"}]},
                {"id": "n2", "type": "CONCEPT", "name": "zero", "evidence": [{"turn": 0, "quote": "nothing"}]},
            ],
            "edges": [],
        }
    )


_TURN = re.compile(r"^\[(\d+)\](?: \([^)]*\))? (.*)$")
_CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b")


def prompt_turns(body: dict[str, Any]) -> list[tuple[int, str]]:
    """``(number, text)`` of the turns in a request's first user message."""
    user = next((m["content"] for m in body.get("messages", []) if m.get("role") == "user"), "")
    turns: list[tuple[int, str]] = []
    for line in user.splitlines():
        match = _TURN.match(line)
        if match:
            turns.append((int(match.group(1)), match.group(2)))
        elif turns:
            turns[-1] = (turns[-1][0], turns[-1][1] + "\n" + line)
    return turns


def auto_extraction(body: dict[str, Any]) -> dict[str, Any]:
    """A valid extraction of the prompt: a CLASS node per CamelCase word (first mention cited),
    and a RELATES_TO edge between the first two of each turn."""
    nodes: dict[str, dict[str, Any]] = {}
    edges = []
    for number, text in prompt_turns(body):
        words = list(dict.fromkeys(_CAMEL.findall(text)))
        for word in words:
            nodes.setdefault(
                word,
                {"id": word, "type": "CLASS", "name": word, "description": f"{word} as discussed",
                 "confidence": 0.8, "evidence": [{"turn": number, "quote": word}]},
            )
        if len(words) >= 2:
            edges.append({"source": words[0], "target": words[1], "relationship": "DEPENDS_ON",
                          "justification": "said together", "evidence": [{"turn": number, "quote": words[0]}]})
    return {"summary": f"{len(nodes)} entities", "nodes": list(nodes.values()), "edges": edges}


def judge_check_answer(prompt: str) -> dict[str, Any] | None:
    """The right answer to a question of the model judge's check (:data:`pipelines.judge.JUDGE_CHECK`),
    or ``None`` when ``prompt`` is no such question."""
    from pipelines.judge import JUDGE_CHECK

    try:
        new = json.loads(prompt)["new"]
    except (ValueError, TypeError, KeyError):
        return None
    for quotes, right in JUDGE_CHECK:
        if isinstance(new, dict) and new.get("id") in quotes and new.get("quotes") == list(quotes[new["id"]]):
            return {"verdict": "link", "target": right} if right else {"verdict": "create"}
    return None


def _refusal(body: dict[str, Any], refuses: tuple[str, ...]) -> dict[str, Any] | None:
    """OpenAI's HTTP 400 error object for the first parameter of ``refuses`` the request sends
    (``temperature`` only when other than 1), or ``None``."""
    if "max_tokens" in refuses and "max_tokens" in body:
        return {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                     "Use 'max_completion_tokens' instead.",
                          "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}
    if "temperature" in refuses and body.get("temperature", 1) != 1:
        return {"error": {"message": f"Unsupported value: 'temperature' does not support {body['temperature']} with this "
                                     "model. Only the default (1) value is supported.",
                          "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}
    return None


def thinking(content: Content = None, *, opened: bool = True) -> Reply:
    """An answer (default :func:`auto_extraction`) after a reasoning block, as a reasoning model
    writes it through a server with no reasoning parser: ``<think>…</think>`` first, or only the
    closing tag when the chat template opened the block (``opened=False``)."""

    def wrapped(body: dict[str, Any]) -> str:
        answer = content(body) if callable(content) else auto_extraction(body) if content is None else content
        text = answer if isinstance(answer, str) else json.dumps(answer)
        thought = 'Okay, the user wants a graph. The schema says {"nodes": [...]}. Let me list the names.\n'
        return f"{'<think>' if opened else ''}\n{thought}</think>\n\n{text}"

    return Reply(wrapped)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    at: float

    @property
    def prompt(self) -> str:
        """The first user message of a chat request ("" otherwise)."""
        messages = (self.body or {}).get("messages", [])
        return next((m["content"] for m in messages if m.get("role") == "user"), "")


class LLMServer:
    """The server; start/stop it, or use it as a context manager."""

    def __init__(self, *, model: str = "test-model", default: Behaviour | None = None, port: int = 0,
                 models: Trickle | Flood | Status | None = None, passes_judge_check: bool = True,
                 refuses: tuple[str, ...] = (), context_window: int | None = None, over_window: str = "cut") -> None:
        self.model = model
        # a prompt longer than ``context_window`` tokens (4 bytes a token) is, by
        # ``over_window``, "cut" as Ollama cuts it — the front dropped, about half the window kept
        # from the end and answered, only that reported read, no error — or "refuse"d with HTTP 400
        # as llama.cpp's server refuses it
        self.context_window = context_window
        self.over_window = over_window
        # request parameters refused as OpenAI refuses them for its reasoning models (HTTP 400, its
        # error object): "max_tokens" (say max_completion_tokens), "temperature" (other than 1)
        self.refuses = refuses
        # answer the model judge's check (pipelines.judge.JUDGE_CHECK) right, as a capable model
        # does, before any script, and record its questions in ``check_requests``, not ``requests``
        # (they are no question about the graph): False leaves them to the scripts and the default
        self.passes_judge_check = passes_judge_check
        self.check_requests: list[Recorded] = []
        self.models = models  # how ``GET /models`` misbehaves (its content is the model list, but for a Status)
        self.port = port  # 0 = any free port; a fixed one lets a test restart "the same" server
        self.default: Behaviour = default or ok()
        self.requests: list[Recorded] = []
        self._scripts: list[tuple[str | None, list[Behaviour]]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._holding: list[Held] = []  # held answers handed out: let go when the server stops
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> "LLMServer":
        handler = _handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.port = self._httpd.server_address[1]
        self._httpd.daemon_threads = True
        self._httpd.request_queue_size = 128
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop_listening()
        self._let_held_go()

    def kill(self) -> None:
        """Go away like a crashed process: stop listening and cut every open connection
        (``stop`` alone leaves keep-alive connections served); a held answer is never sent."""
        self._stop_listening()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._let_held_go()

    def _stop_listening(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def _let_held_go(self) -> None:
        """Release the handler threads still holding an answer (they exit; their client is gone
        or its connection cut)."""
        with self._lock:
            holding, self._holding = self._holding, []
        for hold in holding:
            hold.release.set()

    def __enter__(self) -> "LLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL to give the extractor (``REM_LLM_BASE_URL``), ending in ``/v1``."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    # --- scripting ----------------------------------------------------------------------
    def script(self, *behaviours: Behaviour, match: str | None = None) -> None:
        """Queue behaviours for the next chat requests (those whose prompt contains ``match``)."""
        with self._lock:
            self._scripts.append((match, list(behaviours)))

    def reset(self) -> None:
        """Forget scripts and recorded requests."""
        with self._lock:
            self._scripts.clear()
            self.requests.clear()
            self.check_requests.clear()

    @property
    def chat_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def chat_count(self) -> int:
        return len(self.chat_requests)

    def _next(self, prompt: str) -> Behaviour:
        with self._lock:
            for match, queue in self._scripts:
                if queue and (match is None or match in prompt):
                    behaviour = queue.pop(0)
                    break
            else:
                behaviour = self.default
            if isinstance(behaviour, Held):
                self._holding.append(behaviour)
        return behaviour

    def _record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)


def _handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms.
        disable_nagle_algorithm = True

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server._connections.add(self.connection)

        def finish(self) -> None:
            with server._lock:
                server._connections.discard(self.connection)
            super().finish()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
            return

        def do_GET(self) -> None:  # noqa: N802
            server._record(Recorded("GET", self.path, dict(self.headers), None, time.monotonic()))
            if self.path.rstrip("/").endswith("/models"):
                if isinstance(server.models, Flood):
                    self._flood(server.models.size)
                    return
                if isinstance(server.models, Status):  # a provider with no models list
                    self._send(server.models.status, server.models.body, server.models.headers)
                    return
                self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]},
                           interval=server.models.interval if isinstance(server.models, Trickle) else 0.0)
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "request body is not JSON"}})
                return
            if self.path.rstrip("/").endswith("/chat/completions") and "messages" not in body:
                # As a real server validates a request before any model works on it (not recorded).
                self._send(400, {"error": {"message": "'messages' is a required property"}})
                return
            recorded = Recorded("POST", self.path, dict(self.headers), body, time.monotonic())
            right = judge_check_answer(recorded.prompt) if server.passes_judge_check else None
            if right is not None:
                with server._lock:
                    server.check_requests.append(recorded)
            else:
                server._record(recorded)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": "not found"}})
                return
            refusal = _refusal(body, server.refuses)
            if refusal is not None:
                self._send(400, refusal)
                return
            # 4 bytes a token: any tokenizer spends at least a token on a character of 4 bytes
            read = sum(len(m.get("content", "").encode()) for m in body.get("messages", [])) // 4
            if server.context_window is not None and read > server.context_window:
                if server.over_window == "refuse":
                    self._send(400, {"error": {"code": 400, "type": "exceed_context_size_error", "message": (
                        f"request ({read} tokens) exceeds the available context size ({server.context_window} tokens), "
                        "try increasing it")}})
                    return
                read = server.context_window // 2 + 2
                kept = recorded.prompt.encode()[-4 * (server.context_window // 2):].decode("utf-8", "ignore")
                body = {**body, "messages": [{"role": "user", "content": kept}]}
            behaviour = Reply(right) if right is not None else server._next(recorded.prompt)
            if isinstance(behaviour, Held):
                behaviour.release.wait(HOLD_LIMIT_SECONDS)
                behaviour = behaviour.behaviour
            if behaviour.delay:
                time.sleep(behaviour.delay)
            if isinstance(behaviour, HangUp):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if isinstance(behaviour, Status):
                self._send(behaviour.status, behaviour.body, behaviour.headers)
                return
            if isinstance(behaviour, Flood):
                self._flood(behaviour.size)
                return
            content = behaviour.content
            if content is None:
                content = auto_extraction(body)
            elif callable(content):
                content = content(body)
            text = content if isinstance(content, str) else json.dumps(content)
            finish_reason = behaviour.finish_reason
            limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
            if isinstance(behaviour, Reply) and behaviour.bounded and limit and len(text) > 4 * limit:
                text, finish_reason = text[: 4 * limit], "length"
            # an answer stopped at the output limit is as long as the request let it be
            spent = limit if finish_reason == "length" else 0
            usage = behaviour.usage or (read, spent or len(text) // 4)
            self._send(
                200,
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "model": body.get("model", server.model),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": finish_reason}],
                    "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                              "total_tokens": usage[0] + usage[1]},
                },
                interval=behaviour.interval if isinstance(behaviour, Trickle) else 0.0,
            )

        def _flood(self, size: int) -> None:
            head = b'{"choices": [{"message": {"role": "assistant", "content": "'
            tail = b'"}, "finish_reason": "stop"}]}'
            piece = b"x" * 65536
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.wfile.write(head)
                left = size - len(head) - len(tail)
                while left > 0:
                    self.wfile.write(piece[: min(left, len(piece))])
                    left -= len(piece)
                self.wfile.write(tail)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None, *, interval: float = 0.0) -> None:
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if not interval:
                    self.wfile.write(data)
                for index in range(len(data) if interval else 0):
                    self.wfile.write(data[index : index + 1])
                    self.wfile.flush()
                    time.sleep(interval)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    return Handler


@pytest.fixture
def llm_server() -> Iterator[LLMServer]:
    """A started :class:`LLMServer`, stopped after the test."""
    with LLMServer() as server:
        yield server
