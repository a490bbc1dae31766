"""Prometheus metrics, read from the database and the lazy-edge queue at scrape time.

Nothing is counted in process memory: every value comes from ``rem_runs``, ``session_digests``,
``chunk_results``, ``nodes``/``edges`` and the queue files when ``/metrics`` is scraped, so the
numbers survive restarts, include work done by ``rem-cycle --once`` runs, and a scrape never
touches the cycle's connection (it opens its own read-only one). What only grows and changes
only now and then (the run history) is recounted only when it changed, the queue files and the
dead-letter file are read only where they grew (:class:`QueueGauges`), and nothing is read from the
database while its files are unchanged (:func:`database_files_key`): a scrape between cycles costs
a few ``stat`` calls, however long the history or the queue.
Every name starts with ``rem_cycle_``.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from config import Settings
from pipelines.extract.model import SEMANTIC_RELATIONSHIPS
from pipelines.vocabulary import PROVENANCE_RELATIONSHIPS
from store.backend import open_database
from store.errors import StoreError
from store.graph import GraphStore
from store.lazy_queue import DeadLetterCounter, FileKey, FoldedFile, LazyEdgeQueue, LineFold, file_key, fold_file
from store.lazy_table import LazyEdgeTable
from store.library_log import get_logger
from store.runstate import (
    CYCLE_BUCKETS,
    CYCLE_SERIES,
    PHASE_BUCKETS,
    PHASE_SERIES,
    REUSED_SERIES,
    RUN_OUTCOMES,
    SUM,
    RunStateStore,
    bound_label,
)

log = get_logger(__name__)

# Relationships with a series of their own in rem_cycle_graph_edges; any other is ``other``.
KNOWN_RELATIONSHIPS: frozenset[str] = frozenset(SEMANTIC_RELATIONSHIPS) | PROVENANCE_RELATIONSHIPS
OTHER_RELATIONSHIP = "other"


def parse_utc(value: str | None) -> datetime | None:
    """An ISO 8601 timestamp (``Z`` or offset; naive means UTC) as an aware datetime, else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age_seconds(value: str | None, now: datetime) -> float:
    """Seconds from the timestamp ``value`` to ``now``; 0 when there is no usable timestamp."""
    moment = parse_utc(value)
    return max(0.0, (now - moment).total_seconds()) if moment else 0.0


def silent_seconds(run: Mapping[str, Any], now: datetime) -> float:
    """Seconds since a run's last heartbeat, to 0.1 s (what ``/healthz`` and ``status`` show)."""
    return round(age_seconds(run.get("heartbeat_at"), now), 1)


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """What the lazy-edge queue holds: lines waiting, and the oldest line's ``timestamp`` (as
    written; ``oldest_at`` the moment it means)."""

    depth: int = 0
    oldest_timestamp: str | None = None
    oldest_at: datetime | None = None


def add_queue_line(summary: QueueSummary, line: bytes) -> QueueSummary:
    """``summary`` with one more line: a blank line does not count, an unparsable one counts with
    no timestamp, and of equal moments the first keeps its spelling. Pure."""
    if not line.strip():
        return summary
    try:
        stamp = json.loads(line).get("timestamp")
    except (ValueError, AttributeError, RecursionError):  # a line the drain will dead-letter
        stamp = None
    moment = parse_utc(stamp)
    if moment is not None and (summary.oldest_at is None or moment < summary.oldest_at):
        return QueueSummary(summary.depth + 1, stamp, moment)
    return QueueSummary(summary.depth + 1, summary.oldest_timestamp, summary.oldest_at)


def merge_queue_summaries(first: QueueSummary, then: QueueSummary) -> QueueSummary:
    """The summary of ``first``'s lines followed by ``then``'s (what adding them one by one gives). Pure."""
    oldest = then if then.oldest_at is not None and (first.oldest_at is None or then.oldest_at < first.oldest_at) else first
    return QueueSummary(first.depth + then.depth, oldest.oldest_timestamp, oldest.oldest_at)


def summarize_queue_lines(lines: Iterable[bytes]) -> QueueSummary:
    """Count non-blank lines and find the oldest parsable ``timestamp`` (lines are not in time
    order: retried lines go back to the end with their original timestamp). Pure."""
    return functools.reduce(add_queue_line, lines, QueueSummary())


QUEUE_LINES: LineFold[QueueSummary] = LineFold(QueueSummary(), add_queue_line)


class QueueGauges:
    """The live queue plus the ``.draining`` files a drain is working through or left behind (their
    lines are still waiting for their edges), summarised by one :func:`~store.lazy_queue.fold_file`
    per file kept across reads: a scrape reads only what was appended since the last one, and a
    file that is unchanged costs a ``stat``. A path whose file is another one (a drain renamed the
    queue to ``.draining`` and a producer started a new queue, or deleted what it drained) is read
    anew; the folds of files gone are dropped; every fold starts anew after a blank in place
    (:meth:`~store.lazy_queue.LazyEdgeQueue.blank_stamp`). Reads through the queue's confinement: a
    symbolic link in place of a queue file is refused. Calls may come from several threads: the
    state is one tuple replaced at once, and a lost race only reads again."""

    def __init__(self, path: Path) -> None:
        self.queue = LazyEdgeQueue(path)
        self._kept: tuple[Any, dict[Path, FoldedFile[QueueSummary]]] = (None, {})

    def read(self) -> QueueSummary:
        """The queue's summary now (what :func:`summarize_queue_lines` makes of every line)."""
        # The stamp before the files: a blank after this read is seen at the next one.
        stamp = self.queue.blank_stamp()
        kept_stamp, kept = self._kept
        last = kept if stamp == kept_stamp else {}
        folded: dict[Path, FoldedFile[QueueSummary]] = {}
        for file in [self.queue.path, *self.queue.draining_files()]:
            result = fold_file(file, QUEUE_LINES, last.get(file), root=self.queue.root)
            if result is not None:  # absent, or renamed or deleted by a drain meanwhile
                folded[file] = result
        self._kept = (stamp, folded)
        return functools.reduce(merge_queue_summaries, (result.value for result in folded.values()), QueueSummary())


def read_queue(path: Path) -> QueueSummary:
    """Summarise the live queue plus the ``.draining`` files once (:class:`QueueGauges`)."""
    return QueueGauges(path).read()


# A database whose files changed less than this long ago is read again at the next scrape: a write
# in the same tick of the file system's clock (coarse, a few ms) as the last one would leave the
# files' sizes and times as they were.
SETTLE_SECONDS = 2.0

FilesKey = tuple[FileKey | None, ...]


def database_files_key(path: Path) -> FilesKey:
    """(device, inode, size, mtime ns) of the database file and of its write-ahead log (None when
    absent). Every commit writes the log, a checkpoint the file, a restore replaces the file: any
    change to the data changes the key."""
    key = []
    for file in (path, path.with_name(path.name + "-wal")):
        try:
            stat = os.stat(file, follow_symlinks=False)
        except FileNotFoundError:
            key.append(None)
            continue
        key.append(file_key(stat))
    return tuple(key)


def settled(key: FilesKey, now_seconds: float) -> bool:
    """Whether every file of ``key`` was last written at least :data:`SETTLE_SECONDS` before
    ``now_seconds`` (so that a later write is bound to change the key). Pure."""
    return all(part is None or part[3] / 1e9 <= now_seconds - SETTLE_SECONDS for part in key)


@dataclass(frozen=True, slots=True)
class DatabaseReading:
    """What a scrape read from the database: the families that do not depend on the time of the
    scrape, and the timestamps of those that do (ages are computed at each scrape)."""

    fixed: list[Metric]
    heartbeats: list[str | None]
    oldest_undigested_created_at: str | None


class RemCycleCollector(Collector):
    """Builds every ``rem_cycle_*`` family from the data dir on each scrape."""

    def __init__(self, settings: Settings, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.settings = settings
        self.now = now
        # The duration histograms and the reused-chunk count read every phase of every run ever
        # recorded (the costliest part of a scrape after a year of hourly cycles), and only a
        # cycle's ingest changes which sessions have turns: keep the last result, keyed by the run
        # counts and latest finish times. Scrapes run in several threads; replacing the tuple is atomic, and a lost race
        # only recomputes.
        self._by_runs: tuple[Any, list[Metric]] | None = None
        # Everything read from the database, kept while its files are unchanged (the same atomic
        # replace as above).
        self._by_files: tuple[FilesKey, DatabaseReading] | None = None
        self._dead_letters = DeadLetterCounter(LazyEdgeQueue(settings.queue_path))
        self._queue = QueueGauges(settings.queue_path)

    def collect(self) -> Iterator[Metric]:
        try:
            families = self._families()
        except (StoreError, OSError) as exc:
            log.warning("metrics scrape failed", error=str(exc))
            families = []
        yield from families
        yield GaugeMetricFamily("rem_cycle_metrics_ok", "1 when the last scrape read the database", value=1 if families else 0)

    def _run_families(self, runstate: RunStateStore) -> tuple[list[Metric], list[str | None]]:
        """Run counts and times, and the running runs' heartbeats; the duration histograms and the
        sessions left without turns change only when a run starts or finishes, and are kept until then."""
        by_outcome = runstate.runs_by_outcome()
        last_finished = runstate.last_finished_by_outcome()
        cycles = CounterMetricFamily("rem_cycle_cycles", "Finished REM cycles by outcome", labels=["outcome"])
        for outcome in RUN_OUTCOMES:
            if outcome != "running":
                cycles.add_metric([outcome], by_outcome.get(outcome, 0))
        running = GaugeMetricFamily("rem_cycle_cycle_running", "1 while a cycle is running", value=by_outcome.get("running", 0))
        last = GaugeMetricFamily(
            "rem_cycle_last_cycle_finished_timestamp_seconds", "Unix time the latest cycle of each outcome finished",
            labels=["outcome"],
        )
        for outcome, finished in sorted(last_finished.items()):
            moment = parse_utc(finished)
            if moment is not None:
                last.add_metric([outcome], moment.timestamp())
        key = (sorted(by_outcome.items()), sorted(last_finished.items()))
        cached = self._by_runs
        if cached is None or cached[0] != key:
            stats = runstate.run_stats()
            cached = (key, [*_duration_families(stats), _no_turn_family(runstate), _reused_family(stats)])
            self._by_runs = cached
        return [cycles, running, last, *cached[1]], [run["heartbeat_at"] for run in runstate.running_runs()]

    def _read_database(self) -> DatabaseReading:
        """Read the database, or reuse the last reading while its files are unchanged."""
        # Taken before the key: a write after this moment gets a later modification time than
        # any file that was settled by then, so it cannot leave the key as it was. A server
        # database has no files to watch: it is read at every scrape.
        read_at = time.time()
        key = database_files_key(self.settings.graph_path) if self.settings.database_url is None else None
        cached = self._by_files
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        db = open_database(self.settings, readonly=True, timeout=5.0)
        try:
            runstate, graph = RunStateStore(db), GraphStore(db)
            runs, heartbeats = self._run_families(runstate)
            reading = DatabaseReading(
                fixed=[
                    *runs, *_session_families(runstate), *_chunk_families(runstate), *_graph_families(graph),
                    GaugeMetricFamily(
                        "rem_cycle_lazy_queue_table_rows", "Rows waiting in the lazy-edge queue table (the database form)",
                        value=LazyEdgeTable(db).depth(),
                    ),
                ],
                heartbeats=heartbeats,
                oldest_undigested_created_at=runstate.oldest_undigested_created_at(),
            )
        finally:
            db.close()
        if key is not None and settled(key, read_at):
            self._by_files = (key, reading)
        return reading

    def _families(self) -> list[Metric]:
        now = self.now()
        reading = self._read_database()
        families = [*reading.fixed, *_age_families(reading, now, self.settings.lease_timeout_seconds)]
        families.extend(_queue_families(self._queue.read(), now))
        families.append(
            GaugeMetricFamily(
                "rem_cycle_dead_letters", "Records in the lazy-edge dead-letter file (lines that will never link)",
                value=self._dead_letters.count(),
            )
        )
        return families


def _age_families(reading: DatabaseReading, now: datetime, lease_timeout_seconds: float) -> list[Metric]:
    """The families that depend on the time of the scrape: heartbeat age, stall, oldest undigested."""
    silence = max((age_seconds(beat, now) for beat in reading.heartbeats), default=0.0)
    return [
        GaugeMetricFamily(
            "rem_cycle_heartbeat_age_seconds", "Seconds since the running cycle's last heartbeat (0 when none runs)", value=silence
        ),
        GaugeMetricFamily(
            "rem_cycle_cycle_stalled", "1 while a running cycle has been silent longer than REM_LEASE_TIMEOUT_SECONDS",
            value=int(silence > lease_timeout_seconds),
        ),
        GaugeMetricFamily(
            "rem_cycle_oldest_undigested_session_age_seconds",
            "Age of the oldest undigested session (by its creation time); 0 when none",
            value=age_seconds(reading.oldest_undigested_created_at, now),
        ),
    ]


def _duration_families(stats: Mapping[tuple[str, str], float]) -> list[Metric]:
    """The cycle and phase duration histograms, from :meth:`RunStateStore.run_stats`."""
    duration = HistogramMetricFamily("rem_cycle_cycle_duration_seconds", "Wall-clock time of finished cycles")
    duration.add_metric([], *_histogram(stats, CYCLE_SERIES, CYCLE_BUCKETS))
    phase_duration = HistogramMetricFamily(
        "rem_cycle_phase_duration_seconds", "Time spent in each phase of a cycle", labels=["phase"]
    )
    phases = sorted({series.removeprefix(PHASE_SERIES) for series, _ in stats if series.startswith(PHASE_SERIES)})
    for phase in phases:
        buckets, total = _histogram(stats, PHASE_SERIES + phase, PHASE_BUCKETS)
        if buckets[-1][1]:
            phase_duration.add_metric([phase], buckets, total)
    return [duration, phase_duration]


def _histogram(stats: Mapping[tuple[str, str], float], series: str, bounds: tuple[float, ...]) -> tuple[list[tuple[str, float]], float]:
    """A series of ``run_stats`` as cumulative Prometheus buckets and its sum."""
    return [(bound_label(b), stats.get((series, bound_label(b)), 0.0)) for b in bounds], stats.get((series, SUM), 0.0)


def _no_turn_family(runstate: RunStateStore) -> Metric:
    return GaugeMetricFamily(
        "rem_cycle_sessions_without_turns",
        "Ingested sessions whose latest ingest found no turns (all removed, or moved to another session)",
        value=runstate.sessions_without_turns(),
    )


def _session_families(runstate: RunStateStore) -> list[Metric]:
    sessions = GaugeMetricFamily("rem_cycle_sessions", "Sessions by digest state", labels=["state"])
    for state, count in sorted(runstate.digest_counts().items()):
        sessions.add_metric([state], count)
    newest = GaugeMetricFamily(
        "rem_cycle_newest_digested_session_timestamp_seconds",
        "Unix time the newest digested session was created (how fresh the graph is); absent when none",
    )
    moment = parse_utc(runstate.newest_digested_created_at())
    if moment is not None:
        newest.add_metric([], moment.timestamp())
    return [sessions, newest]


def _chunk_families(runstate: RunStateStore) -> list[Metric]:
    totals = runstate.chunk_totals()
    chunks = GaugeMetricFamily("rem_cycle_chunk_results", "Chunk extraction results on record by status", labels=["status"])
    tokens = GaugeMetricFamily(
        "rem_cycle_model_tokens", "Model tokens recorded in chunk results", labels=["direction"]
    )
    for status in ("ok", "failed"):
        chunks.add_metric([status], totals.get(status, {}).get("count", 0))
    tokens.add_metric(["in"], sum(t["tokens_in"] for t in totals.values()))
    tokens.add_metric(["out"], sum(t["tokens_out"] for t in totals.values()))
    return [chunks, tokens]


def _reused_family(stats: Mapping[tuple[str, str], float]) -> Metric:
    """Summed over every run's extract record (``run_stats``, kept as runs finish)."""
    return CounterMetricFamily(
        "rem_cycle_chunks_reused", "Chunks whose stored result was reused instead of calling the model",
        value=stats.get((REUSED_SERIES, SUM), 0.0),
    )


def _graph_families(graph: GraphStore) -> list[Metric]:
    counts = graph.counts()
    nodes = GaugeMetricFamily("rem_cycle_graph_nodes", "Graph nodes by label", labels=["label"])
    for label, count in counts["nodes"].items():
        nodes.add_metric([label], count)
    edges = GaugeMetricFamily("rem_cycle_graph_edges", "Graph edges by relationship", labels=["relationship"])
    for relationship, count in _bounded_relationships(counts["edges"]).items():
        edges.add_metric([relationship], count)
    backfilled = GaugeMetricFamily(
        "rem_cycle_backfilled_nodes", "MEMORY/SESSION nodes created by back-fill, by reason", labels=["label", "reason"]
    )
    for label, reasons in sorted(graph.backfill_counts().items()):
        for reason, count in reasons.items():
            backfilled.add_metric([label, reason], count)
    return [nodes, edges, backfilled]


def _bounded_relationships(counts: Mapping[str, int]) -> dict[str, int]:
    """Edge counts by relationship with every relationship outside the vocabulary summed under
    ``other``: a lazy edge's relationship is stored as given, and a series per producer's spelling
    would grow without bound (Prometheus keeps every series it has seen)."""
    bounded: dict[str, int] = {}
    for relationship, count in counts.items():
        key = relationship if relationship in KNOWN_RELATIONSHIPS else OTHER_RELATIONSHIP
        bounded[key] = bounded.get(key, 0) + count
    return bounded


def _queue_families(queue: QueueSummary, now: datetime) -> list[Metric]:
    return [
        GaugeMetricFamily("rem_cycle_lazy_queue_depth", "Lines waiting in the lazy-edge queue", value=queue.depth),
        GaugeMetricFamily(
            "rem_cycle_lazy_queue_oldest_age_seconds", "Age of the oldest queued lazy edge; 0 when empty",
            value=age_seconds(queue.oldest_timestamp, now),
        ),
    ]


def build_registry(settings: Settings) -> CollectorRegistry:
    """A registry with the rem-cycle collector and the standard process metrics."""
    # auto_describe=False: registering must not run a scrape (the database may not exist yet).
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RemCycleCollector(settings))
    ProcessCollector(registry=registry)
    return registry
