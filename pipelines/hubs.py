"""Short names that stand for longer ones, decided by the set of names, never by their order (pure).

Two identity rules let one *short* name stand for a longer one: ``qualified`` (a METHOD name with
fewer qualifiers, ``get_head`` for ``Repo.get_head``) and ``acronym`` (``LEQ`` for ``Lazy Edge
Queue``). Unlike a spelling rule, such a name may stand for several different things at once
(``get_head`` for ``Repo.get_head`` and ``Other.get_head``), so grouping through it cannot be
transitive. The rule (README "Several workers", *Short names*): a short name joins the longer names
it matches only while **all of them name one thing** — every two of them match each other
(``Repo.get_head`` / ``self.repo.get_head``, ``Lazy Edge Queue`` / ``LazyEdgeQueue``). Once the graph
holds two that do not, the short name is its own node, whatever came first:

- a short name arriving beside such a set links to none of them (a candidate);
- a longer name arriving beside a short name whose set it makes ambiguous does not link through it,
  and when that short name had already joined another longer name it is **split** back out:
  :func:`check` names it, the commit undoes its link records (without blocking the pair: a split
  is no operator's decision);
- a short name is never the survivor of a group it joined by these rules (the longer name's id
  is), so the split moves exactly the short name's rows.

:func:`check` reads the resolver's :class:`~pipelines.identity.AliasIndex` (every form of every
node, the names linked into it included) and the session's own names. A person's bare first name is
a short name too (:func:`namesake_splits`): it stands for one full name until a namesake arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipelines.extract.model import semantic_node_id
from pipelines.identity import (
    CANDIDATE,
    LINK,
    REDIRECT_RULE,
    AliasIndex,
    NodeRef,
    Verdict,
    acronym_of,
    folds_a_concept,
    form_initials,
    full_names,
    identifier_key,
    is_identifier,
    name_form,
    namesakes,
    prose_key,
    same_member,
    sub_runs,
)

# The rules that let a short name stand for a longer one (their links are what a split undoes).
HUB_RULES = frozenset({"qualified", "acronym"})


@dataclass(frozen=True, slots=True)
class Split:
    """Move the short name ``short`` (node id ``merged_id``) back out of ``into_id``, the node it
    joined: it no longer names one thing (``ambiguous_with``: a longer name it also matches)."""

    merged_id: str
    into_id: str
    short: str
    ambiguous_with: str
    rule: str
    # The link rules whose records the split undoes (a person's first name joined by spelling).
    rules: frozenset[str] = HUB_RULES


def _qualified(kind: str, short: str, long: str) -> bool:
    """``short`` is ``long`` with fewer qualifiers (both METHOD identifiers)."""
    if kind != "METHOD" or not (is_identifier(kind, short) and is_identifier(kind, long)):
        return False
    one, two = identifier_key(kind, short), identifier_key(kind, long)
    return one.count(".") < two.count(".") and same_member(one, two)


def _acronym(kind: str, short: str, long: str) -> bool:
    letters = acronym_of(short)
    return letters is not None and len(letters) >= 3 and form_initials(name_form(kind, long)) == letters


def _rule(kind: str, short: str, long: str) -> str:
    return "qualified" if _qualified(kind, short, long) else "acronym"


def stands_for(kind: str, short: str, long: str) -> bool:
    """Whether ``short`` may stand for ``long`` by the qualified or the acronym rule."""
    return _qualified(kind, short, long) or _acronym(kind, short, long)


def one_thing(kind: str, names: Iterable[str]) -> bool:
    """Whether the longer names a short one matches all name one thing: every two of them are the
    same identifier, the same function qualified more or less (``Repo.get_head`` /
    ``self.repo.get_head``), or the same words (``Lazy Edge Queue`` / ``LazyEdgeQueue``)."""
    distinct = sorted(set(names))
    for i, one in enumerate(distinct):
        for two in distinct[i + 1 :]:
            if is_identifier(kind, one) and is_identifier(kind, two):
                a, b = identifier_key(kind, one), identifier_key(kind, two)
                if a == b or (kind == "METHOD" and same_member(a, b)):
                    continue
            if prose_key(kind, one) != prose_key(kind, two):
                return False
    return True


def _related(index: AliasIndex, kind: str, text: str) -> set[str]:
    """Indexed nodes that may hold a form related to ``text`` by a hub rule, in either direction."""
    found: set[str] = set()
    if kind == "METHOD" and is_identifier(kind, text):
        found |= index.members.get((kind, identifier_key(kind, text).rsplit(".", 1)[-1]), set())
    form = name_form(kind, text)
    letters = acronym_of(text)
    if letters:
        found |= index.by_initials.get((kind, letters), set())
    initials = form_initials(form)
    if initials:
        found |= index.by_acronym.get((kind, initials), set())
    return found


@dataclass(frozen=True, slots=True)
class Checked:
    """:func:`check`'s answer: the verdicts, the splits to make, and the ids that stand for a longer
    name they are linked to (``shorts``: never a group's survivor, so a split never has to take a
    group apart around its own id)."""

    verdicts: list[Verdict]
    splits: list[Split]
    shorts: frozenset[str]


def check(refs: Sequence[NodeRef], verdicts: Sequence[Verdict], index: AliasIndex) -> Checked:
    """Apply the short-name rule to a resolved batch: the verdicts with every link through an
    ambiguous short name turned into a candidate, the splits the commit must make, and the short
    ends of this batch's links."""
    out = list(verdicts)
    splits: dict[str, Split] = {}
    shorts: set[str] = set()
    batch = [(ref.type, form) for ref in refs for form in ref.forms]
    for position, (ref, verdict) in enumerate(zip(refs, verdicts, strict=True)):
        kind = ref.type
        holders: dict[str, set[str]] = {}  # node → its forms related to this name
        for form in ref.forms:
            for node_id in _related(index, kind, form):
                holders.setdefault(node_id, set()).update(f.text for f in index.forms.get(node_id, ()))

        known: dict[str, set[str]] = {}

        def longer(short: str) -> set[str]:
            """Every longer name ``short`` matches: in the graph and in this session."""
            if short not in known:
                found = {f.text for node_id in _related(index, kind, short) for f in index.forms.get(node_id, ()) if stands_for(kind, short, f.text)}
                known[short] = found | {f for k, f in batch if k == kind and stands_for(kind, short, f)}
            return known[short]

        if verdict.action == LINK and verdict.rule == "named" and verdict.target is not None:
            shorts.add(verdict.target if folds_a_concept(ref, verdict) else ref.id)  # the typed node's id survives
        if verdict.action == LINK and verdict.rule == REDIRECT_RULE:
            shorts.add(ref.id)  # an id folded away across types: the node it went into keeps its id
        # This name as the short one: it joins only a set of longer names that is one thing.
        if verdict.action == LINK and verdict.rule in HUB_RULES and verdict.target != ref.id:
            if any((matched := longer(form)) and not one_thing(kind, matched) for form in ref.forms):
                out[position] = _ambiguous(verdict)
                continue
            target = index.nodes.get(verdict.target or "")
            if target is not None and any(stands_for(kind, form, target.id.partition(":")[2]) for form in ref.forms):
                shorts.add(ref.id)
            elif target is not None and any(stands_for(kind, target.id.partition(":")[2], form) for form in ref.forms):
                shorts.add(target.id)
        # This name as the longer one: a short name it matches may stop naming one thing.
        for node_id, forms in sorted(holders.items()):
            for short in sorted(forms):
                mine = [f for f in ref.forms if stands_for(kind, short, f)]
                if not mine or one_thing(kind, longer(short)):
                    continue
                if verdict.action == LINK and verdict.target == node_id and verdict.rule in HUB_RULES and not any(
                    one_thing(kind, [own, other]) for own in ref.forms for other in forms if not stands_for(kind, other, own)
                ):
                    out[position] = _ambiguous(verdict)  # its link went through the short name alone
                short_id = semantic_node_id(kind, short)
                if short_id is not None and short_id != node_id and any(stands_for(kind, short, f) and f not in ref.forms for f in forms):
                    splits.setdefault(short_id, Split(short_id, node_id, short, mine[0], _rule(kind, short, mine[0])))
    for split in namesake_splits(refs, verdicts, index):
        splits.setdefault(split.merged_id, split)
        for position, (ref, verdict) in enumerate(zip(refs, out, strict=True)):
            if verdict.action == LINK and ref.id == split.merged_id and verdict.target == split.into_id:
                # The name this commit moves out must not go straight back in (`Kate Miller`
                # speaking beside `Kate Smith`): it stays on its own node, the pair for review.
                out[position] = Verdict(verdict.node_id, CANDIDATE, None, "ambiguous-namesakes", verdict.score, verdict.candidates)
    return Checked(out, sorted(splits.values(), key=lambda s: s.merged_id), frozenset(shorts))


# The spelling rules that join a person's bare first name and a full name (`Kate` → `Kate Miller`).
PERSON_NAME_RULES = frozenset({"alias", "normalised", "token-set"})


def namesake_splits(refs: Sequence[NodeRef], verdicts: Sequence[Verdict], index: AliasIndex) -> list[Split]:
    """A person's short name (`Kate`) stands for one full name only until a second person of that
    name arrives: when an incoming PERSON's full name (`Kate Smith`) is a namesake
    (:func:`~pipelines.identity.namesakes`) of a full name some node holds together with a shorter
    run of it (`Kate` + `Kate Miller`), the short name and that full name come apart — the full name
    leaves a node named by the short one, or the short name leaves a node named by the full one —
    so the graph ends with `Kate`, `Kate Miller` and `Kate Smith` apart whatever the order."""
    found: list[Split] = []
    for ref, verdict in zip(refs, verdicts, strict=True):
        if ref.type != "PERSON":
            continue
        mine = [name_form(ref.type, form) for form in ref.forms]
        shorter = {prose_key(ref.type, run) for full in full_names(mine) for run in sub_runs(full)}  # as the index files them
        holders = {node_id for words in shorter for node_id in index.prose_words.get(("PERSON", words), ())}
        for node_id in sorted(holders - {verdict.target, ref.id}):
            theirs = index.forms.get(node_id, [])
            if not namesakes(mine, theirs):
                continue
            own = name_form("PERSON", node_id.partition(":")[2])
            others = [f for f in theirs if namesakes(mine, [f])]
            if own.words in shorter:
                # A node named by the short name holds another person's full name: that one leaves.
                moved = [(semantic_node_id("PERSON", f.text), f.text) for f in others]
            else:
                # A node named by another person's full name holds the short name: it leaves.
                moved = [(semantic_node_id("PERSON", f.text), f.text) for f in theirs if f.words in shorter]
            for merged_id, text in moved:
                if merged_id is not None and merged_id != node_id:
                    found.append(Split(merged_id, node_id, text, ref.name, "alias", PERSON_NAME_RULES))
    return found


def _ambiguous(verdict: Verdict) -> Verdict:
    """A hub link that no longer names one thing: kept as a candidate pair for review."""
    return Verdict(verdict.node_id, CANDIDATE, None, f"ambiguous-{verdict.rule}", verdict.score, verdict.candidates)


