"""Recall and MCP ``search_nodes`` asked what users who do not write English ask, adversarially
(searchfold): stop words only, hostile characters, very long queries — on both engines, which must
answer alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from config import Settings
from pipelines.recall import MAX_QUERY_CHARS, SIGNALS, STOPWORDS, RecallInputError, RecallRequest, recall
from store.backend import open_database
from store.recall_index import RecallIndex, TurnRecord
from tests.test_mcp import stdio_params, text_of
from tests.test_recall import build
from worker.recall import search_nodes

TURNS = {
    "a": "the cat sat on the mat and said hello",
    "b": "what did she say about the budget of 1⁄2",
    "c": "東京都に住んでいます",
    "d": "party 🎉 tonight",
    "e": "صلى الله عليه وسلم ﷺ",
    "f": "x² and ½ cup of flour",
    "g": "again and again because of himself",
}


def _answers(settings: Settings, queries: list[str], signals: tuple[str, ...] = SIGNALS) -> dict[str, Any]:
    db = open_database(settings)
    try:
        index = RecallIndex(db)
        if not index.counts()["recall_turns"]:
            index.index_turns(TurnRecord(f"memory:{k}", "session:s1", i, "user", "2026-11-01T10:00:00.000Z", text, "carol")
                              for i, (k, text) in enumerate(TURNS.items()))
        answers: dict[str, Any] = {}
        for query in queries:
            answer = recall(RecallRequest(query=query), source=index, signals=signals).as_dict()
            answers[query] = ([t["memory_id"].removeprefix("memory:") for t in answer["turns"]], answer["signals"]["terms"]["used"])
        return answers
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_query_of_stop_words_only_finds_nothing_by_keyword_on_either_engine(settings: Settings) -> None:
    # SQLite matched a query made only of stop words ("the of and" listed every turn holding
    # "the"), while PostgreSQL's index holds no English stop words and found nothing: the same
    # question, two answers. PostgreSQL's stop words that recall did not know ("because",
    # "himself") were matched on SQLite only, even beside other words.
    answers = _answers(settings, ["the of and", "what did she say", "because himself", "again because cat"], signals=("keyword",))
    assert answers == {"the of and": ([], []), "what did she say": ([], []), "because himself": ([], []),
                       "again because cat": (["a"], ["cat"])}


def test_every_stop_word_postgresql_drops_is_a_recall_stop_word() -> None:
    # The list PostgreSQL's 'english' configuration drops (its tsearch_data/english.stop).
    postgres = set("""i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her
        hers herself it its itself they them their theirs themselves what which who whom this that these those am is are
        was were be been being have has had having do does did doing a an the and but if or because as until while of at
        by for with about against between into through during before after above below to from up down in out on off
        over under again further then once here there when where why how all any both each few more most other some such
        no nor not only own same so than too very s t can will just don should now""".split())
    assert postgres - STOPWORDS == set()


@pytest.mark.both_backends
def test_hostile_characters_and_long_queries_get_an_answer_never_an_error(settings: Settings) -> None:
    # Each of these is a word to fold, a symbol that is no word, or a query at the size limit; an
    # FTS5 table without positions refused a quoted string its tokenizer cut in two ("1⁄2" is what
    # "½" decomposes to) with "phrase queries are not supported".
    queries = ["½", "1⁄2", "x²", "ﷺ", "\u0301", "🎉", "👨\u200d👩\u200d👧", "\u202eevil", "東" * MAX_QUERY_CHARS,
               "budget " * (MAX_QUERY_CHARS // 7), " ".join(f"w{i}" for i in range(1_000))[:MAX_QUERY_CHARS]]
    answers = _answers(settings, queries)
    assert set(answers["½"][0][:2]) == {"f", "b"}  # "½" and "1⁄2" both fold to the words 1 and 2
    assert answers["1⁄2"][1] == ["1", "2"] and "b" in answers["1⁄2"][0]
    assert answers["x²"][0][0] == "f" and answers["ﷺ"][0][0] == "e"
    assert answers["\u0301"] == ([], []) and answers["🎉"] == ([], []) and answers["👨\u200d👩\u200d👧"] == ([], [])
    turns, used = answers["東" * MAX_QUERY_CHARS]
    assert turns[0] == "c" and used == ["東東"]
    assert answers["budget " * (MAX_QUERY_CHARS // 7)][0][0] == "b"
    assert len(answers[queries[-1]][1]) == 24
    with pytest.raises(RecallInputError, match="at most 4000"):
        _answers(settings, ["東" * (MAX_QUERY_CHARS + 1)])
    served = search_nodes(settings, "½ 🎉 " + "東" * 100)
    assert served["nodes"] == [] and served["terms"][:2] == ["½", "東東"]


WORLD = [{
    "sessionId": "carol-s1", "title": "Reise nach Tōkyō", "createdAt": "2026-11-01T10:00:00Z", "userId": "carol",
    "summary": "Carol plant die Reise: Straße, Hotel, 会議.",
    "turns": [
        {"id": "c1", "role": "user", "createdAt": "2026-11-01T10:00:00Z", "text": "Das Hotel liegt an der Friedrichstraße."},
        {"id": "c2", "role": "assistant", "createdAt": "2026-11-01T10:01:00Z", "text": "東京都庁で会議があります。"},
        {"id": "c3", "role": "user", "createdAt": "2026-11-01T10:02:00Z", "text": "ذهبت إلى مَكْتَبَة الجامعة 📚"},
    ],
}]


async def test_mcp_recall_and_search_nodes_answer_non_latin_queries_end_to_end(settings: Settings, tmp_path: Path) -> None:
    # The real path: import, a cycle that ingests the turns into the index, `rem-cycle mcp` over
    # stdio with the SDK's client; answers are JSON with the scripts intact (no \u escapes lost).
    await build(settings, tmp_path, WORLD)
    async with Client(stdio_params(settings, REM_MCP_USER="carol")) as client:
        found = {}
        for query in ("FRIEDRICHSTRASSE", "会議", "مكتبة", "东京"):
            answer = await client.call_tool("recall", {"query": query})
            assert not answer.is_error, text_of(answer)
            found[query] = [t["memory_id"] for t in answer.structured_content["turns"] if "keyword" in t["signals"]]
        # 东 is simplified Chinese, 東 Japanese: no rule folds one script's character into another's.
        assert found == {"FRIEDRICHSTRASSE": ["memory:c1"], "会議": ["memory:c2"], "مكتبة": ["memory:c3"], "东京": []}
        answer = await client.call_tool("recall", {"query": "会議"})
        assert "東京都庁で会議があります。" in {t["text"] for t in answer.structured_content["turns"]}
        assert answer.structured_content["sessions"][0]["title"] == "Reise nach Tōkyō"
        for query in ("📚", "the of and", "\u0301"):
            empty = await client.call_tool("search_nodes", {"query": query})
            assert not empty.is_error and empty.structured_content["nodes"] == [], query
