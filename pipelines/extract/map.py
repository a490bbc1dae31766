"""Map: every work unit of a session through the extractor, at most N calls at a time.

A unit whose content hash already has an ``ok`` row for this extractor fingerprint is reused (no
model call); so is a unit whose *text* hash has one in any session (a forked, resumed or rewritten
conversation: the same turns under new memory ids), its evidence moved to the unit's memories by
place and the answer copied into the unit's own row. A unit whose last failure is still backing
off is deferred (no call this cycle); every other unit is extracted, validated, and its outcome
written to ``chunk_results`` (not a request that never reached the server: no try; a paid answer
the database refuses is tried once more, then held in the process for the next attempt of its
words and the unit is an outage: :data:`ANSWER_UNSTORED`)
— unless a unit of the same text is being extracted in the same phase (another session's, or this
one's): then it waits for that answer and reuses it the same way (:mod:`pipelines.extract.inflight`); or by another worker on the same database
(:class:`pipelines.ports.TextClaims`): then it waits for that worker's answer, polling — unless its
cycle is stopping: then it ends deferred, with no call.

A unit whose answer overran the model's output limit (``truncated-output``), or whose prompt did
not fit the server's context (``context-overflow``: refused, or cut to the window)
— this cycle, or as its last stored failure — is mapped again as its two halves
(:func:`pipelines.extract.units.halve_unit`, recursively), and their answers joined are stored as
the unit's own answer: the words that did not fit are never asked whole again, and no later cycle
asks the halves again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Literal

import anyio

from pipelines.extract.inflight import HeldAnswer, HeldAnswers, InFlight, TextKey
from pipelines.extract.model import (
    EMPTY_ANSWER,
    ChunkExtraction,
    ExtractionFailure,
    Extractor,
    WorkUnit,
    answer_moved_to,
    joined_answer,
    validate_extraction,
)
from pipelines.extract.units import MAX_PROMPT_HALVINGS, SMALLEST_UNFIT_TOKENS, halve_unit, unit_tokens
from pipelines.ports import ChunkResults, TextClaims
from store.chunks import AnswerCopy, ChunkResult
from store.errors import DatabaseDamagedError, StoreError
from store.library_log import get_logger

log = get_logger(__name__)

OUTCOMES = ("ok", "reused", "empty", "failed", "deferred")

# The ``error_kind`` of a unit deferred because its cycle was stopping while it waited for another
# worker's extraction of its words: nothing to finish, so it leaves at once (no call, nothing charged).
STOPPED = "stopped"

# A unit whose words another worker is asking the model about asks the database again after this
# long, doubling each time up to the cap: an answer of a few seconds is picked up within a fraction
# of its time, and a long wait costs a worker one read a second.
CLAIM_POLL_FIRST_SECONDS = 0.05
CLAIM_POLL_MAX_SECONDS = 1.0

# The ``error_kind`` of a unit whose paid answer the database refused to store, twice: an outage of
# the database (no chunk's fault), so its session is deferred and charged nothing.
ANSWER_UNSTORED = "answer-unstored"
# A paid answer the database refuses is stored once more after this pause: a connection the server
# dropped is replaced on the next statement, and a lock or restart of a second is waited out; past
# it, the answer is held in the process (HeldAnswers) for the next attempt of its words.
STORE_RETRY_SECONDS = 1.0

# The failure kinds whose unit is asked again as two halves: an answer that hit the output limit,
# and a prompt the server's context did not hold (refused, or cut).
OVERFLOWED = "truncated-output"
UNFIT = "context-overflow"


@dataclass(frozen=True, slots=True)
class UnitOutcome:
    """What happened to one unit this cycle. ``extraction`` is set for ok / reused / empty."""

    unit: WorkUnit
    status: str
    extraction: ChunkExtraction | None = None
    error_kind: str | None = None
    error: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    # failed because the model server could not be reached or refused all work, or the database
    # refused to store its paid answer (:data:`ANSWER_UNSTORED`): an outage (also a unit deferred
    # because the extraction of its text it waited on ended so)
    outage: bool = False
    # mapped as its halves because it did not fit the model (its answer overran the output limit,
    # or its prompt the server's context), this cycle or before
    halved: bool = False
    # deferred: when its backoff ends (run-state timestamp)
    retry_at: str | None = None
    # the database refused this unit's text claim (taking it: extracted without one, as if no other
    # worker ran; or landing it: the row stays to the phase's end): the error, said once a phase
    claim_error: str | None = None


def chunk_backoff(attempts: int, *, base_seconds: float, max_seconds: float) -> timedelta:
    """Wait before trying a chunk again after ``attempts`` failures: ``base_seconds``, doubling with
    every further failure, at most ``max_seconds`` (``REM_CHUNK_RETRY_BASE_SECONDS`` and
    ``REM_CHUNK_RETRY_MAX_SECONDS``).

    >>> chunk_backoff(3, base_seconds=10, max_seconds=100), chunk_backoff(5, base_seconds=10, max_seconds=100)
    (datetime.timedelta(seconds=40), datetime.timedelta(seconds=100))
    """
    # 2**64 × any positive base passes any cap: stop doubling there (a huge count cannot overflow).
    return timedelta(seconds=min(max_seconds, base_seconds * 2.0 ** min(max(0, attempts - 1), 64)))


def iso(moment: datetime) -> str:
    """The run-state timestamp format (UTC, milliseconds, ``Z``)."""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def map_units(
    units: Sequence[WorkUnit],
    *,
    extractor: Extractor,
    store: ChunkResults,
    semantic_types: Collection[str],
    limiter: anyio.CapacityLimiter,
    now: datetime,
    run_id: str | None,
    retry_base_seconds: float,
    retry_max_seconds: float,
    in_flight: InFlight | None = None,
    text_claims: TextClaims | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    held: HeldAnswers | None = None,
    damaged: list[DatabaseDamagedError] | None = None,
) -> list[UnitOutcome]:
    """Outcomes in unit order. Never raises for a unit's failure: it is an outcome; a failed unit is
    not tried again before :func:`chunk_backoff` of its failures (``retry_*_seconds``) has passed.
    ``in_flight``: the phase's texts being extracted, shared by the sessions it maps side by side
    (a new one, this map's alone, when None). ``text_claims``: the texts the workers sharing the
    database are extracting (None: no other worker extracts on it). ``should_stop``: whether the
    cycle is stopping — a unit waiting for another worker's answer then ends deferred (:data:`STOPPED`).
    ``held``: the paid answers the database refused to store, stored instead of asking again (a new
    one, this map's alone, when None; the daemon keeps one for its life). ``damaged``: the damaged
    database file errors met in the phase (its other sessions' maps too), to which this map adds
    the ones its units meet: no unit starts a call once it holds one (a new one when None). A
    damaged file met by this map's units is raised once its other units end. A unit whose answer
    overran the output limit, or whose prompt did not fit, is mapped as its halves (see the module
    docstring): its outcome is their answers joined (``halved``), else the failure of a half, with
    every call's cost."""
    in_flight = in_flight if in_flight is not None else InFlight()
    held = held if held is not None else HeldAnswers()
    fingerprint = extractor.fingerprint
    known = await anyio.to_thread.run_sync(store.get_many, [u.content_hash for u in units], fingerprint)
    unanswered = [u.text_hash for u in units if not u.is_empty and not _answered(known.get(u.content_hash))]
    # Only units without an answer of their own look further: a session extracted again for a
    # turn it gained makes this one indexed read for that turn's chunk, none for the rest.
    elsewhere = await anyio.to_thread.run_sync(store.answers_by_text, unanswered, fingerprint) if unanswered else {}
    outcomes: list[UnitOutcome | None] = [None] * len(units)
    copies: list[AnswerCopy] = []
    todo: list[int] = []
    # units mapped as their halves: those whose last answer overran the output limit (no call on
    # the whole, whatever its backoff), then those whose answer overruns it in this map
    halving: dict[int, tuple[tuple[WorkUnit, WorkUnit], UnitOutcome | None]] = {}
    for index, unit in enumerate(units):
        row = known.get(unit.content_hash)
        moved = None if _answered(row) else _moved(elsewhere.get(unit.text_hash), unit)
        if unit.is_empty:
            outcomes[index] = UnitOutcome(unit, "empty", ChunkExtraction(unit_id=unit.unit_id))
        elif row is not None and row.status == "ok" and row.payload is not None:
            # Under the unit's id now: the same text may sit at another place of the session (a
            # turn before it forgotten or moved away), and its points must name the chunk it is.
            reused = replace(ChunkExtraction.from_payload(row.payload), unit_id=unit.unit_id)
            outcomes[index] = UnitOutcome(unit, "reused", reused)
        elif moved is not None:
            # The session's own row from now on: a forget of the session it came from leaves it.
            copies.append(_copy(unit, moved, fingerprint, run_id))
            outcomes[index] = UnitOutcome(unit, "reused", moved)
        elif row is not None and row.status == "failed" and (halves := _halves(unit, row.error_kind, row.error, row.tokens_out)):
            halving[index] = (halves, None)
        elif row is not None and row.status == "failed" and row.next_attempt_at and row.next_attempt_at > iso(now):
            outcomes[index] = UnitOutcome(unit, "deferred", error_kind=row.error_kind, error=row.error,
                                          retry_at=row.next_attempt_at)
        else:
            todo.append(index)

    # A damaged database file met by one unit's store: raised once the others end, not at once —
    # cancelling them would throw away the answers of calls already sent (paid), which are held
    # for the run after the restore instead; a unit not yet in its call makes none.
    damaged = damaged if damaged is not None else []
    met: list[DatabaseDamagedError] = []

    async def run(index: int) -> None:
        extract = partial(
            _extract_one, units[index], extractor=extractor, store=store, semantic_types=semantic_types, limiter=limiter,
            fingerprint=fingerprint, now=now, run_id=run_id, failed_before=_failures(known.get(units[index].content_hash)),
            retry_base_seconds=retry_base_seconds, retry_max_seconds=retry_max_seconds, held=held, damaged=damaged,
        )
        try:
            outcomes[index] = await _extract_once(units[index], extract, in_flight=in_flight, text_claims=text_claims,
                                                  store=store, fingerprint=fingerprint, run_id=run_id, should_stop=should_stop)
        except DatabaseDamagedError as exc:
            met.append(exc)
            damaged.append(exc)

    await anyio.to_thread.run_sync(store.record_copies, copies)
    async with anyio.create_task_group() as tg:
        for index in todo:
            tg.start_soon(run, index)
    if met:
        raise met[0]
    for index in todo:
        outcome = outcomes[index]
        if outcome is not None and outcome.status == "failed" and not outcome.outage and (
            halves := _halves(outcome.unit, outcome.error_kind, outcome.error, outcome.tokens_out)
        ):
            halving[index] = (halves, outcome)
    if halving:
        again = partial(
            map_units, extractor=extractor, store=store, semantic_types=semantic_types, limiter=limiter, now=now,
            run_id=run_id, retry_base_seconds=retry_base_seconds, retry_max_seconds=retry_max_seconds,
            in_flight=in_flight, text_claims=text_claims, should_stop=should_stop, held=held, damaged=damaged,
        )

        async def halve(index: int) -> None:
            halves, overflow = halving[index]
            if overflow is not None:
                log.info("chunk did not fit the model: asking its halves", chunk_id=units[index].unit_id,
                         kind=overflow.error_kind, tokens_in=overflow.tokens_in, tokens_out=overflow.tokens_out)
            try:
                outcomes[index] = await _joined(units[index], overflow, await again(list(halves)), store=store, held=held,
                                                fingerprint=fingerprint, run_id=run_id, now=now)
            except DatabaseDamagedError as exc:  # as above: the other units' calls end first
                met.append(exc)

        async with anyio.create_task_group() as tg:
            for index in halving:
                tg.start_soon(halve, index)
        if met:
            raise met[0]
    return [o for o in outcomes if o is not None]


def _halves(unit: WorkUnit, kind: str | None, error: str | None, tokens_out: int) -> tuple[WorkUnit, WorkUnit] | None:
    """The halves to ask instead of ``unit``, whose call failed ``kind`` (``error``) with an answer
    of ``tokens_out``, or ``None``: an answer that overran the output limit (unless the unit's
    words are no more than that answer: a loop, :func:`halve_unit`), or a prompt the server's
    context did not hold — refused, or cut (:func:`pipelines.extract.model.prompt_cut`), not an
    :data:`EMPTY_ANSWER` — when the unit is larger than :data:`SMALLEST_UNFIT_TOKENS`."""
    if kind == OVERFLOWED:
        return halve_unit(unit, answer_tokens=tokens_out)
    if kind == UNFIT and error != EMPTY_ANSWER and unit_tokens(unit) > SMALLEST_UNFIT_TOKENS:
        return halve_unit(unit, max_halvings=MAX_PROMPT_HALVINGS)
    return None


async def _joined(
    unit: WorkUnit,
    overflow: UnitOutcome | None,
    halves: Sequence[UnitOutcome],
    *,
    store: ChunkResults,
    held: HeldAnswers,
    fingerprint: str,
    run_id: str | None,
    now: datetime,
) -> UnitOutcome:
    """``unit``'s outcome from its halves' (``overflow``: its own call of this map, which did not
    fit the model): their answers joined (:func:`joined_answer`) and stored as the
    unit's — ``ok`` when a call of this map paid for part of it, else ``reused`` — or, when a half
    has no answer, that half's outcome (a failure of its own before an outage or a wait: what the
    session is charged for), each with what every call of the unit cost."""
    spent = [*halves, *([overflow] if overflow is not None else [])]
    tokens_in, tokens_out = sum(o.tokens_in for o in spent), sum(o.tokens_out for o in spent)
    latency = round(sum(o.latency_ms for o in spent), 1)
    unanswered = [o for o in halves if o.extraction is None]
    if unanswered:
        first = next((o for o in unanswered if o.status == "failed" and not o.outage), unanswered[0])
        return replace(first, tokens_in=tokens_in, tokens_out=tokens_out, latency_ms=latency, halved=True)
    answer = joined_answer(unit, [o.extraction for o in halves if o.extraction is not None])
    paid = HeldAnswer(answer, unit.session_id, unit.memory_ids, tokens_in, tokens_out, latency, now)
    called = overflow is not None or any(o.status == "ok" for o in halves)
    stored = await _stored(unit, answer, paid, store=store, held=held, fingerprint=fingerprint, run_id=run_id, called=called)
    return replace(stored, halved=True)


def _answered(row: ChunkResult | None) -> bool:
    return row is not None and row.status == "ok" and row.payload is not None


def _moved(row: ChunkResult | None, unit: WorkUnit) -> ChunkExtraction | None:
    """The answer of ``row`` (another unit of the same text hash) as ``unit``'s, if it moves."""
    if row is None or row.payload is None or row.memory_ids is None:
        return None
    return answer_moved_to(ChunkExtraction.from_payload(row.payload), unit, row.memory_ids, session_id=row.session_id)


def _copy(unit: WorkUnit, moved: ChunkExtraction, fingerprint: str, run_id: str | None) -> AnswerCopy:
    """``unit``'s own row for an answer moved to it from another unit of its text."""
    return AnswerCopy(unit.session_id, unit.unit_id, unit.content_hash, unit.text_hash, unit.memory_ids, fingerprint,
                      moved.to_payload(), run_id)


async def _extract_once(
    unit: WorkUnit,
    extract: Callable[[], Awaitable[UnitOutcome]],
    *,
    in_flight: InFlight,
    text_claims: TextClaims | None,
    store: ChunkResults,
    fingerprint: str,
    run_id: str | None,
    should_stop: Callable[[], bool],
) -> UnitOutcome:
    """``extract()`` — unless a unit of the same text is being extracted in this phase: then, once
    that extraction has landed with an answer, the answer moved to ``unit`` (no model call). A
    flight that landed in an outage ends ``unit`` as an outage too (deferred, nothing recorded or
    charged, no call): the server that refused the flight would refuse this unit's call, after the
    same retries and backoff, once per waiter. A flight that landed without an answer for another
    reason is claimed again by the first waiter, which extracts the text itself: the failure may be
    that request's alone (a malformed, truncated or lost answer; the prompt names the session), and
    copying it would charge this session an attempt it never made. Waiting holds no model-call
    slot (``extract`` takes one only around its call).

    The unit whose claim is granted in this phase then claims the text among the workers sharing
    the database (``text_claims``): while another worker holds it, it waits the same way
    (:func:`_claim_among_workers`), and the units of this phase wait on it — or, once the cycle is
    stopping, ends deferred (:data:`STOPPED`: no call, nothing recorded). A database that refuses
    the claim leaves the unit to extract without one, as if no other worker ran (it may be paid
    twice; nothing is lost, nothing charged): ``claim_error`` says so."""
    key = (fingerprint, unit.text_hash)
    while (flight := in_flight.claim(key)) is not None:
        await flight.landed.wait()
        if flight.outage is not None:
            kind, error = flight.outage
            return UnitOutcome(unit, "deferred", error_kind=kind, error=error, outage=True)
        if flight.answered:
            # None: the answer went with its session (forgotten meanwhile), or names it: this unit pays
            return await _reused(unit, store=store, fingerprint=fingerprint, run_id=run_id) or await extract()
    answered, outage, claim_error = False, None, None
    try:
        claim: Literal["mine", "answered", "stopped", "unclaimed"] = "unclaimed"
        if text_claims is not None:
            try:
                claim = await _claim_among_workers(key, text_claims, should_stop=should_stop)
            except StoreError as exc:
                claim_error = str(exc)
        if claim == "stopped":
            return UnitOutcome(unit, "deferred", error_kind=STOPPED, error="the cycle stopped while another worker extracted its words")
        if claim == "answered" and (reused := await _reused(unit, store=store, fingerprint=fingerprint, run_id=run_id)):
            answered = True
            return reused
        try:
            outcome = await extract()
        finally:
            if claim == "mine" and text_claims is not None:
                claim_error = await _land_among_workers(key, text_claims)
        # ``reused`` from ``extract()``: an answer held since an earlier attempt, stored now (no call)
        answered = outcome.status in ("ok", "reused")
        if outcome.outage:
            outage = (outcome.error_kind, outcome.error)
        return replace(outcome, claim_error=claim_error) if claim_error else outcome
    finally:  # also when the extraction raised or was cancelled: no waiter is left waiting
        in_flight.land(key, answered=answered, outage=outage)


async def _reused(unit: WorkUnit, *, store: ChunkResults, fingerprint: str, run_id: str | None) -> UnitOutcome | None:
    """The stored answer of ``unit``'s text moved to ``unit`` and copied into its own row; None when
    there is none that moves (:func:`_moved`)."""
    found = await anyio.to_thread.run_sync(store.answers_by_text, [unit.text_hash], fingerprint)
    moved = _moved(found.get(unit.text_hash), unit)
    if moved is None:
        return None
    await anyio.to_thread.run_sync(store.record_copies, [_copy(unit, moved, fingerprint, run_id)])
    return UnitOutcome(unit, "reused", moved)


async def _claim_among_workers(
    key: TextKey, text_claims: TextClaims, *, should_stop: Callable[[], bool]
) -> Literal["mine", "answered", "stopped"]:
    """Claim ``key``'s text among the workers of the database: ``mine`` (extract it, then
    :func:`_land_among_workers`), ``answered`` (an answer of it is stored), or ``stopped`` (the
    cycle is stopping while another worker holds it). While another worker holds the claim, ask
    again every :data:`CLAIM_POLL_FIRST_SECONDS` doubling to :data:`CLAIM_POLL_MAX_SECONDS`,
    holding no model-call slot: its holder lands it (answered or not) when its call ends, and a
    holder that died or stalled past its lease is taken over, so the wait ends. Raises the
    :class:`StoreError` of a database that cannot take the claim."""
    pause = CLAIM_POLL_FIRST_SECONDS
    while (state := await anyio.to_thread.run_sync(text_claims.claim, *key)) == "held":
        if should_stop():  # this unit has nothing to finish: waiting on would hold the stop up
            return "stopped"
        if pause == CLAIM_POLL_FIRST_SECONDS:
            log.info("chunk waits for another worker's extraction of its words", text_hash=key[1])
        await anyio.sleep(pause)
        pause = min(2 * pause, CLAIM_POLL_MAX_SECONDS)
    return state


async def _land_among_workers(key: TextKey, text_claims: TextClaims) -> str | None:
    """Delete this worker's claim on ``key``'s text, even while the extraction is being cancelled;
    the error of a database that cannot take it (None: deleted). The row then stays to the end of
    the phase (which releases every text claim of its worker) or to its lease: a waiter extracts
    the text itself then."""
    with anyio.CancelScope(shield=True):
        try:
            await anyio.to_thread.run_sync(text_claims.land, *key)
        except StoreError as exc:
            return str(exc)
    return None


def _failures(row: ChunkResult | None) -> int:
    return row.attempts if row is not None and row.status == "failed" else 0


async def _extract_one(
    unit: WorkUnit,
    *,
    extractor: Extractor,
    store: ChunkResults,
    semantic_types: Collection[str],
    limiter: anyio.CapacityLimiter,
    fingerprint: str,
    now: datetime,
    run_id: str | None,
    failed_before: int,
    retry_base_seconds: float,
    retry_max_seconds: float,
    held: HeldAnswers,
    damaged: Sequence[DatabaseDamagedError] = (),
) -> UnitOutcome:
    """``unit`` extracted (or its held answer stored) and its outcome recorded; no call once a unit
    of the phase has met a damaged database file (``damaged``): deferred, nothing recorded."""
    kept = held.take((fingerprint, unit.text_hash))
    if kept is not None:
        moved = answer_moved_to(kept.extraction, unit, kept.memory_ids, session_id=kept.session_id)
        if moved is not None:  # paid by an earlier attempt whose store the database refused: not asked again
            return await _stored(unit, moved, replace(kept, extraction=moved, session_id=unit.session_id,
                                                      memory_ids=unit.memory_ids),
                                 store=store, held=held, fingerprint=fingerprint, run_id=run_id, called=False)
        held.keep((fingerprint, unit.text_hash), kept)  # its own session's (it names it): this unit pays
    try:
        # The limiter bounds model calls only: validating and recording happen after the slot is freed.
        async with limiter:
            if damaged:  # its answer could not be stored: the run after the restore asks
                return UnitOutcome(unit, "deferred", error_kind="database-damaged", error=str(damaged[0]), outage=True)
            started = time.perf_counter()
            reply = await extractor.extract(unit)
        extraction = validate_extraction(reply.raw, unit, semantic_types=semantic_types)
    except ExtractionFailure as failure:
        latency = round((time.perf_counter() - started) * 1000, 1)
        if failure.unsent:
            # No model worked on the request (its connection refused, or no endpoint at the URL):
            # no try against the chunk, so no row and no backoff — N workers whose connections are
            # refused record nothing N times. The next cycle's provider-ready check
            # (llm-unavailable while the server stays away or its URL is wrong) is what keeps it
            # from being asked again too soon.
            log.warning("chunk extraction failed", chunk_id=unit.unit_id, kind=failure.kind, error=str(failure)[:300],
                        attempts=failed_before, recorded=False)
            return UnitOutcome(unit, "failed", None, failure.kind, str(failure), latency_ms=latency, outage=True)
        attempts = failed_before + 1
        backoff = chunk_backoff(attempts, base_seconds=retry_base_seconds, max_seconds=retry_max_seconds)
        await anyio.to_thread.run_sync(
            partial(
                store.record_failure,
                session_id=unit.session_id, chunk_id=unit.unit_id, content_hash=unit.content_hash,
                fingerprint=fingerprint, error_kind=failure.kind, error=str(failure),
                next_attempt_at=iso(now + backoff), tokens_in=failure.tokens_in,
                tokens_out=failure.tokens_out, latency_ms=latency, run_id=run_id,
            )
        )
        log.warning("chunk extraction failed", chunk_id=unit.unit_id, kind=failure.kind, error=str(failure)[:300],
                    attempts=attempts)
        return UnitOutcome(unit, "failed", None, failure.kind, str(failure), failure.tokens_in, failure.tokens_out, latency,
                           outage=failure.outage)
    latency = round((time.perf_counter() - started) * 1000, 1)
    # Held (if the database refuses it) as of the phase's start: its age is over-counted by at most a phase.
    paid = HeldAnswer(extraction, unit.session_id, unit.memory_ids, reply.tokens_in, reply.tokens_out, latency, now)
    return await _stored(unit, extraction, paid, store=store, held=held, fingerprint=fingerprint, run_id=run_id, called=True)


async def _stored(
    unit: WorkUnit,
    extraction: ChunkExtraction,
    paid: HeldAnswer,
    *,
    store: ChunkResults,
    held: HeldAnswers,
    fingerprint: str,
    run_id: str | None,
    called: bool,
) -> UnitOutcome:
    """``unit``'s paid answer stored with what its call cost (``paid``): ``ok`` when this attempt
    ``called`` the model, ``reused`` when the answer was held from an earlier one. When the database
    refuses it twice (:func:`_store_paid_answer`), the answer is held in ``held`` for the next
    attempt of its words and the unit is an outage (:data:`ANSWER_UNSTORED`); a damaged database
    file (:class:`DatabaseDamagedError`) is raised once the answer is held."""
    try:
        await _store_paid_answer(unit, partial(
            store.record_ok,
            session_id=unit.session_id, chunk_id=unit.unit_id, content_hash=unit.content_hash,
            text_hash=unit.text_hash, memory_ids=unit.memory_ids, fingerprint=fingerprint, tokens_in=paid.tokens_in,
            tokens_out=paid.tokens_out, latency_ms=paid.latency_ms, payload=extraction.to_payload(), run_id=run_id,
        ))
    except StoreError as exc:
        # The answer was paid for and is valid: the database's failure, not the chunk's. An outage
        # (pipelines.extract.workflow): the session is deferred, charged nothing; the waiters of its
        # text in this phase defer with no call (their answers could not be stored either). A
        # damaged file ends the phase instead (no other session pays for an answer it cannot
        # store); the answer reaches the held answers' file for the run after the restore.
        held.keep((fingerprint, unit.text_hash), paid)
        if isinstance(exc, DatabaseDamagedError):
            raise
        log.warning("paid answer not stored: the database refused it twice; held for the next attempt of its words, "
                    "its session deferred, charged nothing", chunk_id=unit.unit_id, error=str(exc)[:300])
        spent = (paid.tokens_in, paid.tokens_out, paid.latency_ms) if called else (0, 0, 0.0)
        return UnitOutcome(unit, "failed", None, ANSWER_UNSTORED, str(exc), *spent, outage=True)
    if not called:
        return UnitOutcome(unit, "reused", extraction)
    return UnitOutcome(unit, "ok", extraction, tokens_in=paid.tokens_in, tokens_out=paid.tokens_out, latency_ms=paid.latency_ms)


async def _store_paid_answer(unit: WorkUnit, write: Callable[[], None]) -> None:
    """``write()`` the answer of a paid call; once more after :data:`STORE_RETRY_SECONDS` when the
    database refuses it — not a damaged file, which no wait mends. Raises the last refusal's
    :class:`StoreError`."""
    try:
        await anyio.to_thread.run_sync(write)
    except DatabaseDamagedError:
        raise
    except StoreError as exc:
        log.warning("paid answer not stored, trying once more", chunk_id=unit.unit_id, error=str(exc)[:300],
                    pause_seconds=STORE_RETRY_SECONDS)
        await anyio.sleep(STORE_RETRY_SECONDS)
        await anyio.to_thread.run_sync(write)
