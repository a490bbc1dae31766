"""A session's turns → work units for the extractor (pure).

Chunks come from :func:`pipelines.chunker.chunk_session`; an oversized turn is cut into parts that
fit (paragraph, then sentence boundaries), each its own unit whose one turn still points at the
turn's memory, so nothing is dropped and provenance stays exact. A unit whose answer overran the
model's output limit, or whose prompt the server's context did not hold, is asked again as two
halves (:func:`halve_unit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from pipelines.chunker import chunk_session, estimate_tokens, split_oversized_text
from pipelines.extract.model import FITS_EVERY_WINDOW, UnitTurn, WorkUnit, turn_line, unit_content_hash


@dataclass(frozen=True, slots=True)
class SourceTurn:
    """One memory of a session, in turn order."""

    memory_id: str
    text: str
    role: str | None = None


def plan_units(session_id: str, turns: Sequence[SourceTurn], *, budget_tokens: int | None) -> list[WorkUnit]:
    """The work units of a session, in chunk order (a chunk's parts in text order).

    Chunks are sized by what the extractor is shown of each turn (:func:`turn_line`), not by its
    text alone: the number and the role cost tokens on every turn, which in a chat of short turns
    is most of the prompt. A turn's number in its chunk is at most its number in the session, which
    is the bound used, so a turn appended to the session changes the size of no earlier turn."""
    shown = [turn_line(number, t.role, t.text) for number, t in enumerate(turns, start=1)]
    plan = chunk_session(shown, session_id=session_id, safe_processing_limit_tokens=budget_tokens)
    units: list[WorkUnit] = []
    for index, chunk in enumerate(plan.chunks):
        members = [turns[i] for i in chunk.turn_indices]
        if chunk.oversized_turn and budget_tokens:
            (turn,) = members
            # Each part is shown as turn 1 of its unit: the parts' text gets the budget less that line's framing.
            framing = estimate_tokens(turn_line(1, turn.role, ""))
            limit = budget_tokens - framing if budget_tokens > framing else budget_tokens
            parts = split_oversized_text(turn.text, limit_tokens=limit)
            for number, part in enumerate(parts):
                unit_turns = (UnitTurn(1, turn.memory_id, part, turn.role),)
                units.append(
                    WorkUnit(
                        unit_id=f"{chunk.chunk_id}:part:{number}",
                        session_id=session_id,
                        chunk_index=index,
                        turns=unit_turns,
                        content_hash=unit_content_hash(session_id, unit_turns, part=number),
                        part=number,
                    )
                )
            continue
        unit_turns = tuple(UnitTurn(n, t.memory_id, t.text, t.role) for n, t in enumerate(members, start=1))
        units.append(
            WorkUnit(
                unit_id=chunk.chunk_id,
                session_id=session_id,
                chunk_index=index,
                turns=unit_turns,
                content_hash=unit_content_hash(session_id, unit_turns),
            )
        )
    return units


# What a half's unit id adds to its unit's: ``<chunk id>:half:0`` and ``…:half:1``.
HALF = ":half:"
# A unit whose prompt the server's context did not hold is halved until its pieces fit, as deep as
# that takes (a 27,500-token chunk with one huge turn took 6 levels on llama.cpp's server at 2,048),
# but not below this many estimated tokens: with the system prompt (about 390) its prompt is within
# FITS_EVERY_WINDOW, so an overflow of it is no window's to mend (a server that says so of any
# prompt) and its failure stands. MAX_PROMPT_HALVINGS bounds a unit that halving shrinks slowly.
SMALLEST_UNFIT_TOKENS = FITS_EVERY_WINDOW // 2
MAX_PROMPT_HALVINGS = 10
# A half whose answer overruns the output limit again is halved again, at most this deep (a
# sixteenth of its chunk); the words-against-answer test of halve_unit stops a looping model sooner.
MAX_HALVINGS = 4


def halve_unit(unit: WorkUnit, *, answer_tokens: int = 0, max_halvings: int = MAX_HALVINGS) -> tuple[WorkUnit, WorkUnit] | None:
    """The two halves of ``unit`` by size — its turns split between two units (each numbered from
    1, as a chunk's are), or the text of its one turn cut in two on the boundaries an oversized
    turn is cut on, each half still that turn's memory — or ``None`` when halving cannot help: one
    turn too short to cut, already ``max_halvings`` deep, or words no more than
    ``answer_tokens``, the answer of it that overran the output limit (0: not reported). An answer
    of a faithful extraction is shorter than its words (names, and quotes of them), so a unit of
    fewer words than the limit that still overran it was answered by a model repeating itself, and
    its halves would each cost a full answer again. Pure and deterministic, so the halves of a unit
    are the same units in every cycle (their answers are kept and reused)."""
    sizes = _turn_sizes(unit)
    if unit.unit_id.count(HALF) >= max_halvings or (answer_tokens > 0 and sum(sizes) <= answer_tokens):
        return None
    if len(unit.turns) > 1:
        cut = _balanced_cut(sizes)
        groups = [unit.turns[:cut], unit.turns[cut:]]
        halves = [tuple(UnitTurn(n, t.memory_id, t.text, t.role) for n, t in enumerate(g, start=1)) for g in groups]
    else:
        (turn,) = unit.turns
        pieces = split_oversized_text(turn.text, limit_tokens=-(-estimate_tokens(turn.text) // 2))
        if len(pieces) < 2:
            return None
        cut = _balanced_cut([estimate_tokens(p) for p in pieces])
        halves = [(UnitTurn(1, turn.memory_id, "".join(g), turn.role),) for g in (pieces[:cut], pieces[cut:])]
    first, second = (
        WorkUnit(
            unit_id=f"{unit.unit_id}{HALF}{number}",
            session_id=unit.session_id,
            chunk_index=unit.chunk_index,
            turns=turns,
            content_hash=unit_content_hash(unit.session_id, turns, part=unit.part),
            part=unit.part,
        )
        for number, turns in enumerate(halves)
    )
    return first, second


def unit_tokens(unit: WorkUnit) -> int:
    """The estimated tokens of ``unit``'s turns as the extractor shows them (:func:`turn_line`)."""
    return sum(_turn_sizes(unit))


def _turn_sizes(unit: WorkUnit) -> list[int]:
    return [estimate_tokens(turn_line(t.number, t.role, t.text)) for t in unit.turns]


def _balanced_cut(sizes: Sequence[int]) -> int:
    """Where to cut ``sizes`` (two or more) into two non-empty runs of the most even totals."""
    total = sum(sizes)
    before = list(accumulate(sizes))[:-1]
    return 1 + min(range(len(before)), key=lambda i: abs(total - 2 * before[i]))
