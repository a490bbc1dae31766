"""The producer library: one call puts lazy edges in either form of the queue.

    from pipelines.enqueue import enqueue_lazy_edges

    edges = [{"source": "CONCEPT:retry budget", "target": "memory:3f9c", "relationship": "MENTIONED_IN",
              "properties": {"justification": "named in turn 3"}}]
    enqueue_lazy_edges("/srv/rem/data/lazy-edges.jsonl", edges)            # the JSONL file (same host)
    enqueue_lazy_edges("sqlite:////srv/rem/data/graph.sqlite3", edges)     # the table, SQLite
    enqueue_lazy_edges("postgresql://rem@db.internal/rem", edges)          # the table, PostgreSQL

Every edge is checked first with the drain's own rule (``pipelines.lazy_edge.parse_line``): one
that could never link raises :class:`InvalidLazyEdgeError` naming it, and nothing of the call is
written. Then all of them are written at once: one append of whole lines to the file (its append
protocol, safe beside a running drain) or one transaction of rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

from pipelines.lazy_edge import InvalidLazyEdgeError, queue_lines
from store.lazy_queue import LazyEdgeQueue
from store.graph import chunked
from store.lazy_table import APPEND_BATCH_ROWS, is_database_url, open_queue_table

__all__ = ["InvalidLazyEdgeError", "enqueue_checked_lazy_edges", "enqueue_lazy_edges"]


def enqueue_lazy_edges(target: str | os.PathLike[str], edges: Iterable[Mapping[str, Any]], *, fsync: bool = True) -> int:
    """Queue ``edges`` for the next drain; returns how many were written.

    ``target`` is the JSONL queue file's path, or a database URL (``sqlite:///PATH``,
    ``postgresql://…``: the ``lazy_edges`` table of the worker's graph database). Settings name it
    as ``Settings.lazy_queue_target``. ``fsync`` (file form) makes the lines durable before
    returning; a database commit always is.
    """
    _check_target(target)
    return _append(target, queue_lines(edges), fsync=fsync)


def enqueue_checked_lazy_edges(
    target: str | os.PathLike[str], edges: Iterable[Mapping[str, Any]], *, fsync: bool = True, batch: int = APPEND_BATCH_ROWS
) -> int:
    """Queue ``edges`` that were checked already (``queue_lines`` raised nothing for any of them),
    turning them into lines ``batch`` at a time, so that memory does not grow with their number:
    as :func:`enqueue_lazy_edges`, the file form is one append of whole lines under one lock and
    the table form one transaction. For edges too many to hold: read them twice, once to check
    (``queue_lines`` on each batch), once for this call. An edge that is bad after all (its source
    changed in between) raises :class:`InvalidLazyEdgeError`; in the file form, lines written
    before it stay queued."""
    _check_target(target)
    return _append(target, (line for part in chunked(edges, batch) for line in queue_lines(part)), fsync=fsync)


def _check_target(target: str | os.PathLike[str]) -> None:
    if isinstance(target, str) and "://" in target and not is_database_url(target):
        raise ValueError(f"not a queue file nor a database URL (sqlite:///PATH, postgresql://…): {target.split('://', 1)[0]}://…")


def _append(target: str | os.PathLike[str], lines: Iterable[bytes], *, fsync: bool) -> int:
    """Write ``lines`` to the queue at ``target``; no lines touch nothing (no file, no database)."""
    remaining = iter(lines)
    first = next(remaining, None)
    if first is None:
        return 0
    lines = chain([first], remaining)
    if is_database_url(target):
        with open_queue_table(str(target)) as table:
            return table.append_lines(lines)
    counted = _Counted(lines)
    LazyEdgeQueue(Path(target)).append_lines(counted, fsync=fsync)
    return counted.count


class _Counted:
    """The lines of an iterable, counted as they pass."""

    def __init__(self, lines: Iterable[bytes]) -> None:
        self._lines = lines
        self.count = 0

    def __iter__(self) -> Iterator[bytes]:
        for line in self._lines:
            self.count += 1
            yield line
