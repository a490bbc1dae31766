"""Drain the lazy-edge queue (DESIGN §4.4): rename, then link every line, back-filling endpoints.

1. Single flight: the queue's lock; a second drain raises :class:`QueueBusyError` at once.
2. ``.draining`` files left by a crashed drain are drained first ("orphan recovery").
3. The live queue is renamed to ``.draining``; producers appending meanwhile create a fresh queue.
4. Lines are read in batches (streaming; memory stays flat): parse and normalise
   (:func:`parse_line`, pure), read what back-filling the missing ``memory:``/``session:``
   endpoints needs (one Chroma read per kind of row), then write the back-filled nodes and link the
   batch's edges in one transaction. A batch that raises is retried line by line so one bad line cannot hold
   the others back. A database that fails for no line's fault (gone, busy past its timeout, or
   stopping at its statement timeout a line's statements and then a probe of its tables' locks)
   ends the drain and charges no line.
5. A line that fails goes back to the live queue with ``attempts`` + 1 and ``lastError``; after
   ``max_attempts`` it goes to the dead-letter file instead. A malformed line (not JSON, missing or
   invalid ``source``/``target``/``relationship``/``weight``/``properties``) goes straight to the
   dead-letter file. Outputs are staged in scratch files and published at the end, then the
   ``.draining`` files are deleted: a crash anywhere loses no line (the next drain starts over from
   the ``.draining`` files, and linking a line twice leaves one edge). A publish a crash cut short
   is undone or finished first (``LazyEdgeQueue.recover_publish``), so no dead letter is doubled
   or left torn, and no record rem-cycle did not write is ever cut.

The queue's database form (the ``lazy_edges`` table, store/lazy_table.py) is drained after the
files, under the same lock: the rows present when it starts, in id order, in the same batches and
with the same rule per line (``pipelines.lazy_edge.parse_line``). Each batch's fates are settled in
the transaction that writes its edges — a linked row is deleted, a failed one keeps its id with
``attempts`` + 1 and its error, a dead one moves to ``lazy_edges_dead`` with the reason — so a crash
anywhere rolls back edges and fates together: no row is lost, none applied twice.

A dry run reads the ``.draining`` files, the live queue and the table, checks what back-fill would
do, and changes nothing (no rename, no lock file, no graph, table or Chroma write).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import anyio

from pipelines.backfill import DEFAULT_BATCH_SIZE, RowOutcome, plan_nodes, write_backfill
from pipelines.lazy_edge import MalformedLine, QueuedEdge, dead_letter_record, parse_line
from pipelines.ports import QueueTable, UnitOfWork
from store.chroma import ChromaStore, ChromaUnavailableError
from store.errors import DATABASE_OUTAGES, DatabaseDamagedError, DatabaseUnreadableError, QueryInterruptedError
from store.graph import utc_now
from store.lazy_queue import LazyEdgeQueue, OversizedLine, QueueBusyError, edge_line
from store.lazy_table import DRAIN_TABLES, DeadRow, QueuedRow, RowsTakenError
from store.library_log import get_logger

log = get_logger(__name__)

# The line rule lives in pipelines.lazy_edge; it is re-exported here for the drain's callers.
__all__ = ["ChromaGoneDuringDrainError", "DrainStats", "MalformedLine", "QueuedEdge", "QueueBusyError", "dead_letter_record",
           "drain_queue", "parse_line"]

# Lines read per batch stop at this many bytes too, so a batch of long lines stays small in memory.
MAX_BATCH_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class DrainStats:
    """Counts of one drain. ``dead_lettered`` includes ``skipped_malformed`` lines."""

    total_lines: int = 0
    processed: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped_malformed: int = 0
    dead_lettered: int = 0
    queue_rotated: bool = False
    orphan_recovered: bool = False
    requeued: int = 0
    backfilled: int = 0
    table_rows: int = 0
    dry_run: bool = False
    failure_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_lines": self.total_lines,
            "processed": self.processed,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "skipped_malformed": self.skipped_malformed,
            "dead_lettered": self.dead_lettered,
            "queue_rotated": self.queue_rotated,
            "orphan_recovered": self.orphan_recovered,
            "requeued": self.requeued,
            "backfilled": self.backfilled,
            "table_rows": self.table_rows,
            "dry_run": self.dry_run,
            "failure_reasons": dict(sorted(self.failure_reasons.items())),
        }


class ChromaGoneDuringDrainError(ChromaUnavailableError):
    """Chroma could not be reached to back-fill an endpoint: the drain stopped after that batch,
    and the lines that needed Chroma went back to the queue as they were, with no attempt counted
    (an outage is no fault of the line's: counting it would dead-letter good lines after
    ``REM_LAZY_MAX_ATTEMPTS`` drains while Chroma is down). An outage is a read that failed in
    transport *and* a heartbeat Chroma did not answer: a read that fails while Chroma answers is
    its row's, and charges its line alone. ``stats``: what the drain did."""

    def __init__(self, message: str, stats: "DrainStats") -> None:
        super().__init__(message)
        self.stats = stats


Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class _Entry:
    """One queued line of either form: its bytes and, when it came from the table, its row."""

    raw: bytes
    row: QueuedRow | None = None


@dataclass(frozen=True, slots=True)
class _Fate:
    """What a drain made of one line. ``outcome``: ``linked``; ``requeued`` (``detail`` = the
    error, ``attempts`` = the new count, ``record`` = the line's record); ``dead`` (``reason``,
    ``detail``, ``attempts``; ``malformed`` when it never parsed); ``held`` (Chroma could not be
    reached: the line stays queued as it was)."""

    entry: _Entry
    outcome: Literal["linked", "requeued", "dead", "held"]
    reason: str = ""
    detail: str = ""
    attempts: int = 0
    record: dict[str, Any] | None = None
    malformed: bool = False


class _Outputs(Protocol):
    """Where a queue form records the fates of its lines. ``in_database``: ``settle`` writes the
    graph's database, so it runs inside the transaction of the batch's edges."""

    in_database: bool

    def settle(self, fates: list[_Fate]) -> None: ...


@dataclass
class _FileOutputs:
    """The JSONL form: failed lines to the re-queue scratch file (with ``attempts`` and
    ``lastError``), dead letters to the dead-letter scratch file; published by ``commit_drain``."""

    requeue_out: IO[bytes]
    dead_out: IO[bytes]
    clock: Callable[[], str]
    in_database: bool = False

    def settle(self, fates: list[_Fate]) -> None:
        for fate in fates:
            if fate.outcome == "held":
                self.requeue_out.write(fate.entry.raw if fate.entry.raw.endswith(b"\n") else fate.entry.raw + b"\n")
            elif fate.outcome == "requeued":
                self.requeue_out.write(edge_line({**(fate.record or {}), "attempts": fate.attempts, "lastError": fate.detail[:300]}))
            elif fate.outcome == "dead":
                record = dead_letter_record(fate.entry.raw, reason=fate.reason, detail=fate.detail, attempts=fate.attempts, at=self.clock())
                self.dead_out.write((json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))


@dataclass
class _TableOutputs:
    """The table form: every settled row leaves ``lazy_edges``; failed ones come back with
    ``attempts`` + 1, dead ones go to ``lazy_edges_dead`` — in the batch's own transaction."""

    table: QueueTable
    clock: Callable[[], str]
    in_database: bool = True

    def settle(self, fates: list[_Fate]) -> None:
        at = self.clock()
        self.table.settle(
            taken=[fate.entry.row for fate in fates if fate.entry.row is not None and fate.outcome != "held"],
            requeued=[(fate.entry.row, fate.detail) for fate in fates if fate.outcome == "requeued" and fate.entry.row],
            dead=[
                DeadRow(fate.entry.row, fate.reason, fate.detail, fate.attempts, at)
                for fate in fates
                if fate.outcome == "dead" and fate.entry.row
            ],
        )


@dataclass
class _Drain:
    """The state of one drain run (counters, options); the queue forms feed it batches."""

    unit: UnitOfWork
    chroma: ChromaStore
    max_attempts: int
    batch_size: int
    dry_run: bool
    clock: Callable[[], str]
    stats: DrainStats
    # Why Chroma could not be reached, once it could not: the drain stops after that batch.
    chroma_gone: str | None = None
    held: int = 0

    async def run_file(
        self, path: Path, outputs: _FileOutputs | None, *, progress: Callable[[int], None], stop: Callable[[], bool]
    ) -> bool:
        """Drain one file; ``False`` when stopped early (the rest was copied to the requeue output)."""
        lines = LazyEdgeQueue.read_lines(path)
        while True:
            batch = await anyio.to_thread.run_sync(_take, lines, self.batch_size)
            if not batch:
                return True
            await self.run_batch([_Entry(line) for line in batch], outputs)
            progress(sum(len(line) for line in batch))
            if stop() or self.chroma_gone:
                await anyio.to_thread.run_sync(self.copy_rest, lines, outputs)
                return False

    async def run_table(
        self, table: QueueTable, up_to: int, outputs: _TableOutputs | None, *,
        progress: Callable[[int], None], stop: Callable[[], bool],
    ) -> bool:
        """Drain the table's rows up to id ``up_to``; ``False`` when stopped early (unread rows
        stay in the table untouched)."""
        after = 0
        while True:
            rows = await anyio.to_thread.run_sync(
                partial(table.read_batch, after=after, up_to=up_to, limit=self.batch_size, max_bytes=MAX_BATCH_BYTES)
            )
            if not rows:
                return True
            after = rows[-1].id
            self.stats.table_rows += len(rows)
            await self.run_batch([_Entry(row.line, row) for row in rows], outputs)
            progress(sum(len(row.line) for row in rows))
            if stop() or self.chroma_gone:
                return False

    def copy_rest(self, lines: Iterator[bytes], outputs: _FileOutputs | None) -> None:
        """Put the unread lines of a stopped drain back in the queue, untouched."""
        for line in lines:
            if isinstance(line, OversizedLine):  # only its head was read: it cannot go back whole
                fate = _malformed(_Entry(line), parse_line(line))  # type: ignore[arg-type]
                if outputs is not None:
                    outputs.settle([fate])
                self._count([fate])
                self.stats.total_lines += 1
            elif outputs is not None:
                outputs.requeue_out.write(line if line.endswith(b"\n") else line + b"\n")

    async def run_batch(self, batch: list[_Entry], outputs: _Outputs | None) -> None:
        """Parse, link and settle one batch. A batch that raises is retried line by line so one bad
        line cannot hold the others back; a batch another drain settled first is skipped."""
        self.stats.total_lines += len(batch)
        malformed: list[_Fate] = []
        parsed: list[tuple[_Entry, QueuedEdge]] = []
        for entry in batch:
            line = parse_line(entry.raw)
            if isinstance(line, MalformedLine):
                malformed.append(_malformed(entry, line))
            else:
                # A row's attempts are its column (the drain's bookkeeping), never the producer's.
                parsed.append((entry, line if entry.row is None else replace(line, attempts=entry.row.attempts)))
        self.stats.processed += len(parsed)
        try:
            fates = await self._link_again_if_disconnected(parsed, malformed, outputs)
        except RowsTakenError as exc:
            log.warning("lazy queue rows taken by another drain; batch skipped", rows=len(batch), error=str(exc))
            return
        except DATABASE_OUTAGES:
            # No line's failure (the server gone or unreadable, its disk full, busy past the timeout:
            # a lock another client holds, "too many connections" when a drain reconnects): it ends
            # the drain and charges no line; retried line by line it would dead-letter good lines.
            # A statement stopped at the statement timeout may be one line's: _judge_timeout.
            raise  # see _link_again_if_disconnected
        except Exception as exc:  # noqa: BLE001 - isolate the line that breaks the batch
            if not parsed:
                raise
            log.warning("drain batch failed; retrying its lines one by one", lines=len(parsed), error=_describe(exc))
            fates = await self._settle_alone(malformed, outputs)
            for item in parsed:
                if self.chroma_gone:  # Chroma went down meanwhile: the rest wait as they were
                    fates += await self._settle_alone([_Fate(item[0], "held")], outputs)
                    continue
                try:
                    fates += await self._link([item], [], outputs)
                except RowsTakenError:
                    pass
                except DATABASE_OUTAGES:
                    raise
                except QueryInterruptedError as one_exc:  # past the statement timeout again, alone
                    fates += await self._judge_timeout(item, one_exc, outputs)
                except Exception as one_exc:  # noqa: BLE001 - the line is kept for the next drain
                    fates += await self._settle_alone([self._failure(item, f"error: {_describe(one_exc)}")], outputs)
        self._count(fates)

    async def _link_again_if_disconnected(
        self, items: list[tuple[_Entry, QueuedEdge]], settled: list[_Fate], outputs: _Outputs | None
    ) -> list[_Fate]:
        """:meth:`_link`, once more when the database lost its connection under it (a PostgreSQL
        restart or failover: the batch's transaction was rolled back, and the next one runs on a
        new connection). A second loss, or a server that stays unreachable, ends the drain with
        :class:`DatabaseUnreadableError` (a server busy past the timeout — a held lock, no free
        connection — with :class:`DatabaseBusyError`): no line is charged an attempt for it, and
        the unsettled lines stay queued (the file form's ``.draining`` files, the table's rows) for the next drain.
        A damaged file (:class:`DatabaseDamagedError`) is not linked again: no new connection mends it."""
        try:
            return await self._link(items, settled, outputs)
        except DatabaseDamagedError:  # no connection mends a damaged file: the restore advice, at once
            raise
        except DatabaseUnreadableError as exc:
            log.warning("drain batch lost its database connection; linking it again", lines=len(items), error=_describe(exc))
            return await self._link(items, settled, outputs)

    async def _judge_timeout(
        self, item: tuple[_Entry, QueuedEdge], exc: QueryInterruptedError, outputs: _Outputs | None
    ) -> list[_Fate]:
        """The fate of a line whose statements ran past the database's statement timeout with its
        batch and again alone. The database is asked at once, on the same connection, for the
        locks of the tables a drain writes, under the same timeout: granted in time, the fault is
        the line's own statement (a row of it another session holds, work of its own too long) and
        the line is charged ``statement-timeout`` — as a Chroma row read that fails while Chroma
        answers its heartbeat; stopped too, the database stalls every writer (a table another
        client locked, a ``statement_timeout`` too short for the server's load) and the drain ends
        charging nothing. So a queue whose only line always times out has that line charged, and
        dead-lettered after its last attempt, rather than the queue stuck."""
        if not await anyio.to_thread.run_sync(self.unit.write_locks_in_time, DRAIN_TABLES):
            raise _stalled(exc) from exc
        return await self._settle_alone([self._failure(item, f"statement-timeout: {exc}")], outputs)

    async def _chroma_answers(self) -> bool:
        """Whether Chroma answers its heartbeat: after a read failed in transport, tells an outage
        (hold the lines, charge none, stop) from one row's read that fails alone (the line's)."""
        try:
            await self.chroma.ping()
        except ChromaUnavailableError:
            return False
        return True

    async def _settle_alone(self, fates: list[_Fate], outputs: _Outputs | None) -> list[_Fate]:
        """Settle ``fates`` in a transaction of their own; ``[]`` when another drain took them."""
        try:
            return await self._link([], fates, outputs)
        except RowsTakenError:
            return []

    async def _link(self, items: list[tuple[_Entry, QueuedEdge]], settled: list[_Fate], outputs: _Outputs | None) -> list[_Fate]:
        """Back-fill the endpoints of ``items`` and link the edges whose endpoints exist, then
        settle their fates and ``settled`` (known already) — in one transaction."""
        fates = list(settled)
        linkable: list[tuple[_Entry, QueuedEdge]] = []
        plan = None
        if items:
            endpoints = {e for _, line in items for e in (line.edge.source, line.edge.target)}
            plan, outcomes = await plan_nodes(endpoints, chroma=self.chroma, unit=self.unit)
            read_failed = any(o.reason == CHROMA_UNREACHABLE for o in outcomes.values())
            outage = read_failed and not await self._chroma_answers()
            if read_failed and not outage and len(items) > 1:
                # A read failed while Chroma answers: some row's read (too big, too slow) — find whose.
                raise _RowReadFailedError("a Chroma read failed while Chroma answers its heartbeat")
            self.stats.backfilled += sum(1 for o in outcomes.values() if o.reason in ("backfilled", "backfilled-minimal"))
            for item in items:
                edge = item[1].edge
                error = _endpoint_error(outcomes[edge.source]) or _endpoint_error(outcomes[edge.target])
                if outage and CHROMA_UNREACHABLE in (outcomes[edge.source].reason, outcomes[edge.target].reason):
                    self.chroma_gone = self.chroma_gone or error
                    fates.append(_Fate(item[0], "held", detail=error or ""))
                elif error:
                    # A forgotten endpoint never comes back: no retry can link the line.
                    forgotten = "forgotten" in (outcomes[edge.source].reason, outcomes[edge.target].reason)
                    fates.append(self._failure(item, error, dead_reason="forgotten" if forgotten else None))
                else:
                    linkable.append(item)
        if self.dry_run or outputs is None:
            return fates + [_Fate(entry, "linked") for entry, _ in linkable]
        writes = plan is not None and bool(linkable or plan.sessions or plan.memories)

        def write() -> list[_Fate]:
            culled: set[tuple[str, str, str]] = set()
            if writes and plan is not None:
                link_stats = write_backfill(plan, self.unit, edges=[line.edge for _, line in linkable])
                culled = {(e.source, e.target, e.relationship) for e in link_stats.culled_edges}
            done = fates + [
                self._failure(item, "endpoint-missing: culled while linking")
                if (item[1].edge.source, item[1].edge.target, item[1].edge.relationship) in culled
                else _Fate(item[0], "linked")
                for item in linkable
            ]
            if outputs.in_database:
                outputs.settle(done)  # in the batch's own transaction
            return done

        def in_transaction() -> list[_Fate]:
            with self.unit.transaction():
                return write()

        if not (fates or linkable or writes):
            return []
        done = await anyio.to_thread.run_sync(in_transaction if writes or outputs.in_database else write)
        if not outputs.in_database:
            # The file form's scratch outputs once the batch's transaction committed: a commit that
            # failed (the batch is linked again, or the drain ends) has written no line to them.
            await anyio.to_thread.run_sync(outputs.settle, done)
        return done

    def _failure(self, item: tuple[_Entry, QueuedEdge], error: str, *, dead_reason: str | None = None) -> _Fate:
        """A line that did not link: re-queued, or dead-lettered after its last attempt (or at once,
        with ``dead_reason``, when no attempt can ever link it)."""
        attempts = item[1].attempts + 1
        if dead_reason is not None or attempts >= self.max_attempts:
            return _Fate(item[0], "dead", dead_reason or "max-attempts", error, attempts)
        return _Fate(item[0], "requeued", detail=error, attempts=attempts, record=item[1].record)

    def _count(self, fates: list[_Fate]) -> None:
        for fate in fates:
            if fate.outcome == "held":
                self.held += 1
                continue
            if fate.outcome == "linked":
                self.stats.succeeded += 1
                continue
            if fate.outcome == "dead":
                self.stats.dead_lettered += 1
            if fate.malformed:
                self.stats.skipped_malformed += 1
                continue
            self.stats.failed += 1
            self.stats.requeued += fate.outcome == "requeued"
            kind = fate.detail.split(":", 1)[0]
            self.stats.failure_reasons[kind] = self.stats.failure_reasons.get(kind, 0) + 1


# The back-fill reason of an endpoint whose Chroma read failed in transport (unreachable, timed out).
CHROMA_UNREACHABLE = "chroma-fetch-failed"


class _RowReadFailedError(Exception):
    """A batch's Chroma read failed while Chroma answers: the batch is retried line by line, so
    the line whose row cannot be read is charged alone and the others link."""


def _stalled(exc: QueryInterruptedError) -> QueryInterruptedError:
    """The error that ends a drain whose statements ran past the database's statement timeout for a
    line and then for the locks of the tables a drain writes: a stalled database (a lock another
    client holds, a ``statement_timeout`` too short for the server's load), no line's fault."""
    return QueryInterruptedError(
        f"the graph database stopped statements at its statement timeout for a line and for the locks of the tables "
        f"it writes ({exc}): a lock another client holds, or a statement_timeout too short; no line was charged"
    )


def _malformed(entry: _Entry, line: MalformedLine) -> _Fate:
    return _Fate(entry, "dead", line.reason, line.detail, 0, malformed=True)


def _endpoint_error(outcome: RowOutcome) -> str | None:
    return None if outcome.success else f"{outcome.reason}: {outcome.graph_node_id}: {outcome.error}"


def _take(lines: Iterator[bytes], size: int) -> list[bytes]:
    batch = []
    nbytes = 0
    for line in lines:
        batch.append(line)
        nbytes += len(line)
        if len(batch) >= size or nbytes >= MAX_BATCH_BYTES:
            break
    return batch


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


async def drain_queue(
    queue: LazyEdgeQueue,
    *,
    unit: UnitOfWork,
    chroma: ChromaStore,
    max_attempts: int,
    table: QueueTable | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    on_progress: Progress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], str] = utc_now,
) -> DrainStats:
    """Drain ``queue`` once (see the module doc), then ``table`` (the queue's database form, in
    ``unit``'s database) when given. Raises :class:`QueueBusyError` when another drain runs.
    ``on_progress(done, total)`` follows the work (bytes of the files, characters of the rows);
    ``should_stop()`` is checked between batches: when true, the unread lines go back to the live
    queue and the unread rows stay where they are, untouched, and the drain ends cleanly."""
    stats = DrainStats(dry_run=dry_run)
    run = _Drain(unit, chroma, max_attempts, max(1, batch_size), dry_run, clock, stats)
    if dry_run:
        inputs = [p for p in [*queue.draining_files(), queue.path] if p.exists()]
        stats.orphan_recovered = len(inputs) > 1
        up_to = await anyio.to_thread.run_sync(table.last_id) if table is not None else 0
        progress = await _progress_over(inputs, table, up_to, on_progress)
        if await _run_inputs(run, inputs, None, progress, should_stop) and table is not None and up_to:
            await run.run_table(table, up_to, None, progress=progress, stop=should_stop)
        _raise_if_chroma_gone(run)
        return stats
    with queue.exclusive():
        recovered = await anyio.to_thread.run_sync(queue.recover_publish)
        if recovered:
            log.warning("the previous drain was killed while publishing; recovered", recovery=recovered)
        inputs = queue.draining_files()
        stats.orphan_recovered = bool(inputs)
        rotated = await anyio.to_thread.run_sync(queue.rotate)
        stats.queue_rotated = rotated is not None
        if rotated is not None:
            inputs.append(rotated)
        up_to = await anyio.to_thread.run_sync(table.last_id) if table is not None else 0
        if not inputs and not up_to:
            return stats
        progress = await _progress_over(inputs, table, up_to, on_progress)
        finished = True
        if inputs:
            requeue_out, dead_out = queue.open_scratch()
            try:
                finished = await _run_inputs(run, inputs, _FileOutputs(requeue_out, dead_out, clock), progress, should_stop)
                for out in (requeue_out, dead_out):
                    out.flush()
            finally:
                requeue_out.close()
                dead_out.close()
            await anyio.to_thread.run_sync(queue.commit_drain, inputs)
        if finished and table is not None and up_to:
            await run.run_table(table, up_to, _TableOutputs(table, clock), progress=progress, stop=should_stop)
    _raise_if_chroma_gone(run)
    log.info("lazy queue drained", **{k: v for k, v in stats.as_dict().items() if k != "failure_reasons"})
    return stats


def _raise_if_chroma_gone(run: _Drain) -> None:
    """Raise :class:`ChromaGoneDuringDrainError` when the drain stopped because Chroma could not
    be reached (called once every line is back where it belongs)."""
    if run.chroma_gone is None:
        return
    stats = run.stats
    raise ChromaGoneDuringDrainError(
        f"Chroma could not be reached, so the drain stopped ({run.chroma_gone[:300]}): {stats.succeeded} queued edges "
        f"linked, {stats.requeued} re-queued, {stats.dead_lettered} dead-lettered; {run.held} lines that needed Chroma "
        "and the unread ones are back in the queue as they were, with no attempt counted; drain again once Chroma answers",
        stats,
    )


async def _progress_over(
    inputs: list[Path], table: QueueTable | None, up_to: int, on_progress: Progress | None
) -> Callable[[int], None]:
    """A ``progress(amount)`` that adds up and reports to ``on_progress`` against the total of
    ``inputs`` and the table's rows up to ``up_to``."""
    if on_progress is None:
        return lambda amount: None
    total = sum(_size(p) for p in inputs)
    if table is not None and up_to:
        total += await anyio.to_thread.run_sync(partial(table.pending_bytes, up_to=up_to))
    done = 0

    def progress(amount: int) -> None:
        nonlocal done
        done += amount
        on_progress(done, total)

    return progress


async def _run_inputs(
    run: _Drain, inputs: list[Path], outputs: _FileOutputs | None, progress: Callable[[int], None], should_stop: Callable[[], bool]
) -> bool:
    """Drain the files ``inputs`` in order; ``False`` when stopped early (the rest re-queued)."""
    stopped = False
    for path in inputs:
        if stopped:
            await anyio.to_thread.run_sync(run.copy_rest, LazyEdgeQueue.read_lines(path), outputs)
            continue
        stopped = not await run.run_file(path, outputs, progress=progress, stop=should_stop)
    return not stopped
