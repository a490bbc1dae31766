"""Extraction of sessions: turns → units → map → reduce → fail-closed commit, with the counts a
cycle reports. Stores and the extractor are injected; nothing here reads settings or the clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Protocol

import anyio
import structlog

from config import Settings
from pipelines.extract.commit import CommitStats, GraphIndex, commit_session
from pipelines.extract.heuristic import HeuristicExtractor
from pipelines.extract.inflight import HeldAnswers, InFlight
from pipelines.extract.map import ANSWER_UNSTORED, STOPPED, UnitOutcome, map_units
from pipelines.extract.model import Extractor, WorkUnit
from pipelines.extract.reduce import reduce_session, said_texts
from pipelines.extract.units import SourceTurn, plan_units
from pipelines.lazy_edge import LazyEdgeSink, queue_superseding
from pipelines.ports import MergeRecorder, TextClaims, UnitOfWork
from pipelines.resolver import GraphResolver
from store.chroma import ChromaStore, ChromaUnavailableError, MemoryRow, TurnsHandOff
from store.claims import ClaimLostError, SessionGoneError
from store.errors import SESSION_OUTAGES, DatabaseDamagedError, damage_in, is_database_outage
from store.ids import is_valid_row_id
from store.library_log import get_logger
from store.runstate import DigestRecord

log = get_logger(__name__)


@asynccontextmanager
async def open_extractor(settings: Settings) -> AsyncIterator[Extractor]:
    """The extractor named by ``REM_EXTRACTOR``, open for the duration of the block."""
    if settings.extractor == "openai":
        from pipelines.extract.llm import OpenAIExtractor

        async with OpenAIExtractor(settings) as extractor:
            yield extractor
    else:
        yield HeuristicExtractor()


class SessionClaims(Protocol):
    """A worker's hold on the sessions it digests (:class:`store.claims.ClaimStore`)."""

    def settle(self, session_id: str) -> None:
        """Inside the session's commit transaction: drop the claim, or raise when it was lost."""
        ...

    def hold(self, session_id: str) -> None:
        """Inside a transaction recording a failed attempt: raise when the claim was lost."""
        ...


@dataclass(frozen=True)
class ExtractEnv:
    """Everything extraction works with."""

    chroma: ChromaStore
    # The graph, run state and chunk results, and the transaction a session's commit runs in.
    unit: UnitOfWork
    queue: LazyEdgeSink
    graph_index: GraphIndex
    extractor: Extractor
    semantic_types: Collection[str]
    budget_tokens: int | None
    max_attempts: int
    retry_base_seconds: float
    retry_max_seconds: float
    concurrency: int
    run_id: str | None
    now: datetime
    # Identity resolution beyond exact names (pipelines.resolver.GraphResolver) and where its
    # merges are recorded; without them the commit's exact matcher is used and nothing is recorded.
    resolver: GraphResolver | None = None
    merges: MergeRecorder | None = None
    # Which of some memory ids were forgotten (``rem-cycle forget --memory``): never extracted again.
    forgotten_memories: Callable[[Sequence[str]], set[str]] = lambda ids: set()
    # The memory ids the graph knows for a session (ingest's memory index): its turns are read from
    # Chroma by id, which costs the same whatever the collection's size. None: read by ``sessionId``.
    session_memory_ids: Callable[[str], Sequence[str]] | None = None
    # The claims of a worker sharing the database with others (store.claims.ClaimStore): a session
    # commits only while its claim is this worker's, and the claim goes in the same transaction.
    claims: SessionClaims | None = None
    # The texts the workers sharing the database are asking the model about (store.claims.
    # TextClaimStore): a chunk whose words another worker is extracting waits for its answer.
    # None: no other worker extracts on this database (REM_SHARED_EXTRACT off).
    text_claims: TextClaims | None = None
    # Paid answers the database refused to store, stored at the next attempt of their words instead
    # of asking again (pipelines/extract/inflight.py). None: each session's map its own.
    held_answers: HeldAnswers | None = None
    # The turns this cycle's ingest phase read of the sessions it synced, while still Chroma's
    # (store.chroma.TurnsHandOff). None: every session's turns are read from Chroma.
    turns: TurnsHandOff | None = None


@dataclass(slots=True)
class ExtractStats(CommitStats):
    """Counts of an extract phase (``--once --json`` shows them); the commit counts are summed
    over its sessions."""

    sessions_attempted: int = 0
    sessions_digested: int = 0
    sessions_failed: int = 0
    sessions_deferred: int = 0
    sessions_backing_off: int = 0  # of the deferred: those whose chunks back off (no call made)
    sessions_undigestible: int = 0
    sessions_claim_lost: int = 0
    chunks_total: int = 0
    chunks_ok: int = 0
    chunks_reused: int = 0
    chunks_empty: int = 0
    chunks_failed: int = 0
    chunks_deferred: int = 0
    # chunks asked as halves because they did not fit the model: an answer overran the output limit, or
    # the server's context did not hold the prompt (pipelines/extract/map.py)
    chunks_halved: int = 0
    # chunks whose text claim the database refused (REM_SHARED_EXTRACT): extracted without one
    chunks_claim_failed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    ungrounded_evidence: int = 0
    invalid_turn_refs: int = 0
    items_rejected: int = 0
    rejected_reasons: dict[str, int] = field(default_factory=dict)
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    failed_chunks: list[str] = field(default_factory=list)
    interrupted: bool = False

    def count_outcomes(self, outcomes: Sequence[UnitOutcome]) -> None:
        self.chunks_total += len(outcomes)
        for outcome in outcomes:
            self.chunks_claim_failed += outcome.claim_error is not None
            self.chunks_halved += outcome.halved
            self.tokens_in += outcome.tokens_in
            self.tokens_out += outcome.tokens_out
            if outcome.status == "ok":
                self.chunks_ok += 1
            elif outcome.status == "reused":
                self.chunks_reused += 1
            elif outcome.status == "empty":
                self.chunks_empty += 1
            elif outcome.status == "deferred":
                self.chunks_deferred += 1
            else:
                self.chunks_failed += 1
                kind = outcome.error_kind or "provider-error"
                self.failures_by_kind[kind] = self.failures_by_kind.get(kind, 0) + 1
                if len(self.failed_chunks) < 50:
                    self.failed_chunks.append(outcome.unit.unit_id)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_turns(rows: Sequence[MemoryRow]) -> list[SourceTurn]:
    """A session's memory rows (already in turn order) as extractor input; rows whose id cannot be
    a graph id are left out (ingest reported them)."""
    return [
        SourceTurn(row.id, row.document, row.metadata.get("role") if isinstance(row.metadata.get("role"), str) else None)
        for row in rows
        if is_valid_row_id(row.id)
    ]


def turn_times(rows: Sequence[MemoryRow], units: Sequence[WorkUnit]) -> dict[str, str]:
    """When each turn (``memory:<id>``) was said, and each chunk (its earliest turn): the
    ``observed_at`` of the provenance points extracted from them."""
    times = {f"memory:{row.id}": row.created_at for row in rows if row.created_at}
    for unit in units:
        said = [times[f"memory:{t.memory_id}"] for t in unit.turns if f"memory:{t.memory_id}" in times]
        if said:
            times[unit.unit_id] = min(said)
    return times


async def extract_session(
    record: DigestRecord,
    env: ExtractEnv,
    stats: ExtractStats,
    limiter: anyio.CapacityLimiter,
    *,
    commit_turn: Callable[[], Awaitable[None]] | None = None,
    in_flight: InFlight | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    damaged: list[DatabaseDamagedError] | None = None,
) -> str:
    """Extract one session and commit it if every chunk succeeded; returns ``digested``,
    ``failed``, ``deferred`` (no call: its chunks back off, or waited on extractions of their texts
    that found the model server out), ``outage`` (deferred too: its calls found the model server
    out, or it made calls and a chunk waited on an extraction that found it out, or the database
    failed under its work: :data:`store.errors.SESSION_OUTAGES`), ``undigestible`` or
    ``claim-lost``. A failure is recorded, never raised (except Chroma being unreachable, which
    fails the whole phase, and the database's file damaged: :class:`DatabaseDamagedError`, which
    :func:`extract_sessions` raises once the sessions in flight are done). ``commit_turn`` is
    awaited just before the commit (:func:`extract_sessions` uses it to commit in session order). ``in_flight``: the texts the
    phase's other sessions are extracting (:mod:`pipelines.extract.inflight`).
    ``should_stop``: whether the cycle is stopping (a chunk waiting on another worker leaves).
    ``damaged``: the phase's damaged database file errors (:func:`map_units`): once one is met, no
    chunk of this session starts a call."""
    sid = record.session_id
    try:
        known = await anyio.to_thread.run_sync(env.session_memory_ids, sid) if env.session_memory_ids else None
        source = env.chroma if env.turns is None else env.turns
        rows = await source.memories_for_session(sid, memory_ids=known or None)
        forgotten = await anyio.to_thread.run_sync(env.forgotten_memories, [r.id for r in rows])
        rows = [r for r in rows if r.id not in forgotten]
        units = plan_units(sid, source_turns(rows), budget_tokens=env.budget_tokens)
        outcomes = await map_units(
            units, extractor=env.extractor, store=env.unit.chunks, semantic_types=env.semantic_types,
            limiter=limiter, now=env.now, run_id=env.run_id, retry_base_seconds=env.retry_base_seconds,
            retry_max_seconds=env.retry_max_seconds, in_flight=in_flight, text_claims=env.text_claims,
            should_stop=should_stop, held=env.held_answers, damaged=damaged,
        )
        _count_outcomes(stats, outcomes)
        failed = [o for o in outcomes if o.extraction is None]
        if failed and all(o.status == "deferred" or o.outage for o in failed):
            # Nothing below writes about the session, so nothing would find it forgotten meanwhile:
            # its answers and copies just stored (names, quotes) must not outlive the forget.
            if not await anyio.to_thread.run_sync(env.unit.runstate.get_digests, [sid]):
                return await _forgotten_meanwhile(sid, env)
        if failed:
            why = ("the database refused a paid answer" if any(o.error_kind == ANSWER_UNSTORED for o in failed)
                   else "the model server is out" if any(o.outage for o in failed)
                   else "the cycle is stopping" if any(o.error_kind == STOPPED for o in failed) else "chunks backing off")
            if all(o.status == "deferred" for o in failed) and not any(o.status == "ok" for o in outcomes):
                # No call made: its chunks back off, or waited on extractions of their texts that
                # found the model server out (pipelines/extract/inflight.py) or on another worker's
                # while the cycle was stopping. A session with a chunk answered by its own call (a
                # failed call is in ``failed``) made one: the outage path.
                log.info("session deferred: no call made", reason=why, session_id=sid, chunks=[o.unit.unit_id for o in failed])
                return "deferred"
            if all(o.status == "deferred" or o.outage for o in failed):
                # The model server unreachable or refusing all work, or the database refusing a paid
                # answer: an outage charges no attempt (it must never make a session undigestible);
                # the chunks' model failures are recorded, with their backoff (a chunk that waited on
                # another's extraction of its text, which ended so or was left as the cycle stopped,
                # made no call and records nothing; an answer the database refused records nothing).
                log.info("session deferred", reason=why, session_id=sid, chunks=[o.unit.unit_id for o in failed])
                return "outage"
            # The chunk the session is charged for: a failure of its own, not an outage beside it.
            first = next(o for o in failed if o.status == "failed" and not o.outage)
            return await _record_failure(
                record, env, f"{len(failed)}/{len(outcomes)} chunks failed; {first.unit.unit_id}: {first.error_kind}: {first.error}"
            )
        reduced = reduce_session(sid, [o.extraction for o in outcomes if o.extraction is not None])
        keep = [u.content_hash for u in units]

        def on_commit() -> None:
            if env.claims is not None:
                env.claims.settle(sid)
            env.unit.runstate.mark_digested(sid, record.input_revision, env.run_id or "-")
            env.unit.chunks.prune_session(sid, keep)
            env.unit.verdicts.settle(sid)  # used: the same question is not met again (store/verdicts.py)

        if commit_turn is not None:
            await commit_turn()
        identity: dict[str, Any] = {}
        if env.resolver is not None:
            # The auditor reads where the session says each node: its turns' texts, in hand here.
            await env.resolver.prepare(reduced.nodes, session=sid, said=lambda: said_texts(reduced, {f"memory:{row.id}": row.document for row in rows}))
            identity["matcher"] = env.resolver
        # A session extracted before may have queued these lines already: its new ones stand in
        # for them. A first extraction has none to look for, and does not read the queue.
        queue_append = partial(queue_superseding, env.queue) if record.committed else env.queue.append
        committed = await anyio.to_thread.run_sync(
            partial(
                commit_session, reduced, unit=env.unit, graph_index=env.graph_index, on_commit=on_commit,
                queue_append=queue_append, merges=env.merges, observed_at=turn_times(rows, units),
                on_begin=env.unit.runstate.begin_commit, **identity,
            )
        )
        if (committed.nodes_removed or committed.nodes_folded) and env.resolver is not None:
            env.resolver.reset()  # its index still knows the removed nodes
    except ChromaUnavailableError:
        raise
    except SessionGoneError:
        return await _forgotten_meanwhile(sid, env)
    except ClaimLostError:
        # Another worker took the session over after this one's lease ran out: it is theirs now.
        log.warning("session not committed: its claim was taken over", session_id=sid)
        return "claim-lost"
    except Exception as exc:  # noqa: BLE001 - one bad session must not stop the cycle
        if (damage := damage_in(exc)) is not None:
            raise damage  # no session's fault, and no later cycle mends it: charged nothing
        if is_database_outage(exc, SESSION_OUTAGES):
            return _deferred_for_the_database(sid, exc)
        log.exception("session extraction crashed", session_id=sid)
        return await _record_failure(record, env, f"error: {exc!r}"[:500])
    stats.add(committed)
    stats.ungrounded_evidence += reduced.ungrounded
    stats.invalid_turn_refs += reduced.invalid_turn_refs
    stats.items_rejected += reduced.dropped_items
    for reason, count in reduced.rejected.items():
        stats.rejected_reasons[reason] = stats.rejected_reasons.get(reason, 0) + count
    if reduced.dropped_items:
        log.info("extracted items rejected", session_id=sid, rejected=reduced.rejected)
    return "digested"


def _count_outcomes(stats: ExtractStats, outcomes: Sequence[UnitOutcome]) -> None:
    """Count a session's outcomes into the phase's ``stats``, saying once a phase that the database
    refused text claims: it is the database's state, not a chunk's, and would repeat per chunk."""
    first = not stats.chunks_claim_failed
    stats.count_outcomes(outcomes)
    if first and stats.chunks_claim_failed:
        error = next(o.claim_error for o in outcomes if o.claim_error is not None)
        log.warning("text claims refused by the database: chunks extracted without them, as if no other worker ran "
                    "(paid twice at worst, nothing lost; said once a phase, counted in chunks_claim_failed)",
                    chunks=stats.chunks_claim_failed, error=error)


def _deferred_for_the_database(session_id: str, exc: BaseException, *, failure: str | None = None) -> str:
    """``outage`` for a session whose work the database cut (:data:`store.errors.SESSION_OUTAGES`:
    its connection dropped, the server restarted, locked past the timeout, its disk full, a statement
    stopped at the statement timeout): no session's fault, so charged nothing, as a model-server
    outage. What its transaction wrote was rolled back; its answers stored before (or held:
    pipelines/extract/map.py) are not paid for again. ``failure``:
    the session's own failure, which the database refused to record (tried again next time)."""
    log.warning("session deferred", reason="the database failed under it", session_id=session_id, error=str(exc)[:300],
                **({"failure_not_recorded": failure[:300]} if failure else {}))
    return "outage"


async def _forgotten_meanwhile(session_id: str, env: ExtractEnv) -> str:
    """The session was forgotten while this worker extracted it: nothing was committed, and the
    chunk results its extraction stored (names, quotes) go too, as ``forget`` took them."""
    await anyio.to_thread.run_sync(env.unit.chunks.prune_session, session_id, ())
    log.warning("session not committed: it was forgotten while it was extracted", session_id=session_id)
    return "claim-lost"


async def _record_failure(record: DigestRecord, env: ExtractEnv, reason: str) -> str:
    def write() -> str:
        # Only while the claim is this worker's: a worker paused past its lease must not count a
        # failure against (or undo the digest of) a session another worker took over.
        with env.unit.transaction():
            if env.claims is not None:
                env.claims.hold(record.session_id)
            return env.unit.runstate.record_failure(
                record.session_id, reason=reason, run_id=env.run_id or "-", max_attempts=env.max_attempts
            )

    try:
        state = await anyio.to_thread.run_sync(write)
    except SessionGoneError:
        return await _forgotten_meanwhile(record.session_id, env)
    except ClaimLostError:
        log.warning("session failure not recorded: its claim was taken over", session_id=record.session_id, reason=reason[:300])
        return "claim-lost"
    except DatabaseDamagedError:
        raise  # as in extract_session: the phase ends with it
    except SESSION_OUTAGES as exc:
        # Raised, it would end the phase and cancel the other sessions' calls in flight (paid, lost).
        return _deferred_for_the_database(record.session_id, exc, failure=reason)
    log.warning("session not digested", session_id=record.session_id, state=state, reason=reason[:300])
    return "undigestible" if state == "undigestible" else "failed"


async def extract_sessions(
    records: Sequence[DigestRecord],
    env: ExtractEnv,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    stats: ExtractStats | None = None,
) -> ExtractStats:
    """Extract sessions, several at a time so that small sessions keep the model busy; at most
    ``env.concurrency`` extractor calls run at once across all of them. A stop request lets the
    sessions already started finish and starts no new one. The counts are added to ``stats`` (a
    new one when None), which is returned.

    Sessions *commit* in the order of ``records`` (oldest first) whatever order their extractions
    finish in, so an interrupted phase leaves a prefix committed. The graph does not depend on the
    commit order anyway (least id survives a link, least spelling names a node: see
    :mod:`pipelines.extract.commit`) — which is what lets several workers commit side by side.

    A chunk whose words another session of the phase is extracting waits for that answer instead
    of paying for it again (:mod:`pipelines.extract.inflight`). Its session keeps its slot while it
    waits: the extraction it waits for needs a model-call slot only, never a session slot or a
    commit turn, so it ends whatever the waiting sessions hold.

    A damaged database file (:class:`DatabaseDamagedError`) starts no more sessions: those in
    flight finish (their calls are paid), then it is raised, no session charged for it."""
    stats = stats if stats is not None else ExtractStats()
    in_flight = InFlight()  # these sessions' only (one claim batch of the cycle): nothing outlives it
    calls = anyio.CapacityLimiter(env.concurrency)
    sessions = anyio.CapacityLimiter(env.concurrency)
    tally = {"digested": "sessions_digested", "failed": "sessions_failed", "deferred": "sessions_deferred",
             "outage": "sessions_deferred", "undigestible": "sessions_undigestible", "claim-lost": "sessions_claim_lost"}

    # passed[i]: every session up to i has committed or given up.
    passed = [anyio.Event() for _ in records]
    damaged: list[DatabaseDamagedError] = []

    async def one(index: int, record: DigestRecord) -> None:
        holding = True

        async def turn() -> None:
            nonlocal holding
            if holding:  # waiting for the turn takes no extraction slot
                holding = False
                sessions.release_on_behalf_of(record)
            if index:
                await passed[index - 1].wait()

        try:
            if should_stop():
                stats.interrupted = True
            elif not damaged:
                stats.sessions_attempted += 1
                # Every log line of this session's extraction (extractor retries, culled edges …)
                # carries its id; each task has its own context, so concurrent sessions do not mix.
                with structlog.contextvars.bound_contextvars(session_id=record.session_id):
                    try:
                        result = await extract_session(record, env, stats, calls, commit_turn=turn, in_flight=in_flight,
                                                       should_stop=should_stop, damaged=damaged)
                    except DatabaseDamagedError as exc:
                        damaged.append(exc)
                        result = "outage"  # counted deferred: charged nothing
                    log.debug("session extracted", result=result)
                setattr(stats, tally[result], getattr(stats, tally[result]) + 1)
                if result == "undigestible":
                    stats.sessions_failed += 1
                if result == "deferred":
                    stats.sessions_backing_off += 1
            await turn()  # a session that committed nothing passes the turn on in order too
        finally:
            if holding:
                sessions.release_on_behalf_of(record)
            passed[index].set()

    async with anyio.create_task_group() as tg:
        for index, record in enumerate(records):
            await sessions.acquire_on_behalf_of(record)
            if should_stop() or damaged:
                sessions.release_on_behalf_of(record)
                stats.interrupted = not damaged
                break
            tg.start_soon(one, index, record)
    if damaged:
        raise damaged[0]
    return stats
