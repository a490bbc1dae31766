"""Drain the lazy-edge queue (DESIGN §4.4): rename, then link every line, back-filling endpoints.

1. Single flight: the queue's lock; a second drain raises :class:`QueueBusyError` at once.
2. ``.draining`` files left by a crashed drain are drained first ("orphan recovery").
3. The live queue is renamed to ``.draining``; producers appending meanwhile create a fresh queue.
4. Lines are read in batches (streaming; memory stays flat): parse and normalise
   (:func:`parse_line`, pure), read what back-filling the missing ``memory:``/``session:``
   endpoints needs (one Chroma read per kind of row), then write the back-filled nodes and link the
   batch's edges in one transaction. A batch that raises is retried line by line so one bad line cannot hold
   the others back.
5. A line that fails goes back to the live queue with ``attempts`` + 1 and ``lastError``; after
   ``max_attempts`` it goes to the dead-letter file instead. A malformed line (not JSON, missing or
   invalid ``source``/``target``/``relationship``/``weight``/``properties``) goes straight to the
   dead-letter file. Outputs are staged in scratch files and published at the end, then the
   ``.draining`` files are deleted: a crash anywhere loses no line (the next drain starts over from
   the ``.draining`` files, and linking a line twice leaves one edge). A publish a crash cut short
   is undone or finished first (``LazyEdgeQueue.recover_publish``), so no dead letter is doubled
   or left torn, and no record rem-cycle did not write is ever cut.

A dry run reads the ``.draining`` files and the live queue, checks what back-fill would do, and
changes nothing (no rename, no lock file, no graph or Chroma write).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

import anyio
import structlog

from pipelines.backfill import DEFAULT_BATCH_SIZE, RowOutcome, plan_nodes, write_backfill
from store.chroma import ChromaStore
from store.graph import Edge, GraphStore, utc_now
from store.ids import InvalidIdError, normalize_graph_node_id
from store.lazy_queue import MAX_LINE_BYTES, LazyEdgeQueue, OversizedLine, QueueBusyError, edge_line

log = structlog.get_logger(__name__)

__all__ = ["DrainStats", "MalformedLine", "QueuedEdge", "QueueBusyError", "dead_letter_record", "drain_queue", "parse_line"]

# Fields of a queue line with a meaning of their own; every other top-level field is kept as an
# edge property (the earlier system lost ``justification`` by forwarding only ``properties``).
LINE_FIELDS = frozenset({"source", "target", "relationship", "weight", "properties", "timestamp", "attempts", "lastError"})
MAX_RELATIONSHIP_LENGTH = 128
# Lines read per batch stop at this many bytes too, so a batch of long lines stays small in memory.
MAX_BATCH_BYTES = 8 * 1024 * 1024
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
    if not isinstance(record, dict):
        return MalformedLine("malformed-json", f"expected a JSON object, got {type(record).__name__}")
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
    weight = record.get("weight", 1.0)
    if weight is None:
        weight = 1.0
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        return MalformedLine("invalid-edge", f"weight must be a finite number, got {str(weight)[:40]!r}")
    properties = record.get("properties") or {}
    if not isinstance(properties, dict):
        return MalformedLine("invalid-edge", "properties must be a JSON object")
    extras = {k: v for k, v in record.items() if k not in LINE_FIELDS}
    attempts = record.get("attempts", 0)
    attempts = attempts if isinstance(attempts, int) and not isinstance(attempts, bool) and attempts >= 0 else 0
    merged = {**extras, **properties}
    problem = _unstorable(merged)
    if problem:
        return MalformedLine("invalid-edge", f"properties cannot be stored: {problem}")
    edge = Edge(source, target, relationship, float(weight), merged)
    return QueuedEdge(edge, record, attempts)


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
            "dry_run": self.dry_run,
            "failure_reasons": dict(sorted(self.failure_reasons.items())),
        }


Progress = Callable[[int, int], None]


@dataclass
class _Drain:
    """The state of one drain run (scratch outputs, counters, options)."""

    queue: LazyEdgeQueue
    graph: GraphStore
    chroma: ChromaStore
    max_attempts: int
    batch_size: int
    dry_run: bool
    clock: Callable[[], str]
    stats: DrainStats
    requeue_out: IO[bytes] | None = None
    dead_out: IO[bytes] | None = None

    async def run_file(self, path: Path, *, progress: Callable[[int], None], stop: Callable[[], bool]) -> bool:
        """Drain one file; ``False`` when stopped early (the rest was copied to the requeue output)."""
        lines = LazyEdgeQueue.read_lines(path)
        while True:
            batch = await anyio.to_thread.run_sync(_take, lines, self.batch_size)
            if not batch:
                return True
            await self.run_batch(batch)
            progress(sum(len(line) for line in batch))
            if stop():
                await anyio.to_thread.run_sync(self._copy_rest, lines)
                return False

    def _copy_rest(self, lines: Iterator[bytes]) -> None:
        for line in lines:
            if isinstance(line, OversizedLine):  # only its head was read: it cannot go back whole
                self.stats.total_lines += 1
                self._malformed(line, parse_line(line))  # type: ignore[arg-type]
            elif self.requeue_out is not None:
                self.requeue_out.write(line if line.endswith(b"\n") else line + b"\n")

    def _malformed(self, raw: bytes, line: MalformedLine) -> None:
        self.stats.skipped_malformed += 1
        self._dead(raw, reason=line.reason, detail=line.detail, attempts=0)

    async def run_batch(self, batch: list[bytes]) -> None:
        parsed: list[tuple[bytes, QueuedEdge]] = []
        for raw in batch:
            self.stats.total_lines += 1
            line = parse_line(raw)
            if isinstance(line, MalformedLine):
                self._malformed(raw, line)
            else:
                parsed.append((raw, line))
        if not parsed:
            return
        self.stats.processed += len(parsed)
        try:
            results = await self._link(parsed)
        except Exception as exc:  # noqa: BLE001 - isolate the line that breaks the batch
            log.warning("drain batch failed; retrying its lines one by one", lines=len(parsed), error=_describe(exc))
            results = []
            for item in parsed:
                try:
                    results += await self._link([item])
                except Exception as one_exc:  # noqa: BLE001 - the line is kept for the next drain
                    results.append((item, f"error: {_describe(one_exc)}"))
        for (raw, line), error in results:
            if error is None:
                self.stats.succeeded += 1
            else:
                self._failed(raw, line, error)

    async def _link(self, items: list[tuple[bytes, QueuedEdge]]) -> list[tuple[tuple[bytes, QueuedEdge], str | None]]:
        """Back-fill the endpoints of ``items`` and link the edges whose endpoints exist, in one
        transaction; the error of each item (``None`` = linked)."""
        endpoints = {e for _, line in items for e in (line.edge.source, line.edge.target)}
        plan, outcomes = await plan_nodes(endpoints, chroma=self.chroma, graph=self.graph)
        self.stats.backfilled += sum(1 for o in outcomes.values() if o.reason in ("backfilled", "backfilled-minimal"))
        results: list[tuple[tuple[bytes, QueuedEdge], str | None]] = []
        linkable: list[tuple[bytes, QueuedEdge]] = []
        for item in items:
            edge = item[1].edge
            error = _endpoint_error(outcomes[edge.source]) or _endpoint_error(outcomes[edge.target])
            if error:
                results.append((item, error))
            else:
                linkable.append(item)
        culled: set[tuple[str, str, str]] = set()
        if not self.dry_run and (linkable or plan.sessions or plan.memories):
            link_stats = await anyio.to_thread.run_sync(
                partial(write_backfill, plan, self.graph, edges=[line.edge for _, line in linkable])
            )
            culled = {(e.source, e.target, e.relationship) for e in link_stats.culled_edges}
        for item in linkable:
            edge = item[1].edge
            missing = (edge.source, edge.target, edge.relationship) in culled
            results.append((item, "endpoint-missing: culled while linking" if missing else None))
        return results

    def _failed(self, raw: bytes, line: QueuedEdge, error: str) -> None:
        self.stats.failed += 1
        kind = error.split(":", 1)[0]
        self.stats.failure_reasons[kind] = self.stats.failure_reasons.get(kind, 0) + 1
        attempts = line.attempts + 1
        if attempts >= self.max_attempts:
            self._dead(raw, reason="max-attempts", detail=error, attempts=attempts)
            return
        self.stats.requeued += 1
        if self.requeue_out is not None:
            self.requeue_out.write(edge_line({**line.record, "attempts": attempts, "lastError": error[:300]}))

    def _dead(self, raw: bytes, *, reason: str, detail: str, attempts: int) -> None:
        self.stats.dead_lettered += 1
        if self.dead_out is not None:
            record = dead_letter_record(raw, reason=reason, detail=detail, attempts=attempts, at=self.clock())
            self.dead_out.write((json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))


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
    graph: GraphStore,
    chroma: ChromaStore,
    max_attempts: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    on_progress: Progress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], str] = utc_now,
) -> DrainStats:
    """Drain ``queue`` once (see the module doc). Raises :class:`QueueBusyError` when another drain
    runs. ``on_progress(bytes_done, bytes_total)`` follows the work; ``should_stop()`` is checked
    between batches: when true, the unread lines go back to the live queue untouched and the drain
    ends cleanly."""
    stats = DrainStats(dry_run=dry_run)
    run = _Drain(queue, graph, chroma, max_attempts, max(1, batch_size), dry_run, clock, stats)
    if dry_run:
        inputs = [*queue.draining_files(), queue.path]
        stats.orphan_recovered = len(inputs) > 1
        await _run_inputs(run, [p for p in inputs if p.exists()], on_progress, should_stop)
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
        if not inputs:
            return stats
        run.requeue_out, run.dead_out = queue.open_scratch()
        try:
            await _run_inputs(run, inputs, on_progress, should_stop)
            for out in (run.requeue_out, run.dead_out):
                out.flush()
        finally:
            run.requeue_out.close()
            run.dead_out.close()
        await anyio.to_thread.run_sync(queue.commit_drain, inputs)
    log.info("lazy queue drained", **{k: v for k, v in stats.as_dict().items() if k != "failure_reasons"})
    return stats


async def _run_inputs(run: _Drain, inputs: list[Path], on_progress: Progress | None, should_stop: Callable[[], bool]) -> None:
    total = sum(_size(p) for p in inputs)
    done = 0

    def progress(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if on_progress:
            on_progress(done, total)

    stopped = False
    for path in inputs:
        if stopped:
            await anyio.to_thread.run_sync(run._copy_rest, LazyEdgeQueue.read_lines(path))
            continue
        stopped = not await run.run_file(path, progress=progress, stop=should_stop)
