"""Back-fill: materialise MEMORY / SESSION nodes on demand from their Chroma rows (DESIGN §4.5).

A node created here carries ``backfilled: true`` (a later live sync replaces it with
``liveIngested``). A memory's parent session is back-filled with it, written first in the same
transaction, so ``ORIGINATES_IN`` never dangles; a session with no summary row but with memory rows
becomes a minimal node (``minimal: true``); one with neither is ``chroma-row-not-found`` (never
faked). A session or turn ``rem-cycle forget`` removed is never back-filled (``forgotten``): its
rows are still in Chroma, but the tombstone keeps it out of the graph.

- :func:`plan_backfill` is the pure core: rows in, nodes, edges and one outcome per id out.
- :func:`plan_nodes` / :func:`write_backfill` are one batch: one Chroma ``get(ids=[…])`` for
  memories, one ``where={"sessionId": {"$in": […]}}`` for summaries, one graph transaction (which
  the drain shares with the batch's own edges); :func:`ensure_nodes_exist` loops over batches.
- :func:`ingest_single_row` and :func:`link_nodes_async` are the one-id / one-edge forms.
- :func:`backfill_recent` is ``rem-cycle backfill``: live-sync recent sessions, then drain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import anyio

from pipelines.ingest import (
    BACKFILL_MARKER,
    ORIGINATES_IN,
    describe_error,
    memory_node,
    session_node,
    sync_batch_isolating_failures,
)
from pipelines.ports import UnitOfWork
from store.chroma import ChromaRow, ChromaStore, ChromaUnavailableError, MemoryRow, SummaryRow
from store.graph import Edge, LinkStats, Node, chunked
from store.ids import InvalidIdError, is_valid_row_id, normalize_graph_node_id, row_kind, row_suffix, session_node_id
from store.library_log import get_logger
from store.tombstones import MEMORY, SESSION

log = get_logger(__name__)

REASONS: tuple[str, ...] = (
    "unrecognized-prefix",
    "already-exists",
    "backfilled",
    "backfilled-minimal",
    "no-collection",
    "chroma-fetch-failed",
    "chroma-row-not-found",
    "forgotten",
    "error",
)
SUCCESS_REASONS = frozenset({"already-exists", "backfilled", "backfilled-minimal"})

# Why a ``forgotten`` outcome failed (the drain dead-letters its line with this detail).
FORGOTTEN = "removed by rem-cycle forget; its tombstone keeps it out of the graph"

# Ids per Chroma read and per graph transaction in the batched form.
DEFAULT_BATCH_SIZE = 500


@dataclass(frozen=True, slots=True)
class RowOutcome:
    """What happened (or, in a dry run, would happen) to one requested id."""

    reason: str
    graph_node_id: str | None = None
    error: str | None = None

    @property
    def success(self) -> bool:
        return self.reason in SUCCESS_REASONS

    def as_dict(self) -> dict[str, Any]:
        """The ``{success, reason, graph_node_id?, error?}`` result contract."""
        result: dict[str, Any] = {"success": self.success, "reason": self.reason}
        if self.graph_node_id is not None:
            result["graph_node_id"] = self.graph_node_id
        if self.error is not None:
            result["error"] = self.error
        return result


@dataclass(frozen=True, slots=True)
class Fetched:
    """What Chroma said about the rows a batch needs. ``None`` rows = the collection is missing;
    an ``*_error`` = the read failed (``unavailable`` tells a transport failure from the rest)."""

    memories: dict[str, MemoryRow] | None = None
    summaries: dict[str, SummaryRow] | None = None
    memory_error: str | None = None
    summary_error: str | None = None
    memory_unavailable: bool = True
    summary_unavailable: bool = True
    # Sessions known to have memory rows (without a summary row, only these become minimal nodes).
    sessions_with_memories: frozenset[str] = frozenset()
    # Not Chroma's word but the graph's: session and memory ids ``forget`` tombstoned.
    forgotten_sessions: frozenset[str] = frozenset()
    forgotten_memories: frozenset[str] = frozenset()


@dataclass(slots=True)
class BackfillPlan:
    """Nodes and edges to write (sessions before memories) and one outcome per requested id."""

    sessions: list[Node] = field(default_factory=list)
    memories: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    outcomes: dict[str, RowOutcome] = field(default_factory=dict)


def normalise_request(node_id: object) -> tuple[str | None, RowOutcome | None]:
    """``(canonical id, None)``, or ``(None, outcome)`` when the id cannot be back-filled at all. Pure."""
    if not isinstance(node_id, str):
        return None, RowOutcome("error", error=f"node id must be a string, got {type(node_id).__name__}")
    try:
        return normalize_graph_node_id(node_id), None
    except InvalidIdError as exc:
        return None, RowOutcome("error", error=str(exc))


def plan_backfill(requested: Iterable[str], *, existing: set[str], fetched: Fetched) -> BackfillPlan:
    """Decide what a back-fill of the (canonical) ``requested`` ids writes. Pure.

    ``existing`` holds the graph ids already present (requested ids and the parent sessions of the
    fetched memories). Failures are per id; nothing here raises.
    """
    plan = BackfillPlan()
    session_outcomes: dict[str, RowOutcome] = {}

    def ensure_session(sid: str) -> RowOutcome:
        node_id = f"session:{sid}"
        if node_id in existing:
            return RowOutcome("already-exists", node_id)
        if sid in session_outcomes:
            return session_outcomes[sid]
        if sid in fetched.forgotten_sessions:
            outcome = RowOutcome("forgotten", node_id, FORGOTTEN)
        elif fetched.summary_error is not None:
            reason = "chroma-fetch-failed" if fetched.summary_unavailable else "error"
            outcome = RowOutcome(reason, node_id, fetched.summary_error)
        elif fetched.summaries is None:
            outcome = RowOutcome("no-collection", node_id, "the summary collection does not exist")
        elif sid not in fetched.summaries and sid not in fetched.sessions_with_memories:
            outcome = RowOutcome("chroma-row-not-found", node_id, "no summary row and no memory row for this session")
        else:
            summary = fetched.summaries.get(sid)
            try:
                node = session_node(sid, summary, marker=BACKFILL_MARKER)
            except InvalidIdError as exc:
                outcome = RowOutcome("error", node_id, str(exc))
            else:
                plan.sessions.append(node)
                outcome = RowOutcome("backfilled" if summary else "backfilled-minimal", node_id)
        session_outcomes[sid] = outcome
        return outcome

    def ensure_memory(node_id: str) -> RowOutcome:
        if row_suffix(node_id) in fetched.forgotten_memories:
            return RowOutcome("forgotten", node_id, FORGOTTEN)
        if fetched.memory_error is not None:
            reason = "chroma-fetch-failed" if fetched.memory_unavailable else "error"
            return RowOutcome(reason, node_id, fetched.memory_error)
        if fetched.memories is None:
            return RowOutcome("no-collection", node_id, "the memory collection does not exist")
        row = fetched.memories.get(row_suffix(node_id))
        if row is None:
            return RowOutcome("chroma-row-not-found", node_id, "no memory row with this id")
        if row.session_id is None:
            return RowOutcome("error", node_id, "the memory row has no sessionId")
        parent = ensure_session(row.session_id)
        if not parent.success:
            return RowOutcome(parent.reason, node_id, f"parent session {row.session_id!r}: {parent.error}")
        try:
            node = memory_node(row, marker=BACKFILL_MARKER)
        except InvalidIdError as exc:
            return RowOutcome("error", node_id, str(exc))
        plan.memories.append(node)
        plan.edges.append(Edge(node.id, session_node_id(row.session_id), ORIGINATES_IN))
        return RowOutcome("backfilled", node_id)

    for node_id in dict.fromkeys(requested):
        kind = row_kind(node_id)
        if node_id in existing:
            outcome = RowOutcome("already-exists", node_id)
        elif kind == "session":
            outcome = ensure_session(row_suffix(node_id))
        elif kind == "memory":
            outcome = ensure_memory(node_id)
        else:
            outcome = RowOutcome("unrecognized-prefix", node_id, "only memory: and session: nodes can be back-filled")
        plan.outcomes[node_id] = outcome
    return plan


async def plan_nodes(node_ids: Iterable[object], *, chroma: ChromaStore, unit: UnitOfWork) -> tuple[BackfillPlan, dict[Any, RowOutcome]]:
    """Read what a back-fill of ``node_ids`` (one batch) needs — one Chroma ``get(ids=[…])`` for the
    missing memories, one ``$in`` read for their sessions, their tombstones — and plan it. Writes
    nothing. Returns the plan and an outcome per given id (keyed as given); Chroma failures become
    outcomes."""
    outcomes: dict[Any, RowOutcome] = {}
    canonical: dict[str, list[Any]] = {}
    for given in dict.fromkeys(node_ids):
        node_id, failed = normalise_request(given)
        if failed is not None:
            outcomes[given] = failed
        else:
            canonical.setdefault(node_id, []).append(given)  # type: ignore[arg-type]
    plan = await _plan_batch(list(canonical), chroma=chroma, unit=unit) if canonical else BackfillPlan()
    for node_id, outcome in plan.outcomes.items():
        for given in canonical[node_id]:
            outcomes[given] = outcome
    return plan, outcomes


def write_backfill(plan: BackfillPlan, unit: UnitOfWork, *, edges: Sequence[Edge] = ()) -> LinkStats:
    """Write a plan's nodes (sessions first) and ``ORIGINATES_IN`` edges, then ``edges``, in one
    transaction of ``unit``. Blocking: call from a worker thread."""
    graph = unit.graph
    with unit.transaction():
        # Re-check inside the write transaction: a live sync may have written a node since we
        # looked, and a back-fill must never overwrite a live-ingested node; a forget may have
        # committed since the plan read the tombstones (a manual drain or backfill does not take
        # its lock). Edges to what is left out are culled by link_nodes.
        present = graph.existing_ids([n.id for n in plan.sessions] + [n.id for n in plan.memories])
        left_out = present | _forgotten_since(plan, unit)
        graph.upsert_nodes(n for n in plan.sessions if n.id not in left_out)
        graph.upsert_nodes(n for n in plan.memories if n.id not in left_out)
        return graph.link_nodes([*plan.edges, *edges])


def _forgotten_since(plan: BackfillPlan, unit: UnitOfWork) -> set[str]:
    """The node ids of ``plan`` whose session or turn is tombstoned now."""
    session_ids = [row_suffix(n.id) for n in plan.sessions] + [n.properties.get("sessionId") for n in plan.memories]
    sessions = unit.tombstones.buried(SESSION, [sid for sid in session_ids if isinstance(sid, str)])
    memories = unit.tombstones.buried(MEMORY, [row_suffix(n.id) for n in plan.memories])
    return {n.id for n in plan.sessions if row_suffix(n.id) in sessions} | {
        n.id for n in plan.memories if n.properties.get("sessionId") in sessions or row_suffix(n.id) in memories
    }


async def ensure_nodes_exist(
    node_ids: Iterable[object],
    *,
    chroma: ChromaStore,
    unit: UnitOfWork,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
) -> dict[Any, RowOutcome]:
    """Make every ``memory:`` / ``session:`` id among ``node_ids`` exist, back-filling the missing
    ones from Chroma in batches (:func:`plan_nodes`, then one transaction per batch). Returns an
    outcome per given id (keyed as given). A dry run reads but writes nothing; its outcomes say
    what would happen. Chroma failures become per-id outcomes; a graph write failure raises.
    """
    outcomes: dict[Any, RowOutcome] = {}
    for batch in chunked(list(dict.fromkeys(node_ids)), max(1, batch_size)):
        plan, found = await plan_nodes(batch, chroma=chroma, unit=unit)
        if not dry_run and (plan.sessions or plan.memories):
            await anyio.to_thread.run_sync(write_backfill, plan, unit)
        outcomes.update(found)
    return outcomes


async def _plan_batch(batch: Sequence[str], *, chroma: ChromaStore, unit: UnitOfWork) -> BackfillPlan:
    graph, tombstones = unit.graph, unit.tombstones
    existing = await anyio.to_thread.run_sync(graph.existing_ids, batch)
    missing_memories = [row_suffix(i) for i in batch if i not in existing and row_kind(i) == "memory"]
    wanted_sessions = {row_suffix(i) for i in batch if i not in existing and row_kind(i) == "session"}
    fetched: dict[str, Any] = {}
    if missing_memories:  # a forgotten turn is not even read
        fetched["forgotten_memories"] = frozenset(await anyio.to_thread.run_sync(tombstones.buried, MEMORY, missing_memories))
        missing_memories = [i for i in missing_memories if i not in fetched["forgotten_memories"]]
    if missing_memories:
        try:
            rows = await chroma.memories_by_ids(missing_memories)
            fetched["memories"] = None if rows is None else {row.id: row for row in rows}
        except Exception as exc:  # noqa: BLE001 - becomes the outcome of every id of the read
            fetched.update(memory_error=describe_error(exc), memory_unavailable=isinstance(exc, ChromaUnavailableError))
    parents = {row.session_id for row in (fetched.get("memories") or {}).values() if row.session_id}
    if parents:
        parent_ids = {sid: _session_id_or_none(sid) for sid in parents}
        present = await anyio.to_thread.run_sync(graph.existing_ids, [i for i in parent_ids.values() if i])
        existing |= present
        wanted_sessions |= {sid for sid, node_id in parent_ids.items() if node_id not in present}
    if wanted_sessions:
        try:
            fetched["summaries"] = await chroma.summaries_for_sessions(sorted(wanted_sessions))
            # A session asked for directly with no summary row is real only if it has memory rows.
            unsummarised = wanted_sessions - parents - set(fetched["summaries"] or ())
            if fetched["summaries"] is not None and unsummarised:
                fetched["sessions_with_memories"] = frozenset(await chroma.sessions_with_memories(unsummarised) or ())
        except Exception as exc:  # noqa: BLE001 - becomes the outcome of every session of the read
            fetched.update(summary_error=describe_error(exc), summary_unavailable=isinstance(exc, ChromaUnavailableError))
    fetched["sessions_with_memories"] = frozenset(fetched.get("sessions_with_memories", ())) | parents
    if wanted_sessions:
        fetched["forgotten_sessions"] = frozenset(await anyio.to_thread.run_sync(tombstones.buried, SESSION, wanted_sessions))
    return plan_backfill(batch, existing=existing, fetched=Fetched(**fetched))


def _session_id_or_none(session_id: str) -> str | None:
    try:
        return session_node_id(session_id)
    except InvalidIdError:
        return None


async def ingest_single_row(graph_node_id: object, *, chroma: ChromaStore, unit: UnitOfWork) -> dict[str, Any]:
    """Back-fill one ``memory:`` / ``session:`` node (any prefix case) from its Chroma row.

    Returns ``{success, reason, graph_node_id?, error?}``; ``reason`` is one of :data:`REASONS`.
    Never raises.
    """
    try:
        outcomes = await ensure_nodes_exist([graph_node_id], chroma=chroma, unit=unit, batch_size=1)
        return outcomes[graph_node_id].as_dict()
    except Exception as exc:  # noqa: BLE001 - the contract is a result, not an exception
        log.warning("back-fill failed", graph_node_id=str(graph_node_id)[:200], error=describe_error(exc))
        return RowOutcome("error", error=describe_error(exc)).as_dict()


async def link_nodes_async(
    source: str,
    target: str,
    relationship: str,
    weight: float = 1.0,
    properties: dict[str, Any] | None = None,
    *,
    chroma: ChromaStore,
    unit: UnitOfWork,
) -> bool:
    """Back-fill a missing ``memory:`` / ``session:`` endpoint, then link (one transaction).
    ``False`` (logged) when an endpoint cannot be made to exist: unknown prefix, back-fill failure,
    invalid id; the other endpoint is back-filled all the same."""
    try:
        plan, outcomes = await plan_nodes([source, target], chroma=chroma, unit=unit)
        failed = {given: o for given, o in outcomes.items() if not o.success}
        edges = [] if failed else [Edge(source, target, relationship, weight, dict(properties or {}))]
        stats = await anyio.to_thread.run_sync(partial(write_backfill, plan, unit, edges=edges))
    except Exception as exc:  # noqa: BLE001 - reported as False, like every other failure here
        log.warning("link back-fill failed", source=str(source)[:200], target=str(target)[:200], error=describe_error(exc))
        return False
    for given, outcome in failed.items():
        log.warning("link endpoint unavailable", node_id=str(given)[:200], reason=outcome.reason, error=outcome.error)
    return not failed and stats.culled == 0


# --- rem-cycle backfill -------------------------------------------------------------------------


def session_created_times(summaries: Iterable[ChromaRow], memories: Iterable[ChromaRow]) -> dict[str, str | None]:
    """When each session was created: its summary row's ``createdAt``/``timestamp``, else (no
    summary row, or one without a usable time) the earliest of its memory rows'; ``None`` when no
    row says. Rows without a valid ``sessionId`` are ignored. Pure."""
    from_summaries: dict[str, str | None] = {}
    for row in summaries:
        if is_valid_row_id(row.session_id):
            known = from_summaries.get(row.session_id)  # type: ignore[arg-type]
            from_summaries[row.session_id] = max(filter(None, (known, row.created_at)), default=None)  # type: ignore[index]
    times: dict[str, str | None] = {}
    for row in memories:
        if is_valid_row_id(row.session_id) and not from_summaries.get(row.session_id):  # type: ignore[arg-type]
            created, known = row.created_at, times.get(row.session_id)  # type: ignore[arg-type]
            times[row.session_id] = min(filter(None, (known, created)), default=None)  # type: ignore[index]
    return {**from_summaries, **times}


def sessions_in_window(created: dict[str, str | None], *, since: str) -> tuple[list[str], int]:
    """Session ids created at or after ``since`` (ISO 8601 UTC), oldest first, and how many sessions
    have no creation time at all (left out). Pure."""
    dated = sorted((when, sid) for sid, when in created.items() if when)
    return [sid for when, sid in dated if when >= since], sum(1 for when in created.values() if not when)


def window_start(now: datetime, days: float) -> str:
    """ISO 8601 (``Z``, milliseconds) of ``now - days``. Pure."""
    start = now - timedelta(days=days)
    return start.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class RecentBackfill:
    """What ``rem-cycle backfill`` did (or, dry, would do)."""

    days: float
    since: str
    dry_run: bool
    sessions_in_window: int = 0
    sessions_undated: int = 0
    sessions_forgotten: int = 0
    sessions_present: int = 0
    sessions_synced: int = 0
    sessions_failed: int = 0
    ingest: dict[str, int] = field(default_factory=lambda: {"processed": 0, "upserted": 0, "skipped": 0, "errors": 0})
    bad_values: Counter[str] = field(default_factory=Counter)
    session_failures: list[str] = field(default_factory=list)
    # By session, the turns the graph held whose rows left Chroma (their ``memory:`` ids): the sync
    # took them out; the command then withdraws the queue lines their extraction queued.
    turns_retracted: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "since": self.since,
            "dry_run": self.dry_run,
            "sessions_in_window": self.sessions_in_window,
            "sessions_undated": self.sessions_undated,
            "sessions_forgotten": self.sessions_forgotten,
            "sessions_present": self.sessions_present,
            "sessions_synced": self.sessions_synced,
            "sessions_failed": self.sessions_failed,
            "ingest": dict(self.ingest),
            "turns_retracted": sum(len(turns) for turns in self.turns_retracted.values()),
            "bad_values": dict(sorted(self.bad_values.items())),
            "session_failures": list(self.session_failures),
        }


async def sync_recent_sessions(
    *,
    chroma: ChromaStore,
    unit: UnitOfWork,
    memory_collection: str,
    summary_collection: str,
    now: datetime,
    days: float,
    dry_run: bool = False,
    sessions_per_batch: int = 25,
    on_progress: Callable[[int, int], None] | None = None,
) -> RecentBackfill:
    """Live-sync every session created in the last ``days`` days (by its summary row's
    ``createdAt``/``timestamp``, else its earliest memory row's). A dry run only counts. Reads the
    metadata of every row once (ids and metadata only, no documents).

    ``on_progress(done, total)`` is called after each batch of sessions.
    """
    result = RecentBackfill(days=days, since=window_start(now, days), dry_run=dry_run)
    summaries = [row async for page in chroma.scan(summary_collection, include=("metadatas",)) for row in page]
    memories = [row async for page in chroma.scan(memory_collection, include=("metadatas",)) for row in page]
    created = session_created_times(summaries, memories)
    del summaries, memories
    session_ids, result.sessions_undated = sessions_in_window(created, since=result.since)
    result.sessions_in_window = len(session_ids)
    forgotten = await anyio.to_thread.run_sync(unit.tombstones.buried, SESSION, session_ids)  # left out, as by a cycle
    result.sessions_forgotten = len(forgotten)
    session_ids = [sid for sid in session_ids if sid not in forgotten]
    node_ids = [session_node_id(sid) for sid in session_ids]
    result.sessions_present = len(await anyio.to_thread.run_sync(unit.graph.existing_ids, node_ids))
    if on_progress:
        on_progress(0, len(session_ids))
    if dry_run:
        return result
    for done, batch in enumerate(chunked(session_ids, max(1, sessions_per_batch)), start=1):
        synced = await sync_batch_isolating_failures(list(batch), chroma=chroma, unit=unit)
        result.sessions_failed += len(synced.failed)
        result.session_failures += [f"{sid}: {why}" for sid, why in synced.failed.items()][: 20 - len(result.session_failures)]
        result.sessions_synced += len(synced.synced)
        for sid, one in synced.synced.items():
            for key, value in one.as_dict().items():
                result.ingest[key] += value
            if one.retracted:
                result.turns_retracted[sid] = one.retracted
            result.bad_values.update(one.bad_values)
        if on_progress:
            on_progress(min(done * sessions_per_batch, len(session_ids)), len(session_ids))
    return result
