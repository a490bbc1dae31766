"""A source row's ``createdAt`` is read as ISO 8601 says (audit28): a fraction of an hour or a
minute is that fraction, not milliseconds, and ``T24:00`` is the end of the day, by the one reader
``--as-of`` uses too (store.timeparse.iso_moment). Real cycles on both engines, embedded Chroma."""

from __future__ import annotations

import pytest

from config import Settings
from store.chroma import ChromaStore
from tests.test_change_scan import _query
from worker.cycle import run_cycle

# createdAt as written -> the moment ISO 8601 names (Python's fromisoformat read the first four as
# 10:00:00.500, 10:30:00.500, 10:30:00.500 and 08:00:00.500, and refused the last: a time unknown).
SPELLINGS = {
    "2026-12-04T10.5Z": "2026-12-04T10:30:00.000Z",
    "2026-12-04T10:30.5": "2026-12-04T10:30:30.000Z",
    "2026-12-04T1030,5Z": "2026-12-04T10:30:30.000Z",
    "2026-12-04T10.5+02:00": "2026-12-04T08:30:00.000Z",
    "2026-12-03T24:00Z": "2026-12-04T00:00:00.000Z",
    "2026-12-04T10:00:00.5Z": "2026-12-04T10:00:00.500Z",  # a fraction of a second, as before
}


@pytest.mark.both_backends
async def test_a_created_at_with_a_fraction_of_an_hour_or_the_end_of_a_day_is_read_as_iso_8601_says(settings: Settings) -> None:
    """Each turn of one session carries one spelling; after a cycle each is ingested (none
    quarantined, the session not failed) at the moment ISO 8601 names."""
    spellings = list(SPELLINGS)
    await ChromaStore(settings).upsert(
        settings.memory_collection, [f"t{n}" for n in range(len(spellings))], [f"turn {n}" for n in range(len(spellings))],
        [{"sessionId": "s1", "turnIndex": n, "role": "user", "createdAt": spelling} for n, spelling in enumerate(spellings)])
    result = await run_cycle(settings)
    ingest = result.phases["ingest"]
    assert result.outcome == "completed" and ingest["sessions_failed"] == 0, ingest
    stored = dict(_query(settings, "SELECT memory_id, created_at FROM recall_turns"))
    assert {spelling: stored.get(f"memory:t{n}") for n, spelling in enumerate(spellings)} == SPELLINGS
