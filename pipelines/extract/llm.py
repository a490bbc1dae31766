"""The ``openai`` extractor: any OpenAI-compatible chat-completions server (Ollama, vLLM, llama.cpp
server, LM Studio, OpenAI).

One unit = one conversation: the prompt shows the turns with local numbers ``[1] …``; the answer
must be JSON in the model schema (:mod:`pipelines.extract.model`). Structured output is asked for
with ``response_format`` (``json_schema``, else ``json_object``, else nothing — a server that
rejects a mode is asked again one mode lower, and the extractor remembers; likewise a server that
refuses ``max_tokens`` or ``temperature`` as OpenAI's reasoning models do is asked again with
``max_completion_tokens`` or the default temperature, no try of the chunk). Transport failures
(connection errors and connect timeouts, HTTP 429/5xx) are retried with exponential backoff
honouring a capped ``Retry-After``; an answer that did not arrive in time is not asked for again
(the server may still be generating it: the chunk is retried after its backoff). The timeout
bounds the whole answer, and its size is capped. An answer's JSON is read through the wrapping
models put around it (a code fence, a reasoning block, a sentence around a fenced block); JSON
still unreadable gets one repair round. Every
failure ends as an :class:`ExtractionFailure` with one of the six kinds.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any

import anyio
import httpx

from config import Settings
from pipelines.chunker import estimate_tokens
from pipelines.extract.model import (
    EMPTY_ANSWER,
    SCHEMA_VERSION,
    SEMANTIC_RELATIONSHIPS,
    ExtractionFailure,
    ExtractorReply,
    WorkUnit,
    prompt_cut,
    response_schema,
    schema_example,
    turn_line,
)
from store.library_log import get_logger

log = get_logger(__name__)

PROMPT_VERSION = 2
JSON_MODES: tuple[str, ...] = ("json_schema", "json_object", "none")
MAX_RETRY_AFTER_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 30.0
MAX_TOKEN_COUNT = 2**40
# An answer is at most REM_OUTPUT_RESERVE_TOKENS tokens, a few hundred KiB of JSON: anything near this
# is a runaway or hostile server.
MAX_RESPONSE_BYTES = 16 * 2**20
# Answers that refuse any request without working on it, whatever its text: credentials refused,
# rate limit or quota, bad gateway, unavailable (no such model or URL: NO_ENDPOINT_STATUSES, met
# first). (Not 403: a firewall in front of the server may refuse one prompt for what it says.)
OUTAGE_STATUSES = frozenset({401, 429, 502, 503})
# Answers that say no endpoint is there for the request (no such path, method not allowed or not
# implemented — a static web server, or REM_LLM_BASE_URL without its ``/v1``): a configuration
# failure, no chunk's, that no retry and no backoff mends.
NO_ENDPOINT_STATUSES = frozenset({404, 405, 501})
# A 404 whose words say the server lacks the model asked for (OpenAI's ``model_not_found``,
# Ollama's ``model "…" not found``, vLLM's ``The model `…` does not exist``): the API is there.
_MODEL_UNKNOWN = re.compile(r"model_not_found|\bmodel\b.{0,120}?\b(not found|does not exist|not exist|unknown|not available)"
                            r"|\b(unknown|no such) model\b", re.I | re.S)
_CONTEXT_OVERFLOW = re.compile(r"context[ _-]?(length|window|size)|maximum context|too many tokens|prompt is too long|exceeds", re.I)
_FORMAT_REJECTED = re.compile(r"response_format|json_schema|json_object|structured", re.I)
# Request parameters a server may refuse whole for the model asked (OpenAI's o-series and GPT-5
# family: "Unsupported parameter: 'max_tokens' … Use 'max_completion_tokens' instead.",
# "Unsupported value: 'temperature' does not support 0 with this model."), and how a request
# says what it meant without them.
ADAPTABLE_PARAMETERS = ("max_tokens", "temperature")
_PARAMETER_REFUSED = re.compile(r"\b(max_tokens|temperature)\b'?\s+(?:is\s+not\s+supported|is\s+unsupported|does\s+not\s+support)", re.I)

# The JSON schema sent with ``response_format`` and the example in the prompt both come from the
# one model of the answer (pipelines.extract.model.ExtractionSpec), which validation reads too.
RESPONSE_SCHEMA: dict[str, Any] = response_schema()
_SCHEMA_EXAMPLE = json.dumps(schema_example(), ensure_ascii=False)


def system_prompt(semantic_types: Sequence[str]) -> str:
    """The instructions: what to extract and the exact JSON shape."""
    return (
        "You extract a knowledge graph from a conversation between a user, an AI agent and its tools.\n"
        "Reply with ONE JSON object and nothing else, shaped like this (confidence is 0.0-1.0):\n"
        f"{_SCHEMA_EXAMPLE}\n"
        f"Node types: {', '.join(semantic_types)}.\n"
        f"Relationships: {', '.join(SEMANTIC_RELATIONSHIPS)}.\n"
        "Turns are numbered [1], [2], …: cite those numbers. Every quote must be copied verbatim from "
        "the cited turn (a few words); a speaker may be cited by the name in parentheses. Extract "
        "durable knowledge (code entities, files, issues, decisions, strategies, people, places, "
        "works, organisations, tools), not chit-chat, greetings, numbers or hashes."
    )


def user_prompt(unit: WorkUnit) -> str:
    """The unit's turns with their local numbers (never the raw Chroma ids)."""
    lines = [f"Session {unit.session_id}, part {unit.unit_id.removeprefix(unit.session_id + ':')}. Turns:"]
    lines.extend(turn_line(turn.number, turn.role, turn.text) for turn in unit.turns)
    return "\n".join(lines)


class OpenAIExtractor:
    """Extraction through an OpenAI-compatible ``/chat/completions`` endpoint.

    Use as an async context manager (it owns an ``httpx.AsyncClient``). ``backoff_base`` and
    ``retry_after_cap`` exist so tests can keep their sleeps short.
    """

    name = "openai"

    def __init__(
        self,
        settings: Settings,
        *,
        backoff_base: float = 0.5,
        retry_after_cap: float = MAX_RETRY_AFTER_SECONDS,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.base_url = settings.llm_base_url.rstrip("/")
        self.backoff_base = backoff_base
        self.retry_after_cap = retry_after_cap
        self.json_mode = settings.llm_json_mode
        # what the server was seen to refuse (ADAPTABLE_PARAMETERS): requests say it another way
        self.refused_parameters: set[str] = set()
        self.prompt_cut_seen = False  # said once an extractor (a cycle or command)
        self._client = client
        self._own_client = client is None
        self._system = system_prompt(settings.semantic_types)

    @property
    def fingerprint(self) -> str:
        # The prompt and the schema themselves are in the basis: changing either re-extracts.
        basis = json.dumps(
            [self.name, self.settings.llm_model, PROMPT_VERSION, SCHEMA_VERSION, list(self.settings.semantic_types),
             self._system, RESPONSE_SCHEMA]
        )
        return f"openai:{self.settings.llm_model}:p{PROMPT_VERSION}:s{SCHEMA_VERSION}:{hashlib.sha256(basis.encode()).hexdigest()[:12]}"

    async def __aenter__(self) -> "OpenAIExtractor":
        if self._client is None:
            headers = {"Content-Type": "application/json"}
            if self.settings.llm_api_key is not None:
                headers["Authorization"] = f"Bearer {self.settings.llm_api_key.get_secret_value()}"
            limits = httpx.Limits(max_connections=self.settings.llm_concurrency * 2)
            self._client = httpx.AsyncClient(
                headers=headers, timeout=httpx.Timeout(self.settings.llm_timeout_seconds), limits=limits
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._own_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def ping(self) -> None:
        """Raise :class:`ExtractionFailure` ``provider-error`` unless the server answers ``GET /models``
        (any answer below 500 except 401/403, a redirect, 404 and 405 counts: some servers refuse
        to list models; one sending the client elsewhere is no API to use, see :func:`misdirected`).
        A 404 or 405 there is asked again of the chat endpoint, with a request no model works on:
        some providers serve chat completions and no models list."""
        status, wrong = await self._knock("GET", "/models")
        if wrong is not None and status in NO_ENDPOINT_STATUSES:
            # An empty object: a server validates it and refuses it (400/422) before any model
            # works, so nothing is paid; "no endpoint" again means there is none.
            status, chat_wrong = await self._knock("POST", "/chat/completions", body={})
            # The chat endpoint's own wrong answer (a redirect) says more than the list's missing
            # endpoint, unless it is a missing endpoint too.
            wrong = None if chat_wrong is None else wrong if status in NO_ENDPOINT_STATUSES else chat_wrong
        if wrong is not None:
            raise ExtractionFailure("provider-error", wrong)
        if status in (401, 403) or status >= 500:
            raise ExtractionFailure("provider-error", f"LLM server {self.base_url} answered HTTP {status}")

    async def _knock(self, method: str, path: str, *, body: dict[str, Any] | None = None) -> tuple[int, str | None]:
        """The status of one request to ``path`` whose answer is never read (a model list, or a
        runaway stream), and what :func:`misdirected` says of it; ``provider-error`` when the server
        does not answer within 10 s."""
        assert self._client is not None, "use the extractor as an async context manager"
        seconds = min(10.0, self.settings.llm_timeout_seconds)
        try:
            with anyio.fail_after(seconds):  # the whole exchange, not each read (see _post)
                async with self._client.stream(method, f"{self.base_url}{path}", json=body) as response:
                    pass
        except TimeoutError as exc:
            raise ExtractionFailure("provider-error", f"LLM server {self.base_url} did not answer within {seconds:g}s") from exc
        except httpx.HTTPError as exc:
            raise ExtractionFailure("provider-error", f"LLM server {self.base_url} unreachable: {exc}") from exc
        return response.status_code, misdirected(self.base_url, self.settings.llm_model, method, path, response)

    async def extract(self, unit: WorkUnit) -> ExtractorReply:
        messages = [{"role": "system", "content": self._system}, {"role": "user", "content": user_prompt(unit)}]
        prompt_tokens = sum(estimate_tokens(m["content"]) for m in messages)
        band = min(self.settings.effective_safe_limit, self.settings.context_limit_tokens - self.settings.output_reserve_tokens)
        if prompt_tokens > band:
            raise ExtractionFailure("skip-over-band", f"prompt of ~{prompt_tokens} tokens exceeds the {band}-token band")
        usage = [0, 0]
        content = await self._complete(messages, usage, prompt_tokens=prompt_tokens)
        try:
            return ExtractorReply(parse_json_reply(content), usage[0], usage[1])
        except ValueError as exc:
            log.info("llm reply not JSON, asking for a repair", unit_id=unit.unit_id, error=str(exc))
            repair = [
                *messages,
                {"role": "assistant", "content": content},
                {"role": "user", "content": f"That was not valid JSON ({exc}). Reply with only the JSON object."},
            ]
            content = await self._complete(repair, usage)
            try:
                return ExtractorReply(parse_json_reply(content), usage[0], usage[1])
            except ValueError as again:
                raise ExtractionFailure(
                    "schema-failure", f"invalid JSON after one repair: {again}", tokens_in=usage[0], tokens_out=usage[1]
                ) from None

    async def complete_json(self, messages: list[dict[str, str]], *, schema_name: str, schema: dict[str, Any]) -> Any:
        """One structured chat completion besides extraction (community naming, identity auditing):
        the same transport, retries and JSON-mode fallback, another schema. Returns the parsed JSON;
        ``ValueError`` when the answer is not JSON, :class:`ExtractionFailure` when the call failed."""
        return load_reply_json(await self._complete(messages, [0, 0], schema=(schema_name, schema)))

    async def _complete(
        self, messages: list[dict[str, str]], usage: list[int], *, schema: tuple[str, dict[str, Any]] = ("extraction", RESPONSE_SCHEMA),
        prompt_tokens: int = 0,
    ) -> str:
        """One chat completion with retries; returns the message content. ``prompt_tokens``: the
        prompt's estimate, against which the tokens the server says it read tell a prompt cut to
        its context window (:func:`prompt_cut`) and an empty answer to a prompt read whole."""
        assert self._client is not None, "use the extractor as an async context manager"
        attempt = 0
        while True:
            json_mode = self.json_mode
            body = self._body(messages, schema, json_mode)
            try:
                response, raw = await self._post(body)
            except (httpx.TimeoutException, TimeoutError) as exc:
                failure = ExtractionFailure("timeout", f"no answer within {self.settings.llm_timeout_seconds}s: {exc!r}")
                if not isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
                    # The request reached the server, which may still be generating the answer:
                    # asking again now would pay for the same text again. A later cycle retries the
                    # chunk after its backoff.
                    failure.tokens_in, failure.tokens_out = usage
                    raise failure from None
                failure.outage = isinstance(exc, httpx.ConnectTimeout)
                delay = None
            except httpx.HTTPError as exc:
                # A refused connection sent nothing: the server is gone, which is no fault of the
                # chunk — and, unless an earlier request of this unit was paid for, no try of it.
                refused = isinstance(exc, httpx.ConnectError)
                failure = ExtractionFailure("provider-error", f"connection failed: {exc!r}", outage=refused,
                                            unsent=refused and not any(usage))
                delay = None
            else:
                if response.status_code == 200:
                    return self._content(raw, usage, prompt_tokens)
                text = raw[:500].decode("utf-8", "replace")
                refused = refused_parameter(raw) if response.status_code == 400 else None
                if refused is not None and refused in body:
                    # Refused before any model worked on it: no try of the chunk. Asked again
                    # without the parameter unless the request would still send it (the server
                    # refuses what a request says instead, too: its failure below).
                    if refused not in self.refused_parameters:
                        self.refused_parameters.add(refused)
                        log.warning("LLM server refused a request parameter, sending it another way", parameter=refused)
                    if refused not in self._body(messages, schema, self.json_mode):
                        continue
                if response.status_code == 400 and json_mode != "none" and _FORMAT_REJECTED.search(text):
                    # One mode below the one this request sent: calls in flight together are all
                    # refused the same mode, and each must not lower the mode again.
                    lower = JSON_MODES[JSON_MODES.index(json_mode) + 1]
                    if JSON_MODES.index(lower) > JSON_MODES.index(self.json_mode):
                        self.json_mode = lower
                        log.warning("LLM server rejected the response format, falling back", json_mode=lower)
                    continue
                if response.status_code in (400, 413) and _CONTEXT_OVERFLOW.search(text):
                    raise ExtractionFailure("context-overflow", f"HTTP {response.status_code}: {text}")
                wrong = misdirected(self.base_url, self.settings.llm_model, "POST", "/chat/completions", response, text)
                if wrong is not None:
                    # Not a try of the chunk: no model worked on it (unsent, unless an earlier
                    # request of this unit was paid for), and no retry mends the address.
                    raise ExtractionFailure("provider-error", wrong, tokens_in=usage[0], tokens_out=usage[1],
                                            outage=True, unsent=not any(usage))
                failure = ExtractionFailure("provider-error", f"HTTP {response.status_code}: {text}",
                                            outage=response.status_code in OUTAGE_STATUSES)
                if response.status_code not in (408, 409, 429) and response.status_code < 500:
                    raise failure
                delay = retry_after_seconds(response.headers.get("Retry-After"), cap=self.retry_after_cap)
            if attempt >= self.settings.llm_max_retries:
                failure.tokens_in, failure.tokens_out = usage
                raise failure
            attempt += 1
            if delay is None:
                delay = min(MAX_BACKOFF_SECONDS, self.backoff_base * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
            log.info("llm call failed, retrying", kind=failure.kind, error=str(failure)[:200], attempt=attempt, delay_s=round(delay, 3))
            await anyio.sleep(delay)

    async def _post(self, body: dict[str, Any]) -> tuple[httpx.Response, bytes]:
        """One request and its answer's bytes, the whole exchange within ``REM_LLM_TIMEOUT_SECONDS``
        (httpx's timeout bounds each read, so an answer trickling in would never time out) and the
        answer within :data:`MAX_RESPONSE_BYTES` (``provider-error`` beyond: a runaway server never
        fills the worker's memory)."""
        assert self._client is not None
        with anyio.fail_after(self.settings.llm_timeout_seconds):
            async with self._client.stream("POST", f"{self.base_url}/chat/completions", json=body) as response:
                parts: list[bytes] = []
                size = 0
                async for part in response.aiter_bytes():
                    size += len(part)
                    if size > MAX_RESPONSE_BYTES:
                        raise ExtractionFailure(
                            "provider-error", f"the answer is larger than {MAX_RESPONSE_BYTES // 2**20} MiB; stopped reading it"
                        )
                    parts.append(part)
        return response, b"".join(parts)

    def _body(self, messages: list[dict[str, str]], schema: tuple[str, dict[str, Any]], json_mode: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.settings.llm_model, "messages": messages}
        if "temperature" not in self.refused_parameters:
            body["temperature"] = 0
        # max_completion_tokens: OpenAI's newer name, which its reasoning models require and some
        # other servers do not know; the answer's cap either way.
        limit = "max_completion_tokens" if "max_tokens" in self.refused_parameters else "max_tokens"
        body[limit] = self.settings.output_reserve_tokens
        if json_mode == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": schema[0], "schema": schema[1]}}
        elif json_mode == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def _content(self, raw: bytes, usage: list[int], prompt_tokens: int = 0) -> str:
        try:
            data = load_json(raw)
            choice = data["choices"][0]
            message = choice.get("message", {})
            content, refusal = message.get("content"), message.get("refusal")
            finish = choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ExtractionFailure("provider-error", f"not a chat-completions answer: {exc!r}") from None
        if isinstance(content, list):  # content parts: [{"type": "text", "text": …}, …]
            content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        counts = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        read = _token_count(counts.get("prompt_tokens"))
        usage[0] += read
        usage[1] += _token_count(counts.get("completion_tokens"))
        if prompt_cut(prompt_tokens, read):
            # An answer of the prompt's end only (whatever its shape): stored, it would be the
            # chunk's answer and the turns cut off lost. The map asks the chunk's halves instead.
            if not self.prompt_cut_seen:
                self.prompt_cut_seen = True
                log.warning("LLM server cut a prompt to its context window: set REM_CONTEXT_LIMIT_TOKENS to that "
                            "window (Ollama: OLLAMA_CONTEXT_LENGTH); chunks are asked in halves meanwhile",
                            read_tokens=read, prompt_tokens=prompt_tokens)
            raise ExtractionFailure(
                "context-overflow",
                f"the server read {read} of the prompt's ~{prompt_tokens} tokens: it cut the prompt to its context "
                "window (set REM_CONTEXT_LIMIT_TOKENS to that window; Ollama's is OLLAMA_CONTEXT_LENGTH)",
                tokens_in=usage[0], tokens_out=usage[1],
            )
        if finish == "length":
            raise ExtractionFailure("truncated-output", "the answer hit the output limit (finish_reason=length)",
                                    tokens_in=usage[0], tokens_out=usage[1])
        if finish == "content_filter":
            # What is left is not the whole answer, even when it parses: never the chunk's extraction.
            raise ExtractionFailure("schema-failure", "the server's content filter cut the answer (finish_reason=content_filter)",
                                    tokens_in=usage[0], tokens_out=usage[1])
        if isinstance(refusal, str) and refusal.strip() and not (isinstance(content, str) and content.strip()):
            raise ExtractionFailure("schema-failure", f"the model refused: {refusal.strip()[:300]}",
                                    tokens_in=usage[0], tokens_out=usage[1])
        if not (isinstance(content, str) and content.strip()) and any(
            isinstance(message.get(key), str) and message[key].strip() for key in REASONING_FIELDS
        ):
            # A reasoning model that thought and never answered: the context held the prompt.
            raise ExtractionFailure("schema-failure", "the model reasoned and gave no answer (empty content)",
                                    tokens_in=usage[0], tokens_out=usage[1])
        if not isinstance(content, str) or not content.strip():
            if prompt_tokens and read:
                # The server says it read the prompt, and did not cut it (above): the context held
                # it, so this is no overflow its halves would mend.
                raise ExtractionFailure("schema-failure", f"empty answer to a prompt the server read whole ({read} tokens)",
                                        tokens_in=usage[0], tokens_out=usage[1])
            # The earlier system's lesson: an empty answer means the prompt overflowed the context.
            raise ExtractionFailure("context-overflow", EMPTY_ANSWER, tokens_in=usage[0], tokens_out=usage[1])
        return content


def misdirected(base_url: str, model: str, method: str, path: str, response: httpx.Response, said: str = "") -> str | None:
    """What to say of an answer that no model worked on because the request went to the wrong
    place — a redirect (followed by no request: the key and the prompt go only where the user sent
    them), no endpoint there (:data:`NO_ENDPOINT_STATUSES`: the URL and its usual cause), or a 404
    whose words (``said``, the start of the answer) say the server lacks ``model`` — or ``None``.
    A configuration failure: no retry and no backoff mends it."""
    status = response.status_code
    asked = f"{method} {base_url}{path}"
    if 300 <= status < 400:
        target = response.headers.get("location")
        if not target:
            return f"LLM server {base_url} redirects {asked} (HTTP {status}) and says not where; check REM_LLM_BASE_URL"
        target = str(response.request.url.join(target))
        # The base the target implies (a trailing slash the server adds is no part of it).
        base = target.rstrip("/").removesuffix(path) if target.rstrip("/").endswith(path) else target
        advice = (f"set REM_LLM_BASE_URL to the address it redirects to ({base})" if base != base_url
                  else "the server redirects to its own address; check its routes or the proxy in front of it")
        return f"LLM server {base_url} redirects {asked} to {target} (HTTP {status}), and rem-cycle follows no redirect: {advice}"
    if status not in NO_ENDPOINT_STATUSES:
        return None
    words = " ".join(said.split())[:200]
    if status == 404 and _MODEL_UNKNOWN.search(said):
        # The advice before the server's words: a log line keeps only the start of a long message.
        return (f"LLM server {base_url} has no model {model} (set REM_LLM_MODEL to one GET {base_url}/models lists): "
                f"{asked} answered HTTP {status}: {words}")
    hint = (f"; REM_LLM_BASE_URL usually ends in /v1 (try {base_url}/v1)" if not base_url.endswith("/v1")
            else "; check REM_LLM_BASE_URL")
    if said:
        hint += f" (or REM_LLM_MODEL, if it names a model the server lacks): {words}"
    return f"LLM server {base_url} has no OpenAI-compatible API there: {asked} answered HTTP {status}{hint}"


def _token_count(value: Any) -> int:
    """A usage figure as an int; a server's ``"many"``, ``null``, negative or non-finite figure is 0
    and an absurd one is capped (SQLite integers are 64-bit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return int(min(max(value, 0), MAX_TOKEN_COUNT))


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)
_FENCED_BLOCK = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.S)
# A reasoning model served without a reasoning parser (DeepSeek-R1 and its distillations, Qwen3 or
# QwQ behind a server or API that passes the thinking through) thinks in the answer, before the
# JSON: ``<think>…</think>``, or only the closing tag when the chat template opened the block.
_REASONING_BLOCK = re.compile(r"^\s*(?:<think>)?.*?</think>", re.S)
# Where servers with a reasoning parser put the thinking instead (vLLM, llama.cpp: the first; Ollama).
REASONING_FIELDS = ("reasoning_content", "reasoning")


def load_json(text: str | bytes) -> Any:
    """``json.loads``, with JSON nested deeper than Python's parser goes (a ``RecursionError``)
    reported as the ``ValueError`` of any other unreadable JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


def load_reply_json(content: str) -> Any:
    """The JSON value of a model's reply; ``ValueError`` when it holds none. Read through the
    wrapping models put around their JSON, which would otherwise cost a repair round (the chunk
    paid for twice) or, for a reasoning model's every answer, the chunk: a Markdown code fence, a
    reasoning block before it (``<think>…</think>``), and words before or after the one fenced
    block of the answer. Bare JSON among words is not guessed at (an example in a refusal is no
    answer)."""
    try:
        return load_json(content)
    except ValueError as exc:
        unreadable = exc
    text = _REASONING_BLOCK.sub("", content, count=1)
    whole = _FENCE.match(text)
    blocks = _FENCED_BLOCK.findall(text)
    candidates = [text, whole.group(1)] if whole else [text]
    if len(blocks) == 1:
        candidates.append(blocks[0])
    for candidate in candidates:
        try:
            return load_json(candidate)
        except ValueError:
            continue
    raise unreadable


def refused_parameter(answer: bytes) -> str | None:
    """The request parameter (of :data:`ADAPTABLE_PARAMETERS`) an HTTP 400 answer says the server
    refuses for this model, or ``None``: OpenAI's error object names it (``param``, with code
    ``unsupported_parameter`` or ``unsupported_value``); other servers' words are read too."""
    try:
        error = load_json(answer).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and error.get("param") in ADAPTABLE_PARAMETERS and error.get("code") in (
        "unsupported_parameter", "unsupported_value"
    ):
        return str(error["param"])
    match = _PARAMETER_REFUSED.search(answer[:2000].decode("utf-8", "replace"))
    return match.group(1).lower() if match else None


def parse_json_reply(content: str) -> Any:
    """The JSON object in a reply (a Markdown code fence around it is tolerated); ``ValueError``
    when there is none or it has no ``nodes`` list (worth a repair round too)."""
    value = load_reply_json(content)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    graph = value.get("graph") if isinstance(value.get("graph"), dict) else value
    if not isinstance(graph.get("nodes"), list):
        raise ValueError("the object has no 'nodes' list")
    return value


def retry_after_seconds(value: str | None, *, cap: float = MAX_RETRY_AFTER_SECONDS, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), capped; ``None``
    when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = moment.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, min(cap, seconds))
