"""Chroma adapter: the memory and summary collections, embedded or on a server.

Embedded mode (``REM_CHROMA_URL`` empty) uses ``chromadb.PersistentClient`` under the data dir and
runs its blocking calls in a worker thread; server mode uses Chroma's async HTTP client. Callers
see one async surface either way. The worker only reads; ``upsert_*`` exists for ``import``.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlparse

import anyio

from config import Settings
from config.redact import redact
from store.confined import DataDirPathError, confined_dir
from store.errors import StoreError
from store.graph import chunked
from store.ids import is_valid_row_id
from store.timeparse import BadTimeError, epoch_ms_to_utc, iso_to_utc

Metadata = dict[str, Any]


class ChromaStoreError(StoreError):
    """A Chroma call failed; ``reason_code`` says how in a word (a cycle's failure reason). Part of
    the :mod:`store.errors` family: Chroma is one of the stores."""

    reason_code = "chroma-error"


class ChromaUnavailableError(ChromaStoreError):
    """Chroma could not be reached (transport failure, refused credentials, rate or quota limit)."""

    reason_code = "chroma-unavailable"


class ChromaCollectionGoneError(ChromaUnavailableError):
    """A collection this store was reading was deleted meanwhile (dropped, or re-created: a new
    collection under the old name, as when agents re-index their store). Not the fault of the
    session or line being read: the work stops, charging nothing, and the next store reads the
    collection anew."""


class ChromaRowsMovedError(ChromaUnavailableError):
    """So many rows of a collection were deleted while it was read page by page that the read
    lost its place: nothing is wrong with Chroma or the rows, and the next read starts again."""


class ChromaQueryError(ChromaStoreError):
    """Chroma was reached and answered this call with an error (e.g. its own database refused the
    query): retrying later will not help, and Chroma is not down."""

    reason_code = "chroma-error"


class ChromaEmbeddingError(ChromaQueryError):
    """The collection was made with an embedding function this process cannot load (another
    program's, whose package is not installed here): it can be read, but nothing can be written to
    it or looked up in it by text, since Chroma embeds with the collection's own function."""


# chromadb is imported where a Chroma call is made, not with this module: it takes about half a
# second, which every command that never opens Chroma (status, show, search, --help) would pay.


def _unavailable_errors() -> tuple[type[Exception], ...]:
    """Chroma errors that mean "cannot use Chroma now" rather than "this call is wrong"."""
    from chromadb.errors import AuthorizationError, ChromaAuthError, QuotaError, RateLimitError, VersionMismatchError

    return (ChromaAuthError, AuthorizationError, RateLimitError, QuotaError, VersionMismatchError)
# The embedded store's own database file, under Settings.chroma_path: there once the store exists.
EMBEDDED_DATABASE = "chroma.sqlite3"
# Used when a server does not say its max batch size (old servers answer -1).
FALLBACK_MAX_BATCH_SIZE = 1000


# The largest integer every JSON reader keeps exact; a larger turn index is a corrupt value.
MAX_TURN_INDEX = 2**53 - 1
# The longest ``userId`` the worker keeps: what recall can be asked for (pipelines.recall
# check_user). A longer one could never be asked for, and PostgreSQL's user indexes refused one
# over ~2,700 bytes (the session failed its sync at every cycle there, not on SQLite: pghostile):
# it is a bad value, read as missing — the session is then no user's, shown to no user's recall.
MAX_USER_ID_CHARS = 200
# Metadata fields the worker reads as text; any other type is a bad value (read as missing).
TEXT_FIELDS: dict[str, tuple[str, ...]] = {"memory": ("userId", "role", "agent"), "summary": ("userId", "title")}


@dataclass(frozen=True, slots=True)
class RowValues:
    """What the worker reads from one row's metadata: its time, its turn index (memories only) and
    every bad value as ``<field>:<reason>``."""

    created_at: str | None
    turn_index: int | None
    problems: tuple[str, ...]


def read_row(row_id: object, metadata: Metadata, *, kind: str) -> RowValues:
    """Read a row's metadata totally (``kind`` is ``memory`` or ``summary``): a bad value is read as
    missing and named in ``problems``, never raised on, never clamped. Pure."""
    created, problems = read_created_at(metadata)
    index = None
    if kind == "memory":
        index, bad_index = read_turn_index(metadata.get("turnIndex"))
        if bad_index:
            problems.append(f"turnIndex:{bad_index}")
    return RowValues(created, index, (*row_problems(row_id, metadata, kind=kind), *problems))


@dataclass(frozen=True, slots=True)
class ChromaRow:
    """One row of a collection: id, document and metadata, with the fields every row may carry.

    Metadata is read on first use (an ids-only scan never pays for it) by :func:`read_row`."""

    id: str
    document: str
    metadata: Metadata = field(default_factory=dict)
    _values: RowValues | None = field(init=False, default=None, compare=False, repr=False)

    _kind = "memory"

    def values(self) -> RowValues:
        """The row's metadata, read once."""
        if self._values is None:
            object.__setattr__(self, "_values", read_row(self.id, self.metadata, kind=self._kind))
        return self._values  # type: ignore[return-value]

    @property
    def session_id(self) -> str | None:
        value = self.metadata.get("sessionId")
        return value if isinstance(value, str) and value else None

    @property
    def created_at(self) -> str | None:
        """The row's time (``createdAt``, else ``timestamp``) in canonical UTC; ``None`` when missing or bad."""
        return self.values().created_at

    @property
    def problems(self) -> tuple[str, ...]:
        """Every bad value of the row as ``<field>:<reason>``."""
        return self.values().problems


@dataclass(frozen=True, slots=True)
class MemoryRow(ChromaRow):
    """One memory (agent turn) as stored in Chroma."""

    @property
    def turn_index(self) -> int | None:
        """``turnIndex`` when it is a usable index; ``None`` when missing or bad."""
        return self.values().turn_index


@dataclass(frozen=True, slots=True)
class SummaryRow(ChromaRow):
    """One session summary as stored in Chroma (its id is opaque)."""

    _kind = "summary"


def read_created_at(metadata: Metadata) -> tuple[str | None, list[str]]:
    """The row's creation time in the canonical UTC form — ``createdAt`` (ISO 8601), else
    ``timestamp`` (epoch ms) — and a ``<field>:<reason>`` for each of the two that is present but
    bad. A bad value is read as missing (never clamped: a made-up time would sort as real). Total."""
    created: str | None = None
    problems: list[str] = []
    for name, parse in (("createdAt", iso_to_utc), ("timestamp", epoch_ms_to_utc)):
        value = metadata.get(name)
        if value is None:
            continue
        try:
            parsed = parse(value)
        except BadTimeError as exc:
            problems.append(f"{name}:{exc.reason}")
        else:
            created = created or parsed
    return created, problems


def row_created_at(metadata: Metadata) -> str | None:
    """ISO 8601 creation time from ``createdAt`` (ISO string) or ``timestamp`` (epoch ms); ``None``
    when neither is usable."""
    return read_created_at(metadata)[0]


def read_turn_index(value: object) -> tuple[int | None, str | None]:
    """``(turn index, None)``, or ``(None, reason)`` for a value that is no usable index (``None``
    is simply missing). Integral floats are accepted (some writers store numbers as floats). Total."""
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, "wrong-type"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, "not-finite"
        if not value.is_integer():
            return None, "not-an-integer"
    if not 0 <= value <= MAX_TURN_INDEX:
        return None, "out-of-range"
    return int(value), None


def row_problems(row_id: object, metadata: Metadata, *, kind: str) -> list[str]:
    """``<field>:<reason>`` for the id, the ``sessionId`` and the text fields of a row (times and
    turn index are read by :func:`read_created_at` / :func:`read_turn_index`). Pure."""
    problems: list[str] = []
    if not is_valid_row_id(row_id):
        problems.append("id:invalid")
    session_id = metadata.get("sessionId")
    if session_id is None:
        problems.append("sessionId:missing")
    elif not isinstance(session_id, str):
        problems.append("sessionId:wrong-type")
    elif not is_valid_row_id(session_id):
        problems.append("sessionId:invalid")
    problems.extend(f"{name}:wrong-type" for name in TEXT_FIELDS[kind] if metadata.get(name) is not None and not isinstance(metadata[name], str))
    if isinstance(metadata.get("userId"), str) and read_user_id(metadata) is None:
        problems.append("userId:too-long")
    return problems


def read_user_id(metadata: Metadata) -> str | None:
    """A row's ``userId``: its text, or ``None`` when missing, not text or longer than
    :data:`MAX_USER_ID_CHARS`. Pure."""
    user = metadata.get("userId")
    return user if isinstance(user, str) and len(user) <= MAX_USER_ID_CHARS else None


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


# What a NUL (U+0000) in a row's text or metadata is read as. PostgreSQL's text holds no NUL, and
# the JSON of a node's properties cannot give one up as text there (``\u0000 cannot be converted to
# text``): a session with one in a turn or its summary failed its sync at every cycle on PostgreSQL
# and was never ingested. Read as U+FFFD (Unicode's character for one that cannot be shown) on both
# engines, the two graphs agree and nothing else of the row is lost.
NUL_STAND_IN = "\ufffd"


def without_nul(value: Any) -> Any:
    """``value`` with every NUL of a string, or of the strings of a list, read as
    :data:`NUL_STAND_IN`; any other value as it is. Pure."""
    if isinstance(value, str):
        return value.replace("\x00", NUL_STAND_IN) if "\x00" in value else value
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    return value


def _rows(result: dict[str, Any], cls: Callable[..., Any]) -> list[Any]:
    """The rows of a ``get`` answer as ``cls``, their text and metadata :func:`without_nul` but
    the ids (the row's and its ``sessionId``): an id with a NUL stays one :func:`row_problems`
    refuses, never becomes another session's."""
    ids = result.get("ids") or []
    docs = result.get("documents") or [None] * len(ids)
    metas = result.get("metadatas") or [None] * len(ids)
    return [cls(i, without_nul(d) if isinstance(d, str) else "",
                {without_nul(k): v if k == "sessionId" else without_nul(v) for k, v in (m or {}).items()})
            for i, d, m in zip(ids, docs, metas, strict=True)]


class ChromaStore:
    """The two collections rem-cycle reads. Create with :meth:`connect`."""

    def __init__(self, settings: Settings, *, create: bool = True) -> None:
        """``create=False`` (a dry run's): an embedded store that does not exist yet is read as
        the empty store it would be, kept in memory: nothing is created under the data dir."""
        self._settings = settings
        self._create = create
        self._client: Any = None
        self._is_async = bool(settings.chroma_url)
        self._collections: dict[str, Any] = {}
        self._max_batch_size: int | None = None

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
        import chromadb
        from chromadb.config import Settings as ChromaSettings
        from chromadb.errors import ChromaError

        settings = self._settings
        chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
        try:
            if not self._is_async and not self._create and not (settings.chroma_path / EMBEDDED_DATABASE).exists():
                self._client = await anyio.to_thread.run_sync(partial(chromadb.EphemeralClient, settings=chroma_settings))
                return self._client
            if not self._is_async:
                confined_dir(settings.chroma_path, root=settings.data_dir)  # never a link out of the data dir
                try:
                    self._client = await anyio.to_thread.run_sync(
                        partial(chromadb.PersistentClient, path=str(settings.chroma_path), settings=chroma_settings)
                    )
                except ChromaError as exc:
                    # The embedded store is files on this disk, not a server to wait for: its own
                    # database refusing them (e.g. "file is not a database") means they are damaged.
                    raise ChromaQueryError(f"the embedded Chroma store is damaged ({self.location}): {_brief(exc)}") from exc
                return self._client
            url = urlparse(settings.chroma_url)
            headers = {}
            if settings.chroma_token is not None:
                headers["Authorization"] = f"Bearer {settings.chroma_token.get_secret_value()}"
            with self._deadline():
                self._client = await chromadb.AsyncHttpClient(
                    host=url.hostname or "127.0.0.1",
                    port=url.port or (443 if url.scheme == "https" else 8000),
                    ssl=url.scheme == "https",
                    headers=headers,
                    settings=chroma_settings,
                    tenant=settings.chroma_tenant,
                    database=settings.chroma_database,
                )
        except ChromaStoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - any client failure means "unreachable"
            raise ChromaUnavailableError(f"cannot open Chroma ({self.location}): {_brief(exc)}") from exc
        return self._client

    @property
    def location(self) -> str:
        return _where(self._settings)

    @contextmanager
    def _deadline(self) -> Iterator[None]:
        """Bound one call to the server by ``REM_CHROMA_TIMEOUT_SECONDS``: Chroma's HTTP client
        waits for ever, so a server that accepts and never answers (hung, frozen, a network black
        hole) would hold the cycle — alive, beating its heartbeat — for good."""
        seconds = self._settings.chroma_timeout_seconds
        try:
            with anyio.fail_after(seconds):
                yield
        except TimeoutError as exc:
            raise ChromaUnavailableError(f"Chroma did not answer within {seconds:g} s ({self.location})") from exc

    async def _call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        await self._ensure_client()
        from chromadb.errors import ChromaError, NotFoundError

        try:
            if self._is_async:
                with self._deadline():
                    return await fn(**kwargs)
            return await anyio.to_thread.run_sync(partial(fn, **kwargs))
        except ChromaUnavailableError:
            raise
        except NotFoundError as exc:
            name = next((n for n, c in self._collections.items() if c is getattr(fn, "__self__", None)), None)
            if name is None:  # asking for a collection by name: the caller says what a missing one means
                raise
            del self._collections[name]
            raise ChromaCollectionGoneError(
                f"the collection {name!r} ({self.location}) was deleted while rem-cycle was using it "
                "(dropped, or made again under its name): stopped, charging nothing; the next run reads it anew"
            ) from exc
        except (ValueError, TypeError):
            raise
        except ChromaError as exc:
            if isinstance(exc, _unavailable_errors()):
                raise ChromaUnavailableError(f"Chroma call failed ({self.location}): {_brief(exc)}") from exc
            raise ChromaQueryError(f"Chroma refused a call ({self.location}): {_brief(exc)}") from exc
        except Exception as exc:  # noqa: BLE001 - transport / server failures
            raise ChromaUnavailableError(f"Chroma call failed ({self.location}): {_brief(exc)}") from exc

    async def max_batch_size(self) -> int:
        """The most rows Chroma takes in one write or one ``ids`` / metadata read, as the client
        reports it (embedded: bounded by its SQLite's variable limit; server: its configured limit).
        Asked once per store."""
        if self._max_batch_size is None:
            client = await self._ensure_client()
            reported = await self._call(client.get_max_batch_size)
            self._max_batch_size = reported if isinstance(reported, int) and reported > 0 else FALLBACK_MAX_BATCH_SIZE
        return self._max_batch_size

    async def _page_size(self) -> int:
        """Rows per metadata/document read: the configured page size, within the batch limit."""
        return max(1, min(self._settings.chroma_page_size, await self.max_batch_size()))

    async def ping(self) -> None:
        """Raise :class:`ChromaUnavailableError` unless Chroma answers."""
        client = await self._ensure_client()
        await self._call(client.heartbeat)

    async def collection(self, name: str, *, create: bool = False) -> Any | None:
        """The named collection, or ``None`` when it does not exist (and ``create`` is false)."""
        if name in self._collections:
            return self._collections[name]
        from chromadb.errors import NotFoundError

        from store.embedding import make_embedding_function

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

    async def _embedding_collection(self, name: str, *, create: bool = False) -> Any | None:
        """:meth:`collection` for a call that embeds text (a write, a query by text): its embedding
        function must load here — else :class:`ChromaEmbeddingError`, where Chroma's client raised
        a bare ``ValueError`` deep in the call."""
        coll = await self.collection(name, create=create)
        if coll is None:
            return None
        try:
            coll.configuration  # noqa: B018 - loads the collection's persisted embedding function
        except (ValueError, KeyError) as exc:
            raise ChromaEmbeddingError(
                f"the collection {name!r} ({self.location}) embeds with a function this rem-cycle cannot load "
                f"({_brief(exc)}): nothing can be written to it or looked up in it by text here; install the package "
                "that registers that function, or give rem-cycle collections of its own "
                "(REM_MEMORY_COLLECTION, REM_SESSION_COLLECTION)"
            ) from exc
        return coll

    async def nearest_memories(self, text: str, *, limit: int) -> list[str]:
        """The ids of the ``limit`` memory rows nearest to ``text`` by the collection's own
        embedding function (none when the collection is missing)."""
        coll = await self._embedding_collection(self._settings.memory_collection)
        if coll is None:
            return []
        result = await self._call(coll.query, query_texts=[text], n_results=limit, include=[])
        return list((result.get("ids") or [[]])[0])

    async def collection_id(self, name: str) -> str | None:
        """The collection's own id (a collection made again under the name has another), or
        ``None`` when it does not exist."""
        coll = await self.collection(name)
        return None if coll is None else str(coll.id)

    async def memories(self) -> Any | None:
        return await self.collection(self._settings.memory_collection)

    async def summaries(self) -> Any | None:
        return await self.collection(self._settings.session_collection)

    # --- reads ---------------------------------------------------------------------------
    # Every read is paged or chunked: Chroma's embedded store fails a read of more rows than its
    # SQLite takes variables ("too many SQL variables", ~32k) and a server caps a request's size.
    async def scan(self, name: str, *, include: Sequence[str] = (), page_size: int | None = None) -> AsyncIterator[list[MemoryRow]]:
        """Page through a whole collection. ``include=()`` reads ids only, which is an order of
        magnitude cheaper than metadata on a large collection."""
        coll = await self.collection(name)
        if coll is None:
            return
        # Chroma sorts every row of the collection for each page, whatever its offset (INTERNALS
        # "Known limit"): ids are small enough to read in far larger pages than metadata (an
        # ids-only read has no per-row variable), which keeps an ids-only scan to a few such sorts.
        size = page_size or (self._settings.chroma_page_size * 50 if not include else await self._page_size())
        async for page in self._pages(coll, include=include, size=size):
            yield page

    async def scan_ids(self, name: str) -> AsyncIterator[list[str]]:
        """Page through a whole collection's ids (:meth:`scan` with nothing included, without a row
        object per id: the change scan reads every id of the memory collection each cycle)."""
        coll = await self.collection(name)
        if coll is None:
            return
        async for page in self._pages(coll, include=(), size=self._settings.chroma_page_size * 50, cls=None):
            yield page

    async def ids_from(self, name: str, *, offset: int, limit: int) -> list[str]:
        """Up to ``limit`` ids from position ``offset`` in Chroma's order (insertion order), in one
        call — so the ids are one consistent reading. A missing collection has none. Chroma sorts
        the whole collection to answer it (INTERNALS "Known limit"), whatever ``offset``."""
        coll = await self.collection(name)
        if coll is None:
            return []
        result = await self._call(coll.get, include=[], offset=offset, limit=limit)
        return list(result.get("ids") or [])

    async def _pages(
        self, coll: Any, *, include: Sequence[str], size: int, where: dict[str, Any] | None = None,
        cls: type[ChromaRow] | None = MemoryRow,
    ) -> AsyncIterator[list[Any]]:
        """Pages of rows of ``cls`` (``None``: of ids only), each row once. Pages are read by offset,
        and a row deleted before the end of a page already read moves every later row one place up:
        read on from the next offset, the scan would skip a row that is there (and the change scan
        took its turn for deleted). So each page starts with the last id of the page before, and
        when that id is not there, the scan goes on after the last id it read that still is."""
        size = max(size, 2)  # one id of each page is the page before's last
        offset, before = 0, []  # the place of the first row not read yet; the ids of the page before
        while True:
            start = offset - 1 if before else offset
            kwargs: dict[str, Any] = {"include": list(include), "limit": size, "offset": start}
            if where is not None:
                kwargs["where"] = where
            result = await self._call(coll.get, **kwargs)
            ids = list(result.get("ids") or [])
            if before and ids[:1] != before[-1:]:
                place, kept = await self._last_left(coll, before, end=start, size=size, where=where)
                offset, before = place + 1, [kept]
                continue
            page = ids if cls is None else _rows(result, cls)
            if before:
                page = page[1:]
            if page:
                yield page
            if len(ids) < size:
                return
            offset, before = start + len(ids), ids

    async def _last_left(self, coll: Any, read: Sequence[str], *, end: int, size: int,
                         where: dict[str, Any] | None) -> tuple[int, str]:
        """The place and id of the last of ``read`` (a page's ids, read before rows were deleted)
        that is still there, at or before ``end`` (deletions only move rows up);
        :class:`ChromaRowsMovedError` when none of them is in the page that ends there."""
        first = max(0, end - size + 1)
        kwargs: dict[str, Any] = {"include": [], "limit": end - first + 1, "offset": first}
        if where is not None:
            kwargs["where"] = where
        ids = list((await self._call(coll.get, **kwargs)).get("ids") or [])
        kept = set(read)
        for place in range(len(ids) - 1, -1, -1):
            if ids[place] in kept:
                return first + place, ids[place]
        raise ChromaRowsMovedError(f"a page's worth of rows of {coll.name!r} was deleted while they were being read; "
                                   "the next read starts again")

    async def _by_ids(self, coll: Any, ids: Sequence[str], *, include: Sequence[str], cls: type[ChromaRow] = MemoryRow) -> list[Any]:
        """The rows among ``ids`` that exist, read in chunks within the batch limit."""
        size = await self._page_size()
        rows: list[Any] = []
        for part in chunked(list(ids), size):
            rows += _rows(await self._call(coll.get, ids=list(part), include=list(include)), cls)
        return rows

    async def _of_sessions(self, coll: Any, session_ids: Iterable[str], *, include: Sequence[str], cls: type[ChromaRow]) -> list[Any]:
        """Every row whose ``sessionId`` is among ``session_ids``: the ``$in`` list is chunked and
        each chunk's result paged, so neither grows a request past the batch limit."""
        size = await self._page_size()
        rows: list[Any] = []
        for part in chunked(sorted(set(session_ids)), size):
            where: dict[str, Any] = {"sessionId": part[0]} if len(part) == 1 else {"sessionId": {"$in": list(part)}}
            async for page in self._pages(coll, include=include, size=size, where=where, cls=cls):
                rows += page
        return rows

    async def metadata_by_ids(self, name: str, ids: Sequence[str], *, cls: type[ChromaRow] = MemoryRow) -> list[Any]:
        """Ids and metadata (no documents) of the rows among ``ids`` that exist, as ``cls`` rows."""
        coll = await self.collection(name)
        if coll is None or not ids:
            return []
        return await self._by_ids(coll, ids, include=["metadatas"], cls=cls)

    async def memories_for_session(self, session_id: str, *, memory_ids: Sequence[str] | None = None) -> list[MemoryRow]:
        """Every memory row of one session, in turn order (paged reads; by id when ``memory_ids``
        are known, see :meth:`memories_for_sessions`)."""
        known = None if memory_ids is None else {session_id: memory_ids}
        return (await self.memories_for_sessions([session_id], memory_ids=known)).get(session_id, [])

    async def memories_by_ids(self, ids: Sequence[str]) -> list[MemoryRow] | None:
        """The memory rows among ``ids`` that exist; ``None`` when the collection is missing."""
        coll = await self.memories()
        if coll is None:
            return None
        return await self._by_ids(coll, ids, include=["metadatas", "documents"])

    async def summaries_for_sessions(self, session_ids: Iterable[str]) -> dict[str, SummaryRow] | None:
        """Summary rows by session id, looked up by ``where`` (summary ids are opaque); ``None`` when
        the collection is missing. With several rows for one session, the newest wins."""
        coll = await self.summaries()
        if coll is None:
            return None
        return latest_by_session(await self._of_sessions(coll, session_ids, include=["metadatas", "documents"], cls=SummaryRow))

    async def memories_for_sessions(
        self, session_ids: Iterable[str], *, memory_ids: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, list[MemoryRow]]:
        """Memory rows of many sessions (paged reads), each list in turn order. With ``memory_ids``
        (each session's row ids, as the cycle's scan found them) the rows are read by id: Chroma
        answers a ``where`` on metadata by scanning the collection, so that read costs more as the
        history grows, and a read by id does not. A row is kept under the session it names."""
        coll = await self.memories()
        wanted = sorted(set(session_ids))
        if coll is None or not wanted:
            return {}
        include = ["metadatas", "documents"]
        if memory_ids is None:
            rows = await self._of_sessions(coll, wanted, include=include, cls=MemoryRow)
        else:
            rows = await self._by_ids(coll, sorted({m for sid in wanted for m in memory_ids.get(sid, ())}), include=include)
        grouped: dict[str, dict[str, MemoryRow]] = {sid: {} for sid in wanted}
        for row in rows:
            if row.session_id in grouped:
                grouped[row.session_id][row.id] = row
        return {sid: sorted(rows.values(), key=turn_order_key) for sid, rows in grouped.items()}

    async def collection_state(self, name: str) -> CollectionState | None:
        """The collection's row count and its last :data:`STATE_TAIL` rows, whole (``None`` when it
        does not exist): see :class:`CollectionState`. Two calls; the second sorts the collection
        (INTERNALS "Known limit"), some 20 ms at 100,000 rows embedded."""
        coll = await self.collection(name)
        if coll is None:
            return None
        count = await self._call(coll.count)
        tail = await self._call(coll.get, offset=max(0, count - STATE_TAIL), limit=STATE_TAIL, include=["metadatas", "documents"])
        return CollectionState(count, tuple((r.id, r.document, r.metadata) for r in _rows(tail, MemoryRow)))

    async def sessions_with_memories(self, session_ids: Iterable[str]) -> set[str] | None:
        """The session ids among ``session_ids`` that have at least one memory row (one id read of
        at most one row per session, however large the session); ``None`` when the memory
        collection is missing."""
        coll = await self.memories()
        if coll is None:
            return None
        found: set[str] = set()
        for sid in sorted(set(session_ids)):
            if (await self._call(coll.get, where={"sessionId": sid}, include=[], limit=1)).get("ids"):
                found.add(sid)
        return found

    # --- writes (import only) ------------------------------------------------------------
    async def upsert(self, name: str, ids: list[str], documents: list[str], metadatas: list[Metadata]) -> None:
        """Write rows to a collection, creating it (with the configured embedding function), in
        batches within the client's max batch size."""
        coll = await self._embedding_collection(name, create=True)
        size = await self.max_batch_size()
        for start in range(0, len(ids), size):
            stop = start + size
            await self._call(coll.upsert, ids=ids[start:stop], documents=documents[start:stop], metadatas=metadatas[start:stop])

    async def rewrite(self, name: str, ids: list[str], documents: list[str], metadatas: list[Metadata]) -> None:
        """Write new contents for existing rows by deleting and adding them again, batch by batch:
        an upsert keeps a row's place in Chroma's insertion order, where only the next full scan
        looks again, while a row added again comes after the scan marks and is read by the next
        cycle (its session synced and extracted again). Between a batch's delete and its add the
        rows are missing; a rewrite stopped there is completed by running it again."""
        coll = await self._embedding_collection(name, create=True)
        size = await self.max_batch_size()
        for start in range(0, len(ids), size):
            stop = start + size
            await self._call(coll.delete, ids=ids[start:stop])
            await self._call(coll.add, ids=ids[start:stop], documents=documents[start:stop], metadatas=metadatas[start:stop])

    async def get_existing(self, name: str, ids: list[str]) -> dict[str, tuple[str, Metadata]]:
        """``id -> (document, metadata)`` for the ids that exist in the collection."""
        coll = await self.collection(name)
        if coll is None or not ids:
            return {}
        return {r.id: (r.document, r.metadata) for r in await self._by_ids(coll, ids, include=["metadatas", "documents"])}


# Rows at the end of a collection that :class:`CollectionState` holds whole.
STATE_TAIL = 32
# The fewest turns of a session whose turns a cycle's ingest phase hands its extract phase
# (:class:`TurnsHandOff`): below it, reading them again costs about what checking them does.
HAND_OFF_MIN_TURNS = 10_000


@dataclass(frozen=True, slots=True)
class CollectionState:
    """A collection's row count and its last rows (id, document, metadata). Equal states taken
    before and after a read of some of its rows mean that none was written again between them:
    Chroma keeps rows in insertion order, and a row deleted and added again (``rewrite``, as
    ``import`` rewrites a turn) goes to the end — the last rows change, their ids or, for the last
    row itself, its words — while a row added or deleted changes the count (INTERNALS "What a cycle
    reads of Chroma"). An agent's ``upsert`` of new words in place is what it never shows; the
    next full scan sees it (README "Source data")."""

    count: int
    tail: tuple[tuple[str, str, Metadata], ...]


class TurnsHandOff:
    """The turns a cycle's ingest phase read for the sessions it synced, handed to its extract
    phase, which would read them again from Chroma: a session of 100,000 turns is read once a
    cycle, not twice (bench/RESULTS.md, "Turns handed to extraction"). The sessions of at least
    ``min_turns`` turns of a read are kept (of the last read only: the hand-off holds no more than
    one ingest batch's turns), with the memory collection's :class:`CollectionState` taken before it; the
    extract phase is given a session's turns only while the collection's state is still that one and
    the session's memory ids are the ones read — a turn rewritten meanwhile is read again, with its
    new words, as before. A session is handed over once; anything else is read from Chroma."""

    def __init__(self, chroma: ChromaStore, collection: str, *, min_turns: int = HAND_OFF_MIN_TURNS) -> None:
        self._chroma = chroma
        self._collection = collection
        self._min_turns = min_turns
        self._state: CollectionState | None = None
        self._held: dict[str, tuple[tuple[str, ...], list[MemoryRow]]] = {}

    async def read(self, session_ids: Sequence[str], memory_ids: Mapping[str, Sequence[str]] | None) -> dict[str, list[MemoryRow]]:
        """:meth:`ChromaStore.memories_for_sessions`, kept for the extract phase when it is big enough."""
        self._state, self._held = None, {}  # the previous read's turns go: one batch's at most
        big = {sid: tuple(sorted(ids)) for sid in session_ids
               if len(ids := (memory_ids or {}).get(sid, ())) >= self._min_turns}
        # Taken before the read (see CollectionState); only for a big session, whose read costs more.
        state = await self._chroma.collection_state(self._collection) if big else None
        rows = await self._chroma.memories_for_sessions(session_ids, memory_ids=memory_ids)
        if state is not None:
            self._state = state
            self._held = {sid: (ids, rows[sid]) for sid, ids in big.items() if sid in rows}
        return rows

    async def memories_for_session(self, session_id: str, *, memory_ids: Sequence[str] | None) -> list[MemoryRow]:
        """The session's turns as :meth:`ChromaStore.memories_for_session` reads them: those handed
        over when they are still Chroma's (see the class), else read now."""
        held = self._held.pop(session_id, None)
        if held is not None and held[0] == tuple(sorted(memory_ids or ())) and self._state is not None:
            if await self._chroma.collection_state(self._collection) == self._state:
                return held[1]
        return await self._chroma.memories_for_session(session_id, memory_ids=memory_ids)


def _brief(exc: BaseException) -> str:
    """One line naming the error, without the server's multi-line bodies. An error answer that is
    not Chroma's JSON (Chroma's client raises it as a bare ``Exception`` of the body, from the
    ``HTTPStatusError``) is said by its status and request: its body's first line was
    ``<!DOCTYPE HTML>`` when ``REM_CHROMA_URL`` named another web server or a proxy's error page."""
    import httpx

    status = exc.__context__
    if type(exc) is Exception and isinstance(status, httpx.HTTPStatusError):
        answer, request = status.response, status.request
        return (f"HTTP {answer.status_code} {answer.reason_phrase} for {request.method} {redact(str(request.url))}, "
                "not an answer of a Chroma server (is REM_CHROMA_URL a Chroma server's address?)")
    if isinstance(exc, DataDirPathError):  # names the path and what is wrong with it: its type adds nothing
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _where(settings: Settings) -> str:
    # In full, as status gives the data dir and the graph database: a relative path means nothing
    # to whoever reads a log or an MCP client's error from another working directory.
    return redact(settings.chroma_url) or f"embedded at {os.path.abspath(settings.chroma_path)}"
