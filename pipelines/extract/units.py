"""A session's turns → work units for the extractor (pure).

Chunks come from :func:`pipelines.chunker.chunk_session`; an oversized turn is cut into parts that
fit (paragraph, then sentence boundaries), each its own unit whose one turn still points at the
turn's memory, so nothing is dropped and provenance stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipelines.chunker import chunk_session, estimate_tokens, split_oversized_text
from pipelines.extract.model import UnitTurn, WorkUnit, turn_line, unit_content_hash


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
