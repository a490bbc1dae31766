"""One REM cycle: provider-ready → ingest → extract → drain → finalize, recorded as a row of ``rem_runs``.

A failure in one session is recorded and the cycle goes on with the next; a failure of a whole
phase ends the cycle with ``outcome=failed``, the phase and a reason code.

Single flight and several workers: a cycle that takes this host's lock file and the database's
single-flight lock (``rem_locks``, :data:`store.claims.CYCLE_LOCK`) runs every phase — it is the
*leader*. Extract digests sessions it claims (``session_claims``), never a list: with
``REM_SHARED_EXTRACT`` a cycle that finds either lock taken is a *follower* and runs provider-ready
and extract only, claiming sessions beside the leader, instead of exiting busy. Ingest, drain and
finalize therefore run in one worker at a time across every host sharing the database, while
extraction — where the model's latency is — runs in all of them.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from functools import partial
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import structlog

from config import Settings
from config.redact import redact
from pipelines.drain import DrainStats, drain_queue
from pipelines.extract.inflight import HeldAnswers
from pipelines.forget import MassRetractionRefused, retract_vanished, sessions_to_retract
from pipelines.ingest import ScanResult, mark_holds, scan_changed_sessions, sessions_to_sync, sync_batch_isolating_failures
from store.chroma import ChromaStore, ChromaStoreError, ChromaUnavailableError, TurnsHandOff
from store.claims import CYCLE_LOCK, ClaimStore, LockStore, TextClaimStore, host_identity, lock_holder_line, worker_owner
from store.confined import UnsafePathError, exclusive_lock, lock_holder
from store.backend import database_exists, database_location, open_database, open_database_at
from store.db import Database
from store.errors import LeaseLostError, SchemaTooNewError, StoreError
from store.graph import GraphStore, utc_now
from store.held_file import held_answers_file
from store.lazy_queue import LazyEdgeQueue, QueueBusyError
from store.lazy_table import LazyEdgeTable, lazy_edge_sink
from store.library_log import get_logger
from store.runstate import RunStateStore, SessionRevision
from store.scan_marks import ScanMark, ScanMarkStore
from store.tombstones import MEMORY, SESSION, TombstoneStore
from store.unit_of_work import DatabaseUnitOfWork
from worker.failures import FailureRecorder, RunFailure, damage_message, failure_reason
from worker.held_answers import drop_taken_out, take_from_file, write_to_file
from worker.knowledge import (
    erase_when_due,
    identity_resolver,
    judge_checked,
    keep_identity_index,
    model_judge,
    refresh_communities_when_due,
    withdraw_retracted,
    withdraw_retracted_despite_failure,
)

log = get_logger(__name__)

# Sessions synced per Chroma read / graph transaction: large enough to amortise the round trip,
# small enough that an interrupted cycle loses little work.
SESSIONS_PER_BATCH = 25
HEARTBEAT_SECONDS = 5.0
# A lease timeout covers this many heartbeats, so one slow beat is never taken for a stall.
BEATS_PER_LEASE = 3

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BUSY = 3


class CycleBusyError(RuntimeError):
    """Another cycle holds the single-flight lock on this data dir."""


class PhaseError(RuntimeError):
    """A whole phase failed; ``reason_code`` says why in a word."""

    def __init__(self, reason_code: str, message: str) -> None:
        super().__init__(message)
        self.reason_code = reason_code


class CycleInterrupted(RuntimeError):
    """A stop was requested; the cycle ended after the current transaction."""


@dataclass
class Stores:
    """The open stores a cycle works with: the graph database's (``unit``) and Chroma."""

    db: Database
    unit: DatabaseUnitOfWork
    chroma: ChromaStore

    @property
    def graph(self) -> GraphStore:
        return self.unit.graph

    @property
    def runstate(self) -> RunStateStore:
        return self.unit.runstate

    def close(self) -> None:
        self.db.close()


async def open_stores(settings: Settings, *, scratch_graph: Path | None = None, dry_run: bool = False) -> Stores:
    """Open the graph database (migrating it); Chroma is reached on first use. ``scratch_graph``:
    an SQLite file to use instead (a dry run's empty stand-in for a graph that does not exist yet).
    ``dry_run``: an embedded Chroma that does not exist yet is read as an empty one, not created."""
    if scratch_graph is not None:
        db = await anyio.to_thread.run_sync(partial(open_database_at, path=scratch_graph, url=None))
    else:
        db = await anyio.to_thread.run_sync(open_database, settings)
    return Stores(db=db, unit=DatabaseUnitOfWork(db), chroma=ChromaStore(settings, create=not dry_run))


@dataclass
class CycleContext:
    settings: Settings
    stores: Stores
    run_id: str
    stop: anyio.Event = field(default_factory=anyio.Event)
    # Who holds this cycle's leases (session claims, the single-flight lock): host:pid:nonce.
    lease_owner: str = field(default_factory=worker_owner)
    # The operator's word that a full scan may retract most of the graph (``--allow-mass-retraction``).
    allow_mass_retraction: bool = False
    # The database's single-flight lock when this cycle leads (None for a follower).
    lock: LockStore | None = None
    # Paid answers the database refused to store, for the next attempt of their words; the extract
    # phase takes those of the data dir's file into it and writes what is left back (worker/held_answers.py).
    held_answers: HeldAnswers = field(default_factory=HeldAnswers)
    # Why the queue lines of what a failed ingest phase retracted stay queued (their withdrawal
    # failed too): the failed phase's record shows it, beside the phase's own error.
    queue_error: str | None = None
    # The turns the ingest phase read of the sessions it synced, for the extract phase (which drops
    # them when it ends): see store.chroma.TurnsHandOff.
    turns: TurnsHandOff | None = None

    def check_stop(self) -> None:
        """Raise :class:`CycleInterrupted` when a stop was requested (call between transactions)."""
        if self.stop.is_set():
            raise CycleInterrupted("stop requested")


Phase = Callable[[CycleContext], Awaitable[dict[str, Any]]]


async def provider_ready(ctx: CycleContext) -> dict[str, Any]:
    """Chroma answers (and, when configured, the model server)."""
    try:
        await ctx.stores.chroma.ping()
    except ChromaStoreError as exc:  # unreachable (chroma-unavailable) or a damaged embedded store (chroma-error)
        raise PhaseError(exc.reason_code, str(exc)) from exc
    ready: dict[str, Any] = {"chroma": ctx.stores.chroma.location}
    if ctx.settings.extractor == "openai":
        from pipelines.extract.llm import OpenAIExtractor
        from pipelines.extract.model import ExtractionFailure

        try:
            async with OpenAIExtractor(ctx.settings) as llm:
                await llm.ping()
        except ExtractionFailure as exc:
            raise PhaseError("llm-unavailable", str(exc)) from exc
        ready["llm"] = redact(ctx.settings.llm_base_url)
    return ready


async def ingest(ctx: CycleContext) -> dict[str, Any]:
    """Live-sync the sessions whose input revision changed, oldest first, up to the batch limit.

    Every write is fenced with the single-flight lock (:meth:`LockStore.still_held`, in its
    transaction): a leader paused past its lease inside this phase — its scan read before another
    leader took over and ingested what came since — writes nothing after the takeover (a stale
    full scan retracted what the new leader had ingested and digested). Its phase fails
    ``lock-lost``; no session is charged."""
    with _lock_lost_fails_the_phase("ingest"):
        return await _ingest(ctx)


@contextmanager
def _lock_lost_fails_the_phase(phase: str) -> Iterator[None]:
    """A fenced write that found the single-flight lock taken over (:class:`LeaseLostError`, its
    transaction rolled back) fails ``phase`` with reason ``lock-lost``."""
    try:
        yield
    except LeaseLostError as exc:
        raise PhaseError("lock-lost", f"{exc}: the rest of {phase} is the new leader's (none of it written here)") from exc


def _fenced_unit(ctx: CycleContext) -> DatabaseUnitOfWork:
    """The unit of work a single-flight phase writes through where a paused leader could undo the
    new leader's work (ingest, finalize's communities): fenced with the single-flight lock when
    this cycle leads."""
    if ctx.lock is None:
        return ctx.stores.unit
    return DatabaseUnitOfWork(ctx.stores.db, fence=partial(ctx.lock.still_held, CYCLE_LOCK))


async def _ingest(ctx: CycleContext) -> dict[str, Any]:
    settings, stores = ctx.settings, ctx.stores
    unit = _fenced_unit(ctx)
    scan_marks = ScanMarkStore(stores.db)
    ctx.turns = TurnsHandOff(stores.chroma, settings.memory_collection)
    try:
        scan = await scan_changed_sessions(
            stores.chroma,
            memory_collection=settings.memory_collection,
            summary_collection=settings.session_collection,
            index=stores.runstate,
            marks=await anyio.to_thread.run_sync(scan_marks.load),
            location=stores.chroma.location,
            now=datetime.now(UTC),
            full_scan_interval_seconds=settings.full_scan_interval_seconds,
        )
    except ChromaStoreError as exc:
        raise PhaseError(exc.reason_code, str(exc)) from exc
    buried = await anyio.to_thread.run_sync(TombstoneStore(stores.db).buried, SESSION)
    revisions = [r for r in scan.revisions if r.session_id not in buried]  # forgotten: never back
    # Only a full scan can see that a session's rows went away (a scan of the new rows found the
    # rows before them where they were). A refusal fails the phase before anything is written.
    retracted = await anyio.to_thread.run_sync(_retract_vanished, ctx, unit, scan) if scan.full else []
    # By session, the turns whose rows left Chroma (the sync fills it in as it takes them out).
    turns_retracted: dict[str, list[str]] = {}
    try:
        counts = await _sync_changed(ctx, unit, scan_marks, scan, revisions, retracted, turns_retracted)
    except BaseException:
        # Even when the phase stops, fails or is cancelled mid-way (shielded: the thread call is
        # not cut off), the retractions it committed have their lines withdrawn now: no later scan
        # finds them again (their records do: what stays queued, the next cycle withdraws). The
        # phase's own error is the one raised.
        if retracted or turns_retracted:
            with anyio.CancelScope(shield=True):
                # An error of the withdrawal must not take the place of the phase's (which the run
                # records): it is kept in ``ctx.queue_error``, shown in the failed phase's record.
                done = await anyio.to_thread.run_sync(partial(_withdraw_retracted_lines, ctx, despite_failure=True))
                ctx.queue_error = done.get("queue_error")
        raise
    # What the extraction of the sessions and turns this phase retracted queued goes too, as a
    # forget's does — and what an earlier cycle, killed before its withdrawal, left recorded: all
    # of it in one pass over the queue (none recorded: one look at an empty table, no queue file).
    withdrawn = await anyio.to_thread.run_sync(_withdraw_retracted_lines, ctx)
    counts.update(withdrawn)
    counts["backlog"] = counts["sessions_changed"] - counts["sessions_synced"]
    await _keep_scan_marks(stores, unit, scan_marks, scan, applied=counts["backlog"] == 0)
    counts["bad_values"] = dict(sorted(counts["bad_values"].items()))
    if counts["bad_values"]:
        log.warning("bad values in source rows", bad_values=counts["bad_values"])
    return counts


async def _sync_changed(
    ctx: CycleContext, unit: DatabaseUnitOfWork, scan_marks: ScanMarkStore, scan: ScanResult, revisions: list[SessionRevision],
    retracted: list[dict[str, Any]], turns_retracted: dict[str, list[str]],
) -> dict[str, Any]:
    """Sync the changed sessions the scan found (up to the batch limit) into the graph, adding to
    ``turns_retracted`` the turns it takes out as it goes; returns the ingest's counts
    (``bad_values`` a :class:`Counter`)."""
    settings, stores = ctx.settings, ctx.stores
    changed = sessions_to_sync(await anyio.to_thread.run_sync(stores.runstate.changed_sessions, revisions), revisions, scan.readded)
    todo = changed[: settings.batch_limit]
    counts: dict[str, Any] = {
        "scan": "full" if scan.full else "new rows",
        "sessions_seen": len(revisions),
        "sessions_retracted": len(retracted),
        "turns_retracted": 0,
        "queue_lines_withdrawn": 0,
        "sessions_changed": len(changed),
        "sessions_synced": 0,
        "sessions_failed": 0,
        "rows_scanned": scan.rows_scanned,
        "processed": 0,
        "upserted": 0,
        "skipped": 0,
        "errors": scan.errors,
        "session_failures": [],
    }
    bad_values = Counter(scan.bad_values)
    for detail in scan.error_details[:20]:
        log.warning("scan row error", error=detail)
    if todo:
        # Until this phase ends with every change applied, no mark may say that the rows before it
        # are in the graph (a stopped phase leaves sessions half-synced): the next scan reads all,
        # with this scan's marks to read the rows written again after them. The rows this scan
        # found written again come before those marks and keep their ids: their sessions stay due
        # until synced (audit23).
        readded = [r.session_id for r in changed if r.session_id in scan.readded]
        await anyio.to_thread.run_sync(unit.apply, partial(_before_first_sync, unit, scan_marks, scan, readded))
    for start in range(0, len(todo), SESSIONS_PER_BATCH):
        ctx.check_stop()
        group = todo[start : start + SESSIONS_PER_BATCH]
        try:
            batch = await sync_batch_isolating_failures(
                [r.session_id for r in group], chroma=stores.chroma, unit=unit,
                memory_ids={r.session_id: r.memory_ids for r in group}, turns=ctx.turns,
            )
        except ChromaUnavailableError as exc:
            raise PhaseError(exc.reason_code, str(exc)) from exc
        counts["sessions_failed"] += len(batch.failed)
        counts["session_failures"] += [f"{sid}: {why}" for sid, why in batch.failed.items()][: 20 - len(counts["session_failures"])]
        for revision in group:
            stats = batch.synced.get(revision.session_id)
            if stats is None:
                continue
            for key in ("processed", "upserted", "skipped", "errors"):
                counts[key] += getattr(stats, key)
            if stats.retracted:
                turns_retracted[revision.session_id] = stats.retracted
                counts["turns_retracted"] += len(stats.retracted)
            bad_values.update(stats.bad_values)
            await anyio.to_thread.run_sync(unit.apply, partial(unit.runstate.mark_ingested, revision, ctx.run_id))
            counts["sessions_synced"] += 1
            with structlog.contextvars.bound_contextvars(session_id=revision.session_id):
                log.debug("session ingested", upserted=stats.upserted, skipped=stats.skipped, errors=stats.errors)
    counts["bad_values"] = bad_values
    return counts


def _before_first_sync(unit: DatabaseUnitOfWork, scan_marks: ScanMarkStore, scan: ScanResult, readded: list[str]) -> None:
    """The next scan made a full one (from ``scan``'s marks) and the sessions with rows written
    again kept due, together."""
    unit.runstate.sync_again(readded)
    scan_marks.make_full_scan_due(scan.marks)


async def _keep_scan_marks(stores: Stores, unit: DatabaseUnitOfWork, scan_marks: ScanMarkStore, scan: ScanResult, *, applied: bool) -> None:
    """Save the marks of what the scan read once all it found is in the graph — and, after a full
    scan (paged, so not one reading), only when its last ids are still where it read them; else
    the next scan reads every row again (the marks were cleared before the first write)."""
    if applied and (not scan.full or await _marks_hold(stores.chroma, scan.marks)):
        await anyio.to_thread.run_sync(unit.apply, partial(scan_marks.save, scan.marks))


async def _marks_hold(chroma: ChromaStore, marks: list[ScanMark]) -> bool:
    try:
        return all([await mark_holds(chroma, mark) for mark in marks])
    except ChromaStoreError:
        return False


def _retract_vanished(ctx: CycleContext, unit: DatabaseUnitOfWork, scan: ScanResult) -> list[dict[str, Any]]:
    """Sessions whose rows all left Chroma are forgotten (no tombstone: new rows may come back) —
    unless they are most of the graph and the operator did not allow it: then :class:`PhaseError`
    ``mass-retraction-refused``, nothing retracted. Reads every known session id — as the scan
    reads every row id."""
    stores = ctx.stores
    try:
        session_ids = sessions_to_retract(
            {r.session_id for r in scan.revisions}, stores.runstate.session_ids(),
            rows_scanned=scan.rows_scanned, allow_mass=ctx.allow_mass_retraction,
        )
    except MassRetractionRefused as exc:
        raise PhaseError("mass-retraction-refused", (
            f"{exc} ({stores.chroma.location}): retracting that many at once was refused, nothing was changed. "
            "If Chroma lost its data or points at the wrong store (REM_CHROMA_URL, REM_DATA_DIR, the collection "
            "names), put it right and the next cycle goes on; if those sessions were deleted on purpose, "
            "run `rem-cycle --once --allow-mass-retraction` to take them out of the graph"
        )) from exc
    retracted = retract_vanished(unit, session_ids)
    for report in retracted:
        log.info("session retracted: its rows left Chroma", session_id=report["id"], points=report["points"])
    return retracted


def _withdraw_retracted_lines(ctx: CycleContext, *, despite_failure: bool = False) -> dict[str, Any]:
    """Withdraw from the queue table and files the lines the extraction of every recorded
    retraction or forget queued (:func:`worker.knowledge.withdraw_retracted`; the drain lock is free: this
    cycle's drain phase has not begun). A drain elsewhere holding the files past the wait leaves
    theirs in place, and their records, with a warning: ``queue_error``. ``despite_failure``: the
    phase is failing, and an error of the withdrawal is a ``queue_error`` too, not raised
    (:func:`worker.knowledge.withdraw_retracted_despite_failure`)."""
    withdraw = withdraw_retracted_despite_failure if despite_failure else withdraw_retracted
    done = withdraw(ctx.stores.db, queue=LazyEdgeQueue(ctx.settings.queue_path), held=held_answers_file(ctx.settings))
    if done["retractions_withdrawn"]:
        log.info("queue lines of forgotten or retracted sessions and turns withdrawn", withdrawn=done["queue_lines_withdrawn"],
                 retractions=done["retractions_withdrawn"])
    if "queue_error" in done:
        log.warning("queue lines of forgotten or retracted sessions and turns stay queued until the next cycle", reason=done["queue_error"])
    return done


async def extract(ctx: CycleContext) -> dict[str, Any]:
    """Map → reduce → commit every ingested, not yet digested session (oldest first, up to the
    batch limit). A failing session is recorded and the phase goes on."""
    from pipelines.extract.map import iso
    from pipelines.extract.workflow import ExtractEnv, ExtractStats, extract_sessions, open_extractor
    from store.semantic_index import SemanticIndex

    settings, stores = ctx.settings, ctx.stores
    claims = ClaimStore(stores.db, owner=ctx.lease_owner, lease_seconds=settings.lease_timeout_seconds)
    # Only workers that share the database can ask the model about the same words at once: a lone
    # worker's phase is covered by its in-process registry (pipelines/extract/inflight.py).
    text_claims = (TextClaimStore(stores.db, owner=ctx.lease_owner, lease_seconds=settings.lease_timeout_seconds)
                   if settings.shared_extract else None)
    async with open_extractor(settings) as extractor:
        judge, judge_failed = await judge_checked(settings, extractor)
        resolver = identity_resolver(stores.db, auditor=judge.audit_identity if judge else None, keep_as=database_location(settings))
        env = ExtractEnv(
            chroma=stores.chroma, unit=stores.unit,
            queue=lazy_edge_sink(settings, stores.db), graph_index=SemanticIndex(stores.db), extractor=extractor,
            semantic_types=settings.semantic_types, budget_tokens=settings.chunk_budget_tokens,
            max_attempts=settings.max_chunk_attempts, retry_base_seconds=settings.chunk_retry_base_seconds,
            retry_max_seconds=settings.chunk_retry_max_seconds, concurrency=settings.llm_concurrency, run_id=ctx.run_id,
            now=datetime.now(UTC),
            resolver=resolver,
            merges=stores.unit.merges, forgotten_memories=partial(TombstoneStore(stores.db).buried, MEMORY),
            session_memory_ids=TombstoneStore(stores.db).session_memories, claims=claims, text_claims=text_claims,
            held_answers=ctx.held_answers, turns=ctx.turns,
        )
        ctx.turns = None  # the env holds them for this phase only
        stats, queued = ExtractStats(), 0
        try:
            # Answers an earlier process held (a --once run's, a daemon's between cycles) join this
            # one's: all of them when no other worker extracts on this data dir, else those of the
            # sessions this phase claims (below): taken all, another worker's sessions paid again.
            if not settings.shared_extract:
                await anyio.to_thread.run_sync(take_from_file, settings, ctx.held_answers)
            await anyio.to_thread.run_sync(drop_taken_out, settings, ctx.held_answers, stores.db)
            # Claims this owner still holds are an earlier cycle's that could not release them (the
            # database dropped its connection; a daemon's cycles share one owner): its own again.
            await anyio.to_thread.run_sync(claims.release)
            if text_claims is not None:  # a crashed worker's text claims, without reading the history
                await anyio.to_thread.run_sync(text_claims.sweep)
            # Claim a few sessions at a time, so that workers beside this one find work too; a
            # session that failed or was deferred stays claimed until the phase ends (no worker
            # retries it in the meantime), then every claim left is released.
            # A session with a chunk still backing off is not claimed (nor read from Chroma); one
            # that was and whose chunks back off all the same (no call) takes no place in the batch,
            # or sessions backing off would hold up every session behind them for hours.
            backing_off = (extractor.fingerprint, iso(env.now))
            worked = 0
            while worked < settings.batch_limit and not ctx.stop.is_set():
                step = min(claim_step(settings.llm_concurrency), settings.batch_limit - worked)
                todo = await anyio.to_thread.run_sync(partial(claims.claim, step, backing_off=backing_off))
                if not todo:
                    break
                if settings.shared_extract and await anyio.to_thread.run_sync(
                    take_from_file, settings, ctx.held_answers, {record.session_id for record in todo}
                ):
                    await anyio.to_thread.run_sync(drop_taken_out, settings, ctx.held_answers, stores.db)
                queued += len(todo)
                deferred = stats.sessions_backing_off
                await extract_sessions(todo, env, should_stop=ctx.stop.is_set, stats=stats)
                worked += len(todo) - (stats.sessions_backing_off - deferred)
        except* ChromaUnavailableError as group:
            raise PhaseError("chroma-unavailable", str(group.exceptions[0])) from None
        finally:
            with anyio.CancelScope(shield=True):
                try:  # first: a database that refused the answers may refuse the releases too (they wait for a lease then)
                    await anyio.to_thread.run_sync(write_to_file, settings, ctx.held_answers, stores.db)
                finally:
                    await anyio.to_thread.run_sync(claims.release)
                    if text_claims is not None:
                        await anyio.to_thread.run_sync(text_claims.release)
    if stats.interrupted or ctx.stop.is_set():
        raise CycleInterrupted("stop requested")
    if not stats.sessions_failed and not stats.sessions_claim_lost:  # no commit rolled back after resolving
        keep_identity_index(resolver, keep_as=database_location(settings))
    checked = {"judge_failed_check": judge_failed} if judge_failed is not None else {}
    return {"extractor": extractor.fingerprint, "sessions_queued": queued, "identity_index_builds": resolver.builds, **checked,
            **stats.as_dict()}


def claim_step(concurrency: int) -> int:
    """Sessions claimed at a time: twice the sessions extracted at once, so that the model stays
    busy while a session commits, and few enough that workers beside this one find work. Pure."""
    return 2 * concurrency


async def drain_lazy_edges(settings: Settings, stores: Stores, **options: Any) -> DrainStats:
    """Drain the lazy-edge queue — the JSONL file, then the graph database's queue table — with
    the settings' attempt limit and batch size;
    ``options`` go to :func:`pipelines.drain.drain_queue` (``dry_run``, ``on_progress`` …)."""
    return await drain_queue(
        LazyEdgeQueue(settings.queue_path),
        table=LazyEdgeTable(stores.db),
        unit=stores.unit,
        chroma=stores.chroma,
        max_attempts=settings.lazy_max_attempts,
        batch_size=settings.write_batch_size,
        **options,
    )


async def drain(ctx: CycleContext) -> dict[str, Any]:
    """Link the queued lazy edges, back-filling their endpoints (skipped while a ``rem-cycle drain``
    runs). A stop request ends the drain after the current batch; unread lines stay queued."""
    try:
        stats = await drain_lazy_edges(ctx.settings, ctx.stores, should_stop=ctx.stop.is_set)
    except QueueBusyError as exc:
        log.warning("drain skipped", reason=str(exc))
        return {"skipped": "busy"}
    except ChromaStoreError as exc:  # Chroma went away mid-drain: the lines that needed it stay queued as they were
        raise PhaseError(exc.reason_code, str(exc)) from exc
    ctx.check_stop()
    return stats.as_dict()


async def finalize(ctx: CycleContext) -> dict[str, Any]:
    """Refresh the graph's communities when enough changed since the last detection; graph and
    digest counts for the run record; last, erase deleted text from the files when a deletion made
    that due (:func:`worker.knowledge.erase_when_due`: after all else, so it covers what this
    cycle's extraction took back of retracted turns).

    The communities are written fenced with the single-flight lock: a leader paused past its lease
    after reading the graph (while the model names its communities, say) would replace those the
    new leader detected in the grown graph with its stale ones. Its phase fails ``lock-lost``. The
    other writes are the same whoever makes them (INTERNALS "Claims and leases")."""
    async with model_judge(ctx.settings) as judge:
        with _lock_lost_fails_the_phase("finalize"):
            communities = await refresh_communities_when_due(
                ctx.stores.db, namer=judge.name_community if judge else None,
                fraction=ctx.settings.community_refresh_fraction, unit=_fenced_unit(ctx),
            )
    await anyio.to_thread.run_sync(ctx.stores.graph.fold_counts)
    await anyio.to_thread.run_sync(ctx.stores.runstate.fold_counts)
    runs_pruned = 0
    if ctx.settings.run_history_days:
        before = (datetime.now(UTC) - timedelta(days=ctx.settings.run_history_days)).isoformat(timespec="milliseconds")
        runs_pruned = await anyio.to_thread.run_sync(partial(ctx.stores.runstate.prune_runs, finished_before=before.replace("+00:00", "Z")))
    graph = await anyio.to_thread.run_sync(ctx.stores.graph.counts)
    digests = await anyio.to_thread.run_sync(ctx.stores.runstate.digest_counts)
    done: dict[str, Any] = {"graph": graph, "digests": digests, "communities": communities, "runs_pruned": runs_pruned}
    done.update(await anyio.to_thread.run_sync(erase_when_due, ctx.stores.db))
    return done


PHASES: tuple[tuple[str, Phase], ...] = (
    ("provider-ready", provider_ready),
    ("ingest", ingest),
    ("extract", extract),
    ("drain", drain),
    ("finalize", finalize),
)
# What a follower (REM_SHARED_EXTRACT, the single-flight lock held elsewhere) runs.
FOLLOWER_PHASES = frozenset({"provider-ready", "extract"})


@dataclass
class CycleResult:
    run_id: str
    outcome: str
    started_at: str
    finished_at: str
    wall_ms: float
    phases: dict[str, Any]
    reason_code: str | None = None
    failure_phase: str | None = None
    last_successful_phase: str | None = None
    message: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.outcome in ("completed", "interrupted") else EXIT_FAILED

    def as_dict(self) -> dict[str, Any]:
        """The result as ``--once`` prints it (``--json`` too), secrets masked as in its run
        record (store.runstate): an error may quote a configured token (userwalk6)."""
        return redact({
            "run_id": self.run_id,
            "outcome": self.outcome,
            "reason_code": self.reason_code,
            "failure_phase": self.failure_phase,
            "last_successful_phase": self.last_successful_phase,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "wall_ms": round(self.wall_ms, 1),
            "message": self.message,
            "phases": self.phases,
        })


@asynccontextmanager
async def single_flight(settings: Settings, *, lock_path: Path | None = None, what: str = "REM cycle") -> AsyncIterator[None]:
    """Hold the data dir's cycle lock (or ``lock_path``), or raise :class:`CycleBusyError` at once.

    An OS file lock: the kernel releases it when its process dies, even by SIGKILL, so a crash
    never leaves the data dir locked; the dead run's ``rem_runs`` row is then marked abandoned.
    """
    async with _host_lock(settings, lock_path=lock_path, what=what, follow=False):
        yield


@asynccontextmanager
async def graph_single_flight(settings: Settings) -> AsyncIterator[None]:
    """What a command that edits the graph (merge, unmerge, forget, import-notes) holds: the cycle's
    lock file and, when the graph exists, the database's single-flight lock — so it never runs
    beside a cycle's ingest, drain or finalize on any host. Raises :class:`CycleBusyError`."""
    async with single_flight(settings):
        if not await anyio.to_thread.run_sync(database_exists, settings):  # nothing to lock yet (the command says so itself)
            yield
            return
        db = await anyio.to_thread.run_sync(open_database, settings)
        try:
            locks = LockStore(db, owner=worker_owner(), lease_seconds=settings.lease_timeout_seconds)
            if not await anyio.to_thread.run_sync(locks.acquire, CYCLE_LOCK):
                holder = await anyio.to_thread.run_sync(locks.holder, CYCLE_LOCK)
                raise CycleBusyError(f"another REM cycle holds the database's single-flight lock ({holder})")
            try:
                yield
            finally:
                await _release_lock(locks)
        finally:
            db.close()


@asynccontextmanager
async def _host_lock(settings: Settings, *, lock_path: Path | None = None, what: str, follow: bool) -> AsyncIterator[bool]:
    """Hold the lock file and yield ``True``; when another process holds it, yield ``False`` if
    ``follow`` else raise :class:`CycleBusyError`."""
    path = lock_path or settings.lock_path
    with exclusive_lock(path, root=settings.data_dir, holder=lock_holder_line()) as held:
        if not held and not follow:
            from worker.views import printable  # here: worker.views imports this module

            # The process that holds it, as it wrote itself in the file (status shows its run);
            # printable: the file is anyone's who can write the data dir, and the line goes to a terminal.
            running = printable(lock_holder(path, root=settings.data_dir))
            raise CycleBusyError(f"another {what} is running on {os.path.abspath(settings.data_dir)}: {running} "
                                 f"(it holds {os.path.abspath(path)})")
        yield held


# The data dir itself refuses the cycle: a database from a newer release, or a link / stray file
# where rem-cycle writes. Nothing can be recorded safely there (recording would write to it), and
# it is the operator's to fix: raised as a one-line error, never a run row.
REFUSALS: tuple[type[Exception], ...] = (SchemaTooNewError, UnsafePathError)


def owner_id() -> str:
    """This process as a run row's ``lease_owner``: ``host:pid``, the host as
    :func:`store.claims.host_identity` names it (so that ``status`` can tell a killed local run,
    :func:`store.claims.owner_is_dead`, from another container's of the same hostname)."""
    return f"{host_identity()}:{os.getpid()}"



@dataclass
class CycleAttempt:
    """What a cycle has done so far: enough to write its run row even when it crashes outside a
    phase. ``step`` is the phase running, or ``setup`` (lock, database, run row) / ``finish``
    (writing the record)."""

    run_id: str
    reason: str
    mode: str
    started_at: str = field(default_factory=utc_now)
    t0: float = field(default_factory=time.perf_counter)
    phases: dict[str, Any] = field(default_factory=dict)
    step: str = "setup"
    last_successful_phase: str | None = None
    row_started: bool = False
    decided: CycleResult | None = None  # the phases' outcome, set before the run row is finished
    result: CycleResult | None = None  # set once the run row is finished


def new_run_id() -> str:
    return f"run-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


async def run_cycle(
    settings: Settings,
    *,
    reason: str = "manual",
    mode: str = "once",
    stores: Stores | None = None,
    stop: anyio.Event | None = None,
    phases: tuple[tuple[str, Phase], ...] = PHASES,
    recorder: FailureRecorder | None = None,
    lease_owner: str | None = None,
    allow_mass_retraction: bool = False,
    on_cancelled: Callable[[CycleResult], object] | None = None,
    held_answers: HeldAnswers | None = None,
) -> CycleResult:
    """Run one REM cycle under the single-flight locks (the host's lock file, the database's
    ``rem_locks`` row) and record it. Raises :class:`CycleBusyError` when another cycle holds
    either — unless ``REM_SHARED_EXTRACT`` makes this cycle a follower (extract only, see the module
    docstring) — and one of :data:`REFUSALS` when the data dir refuses it.
    Every other failure — in a phase, or around the phases (the
    lock file, the database or the run row cannot be opened or written, say for want of file
    descriptors) — ends up in the result and in ``rem_runs``, written through ``recorder`` (the
    daemon's, which keeps what it cannot write yet) or a connection opened for it. ``lease_owner``
    names who holds the cycle's leases (default: this cycle alone; the daemon passes its own, so a
    lock its last cycle could not give up — the database went away — is its own to take again).
    ``allow_mass_retraction``: ingest may retract most of the graph's sessions at once (see
    :func:`pipelines.forget.sessions_to_retract`). A cycle cancelled (the grace time of a stop ran
    out) returns nothing: ``on_cancelled`` is handed what it recorded before the cancellation goes
    on (``interrupted``, ``cancelled``), so that ``--once --json`` can still print its report.
    ``held_answers``: paid answers the database refused to store (the daemon's, kept across its
    cycles should the data dir's file refuse them: :mod:`worker.held_answers`); None: this cycle's own."""
    attempt = CycleAttempt(run_id=new_run_id(), reason=reason, mode=mode)
    lease_owner = lease_owner or worker_owner()
    try:
        async with _host_lock(settings, what="REM cycle", follow=settings.shared_extract) as leader:
            own_stores = stores is None
            if stores is None:
                stores = await open_stores(settings)
            locks = LockStore(stores.db, owner=lease_owner, lease_seconds=settings.lease_timeout_seconds)
            try:
                if leader and not await anyio.to_thread.run_sync(locks.acquire, CYCLE_LOCK):
                    if not settings.shared_extract:
                        holder = await anyio.to_thread.run_sync(locks.holder, CYCLE_LOCK)
                        raise CycleBusyError(f"another REM cycle holds the database's single-flight lock ({holder})")
                    leader = False
                if not leader:
                    phases = tuple((name, phase) for name, phase in phases if name in FOLLOWER_PHASES)
                try:
                    return await _run_phases(
                        settings, stores, attempt, stop=stop or anyio.Event(), phases=phases, lease_owner=lease_owner,
                        lock=locks if leader else None, allow_mass_retraction=allow_mass_retraction,
                        held_answers=held_answers if held_answers is not None else HeldAnswers(),
                    )
                finally:
                    if leader:
                        await _release_lock(locks)
            finally:
                if own_stores:
                    stores.close()
    except (CycleBusyError, *REFUSALS):
        raise
    except anyio.get_cancelled_exc_class():
        if on_cancelled is not None:
            on_cancelled(attempt.result or _cancelled_in_setup(attempt))
        raise
    except Exception as exc:  # noqa: BLE001 - recorded below, never swallowed
        if attempt.result is not None:  # the run is recorded; only releasing a store failed
            log.exception("cycle clean-up failed", run_id=attempt.run_id)
            return attempt.result
        return await _record_crash(attempt, exc, recorder or FailureRecorder(settings))


def _cancelled_in_setup(attempt: CycleAttempt) -> CycleResult:
    """A cycle cancelled before its run row was finished (taking the locks, opening the stores):
    what it did, not recorded. Pure."""
    return CycleResult(
        run_id=attempt.run_id, outcome="interrupted", started_at=attempt.started_at, finished_at=utc_now(),
        wall_ms=(time.perf_counter() - attempt.t0) * 1000, phases=attempt.phases, reason_code="cancelled",
        failure_phase=attempt.step, last_successful_phase=attempt.last_successful_phase,
        message="cancelled before the run was recorded in rem_runs",
    )


async def _release_lock(locks: LockStore) -> None:
    """Give the single-flight lock up; failing that, it runs out with its lease (or its owner takes
    it again: see ``run_cycle``'s ``lease_owner``)."""
    with anyio.CancelScope(shield=True):
        try:
            await anyio.to_thread.run_sync(locks.release, CYCLE_LOCK)
        except (StoreError, OSError) as exc:
            log.warning("single-flight lock not released: it runs out with its lease", error=str(exc))


async def _record_crash(attempt: CycleAttempt, exc: Exception, recorder: FailureRecorder) -> CycleResult:
    reason_code, failure_phase = failure_reason(exc), attempt.step
    # The environment's fault (the database unreachable, a folder not writable) is told as `status`
    # tells it, on one line; a bug keeps its repr (its type is the clue). The phase record keeps the repr.
    message = damage_message(exc) or (repr(exc) if reason_code == "crashed" else " ".join(str(exc).split()))
    # The environment's fault (descriptors, files, the database) needs no traceback; anything else is a bug.
    log.error(
        "cycle crashed", run_id=attempt.run_id, step=attempt.step, reason_code=reason_code, error=repr(exc),
        exc_info=exc if reason_code == "crashed" else None,
    )
    phases = {**attempt.phases, attempt.step: {"state": "failed", "error": damage_message(exc) or repr(exc)}}
    decided = attempt.decided
    if decided is not None and decided.outcome == "failed" and decided.failure_phase is not None:
        # A phase failed and then so did writing the run row (the database went away): the run
        # failed in that phase, for its reason; finishing's error is kept beside it.
        reason_code, failure_phase = decided.reason_code or reason_code, decided.failure_phase
        message = f"{decided.message}; then the run row could not be finished: {message}"
    result = CycleResult(
        run_id=attempt.run_id, outcome="failed", started_at=attempt.started_at, finished_at=utc_now(),
        wall_ms=(time.perf_counter() - attempt.t0) * 1000, phases=phases, reason_code=reason_code,
        failure_phase=failure_phase, last_successful_phase=attempt.last_successful_phase, message=message,
    )
    failure = RunFailure(
        run_id=result.run_id, reason=attempt.reason, mode=attempt.mode, owner=owner_id(), started_at=result.started_at,
        finished_at=result.finished_at, reason_code=reason_code, failure_phase=failure_phase,
        last_successful_phase=attempt.last_successful_phase, phases=phases, row_started=attempt.row_started,
    )
    with anyio.CancelScope(shield=True):
        recorded = await anyio.to_thread.run_sync(recorder.record, failure)
    if not recorded:
        result.message = f"{result.message}; not recorded in rem_runs yet"
    return result


async def _run_phases(
    settings: Settings,
    stores: Stores,
    attempt: CycleAttempt,
    *,
    stop: anyio.Event,
    phases: tuple[tuple[str, Phase], ...],
    lease_owner: str,
    lock: LockStore | None,
    held_answers: HeldAnswers,
    allow_mass_retraction: bool = False,
) -> CycleResult:
    run_id = attempt.run_id
    runstate = stores.runstate
    if lock is not None:
        # We hold the lock, so any run still marked running died without finishing — unless
        # followers share the database: theirs are abandoned once silent for a lease.
        silent = settings.lease_timeout_seconds if settings.shared_extract else 0
        abandoned = await anyio.to_thread.run_sync(lambda: runstate.mark_abandoned(older_than_seconds=silent))
        for old in abandoned:
            log.warning("previous run abandoned", old_run_id=old)
    await anyio.to_thread.run_sync(lambda: runstate.start_run(run_id, reason=attempt.reason, mode=attempt.mode, owner=owner_id()))
    attempt.row_started = True
    ctx = CycleContext(
        settings=settings, stores=stores, run_id=run_id, stop=stop, lease_owner=lease_owner,
        allow_mass_retraction=allow_mass_retraction, lock=lock, held_answers=held_answers,
    )
    beats: list[Callable[[], object]] = [partial(runstate.heartbeat, run_id), ClaimStore(stores.db, owner=lease_owner, lease_seconds=settings.lease_timeout_seconds).heartbeat]
    if settings.shared_extract:  # the text claims of the extractions in progress (store.claims.TextClaimStore)
        beats.append(TextClaimStore(stores.db, owner=lease_owner, lease_seconds=settings.lease_timeout_seconds).heartbeat)
    if lock is not None:
        beats.append(partial(lock.heartbeat, CYCLE_LOCK))
    started, t0 = utc_now(), time.perf_counter()
    record = attempt.phases
    result = CycleResult(run_id=run_id, outcome="completed", started_at=started, finished_at="", wall_ms=0.0, phases=record)
    structlog.contextvars.bind_contextvars(run_id=run_id)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_heartbeat, beats, heartbeat_interval(settings.lease_timeout_seconds))
            for name, phase in phases:
                structlog.contextvars.bind_contextvars(phase=name)
                attempt.step = name
                p0 = time.perf_counter()
                try:
                    ctx.check_stop()
                    if lock is not None and name not in FOLLOWER_PHASES:
                        await _still_leading(lock, name)
                    counts = await phase(ctx)
                except PhaseError as exc:
                    record[name] = {"state": "failed", "duration_ms": _ms(p0), "error": str(exc)}
                    reason_code = _phase_reason(exc, exc.reason_code)
                    result.outcome, result.reason_code, result.failure_phase = "failed", reason_code, name
                    result.message = str(exc)
                    log.error("phase failed", reason_code=reason_code, error=str(exc))
                    break
                except CycleInterrupted:
                    record[name] = {"state": "interrupted", "duration_ms": _ms(p0)}
                    result.outcome, result.reason_code, result.failure_phase = "interrupted", "stop-requested", name
                    log.warning("cycle interrupted: stop requested")
                    break
                except anyio.get_cancelled_exc_class():
                    # The grace time ran out (or the caller gave up): the in-flight thread call
                    # finished its transaction before the cancellation got here; record and go.
                    record[name] = {"state": "interrupted", "duration_ms": _ms(p0)}
                    result.outcome, result.reason_code, result.failure_phase = "interrupted", "cancelled", name
                    log.warning("cycle interrupted: cancelled")
                    raise
                except Exception as exc:  # noqa: BLE001 - recorded, never swallowed
                    # A damaged database says what to do about it (status shows the phase's error).
                    error = damage_message(exc) or repr(exc)
                    record[name] = {"state": "failed", "duration_ms": _ms(p0), "error": error}
                    reason_code = _phase_reason(exc, "phase-error")
                    result.outcome, result.reason_code, result.failure_phase = "failed", reason_code, name
                    result.message = error
                    # The database's fault needs no traceback; anything else is a bug.
                    log.error("phase crashed", reason_code=reason_code, error=repr(exc),
                              exc_info=exc if reason_code == "phase-error" else None)
                    break
                finally:
                    if ctx.queue_error is not None and name in record:  # a phase that did not complete
                        record[name]["queue_error"] = ctx.queue_error
                record[name] = {"state": "completed", "duration_ms": _ms(p0), **counts}
                result.last_successful_phase = attempt.last_successful_phase = name
                log.info("phase completed", duration_ms=record[name]["duration_ms"])
            tg.cancel_scope.cancel()
    except Exception as exc:  # noqa: BLE001 - between two phases (a bug): the phases after it never ran
        if record.get(attempt.step, {}).get("state") != "completed":
            record[attempt.step] = {"state": "failed", "error": repr(exc)}
        result.outcome, result.reason_code, result.failure_phase = "failed", failure_reason(exc), attempt.step
        result.message = repr(exc)
        log.exception("cycle crashed between phases", reason_code=result.reason_code)
    finally:
        structlog.contextvars.unbind_contextvars("run_id", "phase")
        result.finished_at, result.wall_ms = utc_now(), (time.perf_counter() - t0) * 1000
        attempt.step, attempt.decided = "finish", result
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(
                lambda: runstate.finish_run(
                    run_id,
                    outcome=result.outcome,
                    phases=record,
                    reason_code=result.reason_code,
                    failure_phase=result.failure_phase,
                    last_successful_phase=result.last_successful_phase,
                )
            )
        attempt.result = result
    log.info("cycle finished", run_id=run_id, outcome=result.outcome, wall_ms=round(result.wall_ms, 1))
    return result


async def _still_leading(lock: LockStore, phase: str) -> None:
    """Before a single-flight phase: raise :class:`PhaseError` ``lock-lost`` when another leader
    took the database's single-flight lock over (this cycle was silent past its lease — paused,
    frozen — and that leader runs ingest, drain and finalize now). A beat the database cannot take
    at the moment (busy) proves nothing either way: the phase runs."""
    try:
        held = await anyio.to_thread.run_sync(lock.heartbeat, CYCLE_LOCK)
    except (StoreError, OSError) as exc:
        log.warning("single-flight lock not checked", error=str(exc))
        return
    if not held:
        holder = await anyio.to_thread.run_sync(lock.holder, CYCLE_LOCK)
        raise PhaseError("lock-lost", f"the database's single-flight lock was taken over ({holder or 'released'}) while this "
                                      f"cycle was silent past its lease: {phase} and the phases after it are not this cycle's")


def _phase_reason(exc: Exception, default: str) -> str:
    """A failed phase's reason code: ``default`` (the phase's own code, or ``phase-error`` for a
    crash) — but running out of file descriptors (anywhere in the exception's causes) is the
    process's state rather than the phase's fault, and says so, and a crash on a database error
    (the server dropped the connection, a lock past its timeout) is ``database-error`` — on a
    damaged file ``database-damaged`` — as anywhere else in a cycle. Pure."""
    reason = failure_reason(exc)
    if reason == "too-many-open-files" or (reason in ("database-error", "database-damaged") and default == "phase-error"):
        return reason
    return default


def heartbeat_interval(lease_timeout_seconds: float) -> float:
    """Seconds between a running cycle's heartbeats: every 5 s, more often when the lease timeout
    (after which a silent run counts as stalled) is under ``BEATS_PER_LEASE`` × 5 s. Pure."""
    return min(HEARTBEAT_SECONDS, lease_timeout_seconds / BEATS_PER_LEASE)


async def _heartbeat(beats: list[Callable[[], object]], interval: float) -> None:
    """Refresh the run's lease, its session claims' and its single-flight lock's; a missed beat
    (database busy) is logged, never fatal to the cycle."""
    while True:
        await anyio.sleep(interval)
        for beat in beats:
            try:
                await anyio.to_thread.run_sync(beat)
            except (StoreError, OSError) as exc:
                log.warning("heartbeat failed", error=str(exc))


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 1)
