"""PostgreSQL's text functions (``rem_fold``, ``rem_search_text``, ``rem_index_text``, written by
store.textfold.postgres_functions) agree with the Python rule (``fold``, ``search_text``,
``index_text``) on mixed text, not only one character at a time (tests/test_searchfold_fold.py,
tests/test_pgfts26.py check every character alone): marks in either order after their base,
ligatures and characters that fold to several, Hangul jamo, scripts written without spaces, emoji
sequences, full-width forms, punctuation inside words — what recall's index holds on one engine
must be what it holds on the other. Hypothesis draws the texts (derandomized: the same draws on
every run); the test PostgreSQL server runs the functions."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from config import Settings
from store.backend import open_database
from store.textfold import fold, index_text, search_text

# Pieces whose neighbours change what they become: combining marks (whose canonical order NFC and
# NFKD change), characters that decompose or fold to several (ligatures, ß, ŉ, ǰ, Ǆ, İ), final
# sigma, Hangul syllables and their conjoining jamo, a half-width katakana and its voicing mark,
# scripts without spaces, Indic vowel signs, emoji with joiners and selectors, full-width and
# mathematical letters, digits of other scripts, and the punctuation a path or a version holds.
PIECES = [
    "a", "Z", "e", "I", "i", "o", "S", "s", "0", "9", "_", "-", ".", "/", "@", ":", "'", " ", "\t", "\n",
    "\u0301", "\u0323", "\u0308", "\u0327", "\u0345", "\u0342", "\u20dd", "\u200d", "\ufe0f", "\u00ad",
    "é", "É", "ǅ", "Ǆ", "ǰ", "ŉ", "ß", "ẞ", "İ", "ı", "ς", "Σ", "ΐ", "ﬁ", "ﬃ", "ﬆ", "Ĳ", "ŀ", "ᾳ", "ᾼ", "ﬀ",
    "한", "ᄀ", "ᅡ", "ᆨ", "ｶ", "ﾞ", "が", "東", "京", "都", "我", "ผ", "ม", "ชอบ", "क", "ि", "्", "ष", "ذ", "مَ",
    "Ａ", "ｂ", "１", "𝐀", "𝔞", "٣", "۴", "१", "½", "²", "Ⅻ", "№", "℃", "µ", "Å", "Ω", "K",
    "👍", "🏽", "👨", "👩", "👧", "🇫", "🇷", "©", "™", "…", "–", "—", "«", "»", "\u3000", "\u00a0",
]
# No NUL: PostgreSQL's text holds none, and what is stored never has one (store.chroma.without_nul).
TEXTS = st.lists(st.sampled_from(PIECES) | st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                 min_size=1, max_size=12).map("".join)


@pytest.mark.both_backends
# The fixtures are only read (a database opened per draw): nothing carries over between draws.
@hsettings(max_examples=25, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(TEXTS, min_size=40, max_size=40))
def test_postgresql_folds_and_cuts_mixed_text_as_the_rule_does(settings: Settings, backend: str, texts: list[str]) -> None:
    if backend != "postgresql":
        pytest.skip("the functions are PostgreSQL's; SQLite calls the Python rule itself")
    db = open_database(settings)
    try:
        rows = db.query("SELECT value, rem_fold(value), rem_search_text(value), rem_index_text(value) FROM json_each(?)",
                        (json.dumps(texts),))
    finally:
        db.close()
    assert len(rows) == len(texts)
    differ = [(r[0], (r[1], r[2], r[3]), (fold(r[0]), search_text(r[0]), index_text(r[0])))
              for r in rows if (r[1], r[2], r[3]) != (fold(r[0]), search_text(r[0]), index_text(r[0]))]
    assert differ == []
