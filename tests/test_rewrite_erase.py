"""A turn rewritten with other words leaves the database's files (rewriteerase, nineteenth session).

An agent (or ``rem-cycle import`` of a corrected transcript) takes a secret out of a turn by writing
the row again under its id. The next cycle re-ingests the session (the recall index's text of the
turn replaced) and re-extracts it (what the model said of the old words replaced): before, neither
made an erase due — the old text was replaced, not asked to be forgotten — so the old words stayed
in the SQLite file's full-text segments and log, and on PostgreSQL in the dead rows' pages, until
some later forget or retraction erased. Real embedded Chroma, real cycles, real files, both engines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from pipelines.ingest import LIVE_MARKER, memory_node, plan_session_sync
from store.chroma import MemoryRow
from tests.test_erase_due import DESCRIPTION_SECRET, _described_session, _erase_due, _seed, _vacuum_count
from tests.test_forget_bytes import TURN_SECRET, _files_holding, _sessions
from tests.test_forget_rest import rows_holding
from tests.test_retract_queue import _cycle
from worker.cycle import PHASES, CycleResult, run_cycle

SECRETS = (TURN_SECRET, DESCRIPTION_SECRET)


def _written(*, redacted: bool) -> list[dict[str, object]]:
    """s-keep (its turn 1 holds TURN_SECRET), s-gone, s-other and s-desc (its turn 0 holds
    DESCRIPTION_SECRET, which the heuristic extractor's description of PaymentGateway quotes);
    ``redacted``: the same turns, under the same ids, with the secrets taken out."""
    sessions = [*_sessions(), *_described_session()]
    for session in sessions if redacted else ():
        for turn in session["turns"]:  # type: ignore[union-attr]
            for secret in SECRETS:
                turn["text"] = turn["text"].replace(secret, "[redacted]")
    return sessions


async def _rewritten(settings: Settings, tmp_path: Path) -> None:
    """The sessions extracted, then their turns written again without the secrets — deleted and
    added under their ids, as ``rem-cycle import`` of the corrected file does (an upsert in place
    waits for the next full scan: tests/test_inplace.py)."""
    await _seed(settings, _written(redacted=False), tmp_path)
    first = await _cycle(settings)
    assert "erased" not in first.phases["finalize"]  # nothing was deleted yet
    held = rows_holding(settings, TURN_SECRET)
    assert any(row.startswith("recall_turns: ") for row in held), held  # the turn's words, for recall
    assert any(row.startswith("nodes: CLASS:PaymentGateway ") for row in rows_holding(settings, DESCRIPTION_SECRET))
    if settings.database_url is None:
        assert all(_files_holding(settings.data_dir, secret) for secret in SECRETS)
    await _seed(settings, _written(redacted=True), tmp_path)


def _erased_from_the_files(settings: Settings, result: CycleResult, vacuumed: int) -> None:
    """No table and no file of the data dir (but Chroma's) holds a secret (on PostgreSQL: the
    erase vacuumed ``nodes`` since ``vacuumed``), ``result``'s finalize erased, nothing is due."""
    for secret in SECRETS:
        assert rows_holding(settings, secret) == [], secret
        if settings.database_url is None:
            assert _files_holding(settings.data_dir, secret) == [], secret
    if settings.database_url is not None:
        assert _vacuum_count(settings, "nodes") > vacuumed
    assert result.phases["finalize"]["erased"] is True
    assert _erase_due(settings) == 0


@pytest.mark.both_backends
async def test_turns_rewritten_without_their_secrets_leave_the_database_files_in_the_cycle_that_extracts_them_again(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    await _rewritten(settings, tmp_path)
    vacuumed = _vacuum_count(settings, "nodes") if database_url else 0

    result = await _cycle(settings)

    assert result.phases["ingest"]["sessions_synced"] == 2 and result.phases["extract"]["sessions_digested"] == 2
    _erased_from_the_files(settings, result, vacuumed)
    assert "erased" not in (await _cycle(settings)).phases["finalize"]  # settled: an idle cycle does not erase


@pytest.mark.both_backends
async def test_what_the_extraction_said_of_a_rewritten_turn_is_erased_by_the_cycle_that_extracts_it_again_later(
    settings: Settings, database_url: str | None, tmp_path: Path,
) -> None:
    """The sync and the re-extraction in different runs (here a run of the ingest alone, as the
    batch limit or a follower worker can leave it): each deletion makes an erase due where it
    happens. The first run erases the turns' words it replaced in the recall index; the
    description quoting the old turn is live until the later run extracts the session again, and
    that run erases it."""
    await _rewritten(settings, tmp_path)
    synced = await run_cycle(settings, phases=tuple(p for p in PHASES if p[0] in ("ingest", "finalize")))
    assert synced.outcome == "completed", synced.message
    assert synced.phases["finalize"]["erased"] is True
    assert rows_holding(settings, TURN_SECRET) == []
    if database_url is None:
        assert _files_holding(settings.data_dir, TURN_SECRET) == []
    assert rows_holding(settings, DESCRIPTION_SECRET)  # what the extraction said: live until it is redone
    vacuumed = _vacuum_count(settings, "nodes") if database_url else 0

    result = await _cycle(settings)

    assert result.phases["extract"]["sessions_digested"] == 2
    _erased_from_the_files(settings, result, vacuumed)


def test_a_rewritten_turn_names_the_session_whose_extraction_quoted_its_old_words() -> None:
    """Which extraction's next commit erases: the session the turn was in — another one when the
    turn moved with its new words. A rewrite of its metadata alone replaces no words."""
    before = memory_node(MemoryRow("m-1", "The key is zqold1.", {"sessionId": "s-a", "turnIndex": 0}), marker=LIVE_MARKER)
    existing = {before.id: before}

    def replaced(session_id: str, text: str, turn_index: int = 0) -> dict[str, set[str]]:
        row = MemoryRow("m-1", text, {"sessionId": session_id, "turnIndex": turn_index})
        return plan_session_sync(session_id, [row], None, existing)[3].text_replaced

    assert replaced("s-a", "The key is [redacted].") == {"s-a": {"memory:m-1"}}
    assert replaced("s-b", "The key is [redacted].") == {"s-a": {"memory:m-1"}}  # moved and rewritten
    assert replaced("s-a", "The key is zqold1.", turn_index=1) == {}  # its metadata only
    assert replaced("s-b", "The key is zqold1.") == {}  # moved with the same words
