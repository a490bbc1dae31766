"""Split a session's turns into token-bounded, turn-aligned chunks (pure, deterministic).

Greedy left-to-right packing: a turn joins the current chunk while the joined text still fits the
limit; a single turn over the limit stands alone, intact, flagged ``oversized_turn``. A session that
fits in one pass gives one chunk with ``chunked=False``.

Linear in the total text: each turn's size is measured once, and a chunk's joined size comes from
prefix sums (one bisect per chunk) instead of re-joining and re-estimating the chunk for every
added turn (the earlier system's quadratic way). A chunk's estimate comes from the same sums, and
its text is joined only when read: the extractor never reads it, so chunking a session that is
gigabytes long costs a few lists of integers, not a second copy of the session.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import Any

SEPARATOR = "\n"
DEFAULT_BYTES_PER_TOKEN = 3

Estimator = Callable[[Any], int]


def estimate_tokens(text: Any, bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN) -> int:
    """Coarse, reproducible token estimate: ``ceil(utf-8 bytes / bytes_per_token)``; 0 for a non-string.

    >>> estimate_tokens("x" * 300), estimate_tokens("x" * 301), estimate_tokens(None)
    (100, 101, 0)
    """
    if not isinstance(text, str):
        return 0
    return -(-_utf8_len(text) // bytes_per_token)


class Chunk:
    """One chunk of a session: consecutive turns joined with ``"\\n"``. Immutable.

    ``text`` is built on first read and kept: the extractor works from ``turn_indices`` and never
    needs the joined copy, so a huge session is not held twice in memory just to be chunked.
    """

    __slots__ = ("chunk_id", "turn_indices", "estimated_tokens", "oversized_turn", "_source", "_text")
    chunk_id: str
    turn_indices: tuple[int, ...]
    estimated_tokens: int
    oversized_turn: bool

    def __init__(
        self,
        chunk_id: str,
        turn_indices: tuple[int, ...],
        estimated_tokens: int,
        oversized_turn: bool = False,
        *,
        source: Sequence[str],
        text: str | None = None,
    ) -> None:
        values = (chunk_id, turn_indices, estimated_tokens, oversized_turn, source, text)
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Chunk is immutable: cannot set {name!r}")

    @property
    def text(self) -> str:
        """The chunk's turns joined with ``"\\n"``."""
        if self._text is None:
            indices = self.turn_indices
            text = SEPARATOR.join(self._source[indices[0] : indices[-1] + 1]) if indices else ""
            object.__setattr__(self, "_text", text)
        return self._text

    def _key(self) -> tuple[str, tuple[int, ...], int, bool, str]:
        return (self.chunk_id, self.turn_indices, self.estimated_tokens, self.oversized_turn, self.text)

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Chunk) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Chunk(chunk_id={self.chunk_id!r}, turns={len(self.turn_indices)}, "
            f"estimated_tokens={self.estimated_tokens}, oversized_turn={self.oversized_turn})"
        )


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """The chunks of one session; ``chunked`` is false when the session is a single pass."""

    chunked: bool
    total_estimated_tokens: int
    chunks: tuple[Chunk, ...]


def chunk_id(session_id: str, index: int) -> str:
    """``<session_id>:chunk:<index>``."""
    return f"{session_id}:chunk:{index}"


def chunk_session(
    turns: Sequence[Any] | None,
    *,
    session_id: str,
    safe_processing_limit_tokens: float | None,
    estimate: Estimator = estimate_tokens,
) -> ChunkPlan:
    """Pack ``turns`` (texts; a non-string counts as ``""``) into chunks of at most
    ``safe_processing_limit_tokens`` estimated tokens.

    ``chunked`` is true whenever the whole text exceeds the limit (even when that leaves one lone
    oversized turn). A missing, zero, negative or non-finite limit means "never chunk". Empty or
    ``None`` input gives one empty chunk. Packing is exact for a byte-rate estimator
    (:func:`estimate_tokens`, or a ``functools.partial`` of it); any other estimator packs on the sum
    of the turn estimates plus one separator estimate per join, which is exact for additive
    estimators. Each chunk's ``estimated_tokens`` equals ``estimate(chunk.text)``.
    """
    texts, known_ascii = _session_texts(turns)
    meter = _meter(estimate)
    total, spans, prefix = _pack(texts, limit_tokens=safe_processing_limit_tokens, meter=meter, known_ascii=known_ascii)
    separator_size = meter.size(SEPARATOR)
    chunks = []
    for number, (start, end, oversized) in enumerate(spans if spans is not None else [(0, len(texts), False)]):
        if meter.rate is not None:
            # Exactly estimate(text) for a byte-rate estimator, from sizes already measured.
            text, tokens = None, meter.cost(max(0, prefix[end] - prefix[start] + (end - start - 1) * separator_size))
        else:
            text = SEPARATOR.join(texts[start:end])
            tokens = estimate(text)
        chunks.append(Chunk(chunk_id(session_id, number), tuple(range(start, end)), tokens, oversized, source=texts, text=text))
    return ChunkPlan(chunked=spans is not None, total_estimated_tokens=total, chunks=tuple(chunks))


def _session_texts(turns: Sequence[Any] | None) -> tuple[list[str], bool]:
    """``(texts, known to be all ASCII)``: a private list of the turns (chunks read their text from
    it later, so the caller may reuse its own), a non-string turn replaced by ``""``."""
    texts = list(turns or ())
    try:
        if all(map(str.isascii, texts)):  # the ASCII test type-checks every turn on the way
            return texts, True
    except TypeError:  # a non-string turn
        pass
    if not all(map(isinstance, texts, repeat(str))):
        texts = [t if isinstance(t, str) else "" for t in texts]
    return texts, False


def plan_boundaries(
    texts: list[str], *, limit_tokens: float | None, estimate: Estimator = estimate_tokens
) -> tuple[int, list[tuple[int, int, bool]] | None]:
    """The packing decision alone: ``(total estimated tokens, spans)`` where each span is
    ``(first turn, end turn, oversized)``, or ``None`` when the session is a single pass."""
    total, spans, _ = _pack(texts, limit_tokens=limit_tokens, meter=_meter(estimate))
    return total, spans


def _pack(
    texts: list[str], *, limit_tokens: float | None, meter: _Meter, known_ascii: bool = False
) -> tuple[int, list[tuple[int, int, bool]] | None, list[int]]:
    """``(total, spans or None, prefix sizes)``; ``prefix[i]`` is the size of ``texts[:i]``, so a
    span ``[s, e)`` joined with separators measures ``prefix[e] - prefix[s] + (e - s - 1) * sep``."""
    prefix = list(accumulate(meter.sizes(texts, known_ascii=known_ascii), initial=0))
    separator_size = meter.size(SEPARATOR)
    joined_size = prefix[-1] + (len(texts) - 1) * separator_size if texts else 0
    total = meter.total(joined_size, texts)
    limit = _usable_limit(limit_tokens)
    if limit is None or total <= limit:
        return total, None, prefix
    capacity = meter.capacity(limit)
    spans: list[tuple[int, int, bool]] = []

    def joined_end(end: int) -> int:  # size of texts[:end] with a separator after each
        return prefix[end] + end * separator_size

    # Packing is one bisect per chunk, not work per turn per chunk: the furthest end whose joined
    # size still fits (sizes are non-negative, so joined sizes grow with the end).
    positions = range(len(texts) + 1)
    start = 0
    while start < len(texts):
        reach = joined_end(start) + separator_size + capacity
        end = bisect_right(positions, reach, lo=start + 1, key=joined_end) - 1
        spans.append((start, max(end, start + 1), end == start))
        start = max(end, start + 1)
    return total, spans, prefix


def split_oversized_text(text: str, *, limit_tokens: int, estimate: Estimator = estimate_tokens) -> list[str]:
    """Cut one over-limit text into consecutive parts that each fit ``limit_tokens``: on paragraph
    boundaries, else sentence boundaries, else line/word boundaries, else hard cuts. Concatenating
    the parts gives back ``text`` exactly (a boundary stays with the part it ends)."""
    if limit_tokens <= 0 or estimate(text) <= limit_tokens:
        return [text]
    return _split(text, limit_tokens, _meter(estimate), _BOUNDARIES)


# Separators tried in order, coarsest first; each stays attached to the piece it ends.
_BOUNDARIES: tuple[str, ...] = ("\n\n", ". ", "\n", " ")


@dataclass(frozen=True, slots=True)
class _Meter:
    """Additive sizes of texts, the token cost of a total size and the largest size that fits a
    limit — what linear-time packing needs from an estimator."""

    size: Callable[[str], int]
    cost: Callable[[int], int]
    rate: int | None

    def sizes(self, texts: list[str], *, known_ascii: bool = False) -> list[int]:
        if self.rate is not None and (known_ascii or all(map(str.isascii, texts))):
            return list(map(len, texts))  # an ASCII string's length is its UTF-8 size, at C speed
        return list(map(self.size, texts))

    def total(self, joined_size: int, texts: list[str]) -> int:
        return self.cost(joined_size) if self.rate is not None else self.size(SEPARATOR.join(texts))

    def capacity(self, limit: float) -> int:
        # ceil(size / rate) <= limit  <=>  size <= floor(limit) * rate, for integer sizes
        return math.floor(limit) * (self.rate or 1)


def _meter(estimate: Estimator) -> _Meter:
    rate = _byte_rate(estimate)
    if rate is not None:
        return _Meter(size=_utf8_len, cost=lambda size: -(-size // rate), rate=rate)
    return _Meter(size=estimate, cost=lambda size: size, rate=None)


def _split(text: str, limit: int, meter: _Meter, boundaries: tuple[str, ...]) -> list[str]:
    if meter.cost(meter.size(text)) <= limit:
        return [text]
    if not boundaries:
        return _hard_cut(text, limit, meter)
    boundary, finer = boundaries[0], boundaries[1:]
    pieces = [p + boundary for p in text.split(boundary)]
    pieces[-1] = pieces[-1][: len(pieces[-1]) - len(boundary)]
    parts: list[str] = []
    current: list[str] = []
    current_size = 0
    for piece in pieces:
        if not piece:
            continue
        piece_size = meter.size(piece)
        if meter.cost(piece_size) > limit:
            if current:
                parts.append("".join(current))
                current, current_size = [], 0
            parts.extend(_split(piece, limit, meter, finer))
        elif meter.cost(current_size + piece_size) <= limit:
            current.append(piece)
            current_size += piece_size
        else:
            parts.append("".join(current))
            current, current_size = [piece], piece_size
    if current:
        parts.append("".join(current))
    return parts


def _hard_cut(text: str, limit: int, meter: _Meter) -> list[str]:
    parts: list[str] = []
    while text:
        low, high = 1, len(text)
        while low < high:  # longest prefix that fits (binary search: sizes grow with length)
            mid = (low + high + 1) // 2
            if meter.cost(meter.size(text[:mid])) <= limit:
                low = mid
            else:
                high = mid - 1
        parts.append(text[:low])
        text = text[low:]
    return parts


def _usable_limit(limit: Any) -> float | None:
    if isinstance(limit, bool) or not isinstance(limit, (int, float)):
        return None
    if not math.isfinite(limit) or limit <= 0:
        return None
    return limit


def _byte_rate(estimate: Estimator) -> int | None:
    """The bytes-per-token of a byte-rate estimator, or ``None`` for any other estimator."""
    if estimate is estimate_tokens:
        return DEFAULT_BYTES_PER_TOKEN
    if isinstance(estimate, functools.partial) and estimate.func is estimate_tokens and not estimate.args:
        rate = estimate.keywords.get("bytes_per_token", DEFAULT_BYTES_PER_TOKEN)
        return rate if isinstance(rate, int) and rate > 0 else None
    return None


def _utf8_len(text: str) -> int:
    # An ASCII string's byte length is its length; skip the encode (the hot path of big sessions).
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
