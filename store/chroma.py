"""Chroma adapter: the memory and summary collections, embedded or on a server.

Embedded mode (``REM_CHROMA_URL`` empty) uses ``chromadb.PersistentClient`` under the data dir and
runs its blocking calls in a worker thread; server mode uses Chroma's async HTTP client. Callers
see one async surface either way. The worker only reads; ``upsert_*`` exists for ``import``.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import urlparse

import anyio
import chromadb
from chromadb.config import Settings as ChromaSettings
from chromadb.errors import NotFoundError

from config import Settings
from config.redact import redact
from store.confined import confined_dir
from store.embedding import make_embedding_function

Metadata = dict[str, Any]


class ChromaUnavailableError(RuntimeError):
    """Chroma could not be reached or answered with an error."""


@dataclass(frozen=True, slots=True)
class ChromaRow:
    """One row of a collection: id, document and metadata, with the fields every row may carry."""

    id: str
    document: str
    metadata: Metadata = field(default_factory=dict)

    @property
    def session_id(self) -> str | None:
        value = self.metadata.get("sessionId")
        return value if isinstance(value, str) and value else None

    @property
    def created_at(self) -> str | None:
        return row_created_at(self.metadata)


@dataclass(frozen=True, slots=True)
class MemoryRow(ChromaRow):
    """One memory (agent turn) as stored in Chroma."""

    @property
    def turn_index(self) -> int | None:
        value = self.metadata.get("turnIndex")
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class SummaryRow(ChromaRow):
    """One session summary as stored in Chroma (its id is opaque)."""


def row_created_at(metadata: Metadata) -> str | None:
    """ISO 8601 creation time from ``createdAt`` (ISO string) or ``timestamp`` (epoch ms); ``None``
    when neither is usable."""
    created = metadata.get("createdAt")
    if isinstance(created, str) and created:
        try:
            parsed = datetime.fromisoformat(created.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    stamp = metadata.get("timestamp")
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and math.isfinite(stamp):
        try:
            moment = datetime.fromtimestamp(stamp / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            return None
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return None


def turn_order_key(row: MemoryRow) -> tuple[int, int, str, str]:
    """Turn order inside a session: ``turnIndex``, else time, else id."""
    index = row.turn_index
    return (0 if index is not None else 1, index if index is not None else 0, row.created_at or "", row.id)


def latest_by_session(summaries: Iterable[SummaryRow]) -> dict[str, SummaryRow]:
    """One summary per session id: the newest (by creation time, then id) when there are several."""
    found: dict[str, SummaryRow] = {}
    for row in sorted(summaries, key=lambda r: (r.created_at or "", r.id)):
        if row.session_id:
            found[row.session_id] = row
    return found


def _rows(result: dict[str, Any], cls: Callable[..., Any]) -> list[Any]:
    ids = result.get("ids") or []
    docs = result.get("documents") or [None] * len(ids)
    metas = result.get("metadatas") or [None] * len(ids)
    return [cls(i, d if isinstance(d, str) else "", dict(m or {})) for i, d, m in zip(ids, docs, metas, strict=True)]


class ChromaStore:
    """The two collections rem-cycle reads. Create with :meth:`connect`."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: Any = None
        self._is_async = bool(settings.chroma_url)
        self._collections: dict[str, Any] = {}

    @classmethod
    async def connect(cls, settings: Settings) -> "ChromaStore":
        """A store that has already reached Chroma (raises :class:`ChromaUnavailableError`)."""
        store = cls(settings)
        await store._ensure_client()
        return store

    async def _ensure_client(self) -> Any:
        """Open the embedded store or connect to the server on first use, so that a Chroma that is
        down fails the cycle's first phase (recorded) rather than the process start."""
        if self._client is not None:
            return self._client
        settings = self._settings
        chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
        try:
            if not self._is_async:
                confined_dir(settings.chroma_path, root=settings.data_dir)  # never a link out of the data dir
                self._client = await anyio.to_thread.run_sync(
                    partial(chromadb.PersistentClient, path=str(settings.chroma_path), settings=chroma_settings)
                )
                return self._client
            url = urlparse(settings.chroma_url)
            headers = {}
            if settings.chroma_token is not None:
                headers["Authorization"] = f"Bearer {settings.chroma_token.get_secret_value()}"
            self._client = await chromadb.AsyncHttpClient(
                host=url.hostname or "127.0.0.1",
                port=url.port or (443 if url.scheme == "https" else 8000),
                ssl=url.scheme == "https",
                headers=headers,
                settings=chroma_settings,
                tenant=settings.chroma_tenant,
                database=settings.chroma_database,
            )
        except Exception as exc:  # noqa: BLE001 - any client failure means "unreachable"
            raise ChromaUnavailableError(f"cannot open Chroma ({self.location}): {_brief(exc)}") from exc
        return self._client

    @property
    def location(self) -> str:
        return _where(self._settings)

    async def _call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        await self._ensure_client()
        try:
            if self._is_async:
                return await fn(**kwargs)
            return await anyio.to_thread.run_sync(partial(fn, **kwargs))
        except NotFoundError:
            raise
        except (ValueError, TypeError):
            raise
        except Exception as exc:  # noqa: BLE001 - transport / server failures
            raise ChromaUnavailableError(f"Chroma call failed ({self.location}): {_brief(exc)}") from exc

    async def ping(self) -> None:
        """Raise :class:`ChromaUnavailableError` unless Chroma answers."""
        client = await self._ensure_client()
        await self._call(client.heartbeat)

    async def collection(self, name: str, *, create: bool = False) -> Any | None:
        """The named collection, or ``None`` when it does not exist (and ``create`` is false)."""
        if name in self._collections:
            return self._collections[name]
        try:
            if create:
                coll = await self._call(
                    (await self._ensure_client()).get_or_create_collection,
                    name=name,
                    embedding_function=make_embedding_function(self._settings),
                )
            else:
                coll = await self._call((await self._ensure_client()).get_collection, name=name)
        except NotFoundError:
            return None
        self._collections[name] = coll
        return coll

    async def memories(self) -> Any | None:
        return await self.collection(self._settings.memory_collection)

    async def summaries(self) -> Any | None:
        return await self.collection(self._settings.session_collection)

    # --- reads ---------------------------------------------------------------------------
    async def scan(self, name: str, *, include: Sequence[str] = (), page_size: int | None = None) -> AsyncIterator[list[MemoryRow]]:
        """Page through a whole collection. ``include=()`` reads ids only, which is an order of
        magnitude cheaper than metadata on a large collection."""
        coll = await self.collection(name)
        if coll is None:
            return
        # Chroma pages by offset, so every page re-walks the ones before it: ids are small enough to
        # read in far larger pages than metadata, which keeps an ids-only scan close to linear.
        size = page_size or (self._settings.chroma_page_size * (50 if not include else 1))
        offset = 0
        while True:
            result = await self._call(coll.get, include=list(include), limit=size, offset=offset)
            page = _rows(result, MemoryRow)
            if page:
                yield page
            if len(page) < size:
                return
            offset += size

    async def metadata_by_ids(self, name: str, ids: Sequence[str]) -> list[MemoryRow]:
        """Ids and metadata (no documents) of the rows among ``ids`` that exist."""
        coll = await self.collection(name)
        if coll is None or not ids:
            return []
        return _rows(await self._call(coll.get, ids=list(ids), include=["metadatas"]), MemoryRow)

    async def memories_for_session(self, session_id: str) -> list[MemoryRow]:
        """Every memory row of one session, in turn order (one Chroma read)."""
        coll = await self.memories()
        if coll is None:
            return []
        result = await self._call(coll.get, where={"sessionId": session_id}, include=["metadatas", "documents"])
        return sorted(_rows(result, MemoryRow), key=turn_order_key)

    async def memories_by_ids(self, ids: Sequence[str]) -> list[MemoryRow] | None:
        """The memory rows among ``ids`` that exist; ``None`` when the collection is missing."""
        coll = await self.memories()
        if coll is None:
            return None
        if not ids:
            return []
        result = await self._call(coll.get, ids=list(ids), include=["metadatas", "documents"])
        return _rows(result, MemoryRow)

    async def summaries_for_sessions(self, session_ids: Iterable[str]) -> dict[str, SummaryRow] | None:
        """Summary rows by session id, looked up by ``where`` (summary ids are opaque); ``None`` when
        the collection is missing. With several rows for one session, the newest wins."""
        coll = await self.summaries()
        if coll is None:
            return None
        wanted = sorted(set(session_ids))
        if not wanted:
            return {}
        where: dict[str, Any] = {"sessionId": wanted[0]} if len(wanted) == 1 else {"sessionId": {"$in": wanted}}
        result = await self._call(coll.get, where=where, include=["metadatas", "documents"])
        return latest_by_session(_rows(result, SummaryRow))

    async def memories_for_sessions(self, session_ids: Iterable[str]) -> dict[str, list[MemoryRow]]:
        """Memory rows of many sessions in one read, each list in turn order."""
        coll = await self.memories()
        wanted = sorted(set(session_ids))
        if coll is None or not wanted:
            return {}
        where: dict[str, Any] = {"sessionId": wanted[0]} if len(wanted) == 1 else {"sessionId": {"$in": wanted}}
        result = await self._call(coll.get, where=where, include=["metadatas", "documents"])
        grouped: dict[str, list[MemoryRow]] = {sid: [] for sid in wanted}
        for row in _rows(result, MemoryRow):
            if row.session_id in grouped:
                grouped[row.session_id].append(row)
        return {sid: sorted(rows, key=turn_order_key) for sid, rows in grouped.items()}

    async def sessions_with_memories(self, session_ids: Iterable[str]) -> set[str] | None:
        """The session ids among ``session_ids`` that have at least one memory row (one read of
        metadata, no documents); ``None`` when the memory collection is missing."""
        coll = await self.memories()
        if coll is None:
            return None
        wanted = sorted(set(session_ids))
        if not wanted:
            return set()
        where: dict[str, Any] = {"sessionId": wanted[0]} if len(wanted) == 1 else {"sessionId": {"$in": wanted}}
        result = await self._call(coll.get, where=where, include=["metadatas"])
        return {row.session_id for row in _rows(result, MemoryRow) if row.session_id in wanted}

    # --- writes (import only) ------------------------------------------------------------
    async def upsert(self, name: str, ids: list[str], documents: list[str], metadatas: list[Metadata]) -> None:
        """Write rows to a collection, creating it (with the configured embedding function)."""
        coll = await self.collection(name, create=True)
        await self._call(coll.upsert, ids=ids, documents=documents, metadatas=metadatas)

    async def get_existing(self, name: str, ids: list[str]) -> dict[str, tuple[str, Metadata]]:
        """``id -> (document, metadata)`` for the ids that exist in the collection."""
        coll = await self.collection(name)
        if coll is None or not ids:
            return {}
        result = await self._call(coll.get, ids=ids, include=["metadatas", "documents"])
        return {r.id: (r.document, r.metadata) for r in _rows(result, MemoryRow)}


def _brief(exc: BaseException) -> str:
    """One line naming the error, without the server's multi-line bodies."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _where(settings: Settings) -> str:
    return redact(settings.chroma_url) or f"embedded at {settings.chroma_path}"
