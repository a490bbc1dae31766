"""Live ingestion: Chroma session + memory rows → SESSION and MEMORY nodes with ORIGINATES_IN edges.

The pure part (:func:`plan_session_sync`, :func:`payload_hash`, :func:`session_revision`) turns rows
into nodes and edges; :func:`sync_sessions_to_graph` does the I/O: one Chroma read per batch of
sessions, one transaction per batch of graph writes.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

import anyio

from pipelines.extract.model import MAX_NAME_CHARS
from pipelines.ports import UnitOfWork
from pipelines.vocabulary import MEMORY_LABEL
from store.chroma import ChromaStore, ChromaUnavailableError, MemoryRow, SummaryRow, TurnsHandOff, latest_by_session, read_user_id
from store.errors import LeaseLostError
from store.graph import Edge, Node, dumps
from store.ids import InvalidIdError, is_valid_row_id, memory_node_id, session_node_id
from store.library_log import get_logger
from store.runstate import SessionRevision
from store.scan_marks import ScanMark
from store.tombstones import MEMORY, SESSION

log = get_logger(__name__)

ORIGINATES_IN = "ORIGINATES_IN"
LIVE_MARKER = "liveIngested"
BACKFILL_MARKER = "backfilled"


@dataclass(slots=True, kw_only=True)
class ErrorTally:
    """A count of rejected rows with the first reasons (bounded, so a bad collection cannot grow it),
    and of bad metadata values by ``<field>:<reason>`` (rejected rows and rows read with the bad
    value taken as missing alike)."""

    errors: int = 0
    error_details: list[str] = field(default_factory=list)
    bad_values: Counter[str] = field(default_factory=Counter)

    def error(self, message: str) -> None:
        self.errors += 1
        if len(self.error_details) < 100:
            self.error_details.append(message)


@dataclass(slots=True, kw_only=True)
class SyncStats(ErrorTally):
    """Counts of one sync; ``error_details`` says what went wrong per row (never raised)."""

    processed: int = 0
    upserted: int = 0
    skipped: int = 0
    # Turns the graph held, live-ingested, whose row now says something else (text or metadata
    # rewritten under the same id): what the session's extraction read of them is out of date.
    rewritten: int = 0
    # Of those, the turns whose text changed (not only their metadata) — MEMORY node ids, by the
    # session whose extraction quoted them (the one the turn was in: another when it moved too):
    # their old words leave the recall index now, that extraction at its next commit, and the
    # queue lines it queued of them before that (store/withdrawals.py) — deleted text, due to be
    # erased from the database's files as a retracted turn's is (store/erasure.py).
    text_replaced: dict[str, set[str]] = field(default_factory=dict)
    # Turns moved here from another session with the same words — MEMORY node ids, by the session
    # they left: the lines that session's extraction queued of them (naming its chunks, and the
    # turn in it) are withdrawn as a retracted turn's are; no words are deleted (they are here).
    moved_from: dict[str, set[str]] = field(default_factory=dict)
    # Whether the session's summary row now says something else (its text or title: not only its
    # other metadata): the old words leave the SESSION node and the recall index now, due to be
    # erased (no extraction quotes them).
    summary_replaced: bool = False
    # Turns the graph held whose rows left Chroma (their MEMORY node ids): those nodes (and their
    # recall text) went, and the queue lines their extraction queued go after the commit.
    retracted: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"processed": self.processed, "upserted": self.upserted, "skipped": self.skipped, "errors": self.errors}


def payload_hash(fields: dict[str, Any]) -> str:
    """sha256 of the key-sorted JSON of the fields a node stores."""
    return hashlib.sha256(dumps(fields).encode()).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def session_node(session_id: str, summary: SummaryRow | None, *, marker: str, memory_count: int | None = None) -> Node:
    """The SESSION node for a session; ``summary`` None gives a minimal node."""
    meta = summary.metadata if summary else {}
    title = meta.get("title") if isinstance(meta.get("title"), str) else None
    fields: dict[str, Any] = {
        "sessionId": session_id,
        "createdAt": summary.created_at if summary else None,
        "userId": read_user_id(meta),
        "title": title,
        "chromaId": summary.id if summary else None,
        "summary": summary.document if summary else None,
    }
    if memory_count is not None:
        fields["memoryCount"] = memory_count
    fields = {k: v for k, v in fields.items() if v is not None}
    properties = {**fields, "payloadHash": payload_hash(fields), marker: True}
    if summary is None:
        properties["minimal"] = True
    # The node's name is indexed (``nodes_label_name``), and PostgreSQL keeps an index entry on one
    # page (2,704 bytes): a title of any length (the ``title`` property keeps it whole) failed the
    # session's sync there at every cycle, not on SQLite (pghostile). Its first MAX_NAME_CHARS.
    return Node(session_node_id(session_id), "SESSION", (title or session_id)[:MAX_NAME_CHARS], properties)


def memory_node(row: MemoryRow, *, marker: str) -> Node:
    """The MEMORY node for one memory row (its text stays in Chroma; the node keeps its hash)."""
    meta = row.metadata
    fields: dict[str, Any] = {
        "chromaId": row.id,
        "sessionId": row.session_id,
        "createdAt": row.created_at,
        "userId": read_user_id(meta),
        "turnIndex": row.turn_index,
        "role": meta.get("role") if isinstance(meta.get("role"), str) else None,
        "agent": meta.get("agent") if isinstance(meta.get("agent"), str) else None,
        "contentHash": text_hash(row.document),
        "chars": len(row.document),
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    preview = " ".join(row.document.split())[:80]
    properties = {**fields, "payloadHash": payload_hash(fields), marker: True}
    return Node(memory_node_id(row.id), "MEMORY", preview or row.id, properties)


def plan_session_sync(
    session_id: str,
    rows: Sequence[MemoryRow],
    summary: SummaryRow | None,
    existing: dict[str, Node],
) -> tuple[list[Node], list[Node], list[Edge], SyncStats]:
    """Decide what a live sync writes: (session nodes, memory nodes, edges, stats). Pure.

    A node is skipped when the graph already holds it live-ingested with the same payload hash; a
    back-filled one is re-written so its marker becomes ``liveIngested``.
    """
    stats = SyncStats()
    if summary is not None:
        stats.bad_values.update(summary.problems)
    try:
        session = session_node(session_id, summary, marker=LIVE_MARKER, memory_count=len(rows))
    except InvalidIdError as exc:
        stats.error(f"session {session_id!r}: {exc}")
        return [], [], [], stats
    sessions = [] if _is_current(session, existing) else [session]
    stats.summary_replaced = bool(sessions) and _summary_replaced(existing.get(session.id), session)
    memories: list[Node] = []
    edges: list[Edge] = []
    for row in rows:
        stats.processed += 1
        stats.bad_values.update(row.problems)
        if row.session_id is None:
            stats.error(f"memory {row.id!r}: metadata has no sessionId")
            continue
        if row.session_id != session_id:
            stats.error(f"memory {row.id!r}: sessionId {row.session_id!r} is not {session_id!r}")
            continue
        try:
            node = memory_node(row, marker=LIVE_MARKER)
        except InvalidIdError as exc:
            stats.error(f"memory {row.id!r}: {exc}")
            continue
        if _is_current(node, existing):
            stats.skipped += 1
            continue
        if _is_rewrite(node, existing):
            stats.rewritten += 1
            before = existing[node.id].properties
            left = before.get("sessionId")
            if isinstance(left, str) and before.get("contentHash") != node.properties["contentHash"]:
                stats.text_replaced.setdefault(left, set()).add(node.id)
            elif isinstance(left, str) and left != session_id:
                stats.moved_from.setdefault(left, set()).add(node.id)
        memories.append(node)
        edges.append(Edge(node.id, session.id, ORIGINATES_IN))
    stats.upserted = len(memories)
    return sessions, memories, edges, stats


def _summary_replaced(before: Node | None, session: Node) -> bool:
    """Whether the SESSION node ``session`` drops words the node it replaces (``before``) held: the
    summary row's text or title, not only its other metadata (the time, the user)."""
    return before is not None and any(before.properties.get(f) is not None and before.properties.get(f) != session.properties.get(f)
                                      for f in ("summary", "title"))


def _is_rewrite(node: Node, existing: dict[str, Node]) -> bool:
    """Whether ``node`` replaces a live-ingested turn whose row said something else."""
    old = existing.get(node.id)
    return old is not None and old.properties.get(LIVE_MARKER) is True and old.properties.get("payloadHash") != node.properties["payloadHash"]


def moved_turn_links(memories: Iterable[Node], existing: Mapping[str, Node]) -> list[tuple[str, str, str]]:
    """The ``ORIGINATES_IN`` edges to drop when ``memories`` are written: a turn whose row now
    names another session than its node did (moved under the same id) leaves its old session — a
    turn originates in one session. Pure."""
    moved = []
    for node in memories:
        old = existing.get(node.id)
        before = old.properties.get("sessionId") if old is not None else None
        if isinstance(before, str) and before != node.properties.get("sessionId") and is_valid_row_id(before):
            moved.append((node.id, session_node_id(before), ORIGINATES_IN))
    return moved


def _is_current(node: Node, existing: dict[str, Node]) -> bool:
    old = existing.get(node.id)
    return (
        old is not None
        and old.properties.get(LIVE_MARKER) is True
        and old.properties.get("payloadHash") == node.properties["payloadHash"]
        and old.name == node.name
    )


def session_revision(memory_ids: Iterable[str], summary: SummaryRow | None) -> str:
    """A fingerprint of a session's input: its memory ids, and its summary's id, metadata and text.

    Memory metadata and texts are not part of it: reading them for every row each cycle costs ten
    times an ids-only scan, and agents append turns rather than rewrite them. A turn written again
    is found otherwise: re-added, after the scan marks; updated in place, by the full scan, which
    compares every row with its MEMORY node (:func:`scan_session_revisions`).
    """
    digest = hashlib.sha256()
    for memory_id in sorted(memory_ids):
        digest.update(memory_id.encode())
        digest.update(b"\n")
    if summary is not None:
        digest.update(dumps(["summary", summary.id, summary.metadata, text_hash(summary.document)]).encode())
    return digest.hexdigest()


# Ids a scan mark keeps from the end of what it applied: the next scan finds them where they were,
# or some row before them went away (or moved), and reads every row instead.
TAIL_CHECK_IDS = 32


@dataclass(slots=True, kw_only=True)
class ScanResult(ErrorTally):
    """The revisions of the sessions the scan looked at — every session (``full``), or those that
    rows added since the marks belong to — the rows it had to reject, and the marks that say
    what it read (to save once everything it found is applied)."""

    revisions: list[SessionRevision] = field(default_factory=list)
    rows_scanned: int = 0
    full: bool = True
    marks: list[ScanMark] = field(default_factory=list)
    # Sessions with a memory row deleted and written again under its id since the marks (it
    # came back at the end of Chroma's order), or (a full scan) updated in place: synced again
    # even when their revision is the same.
    readded: set[str] = field(default_factory=set)


def sessions_to_sync(changed: Sequence[SessionRevision], revisions: Iterable[SessionRevision], readded: Collection[str]) -> list[SessionRevision]:
    """``changed`` (the sessions whose revision changed, in order), then the other ``revisions``
    of sessions with a re-added row. Pure."""
    seen = {r.session_id for r in changed}
    return [*changed, *(r for r in revisions if r.session_id in readded and r.session_id not in seen)]


class MemoryIndexReader(Protocol):
    """What the change scan asks of ingest's memory index (memory id → session id)."""

    def memory_index(self) -> dict[str, str]: ...
    def ingested_payloads(self, first: str, last: str) -> dict[str, str]: ...
    def sessions_of_memories(self, memory_ids: Iterable[str]) -> dict[str, str]: ...
    def memories_of_sessions(self, session_ids: Iterable[str]) -> dict[str, list[str]]: ...


def collection_location(location: str, collection_id: str | None) -> str:
    """Where a scan mark was read: the Chroma's location and the collection's own id, which a
    collection dropped and made again under its name does not keep. Pure."""
    return f"{location}#{collection_id}" if collection_id else location


def previous_memory_mark(mark: ScanMark | None, *, where: str, location: str) -> tuple[ScanMark | None, bool]:
    """What the memory collection's previous mark tells a full scan: ``(mark, False)`` when it was
    read from this collection (or, written before marks named the collection, from this Chroma),
    ``(None, True)`` when from an earlier collection of the same name on this Chroma (re-created:
    every row was written again), ``(None, False)`` when there is none or it is another Chroma's.
    Pure."""
    if mark is None:
        return None, False
    if mark.location in (where, location):
        return mark, False
    return None, mark.location.startswith(f"{location}#")


def full_scan_due(marks: Mapping[str, ScanMark], where: Mapping[str, str], *, now: datetime, interval_seconds: float) -> bool:
    """Whether the scan must read every row: a collection (``where``: name → its
    :func:`collection_location`) has no mark or one made elsewhere, or the last full scan is
    ``interval_seconds`` old (``0``: always). Pure."""
    if interval_seconds <= 0:
        return True
    for name, location in where.items():
        mark = marks.get(name)
        if mark is None or mark.location != location:
            return True
        if (now - datetime.fromisoformat(mark.full_scan_at)).total_seconds() >= interval_seconds:
            return True
    return False


def mark_after(mark: ScanMark, new_ids: Sequence[str]) -> ScanMark:
    """The mark once ``new_ids`` (read after ``mark``) are applied too. Pure."""
    return replace(mark, rows_applied=mark.rows_applied + len(new_ids), tail_ids=(*mark.tail_ids, *new_ids)[-TAIL_CHECK_IDS:])


async def ids_after(chroma: ChromaStore, mark: ScanMark, *, limit: int) -> list[str] | None:
    """The ids added after ``mark``, read in one call from where its tail ids should be; ``None``
    when they are not there (a row before them was deleted, or Chroma reordered) or when more
    than ``limit`` rows follow — then only a full scan can say what changed."""
    start = mark.rows_applied - len(mark.tail_ids)
    ids = await chroma.ids_from(mark.collection, offset=start, limit=limit + len(mark.tail_ids) + 1)
    if tuple(ids[: len(mark.tail_ids)]) != mark.tail_ids or len(ids) > limit + len(mark.tail_ids):
        return None
    return ids[len(mark.tail_ids) :]


def row_fingerprint(document: str, metadata: Mapping[str, Any]) -> str:
    """What a scan mark keeps of the row that ends it (``ScanMark.last_row``): a hash of its
    metadata and text. Pure."""
    return payload_hash({"metadata": metadata, "text": text_hash(document)})


async def last_rows(chroma: ChromaStore, collection: str, marks: Iterable[ScanMark | None]) -> dict[str, str]:
    """The fingerprints of the rows that end ``marks`` (those that exist), in one read by id."""
    ids = sorted({mark.tail_ids[-1] for mark in marks if mark is not None and mark.tail_ids})
    return {row_id: row_fingerprint(*row) for row_id, row in (await chroma.get_existing(collection, ids)).items()}


def with_last_row(mark: ScanMark, fingerprints: Mapping[str, str]) -> ScanMark:
    """``mark`` keeping the fingerprint of its last row (among ``fingerprints``). Pure."""
    return replace(mark, last_row=fingerprints.get(mark.tail_ids[-1], "") if mark.tail_ids else "")


def tail_written_again(mark: ScanMark | None, fingerprints: Mapping[str, str]) -> tuple[str, ...]:
    """The tail ids of ``mark`` to read as re-added: all of them when the row that ends it is not
    what the mark recorded (or the mark, written before marks kept it, does not say). That row
    deleted and added back with nothing added between keeps its place, and so do the rows just
    before it when they were rewritten with it in their order (an import rewrites a batch's changed
    turns together): no id tells. Their sessions are synced, which compares every turn. Pure."""
    if mark is None or not mark.tail_ids or fingerprints.get(mark.tail_ids[-1]) == mark.last_row:
        return ()
    return mark.tail_ids


async def mark_holds(chroma: ChromaStore, mark: ScanMark) -> bool:
    """Whether the mark's tail ids are still where it says (nothing before them went away)."""
    if not mark.tail_ids:
        return True
    start = mark.rows_applied - len(mark.tail_ids)
    return tuple(await chroma.ids_from(mark.collection, offset=start, limit=len(mark.tail_ids))) == mark.tail_ids


async def scan_changed_sessions(
    chroma: ChromaStore,
    *,
    memory_collection: str,
    summary_collection: str,
    index: MemoryIndexReader,
    marks: Mapping[str, ScanMark],
    location: str,
    now: datetime,
    full_scan_interval_seconds: float,
    tail_limit: int = 50_000,
) -> ScanResult:
    """The change scan. When both collections have marks and no full scan is due, only the rows
    added after the marks are read (one call per collection) and only the sessions they belong to
    get a revision — and the memory mark's tail, read as re-added, when its last row is not what
    the mark recorded (:func:`tail_written_again`; one read of that row by id); every row is read
    (:func:`scan_session_revisions`) when a full scan is due, and every id when a mark's tail ids
    are not where they were (a row before them deleted): that finds the rows deleted, added and
    re-added, and leaves the comparison of every ingested row's text with its node (rows updated
    in place) to the full scan's own interval, which it does not restart. ``index`` is read in a
    worker thread."""
    collections = (memory_collection, summary_collection)
    where = {name: collection_location(location, await chroma.collection_id(name)) for name in collections}
    if not full_scan_due(marks, where, now=now, interval_seconds=full_scan_interval_seconds):
        tails = [await ids_after(chroma, marks[name], limit=tail_limit) for name in collections]
        if tails[0] is not None and tails[1] is not None:
            after = [mark_after(marks[name], ids) for name, ids in zip(collections, tails, strict=True)]
            # The memory rows that end the mark and the new mark: one read of one row when idle.
            fingerprints = await last_rows(chroma, memory_collection, (marks[memory_collection], after[0]))
            again = tail_written_again(marks[memory_collection], fingerprints)
            if again:
                log.info("change scan: the last row of the mark was written again; reading its tail again", rows=len(again))
            return await _scan_tail(chroma, memory_collection=memory_collection, summary_collection=summary_collection,
                                    index=index, new_memory_ids=[*again, *tails[0]], new_summary_ids=tails[1],
                                    marks=[with_last_row(after[0], fingerprints), after[1]])
        log.info("change scan: rows before the scan marks moved or went away; reading every id")
        return await _scan_every_row(chroma, memory_collection=memory_collection, summary_collection=summary_collection,
                                     index=index, marks=marks, where=where, location=location, full_scan_at=None)
    return await _scan_every_row(chroma, memory_collection=memory_collection, summary_collection=summary_collection,
                                 index=index, marks=marks, where=where, location=location, full_scan_at=now.isoformat())


async def _scan_every_row(
    chroma: ChromaStore, *, memory_collection: str, summary_collection: str, index: MemoryIndexReader,
    marks: Mapping[str, ScanMark], where: Mapping[str, str], location: str, full_scan_at: str | None,
) -> ScanResult:
    """:func:`scan_session_revisions` over every row: a full scan, made at ``full_scan_at``, or
    (``None``) a scan of the ids alone, whose marks keep the full scan time of ``marks`` — it
    does not put off the next comparison of the rows' text."""
    known = await anyio.to_thread.run_sync(index.memory_index)
    since, recreated = previous_memory_mark(marks.get(memory_collection), where=where[memory_collection], location=location)
    if recreated:
        log.info("change scan: the memory collection was made again under its name; reading every row again", collection=memory_collection)
    result = await scan_session_revisions(chroma, memory_collection=memory_collection, summary_collection=summary_collection, known_sessions=known,
                                          ingested=index.ingested_payloads, since=since, recreated=recreated, content=full_scan_at is not None)
    result.marks = [replace(mark, location=where[mark.collection], full_scan_at=full_scan_at or marks[mark.collection].full_scan_at)
                    for mark in result.marks]
    return result


async def _sessions_of_new_rows(chroma: ChromaStore, collection: str, ids: Sequence[str], tally: ErrorTally, *, metadata_batch: int) -> dict[str, list[str]]:
    """Memory ids not ingested yet, by the session their metadata names (read in batches); a row
    without a usable ``sessionId`` or id is counted in ``tally``."""
    found: dict[str, list[str]] = {}
    for start in range(0, len(ids), metadata_batch):
        _group_by_session(await chroma.metadata_by_ids(collection, ids[start : start + metadata_batch]), found, tally)
    return found


def _group_by_session(rows: Iterable[MemoryRow], found: dict[str, list[str]], tally: ErrorTally) -> None:
    """Add the ids of ``rows`` to ``found`` under the session their metadata names; a row without
    a usable ``sessionId`` or id is counted in ``tally``."""
    for row in rows:
        if is_valid_row_id(row.session_id) and is_valid_row_id(row.id):
            found.setdefault(row.session_id, []).append(row.id)
        else:
            tally.error(f"memory {row.id!r}: missing or invalid sessionId or id")
            tally.bad_values.update(row.problems)


async def _scan_tail(
    chroma: ChromaStore, *, memory_collection: str, summary_collection: str, index: MemoryIndexReader,
    new_memory_ids: list[str], new_summary_ids: list[str], marks: list[ScanMark], metadata_batch: int = 1000,
) -> ScanResult:
    """Revisions of the sessions that the new rows belong to, computed as the full scan computes
    them: the session's memory ids (the index's, and the new rows') and its newest summary."""
    result = ScanResult(full=False, marks=marks, rows_scanned=len(new_memory_ids) + len(new_summary_ids))
    # A row after the marks that the graph already holds was deleted and written again under its
    # id: its metadata is read again like a new row's, as it may name another session now.
    known = await anyio.to_thread.run_sync(index.sessions_of_memories, new_memory_ids)
    added = await _sessions_of_new_rows(chroma, memory_collection, new_memory_ids, result, metadata_batch=metadata_batch)
    result.readded = _readded_sessions(known, added)
    touched = set(added) | set(known.values())
    if new_summary_ids:
        for row in await chroma.metadata_by_ids(summary_collection, new_summary_ids, cls=SummaryRow):
            if is_valid_row_id(row.session_id):
                touched.add(row.session_id)  # type: ignore[arg-type]
            else:
                result.error(f"summary {row.id!r}: missing or invalid sessionId")
                result.bad_values.update(row.problems)
    if not touched:
        return result
    members = await anyio.to_thread.run_sync(index.memories_of_sessions, sorted(touched))
    summaries = await chroma.summaries_for_sessions(sorted(touched)) or {}
    now_in = {memory_id: sid for sid, ids in added.items() for memory_id in ids}
    for sid in sorted(touched):
        summary = summaries.get(sid)
        ids = tuple(sorted({*(m for m in members.get(sid, ()) if now_in.get(m, sid) == sid), *added.get(sid, ())}))
        result.revisions.append(SessionRevision(sid, session_revision(ids, summary), summary.created_at if summary else None, ids))
    return result


async def scan_session_revisions(
    chroma: ChromaStore,
    *,
    memory_collection: str,
    summary_collection: str,
    known_sessions: dict[str, str],
    ingested: Callable[[str, str], Mapping[str, str]],
    since: ScanMark | None = None,
    recreated: bool = False,
    content: bool = True,
    metadata_batch: int = 1000,
) -> ScanResult:
    """Fingerprint every session from a scan of every row of the memory collection.

    ``known_sessions`` maps memory ids already ingested to their session; ``ingested`` gives those
    from one id to another the payload hash of their MEMORY node
    (:meth:`RunStateStore.ingested_payloads`, asked in a worker thread a batch at a time). Every row is read by id: an
    ingested one with its text and metadata, the others with their metadata. An ingested row
    whose payload (:func:`memory_node`) is not its node's was written since it was ingested —
    updated in place (``update``/``upsert`` of its id keep its place in Chroma's order), or
    re-added where no mark shows it — and counts as re-added, like the known ids that come after
    the tail of ``since`` (the memory collection's previous mark, see :class:`_RowsAfterMark`):
    rows deleted and written again since, which may name another session now — and its tail when
    its last row was written again (:func:`tail_written_again`); every known id when the
    collection was ``recreated``. Rows not ingested and re-added ones belong to the session their
    metadata names; the others, to their known session. Summaries (one per session) are read whole. A row without a usable
    ``sessionId`` is counted as an error, never a crash. The marks it returns (location and full
    scan time left blank for the caller) say how many rows each collection had, and its last ids.
    Not ``content``: an ingested row that no mark shows re-added is not read at all (nor
    ``ingested`` asked) — a scan of the ids, which finds rows deleted, added and re-added but not
    those updated in place. When no tail id of ``since`` is left (the newest rows deleted), no mark
    shows which rows were written again since, and every ingested row's text is compared anyway.
    """
    result = ScanResult()
    present: set[str] = set()
    after_mark = _RowsAfterMark(since.tail_ids if since is not None else ())
    memory_mark = ScanMark(collection=memory_collection, location="", rows_applied=0, tail_ids=(), full_scan_at="")
    async for ids in chroma.scan_ids(memory_collection):
        present.update(ids)
        after_mark.read(ids)
        memory_mark = mark_after(memory_mark, ids)
    summary_mark = replace(memory_mark, collection=summary_collection, rows_applied=0, tail_ids=())
    result.rows_scanned = len(present)
    fingerprints = await last_rows(chroma, memory_collection, (since, memory_mark))
    memory_mark = with_last_row(memory_mark, fingerprints)
    rewritten = set(present) if recreated else {*after_mark.ids(), *present.intersection(tail_written_again(since, fingerprints))}
    # A row deleted and added again lands after the tail; with the whole tail gone, the ids alone
    # do not tell it from the rows that stayed, and only its text (or metadata) shows it.
    content = content or after_mark.tail_gone
    added: dict[str, list[str]] = {}
    ordered = sorted(present)
    for start in range(0, len(ordered), metadata_batch):
        batch = ordered[start : start + metadata_batch]
        # Only an ingested row has a payload to compare, so only its text is read: a row the graph
        # does not hold yet (every row, on a first cycle) or one already counted re-added needs its
        # metadata alone, as before the comparison — the sync reads its text anyway.
        held = [row_id for row_id in batch if row_id in known_sessions and row_id not in rewritten]
        fresh = [row_id for row_id in batch if row_id not in known_sessions or row_id in rewritten]
        if held and content:
            payloads = await anyio.to_thread.run_sync(ingested, held[0], held[-1])
            rows = await chroma.get_existing(memory_collection, held)
            changed = [row for row in (MemoryRow(i, text, metadata) for i, (text, metadata) in rows.items())
                       if _updated_in_place(row, payloads)]
            rewritten.update(row.id for row in changed)
            _group_by_session(changed, added, result)
        _group_by_session(await chroma.metadata_by_ids(memory_collection, fresh), added, result)
    readded = {memory_id: known_sessions[memory_id] for memory_id in rewritten if memory_id in known_sessions}
    members: dict[str, list[str]] = {}
    for memory_id, session_id in known_sessions.items():
        if memory_id in present and memory_id not in readded:
            members.setdefault(session_id, []).append(memory_id)
    result.readded = _readded_sessions(readded, added)
    for session_id, ids in added.items():
        members.setdefault(session_id, []).extend(ids)
    valid: list[SummaryRow] = []
    async for page in chroma.scan(summary_collection, include=("metadatas", "documents")):
        summary_mark = mark_after(summary_mark, [row.id for row in page])
        for row in page:
            result.rows_scanned += 1
            summary = SummaryRow(row.id, row.document, row.metadata)
            if is_valid_row_id(summary.session_id):
                valid.append(summary)
            else:
                result.error(f"summary {row.id!r}: missing or invalid sessionId")
                result.bad_values.update(summary.problems)
    summaries = latest_by_session(valid)
    for sid in sorted(set(members) | set(summaries)):
        summary = summaries.get(sid)
        ids = tuple(sorted(members.get(sid, ())))
        result.revisions.append(SessionRevision(sid, session_revision(ids, summary), summary.created_at if summary else None, ids))
    result.marks = [memory_mark, summary_mark]
    return result


def _updated_in_place(row: MemoryRow, ingested: Mapping[str, str]) -> bool:
    """Whether the graph holds a MEMORY node of ``row`` (its payload hash among ``ingested``) that
    is not what the row says now: its text, or metadata the graph reads (the sync compares the
    same hash, so what it writes makes them agree). Pure."""
    before = ingested.get(row.id)
    return before is not None and is_valid_row_id(row.id) and before != memory_node(row, marker=LIVE_MARKER).properties["payloadHash"]


class _RowsAfterMark:
    """The ids a scan reads after a mark's tail (fed page by page, in Chroma's order): rows added,
    or deleted and written again, since the mark. The tail's surviving rows keep their order and
    nothing comes between them; the first id that is not the next of them — a row from elsewhere,
    or a tail id out of order (written again) — starts what came after. Holds only those ids."""

    def __init__(self, tail_ids: Sequence[str]) -> None:
        self._tail = {memory_id: place for place, memory_id in enumerate(tail_ids)}
        self._place = -1  # the place in the tail of the last tail id read; -1: none read yet
        self._after: list[str] | None = None

    def read(self, ids: Sequence[str]) -> None:
        for memory_id in ids:
            if self._after is not None:
                self._after.append(memory_id)
                continue
            place = self._tail.get(memory_id)
            if place is not None and place > self._place:
                self._place = place
            elif self._place >= 0:
                self._after = [memory_id]

    def ids(self) -> list[str]:
        """The ids after the tail (none when no tail id was found)."""
        return self._after or []

    @property
    def tail_gone(self) -> bool:
        """Whether the mark had a tail and none of its ids was read: what came after it is unknown."""
        return bool(self._tail) and self._place < 0


def _readded_sessions(before: Mapping[str, str], now: Mapping[str, Sequence[str]]) -> set[str]:
    """The sessions that re-added rows (``before``: their session in the graph) left or joined
    (``now``: session → the ids its rows name it for). Pure."""
    sessions = set(before.values())
    sessions.update(sid for sid, ids in now.items() if any(i in before for i in ids))
    return sessions


async def sync_sessions_to_graph(
    session_ids: Sequence[str], *, chroma: ChromaStore, unit: UnitOfWork, memory_ids: Mapping[str, Sequence[str]] | None = None,
    turns: TurnsHandOff | None = None,
) -> dict[str, SyncStats]:
    """Live-sync a batch of sessions: paged Chroma reads for their memories and their summaries,
    one transaction of ``unit``. Returns stats per session. ``memory_ids``: each session's row ids as
    the scan found them, so that the rows are read by id (see ``ChromaStore.memories_for_sessions``).
    ``turns``: the cycle's hand-off, which reads them and keeps a big read for the extract phase."""
    if turns is not None:
        rows_by_session = await turns.read(session_ids, memory_ids)
    else:
        rows_by_session = await chroma.memories_for_sessions(session_ids, memory_ids=memory_ids)
    summaries = await chroma.summaries_for_sessions(session_ids) or {}
    return await anyio.to_thread.run_sync(_write_sessions, list(session_ids), rows_by_session, summaries, unit)


@dataclass(slots=True, kw_only=True)
class BatchSync:
    """Stats of the sessions a batch synced, and why each of the others failed."""

    synced: dict[str, SyncStats] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


async def sync_batch_isolating_failures(
    session_ids: Sequence[str], *, chroma: ChromaStore, unit: UnitOfWork, memory_ids: Mapping[str, Sequence[str]] | None = None,
    turns: TurnsHandOff | None = None,
) -> BatchSync:
    """:func:`sync_sessions_to_graph` for a batch; when the batch fails, each session is synced on
    its own, so that one bad session costs only itself. An unreachable Chroma is not a session's
    fault and is raised (:class:`ChromaUnavailableError`), and so is a lease the unit's writes are
    fenced with that another worker took over (:class:`LeaseLostError`)."""
    result = BatchSync()
    try:
        result.synced = await sync_sessions_to_graph(session_ids, chroma=chroma, unit=unit, memory_ids=memory_ids, turns=turns)
        return result
    except (ChromaUnavailableError, LeaseLostError):
        raise
    except Exception as exc:  # noqa: BLE001 - narrowed down below, session by session
        if len(session_ids) == 1:
            result.failed[session_ids[0]] = describe_error(exc)
            log.warning("session sync failed", session_id=session_ids[0], error=result.failed[session_ids[0]])
            return result
    for sid in session_ids:
        one = await sync_batch_isolating_failures([sid], chroma=chroma, unit=unit, memory_ids=memory_ids, turns=turns)
        result.synced.update(one.synced)
        result.failed.update(one.failed)
    return result


def describe_error(exc: BaseException) -> str:
    """``<ExceptionType>: <message>``, bounded, for stats and logs."""
    return f"{type(exc).__name__}: {exc}"[:500]


async def sync_session_to_graph(session_id: str, *, chroma: ChromaStore, unit: UnitOfWork) -> SyncStats:
    """Live-sync one session (DESIGN §4.2). A session with no memory rows still gets its node."""
    return (await sync_sessions_to_graph([session_id], chroma=chroma, unit=unit))[session_id]


def vanished_turns(session_id: str, rows: Sequence[MemoryRow], known: Mapping[str, Node]) -> list[str]:
    """The MEMORY nodes of ``known`` that belong to ``session_id`` (by their ``sessionId``) with no
    row among ``rows``, the session's rows in Chroma now: turns deleted from Chroma. A turn moved to
    another session and already synced there says so in its ``sessionId``, and stays. Pure."""
    present = {f"memory:{r.id}" for r in rows}
    return sorted(node_id for node_id, node in known.items()
                  if node.label == MEMORY_LABEL and node.properties.get("sessionId") == session_id and node_id not in present)


def _turns_by_session(synced: Iterable[SyncStats], *, moved: bool = False) -> dict[str, set[str]]:
    """The turns whose text the syncs ``synced`` replaced (``moved``: that moved with the same
    words), by the session whose extraction quoted them (two sessions' syncs may name one: a turn
    moved). Pure."""
    found: dict[str, set[str]] = {}
    for stats in synced:
        for sid, turns in (stats.moved_from if moved else stats.text_replaced).items():
            found.setdefault(sid, set()).update(turns)
    return found


def _write_sessions(
    session_ids: list[str],
    rows_by_session: dict[str, list[MemoryRow]],
    summaries: dict[str, SummaryRow],
    unit: UnitOfWork,
) -> dict[str, SyncStats]:
    all_ids: list[str] = []
    for sid in session_ids:
        try:
            all_ids.append(session_node_id(sid))
        except InvalidIdError:
            continue
        all_ids.extend(f"memory:{r.id}" for r in rows_by_session.get(sid, []) if is_valid_row_id(r.id))
    results: dict[str, SyncStats] = {}
    graph = unit.graph
    with unit.transaction():
        # What ``forget`` removed stays out while its rows are in Chroma (a turn's text too) — checked
        # in this transaction: a forget may commit while a manual backfill, which does not take its
        # lock, is reading.
        forgotten = unit.tombstones.buried(MEMORY, [r.id for rows in rows_by_session.values() for r in rows])
        if forgotten:
            rows_by_session = {sid: [r for r in rows if r.id not in forgotten] for sid, rows in rows_by_session.items()}
        forgotten_sessions = unit.tombstones.buried(SESSION, session_ids)
        # A turn whose row left Chroma goes with its text: re-extraction takes back what it said,
        # and recall must not keep serving it verbatim. The turns a session had are those its last
        # ingest recorded (a back-filled turn, not read by a change scan, is not one of them).
        had = unit.runstate.memories_of_sessions(session_ids)
        indexed = {memory_node_id(m): m for ids in had.values() for m in ids if is_valid_row_id(m)}
        known = graph.get_nodes(list(indexed))
        retracted = {sid: vanished_turns(sid, rows_by_session.get(sid, []), known) for sid in session_ids}
        for sid, gone in retracted.items():
            for node_id in gone:
                graph.delete_node(node_id)
            if gone:  # the lines its extraction queued are due (withdrawn once this commits, or by the next cycle)
                unit.withdrawals.record(sid, gone)
                # Nor does the session have them now — also after a backfill, which marks no
                # revision: forget and the held answers read its turns from the memory index.
                unit.runstate.drop_retracted_turns(sid, [indexed[node_id] for node_id in gone])
        existing = graph.get_nodes(all_ids)
        sessions: list[Node] = []
        memories: list[Node] = []
        edges: list[Edge] = []
        for sid in session_ids:
            if sid in forgotten_sessions:
                results[sid] = SyncStats()
                continue
            s, m, e, stats = plan_session_sync(sid, rows_by_session.get(sid, []), summaries.get(sid), existing)
            sessions += s
            memories += m
            edges += e
            stats.upserted += len(s)
            stats.retracted = retracted[sid]
            results[sid] = stats
        graph.upsert_nodes(sessions)
        graph.delete_edges(moved_turn_links(memories, existing))
        graph.upsert_nodes(memories)
        graph.link_nodes(edges)
        texts = {f"memory:{r.id}": r.document for sid in session_ids for r in rows_by_session.get(sid, [])}
        unit.recall_index.index_memory_nodes(memories, texts)
        # In this transaction, so that a crash cannot leave the new text in the graph and the
        # extraction of the old one standing as current. A session that lost a turn too: a worker
        # extracting it now read the turn, and its commit would write what the turn said back and
        # queue lines to it after the cycle withdrew the turn's (worker/cycle.py) — it rolls back.
        unit.runstate.require_extraction(sorted(sid for sid, stats in results.items() if stats.rewritten or stats.retracted))
        # A turn's old words (just replaced in the recall index, quoted by the extraction its next
        # commit replaces and by the queue lines that extraction queued) go as a retracted turn's
        # do: its lines withdrawn before the session is extracted again (a session with a record
        # is not claimed, so the new extraction's lines come after), the words erased.
        for sid, turns in sorted(_turns_by_session(results.values()).items()):
            unit.withdrawals.record(sid, turns)
        # A turn moved with its words: the lines its old session's extraction queued of it go too
        # (they name that session; a forget of the turn, in its new session, would not find them).
        # When the old session is synced in this batch too, it took the turn out as retracted.
        for sid, turns in sorted(_turns_by_session(results.values(), moved=True).items()):
            unit.withdrawals.record(sid, turns, words_deleted=False)
        # A summary's old words, just replaced in the SESSION node and the recall index.
        if any(stats.summary_replaced for stats in results.values()):
            unit.erasure.mark()
    for sid, stats in results.items():
        for detail in stats.error_details:
            log.warning("ingest row error", session_id=sid, error=detail)
    return results
