"""The review list settled by the model judge (``rem-cycle candidates --judge``).

A cycle asks the judge (``REM_LLM_JUDGE``) about a name only while it commits the session that says
it, so pairs reach the review list that no model was ever shown: every pair of a graph built
before the judge was turned on, two names that were both in the graph before they met, and the
pairs of a call that failed (the cycle leaves them for a person, and asks again only when a later
session raises the same question). This sweep asks the judge about the pairs on the list, as the
cycle would have: one question a reported node, its strongest :data:`CANDIDATES_KEPT` same-type
candidates as the options, each node shown with quotes of the earliest turns that say it.

With ``--across`` it also asks what a cycle with the judge asks across sessions and a cycle without
it never lists: each prose name beside the graph's longer names of its type (`Wallace` / `David
Wallace`, said in different sessions; :func:`with_graph_extensions`) — for a graph digested before
the judge was turned on. Its answers of "a new node" are kept like the others, so a second sweep
asks only the pairs that are new since; a cycle's own "a new node" is not kept once its session
commits, so on a graph digested with the judge ``--across`` asks those pairs again.

Each answer is applied before the next question is asked, so no answer is paid for twice: "link"
folds the node into the option it names (merge rule ``auditor``, undone by ``rem-cycle unmerge``),
"a new node" keeps the node apart from every option it was shown (``identity_apart`` with
``decided_by = judge``, taken back by ``rem-cycle apart --undo``). A failed call, or an answer
naming no option, changes nothing: the pairs stay listed for a person or a later sweep. With
``--cross-type`` a pair across types (`CONCEPT:rachel` / `PERSON:Rachel`, the one name typed two
ways) is asked too, in a question of its own — a cycle never asks one, since a link across types
did not last: names are looked up within a type, so the CONCEPT's next mention made it again. The
judge's link is a merge, and a merge across types now lasts: the merged id's next mention links to
where it went (``merged-id``, :attr:`pipelines.identity.AliasIndex.redirects`). A CONCEPT chosen
for a typed node folds into it. Off by default: with the labels answering it settled the list
whole but added no labelled pair and cost one (bench/RESULTS.md, "The review list answered by the
judge").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from pipelines.identity import (
    ASKED_EXTENSION, CANDIDATES_KEPT, EXTENSION_SCORE, AliasIndex, AnswerOffOptions, Auditor, AuditUnanswered, NodeRef,
    graph_extensions, node_quotes, offered,
)
from pipelines.resolver import QUOTE_POINTS
from store.library_log import get_logger

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ReviewQuestion:
    """"Which of ``options`` is ``node_id``?": a reported node and (some of) its candidates of one
    kind — of its type, or of other types — strongest first, each with the score the review list
    gives it."""

    node_id: str
    options: tuple[str, ...]
    scores: tuple[float, ...]


def review_questions(pairs: Sequence[Mapping[str, Any]], *, cross_type: bool = False) -> tuple[list[ReviewQuestion], int]:
    """The questions that settle the review list's ``pairs`` (rows as
    :meth:`store.merges.MergeStore.candidates` lists them, best score first), and how many
    ``cross-type`` pairs (`CONCEPT:rachel` / `PERSON:Rachel`) no question asks. Pure. A node's
    candidates of its own type are asked about :data:`CANDIDATES_KEPT` at a time, strongest first,
    in the order of each node's strongest pair; then, with ``cross_type``, likewise its candidates
    of other types. Never the two kinds in one question: an answer links a node to one option, and
    a node may be both its CONCEPT twin and a longer name of its own type."""
    same: dict[str, list[tuple[str, float]]] = {}
    across: dict[str, list[tuple[str, float]]] = {}
    for pair in pairs:
        kind = same if pair["node_label"] == pair["candidate_label"] else across
        kind.setdefault(pair["node_id"], []).append((pair["candidate_id"], float(pair["score"])))
    questions = []
    for by_node in (same, across) if cross_type else (same,):
        for node_id, options in by_node.items():
            for start in range(0, len(options), CANDIDATES_KEPT):
                shown = options[start:start + CANDIDATES_KEPT]
                questions.append(ReviewQuestion(node_id, tuple(o for o, _ in shown), tuple(s for _, s in shown)))
    return questions, 0 if cross_type else sum(map(len, across.values()))


def folded_way(node: NodeRef, chosen: NodeRef) -> tuple[str, str]:
    """(merged, into) for the judge's answer that ``node`` is ``chosen`` (pure): ``node`` folds into
    ``chosen``, unless a CONCEPT (the extractor's fallback type) was chosen for a typed node — the
    typed node keeps its id then, as the ``named`` rule keeps it."""
    if chosen.type == "CONCEPT" and node.type != "CONCEPT":
        return chosen.id, node.id
    return node.id, chosen.id


def with_graph_extensions(
    pairs: Sequence[Mapping[str, Any]], index: AliasIndex, *, blocked: frozenset[tuple[str, str]] = frozenset(),
    said_with: Callable[[str, Collection[str]], Iterable[Collection[str]]] | None = None,
) -> list[Mapping[str, Any]]:
    """``pairs`` (the review list's rows), then each :func:`pipelines.identity.graph_extensions` pair
    of the graph ``index`` holds (``blocked``, ``said_with`` as there) that they do not list either
    way round, as a row of rule :data:`ASKED_EXTENSION`. The questions a cycle with a judge asks
    across sessions, for a graph whose sessions were committed without one (``--across``)."""
    listed = {frozenset((p["node_id"], p["candidate_id"])) for p in pairs}
    extra = [
        {"node_id": short, "node_label": index.nodes[short].type, "candidate_id": long, "candidate_label": index.nodes[long].type,
         "rule": ASKED_EXTENSION, "score": EXTENSION_SCORE}
        for short, long in graph_extensions(index, blocked=blocked, said_with=said_with) if frozenset((short, long)) not in listed
    ]
    return [*pairs, *extra]


class ReviewDesk(Protocol):
    """What the sweep reads and changes (the worker's adapter over the graph's stores)."""

    async def nodes(self, node_ids: Collection[str]) -> dict[str, NodeRef]:
        """The knowledge nodes among ``node_ids`` that exist now, as the graph names them."""
        ...

    async def first_texts(self, node_ids: Collection[str], *, points: int) -> dict[str, list[str]]:
        """By node id, the texts of its earliest ``points`` provenance points, earliest first."""
        ...

    async def link(self, node_id: str, into_id: str, *, score: float, options: Sequence[str]) -> int:
        """Fold ``node_id`` into ``into_id`` as the judge said (one transaction); the merge id.
        :class:`LinkRefused` when the graph refuses the merge (nothing changed)."""
        ...

    async def keep_apart(self, node_id: str, others: Sequence[str]) -> None:
        """Record that ``node_id`` is none of ``others``, as the judge said (one transaction)."""
        ...


class LinkRefused(Exception):
    """The graph refused a link the judge answered (a name ``forget --node`` keeps out of the
    node it would join, a node gone meanwhile): nothing changed, the pairs stay listed."""


@dataclass(slots=True)
class ReviewSweep:
    """What a sweep asked and did. ``linked``: (merged, into, merge id); ``apart``: (node, the
    options it was kept apart from); ``unanswered``: nodes whose question got no answer;
    ``refused``: (merged, into, why the graph refused the merge); ``gone``: questions
    not asked because the node, or every option, left the graph first (folded by an earlier answer,
    or by a cycle); ``not_asked``: questions past the limit; ``cross_type_left``: cross-type pairs
    not asked (without ``cross_type``)."""

    asked: int = 0
    linked: list[tuple[str, str, int]] = field(default_factory=list)
    apart: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    gone: int = 0
    not_asked: int = 0
    cross_type_left: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The sweep as JSON-ready data."""
        return {
            "asked": self.asked,
            "linked": [{"node": n, "into": i, "merge_id": m} for n, i, m in self.linked],
            "apart": [{"node": n, "from": list(o)} for n, o in self.apart],
            "unanswered": self.unanswered, "refused": [{"node": n, "into": i, "why": w} for n, i, w in self.refused],
            "gone": self.gone, "not_asked": self.not_asked, "cross_type_left": self.cross_type_left,
        }


async def judge_review_list(
    pairs: Sequence[Mapping[str, Any]], desk: ReviewDesk, auditor: Auditor, *, limit: int | None = None,
    cross_type: bool = False, sweep: ReviewSweep | None = None,
) -> ReviewSweep:
    """Ask ``auditor`` the :func:`review_questions` of ``pairs``, at most ``limit`` of them
    (``None``: all; ``cross_type``: the pairs across types too), and apply each answer through
    ``desk`` before asking the next (module docstring); the figures go into ``sweep`` as they come (a caller stopped midway reads what was
    done). Each question is read from the graph as it is when asked: an option folded or
    forgotten since the list was read is not offered."""
    questions, left = review_questions(pairs, cross_type=cross_type)
    sweep = sweep if sweep is not None else ReviewSweep()
    sweep.cross_type_left = left
    for number, question in enumerate(questions):
        if limit is not None and sweep.asked >= limit:
            sweep.not_asked = len(questions) - number
            break
        refs = await desk.nodes({question.node_id, *question.options})
        node = refs.get(question.node_id)
        options = [refs[o] for o in question.options if o in refs]
        if node is None or not options:
            sweep.gone += 1
            continue
        texts = await desk.first_texts([node.id, *(o.id for o in options)], points=QUOTE_POINTS)
        quotes = {ref.id: node_quotes(ref, texts.get(ref.id, ())) for ref in (node, *options)}
        sweep.asked += 1
        try:
            chosen = offered(await auditor(node, options, quotes=quotes), options)
        except AuditUnanswered as exc:
            if isinstance(exc, AnswerOffOptions):
                log.warning("identity judge answered with no option: the pairs stay for review",
                            node=node.id, options=[o.id for o in options], reason=str(exc))
            sweep.unanswered.append(node.id)
            continue
        # A paid answer is applied and counted whole: a stop (a signal) waits for both, so what the
        # caller reports of ``sweep`` is what the graph holds.
        with anyio.CancelScope(shield=True):
            await _apply(desk, sweep, question, node, next((o for o in options if o.id == chosen), None), tuple(o.id for o in options))
    return sweep


async def _apply(desk: ReviewDesk, sweep: ReviewSweep, question: ReviewQuestion, node: NodeRef, chosen: NodeRef | None, shown: tuple[str, ...]) -> None:
    """Apply the judge's answer ``chosen`` (``None``: a new node) to ``question`` (about ``node``,
    ``shown`` the options it was offered) through ``desk``, and count it in ``sweep``."""
    if chosen is None:
        await desk.keep_apart(node.id, shown)
        sweep.apart.append((node.id, shown))
        return
    merged, into = folded_way(node, chosen)
    score = question.scores[question.options.index(chosen.id)]
    try:
        sweep.linked.append((merged, into, await desk.link(merged, into, score=score, options=shown)))
    except LinkRefused as exc:
        sweep.refused.append((merged, into, str(exc)))
