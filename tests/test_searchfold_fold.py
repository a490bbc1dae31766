"""Search and recall for people who do not write ASCII (searchfold): one folding rule
(store/textfold.py) for case and accents, the same on SQLite and PostgreSQL — recall, MCP
``search_nodes`` and ``rem-cycle search`` — over real databases written through the real stores."""

from __future__ import annotations

import json
import sys
import unicodedata
from typing import Any

import pytest

from config import Settings
from pipelines.recall import RecallRequest, query_terms, recall
from store.backend import open_database
from store.graph import GraphStore, Node
from store.recall_index import RecallIndex, TurnRecord
from store.textfold import CASED_END, fold, search_text
from worker.knowledge import search_graph
from worker.recall import search_nodes

# One turn per script, and the queries (another case, another accent, no accent, a word inside a
# sentence written without spaces) that must find it.
TURNS = {
    "de": "Die Straße am Bahnhof ist gesperrt.",
    "fr": "Une ÉCOLE à Paris ouvre en septembre.",
    "el": "Η ΟΔΟΣ Ερμού είναι κλειστή.",
    "tr": "İstanbul toplantısı perşembe günü.",
    "ru": "Новогодняя Ёлка на площади.",
    "ja": "東京都に住んでいます",
    "zh": "我喜欢北京的秋天",
    "hi": "मुझे किताब पढ़ना पसंद है",
    "ar": "ذهبت إلى مَكْتَبَة الجامعة",
    "th": "ผมชอบกินข้าวเหนียว",
    "fw": "ＡＣＭＥ Corporation invoice",
    "lig": "The ﬁnal ofﬁce memo",
}
QUERIES = [
    ("STRASSE", "de"), ("strasse", "de"), ("straße", "de"),
    ("école", "fr"), ("ecole", "fr"), ("Ecole", "fr"), ("ÉCOLE", "fr"), ("e\u0301cole", "fr"),
    ("οδος", "el"), ("ΟΔΟΣ", "el"), ("ερμου", "el"), ("ΕΡΜΟΎ", "el"),
    ("istanbul", "tr"), ("ISTANBUL", "tr"),
    ("елка", "ru"), ("ёлка", "ru"), ("ЁЛКА", "ru"),
    ("東京", "ja"), ("京都に", "ja"), ("北京", "zh"), ("秋天", "zh"),
    ("किताब", "hi"), ("पढ़ना", "hi"),
    ("مكتبة", "ar"), ("مَكْتَبَة", "ar"),
    ("ชอบกิน", "th"),
    ("acme", "fw"), ("ＡＣＭＥ", "fw"), ("office", "lig"), ("final", "lig"),
]


def _index_turns(settings: Settings) -> None:
    db = open_database(settings)
    try:
        RecallIndex(db).index_turns(
            TurnRecord(f"memory:{key}", "session:s1", i, "user", "2026-11-01T10:00:00.000Z", text, "carol")
            for i, (key, text) in enumerate(TURNS.items())
        )
    finally:
        db.close()


def _keyword_hits(settings: Settings, query: str, **options: Any) -> list[str]:
    db = open_database(settings, readonly=True)
    try:
        answer = recall(RecallRequest(query=query, **options), source=RecallIndex(db), signals=("keyword",)).as_dict()
    finally:
        db.close()
    return [t["memory_id"].removeprefix("memory:") for t in answer["turns"]]


@pytest.mark.both_backends
def test_recall_finds_a_word_whatever_its_case_accents_or_script_on_both_engines(settings: Settings) -> None:
    # Before: PostgreSQL folded no accent ("ecole" missed "ÉCOLE"), neither engine folded "ß"
    # (and "straße" was asked as "strasse", so it missed "Straße" everywhere), a sentence of
    # Chinese or Japanese was one word (東京 missed 東京都に住んでいます), the query split a Hindi
    # word at its vowel sign, and Arabic harakat, Cyrillic ё, full-width letters and ligatures
    # were letters of their own.
    _index_turns(settings)
    missed = [(query, want, found) for query, want in QUERIES if want not in (found := _keyword_hits(settings, query))]
    assert missed == []
    # Folding finds more, not everything: each query found its own turn first.
    wrong_first = [(query, found[0]) for query, want in QUERIES if (found := _keyword_hits(settings, query))[0] != want]
    assert wrong_first == []


@pytest.mark.both_backends
def test_both_engines_fold_every_character_as_the_rule_does(settings: Settings) -> None:
    # The rule is Python's (store.textfold); PostgreSQL's rem_fold is ICU's lower-casing plus the
    # rule's own tables, and SQLite calls Python. Every character before CASED_END, alone and in
    # words (the ASCII ones take a short way on both).
    chars = [chr(c) for c in range(1, CASED_END) if not 0xD800 <= c <= 0xDFFF]
    changed = [c for c in chars if fold(c) != c or search_text(c) != c]
    words = ["Ǆemal ĲSSELMEER", "ΆΈΉ ΰ ς Σ ΟΔΟΣ", "ﬃ ﬆ ǰ", "e\u0301\u0327 a\u0308", "한국어 カﾞ が", "İI ıi", "ẞ ß SS",
             "Plain ASCII, MIXED Case: 42!", "ᏣᎳᎩ ꮳꮃꭹ"]
    samples = chars + words
    db = open_database(settings)
    try:
        rows = db.query(f"SELECT value, rem_fold(value), rem_search_text(value), {db.dialect.fold('value')} FROM json_each(?)",
                        (json.dumps(samples),))
    finally:
        db.close()
    differ = [(r[0], r[1], fold(r[0])) for r in rows if (r[1], r[2], r[3]) != (fold(r[0]), search_text(r[0]), fold(r[0]))]
    assert len(rows) == len(samples) and len(changed) > 3_000
    assert differ == []


def test_the_rule_folds_case_and_accents_and_keeps_letters_other_marks_make() -> None:
    assert {fold(w) for w in ("École", "ECOLE", "e\u0301cole", "ÉCOLE")} == {"ecole"}
    assert fold("STRASSE") == fold("Straße") == fold("STRAẞE") == "strasse"
    assert fold("ΟΔΟΣ") == fold("οδος") == fold("ΌΔΟΣ") == "οδοσ"
    assert fold("İstanbul") == fold("ISTANBUL") == "istanbul" and fold("ıstanbul") == "ıstanbul"  # no Turkish rule
    assert fold("ЁЛКА") == "елка" and fold("مَكْتَبَة") == "مكتبة" and fold("ＡＣＭＥ") == "acme"
    # Marks that make another letter stay: Japanese voicing, Devanagari vowel signs, Hangul.
    assert fold("が") == "が" and fold("किताब") == "किताब" and fold("한국어") == "한국어"
    assert search_text("東京都") == " 東  京  都 " and search_text("Tokyo") == "tokyo"
    # Case folding's output needs no second pass (postgres_functions relies on it), and nothing
    # past CASED_END has a case.
    assert all(fold(chr(c)) == chr(c).casefold() for c in range(CASED_END, sys.maxunicode + 1)
               if chr(c).isprintable() and unicodedata.normalize("NFKD", chr(c)) == chr(c))


def test_query_words_keep_marks_and_cut_spaceless_scripts_into_pairs() -> None:
    assert query_terms("किताब पढ़ना") == ["किताब", "पढ़ना"]
    assert query_terms("東京都に住む") == ["東京", "京都", "都に", "に住", "住む"]
    assert query_terms("京") == ["京"]
    # Spellings that fold alike are one term (the index cannot tell them apart).
    assert query_terms("Café cafe CAFE\u0301 Straße STRASSE") == ["café", "straße"]


def _graph(settings: Settings) -> None:
    nodes = [
        Node("ORG:ecole-polytechnique", "ORG", "École Polytechnique", {"aliases": ["X"]}),
        Node("PLACE:strasse", "PLACE", "Karl-Marx-Straße", {}),
        Node("PLACE:odos", "PLACE", "ΟΔΟΣ Ερμού", {}),
        Node("PLACE:tokyo", "PLACE", "東京都庁", {}),
        Node("PERSON:zoe", "PERSON", "Zoë", {"aliases": ["ZOË MÜLLER"]}),
    ]
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes(nodes)
        with db.transaction() as conn:
            conn.executemany(
                "INSERT INTO node_points(node_id, anchor, memory_id, evidence, observed_at, extracted_for) VALUES (?, ?, ?, ?, ?, ?)",
                [(n.id, "session:s1", "memory:m1", n.name, "2026-11-01T10:00:00.000Z", "test") for n in nodes],
            )
    finally:
        db.close()


@pytest.mark.both_backends
def test_search_and_mcp_search_nodes_fold_names_and_aliases_alike(settings: Settings) -> None:
    # `rem-cycle search` compared with LIKE (SQLite: ASCII case only) or ILIKE (PostgreSQL: the
    # locale's case, no accents): "ecole" missed "École", "STRASSE" missed "Straße" on both, and
    # "ΟΔΟΣ" missed "οδος" on SQLite. MCP `search_nodes` (the full-text index) missed them on
    # PostgreSQL.
    _graph(settings)
    cases = {"ecole": "ORG:ecole-polytechnique", "ÉCOLE POLY": "ORG:ecole-polytechnique", "strasse": "PLACE:strasse",
             "KARL-MARX-STRASSE": "PLACE:strasse", "οδος": "PLACE:odos", "ερμου": "PLACE:odos", "東京": "PLACE:tokyo",
             "zoe": "PERSON:zoe", "zoe muller": "PERSON:zoe"}
    found = {query: [row["id"] for row in search_graph(settings, query)] for query in cases}
    assert {q: ids[:1] for q, ids in found.items()} == {q: [want] for q, want in cases.items()}
    words = {"ecole": "ORG:ecole-polytechnique", "STRASSE": "PLACE:strasse", "ΕΡΜΟΥ": "PLACE:odos",
             "東京都": "PLACE:tokyo", "ZOE": "PERSON:zoe"}
    served = {query: [n["id"] for n in search_nodes(settings, query)["nodes"]] for query in words}
    assert {q: ids[:1] for q, ids in served.items()} == {q: [want] for q, want in words.items()}
