"""The texts being extracted in one extract phase, so that two sessions of the same words (a fork
and its original, duplicates) digested side by side pay for each shared chunk once.

A unit that would call the extractor first *claims* its text (fingerprint and text hash). The
first claim of a text is granted: that unit extracts it and *lands* the flight when its extraction
ends, answered or not. A later claim of the same text gets the flight to wait on instead, and
reuses the answer once it has landed (:func:`pipelines.extract.map.map_units`). A flight that
landed in an outage (the model server could not be reached or refused all work) stays: its
waiters, and any later claim of its text in the phase, end the same way without a call — the
server cannot answer them either. A flight that landed without an answer for a reason of its own
(a 500, a malformed or truncated answer) is forgotten, so the next claim of its text — the first
waiter to wake — is granted and extracts the text itself, while the other waiters wait on it in turn.

A claimant never waits for anything but a model-call slot, and those are held only by calls in
progress, so every flight lands: a waiter cannot wait for ever, whatever the number of sessions,
slots or duplicates. The registry holds one small entry per text answered (or out) in the phase
and lives as long as the phase does: nothing outlives the cycle. Pure: no I/O, no clock.

:class:`HeldAnswers` is the other half of never paying twice: a paid answer the database refused
to store, kept in the process for the next attempt of its words (the daemon keeps one for its
life, so its next cycle stores the answer instead of asking the model again). Its answers go to
a file in the data dir between processes as :meth:`HeldAnswers.records` (``worker.held_answers``).

The registry is this process's. Where other workers share the database, the unit granted a text
here claims it there too before its call (:func:`pipelines.extract.map._claim_among_workers`,
``text_claims``), so a second claim inside one process still costs no database round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio

from pipelines.extract.model import ChunkExtraction
from store.held_file import record_line

# (extractor fingerprint, text hash): the same words asked of the same extractor.
TextKey = tuple[str, str]
# (error kind, error) of an extraction the model server could not take: unreachable or refusing all work.
Outage = tuple[str | None, str | None]


@dataclass(slots=True)
class Flight:
    """One text's extraction: ``landed`` is set when it ended; ``answered``: it stored an ``ok``
    answer under the text's hash; ``outage``: it ended in an outage."""

    landed: anyio.Event = field(default_factory=anyio.Event)
    answered: bool = False
    outage: Outage | None = None


class InFlight:
    """The flights of one extract phase, by :data:`TextKey`."""

    def __init__(self) -> None:
        self._flights: dict[TextKey, Flight] = {}

    def claim(self, key: TextKey) -> Flight | None:
        """``None``: the caller extracts the text and must :meth:`land` it (in a ``finally``).
        Otherwise the flight of the unit extracting it (or which answered it) to wait on."""
        flight = self._flights.get(key)
        if flight is None:
            self._flights[key] = Flight()
        return flight

    def land(self, key: TextKey, *, answered: bool, outage: Outage | None = None) -> None:
        """The claimant's extraction of ``key`` ended. Answered: later claims get the landed flight
        (and read the answer from the store). An ``outage``: later claims get the landed flight
        too (and end as it did). Otherwise the text is free to claim again."""
        flight = self._flights[key]
        flight.answered = answered
        flight.outage = outage
        if not answered and outage is None:
            del self._flights[key]
        flight.landed.set()


# Paid answers a process keeps while the database refuses them, counted in the bytes of their lines
# in the data dir's file (worker.held_answers): what the bound protects is that file — written whole
# and read whole under its lock by each extract phase — and the process's memory, which holds each
# answer as objects (a few times its line). 4 MiB is some 1,300 answers of a real chunk's 3 kB
# (bench/bench_held_file.py). Past it, the oldest goes (its words are asked again, as before
# paidstore); the newest stays, whatever its size.
HELD_ANSWERS_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class HeldAnswer:
    """A paid, validated answer the database refused to store: the unit it answered (its session,
    its turns' memories, in turn order), what the call cost and when it was first held
    (``held_at``, UTC: the age limit counts from it, however often it is taken and held again)."""

    extraction: ChunkExtraction
    session_id: str
    memory_ids: tuple[str, ...]
    tokens_in: int
    tokens_out: int
    latency_ms: float
    held_at: datetime


class HeldAnswers:
    """The paid answers the database refused to store, by :data:`TextKey`, oldest first, their lines
    in the file at most :data:`HELD_ANSWERS_MAX_BYTES` (but the newest). Pure: no I/O, no clock."""

    def __init__(self) -> None:
        self._held: dict[TextKey, HeldAnswer] = {}
        self._sizes: dict[TextKey, int] = {}
        self._bytes = 0

    def keep(self, key: TextKey, answer: HeldAnswer) -> None:
        """Hold ``answer`` for the next attempt of ``key``'s words (replacing one held for them)."""
        self._keep(key, answer, _record(key, answer))

    def _keep(self, key: TextKey, answer: HeldAnswer, record: Mapping[str, Any]) -> None:
        """:meth:`keep`, ``record`` being ``answer``'s (its line is the answer's size)."""
        self._forget(key)
        self._held[key] = answer
        self._sizes[key] = len(record_line(record))
        self._bytes += self._sizes[key]
        while self._bytes > HELD_ANSWERS_MAX_BYTES and len(self._held) > 1:
            self._forget(next(iter(self._held)))

    def size(self) -> int:
        """The bytes of the held answers' lines in the file."""
        return self._bytes

    def keep_records(self, records: Iterable[Mapping[str, Any]], *, held_at: datetime) -> list[str]:
        """Hold the answer of each of ``records`` (:meth:`records`' form, oldest first, as
        :meth:`keep` does); ``held_at``: when a record that does not say (written before records
        said it) was held — at the latest when its file was written. Returns why each record that
        is no held answer was left out."""
        problems = []
        for record in records:
            try:
                key, answer = _from_record(record, held_at=held_at)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                problems.append(f"not a held answer: {exc!r}")
                continue
            # The record as read is measured: rebuilding it from the answer (``asdict``) costs more than its read.
            self._keep(key, answer, record if "held_at" in record else {**record, "held_at": answer.held_at.isoformat()})
        return problems

    def records(self) -> list[dict[str, Any]]:
        """The held answers, oldest first, as JSON-ready records (:meth:`keep_records` reads them)."""
        return [_record(key, answer) for key, answer in self._held.items()]

    def clear(self) -> None:
        """Hold nothing (what was held is kept elsewhere now)."""
        self._held.clear()
        self._sizes.clear()
        self._bytes = 0

    def take(self, key: TextKey) -> HeldAnswer | None:
        """The answer held for ``key``'s words, no longer held (the taker stores it or keeps it again)."""
        return self._forget(key)

    def _forget(self, key: TextKey) -> HeldAnswer | None:
        """Hold nothing more for ``key``; what was held for it."""
        answer = self._held.pop(key, None)
        if answer is not None:
            self._bytes -= self._sizes.pop(key)
        return answer

    def __len__(self) -> int:
        return len(self._held)

    def sessions(self) -> set[str]:
        """The sessions whose answers are held."""
        return {answer.session_id for answer in self._held.values()}

    def turns(self) -> set[str]:
        """The turns (memory ids) the held answers quote."""
        return {memory_id for answer in self._held.values() for memory_id in answer.memory_ids}

    def keep_only_present(self, memories: Mapping[str, Collection[str]]) -> int:
        """Drop each answer of a session in ``memories`` whose turns are not all among
        ``memories[its session]`` (the memories the database has of each session it knows): a
        turn of it was forgotten or retracted since it was held, and the process must not keep, nor
        store in another session, what was taken out. A session ``memories`` does not name is not
        judged here: the database does not know it yet (a backup older than its ingest restored
        since), and its answer waits for its ingest. Returns how many went."""
        return self._drop(lambda answer: answer.session_id in memories
                          and not set(answer.memory_ids) <= set(memories[answer.session_id]))

    def drop_held_before(self, moment: datetime) -> int:
        """Drop each answer held before ``moment`` (past the age limit: no attempt of its words came
        since, and none may ever come — a session deleted from the source before its ingest, an
        extractor changed since). Returns how many went."""
        return self._drop(lambda answer: answer.held_at < moment)

    def drop_quoting(self, *, sessions: Collection[str], memories: Collection[str]) -> int:
        """Drop each answer of one of ``sessions`` or quoting a turn among ``memories`` (memory
        ids): what a retraction or a forget took out, or a rewrite replaced (a turn written again
        with other words keeps its id, so :meth:`keep_only_present` would keep its old words'
        answer, which no attempt ever takes again). Returns how many went."""
        turns = set(memories)
        return self._drop(lambda answer: answer.session_id in sessions or not turns.isdisjoint(answer.memory_ids))

    def _drop(self, taken_out: Callable[[HeldAnswer], bool]) -> int:
        """Drop each answer ``taken_out`` says; how many went."""
        gone = [key for key, answer in self._held.items() if taken_out(answer)]
        for key in gone:
            self._forget(key)
        return len(gone)


def _record(key: TextKey, answer: HeldAnswer) -> dict[str, Any]:
    """``answer`` held for ``key`` as a JSON-ready record (:func:`_from_record` reads it)."""
    return {"fingerprint": key[0], "text_hash": key[1], "session_id": answer.session_id,
            "memory_ids": list(answer.memory_ids), "tokens_in": answer.tokens_in, "tokens_out": answer.tokens_out,
            "latency_ms": answer.latency_ms, "held_at": answer.held_at.isoformat(),
            "extraction": answer.extraction.to_payload()}


def _from_record(record: Mapping[str, Any], *, held_at: datetime) -> tuple[TextKey, HeldAnswer]:
    """The key and answer of one of :meth:`HeldAnswers.records` (``held_at``: when its file was
    written, so when it was held if it does not say, and at the latest if it says later); raises
    for anything else."""
    key = (_text(record["fingerprint"]), _text(record["text_hash"]))
    memory_ids = tuple(_text(m) for m in record["memory_ids"])
    counts = [record[name] for name in ("tokens_in", "tokens_out")]
    if not all(type(n) is int and n >= 0 for n in counts) or type(record["latency_ms"]) not in (int, float):
        raise ValueError("its cost is not counts of tokens and a latency")
    if "held_at" in record:
        said = datetime.fromisoformat(_text(record["held_at"]))
        # No later than the file's own time: a record says when it was held, never after its file
        # was written, and one that says a later time (a clock ahead, a hand edit) would outlive the
        # age limit by as much.
        held_at = min(said if said.tzinfo else said.replace(tzinfo=UTC), held_at)
    return key, HeldAnswer(ChunkExtraction.from_payload(record["extraction"]), _text(record["session_id"]), memory_ids,
                           counts[0], counts[1], float(record["latency_ms"]), held_at)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value
