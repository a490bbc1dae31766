"""Composition of recall for the CLI and the MCP server: open the graph read-only, wire the vector
signal to Chroma when ``REM_RECALL_VECTOR`` is on, run the pure core, and re-index turn text."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.from_thread

from config import Settings
from pipelines.recall import (
    RecallInputError,
    RecallRequest,
    RecallWeights,
    VectorUnavailableError,
    fact_item,
    match_expression,
    pack_entity,
    pack_nodes,
    query_terms,
    recall,
    turn_item,
    validate,
    vector_limit,
)
from pipelines.vocabulary import PROVENANCE_RELATIONSHIPS
from store.chroma import ChromaStore, ChromaStoreError
from store.backend import database_exists, database_location, open_database
from store.db import Database
from store.errors import QueryInterruptedError
from store.graph import GraphStore
from store.ids import InvalidIdError, normalize_graph_node_id, row_kind
from store.merges import MergeStore
from store.recall_index import RecallIndex, Scope, TurnRecord
from worker import knowledge
from worker.knowledge import NoGraphError

_SHOW_TURNS = 20
# How many recorded merges show_node follows from the id it was given (a merged node merged again).
_MERGE_HOPS = 5
# A recall that has not finished by then is stopped (SQLite interrupts it): a pathological query or
# a huge graph costs the caller an error, never a worker thread held for minutes.
RECALL_DEADLINE_SECONDS = 10.0


class RecallTimeoutError(RuntimeError):
    """A recall took longer than :data:`RECALL_DEADLINE_SECONDS` and was stopped."""


def weights_from(settings: Settings) -> RecallWeights:
    """The fusion weights the settings give."""
    return RecallWeights(
        keyword=settings.recall_weight_keyword, entities=settings.recall_weight_entities,
        vector=settings.recall_weight_vector, context=settings.recall_weight_context,
        session=settings.recall_weight_session, recency=settings.recall_weight_recency, rrf_k=settings.recall_rrf_k,
        keyword_anchor=settings.recall_keyword_anchor, scene_vote=settings.recall_scene_vote,
        passage_anchor=settings.recall_passage_anchor,
    )


@contextmanager
def open_bounded(settings: Settings) -> Iterator[Database]:
    """The existing graph, opened read-only (the agent-facing reads never write, nor migrate; a
    running cycle is not blocked) within :data:`RECALL_DEADLINE_SECONDS` (else
    :class:`RecallTimeoutError`), every read through it of one state of the graph (a read snapshot:
    a cycle or a forget committing meanwhile is wholly in or wholly out of the answer).
    :class:`NoGraphError` when there is no graph yet."""
    if not database_exists(settings):
        raise NoGraphError(f"no graph database at {database_location(settings)} (run a REM cycle first)")
    db = open_database(settings, readonly=True)
    db.set_deadline(RECALL_DEADLINE_SECONDS)
    try:
        with db.read_snapshot():
            yield db
    except QueryInterruptedError as exc:
        raise RecallTimeoutError(f"recall took more than {RECALL_DEADLINE_SECONDS:g} s and was stopped; ask something narrower") from exc
    finally:
        db.close()


@contextmanager
def open_index(settings: Settings) -> Iterator[RecallIndex]:
    """The recall index of the existing graph, opened as :func:`open_bounded` opens it, and a clear
    error when the graph predates the index (open it once with any writing command to migrate it)."""
    with open_bounded(settings) as db:
        if not db.table_exists("recall_turns"):
            raise NoGraphError(
                f"the graph at {database_location(settings)} has no recall index yet: run `rem-cycle reindex` (it migrates and fills it)"
            )
        yield RecallIndex(db)


class ChromaNearest:
    """The vector signal: the memory collection's own query (its embedding function), called from
    the worker thread the core runs in."""

    def __init__(self, chroma: ChromaStore) -> None:
        self.chroma = chroma

    def nearest(self, text: str, *, limit: int) -> list[str]:
        try:
            return anyio.from_thread.run(self._nearest, text, limit)
        except TimeoutError as exc:
            raise VectorUnavailableError(f"Chroma did not answer within {RECALL_DEADLINE_SECONDS:g} s") from exc
        except ChromaStoreError as exc:
            raise VectorUnavailableError(str(exc)) from exc

    def asked(self, request: RecallRequest) -> "AskedNearest":
        """The answer to ``request``'s nearest-turns question, asked now: before the graph's
        index is opened, so that a slow Chroma holds no read snapshot open and uses none of the
        graph's deadline (which stopped the reads after it: the whole recall failed where the
        vector signal alone should have)."""
        try:
            return AskedNearest(self.nearest(request.query, limit=vector_limit(request)))
        except VectorUnavailableError as exc:
            return AskedNearest([], error=exc)

    async def _nearest(self, text: str, limit: int) -> list[str]:
        # Within recall's own deadline: a hung Chroma must not hold the caller (and a worker
        # thread) for REM_CHROMA_TIMEOUT_SECONDS.
        with anyio.fail_after(RECALL_DEADLINE_SECONDS):
            ids = await self.chroma.nearest_memories(text, limit=limit)
        return [f"memory:{i}" for i in ids]


class AskedNearest:
    """A vector signal already asked (:meth:`ChromaNearest.asked`): its ids, or the error that
    :func:`pipelines.recall.recall` reports."""

    def __init__(self, ids: list[str], *, error: VectorUnavailableError | None = None) -> None:
        self.ids, self.error = ids, error

    def nearest(self, text: str, *, limit: int) -> list[str]:
        if self.error is not None:
            raise self.error
        return self.ids[:limit]


async def run_recall(settings: Settings, request: RecallRequest, *, chroma: ChromaStore | None = None) -> dict[str, Any]:
    """Recall ``request`` against the graph (and Chroma when ``REM_RECALL_VECTOR``); the JSON shape.
    Raises :class:`RecallInputError` for a request that cannot be answered as given."""
    validate(request)
    vector = None
    if settings.recall_vector:
        vector = ChromaNearest(chroma or ChromaStore(settings))

    def answer() -> dict[str, Any]:
        asked = vector.asked(request) if vector is not None else None
        with open_index(settings) as index:
            return recall(request, source=index, vector=asked, weights=weights_from(settings)).as_dict()

    return await anyio.to_thread.run_sync(answer)


def search_nodes(settings: Settings, query: str, *, user: str | None = None, as_of: str | None = None, limit: int = 10,
                 budget_tokens: int | None = None) -> dict[str, Any]:
    """Knowledge nodes matching ``query`` (names, aliases, descriptions), each with its facts, in
    ``user``'s scope, packed into ``budget_tokens`` (default ``REM_RECALL_BUDGET_TOKENS``) as recall
    packs its facts (:func:`pipelines.recall.pack_nodes`): a node's description and quotes can be
    long, and ``limit`` of them are no bound on what a caller's context receives."""
    budget = settings.recall_budget_tokens if budget_tokens is None else budget_tokens
    request = RecallRequest(query=query, user=user, as_of=as_of, limit=limit, budget_tokens=budget)  # validate() checks them
    terms = validate(request)
    match = match_expression(terms)
    with open_index(settings) as index:
        scope = _scope(index, user=user, as_of=as_of)
        ids = index.matching_nodes(match, scope, limit=request.limit) if match else []
        facts = index.facts(ids, scope, exclude_relationships=PROVENANCE_RELATIONSHIPS, edges_per_node=5)
    return {"query": query, "terms": query_terms(query), **pack_nodes([fact_item(f) for f in facts], budget_tokens=budget)}


T = TypeVar("T")


def _merged_onward(index: RecallIndex, scope: Scope, node_id: str, read: Callable[[str], T]) -> tuple[str, T] | None:
    """``read(node_id)`` when it finds something (truthy), else of the node ``node_id`` was merged
    into, and onward (an id a caller kept from before a merge, as `show` follows it): the id read
    and what was found, ``None`` for nothing. The id of a node the caller never saw is no entity to
    them, merged or not: a redirect would tell that another user's memory held it."""
    merges = MergeStore(index.db)
    found = read(node_id)
    for _ in range(_MERGE_HOPS):
        if found:
            break
        onward = merges.records(merged_id=node_id, active=True, limit=1)
        if not onward or (scope.sessions is not None and not index.merge_seen(onward[0].merge_id, scope)):
            return None
        node_id = onward[0].into_id
        found = read(node_id)
    return (node_id, found) if found else None


def show_node(settings: Settings, node_id: str, *, user: str | None = None, as_of: str | None = None,
              budget_tokens: int | None = None) -> dict[str, Any] | None:
    """One node in ``user``'s scope: its facts, strongest edges and the turns it came from; ``None``
    when it does not exist or is out of scope (the two are not told apart). A node merged into
    another is that one (``redirected_from``: the id asked for), as ``rem-cycle show`` shows it,
    when the merged node was in scope. With ``budget_tokens``,
    packed into it (:func:`pipelines.recall.pack_entity`): a node's turns are verbatim, and 20 tool
    outputs of a popular node can be megabytes."""
    try:
        node_id = normalize_graph_node_id(node_id)
    except InvalidIdError as exc:
        raise RecallInputError(str(exc)) from exc

    asked = node_id
    with open_index(settings) as index:
        scope = _scope(index, user=user, as_of=as_of)
        found = _merged_onward(index, scope, node_id, lambda n: index.facts(
            [n], scope, exclude_relationships=PROVENANCE_RELATIONSHIPS, edges_per_node=20))
        if found is None:
            return None
        node_id, facts = found
        grounding = index.grounding_turns([node_id], scope).get(node_id, [])
        turns = index.turns([m for m, _ in grounding[:_SHOW_TURNS]], scope)
    shown = [turn_item(turns[m], float(n), ["entities"]) for m, n in grounding[:_SHOW_TURNS] if m in turns]
    # The turns beyond the first 20 are neither shown nor omitted for the budget: their number says they exist.
    entity = {**fact_item(facts[0]), "redirected_from": asked if asked != node_id else None, "turns_total": len(grounding)}
    if budget_tokens is not None:
        return pack_entity(entity, shown, budget_tokens=budget_tokens)
    return {**entity, "turns": shown}


async def show_entity(settings: Settings, node_id: str, *, user: str | None = None, as_of: str | None = None,
                      budget_tokens: int | None = None) -> dict[str, Any] | None:
    """What the MCP ``show_node`` answers for ``node_id``: a knowledge node as :func:`show_node`
    shows it; a session or a turn (``session:…``/``memory:…``, as ``recall`` returns them) as
    ``rem-cycle show`` shows it — the knowledge nodes said in it, a turn with its text — when it is
    in ``user``'s scope (and known by ``as_of``). ``None`` when there is no such node in scope."""
    try:
        node_id = normalize_graph_node_id(node_id)
    except InvalidIdError as exc:
        raise RecallInputError(str(exc)) from exc
    if row_kind(node_id) is None:
        return await anyio.to_thread.run_sync(
            lambda: show_node(settings, node_id, user=user, as_of=as_of, budget_tokens=budget_tokens)
        )
    if not await anyio.to_thread.run_sync(_row_in_scope, settings, node_id, user, as_of):
        return None
    # Read-only and within recall's deadline, as every other read of the tools (it migrated an old
    # graph, and had no deadline).
    view = await knowledge.show_node(settings, node_id, limit=_SHOW_TURNS, as_of=as_of, open_db=open_bounded,
                                     chroma_seconds=RECALL_DEADLINE_SECONDS)
    if view is None:
        return None
    entity = {
        "id": view["id"], "label": view["label"], "name": view["name"], "description": view["description"],
        # In fact_item's form: an anchor's edges are the knowledge nodes said in it.
        "edges": [
            {"source": e["node"] if e["direction"] == "in" else view["id"], "relationship": e["relationship"],
             "target": view["id"] if e["direction"] == "in" else e["node"], "other": e["name"], "strength": e["weight"]}
            for e in view["edges"]
        ],
        "edges_total": view["edges_total"], "first_seen": view["first_seen"], "last_seen": view["last_seen"],
        "turns_total": view["turns_total"], "turns_error": view["turns_error"],
    }
    # Each turn as the graph holds it, in scope: ``show`` reads the text from Chroma's row, which an
    # import not yet digested may have moved into another user's session (``--allow-move``) with
    # that user's words, while the scope was checked against the graph's copy. Recall serves these.
    records = await anyio.to_thread.run_sync(_scoped_turns, settings, [t["memory"] for t in view["turns"]], user, as_of)
    turns = [
        {"memory_id": r.memory_id, "session_id": r.session_id, "turn_index": r.turn_index, "role": r.role,
         "created_at": r.created_at, "text": r.text}
        for r in (records.get(t["memory"]) for t in view["turns"]) if r is not None
    ]
    if budget_tokens is not None:
        return pack_entity(entity, turns, budget_tokens=budget_tokens)
    return {**entity, "turns": turns}


async def unseen_entity(settings: Settings, node_id: str, *, user: str | None = None, as_of: str | None = None) -> str:
    """What the MCP ``show_node`` says of ``node_id`` (valid) when :func:`show_entity` has no view of
    it: when ``user``'s scope (every session, without a user) holds it now but not at ``as_of``,
    that it was not known yet and since when *in that scope* — the line ``rem-cycle show --as-of``
    gives for the whole graph (:func:`worker.views.not_known_yet`); else ``no entity``. A node out
    of the caller's scope and one that does not exist are not told apart, as recall tells them not:
    another user's first mention of a node would tell of their sessions."""
    from worker.views import not_known_yet

    gone = f"no entity {node_id!r} (search_nodes finds ids by name)"
    if as_of is None:
        return gone
    if row_kind(node_id) is not None:
        # A session or a turn is known from its own createdAt, which its being in scope shows.
        if not await anyio.to_thread.run_sync(_row_in_scope, settings, node_id, user, None):
            return gone
        view = await knowledge.show_node(settings, node_id, limit=1, open_db=open_bounded, chroma_seconds=RECALL_DEADLINE_SECONDS)
        return gone if view is None else not_known_yet([view], node_id, as_of, date_option="as_of")

    def first_seen() -> tuple[str, tuple[bool, str | None]] | None:
        # A merged-away id: the node it was merged into, as show_node follows it now (la32out).
        with open_index(settings) as index:
            scope = _scope(index, user=user, as_of=None)
            return _merged_onward(index, scope, node_id, lambda n: seen if (seen := index.first_seen(n, scope))[0] else None)

    found = await anyio.to_thread.run_sync(first_seen)
    if found is None:
        return gone
    shown, (_, first) = found
    return not_known_yet([{"id": shown, "label": shown.partition(":")[0], "first_seen": first}], node_id, as_of, date_option="as_of")


def _row_in_scope(settings: Settings, node_id: str, user: str | None, as_of: str | None) -> bool:
    """Whether the session or turn ``node_id`` is ``user``'s (any, without a user) and known by ``as_of``."""
    if row_kind(node_id) == "memory":
        return bool(_scoped_turns(settings, [node_id], user, as_of))
    with open_index(settings) as index:
        scope = _scope(index, user=user, as_of=as_of)
        # A session before ``as_of`` is judged by ``show`` itself (its view of then).
        return scope.sessions is None or node_id in scope.sessions


def _scoped_turns(settings: Settings, memory_ids: list[str], user: str | None, as_of: str | None) -> dict[str, TurnRecord]:
    """The turns among ``memory_ids`` that are ``user``'s (any, without a user) and known by ``as_of``,
    with their text, as recall reads them."""
    with open_index(settings) as index:
        return index.turns(memory_ids, _scope(index, user=user, as_of=as_of))


def _scope(index: RecallIndex, *, user: str | None, as_of: str | None) -> Scope:
    return Scope(sessions=index.sessions_of_user(user) if user is not None else None, as_of=as_of)


@dataclass
class ReindexProgress:
    """How far :func:`reindex` got: turns read from Chroma, turns written to the index (counted in
    the page's own thread once its transaction committed, so a signal never hides a written page)."""

    scanned: int = 0
    written: int = 0


async def reindex(settings: Settings, *, page_size: int = 1_000, progress: ReindexProgress | None = None) -> dict[str, int]:
    """Fill the turn-text index from Chroma for every memory the graph holds (after upgrading a graph
    made before the index, or to repair it). Idempotent; one transaction per page."""
    db = await anyio.to_thread.run_sync(open_database, settings)
    chroma = ChromaStore(settings)
    done = progress or ReindexProgress()
    try:
        graph, index = GraphStore(db), RecallIndex(db)
        async for page in chroma.scan(settings.memory_collection, include=("documents",), page_size=page_size):
            texts = {f"memory:{row.id}": row.document for row in page}

            def write_page(texts: dict[str, str] = texts, read: int = len(page)) -> None:
                written = index.index_memory_nodes(graph.get_nodes(list(texts)).values(), texts)
                done.scanned, done.written = done.scanned + read, done.written + written

            await anyio.to_thread.run_sync(write_page)
        counts = await anyio.to_thread.run_sync(index.counts)
    finally:
        db.close()
    return {"scanned": done.scanned, "written": done.written, **counts}


__all__ = ["RecallInputError", "ReindexProgress", "RecallTimeoutError", "reindex", "run_recall", "search_nodes", "show_node", "weights_from"]
