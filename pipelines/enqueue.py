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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipelines.lazy_edge import InvalidLazyEdgeError, queue_lines
from store.lazy_queue import LazyEdgeQueue
from store.lazy_table import is_database_url, open_queue_table

__all__ = ["InvalidLazyEdgeError", "enqueue_lazy_edges"]


def enqueue_lazy_edges(target: str | os.PathLike[str], edges: Iterable[Mapping[str, Any]], *, fsync: bool = True) -> int:
    """Queue ``edges`` for the next drain; returns how many were written.

    ``target`` is the JSONL queue file's path, or a database URL (``sqlite:///PATH``,
    ``postgresql://…``: the ``lazy_edges`` table of the worker's graph database). Settings name it
    as ``Settings.lazy_queue_target``. ``fsync`` (file form) makes the lines durable before
    returning; a database commit always is.
    """
    if isinstance(target, str) and "://" in target and not is_database_url(target):
        raise ValueError(f"not a queue file nor a database URL (sqlite:///PATH, postgresql://…): {target.split('://', 1)[0]}://…")
    lines = queue_lines(edges)
    if not lines:
        return 0
    if is_database_url(target):
        with open_queue_table(str(target)) as table:
            return table.append_lines(lines)
    LazyEdgeQueue(Path(target)).append_lines(lines, fsync=fsync)
    return len(lines)
