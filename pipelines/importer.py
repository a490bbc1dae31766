"""``rem-cycle import``: a JSONL file of sessions → memory and summary rows in Chroma.

One JSON object per line, one session each::

    {"sessionId": "s-1", "title": "…", "createdAt": "2026-11-02T09:14:00Z", "userId": "u",
     "summary": "…", "noSummary": false,
     "turns": [{"id": "s-1-t0000", "role": "user", "text": "…", "createdAt": "…"}]}

Streaming (one line in memory at a time), idempotent (rows whose text and metadata are already
stored are not written again) and forgiving: a bad line is reported with its number and the rest
of the file is still imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import aiofiles
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from store.chroma import ChromaStore, row_created_at
from store.ids import validate_row_id

MAX_LINE_BYTES = 64 * 1024 * 1024


class ImportLineError(ValueError):
    """A line of an import file cannot be imported; the message says why."""


def _iso_time(value: str) -> str:
    if row_created_at({"createdAt": value}) is None:
        raise ValueError(f"not an ISO 8601 time: {value[:40]!r}")
    return value


IsoTime = Annotated[str, AfterValidator(_iso_time)]
TurnId = Annotated[str, AfterValidator(partial(validate_row_id, what="turn id"))]
SessionId = Annotated[str, AfterValidator(partial(validate_row_id, what="sessionId"))]


class ImportedTurn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: TurnId | None = None
    role: str | None = Field(None, max_length=64)
    text: str
    createdAt: IsoTime | None = None


class ImportedSession(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sessionId: SessionId
    title: str | None = None
    createdAt: IsoTime | None = None
    userId: str | None = None
    summary: str | None = None
    noSummary: bool = False
    turns: list[ImportedTurn] = Field(default_factory=list)


def parse_session_line(line: str) -> ImportedSession:
    """Validate one line; raise :class:`ImportLineError` with a readable reason."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ImportLineError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(data, dict):
        raise ImportLineError(f"expected a JSON object, got {type(data).__name__}")
    try:
        return ImportedSession.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors()[:5])
        raise ImportLineError(problems) from None


def turn_id(session_id: str, index: int) -> str:
    """Deterministic memory id for a turn that has none."""
    return f"{session_id}-t{index:04d}"


def session_rows(session: ImportedSession) -> tuple[list[tuple[str, str, dict[str, Any]]], tuple[str, str, dict[str, Any]] | None]:
    """The (id, document, metadata) memory rows and the summary row a session becomes. Pure."""
    memories = []
    for index, turn in enumerate(session.turns):
        meta = {
            "sessionId": session.sessionId,
            "turnIndex": index,
            "role": turn.role,
            "createdAt": turn.createdAt or session.createdAt,
            "userId": session.userId,
        }
        memories.append((turn.id or turn_id(session.sessionId, index), turn.text, _drop_none(meta)))
    summary = None
    if not session.noSummary:
        meta = {
            "sessionId": session.sessionId,
            "title": session.title,
            "createdAt": session.createdAt,
            "userId": session.userId,
            "memoryCount": len(session.turns),
        }
        summary = (f"summary_{session.sessionId}", session.summary or session.title or session.sessionId, _drop_none(meta))
    return memories, summary


def _drop_none(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if v is not None}


@dataclass(slots=True)
class ImportStats:
    lines: int = 0
    sessions: int = 0
    memories_written: int = 0
    memories_unchanged: int = 0
    summaries_written: int = 0
    summaries_unchanged: int = 0
    bad_lines: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "sessions": self.sessions,
            "memories_written": self.memories_written,
            "memories_unchanged": self.memories_unchanged,
            "summaries_written": self.summaries_written,
            "summaries_unchanged": self.summaries_unchanged,
            "bad_lines": len(self.bad_lines),
            "errors": self.bad_lines[:100],
        }


class _Batch:
    """Rows waiting to be written to one collection."""

    def __init__(self, collection: str) -> None:
        self.collection = collection
        self.rows: dict[str, tuple[str, dict[str, Any]]] = {}

    async def flush(self, chroma: ChromaStore) -> tuple[int, int]:
        """Write the rows that differ from what is stored; returns (written, unchanged)."""
        if not self.rows:
            return 0, 0
        ids = list(self.rows)
        stored = await chroma.get_existing(self.collection, ids)
        changed = [i for i in ids if stored.get(i) != self.rows[i]]
        if changed:
            await chroma.upsert(
                self.collection,
                changed,
                [self.rows[i][0] for i in changed],
                [self.rows[i][1] for i in changed],
            )
        self.rows.clear()
        return len(changed), len(ids) - len(changed)


async def import_sessions(
    path: str | Path,
    *,
    chroma: ChromaStore,
    memory_collection: str,
    summary_collection: str,
    batch_rows: int = 500,
    stats: ImportStats | None = None,
) -> ImportStats:
    """Stream a sessions JSONL file into the memory and summary collections, counting into
    ``stats`` when given (so that a caller cancelled mid-file knows what was written)."""
    stats = stats if stats is not None else ImportStats()
    memories, summaries = _Batch(memory_collection), _Batch(summary_collection)

    async def flush() -> None:
        written, same = await memories.flush(chroma)
        stats.memories_written += written
        stats.memories_unchanged += same
        written, same = await summaries.flush(chroma)
        stats.summaries_written += written
        stats.summaries_unchanged += same

    async with aiofiles.open(path, "rb") as handle:
        line_no = 0
        async for raw in handle:
            line_no += 1
            if not raw.strip():
                continue
            stats.lines += 1
            try:
                if len(raw) > MAX_LINE_BYTES:
                    raise ImportLineError(f"line is {len(raw)} bytes, the limit is {MAX_LINE_BYTES}")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ImportLineError(f"not UTF-8 at byte {exc.start}") from None
                session = parse_session_line(text)
            except ImportLineError as exc:
                stats.bad_lines.append({"line": line_no, "error": str(exc)})
                continue
            stats.sessions += 1
            rows, summary = session_rows(session)
            for row_id, doc, meta in rows:
                memories.rows[row_id] = (doc, meta)
            if summary is not None:
                summaries.rows[summary[0]] = (summary[1], summary[2])
            if len(memories.rows) >= batch_rows:
                await flush()
        await flush()
    return stats
