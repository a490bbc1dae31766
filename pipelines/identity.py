"""Identity resolution: does an extracted node name something the graph already holds? (pure)

For each incoming node the resolver returns a :class:`Verdict` — ``link`` (it *is* that existing
node), ``create`` (it is new) or ``candidate`` (maybe; ambiguous). Rules, first decisive one wins:

==============  =====  ===========================================================================
rule            score  matches (always the same type, never a blocked pair)
==============  =====  ===========================================================================
exact-id        1.00   the incoming id exists (an update, not a merge)
alias           1.00   a name/alias equals an existing name/alias, ignoring case, space, quotes
issue-number    1.00   ISSUE: the same number written differently (``#123``, ``issue 123``, ``GH-123``)
normalised      0.95   the same words after camelCase splitting, punctuation/underscores as spaces,
                       plural → singular, a trailing ``()`` dropped (``LazyEdgeQueue`` ≈
                       ``lazy edge queues``); FILE: same path ignoring case and ``./``/``\\``
acronym         0.90   an all-caps acronym of ≥ 3 letters = the initials of a ≥ 3-word name
                       (``LEQ`` ↔ ``Lazy Edge Queue``); a 2-letter acronym is only a candidate
token-set       0.90   (nearly) the same set of words in any order (Jaccard ≥ ``Thresholds.link``)
==============  =====  ===========================================================================

More than one existing node matching a decisive rule makes the verdict ``candidate`` (ambiguous).
Below the decisive rules, weaker evidence makes a ``candidate``: token-set Jaccard ≥
``candidate_threshold``, a near-identical spelling (character similarity ≥ ``fuzzy_threshold``),
a FILE with the same base name in another directory, a 2-letter acronym, and the same normalised
name under a *different type* — which is reported, never merged. Names whose numbers differ
(``#123``/``#124``, ``v2``/``v3``) never link. Without a model, ``candidate`` means create and
report; with one, an auditor decides link-or-create for the same-type candidates only.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher

LINK = "link"
CREATE = "create"
CANDIDATE = "candidate"

LINK_THRESHOLD = 0.9
CANDIDATE_THRESHOLD = 0.5
FUZZY_THRESHOLD = 0.9
MIN_ACRONYM_LETTERS = 3

_CAMEL_LOWER_UPPER = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_CAMEL_ACRONYM = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")
_NON_WORD = re.compile(r"[^0-9a-z]+")
_DIGITS = re.compile(r"\d+")
_CALL = re.compile(r"\([^()]*\)\s*$")
_ISSUE = re.compile(r"^(?:(?:issue|bug|ticket|pr|pull request|gh)\s*)?[#-]?\s*(\d+)$")
_ACRONYM = re.compile(r"^[A-Z]{2,8}s?$")
_QUOTES = "`'\"“”‘’"


@dataclass(frozen=True, slots=True)
class NodeRef:
    """What the resolver knows of a node: id, type (label), display name and aliases."""

    id: str
    type: str
    name: str
    aliases: tuple[str, ...] = ()

    @property
    def forms(self) -> tuple[str, ...]:
        """Every way this node is written: name, aliases and the name part of its id."""
        suffix = self.id.partition(":")[2]
        return tuple(dict.fromkeys(f for f in (self.name, *self.aliases, suffix) if f and f.strip()))


@dataclass(frozen=True, slots=True)
class Match:
    """One existing node an incoming node may be."""

    node_id: str
    rule: str
    score: float
    form: str = ""
    type: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The resolver's answer for one incoming node. ``target`` is set for ``link``."""

    node_id: str
    action: str
    target: str | None = None
    rule: str = ""
    score: float = 0.0
    candidates: tuple[Match, ...] = ()

    @property
    def is_merge(self) -> bool:
        """A link to a *different* node: what gets recorded in ``merges``."""
        return self.action == LINK and self.target is not None and self.target != self.node_id


# --- normal forms (pure) -------------------------------------------------------------------------
def fold(text: str) -> str:
    """Case-folded, NFKC, surrounding quotes stripped, white space collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).strip().strip(_QUOTES).casefold().split())


def words(text: str) -> list[str]:
    """Lower-case words: camelCase split, punctuation and underscores as separators, a call's
    ``(…)`` dropped. ``"LazyEdgeQueue.drain()"`` → ``["lazy", "edge", "queue", "drain"]``."""
    text = _CALL.sub("", unicodedata.normalize("NFKC", text).strip().strip(_QUOTES))
    text = _CAMEL_ACRONYM.sub(" ", _CAMEL_LOWER_UPPER.sub(" ", text))
    return [w for w in _NON_WORD.split(text.casefold()) if w]


def singular(word: str) -> str:
    """A plural English word's singular (rule-based; short words and ``-ss/-us/-is`` unchanged)."""
    if len(word) <= 3 or word.endswith(("ss", "us", "is")) or word.isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "zes")):
        return word[:-2]
    if word.endswith("s"):
        return word[:-1]
    return word


def tokens(text: str) -> tuple[str, ...]:
    """:func:`words`, each singular."""
    return tuple(singular(w) for w in words(text))


def normal_key(node_type: str, text: str) -> str:
    """The form two names of one type share when they name the same thing (see the rule table)."""
    if node_type == "FILE":
        return fold(text).replace("\\", "/").removeprefix("./")
    if node_type == "ISSUE":
        number = _ISSUE.match(fold(text))
        if number:
            return f"#{int(number.group(1))}"
    return " ".join(tokens(text))


def numbers(text: str) -> tuple[str, ...]:
    """The digit runs of a name, without leading zeros (``#0123`` and ``#123`` agree)."""
    return tuple(str(int(d)) for d in _DIGITS.findall(text))


def acronym_of(text: str) -> str | None:
    """The upper-case acronym ``text`` is written as (``"LEQ"``, ``"LEQs"`` → ``"LEQ"``), else None."""
    stripped = unicodedata.normalize("NFKC", text).strip().strip(_QUOTES)
    if not _ACRONYM.match(stripped):
        return None
    return stripped.rstrip("s")


def initials(text: str) -> str | None:
    """Upper-case initials of a name of at least two words (``"Lazy Edge Queue"`` → ``"LEQ"``)."""
    parts = [w for w in words(text) if not w.isdigit()]
    return "".join(w[0] for w in parts).upper() if len(parts) >= 2 else None


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """|A∩B| / |A∪B| of two token collections (0 when both are empty)."""
    left, right = set(a), set(b)
    union = left | right
    return len(left & right) / len(union) if union else 0.0


# --- the index -----------------------------------------------------------------------------------
@dataclass(slots=True)
class AliasIndex:
    """Lookup tables over the existing nodes' names and aliases. Build with :meth:`build`; the
    resolver adds each node it creates or links so later nodes of the same batch see it."""

    nodes: dict[str, NodeRef] = field(default_factory=dict)
    exact: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    normal: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    any_type: dict[str, set[str]] = field(default_factory=dict)
    by_token: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    by_initials: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    by_acronym: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    by_basename: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, nodes: Iterable[NodeRef]) -> "AliasIndex":
        index = cls()
        for node in nodes:
            index.add(node)
        return index

    def add(self, node: NodeRef) -> None:
        """Index ``node`` (merging with what is known under the same id)."""
        known = self.nodes.get(node.id)
        if known is not None:
            node = NodeRef(node.id, known.type, known.name, tuple(dict.fromkeys((*known.aliases, node.name, *node.aliases))))
        self.nodes[node.id] = node
        for form in node.forms:
            key = normal_key(node.type, form)
            self.exact.setdefault((node.type, fold(form)), set()).add(node.id)
            self.normal.setdefault((node.type, key), set()).add(node.id)
            self.any_type.setdefault(key, set()).add(node.id)
            for token in set(tokens(form)):
                self.by_token.setdefault((node.type, token), set()).add(node.id)
            letters = initials(form)
            if letters:
                self.by_initials.setdefault((node.type, letters), set()).add(node.id)
            acronym = acronym_of(form)
            if acronym:
                self.by_acronym.setdefault((node.type, acronym), set()).add(node.id)
            if node.type == "FILE":
                self.by_basename.setdefault(key.rsplit("/", 1)[-1], set()).add(node.id)


# --- the resolver --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Thresholds:
    link: float = LINK_THRESHOLD
    candidate: float = CANDIDATE_THRESHOLD
    fuzzy: float = FUZZY_THRESHOLD


def resolve(
    node: NodeRef,
    index: AliasIndex,
    *,
    blocked: frozenset[tuple[str, str]] = frozenset(),
    thresholds: Thresholds = Thresholds(),
) -> Verdict:
    """The verdict for one incoming node against ``index`` (rules in the module docstring).
    ``blocked`` holds (incoming id, existing id) pairs that must never link (undone merges)."""
    if node.id in index.nodes:
        return Verdict(node.id, LINK, node.id, "exact-id", 1.0)
    kind = node.type

    def allowed(ids: Iterable[str], form: str, *, check_numbers: bool = True) -> set[str]:
        return {
            i
            for i in ids
            if i != node.id
            and (node.id, i) not in blocked
            and (not check_numbers or any(numbers(form) == numbers(f) for f in index.nodes[i].forms))
        }

    alias_hits: dict[str, str] = {}
    normal_hits: dict[str, str] = {}
    acronym_hits: dict[str, str] = {}
    token_scores: dict[str, tuple[float, str]] = {}
    candidates: dict[str, Match] = {}

    def offer(match: Match) -> None:
        if match.node_id not in candidates or candidates[match.node_id].score < match.score:
            candidates[match.node_id] = match

    for form in node.forms:
        key = normal_key(kind, form)
        alias_hits.update(dict.fromkeys(allowed(index.exact.get((kind, fold(form)), ()), form, check_numbers=False), form))
        if key:
            found = allowed(index.normal.get((kind, key), ()), form, check_numbers=not key.startswith("#"))
            normal_hits.update(dict.fromkeys(found, form))
            for other in allowed(index.any_type.get(key, ()), form, check_numbers=False):
                if index.nodes[other].type != kind:
                    offer(Match(other, "cross-type", 0.5, form, index.nodes[other].type))
        if kind == "FILE":
            for target in allowed(index.by_basename.get(key.rsplit("/", 1)[-1], ()), form):
                offer(Match(target, "file-basename", 0.6, form, kind))
            continue
        if kind == "ISSUE" and key.startswith("#"):
            continue
        acronym, letters = acronym_of(form), initials(form)
        found = set()
        if acronym:
            found |= allowed(index.by_initials.get((kind, acronym), ()), form)
        if letters:
            found |= allowed(index.by_acronym.get((kind, letters), ()), form)
        if len(acronym or letters or "") >= MIN_ACRONYM_LETTERS:
            acronym_hits.update(dict.fromkeys(found, form))
        else:
            for target in found:
                offer(Match(target, "acronym-short", 0.6, form, kind))
        own = tokens(form)
        pool = set().union(*(index.by_token.get((kind, t), set()) for t in set(own))) if own else set()
        for target in allowed(pool, form):
            best = max(jaccard(own, tokens(f)) for f in index.nodes[target].forms)
            if best > token_scores.get(target, (0.0, ""))[0]:
                token_scores[target] = (best, form)
    token_hits = {t: f for t, (score, f) in token_scores.items() if score >= thresholds.link}
    for rule, score, hits in (
        ("alias", 1.0, alias_hits),
        ("issue-number" if kind == "ISSUE" else "normalised", 1.0 if kind == "ISSUE" else 0.95, normal_hits),
        ("acronym", 0.9, acronym_hits),
        ("token-set", thresholds.link, token_hits),
    ):
        if len(hits) == 1:
            ((target, form),) = hits.items()
            return Verdict(node.id, LINK, target, rule, score, (Match(target, rule, score, form, kind),))
        if len(hits) > 1:
            matches = tuple(Match(t, rule, score, f, kind) for t, f in sorted(hits.items()))
            return Verdict(node.id, CANDIDATE, None, f"ambiguous-{rule}", score, matches)
    for target, (score, form) in token_scores.items():
        if score >= thresholds.candidate:
            offer(Match(target, "token-set", round(score, 3), form, kind))
    for match in _fuzzy(node, index, blocked, thresholds.fuzzy, exclude=set(candidates)):
        offer(match)
    if candidates:
        ranked = tuple(sorted(candidates.values(), key=lambda m: (-m.score, m.node_id)))
        return Verdict(node.id, CANDIDATE, None, ranked[0].rule, ranked[0].score, ranked)
    return Verdict(node.id, CREATE)


def _fuzzy(
    node: NodeRef, index: AliasIndex, blocked: frozenset[tuple[str, str]], threshold: float, *, exclude: set[str]
) -> list[Match]:
    """Near-identical spellings among nodes sharing a token or the first letters (typos)."""
    found = []
    for form in node.forms:
        key = normal_key(node.type, form)
        if len(key) < 6:
            continue
        pool = set().union(*(index.by_token.get((node.type, t), set()) for t in set(tokens(form)))) if tokens(form) else set()
        for target in sorted(pool - exclude - {node.id}):
            if (node.id, target) in blocked:
                continue
            for other in index.nodes[target].forms:
                other_key = normal_key(node.type, other)
                ratio = SequenceMatcher(None, key, other_key).ratio()
                if ratio >= threshold and numbers(form) == numbers(other):
                    found.append(Match(target, "fuzzy", round(ratio, 3), form, node.type))
                    break
    return found


def resolve_batch(
    nodes: Sequence[NodeRef],
    index: AliasIndex,
    *,
    blocked: frozenset[tuple[str, str]] = frozenset(),
    thresholds: Thresholds = Thresholds(),
) -> list[Verdict]:
    """Resolve nodes in order against ``index`` (left unchanged) and against each other: a node
    not linked to the graph may link to an earlier node of the same batch. Call :func:`learn`
    once the batch is committed."""
    batch = AliasIndex()
    verdicts = []
    for node in nodes:
        verdict = resolve(node, index, blocked=blocked, thresholds=thresholds)
        if verdict.action != LINK:
            local = resolve(node, batch, blocked=blocked, thresholds=thresholds)
            if local.action == LINK or verdict.action == CREATE:
                verdict = local
        verdicts.append(verdict)
        learn(batch, [node], [verdict])
    return verdicts


def learn(index: AliasIndex, nodes: Sequence[NodeRef], verdicts: Sequence[Verdict]) -> None:
    """Add a resolved batch to ``index``: created nodes under their id, linked nodes' forms as
    aliases of their target."""
    for node, verdict in zip(nodes, verdicts, strict=True):
        if verdict.action == LINK and verdict.target is not None:
            index.add(NodeRef(verdict.target, node.type, node.name, node.forms))
        else:
            index.add(node)
