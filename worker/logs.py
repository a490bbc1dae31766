"""structlog setup: JSON lines when stderr is not a terminal, a console renderer when it is.

Secrets never reach a log line: values under secret-looking keys are masked, and every string
goes through :func:`config.redact.redact` (credentials inside URLs, configured secret values).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable
from typing import Any

import structlog

from config.redact import MASK, redact

_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|authorization)", re.IGNORECASE)


class SecretMasker:
    """A structlog processor that masks secret-looking keys, secrets inside URLs, the process's
    configured secrets and ``secrets``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = tuple(secrets)

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            return redact(value, also=self.secrets)
        if isinstance(value, dict):
            return {k: MASK if _SECRET_KEY.search(str(k)) else self._scrub(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._scrub(v) for v in value)
        return value

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        return self._scrub(event)


class LineDroppingLogger(structlog.PrintLogger):
    """A :class:`structlog.PrintLogger` that drops a line it cannot write — the log's disk is
    full, its reader went away, the stream is closed — as the standard library's ``logging`` does:
    logs are the operator's view, not the work, and a cycle must not fail (nor the daemon die)
    because one of its log lines could not be written."""

    def msg(self, message: str) -> None:
        try:
            super().msg(message)
        except (OSError, ValueError):  # ValueError: I/O on a closed file
            pass

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _LineDroppingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The standard library's side of :class:`LineDroppingLogger`: a line it cannot write is
    dropped without the ``--- Logging error ---`` report."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        return


_library_handler: logging.Handler | None = None


def configure_logging(*, level: str = "info", fmt: str = "auto", secrets: Iterable[str] = (), stream: Any = None) -> None:
    """Configure structlog for the process. ``fmt``: ``auto`` | ``json`` | ``console``. Libraries'
    warnings through the standard library's ``logging`` (psycopg's pool retrying a server that is
    down, say) are rendered the same way, secrets masked, rather than as bare text lines."""
    stream = stream or sys.stderr
    console = fmt == "console" or (fmt == "auto" and hasattr(stream, "isatty") and stream.isatty())
    renderer: Any = structlog.dev.ConsoleRenderer() if console else structlog.processors.JSONRenderer()
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        SecretMasker(secrets),
    ]
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=lambda *_: LineDroppingLogger(stream),
        cache_logger_on_first_use=False,
    )
    route_library_logs(stream=stream, renderer=renderer, processors=shared, level=level)


def route_library_logs(*, stream: Any, renderer: Any, processors: list[Any], level: str) -> None:
    """Render the libraries' standard ``logging`` records (the MCP SDK, uvicorn, httpx, psycopg's
    pool retrying a server that is down …) as the worker's own lines — JSON or console, secrets
    masked — at ``level`` or WARNING, whichever is higher: their INFO lines are per request.
    Without a root handler the MCP SDK installed its own (rich, multi-line, INFO) when
    ``rem-cycle mcp`` started, amid the JSON log. Configuring again replaces the handler this
    module installed, and no other (a test's capture handler stays)."""
    global _library_handler
    threshold = max(getattr(logging, level.upper()), logging.WARNING)
    handler = _LineDroppingHandler(stream)
    handler.setLevel(threshold)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *processors],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    ))
    root = logging.getLogger()
    if _library_handler is not None:
        root.removeHandler(_library_handler)
    root.addHandler(handler)
    root.setLevel(threshold)
    _library_handler = handler
