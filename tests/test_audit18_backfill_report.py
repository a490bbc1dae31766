"""audit18: what ``rem-cycle backfill`` tells the user is left when its withdrawal or erase did not
complete. The real report function, printing to the captured stdout."""

from __future__ import annotations

import pytest

from pipelines.backfill import RecentBackfill
from worker.report import print_backfill


def test_a_backfill_that_could_not_withdraw_or_erase_says_the_next_cycle_will(capsys: pytest.CaptureFixture[str]) -> None:
    """``rem-cycle backfill``'s report when its withdrawal found the queue files held or its erase
    did not complete: since retractdur and erasedue, the retraction's records stay and the next
    cycle withdraws and erases (``worker.cycle._withdraw_retracted_lines``, ``worker.knowledge.erase_when_due``).
    The report said the lines stay (for good) and the text stays "until the next forget", sending
    the user to a forget of what they never asked to forget."""
    recent = RecentBackfill(days=7, since="2026-11-25T00:00:00.000Z", dry_run=False, turns_retracted={"s": ["memory:s-t0"]})
    print_backfill({**recent.as_dict(), "drain": None, "queue_lines_withdrawn": 0, "retractions_withdrawn": 0,
                    "queue_error": "another drain holds the queue", "erased": False, "erase_error": "database is locked",
                    "erase_failures": 1, "erase_retry_at": "2026-11-25T00:01:00.000Z"})
    out = " ".join(capsys.readouterr().out.split())
    assert "their lines stay in the queue files until the next cycle withdraws them: another drain holds the queue" in out
    assert ("their text may stay in the database's files until a cycle erases it (tried again at 2026-11-25T00:01:00.000Z, "
            "1 attempts failed): database is locked") in out
