"""The collection's last row deleted and added back is seen (lastrow, twenty-first session).

A turn written again is deleted and added under its id (``rem-cycle import`` of a corrected
transcript): it comes back at the end of Chroma's order, after the scan marks, and the next cycle
reads it. But when the row was the collection's last already — the newest turn redacted right after
it was written, or a turn rewritten a second time (the first rewrite made it the last) — the ids
and their count are what the mark recorded: no cycle saw it, not even a full scan, and the old
words (a secret the user took out) stayed in the graph, the recall index and the extraction. The
mark now keeps a fingerprint of the row that ends it (``ScanMark.last_row``). Real embedded
Chroma, real imports and cycles, real files, both engines.
"""

from __future__ import annotations

from pathlib import Path
import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.db import LAST_ROW_VERSION
from tests.conftest import write_sessions
from tests.migrations_support import rolled_back
from tests.test_forget_bytes import _files_holding
from tests.test_forget_rest import rows_holding
from worker.cycle import CycleResult, run_cycle

SECRET = "zqlastrowsecret7731"  # one word to the tokenizer, so the full-text index holds it whole
SECOND = "zqlastrowsecond4417"


def _sessions(first: str, last: str) -> list[dict[str, object]]:
    """s-a and s-b, imported in that order: ``first`` is s-a's first turn (a middle row), ``last``
    s-b's second (the collection's last row)."""
    def session(sid: str, texts: list[str]) -> dict[str, object]:
        return {"sessionId": sid, "title": f"Session {sid}", "createdAt": "2026-11-01T10:00:00Z", "userId": "user-1",
                "summary": f"{sid} work.", "turns": [{"role": "user", "text": text} for text in texts]}
    return [session("s-a", [first, "GraphStore reads ConfigLoader at start."]),
            session("s-b", ["RetryPolicy wraps GraphStore.", last])]


def _password(word: str) -> str:
    return f"The staging password for ConfigLoader is {word}, keep it out of git."


async def _import(settings: Settings, tmp_path: Path, sessions: list[dict[str, object]]) -> None:
    """``rem-cycle import`` of the file: changed turns deleted and added again (ChromaStore.rewrite).
    Chroma only: the graph database is not opened (nor migrated)."""
    stats = await import_sessions(write_sessions(tmp_path / "sessions.jsonl", sessions), chroma=ChromaStore(settings),
                                  memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    assert not stats.bad_lines


async def _cycle(settings: Settings) -> CycleResult:
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result


def _gone(settings: Settings, word: str) -> None:
    """No row of the graph database holds ``word``, nor (SQLite) any byte of its files."""
    assert rows_holding(settings, word) == [], word
    if settings.database_url is None:
        assert _files_holding(settings.data_dir, word) == [], word


def _resynced(result: CycleResult, scan: str) -> None:
    """``result`` synced both sessions again (each has turns in the mark's tail, read as re-added
    when its last row changed) and extracted again the one whose turn changed."""
    ingest = result.phases["ingest"]
    assert ingest["scan"] == scan and ingest["sessions_changed"] == 2 and ingest["sessions_synced"] == 2, ingest
    assert result.phases["extract"]["sessions_digested"] == 1, result.phases["extract"]


async def _idle(settings: Settings) -> None:
    """A cycle with nothing new reads no row and finds nothing changed."""
    ingest = (await _cycle(settings)).phases["ingest"]
    assert ingest["scan"] == "new rows" and ingest["rows_scanned"] == 0 and ingest["sessions_changed"] == 0, ingest


@pytest.mark.both_backends
@pytest.mark.parametrize("scan", ["new rows", "full"])
async def test_the_newest_turn_redacted_right_after_it_was_written_leaves_the_graph(
    settings: Settings, tmp_path: Path, scan: str,
) -> None:
    mine = settings.model_copy(update={"full_scan_interval_seconds": 0}) if scan == "full" else settings
    await _import(mine, tmp_path, _sessions("We moved ConfigLoader to src/config.py.", _password(SECRET)))
    await _cycle(mine)
    assert rows_holding(mine, SECRET)
    await _import(mine, tmp_path, _sessions("We moved ConfigLoader to src/config.py.", _password("[redacted]")))

    result = await _cycle(mine)

    _resynced(result, scan)
    _gone(mine, SECRET)
    assert result.phases["finalize"]["erased"] is True
    if scan == "new rows":
        await _idle(mine)


@pytest.mark.both_backends
async def test_a_turn_rewritten_twice_in_two_cycles_leaves_the_graph_both_times(settings: Settings, tmp_path: Path) -> None:
    last = "ConfigLoader has a test now."
    await _import(settings, tmp_path, _sessions(_password(SECRET), last))
    await _cycle(settings)
    # The first rewrite moves s-a's first turn to the end of Chroma's order: seen as re-added.
    await _import(settings, tmp_path, _sessions(_password(SECOND), last))
    first = (await _cycle(settings)).phases["ingest"]
    assert first["sessions_synced"] == 1, first
    _gone(settings, SECRET)
    assert rows_holding(settings, SECOND)
    # The second finds it the last row already: deleted and added back, it keeps its place.
    await _import(settings, tmp_path, _sessions(_password("[redacted]"), last))

    result = await _cycle(settings)

    _resynced(result, "new rows")
    _gone(settings, SECOND)
    await _idle(settings)


@pytest.mark.both_backends
async def test_the_first_cycle_after_the_upgrade_reads_the_marks_last_rows_again(settings: Settings, tmp_path: Path) -> None:
    """A mark written before marks kept their last row's fingerprint cannot say whether that row
    was rewritten: the first cycle after the upgrade reads the mark's tail as re-added, once, so
    a redaction made before the upgrade leaves the graph too."""
    await _import(settings, tmp_path, _sessions("We moved ConfigLoader to src/config.py.", _password(SECRET)))
    await _cycle(settings)
    rolled_back(settings, settings.database_url and "postgresql" or "sqlite", to=LAST_ROW_VERSION - 1)
    await _import(settings, tmp_path, _sessions("We moved ConfigLoader to src/config.py.", _password("[redacted]")))

    result = await _cycle(settings)  # migrates the database first

    _resynced(result, "new rows")
    _gone(settings, SECRET)
    await _idle(settings)
