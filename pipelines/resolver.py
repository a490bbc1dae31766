"""Identity resolution against the graph, as the extraction commit's matcher.

:class:`GraphResolver` is called by :func:`pipelines.extract.commit.commit_session` inside the
session's transaction with the session's candidates (the ``matcher`` interface: candidates and the
graph index in, candidate id → existing id out) and answers with a
:class:`pipelines.identity.Resolution`. It keeps an :class:`~pipelines.identity.AliasIndex` of the
graph's knowledge nodes in memory — built from the graph on first use, then kept current with what
each commit decides — so a commit costs a few dictionary look-ups, not a scan of the graph. A
commit that rolled back is noticed at the next call (a node it created is missing) and the index is
rebuilt from the graph. Workers sharing the database commit beside it: at each call the resolver
adds the nodes of the sessions committed since it last looked (``committed_since``, by the commit
sequence number — what the others did, never the graph's history), and a link to a node that is
gone (folded, forgotten, merged elsewhere) makes it rebuild the index and resolve again. The index
can outlive the extract phase (:meth:`GraphResolver.kept`, handed to the next phase's resolver):
it is taken up only when the graph's identity epoch (``epoch``: it changes with every write to
names, labels or aliases that was not a session commit) is the one it was built in, and then
learns the commits made since like any others' — so a daemon builds it once, not every cycle.

The optional model auditor is asked *before* the transaction (:meth:`GraphResolver.prepare`, in
async code), never while the database is locked; each answer is kept as it is given, by the
question it answers (:class:`GivenVerdicts`: ``identity_verdicts``, migration 16), so the same
question is never paid for twice — not even by a worker killed before the session's commit. A
question shows its existing options as the graph names them (read by id, ``load_named``), never as
the index learned them: the key is made of those words, and a kept index and a fresh one (after a
restart, in another worker) must word one question alike (qkey33). The
candidates ``rem-cycle forget --node`` keeps out (``kept_out``) are left out of those questions, as
the commit leaves them out of its batch: no call is paid for about a node the commit drops, and
the batch asked about is the one the commit resolves. Each node of a question is shown with a
few bounded quotes of where it is said (:func:`pipelines.identity.node_quotes`): an incoming
node's from the session being committed (``said``), an existing one's from its earliest grounding
turns (:meth:`GivenVerdicts.first_texts`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from pipelines import hubs
from pipelines.identity import (
    ASKED_EXTENSION,
    CANDIDATE,
    CREATE,
    LINK,
    QUOTES_PER_NODE,
    AliasIndex,
    AnswerOffOptions,
    Auditor,
    AuditUnanswered,
    NodeRef,
    Resolution,
    Thresholds,
    Verdict,
    audit_options,
    audit_question,
    batch_groups,
    folded_concepts,
    learn,
    node_quotes,
    offered,
    resolve_batch,
    without_foreign_receivers,
)
from store.library_log import get_logger

log = get_logger(__name__)

# An existing node's earliest provenance points read for its quotes: a turn often holds several
# points of one node, and a few turns are what the auditor is shown.
QUOTE_POINTS = 4 * QUOTES_PER_NODE


class CandidateLike(Protocol):
    id: str
    type: str
    name: str
    aliases: tuple[str, ...]


def _refs(candidates: Iterable[CandidateLike]) -> list[NodeRef]:
    return [NodeRef(c.id, c.type, c.name, tuple(c.aliases)) for c in candidates]


class GivenVerdicts(Protocol):
    """The auditor's answers, by question (:func:`pipelines.identity.audit_question`), kept as
    each is given (store.verdicts)."""

    async def given(self, questions: Collection[str]) -> dict[str, str | None]:
        """The answers already given to these questions (``None``: "a new node")."""
        ...

    async def keep(self, question: str, target: str | None, *, session: str) -> None:
        """Keep an answer just given to a question ``session``'s extraction asked, durably, before
        the next question is asked."""
        ...

    async def first_texts(self, node_ids: Collection[str], *, points: int) -> dict[str, list[str]]:
        """For each of the graph's nodes ``node_ids``, the texts it was first grounded in (of its
        ``points`` earliest provenance points: each point's turn text, else its evidence), earliest
        first: what the auditor reads of where an existing node is said."""
        ...


@dataclass(frozen=True, slots=True)
class KeptIndex:
    """An identity index handed from one extract phase to the next: what it knew (the commit
    sequence number it had seen, the nodes the last commit created) and the epoch it was built in."""

    index: AliasIndex
    blocked: frozenset[tuple[str, str]]
    seen: int
    created: tuple[str, ...]
    epoch: str


class GraphResolver:
    """The stateful matcher. ``load_nodes`` lists the graph's knowledge nodes, ``load_blocked`` the
    (merged, into) pairs whose merge was undone, ``existing`` says which of some ids exist;
    ``epoch`` the graph's identity epoch (``None`` while a write other than a commit is pending);
    ``kept`` an index a previous phase's resolver built (taken up only in the same epoch);
    ``kept_out`` the ids of some candidates that ``forget --node`` keeps out
    (:func:`pipelines.extract.commit.suppressed_ids`), never asked about; ``load_named`` the
    graph's nodes among some ids, as ``load_nodes`` lists them (default: ``load_nodes`` filtered):
    an auditor's question shows its options as the graph names them (:func:`pipelines.identity.audit_options`);
    ``load_redirects`` the ids folded into a node of another type, by where they went
    (:attr:`pipelines.identity.AliasIndex.redirects`)."""

    def __init__(
        self,
        *,
        load_nodes: Callable[[], Iterable[NodeRef]],
        load_blocked: Callable[[], frozenset[tuple[str, str]]],
        existing: Callable[[Iterable[str]], set[str]],
        committed_since: Callable[[int | None], tuple[int, list[NodeRef]]] | None = None,
        auditor: Auditor | None = None,
        verdicts: GivenVerdicts | None = None,
        thresholds: Thresholds = Thresholds(),
        epoch: Callable[[], str | None] | None = None,
        kept: KeptIndex | None = None,
        kept_out: Callable[[Sequence[CandidateLike]], Collection[str]] | None = None,
        load_named: Callable[[Collection[str]], Iterable[NodeRef]] | None = None,
        load_redirects: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self._load_nodes = load_nodes
        self._load_redirects = load_redirects
        self._load_named = load_named or (lambda ids: [ref for ref in load_nodes() if ref.id in ids])
        self._kept_out = kept_out
        self._load_blocked = load_blocked
        self._existing = existing
        # (latest commit number, the nodes of the sessions committed after ``since``); ``None``:
        # the latest number alone.
        self._committed_since = committed_since
        self._seen = 0
        self.auditor = auditor
        self.verdicts = verdicts
        self.thresholds = thresholds
        self._index: AliasIndex | None = None
        self._blocked: frozenset[tuple[str, str]] = frozenset()
        self._created: list[str] = []
        self._decisions: dict[tuple[str, tuple[str, ...]], str | None] = {}
        self._unanswered: set[tuple[str, tuple[str, ...]]] = set()  # decisions the auditor could not give
        # By question, the ids of the options the auditor was shown: its "a new node" settles those.
        self._shown: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}
        self._lock = threading.RLock()
        self._epoch = epoch
        self._kept = kept if epoch is not None and committed_since is not None else None
        self._built_epoch: str | None = None
        self.builds = 0  # indexes built from the whole graph (the phase record counts them)

    def reset(self) -> None:
        """Forget the index (the next call rebuilds it from the graph)."""
        with self._lock:
            self._index = None

    def kept(self) -> KeptIndex | None:
        """The index to hand to the next phase's resolver; ``None`` when there is none, or when it
        was built while a write other than a commit was pending."""
        with self._lock:
            if self._index is None:
                return self._kept  # never asked: hand on what it was given
            if self._built_epoch is None:
                return None
            return KeptIndex(self._index, self._blocked, self._seen, tuple(self._created), self._built_epoch)

    def _take_up_kept(self) -> None:
        kept, self._kept = self._kept, None
        if kept is None or self._epoch is None or self._committed_since is None:
            return
        if self._epoch() == kept.epoch and self._committed_since(None)[0] >= kept.seen:
            self._index, self._blocked, self._seen = kept.index, kept.blocked, kept.seen
            self._created, self._built_epoch = list(kept.created), kept.epoch
        else:
            log.info("kept identity index is stale (the graph changed otherwise than by commits): rebuilding")

    def _ready_index(self) -> AliasIndex:
        if self._index is None and self._kept is not None:
            self._take_up_kept()
        if self._index is not None and self._created:
            created = set(self._created)
            if created - self._existing(created):
                log.info("identity index stale (a commit rolled back): rebuilding")
                self._index = None
        if self._index is not None and self._epoch is not None and self._epoch() != self._built_epoch:
            # A write that was not a plain commit (a worker's commit split a name out; forget,
            # merge, unmerge) changed what the index holds: learning commits cannot follow it.
            log.info("identity index stale (a new identity epoch): rebuilding")
            self._index = None
        if self._index is None:
            if self._committed_since is not None:
                self._seen = self._committed_since(None)[0]  # before the read: a commit between is re-read
            self._built_epoch = self._epoch() if self._epoch is not None else None  # before the read, too
            self._index = AliasIndex.build(self._load_nodes())
            self._index.redirects = dict(self._load_redirects()) if self._load_redirects is not None else {}
            self.builds += 1
            self._blocked = self._load_blocked()
            self._created = []
        elif self._committed_since is not None:
            self._seen, refs = self._committed_since(self._seen)
            for ref in refs:
                self._index.add(ref)
            # A node another worker's commit folded into one of these keeps its name as the
            # survivor's alias, and commits start no new epoch: left in the index, it would sit
            # beside the survivor and keep a later name from being a candidate of either
            # (foldidx). One existence read of the nodes sharing a name with what was committed.
            sharing = {other for ref in refs for other in self._index.sharing_a_name(ref)}
            for gone in sharing - self._existing(sharing) if sharing else ():
                self._index.remove(gone)
        return self._index

    async def prepare(
        self, candidates: Sequence[CandidateLike], *, session: str = "",
        said: Callable[[], Mapping[str, Sequence[str]]] | None = None,
    ) -> int:
        """Settle the ambiguous candidates of ``session`` (its id: the kept verdicts name it) with
        the auditor (when there is one), before the commit. ``said``, called once there is a question:
        by candidate id, the texts of the session that say it (:func:`pipelines.extract.reduce.said_texts`), shown to the auditor
        beside the earliest texts each existing option was grounded in (``verdicts.first_texts``).
        Returns how many questions were asked."""
        if self.auditor is None:
            return 0

        def resolve_now() -> tuple[list[NodeRef], list[Verdict], dict[str, NodeRef]]:
            # Without the candidates the commit drops before it resolves (pipelines/extract/commit.py).
            gone = self._kept_out(candidates) if self._kept_out is not None else ()
            refs = _refs(c for c in candidates if c.id not in gone)
            with self._lock:
                index = self._ready_index()
                verdicts = resolve_batch(refs, index, blocked=self._blocked, thresholds=self.thresholds, judged=self.auditor is not None)
            # The options of a question as the graph names them, not as the index learned them:
            # a question's words are its key, and a fresh index (after a restart) has the graph's.
            said = {ref.id for ref in refs}
            wanted = {m.node_id for ref, v in zip(refs, verdicts, strict=True) if v.action == CANDIDATE and _question(v) not in self._decisions
                      for m in v.candidates if m.type == ref.type and m.node_id not in said}
            return refs, verdicts, {ref.id: ref for ref in self._load_named(wanted)} if wanted else {}

        refs, verdicts, graph = await anyio.to_thread.run_sync(resolve_now)
        questions: dict[tuple[str, tuple[str, ...]], tuple[NodeRef, list[NodeRef], str]] = {}
        batch = {ref.id: ref for ref in refs}
        for ref, verdict in zip(refs, verdicts, strict=True):
            key = _question(verdict)
            options = audit_options(verdict, ref, graph, batch)
            if options and key not in self._decisions:
                questions[key] = (ref, options, audit_question(ref, options))
                self._shown[key] = frozenset(o.id for o in options)
        given = await self.verdicts.given({q for *_, q in questions.values()}) if self.verdicts is not None and questions else {}
        for key, (*_, question) in list(questions.items()):
            if question in given:
                self._decisions[key] = given[question]
                del questions[key]
        # Where the session says its nodes is read only when there is a question to show it with.
        shown = await self._quotes(questions.values(), said() if said is not None and questions else {})
        for key, (ref, options, question) in questions.items():
            try:
                chosen = offered(await self.auditor(ref, options, quotes=shown), options)
            except AuditUnanswered as exc:
                if isinstance(exc, AnswerOffOptions):
                    # A failed call is logged where it failed; an answer off the list only here, so
                    # an operator sees a model that names ids it was not shown.
                    log.warning("identity judge answered with no option: nothing kept, the pair stays for review",
                                node=ref.id, options=[o.id for o in options], reason=str(exc))
                self._decisions[key] = None  # this phase goes on without it; a later one asks again
                self._unanswered.add(key)
                continue
            if self.verdicts is not None:
                await self.verdicts.keep(question, chosen, session=session)
            self._decisions[key] = chosen
        return len(questions)

    async def _quotes(
        self, questions: Iterable[tuple[NodeRef, list[NodeRef], str]], said: Mapping[str, Sequence[str]],
    ) -> dict[str, tuple[str, ...]]:
        """By node id, the quotes the auditor is shown: an incoming node's from ``said``, an
        existing option's from the graph (one bounded read for all the questions to ask)."""
        asked = list(questions)
        incoming = {ref.id: ref for ref, _, _ in asked}
        options = {o.id: o for _, chosen, _ in asked for o in chosen}
        # An option new in this session (audit_options: a batch node) is said here, not in the graph.
        existing = sorted(set(options) - set(said))
        read = await self.verdicts.first_texts(existing, points=QUOTE_POINTS) if self.verdicts is not None and existing else {}
        return {
            **{node_id: node_quotes(ref, said.get(node_id) or read.get(node_id, ())) for node_id, ref in options.items()},
            **{node_id: node_quotes(ref, said.get(node_id, ())) for node_id, ref in incoming.items()},
        }

    def __call__(self, candidates: Sequence[CandidateLike], graph_index: Any = None) -> Resolution:
        """The matcher: resolve, apply settled auditor answers, learn the outcome."""
        with self._lock:
            index = self._ready_index()
            refs = _refs(candidates)
            verdicts = resolve_batch(refs, index, blocked=self._blocked, thresholds=self.thresholds, judged=self.auditor is not None)
            # The graph's nodes a verdict names (an exact id, a link or a candidate not of this
            # batch): one of them gone (another worker folded or forgot it) means the index is
            # stale — and a stale node beside the one it was folded into would make an ambiguity.
            batch = {r.id for r in refs}
            named = {v.target for v in verdicts if v.action == LINK and v.target is not None and (v.rule == "exact-id" or v.target not in batch)}
            named |= {m.node_id for v in verdicts for m in v.candidates if m.node_id not in batch}
            # And a name linked elsewhere whose own node exists: someone split it out (or unmerged it).
            linked_away = {v.node_id for v in verdicts if v.action == LINK and v.target not in (None, v.node_id)}
            present = self._existing(named | linked_away)
            if named - present or linked_away & present:
                log.info("identity index stale (a node it links to is gone, or one it links away exists): rebuilding")
                self._index = None
                index = self._ready_index()
                verdicts = resolve_batch(refs, index, blocked=self._blocked, thresholds=self.thresholds, judged=self.auditor is not None)
            verdicts = [separated(self._settled(v), self._blocked) for v in verdicts]
            checked = hubs.check(refs, verdicts, index)
            verdicts = without_foreign_receivers(refs, checked.verdicts, index)
            # Learned under the ids the commit keeps: a link within the batch keeps its group's least
            # id (`Beesly` linked to `Pam Beesly`, both new, is `PERSON:Beesly`). Learned under the
            # link's target instead, the index would hold a node the graph lacks, and the next call
            # would rebuild it all for a rollback that never happened.
            resolution = Resolution(verdicts)
            _, moved = batch_groups([r.id for r in refs], resolution, verdicts, shorts=checked.shorts)
            learn(index, refs, verdicts, moved)
            if checked.splits:
                self._index = None  # the commit moves names out of nodes: rebuild at the next call
            self._created = sorted({moved.get(v.node_id, v.node_id) for v in verdicts if v.target is None or v.target == v.node_id})
            for verdict in verdicts:
                if verdict.action == CANDIDATE:
                    # Debug: a busy graph reports many; the run record counts them (identity_candidates).
                    log.debug(
                        "identity candidate (created, not merged)",
                        node=verdict.node_id, rule=verdict.rule,
                        candidates=[(m.node_id, m.rule, m.score) for m in verdict.candidates[:5]],
                    )
            resolution.hubs = checked  # type: ignore[attr-defined]
            return resolution

    def _settled(self, verdict: Verdict) -> Verdict:
        key = _question(verdict)
        if verdict.action != CANDIDATE or key not in self._decisions:
            return verdict
        chosen = self._decisions[key]
        if chosen is not None:
            score = next(m.score for m in verdict.candidates if m.node_id == chosen)
            return Verdict(verdict.node_id, LINK, chosen, "auditor", score, verdict.candidates)
        if key in self._unanswered:
            return verdict
        # The judge said "a new node": every pair it was shown leaves with its answer (judge34;
        # before, only the ``extension-asked`` ones), and the pairs offered to a judge alone (never
        # the review list's). What else it was not shown — a cross-type pair, one ranked past the
        # options — it did not settle: that stays for review.
        # A fold the question kept (named35: a CONCEPT the node absorbs) is no pair: it stays, answered or not.
        shown = self._shown.get(key, frozenset())
        folds = tuple(m for m in verdict.candidates if m.node_id in folded_concepts(verdict))
        kept = tuple(m for m in verdict.candidates if m.node_id not in shown and m.rule != ASKED_EXTENSION and m not in folds)
        if not kept:
            return Verdict(verdict.node_id, CREATE, None, "auditor", 0.0, folds)
        return Verdict(verdict.node_id, CANDIDATE, None, kept[0].rule, kept[0].score, (*kept, *folds)) if len(kept) + len(folds) < len(verdict.candidates) else verdict


def separated(verdict: Verdict, blocked: frozenset[tuple[str, str]]) -> Verdict:
    """An ambiguity among nodes someone separated (a merge undone between two of them) stays a
    question for review: the commit never bridges it (pure; :func:`pipelines.identity.bridges`)."""
    ids = [m.node_id for m in verdict.candidates]
    if verdict.action == CANDIDATE and verdict.rule.startswith("ambiguous-") and any((a, b) in blocked for a in ids for b in ids):
        return Verdict(verdict.node_id, CANDIDATE, None, "ambiguous-separated", verdict.score, verdict.candidates)
    return verdict


def _question(verdict: Verdict) -> tuple[str, tuple[str, ...]]:
    return verdict.node_id, tuple(sorted(m.node_id for m in verdict.candidates))


def node_refs(rows: Iterable[tuple[str, str, str, Any]]) -> list[NodeRef]:
    """(id, label, name, aliases) rows as :class:`NodeRef`."""
    return [NodeRef(i, label, name, tuple(a for a in aliases if isinstance(a, str)) if isinstance(aliases, list) else ()) for i, label, name, aliases in rows]
