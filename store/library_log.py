"""The loggers of rem-cycle's modules: structlog's, except that they never write to stdout.

structlog left unconfigured prints every line on stdout. A program that imports this code as a
library (``pipelines.enqueue.enqueue_lazy_edges`` in an agent) and speaks a protocol on its stdout
(an MCP stdio server, a JSON pipe) would find our warnings ("PostgreSQL connection replaced") amid
its messages. Until someone configures structlog, these loggers write to stderr; once the process
has (the CLI's ``worker.logs.configure_logging``, or the caller's own), they are structlog's
configured loggers, before or after the import alike. Nothing here configures structlog: a caller's
``configure_once`` or ``is_configured`` check sees what it would see without us.
"""

from __future__ import annotations

import sys
from typing import Any

import structlog


class LibraryLogger:
    """A stand-in for ``structlog.get_logger(name)`` that chooses where to write at each call:
    structlog's configured logger, or (unconfigured) structlog's default rendering on stderr."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _target(self) -> Any:
        if structlog.is_configured():
            return structlog.get_logger(self.name)
        # sys.stderr looked up now, not at import: a caller (or pytest) may have replaced it.
        return structlog.wrap_logger(structlog.PrintLogger(sys.stderr))

    def __getattr__(self, method: str) -> Any:
        return getattr(self._target(), method)


def get_logger(name: str) -> LibraryLogger:
    """The logger every module of store, pipelines and worker uses, as ``get_logger(__name__)``."""
    return LibraryLogger(name)
