"""Communities of the knowledge graph: Louvain over the semantic edges, with stable ids and labels.

Pure core, in three steps:

1. :func:`detect_communities` — Louvain (networkx, fixed seed, so the same graph gives the same
   partition) over the undirected semantic graph: knowledge nodes only (no MEMORY/SESSION/NOTE
   anchors) and semantic relationships only (no provenance), edge weights summed per node pair.
   Communities smaller than ``min_size`` (default 3) are dropped.
2. :func:`plan_communities` — ids and labels, stable across runs:

   - a community whose member set is unchanged keeps its id and its label (recognised by
     ``member_hash``, the sha256 of the sorted member ids);
   - otherwise it carries over the id (and a model-given label) of the previous community it
     overlaps most, when their Jaccard similarity |A∩B| / |A∪B| is at least ``carry_threshold``
     (default 0.6; above 0.5 no two new communities can claim the same old one, and each old id
     is claimed at most once, best overlap first);
   - otherwise it is new: id ``c_`` + the first 12 hex digits of its member hash.

   The default label is the names of its three highest-degree members (ties by name), joined
   with `` · ``; it is recomputed each run, so it follows the membership.
3. :func:`name_communities` — optionally asks a namer (the model, ``REM_LLM_JUDGE``) for a label,
   only for communities whose membership is new or changed and that have no model label yet, so an
   unchanged community is never renamed (and never re-billed, even when naming failed before).
   Each label is kept as it is given, by member set (:class:`GivenLabels`): a finalize cut short
   (a kill) never asks again for a member set already named.

Detection reads the whole semantic graph, so a cycle runs it only when enough has changed since
the last one (:func:`detection_due`): when the sessions digested since then reach a fraction of
those digested before it. Per digested session that is a constant share of one detection, however
long the history; while the graph is small (a few sessions) it is every cycle.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from pipelines.extract.model import clean_text
from pipelines.vocabulary import is_semantic_edge
from store.communities import CommunityRecord
from store.graph import Edge, Node

if TYPE_CHECKING:
    import networkx as nx

DEFAULT_SEED = 7
MIN_COMMUNITY_SIZE = 3
CARRY_THRESHOLD = 0.6
LABEL_MEMBERS = 3

# Re-detect once the sessions digested since the last detection reach this share of those digested
# before it (``REM_COMMUNITY_REFRESH_FRACTION``; 0 = every cycle).
REFRESH_FRACTION = 0.1

# Given the member names of one community (highest degree first), return a short label or None.
Namer = Callable[[Sequence[str]], Awaitable[str | None]]


class GivenLabels(Protocol):
    """The labels the model gave, by member hash, kept as each is given (store.communities)."""

    async def given(self, hashes: Collection[str]) -> dict[str, str]:
        """The labels already given for these member hashes."""
        ...

    async def keep(self, member_hash: str, label: str) -> None:
        """Keep a label just given, durably, before the next is asked for."""
        ...


@dataclass(frozen=True, slots=True)
class CommunityPlan:
    """The outcome of one detection: the communities to store, and how they relate to the last."""

    communities: list[CommunityRecord]
    # ids of communities whose membership is new or changed (the only ones worth naming again)
    fresh: frozenset[str]
    unchanged: int
    carried: int
    new: int
    dropped: int


@dataclass(frozen=True, slots=True)
class DetectionBasis:
    """What the last detection saw: when it ran, and how many sessions were digested then."""

    detected_at: str
    digested: int

    @classmethod
    def from_record(cls, record: object) -> "DetectionBasis | None":
        """The basis kept in a finalize phase record (``{"detected_at", "digested"}``), or None
        when the record has none (an older release's, or damaged). Pure."""
        if not isinstance(record, dict):
            return None
        moment, digested = record.get("detected_at"), record.get("digested")
        if not isinstance(moment, str) or not isinstance(digested, int) or isinstance(digested, bool) or digested < 0:
            return None
        return cls(moment, digested)

    def as_dict(self) -> dict[str, object]:
        return {"detected_at": self.detected_at, "digested": self.digested}


def detection_due(basis: DetectionBasis | None, digested_since: int, *, fraction: float = REFRESH_FRACTION) -> bool:
    """Whether communities must be detected again: never detected (or no basis on record), or at
    least ``max(1, fraction × basis.digested)`` sessions digested since — ``fraction`` 0: always.
    Pure."""
    if basis is None or fraction <= 0:
        return True
    return digested_since >= max(1, math.ceil(fraction * basis.digested))


def semantic_graph(nodes: Iterable[Node], edges: Iterable[Edge]) -> nx.Graph:
    """The undirected, weighted graph of knowledge nodes and semantic edges (self-loops dropped)."""
    import networkx as nx  # here, not at the top: every CLI command imports this module, few detect

    labels = {n.id: n.label for n in nodes}
    graph = nx.Graph()
    for edge in edges:
        if edge.source == edge.target:
            continue
        if not is_semantic_edge(edge.relationship, labels.get(edge.source), labels.get(edge.target)):
            continue
        weight = max(float(edge.weight), 0.0) or 1e-6
        if graph.has_edge(edge.source, edge.target):
            graph[edge.source][edge.target]["weight"] += weight
        else:
            graph.add_edge(edge.source, edge.target, weight=weight)
    return graph


def detect_communities(
    graph: nx.Graph, *, seed: int = DEFAULT_SEED, min_size: int = MIN_COMMUNITY_SIZE
) -> list[tuple[str, ...]]:
    """Louvain communities of ``graph`` with at least ``min_size`` members, each sorted, the list
    ordered by size (descending) then first member. Deterministic for a given seed."""
    import networkx as nx  # see semantic_graph

    if graph.number_of_edges() == 0:
        return []
    found = nx.community.louvain_communities(graph, weight="weight", seed=seed)
    kept = [tuple(sorted(c)) for c in found if len(c) >= min_size]
    return sorted(kept, key=lambda members: (-len(members), members[0]))


def member_hash(members: Iterable[str]) -> str:
    """sha256 of the sorted member ids (newline-joined)."""
    return hashlib.sha256("\n".join(sorted(members)).encode("utf-8")).hexdigest()


def community_id(members: Iterable[str]) -> str:
    """The id a brand-new community gets: ``c_`` + 12 hex digits of its member hash."""
    return "c_" + member_hash(members)[:12]


def default_label(members: Sequence[str], graph: nx.Graph, names: dict[str, str]) -> str:
    """The names of the ``LABEL_MEMBERS`` highest-degree members, joined with `` · ``. A member
    not in ``graph`` (a forget took its last semantic edge: :func:`without_members`) has degree 0."""
    ranked = sorted(members, key=lambda m: (-(graph.degree(m, weight="weight") if m in graph else 0), names.get(m, m).lower(), m))
    return " · ".join(names.get(m, m) for m in ranked[:LABEL_MEMBERS])


def without_members(
    community: CommunityRecord, nodes: Sequence[Node], edges: Iterable[Edge], *, min_size: int = MIN_COMMUNITY_SIZE,
) -> CommunityRecord | None:
    """``community`` once a forget took some of its members out of the graph or changed their
    names (``nodes``: its members that are left, as they are now; ``edges``: theirs): those members, with the default
    label of them — a model's label named a member set that held the forgotten text — or None when
    fewer than ``min_size`` are left (detection would not keep it). Its id stays. Pure."""
    left = [n for n in nodes if n.id in set(community.members)]
    if len(left) < min_size:
        return None
    members = tuple(sorted(n.id for n in left))
    graph = semantic_graph(left, edges)
    return CommunityRecord(id=community.id, label=default_label(members, graph, {n.id: n.name for n in left}),
                           members=members, member_hash=member_hash(members))


def plan_communities(
    nodes: Sequence[Node],
    edges: Iterable[Edge],
    previous: Sequence[CommunityRecord],
    *,
    seed: int = DEFAULT_SEED,
    min_size: int = MIN_COMMUNITY_SIZE,
    carry_threshold: float = CARRY_THRESHOLD,
) -> CommunityPlan:
    """Detect communities and give them stable ids and labels (rules in the module docstring). Pure."""
    graph = semantic_graph(nodes, edges)
    names = {n.id: n.name for n in nodes}
    detected = detect_communities(graph, seed=seed, min_size=min_size)
    by_hash = {c.member_hash: c for c in previous}
    claimed: set[str] = set()
    chosen: dict[int, CommunityRecord] = {}
    unchanged = 0
    for index, members in enumerate(detected):
        old = by_hash.get(member_hash(members))
        if old is not None and old.id not in claimed:
            claimed.add(old.id)
            chosen[index] = old
            unchanged += 1
    overlaps = []
    for index, members in enumerate(detected):
        if index in chosen:
            continue
        current = set(members)
        for old in previous:
            if old.id in claimed:
                continue
            similarity = len(current & set(old.members)) / len(current | set(old.members))
            if similarity >= carry_threshold:
                overlaps.append((-similarity, old.id, index, old))
    carried = 0
    for _, old_id, index, old in sorted(overlaps, key=lambda o: o[:3]):
        if index in chosen or old_id in claimed:
            continue
        claimed.add(old_id)
        members = detected[index]
        model_label = old.label_source == "model"
        chosen[index] = CommunityRecord(
            id=old.id,
            label=old.label if model_label else default_label(members, graph, names),
            members=members,
            member_hash=member_hash(members),
            label_source=old.label_source if model_label else "default",
        )
        carried += 1
    result = []
    for index, members in enumerate(detected):
        record = chosen.get(index)
        if record is None:
            record = CommunityRecord(
                id=community_id(members),
                label=default_label(members, graph, names),
                members=members,
                member_hash=member_hash(members),
            )
        elif record.label_source == "default":
            record = replace(record, label=default_label(members, graph, names))
        result.append(record)
    new = len(detected) - unchanged - carried
    unchanged_ids = {c.id for c in result if c.member_hash in by_hash and by_hash[c.member_hash].id == c.id}
    return CommunityPlan(
        communities=result,
        fresh=frozenset(c.id for c in result if c.id not in unchanged_ids),
        unchanged=unchanged,
        carried=carried,
        new=new,
        dropped=len({c.id for c in previous} - claimed),
    )


async def name_communities(
    communities: Sequence[CommunityRecord],
    names: dict[str, str],
    *,
    namer: Namer,
    only: Collection[str],
    graph: nx.Graph | None = None,
    labels: GivenLabels | None = None,
) -> tuple[list[CommunityRecord], int, int]:
    """Ask ``namer`` for a label for each community in ``only`` (new or changed membership) that
    has no model label yet; returns the communities (named ones with ``label_source="model"``), how
    many the namer named and how many took a label ``labels`` already held for the same member set
    (given before a finalize that did not end). Each label given is kept in ``labels`` before the
    next is asked for. A namer that returns nothing (it logs and swallows its own provider errors)
    leaves the default label, and an unchanged community is not asked again."""
    named = reused = 0
    out = []
    wanted = [c for c in communities if c.label_source != "model" and c.id in only]
    given = await labels.given({c.member_hash for c in wanted}) if labels is not None and wanted else {}
    for community in communities:
        if community.label_source == "model" or community.id not in only:
            out.append(community)
            continue
        if community.member_hash in given:
            out.append(replace(community, label=given[community.member_hash], label_source="model"))
            reused += 1
            continue
        ranked = (
            sorted(community.members, key=lambda m: (-graph.degree(m, weight="weight"), m))
            if graph is not None
            else list(community.members)
        )
        # The model's text as any model output is read: no control characters or lone surrogates
        # (which no database stores), white space collapsed, clipped.
        label = clean_text(await namer([names.get(m, m) for m in ranked]), limit=80)
        if label:
            if labels is not None:
                await labels.keep(community.member_hash, label)
            out.append(replace(community, label=label, label_source="model"))
            named += 1
        else:
            out.append(community)
    return out, named, reused
