"""What a node *says* — description, aliases, tags, confidence — and the one rule that combines two
sayings of the same thing (pure).

Reduce (two chunks naming one node), commit (a session's claim beside the graph's) and merge (two
nodes folded into one) all combine with :func:`combine_facts`. It is a semilattice join —
associative, commutative, idempotent — so the facts of a node are the same whatever order its
claims arrive in, and adding one claim to the combination of the others equals recombining all.
The tie-break: the longer description wins; between equally long ones the larger string, so no
result depends on who came first. A node's *name* follows the same idea (:func:`least_name`): the
least of the spellings its claims gave it, by :func:`name_order` (the fullest first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from store.names import normal_path, words

FACT_KEYS: tuple[str, ...] = ("description", "aliases", "tags", "confidence")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node's facts; ``aliases``/``tags`` sorted and unique."""

    description: str = ""
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    confidence: float = 0.0

    @classmethod
    def of(cls, *, description: str = "", aliases: Iterable[str] = (), tags: Iterable[str] = (), confidence: float = 0.0) -> "NodeFacts":
        """Facts from loose values (sorted, deduplicated)."""
        return cls(description, tuple(sorted(set(aliases))), tuple(sorted(set(tags))), float(confidence))

    def as_properties(self) -> dict[str, Any]:
        """The facts as the node's property keys."""
        return {"description": self.description, "aliases": list(self.aliases), "tags": list(self.tags), "confidence": self.confidence}


def longer_text(first: str, second: str) -> str:
    """The longer of two texts; between equally long ones the larger (order-independent)."""
    return max(first, second, key=lambda text: (len(text), text))


def longer_text_order(column: str) -> str:
    """:func:`longer_text`'s order as an SQL ``ORDER BY`` over ``column``, best first (both engines
    compare the texts bytewise, which for UTF-8 is Python's order of code points)."""
    return f"length({column}) DESC, {column} DESC"


def name_order(name: str, node_id: str) -> tuple[int, bool, int, int, str, str]:
    """How spellings of the node ``node_id``'s name are ranked, best first (pure): the name of
    **most words** (:func:`store.names.words`: `Pam Beesly` before `Beesly`, `QuerySet.iterator`
    before `iterator`; `LazyEdgeQueue` and `lazy edge queue` are three words each, a FILE's the
    words of its path as the file system reads it, :func:`store.names.normal_path`), so that a
    group joined under its least id (`PERSON:Beesly`) is named by its fuller name (an issue's names
    all count alike: it is its number); then those that write its id (the part after ``TYPE:``,
    case aside), the spelling of the same words that named the survivor (`LazyEdgeQueue` for
    `CLASS:LazyEdgeQueue`, `#42` for `ISSUE:#42`); then the one of longer words (`Pamela Beesly`
    before `Pam Beesly`); then the shorter as written, white space aside, the plainer spelling of
    the same words (`Pam Beesly` before `Pam Beesly's` or `"Pam Beesly"`, `src/x.py` before a git
    diff's `a/src/x.py`); then case-folded, then as written. Every name a node is named by stays
    one of its aliases (a claim's name is among its aliases), so the id's own spelling is never
    lost."""
    label, _, id_name = node_id.partition(":")
    # A path's words are its file's: `a/src/x.py` (a git diff's) is no fuller than `src/x.py`. An
    # issue is its number, whatever the words around it: `issue 42` is no fuller than `#42`.
    said = () if label == "ISSUE" else words(normal_path(name) if label == "FILE" else name)
    folded = name.casefold()
    # What the words leave out (quotes, a possessive, an article, `()`, a diff's `a/`) adds no
    # length: it would make the decorated spelling the fuller (audit33). White space is no
    # decoration: `Pam Beesly` is as plain as `PamBeesly`, and the case fold puts it first.
    plain_length = len("".join(folded.split()))
    return -len(said), id_name.casefold() != folded, -sum(map(len, said)), plain_length, folded, name


def least_name(names: Iterable[str], *, node_id: str) -> str | None:
    """The display name of the node ``node_id`` given ``names``: the least non-empty one by
    :func:`name_order` (None when there is none). A minimum, so it is the same whatever order the
    names came in, and adding one name to the least of the others equals taking the least of all."""
    return min((n for n in names if n), key=lambda name: name_order(name, node_id), default=None)


def combine_facts(first: NodeFacts, second: NodeFacts) -> NodeFacts:
    """The facts of one node said twice: longer description (:func:`longer_text`), union of aliases
    and of tags, higher confidence."""
    return NodeFacts(
        longer_text(first.description, second.description),
        tuple(sorted(set(first.aliases) | set(second.aliases))),
        tuple(sorted(set(first.tags) | set(second.tags))),
        max(first.confidence, second.confidence),
    )


def combine_all(facts: Iterable[NodeFacts]) -> NodeFacts:
    """Every claim combined (empty facts when there is none)."""
    result = NodeFacts()
    for one in facts:
        result = combine_facts(result, one)
    return result


class ClaimLookup(Protocol):
    """Questions about the claims a node has left (answered from the database by
    :class:`store.provenance.ProvenanceStore.claim_lookup`)."""

    def says_description(self, text: str) -> bool: ...
    def says_confidence(self, value: float) -> bool: ...
    def says_alias(self, alias: str) -> bool: ...
    def says_tag(self, tag: str) -> bool: ...
    def best_description(self) -> str: ...
    def max_confidence(self) -> float: ...


def without_claim(current: NodeFacts, withdrawn: NodeFacts, remaining: ClaimLookup) -> NodeFacts:
    """The combination of a node's claims once ``withdrawn`` is taken out, from the combination
    ``current`` of all of them (which includes ``withdrawn``) and questions about the claims left,
    asked only of what ``withdrawn`` may have been alone to say: a value it did not say (or that
    ``current`` does not show) came from another claim and stays. The answer equals
    :func:`combine_all` of the claims left, without reading them all (pure)."""
    description = current.description
    if withdrawn.description == description and not remaining.says_description(description):
        description = remaining.best_description()
    confidence = current.confidence
    if withdrawn.confidence == confidence and not remaining.says_confidence(confidence):
        confidence = remaining.max_confidence()
    withdrawn_aliases, withdrawn_tags = set(withdrawn.aliases), set(withdrawn.tags)
    return NodeFacts(
        description,
        tuple(a for a in current.aliases if a not in withdrawn_aliases or remaining.says_alias(a)),
        tuple(t for t in current.tags if t not in withdrawn_tags or remaining.says_tag(t)),
        confidence,
    )


def facts_of(properties: Mapping[str, Any]) -> NodeFacts:
    """The facts in a node's property document (ill-typed values read as absent)."""
    description = properties.get("description")
    confidence = properties.get("confidence")
    return NodeFacts.of(
        description=description if isinstance(description, str) else "",
        aliases=_strings(properties.get("aliases")),
        tags=_strings(properties.get("tags")),
        confidence=float(confidence) if isinstance(confidence, (int, float)) and not isinstance(confidence, bool) else 0.0,
    )


def with_facts(properties: Mapping[str, Any], facts: NodeFacts) -> dict[str, Any]:
    """``properties`` with its fact keys replaced by ``facts`` (other keys kept)."""
    return {**properties, **facts.as_properties()}


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
