"""``rem-cycle import``: a JSONL file of sessions → memory and summary rows in Chroma.

One JSON object per line, one session each::

    {"sessionId": "s-1", "title": "…", "createdAt": "2026-11-02T09:14:00Z", "userId": "u",
     "summary": "…", "noSummary": false,
     "turns": [{"id": "s-1-t0000", "role": "user", "text": "…", "createdAt": "…"}]}

Streaming (one line in memory at a time, read in pieces so that an oversized line is never held
whole) and idempotent (rows whose text and metadata are already stored are not written again).
A line is validated whole before any row of it is written: a bad line is rejected with its number
and reason, nothing of it is written, and the rest of the file is still imported. A turn id that
belongs to another session (earlier in the file or already stored) rejects its line unless
``allow_move`` is set, and then every move is reported.
"""

from __future__ import annotations

import bisect
import codecs
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import aiofiles
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from store.chroma import ChromaStore, without_nul
from store.ids import MAX_ROW_ID_LENGTH, validate_row_id
from store.timeparse import BadTimeError, iso_to_utc

MAX_LINE_BYTES = 64 * 1024 * 1024
# Lines are read in pieces of this size, so a line over the limit costs at most the limit.
_READ_PIECE = 64 * 1024
# JSON "\ud800" decodes to a lone surrogate: not Unicode text, Chroma cannot store it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

Row = tuple[str, str, dict[str, Any]]


class ImportLineError(ValueError):
    """A line of an import file cannot be imported; the message says why."""


def _unicode_text(value: Any) -> Any:
    """Runs before pydantic's own string checks, so that a surrogate gets this reason. A NUL is
    written as ingest reads it (:func:`store.chroma.without_nul`): a re-import of the same line
    finds the row it wrote unchanged."""
    found = _LONE_SURROGATE.search(value) if isinstance(value, str) else None
    if found:
        raise ValueError(f"lone surrogate \\u{ord(found.group()):04x} at character {found.start()} is not Unicode text")
    return without_nul(value)


def _iso_time(value: str) -> str:
    """An ISO 8601 time that ingest can place on the UTC time line (naive means UTC): the same
    rule ingest reads rows by, so an imported time is never one ingest drops."""
    try:
        iso_to_utc(value)
    except BadTimeError as exc:
        raise ValueError(str(exc)) from None
    return value


Text = Annotated[str, BeforeValidator(_unicode_text)]
Role = Annotated[str, StringConstraints(max_length=64), BeforeValidator(_unicode_text)]
IsoTime = Annotated[str, AfterValidator(_iso_time)]
TurnId = Annotated[str, AfterValidator(partial(validate_row_id, what="turn id"))]
SessionId = Annotated[str, AfterValidator(partial(validate_row_id, what="sessionId"))]


class ImportedTurn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: TurnId | None = None
    role: Role | None = None
    text: Text
    createdAt: IsoTime | None = None


class ImportedSession(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sessionId: SessionId
    title: Text | None = None
    createdAt: IsoTime | None = None
    userId: Text | None = None
    summary: Text | None = None
    noSummary: bool = False
    turns: list[ImportedTurn] = Field(default_factory=list)

    def memory_ids(self) -> list[str]:
        """The memory id of each turn: its ``id``, else ``<sessionId>-t<NNNN>``."""
        return [turn.id or turn_id(self.sessionId, index) for index, turn in enumerate(self.turns)]

    @model_validator(mode="after")
    def _memory_ids_are_valid_and_distinct(self) -> "ImportedSession":
        first_turn: dict[str, int] = {}
        for index, memory_id in enumerate(self.memory_ids()):
            if self.turns[index].id is None and len(memory_id) > MAX_ROW_ID_LENGTH:
                raise ValueError(
                    f"generated turn id {memory_id[:24]!r}… is {len(memory_id)} characters, the limit is "
                    f"{MAX_ROW_ID_LENGTH}: give the turns ids or use a shorter sessionId"
                )
            if memory_id in first_turn:
                raise ValueError(f"turn id {memory_id!r} is used by turns {first_turn[memory_id]} and {index}")
            first_turn[memory_id] = index
        return self


def parse_session_line(line: str) -> ImportedSession:
    """Validate one line; raise :class:`ImportLineError` with a readable reason."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ImportLineError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise ImportLineError(f"not usable JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise ImportLineError("not usable JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise ImportLineError(f"expected a JSON object, got {type(data).__name__}")
    try:
        return ImportedSession.model_validate(data)
    except ValidationError as exc:
        raise ImportLineError("; ".join(_problem(e) for e in exc.errors()[:5])) from None


def _problem(error: Any) -> str:
    where = ".".join(map(str, error["loc"]))
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def turn_id(session_id: str, index: int) -> str:
    """Deterministic memory id for a turn that has none."""
    return f"{session_id}-t{index:04d}"


def session_rows(session: ImportedSession) -> tuple[list[Row], Row | None]:
    """The (id, document, metadata) memory rows and the summary row a session becomes. Pure."""
    memories = []
    for index, (memory_id, turn) in enumerate(zip(session.memory_ids(), session.turns, strict=True)):
        meta = {
            "sessionId": session.sessionId,
            "turnIndex": index,
            "role": turn.role,
            "createdAt": turn.createdAt or session.createdAt,
            "userId": session.userId,
        }
        memories.append((memory_id, turn.text, _drop_none(meta)))
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
    """What an import did; filled in as it goes, so that it still tells after a failure."""

    lines: int = 0
    sessions: int = 0
    memories_written: int = 0
    memories_unchanged: int = 0
    summaries_written: int = 0
    summaries_unchanged: int = 0
    bad_lines: list[dict[str, Any]] = field(default_factory=list)
    moves: list[dict[str, Any]] = field(default_factory=list)
    # Every line up to this one is written or rejected (a re-run redoes nothing before it).
    done_through_line: int = 0
    stopped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "sessions": self.sessions,
            "memories_written": self.memories_written,
            "memories_unchanged": self.memories_unchanged,
            "summaries_written": self.summaries_written,
            "summaries_unchanged": self.summaries_unchanged,
            "bad_lines": len(self.bad_lines),
            "errors": self.bad_lines,
            "turns_moved": len(self.moves),
            "moves": self.moves,
            "done_through_line": self.done_through_line,
            "stopped": self.stopped,
        }


@dataclass(frozen=True, slots=True)
class _ParsedLine:
    number: int
    session_id: str
    memories: list[Row]
    summary: Row | None


class _Importer:
    """Validated lines waiting to be written, checked against each other and what is stored."""

    def __init__(self, *, chroma: ChromaStore, memory_collection: str, summary_collection: str,
                 batch_rows: int, allow_move: bool, max_line_bytes: int, stats: ImportStats) -> None:
        self.chroma = chroma
        self.memory_collection = memory_collection
        self.summary_collection = summary_collection
        self.batch_rows = batch_rows
        self.allow_move = allow_move
        self.max_line_bytes = max_line_bytes
        self.stats = stats
        self.pending: list[_ParsedLine] = []
        self.pending_rows = 0
        # The line of each session in the file: one line per session (a few bytes per line).
        self.session_lines: dict[str, int] = {}

    def reject(self, number: int, reason: str) -> None:
        # In line order, although a line can be rejected after later ones (when its batch is written).
        bisect.insort(self.stats.bad_lines, {"line": number, "error": reason}, key=lambda bad: bad["line"])

    async def add(self, number: int, raw: bytes | None, size: int) -> None:
        """Validate one line (``raw`` is ``None`` when it was over the limit) and queue its rows."""
        try:
            session = self._parse(number, raw, size)
        except ImportLineError as exc:
            self.reject(number, str(exc))
            return
        memories, summary = session_rows(session)
        # A batch holds whole lines and stays within batch_rows unless one line alone is larger.
        if self.pending and self.pending_rows + len(memories) > self.batch_rows:
            await self.flush()
        self.pending.append(_ParsedLine(number, session.sessionId, memories, summary))
        self.pending_rows += len(memories)
        if self.pending_rows >= self.batch_rows:
            await self.flush()

    def _parse(self, number: int, raw: bytes | None, size: int) -> ImportedSession:
        if raw is None:
            raise ImportLineError(f"line is {size} bytes, the limit is {self.max_line_bytes}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ImportLineError(f"not UTF-8 at byte {exc.start}") from None
        session = parse_session_line(text)
        first = self.session_lines.setdefault(session.sessionId, number)
        if first != number:
            raise ImportLineError(f"sessionId {session.sessionId!r} is also on line {first} (one line per session)")
        return session

    async def flush(self) -> None:
        """Accept or reject the pending lines against each other and the stored rows; write what
        changed."""
        lines, self.pending, self.pending_rows = self.pending, [], 0
        if not lines:
            return
        wanted = list(dict.fromkeys(r[0] for line in lines for r in line.memories))  # Chroma refuses repeated ids
        stored = await self.chroma.get_existing(self.memory_collection, wanted)
        owners = {row_id: meta.get("sessionId") for row_id, (_, meta) in stored.items()}
        memories: dict[str, tuple[str, dict[str, Any]]] = {}
        summaries: dict[str, tuple[str, dict[str, Any]]] = {}
        accepted, moves = 0, []
        for line in lines:
            taken = [(r[0], owners[r[0]]) for r in line.memories if r[0] in owners and owners[r[0]] != line.session_id]
            if taken and not self.allow_move:
                self.reject(line.number, self._taken_reason(taken, line.number))
                continue
            moves.extend(
                {"line": line.number, "turn": row_id, "from_session": owner, "to_session": line.session_id}
                for row_id, owner in taken
            )
            accepted += 1
            for row_id, doc, meta in line.memories:
                owners[row_id] = line.session_id
                memories[row_id] = (doc, meta)
            if line.summary is not None:
                summaries[line.summary[0]] = (line.summary[1], line.summary[2])
        written, same = await self._write(self.memory_collection, memories, stored)
        self.stats.memories_written += written
        self.stats.memories_unchanged += same
        stored_summaries = await self.chroma.get_existing(self.summary_collection, list(summaries))
        written, same = await self._write(self.summary_collection, summaries, stored_summaries)
        self.stats.summaries_written += written
        self.stats.summaries_unchanged += same
        self.stats.sessions += accepted
        self.stats.moves.extend(moves)

    def _taken_reason(self, taken: list[tuple[str, Any]], number: int) -> str:
        described = []
        for row_id, owner in taken[:3]:
            line = self.session_lines.get(owner, number) if isinstance(owner, str) else number
            where = f"line {line}" if line < number else "already stored"
            described.append(f"turn id {row_id!r} belongs to session {owner!r} ({where})")
        more = f" and {len(taken) - 3} more" if len(taken) > 3 else ""
        return "; ".join(described) + more + ": give the turns other ids, or import with --allow-move to move them"

    async def _write(self, collection: str, rows: dict[str, tuple[str, dict[str, Any]]],
                     stored: dict[str, tuple[str, dict[str, Any]]]) -> tuple[int, int]:
        """Write the rows that differ from what is stored: new ones added, stored ones rewritten
        (deleted and added again, so that the next cycle sees the change: ``ChromaStore.rewrite``);
        returns (written, unchanged)."""
        new = [row_id for row_id in rows if row_id not in stored]
        changed = [row_id for row_id, row in rows.items() if row_id in stored and stored[row_id] != row]
        if new:
            await self.chroma.upsert(collection, new, [rows[i][0] for i in new], [rows[i][1] for i in new])
        if changed:
            await self.chroma.rewrite(collection, changed, [rows[i][0] for i in changed], [rows[i][1] for i in changed])
        return len(new) + len(changed), len(rows) - len(new) - len(changed)


async def read_lines(path: str | Path | int, *, max_line_bytes: int = MAX_LINE_BYTES) -> AsyncIterator[tuple[int, bytes | None, int]]:
    """``(line number, bytes, size)`` for each line of a file (or an open descriptor, read from where
    it stands and closed when read): the bytes keep the newline, the
    size does not count it. ``bytes`` is ``None`` for a line over ``max_line_bytes``, which is read
    past in pieces and never held whole (memory stays within the limit whatever the file holds)."""
    async with aiofiles.open(path, "rb") as handle:
        number = 0
        while piece := await handle.readline(_READ_PIECE):
            number += 1
            pieces: list[bytes] | None = [piece]
            size = len(piece)
            while not piece.endswith(b"\n"):
                piece = await handle.readline(_READ_PIECE)
                if not piece:
                    break
                size += len(piece)
                if pieces is not None and size > max_line_bytes + 1:  # over the limit even without its newline
                    pieces = None
                elif pieces is not None:
                    pieces.append(piece)
            length = size - 1 if piece.endswith(b"\n") else size
            yield number, (b"".join(pieces) if pieces is not None and length <= max_line_bytes else None), length


async def import_sessions(
    path: str | Path | int,
    *,
    chroma: ChromaStore,
    memory_collection: str,
    summary_collection: str,
    batch_rows: int = 500,
    allow_move: bool = False,
    max_line_bytes: int = MAX_LINE_BYTES,
    stats: ImportStats | None = None,
) -> ImportStats:
    """Stream a sessions JSONL file (or descriptor, see :func:`read_lines`) into the memory and summary collections; ``stats.bad_lines``
    lists every rejected line (by number) and ``stats.moves`` every turn moved between sessions.
    Pass ``stats`` to still know what was done when the import fails or is stopped."""
    stats = stats if stats is not None else ImportStats()
    importer = _Importer(chroma=chroma, memory_collection=memory_collection, summary_collection=summary_collection,
                         batch_rows=batch_rows, allow_move=allow_move, max_line_bytes=max_line_bytes, stats=stats)
    number = 0
    async for number, raw, size in read_lines(path, max_line_bytes=max_line_bytes):
        if number == 1 and raw is not None:
            raw = raw.removeprefix(codecs.BOM_UTF8)  # a byte-order mark (Windows editors write one) is no text
        if raw is not None and (not raw or raw.isspace()):
            continue
        stats.lines += 1
        await importer.add(number, raw, size)
        if not importer.pending:
            stats.done_through_line = number
    await importer.flush()
    stats.done_through_line = number
    return stats
