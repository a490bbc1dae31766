"""What rewritten text leaves behind besides the graph (rewritequeue, twentieth session).

An agent takes a secret out of a turn, or of a session's summary, by writing the row again with
other words (deleted and added under its id, as ``rem-cycle import`` of a corrected file does).
The turn's old extraction had queued lines of its own (``REFERENCED_BY`` a turn's reference to a
row not in the graph yet), whose source and ``evidence`` are the old words: they stayed in the
queue file or table after the session was extracted again, and a drain could still link them. A summary
rewritten made no erase due. Real embedded Chroma, real cycles, the queue file and the queue
table, both engines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from pipelines.ingest import LIVE_MARKER, plan_session_sync, session_node
from store.chroma import SummaryRow
from store.lazy_queue import LazyEdgeQueue
from tests.test_erase_due import _erase_due, _seed, _vacuum_count
from tests.test_forget_bytes import _files_holding
from tests.test_forget_queue import LATE, LATE_REF, LEGACY_REF, _session
from tests.test_forget_rest import rows_holding
from tests.test_retract_queue import _cycle, _queue_text

OLD_REF = "zqoldref2294"  # a session id only the old words of s-red's first turn name
KEPT_REF = "zqkeptref7305"  # a memory id the turn names before and after its rewrite


def _red(*, redacted: bool) -> dict[str, object]:
    """s-red: its first turn names OLD_REF and KEPT_REF (``redacted``: KEPT_REF alone); its second
    names LEGACY_REF and is never rewritten."""
    first = "ConfigLoader notes are in " + ("" if redacted else f"session:{OLD_REF}-archive and ") + f"memory:{KEPT_REF}-x."
    return _session("s-red", [first, f"GraphStore was in memory:{LEGACY_REF}-x."])


def _queued_lines(settings: Settings, word: str) -> int:
    """How many lines (or dead letters) of the queue file or table hold ``word``."""
    in_file = sum(word in line for line in _queue_text(LazyEdgeQueue(settings.queue_path)).splitlines())
    return in_file + sum(row.startswith(("lazy_edges: ", "lazy_edges_dead: ")) for row in rows_holding(settings, word))


@pytest.mark.parametrize(("backend", "queue"), [("sqlite", "file"), ("sqlite", "database"), ("postgresql", "database")],
                         indirect=["backend"])
async def test_a_rewritten_turns_old_queue_lines_leave_the_queue_and_the_lines_still_right_stay(
    settings: Settings, tmp_path: Path, queue: str,
) -> None:
    mine = settings.model_copy(update={"lazy_queue": queue})
    await _seed(mine, [_red(redacted=False), *LATE], tmp_path)
    await _cycle(mine)
    for word in (OLD_REF, KEPT_REF, LEGACY_REF, LATE_REF):
        assert _queued_lines(mine, word) == 1, word  # each reference's line (ids no Chroma row has), queued

    await _seed(mine, [_red(redacted=True)], tmp_path)
    result = await _cycle(mine)

    assert result.phases["extract"]["sessions_digested"] == 1
    # The old words' line went (its ``evidence`` quotes them). Before, the turn's old lines stayed.
    assert _queued_lines(mine, OLD_REF) == 0
    # The line the new extraction queued again is there once (queued after the old went). The
    # turn left alone has its line once (the new extraction's stands in for the old: leftalone22);
    # another session's stays.
    assert [_queued_lines(mine, word) for word in (KEPT_REF, LEGACY_REF, LATE_REF)] == [1, 1, 1]
    assert result.phases["ingest"]["retractions_withdrawn"] == 1 and _erase_due(mine) == 0


SUMMARY_SECRET = "zqsummaryword4127"  # one word to the full-text tokenizer


def _summarised(summary: str, *, user: str = "user-1") -> list[dict[str, object]]:
    return [{**_session("s-sum", ["GraphStore retries three times."]), "summary": summary, "userId": user}]


@pytest.mark.both_backends
async def test_a_summary_rewritten_without_its_secret_leaves_the_database_files_in_that_cycle(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    await _seed(settings, _summarised(f"GraphStore's token is {SUMMARY_SECRET}."), tmp_path)
    assert "erased" not in (await _cycle(settings)).phases["finalize"]
    assert rows_holding(settings, SUMMARY_SECRET)  # the SESSION node, the recall index
    vacuumed = _vacuum_count(settings, "recall_sessions") if database_url else 0

    await _seed(settings, _summarised("GraphStore's token is [redacted]."), tmp_path)
    result = await _cycle(settings)

    # Before, the sync replaced the words and made no erase due: they stayed in the files.
    assert result.phases["finalize"]["erased"] is True and _erase_due(settings) == 0
    assert rows_holding(settings, SUMMARY_SECRET) == []
    if database_url is None:
        assert _files_holding(settings.data_dir, SUMMARY_SECRET) == []
    else:
        assert _vacuum_count(settings, "recall_sessions") > vacuumed


def test_only_a_summary_whose_words_changed_makes_an_erase_due() -> None:
    """Its text or its title; not its other metadata (the user, the time), nor a session seen
    for the first time."""
    def row(text: str, **metadata: str) -> SummaryRow:
        return SummaryRow("sum-1", text, {"sessionId": "s-1", "title": "Deploy", "userId": "u-1", **metadata})

    before = session_node("s-1", row("The token is zqold1."), marker=LIVE_MARKER, memory_count=0)

    def replaced(summary: SummaryRow | None) -> bool:
        return plan_session_sync("s-1", [], summary, {before.id: before})[3].summary_replaced

    assert replaced(row("The token is [redacted]."))
    assert replaced(row("The token is zqold1.", title="Deploy (zqold2 dropped)"))
    assert replaced(None)  # the summary row went: its words with it
    assert not replaced(row("The token is zqold1.", userId="u-2"))
    assert not replaced(row("The token is zqold1."))
    assert not plan_session_sync("s-1", [], row("The token is zqold1."), {})[3].summary_replaced
