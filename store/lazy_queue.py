"""The lazy-edge queue: a JSONL file of edges whose endpoints may not be in the graph yet.

One line per edge (a public interface, documented in README)::

    {"source": "CONCEPT:x", "target": "memory:abc", "relationship": "MENTIONED_IN",
     "weight": 1.0, "properties": {...}, "timestamp": "2026-11-29T10:00:00.000Z"}

Any producer may append, from any process: each line is written with a single ``write`` on a file
opened with ``O_APPEND``, so concurrent appends never interleave inside a line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from store.graph import utc_now


def edge_line(edge: Mapping[str, Any], *, timestamp: str | None = None) -> bytes:
    """One queue line (with trailing newline) for ``edge``; every field of ``edge`` is kept and a
    ``timestamp`` is added when missing."""
    record = dict(edge)
    record.setdefault("timestamp", timestamp or utc_now())
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode("utf-8")


class LazyEdgeQueue:
    """Append side of the queue at ``path`` (the drain lives in ``pipelines.drain``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, edges: Iterable[Mapping[str, Any]], *, fsync: bool = True) -> int:
        """Append one line per edge; returns the number of lines written."""
        lines = [edge_line(edge) for edge in edges]
        if not lines:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            for line in lines:
                os.write(fd, line)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return len(lines)

    def depth(self) -> int:
        """Lines waiting in the live queue (not counting a ``.draining`` file)."""
        if not self.path.exists():
            return 0
        with self.path.open("rb") as handle:
            return sum(1 for line in handle if line.strip())
