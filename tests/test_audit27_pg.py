"""The twenty-sixth session's PostgreSQL bounds, attacked (audit27): migration 30 indexes the first
INDEXED_TEXT_MOST characters of each text, but a session's ``search`` vector is its title's and its
summary's together, and a ``tsvector`` holds at most 1 MB of words whatever its columns. Real
SQLite files, the test PostgreSQL server, real Chroma and the real cycle."""

from __future__ import annotations

import random

import pytest

from config import Settings
from store.backend import open_database
from store.chroma import ChromaStore
from store.db import SEARCH_SHARE_VERSION
from tests.migrations_support import rolled_back
from tests.test_recall import ask
from worker.cycle import run_cycle

# Characters whose folded form (compatibility decomposition) is the longest inside a word: an
# Arabic ligature of a word (``ﷲ`` is ``الله``, 8 bytes) or a Tibetan vowel sign (9 bytes).
EXPANDING = [chr(c) for c in range(0xFDF2, 0xFDFD) if c != 0xFDFA] + ["\u0f77", "\u0f79"]


def expanding_words(seed: int, first: str, chars: int) -> str:
    """``first``, then distinct nine-character words of :data:`EXPANDING` to ``chars`` characters:
    about 7 bytes of words a character once folded, the most any text reaches."""
    draw, seen, words = random.Random(seed), set(), [first]
    while sum(len(w) + 1 for w in words) < chars:
        word = "".join(draw.choice(EXPANDING) for _ in range(9))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return " ".join(words)[:chars]


@pytest.mark.both_backends
@pytest.mark.parametrize("upgraded", [False, True], ids=["fresh", "upgraded"])
async def test_a_session_whose_title_and_summary_are_both_long_is_ingested(settings: Settings, backend: str, upgraded: bool) -> None:
    """A summary row whose title and summary are each 100,000 characters of words that fold long
    (each within INDEXED_TEXT_MOST, what migration 30 indexes of a text): PostgreSQL's
    ``recall_sessions.search`` holds both, 1.4 MB of words, and refused the row ("string is too long
    for tsvector (1410862 bytes, max 1048575 bytes)" on ``main`` 8bba9ad): the session failed its
    sync at every cycle, SQLite took it. Now the columns of a row share the bound (migration 32:
    ``upgraded``, a graph of schema 30 opened again): the session is ingested on both engines, and
    found by a word of its title's start and one of its summary's start."""
    if upgraded:
        open_database(settings).close()
        rolled_back(settings, backend, to=SEARCH_SHARE_VERSION - 1)
    title, summary = expanding_words(1, "osprey", 100_000), expanding_words(2, "heronry", 100_000)
    await ChromaStore(settings).upsert(settings.memory_collection, ["long-t0"], ["the birds nest"], [
        {"sessionId": "long", "turnIndex": 0, "role": "user", "createdAt": "2026-11-01T10:00:00Z"}])
    await ChromaStore(settings).upsert(settings.session_collection, ["summary_long"], [summary], [
        {"sessionId": "long", "title": title, "createdAt": "2026-11-01T10:00:00Z"}])
    result = await run_cycle(settings)
    assert result.phases["ingest"]["sessions_failed"] == 0, result.phases["ingest"].get("session_failures")
    for word in ("osprey", "heronry"):
        assert [s["id"] for s in ask(settings, word, signals=("keyword",), budget_tokens=200_000)["sessions"]] == ["session:long"], word
