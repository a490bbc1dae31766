"""The one rule by which search and recall compare text — case and accents folded — on both engines.

:func:`fold` is the rule: compatibility decomposition (NFKD: ``ﬁ`` is ``fi``, a full-width ``Ａ`` is
``A``), then the marks of :data:`FOLDED_MARKS` dropped (the accents of Latin, Greek and Cyrillic
letters, Arabic harakat and tatweel, Hebrew points: ``é`` is ``e``, ``ё`` is ``е``, ``مَكْتَبَة`` is
``مكتبة``), then Unicode case folding (``ÉCOLE`` is ``école`` is ``ecole``, ``STRASSE`` is
``straße``, ``ΟΔΟΣ`` is ``οδος``, ``İstanbul`` is ``istanbul``), then composed again (NFC), so
that the marks this rule keeps stay on their letters (Japanese ``が``, Devanagari vowel signs,
Hangul syllables). Turkish dotless ``ı`` stays ``ı``: no language-specific rule applies.

:func:`search_text` is what the full-text indexes hold and what queries are matched against: the
fold, with each Han, Hiragana and Katakana character a word of its own, so that a phrase of them
is found inside a sentence written without spaces (:func:`words` splits a query the same way).

A word is a run of the characters of :data:`WORD_CATEGORIES` (letters, digits, marks), the
categories SQLite's tokenizer is given: everything else parts words, so ``store/lazy_queue.py``,
``https://docs.example.com``, ``alice@example.com`` and ``1.2.3`` are words of their parts on both
engines. :func:`index_text` is the indexed text as those words, one space between them: what
PostgreSQL's ``search`` columns are generated from, whose own parser would keep a path, a URL, a
host, an e-mail address or a version as one token (pgfts26).

SQLite gets the rule as SQL functions of each connection (``rem_fold``, ``rem_search_text``:
:func:`store.db.register_functions`; its tokenizer cuts the words); PostgreSQL gets it as SQL
functions written from the same tables (:func:`postgres_functions`), so the two engines fold every
character alike and cut the same words (``tests/test_searchfold_fold.py`` and
``tests/test_pgfts26.py`` compare them character by character).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

# The combining marks that are accents: dropped by :func:`fold`. Other marks (Indic vowel signs,
# Japanese voicing marks, Thai vowels) change the letter and are kept.
FOLDED_MARKS: tuple[tuple[int, int], ...] = (
    (0x0300, 0x036F),  # Combining Diacritical Marks (Latin, Greek, Cyrillic accents)
    (0x0483, 0x0489),  # Cyrillic combining marks
    (0x0591, 0x05BD), (0x05BF, 0x05BF), (0x05C1, 0x05C2), (0x05C4, 0x05C5), (0x05C7, 0x05C7),  # Hebrew points
    (0x0610, 0x061A), (0x064B, 0x065F), (0x0670, 0x0670), (0x06D6, 0x06DC), (0x06DF, 0x06E4),  # Arabic harakat
    (0x06E7, 0x06E8), (0x06EA, 0x06ED), (0x0640, 0x0640),  # ... and tatweel (a letter stretched)
    (0x1AB0, 0x1AFF),  # Combining Diacritical Marks Extended
    (0x1DC0, 0x1DFF),  # Combining Diacritical Marks Supplement
    (0x20D0, 0x20FF),  # Combining Diacritical Marks for Symbols
    (0xFE20, 0xFE2F),  # Combining Half Marks
)
# The Unicode categories of a word's characters (a letter ``L*``, a digit or number ``N*``, a mark
# ``M*``, a private-use character ``Co``): SQLite's tokenizer's ``categories`` (store.db), by which
# punctuation, symbols and spaces part words.
WORD_CATEGORIES: tuple[str, ...] = ("L", "N", "Co", "M")
# The same, as SQLite's tokenizer option reads them (``L* N* Co M*``).
TOKENIZER_CATEGORIES = " ".join(c if len(c) == 2 else f"{c}*" for c in WORD_CATEGORIES)
# Scripts written without spaces between words, each character made a word by :func:`search_text`.
SPACELESS: tuple[tuple[int, int], ...] = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana (with ー)
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x3FFFF),  # CJK Extensions B-H
)


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "[" + "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges) + "]"


_MARKS = re.compile(_char_class(FOLDED_MARKS))
_SPACELESS = re.compile(f"({_char_class(SPACELESS)})")
_SPACELESS_RUN = re.compile(f"({_char_class(SPACELESS)}+)")


def fold(text: str) -> str:
    """``text`` with case and accents folded (the module's rule). Pure."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFC", _MARKS.sub("", unicodedata.normalize("NFKD", text)).casefold())


def search_text(text: str) -> str:
    """What the full-text indexes hold for ``text``: :func:`fold`, each character of
    :data:`SPACELESS` a word of its own. Pure."""
    folded = fold(text)
    return folded if folded.isascii() else _SPACELESS.sub(r" \1 ", folded)


def spaceless(word: str) -> bool:
    """Whether ``word`` is written in one of the :data:`SPACELESS` scripts (one of its characters
    is a word). Pure."""
    return _SPACELESS_RUN.fullmatch(word) is not None


def _word_char(char: str) -> bool:
    """Whether ``char`` is part of a word: its category is one of :data:`WORD_CATEGORIES`. Pure."""
    category = unicodedata.category(char)
    return category[0] in WORD_CATEGORIES or category in WORD_CATEGORIES


def _runs(text: str) -> list[str]:
    """The runs of word characters (:func:`_word_char`) in ``text``, in order: its words as the
    full-text tokenizers cut them. Pure."""
    found: list[str] = []
    current: list[str] = []
    for char in [*text, " "]:
        if _word_char(char):
            current.append(char)
        elif current:
            found.append("".join(current))
            current = []
    return found


def words(text: str) -> list[str]:
    """The words of a query, in order: runs of letters, digits and combining marks (a Devanagari
    vowel sign is part of its word, where ``\\w`` split ``किताब`` in two), a run of
    :data:`SPACELESS` characters cut into its overlapping pairs (``東京都`` is ``東京``, ``京都``:
    a sentence written without spaces is not one word) or kept whole when it is one character. Pure."""
    found: list[str] = []
    for word in _runs(unicodedata.normalize("NFC", text)):
        for i, part in enumerate(_SPACELESS_RUN.split(word)):  # odd parts are the captured runs
            found += [part[j:j + 2] for j in range(max(1, len(part) - 1))] if i % 2 else [part]
    return [w for w in found if w]


def index_words(text: str) -> list[str]:
    """The words the full-text indexes hold for ``text``: :func:`search_text` cut as the tokenizers
    cut it (``½`` folds to ``1⁄2``, two words; ``recall.py`` is ``recall``, ``py``). Pure."""
    return _runs(search_text(text))


def index_text(text: str) -> str:
    """:func:`index_words` of ``text``, one space between them: what PostgreSQL's ``search``
    columns hold (``rem_index_text``), so that its parser, which reads ``recall.py`` as a host and
    ``store/lazy_queue.py`` as a file name, sees nothing but the words SQLite's tokenizer cuts. Pure."""
    return " ".join(index_words(text))


@functools.cache
def _word_ranges() -> tuple[tuple[int, int], ...]:
    """The code point ranges of the word characters (:func:`_word_char`), all of Unicode: the
    character class of ``rem_index_text`` (0.3 s, paid once where the PostgreSQL functions are
    written)."""
    ranges: list[tuple[int, int]] = []
    start = None
    for code in range(sys.maxunicode + 2):
        if code <= sys.maxunicode and not 0xD800 <= code <= 0xDFFF and _word_char(chr(code)):
            start = code if start is None else start
        elif start is not None:
            ranges.append((start, code - 1))
            start = None
    return tuple(ranges)


# No character from here on has a case (the last are Adlam's, U+1E900-U+1E95F; a test checks it).
CASED_END = 0x20000


def _after_lower() -> tuple[str, str, list[tuple[str, str]]]:
    """What case folding does beyond lower-casing, for the characters left after the decomposition
    and the marks (``casefold(c) == casefold(lower(c))`` for every character, and a lower-cased
    text is made of characters that lower to themselves): ``(from, to)`` of ``translate()`` for
    the one-character folds (``ς`` is ``σ``, ``ϐ`` is ``β``) and the ``replace()`` pairs of the
    longer ones (``ß`` is ``ss``)."""
    source, target, longer = [], [], []
    for code in range(CASED_END):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF or unicodedata.normalize("NFKD", char) != char or _MARKS.match(char):
            continue
        folded = char.casefold()
        if char.lower() != char or folded == char:
            continue
        if len(folded) == 1:
            source.append(char)
            target.append(folded)
        else:
            longer.append((char, folded))
    return "".join(source), "".join(target), longer


# The composition (NFC) of :func:`postgres_functions`. PostgreSQL 15's ``normalize(…, NFC)``
# composes a Hangul syllable without a final consonant (``가``) with a following U+11A7 (a filler
# jamo, which Unicode composes with nothing) into that syllable alone: the U+11A7 was lost, where
# Python keeps it. U+11A7 is a starter that begins no composition, so nothing composes across it:
# the text is composed between its U+11A7s, as the rule composes it (audit28).
HANGUL_FILLER = "\u11a7"
NFC_STEP = (
    "    IF d IS NOT NFC NORMALIZED THEN\n"
    f"        IF strpos(d, chr({ord(HANGUL_FILLER)})) > 0 THEN\n"
    f"            d := (SELECT string_agg(normalize(part, NFC), chr({ord(HANGUL_FILLER)}) ORDER BY n)\n"
    f"                  FROM unnest(string_to_array(d, chr({ord(HANGUL_FILLER)}))) WITH ORDINALITY AS parts(part, n));\n"
    "        ELSE\n            d := normalize(d, NFC);\n        END IF;\n    END IF;\n"
)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@functools.cache
def postgres_functions() -> str:
    """The SQL that defines (or replaces) ``rem_fold(text)``, ``rem_search_text(text)`` and
    ``rem_index_text(text)`` on PostgreSQL (a UTF8 database): :func:`fold`, :func:`search_text` and
    :func:`index_text` written with ``normalize``, ``regexp_replace``, ``lower`` under the ICU root
    collation (``und-x-icu``: Unicode's case mapping, never the server's locale, which in a ``C``
    cluster lowers ASCII only and in a Turkish one lowers ``I`` to ``ı``) and this module's tables
    for what case folding adds and which characters are part of a word (:func:`_word_ranges`, code
    points, never the locale's classes). ASCII text (as many bytes as characters) takes the short
    way, as :func:`fold` does."""
    source, target, longer = _after_lower()
    # Each step is skipped when it would change nothing: translate() reads its whole character
    # list for every character of the text, and NFC costs 10 µs a sentence even when there is
    # nothing to compose (most text, once the accents are gone).
    longer_folds = "".join(f"    d := replace(d, {_literal(char)}, {_literal(folded)});\n" for char, folded in longer)
    steps = (
        f"    d := lower(regexp_replace(normalize(t, NFKD), {_literal(_MARKS.pattern)}, '', 'g') COLLATE \"und-x-icu\");\n"
        f"    IF d ~ {_literal('[' + source + ']')} THEN\n        d := translate(d, {_literal(source)}, {_literal(target)});\n    END IF;\n"
        f"{longer_folds}"
        f"{NFC_STEP}"
    )
    short = 'lower(t COLLATE "C")'
    spaced = f"regexp_replace(d, {_literal(_SPACELESS.pattern)}, ' \\1 ', 'g')"
    # No word character needs escaping in a bracket expression (``]``, ``\``, ``^``, ``-`` part words).
    parting = _literal("[^" + _char_class(_word_ranges())[1:] + "+")

    def words(text: str) -> str:
        return f"btrim(regexp_replace({text}, {parting}, ' ', 'g'), ' ')"

    # Each function holds the whole rule and calls only pg_catalog's: a generated column's function
    # that called another by name failed pg_restore, which runs with an empty search_path.
    return "".join(
        f"CREATE OR REPLACE FUNCTION {name}(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fold$\n"
        "DECLARE\n    d text;\nBEGIN\n"
        f'    IF octet_length(t) = length(t) THEN\n        RETURN {ascii_result};\n    END IF;\n'
        f"{steps}"
        f'    RETURN {result} COLLATE "C";\nEND\n$fold$;\n'
        for name, ascii_result, result in (("rem_fold", short, "d"), ("rem_search_text", short, spaced),
                                           ("rem_index_text", words(short), words(spaced)))
    )
