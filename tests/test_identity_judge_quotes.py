"""The identity auditor (``REM_LLM_JUDGE``) is shown where each name is said (evidence31): each node
of an identity question comes with a few bounded quotes — the incoming node's from the lines of the
session being committed, each existing option's from the earliest turns the graph grounds it in.
Names alone do not tell `Ross` / `Ross Geller` (one person) from `Ross` / `Ross Tillman` (two).
Real cycles over real Chroma and a real loopback model server that records each request; the
graph on real SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.identity import QUOTE_CHARS, QUOTES_PER_NODE, NodeRef, node_quotes, quote
from store.backend import open_database
from store.graph import GraphStore, Node
from tests.conftest import add_nodes
from tests.llm_server import LLMServer, Reply
from tests.test_forget import _session
from tests.test_migrations_identity_verdicts import _import, model, questions
from worker.cycle import run_cycle

# Said in the earlier session about the file, and only there.
EARLIER = "See store/alpha.py: the drain worker keeps its queue offsets there, says Rachel."
# Said in the session being committed about the bare name, and only there.
LATER = "Then alpha.py changed: Monica moved the offsets into the drain worker's own table."
# A turn far longer than a quote, naming the file in its middle.
PADDING = "words that say nothing of any file " * 400


def judged(settings: Settings, server: LLMServer) -> Settings:
    return settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": True, "llm_max_retries": 0})


def shown(server: LLMServer) -> list[dict[str, Any]]:
    """The identity questions' user payloads, as the model received them."""
    return [json.loads(prompt) for prompt in questions(server)]


@pytest.mark.both_backends
async def test_the_auditor_reads_each_name_where_it_is_said(settings: Settings, tmp_path: Path) -> None:
    """Sessions "full" and, an hour later, "huge" say `store/alpha.py` (a plain line; the middle of
    a huge turn); session "bare" says `alpha.py`: a `file-basename` candidate, asked of the model.
    Its question shows the bare name with the line of "bare" that says it, and the full path with
    the earliest turns that ground it, earliest first — the huge one cut around the name, not sent
    whole. Before, the model saw ids, types, names and aliases only."""
    with LLMServer(default=Reply(model)) as server:
        mine = judged(settings, server)
        huge = f"{PADDING}Later on store/alpha.py came up again. {PADDING}"
        await _import(mine, tmp_path / "full.jsonl", [_session("full", "2026-11-01T10:00:00Z", [EARLIER]),
                                                      _session("huge", "2026-11-01T11:00:00Z", [huge])])
        assert (await run_cycle(mine)).outcome == "completed"
        await _import(mine, tmp_path / "bare.jsonl", [_session("bare", "2026-11-02T10:00:00Z", ["Nothing about files here.", LATER])])
        assert (await run_cycle(mine)).outcome == "completed"
        asked = shown(server)

    assert len(asked) == 1, asked
    (question,) = asked
    assert question["new"]["name"] == "alpha.py" and question["new"]["quotes"] == [LATER]
    (existing,) = question["existing"]
    assert existing["id"] == "FILE:store/alpha.py"
    assert existing["quotes"][0] == EARLIER  # the earliest turn first
    cut = existing["quotes"][1]
    assert "store/alpha.py came up again" in cut and len(cut) <= QUOTE_CHARS < len(huge)
    assert cut.startswith("…") and cut.endswith("…")
    assert all(len(q) <= QUOTE_CHARS for q in existing["quotes"]) and len(existing["quotes"]) <= QUOTES_PER_NODE
    assert len(questions(server)[0]) < 4 * QUOTE_CHARS * QUOTES_PER_NODE  # the question, not the turn
    db = open_database(settings)
    try:  # the model's "link" was applied: one node with both names
        node = GraphStore(db).get_node("FILE:alpha.py")
        assert node is not None and GraphStore(db).get_node("FILE:store/alpha.py") is None
        assert {"alpha.py", "store/alpha.py"} <= set(node.properties["aliases"])
    finally:
        db.close()


async def test_a_node_with_no_readable_source_is_still_asked_about(settings: Settings, tmp_path: Path) -> None:
    """An existing node written by hand (an operator's edit, an older graph) has no provenance:
    the question is asked all the same, its quotes empty, the incoming node's still there, and the
    cycle links as the model says."""
    add_nodes(settings, [Node("FILE:store/alpha.py", "FILE", "store/alpha.py", {})])
    with LLMServer(default=Reply(model)) as server:
        mine = judged(settings, server)
        await _import(mine, tmp_path / "bare.jsonl", [_session("bare", "2026-11-02T10:00:00Z", [LATER])])
        assert (await run_cycle(mine)).outcome == "completed"
        asked = shown(server)

    assert len(asked) == 1, asked
    assert asked[0]["new"]["quotes"] == [LATER]
    assert [(o["id"], o["quotes"]) for o in asked[0]["existing"]] == [("FILE:store/alpha.py", [])]
    db = open_database(settings)
    try:
        graph = GraphStore(db)
        assert graph.get_node("FILE:alpha.py") is not None and graph.get_node("FILE:store/alpha.py") is None
        assert [tuple(r) for r in db.query("SELECT merged_id, into_id, rule FROM merges")] == [("FILE:store/alpha.py", "FILE:alpha.py", "auditor")]
    finally:
        db.close()


def test_a_quote_is_cut_around_the_name_and_bounded() -> None:
    """:func:`pipelines.identity.quote` keeps a short text whole (whitespace collapsed), cuts a long
    one to at most QUOTE_CHARS around the first place a name is said, else from its start; a node
    is shown at most QUOTES_PER_NODE distinct quotes, earliest first."""
    assert quote("Ross  Geller\nsaid hi", ["Ross"]) == "Ross Geller said hi"
    long = "x " * 500 + "then ROSS Tillman walked in " + "y " * 500
    cut = quote(long, ["Ross"])
    assert len(cut) <= QUOTE_CHARS and "ROSS Tillman walked in" in cut and cut[0] == cut[-1] == "…"
    start = quote("Ross " + "z " * 500, ["Nobody"])
    assert start.startswith("Ross z") and len(start) <= QUOTE_CHARS and start.endswith("…") and not start.startswith("…")
    end = quote("z " * 500 + "Ross", ["Ross"])
    assert end.endswith("Ross") and len(end) <= QUOTE_CHARS
    ross = NodeRef("PERSON:Ross", "PERSON", "Ross")
    texts = ["Ross hi", "Ross hi", "", "Ross two", "Ross three", "Ross four"]
    assert node_quotes(ross, texts) == ("Ross hi", "Ross two", "Ross three")[:QUOTES_PER_NODE]


@pytest.mark.parametrize("before", ["Straße ", "İstanbul ", "ﬁle "], ids=["sharp-s", "dotted-I", "ligature"])
def test_a_quote_finds_the_name_after_letters_whose_case_fold_is_longer(before: str) -> None:
    """audit31: the name was looked for in the text's case fold and the text cut at that offset —
    but `ß`, `İ`, `ﬁ` fold to two characters, so after many of them (a German or Turkish turn) the
    cut landed past the name and the quote did not say it."""
    text = before * 150 + "then Ross Geller walked in " + "y " * 300
    cut = quote(text, ["Ross Geller"])
    assert "Ross Geller walked in" in cut and len(cut) <= QUOTE_CHARS


# Each a character as a reader sees it, a cluster of several code points: a letter and its accent,
# a family emoji joined by zero-width joiners, a flag's two halves, a hand and its skin tone, a
# Hangul syllable spelled by its jamo (leading consonant, vowel, trailing consonant), Devanagari
# conjuncts (`क्ष`: ka, virama, ssa; `स्त्री`: sa, virama, ta, virama, ra and a vowel sign).
CHARACTERS = {
    "accent": "e\u0301",
    "family": "👨\u200d👩\u200d👧",
    "flag": "🇩🇪",
    "skin tone": "👍🏽",
    "Hangul jamo": "\u1100\u1161\u11a8",
    "Devanagari conjunct": "\u0915\u094d\u0937",
    "Devanagari conjuncts and a vowel sign": "\u0938\u094d\u0924\u094d\u0930\u0940",
}


@pytest.mark.parametrize("character", CHARACTERS.values(), ids=CHARACTERS.keys())
def test_a_quote_never_cuts_a_character_apart(character: str) -> None:
    """audit31: a cut fell between a letter and its combining mark (the quote began `…́`) or inside
    an emoji joined by zero-width joiners; it now moves to the nearest boundary inside the quote.
    la32out: that boundary was found by a rule of thumb that parted a Hangul syllable's jamo (`ᄀ`
    from `ᅡᆨ`) and an Indic conjunct after its virama (`क्` from `ष`); it is now Unicode's
    (UAX #29), so every cut position is tried with each character at the cut."""
    for n in range(0, 120):
        text = character * n + " Ross " + character * 300
        cut = quote(text, ["Ross"])
        assert len(cut) <= QUOTE_CHARS and "Ross" in cut
        body = cut.strip("…")
        # What is left of the quote, the name taken out, is whole characters only …
        assert body.replace("Ross", "").replace(" ", "").replace(character, "") == "", (n, cut[:12], cut[-12:])
        # … and a cut moved no further than to keep the one character at it whole.
        assert len(body) > QUOTE_CHARS - 2 * len("…") - 2 * len(character)
