"""Graph node ids: normalisation and validation (pure).

Row-backed ids are canonical lower-case ``memory:<chromaId>`` / ``session:<sessionId>``;
``MEMORY:`` / ``SESSION:`` in any case are accepted on input and the suffix keeps its case.
Every other prefix (``CONCEPT:``, ``CLASS:`` …) is left exactly as given.
"""

from __future__ import annotations

import re
from typing import Literal

MAX_NODE_ID_LENGTH = 512
MAX_ROW_ID_LENGTH = 200
ROW_PREFIXES: tuple[str, ...] = ("memory", "session")
RowKind = Literal["memory", "session"]

_ROW_ID = re.compile(r"[A-Za-z0-9_.:@+=-]{1,%d}" % MAX_ROW_ID_LENGTH)
# A notes file's key (:func:`note_key`).
_NOTE_KEY = re.compile(r"note-[0-9a-f]{16}")
# Control characters, and lone surrogates (JSON "\\udc00" decodes to one; SQLite cannot store it).
_FORBIDDEN = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


class InvalidIdError(ValueError):
    """An id is too long, empty, or has characters that are not allowed."""


def validate_row_id(value: object, *, what: str = "id") -> str:
    """Return ``value`` if it is a valid Chroma row / session id, else raise :class:`InvalidIdError`.

    Allowed: 1–200 characters from ``A-Z a-z 0-9 _ . : @ + = -``.
    """
    if not isinstance(value, str) or not _ROW_ID.fullmatch(value):
        shown = repr(value)[:80]
        raise InvalidIdError(
            f"invalid {what} {shown}: expected 1-{MAX_ROW_ID_LENGTH} characters from A-Z a-z 0-9 _ . : @ + = -"
        )
    return value


def is_valid_row_id(value: object) -> bool:
    """``True`` when :func:`validate_row_id` would accept ``value``."""
    return isinstance(value, str) and _ROW_ID.fullmatch(value) is not None


def has_forbidden_characters(value: str) -> bool:
    """``True`` when ``value`` holds a control character or a lone surrogate (no id may: PostgreSQL
    stores no NUL and neither engine encodes a lone surrogate)."""
    return _FORBIDDEN.search(value) is not None


def normalize_graph_node_id(node_id: str) -> str:
    """Canonicalise a graph node id and validate it.

    >>> normalize_graph_node_id("MEMORY:AbC")
    'memory:AbC'
    >>> normalize_graph_node_id("Session:s-1")
    'session:s-1'
    >>> normalize_graph_node_id("CONCEPT:Graph")
    'CONCEPT:Graph'
    """
    prefix, sep, suffix = node_id.partition(":") if isinstance(node_id, str) else ("", "", "")
    if prefix in ROW_PREFIXES and _ROW_ID.fullmatch(suffix):
        return node_id  # the common case: already canonical
    if not isinstance(node_id, str) or not node_id or node_id != node_id.strip():
        raise InvalidIdError(f"invalid node id {node_id!r}: empty or surrounded by white space")
    if len(node_id) > MAX_NODE_ID_LENGTH:
        raise InvalidIdError(f"invalid node id: {len(node_id)} characters, the limit is {MAX_NODE_ID_LENGTH}")
    if has_forbidden_characters(node_id):
        raise InvalidIdError(f"invalid node id {node_id[:80]!r}: control characters and lone surrogates are not allowed")
    if sep and prefix.lower() in ROW_PREFIXES:
        validate_row_id(suffix, what=f"{prefix.lower()} id")
        return f"{prefix.lower()}:{suffix}"
    return node_id


def row_kind(node_id: str) -> RowKind | None:
    """``"memory"`` / ``"session"`` for a (normalised) row-backed id, else ``None``."""
    prefix, sep, _ = node_id.partition(":")
    kind = prefix.lower()
    if sep and kind in ROW_PREFIXES:
        return kind  # type: ignore[return-value]
    return None


def row_suffix(node_id: str) -> str:
    """The Chroma id / session id behind a row-backed node id."""
    return node_id.partition(":")[2]


def row_id_given(given: str, kind: RowKind) -> str:
    """The id of a ``kind`` row (a turn's Chroma id, a session id) given either as itself or as its
    node id (``memory:``/``session:`` in any case), as ``show``, ``recall`` and ``export`` print it:
    a command taking one takes what another printed."""
    if row_kind(given) == kind:
        return row_suffix(given)
    return given


def note_key(path_digest: str) -> str:
    """The session-like key a notes file's chunks and chunk results are kept under
    (``note-<first 16 hex of its path's sha256>``): ``retry --session`` takes it."""
    return f"note-{path_digest[:16]}"


def is_note_key(session_id: str) -> bool:
    """Whether ``session_id`` is a notes file's key (:func:`note_key`), which ``import-notes``
    extracts and no cycle does."""
    return _NOTE_KEY.fullmatch(session_id) is not None


def memory_node_id(chroma_id: str) -> str:
    """``memory:<chromaId>``."""
    return f"memory:{validate_row_id(chroma_id, what='memory id')}"


def session_node_id(session_id: str) -> str:
    """``session:<sessionId>``."""
    return f"session:{validate_row_id(session_id, what='session id')}"
