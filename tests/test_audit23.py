"""The twenty-first session's code, attacked (audit23, twenty-second session).

Real embedded Chroma, real imports and cycles, real SQLite files and a real PostgreSQL schema.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from tests.test_lastrow import SECRET, _cycle, _gone, _import, _password, _sessions
from tests.test_forget_rest import rows_holding


@pytest.mark.both_backends
async def test_a_rewrite_the_scan_saw_and_the_batch_limit_deferred_is_synced_by_a_later_cycle(
    settings: Settings, tmp_path: Path,
) -> None:
    """A cycle that finds rows written again (here the collection's last row, redacted) syncs
    their sessions up to ``batch_limit`` and clears the scan marks before its first write; the
    sessions it left for later have the same ids as before, so the next scan — a full one, with no
    mark to say which rows came back — must still know they are due."""
    await _import(settings, tmp_path, _sessions("We moved ConfigLoader to src/config.py.", _password(SECRET)))
    await _cycle(settings)
    assert rows_holding(settings, SECRET)
    await _import(settings, tmp_path, _sessions("We moved ConfigLoader to src/config.py.", _password("[redacted]")))
    one = settings.model_copy(update={"batch_limit": 1})

    first = (await _cycle(one)).phases["ingest"]
    assert first["sessions_changed"] == 2 and first["sessions_synced"] == 1, first  # s-a: the secret is s-b's
    second = (await _cycle(one)).phases["ingest"]

    assert second["sessions_synced"] == 1, second
    await _cycle(one)  # the extraction of s-b, if the one before left it for its batch limit
    _gone(settings, SECRET)
