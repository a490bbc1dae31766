"""The offline, deterministic extractor (the default): patterns instead of a model.

It finds code identifiers (CamelCase classes, ``func()`` methods, ``test_*`` tests), file paths,
URLs, issue references (``#123``) and multi-word proper-noun phrases, and links the entities of one
turn with ``RELATES_TO``. Evidence is always the matched text, so everything it says is grounded.
Explicit ``memory:``/``session:`` references are found for every extractor by
:func:`pipelines.extract.model.find_references`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from pipelines.extract.model import ExtractorReply, UnitTurn, WorkUnit, semantic_node_id
from pipelines.identity import normal_path

HEURISTIC_VERSION = 2
# Entities of one turn linked pairwise: the first few only, so a long tool dump does not turn
# into a clique of hundreds of edges.
MAX_LINKED_PER_TURN = 6
DESCRIPTION_CHARS = 240

_URL = re.compile(r"https?://[^\s`'\"<>()\[\]{}]+")
_PATH = re.compile(r"(?<![\w/.@:-])(?:[\w.-]+/)+[\w.-]*[A-Za-z0-9_-]\.[A-Za-z][A-Za-z0-9]{0,7}\b")
_BARE_FILE = re.compile(
    r"(?<![\w/.-])[\w-]+\.(?:py|pyi|ts|tsx|js|jsx|mjs|md|json|jsonl|ya?ml|toml|sql|go|rs|java|kt|rb|c|h|cc|cpp|hpp|sh|ini|cfg|lock)\b"
)
_METHOD = re.compile(r"(?<![\w.])((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*)\(\)")
_TEST = re.compile(r"(?<![\w.])test_[A-Za-z0-9_]+\b")
_CLASS = re.compile(r"(?<![\w.])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b")
_ISSUE = re.compile(r"(?<![\w&#/])#(\d{1,7})\b")
_PROPER = re.compile(r"(?<![\w.])[A-Z][\w'’]*[a-z][\w'’]*(?:[ \t]+(?:[A-Z][\w'’]*[a-z][\w'’]*|of|for|the))*[ \t]+[A-Z][\w'’]*[a-z][\w'’]*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:]\s+|\n\s*)$")
_STOPWORDS = frozenset(
    "a an and but for if in it its my no not of on or so the then this that these those we you i he she they "
    "our your their yes ok okay sure thanks please also let next now here there what why how when which who "
    "after before because while with without".split()
)
# A proper-noun phrase must keep at least two words after dropping sentence-initial stop words.
_MIN_PHRASE_WORDS = 2

# What is not prose, so never a description: a log line (timestamp or level first), a shell or
# REPL prompt, a stack frame, a diff or table row.
_NOT_PROSE = re.compile(r"^(?:\d{2,4}[-/:.]\d|\[?(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL)\b|[$>#|+-]\s|File \"|at \S+\()")
_MIN_PROSE_WORDS = 4
_MIN_PROSE_LETTERS = 0.6

_CONFIDENCE = {"FILE": 0.8, "ISSUE": 0.8, "METHOD": 0.7, "TEST": 0.7, "CLASS": 0.6, "CONCEPT": 0.4}


@dataclass(frozen=True, slots=True)
class _Mention:
    start: int
    end: int
    node_type: str
    name: str
    quote: str
    tags: tuple[str, ...] = ()


class HeuristicExtractor:
    """Pattern-based extraction; no network, same input → same output."""

    name = "heuristic"

    @property
    def fingerprint(self) -> str:
        return f"heuristic:v{HEURISTIC_VERSION}"

    async def extract(self, unit: WorkUnit) -> ExtractorReply:
        return ExtractorReply(raw=extract_heuristic(unit))


def extract_heuristic(unit: WorkUnit) -> dict[str, Any]:
    """The model-schema reply for ``unit`` (pure)."""
    nodes: dict[str, dict[str, Any]] = {}
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    for turn in unit.turns:
        linked: list[str] = []
        for mention in find_mentions(turn.text):
            node_id = semantic_node_id(mention.node_type, mention.name)
            if node_id is None:
                continue
            evidence = {"turn": turn.number, "quote": mention.quote}
            node = nodes.get(node_id)
            if node is not None and not node["description"]:
                # Only while it has none: finding the sentence scans the turn, which may be huge.
                node["description"] = _description(turn, mention)
            if node is None:
                node = nodes[node_id] = {
                    "id": node_id,
                    "type": mention.node_type,
                    "name": mention.name,
                    "description": _description(turn, mention),
                    "aliases": [],
                    "confidence": _CONFIDENCE.get(mention.node_type, 0.5),
                    "tags": list(mention.tags),
                    "evidence": [],
                }
            if mention.quote not in node["aliases"]:
                node["aliases"].append(mention.quote)
            if evidence not in node["evidence"]:
                node["evidence"].append(evidence)
            if node_id not in linked:
                linked.append(node_id)
        for source, target in combinations(linked[:MAX_LINKED_PER_TURN], 2):
            source, target = sorted((source, target))
            edge = edges.setdefault(
                (source, target),
                {"source": source, "target": target, "relationship": "RELATES_TO",
                 "justification": "mentioned together in one turn", "evidence": []},
            )
            quote = nodes[source]["evidence"][-1]["quote"] if nodes[source]["evidence"][-1]["turn"] == turn.number else None
            if quote and len(edge["evidence"]) < 3:
                edge["evidence"].append({"turn": turn.number, "quote": quote})
    return {"summary": "", "nodes": list(nodes.values()), "edges": list(edges.values())}


def find_mentions(text: str) -> list[_Mention]:
    """Entity mentions in one turn, in text order, overlapping matches resolved (longest first)."""
    candidates: list[_Mention] = []
    for match in _URL.finditer(text):
        url = match.group(0).rstrip(".,;:!?")
        candidates.append(_Mention(match.start(), match.start() + len(url), "FILE", url, url, ("url",)))
    for match in _PATH.finditer(text):
        # The name without a diff's a/ or b/ or a ./ (one file, one node); the quote as written.
        candidates.append(_Mention(match.start(), match.end(), "FILE", normal_path(match.group(0)), match.group(0)))
    for match in _BARE_FILE.finditer(text):
        candidates.append(_Mention(match.start(), match.end(), "FILE", match.group(0), match.group(0)))
    for match in _TEST.finditer(text):
        candidates.append(_Mention(match.start(), match.end(), "TEST", match.group(0), match.group(0)))
    for match in _METHOD.finditer(text):
        # ``RetryPolicy()`` constructs a class; ``load()`` / ``time.monotonic()`` call a method.
        kind = "CLASS" if _CLASS.fullmatch(match.group(1)) else "METHOD"
        candidates.append(_Mention(match.start(), match.end(), kind, match.group(1), match.group(0)))
    for match in _ISSUE.finditer(text):
        candidates.append(_Mention(match.start(), match.end(), "ISSUE", match.group(0), match.group(0)))
    for match in _CLASS.finditer(text):
        candidates.append(_Mention(match.start(), match.end(), "CLASS", match.group(0), match.group(0)))
    for match in _PROPER.finditer(text):
        phrase = _proper_phrase(text, match)
        if phrase is not None:
            candidates.append(phrase)
    # Longest match wins an overlap (a path beats the CamelCase file name inside it).
    candidates.sort(key=lambda m: (m.start, -(m.end - m.start)))
    chosen: list[_Mention] = []
    taken_until = -1
    for mention in candidates:
        if mention.start >= taken_until:
            chosen.append(mention)
            taken_until = mention.end
    return chosen


def _proper_phrase(text: str, match: re.Match[str]) -> _Mention | None:
    words = match.group(0).split()
    start = match.start()
    # Sentence-initial capitals say nothing about proper nouns: drop leading stop words there.
    at_sentence_start = _SENTENCE_START.search(text[max(0, start - 3) : start]) is not None or start == 0
    while words and (words[0].lower() in _STOPWORDS and (at_sentence_start or words[0].islower())):
        start = text.index(words[0], start) + len(words[0])
        start = len(text) - len(text[start:].lstrip())
        words = words[1:]
        at_sentence_start = False
    while words and words[-1].lower() in _STOPWORDS:
        words = words[:-1]
    if len(words) < _MIN_PHRASE_WORDS or any(_CLASS.fullmatch(w) for w in words):
        return None
    phrase = " ".join(words)
    end = text.index(words[-1], start) + len(words[-1])
    quote = text[start:end]
    return _Mention(start, end, "CONCEPT", phrase, quote, ("proper-noun",))


def _description(turn: UnitTurn, mention: _Mention) -> str:
    """The sentence around a mention when it reads as prose said by a person or the assistant;
    ``""`` for tool output, log lines and the like (a node seen only there has no description,
    rather than a log line posing as one)."""
    if turn.role == "tool":
        return ""
    sentence = _sentence_around(turn.text, mention.start, mention.end)
    letters = sum(c.isalpha() or c == " " for c in sentence)
    if _NOT_PROSE.match(sentence) or len(sentence.split()) < _MIN_PROSE_WORDS or letters < _MIN_PROSE_LETTERS * len(sentence):
        return ""
    return sentence


def _sentence_around(text: str, start: int, end: int) -> str:
    left = max(text.rfind(". ", 0, start), text.rfind("\n", 0, start))
    right_candidates = [i for i in (text.find(". ", end), text.find("\n", end)) if i != -1]
    right = min(right_candidates) + 1 if right_candidates else len(text)
    sentence = " ".join(text[left + 1 : right].split())
    return sentence[:DESCRIPTION_CHARS]
