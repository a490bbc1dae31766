"""PostgreSQL folds a Hangul filler U+11A7 after a syllable as the rule does (audit28, migration
34): its ``normalize(…, NFC)`` composed ``가`` and a following U+11A7 into ``가`` alone, where
Python's rule (store.textfold.fold) keeps both. Real SQLite files, the test PostgreSQL server,
real Chroma and the real cycle."""

from __future__ import annotations

import pytest

from config import Settings
from store.backend import open_database
from store.chroma import ChromaStore
from store.db import FOLD_FILLER_VERSION
from store.textfold import fold, search_text
from tests.migrations_support import roll_back
from tests.test_recall import ask
from worker.cycle import run_cycle

FILLED, BARE = "\uac00\u11a7", "\uac00"  # 가 and U+11A7; 가 alone
TURNS = {"hangul-t0": f"the {FILLED} stone", "hangul-t1": f"the {BARE} stone"}
# Text the engines' functions are compared on: the filler after a syllable, after the jamo of one,
# alone, twice, between accents and ligatures (which the rule folds around it).
TEXTS = [FILLED, "\u1100\u1161\u11a7", "\u11a7", f"{FILLED}\u11a7{BARE}", f"ÉCOLE {FILLED}\u0301 ﬁ", f"\u11a7\u0301a{FILLED}"]


def _found(settings: Settings) -> dict[str, list[str]]:
    """Which turns a keyword query of each word finds."""
    return {word: sorted(t["text"] for t in ask(settings, word, signals=("keyword",))["turns"]) for word in (FILLED, BARE)}


@pytest.mark.both_backends
@pytest.mark.parametrize("upgraded", [False, True], ids=["fresh", "upgraded"])
async def test_a_hangul_filler_after_a_syllable_is_folded_and_found_alike(settings: Settings, backend: str, upgraded: bool) -> None:
    """``가ᆧ`` and ``가`` are two words on both engines: each query finds its own turn only, and
    ``rem_fold``/``rem_search_text`` in SQL equal the Python rule on text holding U+11A7. On ``main``
    PostgreSQL folded both turns to ``가``: each query found both (SQLite one each). ``upgraded``: a
    graph of the schema before migration 34 whose turns were indexed by the old functions (which
    the test checks drop the filler); opening it again makes those rows' columns again."""
    await ChromaStore(settings).upsert(settings.memory_collection, list(TURNS), list(TURNS.values()), [
        {"sessionId": "hangul", "turnIndex": n, "role": "user", "createdAt": "2026-11-01T10:00:00Z"} for n in range(len(TURNS))])
    result = await run_cycle(settings)
    assert result.phases["ingest"]["sessions_failed"] == 0, result.phases["ingest"]
    if upgraded:
        db = open_database(settings)
        try:
            with db.transaction() as conn:
                roll_back(conn, backend, to=FOLD_FILLER_VERSION - 1)
                conn.execute("UPDATE recall_turns SET text = text")  # indexed again by the old functions
            old = db.query("SELECT rem_fold(?)", (FILLED,))[0][0]
            assert old == (BARE if backend == "postgresql" else FILLED)  # the old functions are back
        finally:
            db.close()
        open_database(settings).close()  # migrates it
    assert _found(settings) == {FILLED: [TURNS["hangul-t0"]], BARE: [TURNS["hangul-t1"]]}
    db = open_database(settings, readonly=True)
    try:
        folded = [tuple(db.query("SELECT rem_fold(?), rem_search_text(?)", (text, text))[0]) for text in TEXTS]
    finally:
        db.close()
    assert folded == [(fold(text), search_text(text)) for text in TEXTS]
