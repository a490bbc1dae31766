"""Recall's report under a user's scope says nothing about other users' turns (searchfold), on both
engines: the index is written through the real store, recall reads it as the CLI and MCP do."""

from __future__ import annotations

from typing import Any

import pytest

from config import Settings
from pipelines.recall import MATCH_BUDGET, RecallRequest, recall
from store.backend import open_database
from store.recall_index import RecallIndex, TurnRecord


def _turn(memory_id: str, session: str, user: str, index: int, text: str) -> TurnRecord:
    return TurnRecord(memory_id=f"memory:{memory_id}", session_id=f"session:{session}", turn_index=index, role="user",
                      created_at="2026-11-01T10:00:00.000Z", text=text, user_id=user)


def _alice_asks(settings: Settings, query: str) -> dict[str, Any]:
    db = open_database(settings)
    try:
        return recall(RecallRequest(query=query, user="alice"), source=RecallIndex(db)).as_dict()
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_users_term_report_does_not_tell_how_common_a_word_is_in_other_users_turns(settings: Settings) -> None:
    # `signals.terms` listed a word as `common` (and `bm25: false`) when it was in more than
    # MATCH_BUDGET turns of the whole index: alice, asking for "zebra" in her own scope, learnt
    # that other users had written it thousands of times. Counted in her scope, her report is the
    # same whether bob exists or not.
    db = open_database(settings)
    try:
        index = RecallIndex(db)
        index.index_turns([_turn("a1", "alice-s", "alice", 0, "The zebra crossing near the office."),
                           _turn("a2", "alice-s", "alice", 1, "Quarterly invoices are due.")])
        alone = _alice_asks(settings, "zebra invoices")["signals"]["terms"]
        index.index_turns(_turn(f"b{i}", f"bob-{i // 100}", "bob", i % 100, f"zebra note {i}") for i in range(MATCH_BUDGET + 1))
    finally:
        db.close()
    answer = _alice_asks(settings, "zebra invoices")
    assert alone == {"used": ["zebra", "invoices"], "common": [], "bm25": True}
    assert answer["signals"]["terms"] == alone
    assert {t["memory_id"] for t in answer["turns"]} == {"memory:a1", "memory:a2"}
