"""What a lazy-edge queue line means: the one validation rule of both queue forms (the JSONL file,
store/lazy_queue.py, and the table, store/lazy_table.py) and of producers before they write. Pure.

A line is one JSON object::

    {"source": "CONCEPT:x", "target": "memory:abc", "relationship": "MENTIONED_IN",
     "weight": 1.0, "properties": {...}, "timestamp": "2026-11-29T10:00:00.000Z"}

:func:`parse_line` turns it into the edge to link (ids normalised, every extra top-level field kept
as a property) or a :class:`MalformedLine` with the reason it can never link.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from store.graph import Edge
from store.ids import InvalidIdError, normalize_graph_node_id
from store.lazy_queue import CHUNK_IDS_TEXT, MAX_LINE_BYTES, LineFilter, OversizedLine, edge_line

class LazyEdgeSink(Protocol):
    """Where a pipeline puts the edges it could not link yet: the JSONL queue
    (``store.lazy_queue.LazyEdgeQueue``) or the queue table (``store.lazy_table.LazyEdgeTable``,
    whose rows commit with the transaction the call runs in)."""

    def append(self, edges: Iterable[Mapping[str, Any]]) -> int: ...

    def supersede(self, edges: Sequence[Mapping[str, Any]], *, filters: LineFilter, picks: Callable[[bytes], bool]) -> int:
        """Queue ``edges`` in place of the queued lines ``picks`` chooses (``filters``: which lines
        a store that selects reads for it); returns how many were queued."""
        ...


# Fields of a queue line with a meaning of their own; every other top-level field is kept as an
# edge property (the earlier system lost ``justification`` by forwarding only ``properties``).
LINE_FIELDS = frozenset({"source", "target", "relationship", "weight", "properties", "timestamp", "attempts", "lastError"})
MAX_RELATIONSHIP_LENGTH = 128
# The queue tables index a line's first chunk id (store.dialect.Dialect.queue_first_chunk), and
# PostgreSQL keeps an index entry on one page (2,704 bytes): a longer one failed the producer's
# INSERT there and not on SQLite (pghostile). rem-cycle's own are ``<session id>:chunk:<n>``
# (at most ~220 bytes); this leaves producers five times that.
MAX_FIRST_CHUNK_BYTES = 1024
# An edge's key (source, target, relationship) is one entry of the ``edges`` primary key, which
# PostgreSQL keeps on one page (2,704 bytes with the entry's own headers): a 128-character
# relationship between two nodes with 300-character names outside the Basic Multilingual Plane
# failed every drain there (until dead-lettered as max-attempts) and linked on SQLite (pghostile).
# rem-cycle's own ids are at most ~1,210 bytes each and its relationships a few ASCII words.
MAX_EDGE_KEY_BYTES = 2_600
_CONTROL = re.compile("[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class QueuedEdge:
    """A well-formed queue line: the edge to link plus its bookkeeping."""

    edge: Edge
    record: dict[str, Any]
    attempts: int


@dataclass(frozen=True, slots=True)
class MalformedLine:
    """A line that can never link; ``reason`` is ``malformed-json``, ``invalid-edge`` or
    ``line-too-long``."""

    reason: str
    detail: str


def parse_line(raw: bytes) -> QueuedEdge | MalformedLine:
    """Parse and normalise one queue line. Pure.

    >>> parse_line(b'{"source":"CONCEPT:a","target":"MEMORY:m1","relationship":"MENTIONED_IN"}').edge.target
    'memory:m1'
    """
    if isinstance(raw, OversizedLine):
        return MalformedLine("line-too-long", f"line of {raw.size} bytes; the limit is {MAX_LINE_BYTES} bytes")
    try:
        record = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return MalformedLine("malformed-json", f"not JSON: {exc}"[:300])
    except RecursionError:
        return MalformedLine("malformed-json", "not JSON we accept: nested too deeply")
    except ValueError as exc:  # an integer past Python's digit limit (int_max_str_digits)
        return MalformedLine("malformed-json", f"not JSON we accept: {exc}"[:300])
    if not isinstance(record, dict):
        return MalformedLine("malformed-json", f"expected a JSON object, got {type(record).__name__}")
    try:
        if _holds_nul(record):
            return MalformedLine("invalid-edge", "a string holds a NUL (U+0000), which PostgreSQL's text cannot store")
    except RecursionError:  # as deep as the decoder went, and this walk a frame deeper
        return MalformedLine("malformed-json", "not JSON we accept: nested too deeply")
    missing = [name for name in ("source", "target", "relationship") if record.get(name) in (None, "")]
    if missing:
        return MalformedLine("invalid-edge", f"missing {', '.join(missing)}")
    try:
        source = normalize_graph_node_id(record["source"])
        target = normalize_graph_node_id(record["target"])
    except InvalidIdError as exc:
        return MalformedLine("invalid-edge", str(exc)[:300])
    relationship = record["relationship"]
    if (
        not isinstance(relationship, str)
        or len(relationship) > MAX_RELATIONSHIP_LENGTH
        or relationship != relationship.strip()
        or _CONTROL.search(relationship)
    ):
        return MalformedLine(
            "invalid-edge", f"relationship must be a string of 1-{MAX_RELATIONSHIP_LENGTH} characters without control characters"
        )
    key_bytes = sum(len(part.encode("utf-8", "surrogatepass")) for part in (source, target, relationship))
    if key_bytes > MAX_EDGE_KEY_BYTES:
        return MalformedLine("invalid-edge", f"source, target and relationship are {key_bytes} bytes together; "
                                             f"the limit is {MAX_EDGE_KEY_BYTES} bytes")
    weight = record.get("weight", 1.0)
    if weight is None:
        weight = 1.0
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not _is_finite(weight):
        return MalformedLine("invalid-edge", f"weight must be a finite number, got {str(weight)[:40]!r}")
    properties = record.get("properties") or {}
    if not isinstance(properties, dict):
        return MalformedLine("invalid-edge", "properties must be a JSON object")
    first_chunk = _first_chunk_bytes(properties)
    if first_chunk > MAX_FIRST_CHUNK_BYTES:
        return MalformedLine("invalid-edge", f"properties.chunk_ids[0] is {first_chunk} bytes; the limit is {MAX_FIRST_CHUNK_BYTES} bytes")
    extras = {k: v for k, v in record.items() if k not in LINE_FIELDS}
    attempts = record.get("attempts", 0)
    attempts = attempts if isinstance(attempts, int) and not isinstance(attempts, bool) and attempts >= 0 else 0
    merged = {**extras, **properties}
    problem = _unstorable(merged)
    if problem:
        return MalformedLine("invalid-edge", f"properties cannot be stored: {problem}")
    edge = Edge(source, target, relationship, float(weight), merged)
    return QueuedEdge(edge, record, attempts)


def _is_finite(number: int | float) -> bool:
    """Whether ``number`` is a finite float, or an integer a float can hold (``10**400`` is valid
    JSON, and overflows: raised out of the drain, it failed every drain on that line)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _first_chunk_bytes(properties: dict[str, Any]) -> int:
    """The UTF-8 size of what the queue tables' first-chunk index holds of a line whose
    ``properties`` these are (``chunk_ids[0]``: a string's text, any other value's JSON; PostgreSQL's
    path also reads key ``"0"`` of an object); 0 when there is none."""
    chunks = properties.get("chunk_ids")
    first = chunks[0] if isinstance(chunks, list) and chunks else chunks.get("0") if isinstance(chunks, dict) else None
    if first is None:
        return 0
    return len((first if isinstance(first, str) else json.dumps(first, ensure_ascii=False)).encode("utf-8", "surrogatepass"))


def _holds_nul(value: Any) -> bool:
    """Whether a string of ``value`` (a decoded JSON line: keys, values, nested) holds a NUL. Such a
    line was linked on SQLite and refused by PostgreSQL's queue table (its first-chunk index reads
    the line as ``jsonb``, which holds no NUL) — the same line, two fates: refused on both (pghostile)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _unstorable(properties: dict[str, Any]) -> str | None:
    """Why ``properties`` cannot become an edge's JSON column (NaN/Infinity, lone surrogates,
    nesting too deep for the encoder), or ``None``. Checked here so that such a line is a dead
    letter at once instead of failing to link on every drain until its attempts run out."""
    try:
        json.dumps(properties, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except ValueError as exc:  # UnicodeEncodeError is a ValueError too
        return str(exc)[:200]
    except RecursionError:
        return "nested too deeply"
    return None


def dead_letter_record(raw: bytes, *, reason: str, detail: str, attempts: int, at: str) -> dict[str, Any]:
    """One dead-letter line: why, when, and the original line verbatim (as text). Pure."""
    return {
        "reason": reason,
        "detail": detail,
        "attempts": attempts,
        "deadLetteredAt": at,
        "line": raw.decode("utf-8", "replace").rstrip("\n"),
    }


class InvalidLazyEdgeError(ValueError):
    """Edges a producer passed that can never link; ``problems`` lists ``(index, reason, detail)``
    of each. Nothing of the call was enqueued."""

    def __init__(self, problems: list[tuple[int, str, str]]) -> None:
        self.problems = problems
        shown = "; ".join(f"edge {index}: {reason}: {detail}" for index, reason, detail in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        super().__init__(f"{len(problems)} lazy edge(s) rejected, none enqueued: {shown}{more}")


def queue_lines(edges: Iterable[Mapping[str, Any]], *, timestamp: str | None = None) -> list[bytes]:
    """The queue lines of ``edges`` (each a mapping with ``source``, ``target``, ``relationship``
    and optional ``weight``, ``properties`` and any other field), checked by :func:`parse_line`:
    raises :class:`InvalidLazyEdgeError` naming every edge that can never link (the drain would
    dead-letter it), so a producer learns at once and writes all of them or none."""
    lines: list[bytes] = []
    problems: list[tuple[int, str, str]] = []
    for index, edge in enumerate(edges):
        if not isinstance(edge, Mapping):
            problems.append((index, "invalid-edge", f"expected a mapping, got {type(edge).__name__}"))
            continue
        try:
            line = edge_line(edge, timestamp=timestamp)
        except (TypeError, ValueError, RecursionError) as exc:
            problems.append((index, "invalid-edge", f"cannot be written as JSON: {exc}"[:300]))
            continue
        if len(line) - 1 > MAX_LINE_BYTES:
            problems.append((index, "line-too-long", f"line of {len(line) - 1} bytes; the limit is {MAX_LINE_BYTES} bytes"))
            continue
        parsed = parse_line(line)
        if isinstance(parsed, MalformedLine):
            problems.append((index, parsed.reason, parsed.detail))
        else:
            lines.append(line)
    if problems:
        raise InvalidLazyEdgeError(problems)
    return lines


# The relationships of the lines rem-cycle's own extraction queues (pipelines.extract.commit):
# provenance edges to a turn or to the anchor, and a turn's reference to a row not in the graph yet.
_EXTRACTION_RELATIONSHIPS = frozenset({"MENTIONED_IN", "DISCUSSED_IN", "REFERENCED_BY"})
# What follows ``<key>:chunk:`` in the id of one of the key's units: the chunk's number, and for a
# part of an oversized turn's chunk ``:part:<M>`` (pipelines.extract.units).
_CHUNK_NUMBER = re.compile(r"[0-9]+(?::part:[0-9]+)?")


# The queue table's rows are sought by their first chunk id, a range of its index per anchor, OR-ed,
# for at most this many anchors; past that selected by the text every line of rem-cycle's
# extraction holds, one scan of each table however many anchors.
_MAX_FILTERS = 8
# Where a line's first chunk id starts and ends, as ``edge_line`` writes it, and as a dead-letter
# record holds that line (a JSON string: each quote escaped).
_FIRST_CHUNK = ('"chunk_ids":["', '"')
_FIRST_CHUNK_DEAD = ('\\"chunk_ids\\":[\\"', '\\"')


@dataclass(frozen=True)
class ExtractionLines:
    """Which queue lines rem-cycle's own extraction queued for what a forget or a retraction took
    out — what goes with it. ``taken`` maps an anchor's chunk key (a session id, a notes file's
    key) to ``None`` (the whole anchor went) or the turns (``memory:<id>``) of it that went. Such a
    line's target is the anchor or one of its turns (a turn's: that turn), its relationship one of
    ``MENTIONED_IN``, ``DISCUSSED_IN``, ``REFERENCED_BY``, and its ``properties.chunk_ids`` are all
    the anchor's chunks (``<chunk_key>:chunk:<number>``, of an oversized turn ``…:part:<M>``: ids
    no agent writes); an agent's line is never one (README). ``loose_turns``: turns whose session
    is no longer known (a forget of the turn committed before and took the one row that said it):
    their lines are those with the turn as target whose chunks are all one anchor's — only its own
    session's extraction writes a line to a turn. ``sources``: knowledge nodes ``forget --node`` took
    out: their lines are those with the node as source whose chunks are all one anchor's (a
    provenance edge from it). Several taken out at once (:meth:`union`) are matched in one read of
    each line. Pure."""

    taken: Mapping[str, frozenset[str] | None]
    loose_turns: frozenset[str] = frozenset()
    sources: frozenset[str] = frozenset()

    @classmethod
    def of(cls, chunk_key: str | None, *, turn: str | None = None) -> "ExtractionLines":
        """The lines of one anchor, or (``turn`` given) of that one turn of it; ``chunk_key``
        ``None``: of the turn, its session unknown."""
        if chunk_key is None:
            if turn is None:
                raise ValueError("ExtractionLines needs a chunk key or a turn")
            return cls({}, frozenset({turn}))
        return cls({chunk_key: None if turn is None else frozenset({turn})})

    @classmethod
    def union(cls, parts: Iterable["ExtractionLines"]) -> "ExtractionLines":
        """The lines of every one of ``parts`` (an anchor taken out whole covers its turns)."""
        taken: dict[str, frozenset[str] | None] = {}
        loose: set[str] = set()
        sources: set[str] = set()
        for part in parts:
            loose |= part.loose_turns
            sources |= part.sources
            for key, turns in part.taken.items():
                if key in taken:
                    before = taken[key]
                    taken[key] = None if before is None or turns is None else before | turns
                else:
                    taken[key] = turns
        return cls(taken, frozenset(loose), frozenset(sources))

    def __bool__(self) -> bool:
        return bool(self.taken or self.loose_turns or self.sources)

    @cached_property
    def filters(self) -> LineFilter:
        """Which lines a store that selects (the queue table) reads for :meth:`matches`: those
        whose first chunk id is a chunk of a taken anchor (``<key>:chunk:``, sought through an
        index) when the anchors are few, else every line holding the text all extraction lines
        hold; and for a loose turn, the lines holding ``"target":"<turn>"`` (a scan: a forget run
        again, rare), and for a forgotten node, those holding ``"source":"<node>"`` (a scan too).
        Built once."""
        if len(self.taken) + len(self.loose_turns) + len(self.sources) > _MAX_FILTERS:
            return LineFilter(texts=(CHUNK_IDS_TEXT,))
        return LineFilter(first_chunk_prefixes=tuple(f"{key}:chunk:" for key in sorted(self.taken)),
                          texts=tuple(f'"{end}":' + json.dumps(item, ensure_ascii=False)
                                      for end, items in (("target", self.loose_turns), ("source", self.sources)) for item in sorted(items)))

    def matches(self, raw: bytes | str) -> bool:
        """Whether the queue line ``raw`` is one of them (parsed only when its first chunk id, read
        as text, is a taken anchor's: one look-up per line, however many anchors)."""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if not self._may_hold(text, *_FIRST_CHUNK):
            return False
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            return False
        if not isinstance(record, dict):
            return False
        # An agent's line may hold anything (a list, an object) where an extraction's holds an id:
        # not one of them, and never looked up as a key (unhashable).
        relationship, target, source = (
            value if isinstance(value, str) else None for value in (record.get("relationship"), record.get("target"), record.get("source"))
        )
        if relationship not in _EXTRACTION_RELATIONSHIPS:
            return False
        properties = record.get("properties")
        chunks = properties.get("chunk_ids") if isinstance(properties, dict) else None
        if not isinstance(chunks, list) or not chunks:
            return False
        key = _anchor_of(chunks[0])
        if key is None or any(_anchor_of(c) != key for c in chunks):
            return False
        if key in self.taken and (self.taken[key] is None or target in self.taken[key]):
            return True
        return target in self.loose_turns or source in self.sources

    def matches_dead_letter(self, raw: bytes) -> bool:
        """Whether the dead-letter record ``raw`` (:func:`dead_letter_record`) holds one of them."""
        text = raw.decode("utf-8", "replace")
        at = text.find('"line":')  # the line comes last (an error's detail may quote anything)
        if at < 0 or not self._may_hold(text[at:], *_FIRST_CHUNK_DEAD):
            return False
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            return False
        line = record.get("line") if isinstance(record, dict) else None
        return isinstance(line, str) and self.matches(line)

    def _may_hold(self, text: str, opening: str, closing: str) -> bool:
        """A look at ``text`` before a parse: whether the first chunk id it spells (after
        ``opening``, up to ``closing``) is a chunk of a taken anchor — or has an escape in it,
        which only the parse reads. With loose turns every extraction line is parsed (a forget run
        again: rare)."""
        at = text.find(opening)
        if at < 0:
            return False
        start = at + len(opening)
        end = text.find(closing, start)
        first = text[start:end] if end >= 0 else text[start:]
        return bool(self.loose_turns or self.sources) or "\\" in first or _anchor_of(first) in self.taken


def _anchor_of(chunk_id: object) -> str | None:
    """The chunk key ``chunk_id`` is a chunk of (``pipelines.chunker.chunk_id``:
    ``<key>:chunk:<number>``, or a part of an oversized turn's chunk, ``…:part:<M>``), or ``None``
    when it is no such id. The last ``:chunk:`` divides it, as a session id may itself hold
    ``:chunk:`` (``s:chunk:7``'s chunks begin as ``s``'s do)."""
    if not isinstance(chunk_id, str):
        return None
    key, found, rest = chunk_id.rpartition(":chunk:")
    return key if found and key and _CHUNK_NUMBER.fullmatch(rest) else None


def queue_superseding(sink: LazyEdgeSink, edges: Sequence[Mapping[str, Any]]) -> int:
    """Queue ``edges`` (the lines an anchor's extraction queues, :mod:`pipelines.extract.commit`)
    in ``sink`` in place of the lines the anchor's earlier extraction queued for the same edges:
    a re-extraction (new words, a new fingerprint, a retry) queued a second copy of each, and a
    drain linked or dead-lettered the edge twice. A queued extraction line is identified by its
    anchor (the chunk key its ``chunk_ids`` are of) and its edge (``source``, ``target``,
    ``relationship``); the newer line, with the newer extraction's evidence and chunks, stands in
    for it. An earlier line for an edge the new extraction does not queue stays (its edge may be
    linked yet). Returns how many lines were queued."""
    keys = {(e.get("source"), e.get("target"), e.get("relationship")) for e in edges}
    anchors = {_anchor_of(chunks[0]) for e in edges
               if isinstance(chunks := (e.get("properties") or {}).get("chunk_ids"), list) and chunks}
    lines = ExtractionLines({key: None for key in anchors if key is not None})
    if not lines:
        return sink.append(edges)

    def picks(raw: bytes) -> bool:
        if not lines.matches(raw):
            return False
        record = json.loads(raw)  # it parsed in matches
        edge = tuple(record.get(name) for name in ("source", "target", "relationship"))
        return all(isinstance(v, str) for v in edge) and edge in keys  # an agent's list is no key

    return sink.supersede(edges, filters=lines.filters, picks=picks)
