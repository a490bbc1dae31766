"""The graph as it was known at a date (``export/show/search --as-of DATE``), derived from the
points' turn times (pure).

At ``DATE`` a knowledge node is known when one of its points was observed by then; what it says is
the combination of the claims of the anchors that had pointed at it by then (a claim carried over
from before schema 5, anchor '', counts whenever the node is known). A semantic edge is known when
one of its points was; its weight is its distinct places among those points. Provenance edges
(``MENTIONED_IN``/``DISCUSSED_IN``) are rebuilt from the points known by then. Anchors (sessions,
turns) are known from their own ``createdAt`` (without one, at no date), a notes file once one of its points is; an edge without points (a reference,
``ORIGINATES_IN``, one written by hand) when both its ends are known. A session is what recall sees of
it then (``store.recall_index.RecallIndex.sessions``): created by then, its summary only once every
turn of it was said.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

from pipelines.vocabulary import ANCHOR_LABELS, DISCUSSED_IN, MENTIONED_IN, NOTE_LABEL, SESSION_LABEL
from store.facts import combine_all, facts_of, with_facts
from store.graph import Edge, Node
from store.provenance import ClaimRow, EdgeKey, PointRow, anchor_edges, place_count
from store.recall_index import SessionRecord
from store.timeparse import EARLIEST, BadTimeError, format_utc, has_fraction_of_hour_or_minute, iso_moment


class AsOfError(ValueError):
    """An ``--as-of`` value that is no date."""


class AsOfRefused(AsOfError):
    """An ``--as-of`` value written as an ISO 8601 time that is refused, not merely not ISO:
    ``detail`` says why, and no other reading (recall's written dates) may take it instead."""

    def __init__(self, text: str, detail: str) -> None:
        super().__init__(f"--as-of {text!r}: {detail}")
        self.detail = detail


# The date forms date.fromisoformat is given: Python 3.11's takes any 10 characters whose first 8
# are a basic date (2026120410, 20261204xx: 2026-12-04, the rest dropped).
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{8}|\d{4}-W\d{2}(?:-\d)?|\d{4}W\d{2}\d?")


def bare_year(text: str) -> str | None:
    """Why ``text`` is no as-of time when it is a year alone (four digits, 1000-9999); ``None``
    otherwise. A year names no day: read as epoch seconds (recall's reading of a number) ``2026``
    was 1970-01-01T00:33:46Z, and a date without its day is refused (``2026-11``, "Nov 2026")."""
    value = text.strip()
    if re.fullmatch(r"[1-9][0-9]{3}", value):
        return f"{value!r} is a year, not a date: name its day ({value}-01-01 for its start, {value}-12-31 for all of it)"
    return None


def before_the_epoch(moment: datetime) -> str | None:
    """Why ``moment`` (aware) is no as-of time when it is before 1970-01-01T00:00Z
    (:data:`store.timeparse.EARLIEST`); ``None`` otherwise. No time the graph holds is earlier
    (ingest refuses one as a sign or unit slip), so such a moment was one too: ``-1`` was read as
    epoch second -1 and answered an empty graph without a word."""
    if moment < EARLIEST:
        return f"{format_utc(moment)} is before 1970-01-01T00:00Z, the earliest time a memory can have (epoch 0)"
    return None


def parse_as_of(text: str) -> str:
    """``DATE`` (the end of that day, UTC) or an ISO 8601 time → the ``observed_at`` form
    (``YYYY-MM-DDTHH:MM:SS.mmmZ``) it is compared with; a year alone is refused (:func:`bare_year`).
    ``T24:00`` is the next day's ``T00:00`` (the same moment, ISO 8601's end of day); a fraction of
    an hour or a minute is refused (:class:`AsOfRefused`), as Python read ``10.5`` as 10:00:00.500,
    and so is a moment before 1970 (:func:`before_the_epoch`)."""
    value = text.strip()
    if (year := bare_year(value)) is not None:
        raise AsOfError(f"--as-of {year}")
    day: date | None = None
    try:
        # Any ISO 8601 date form (2026-11-15, 20261115) is the end of that day, not its start.
        if _ISO_DATE.fullmatch(value):
            day = date.fromisoformat(value)
    except ValueError:
        pass
    if day is not None:
        return _in_range(text, datetime(day.year, day.month, day.day, 23, 59, 59, 999_000, tzinfo=UTC))
    # A person typing 10.5 may mean half past ten or ten past ten and half a second: refused, where
    # a stored createdAt is read as ISO 8601 says (store.timeparse.iso_moment, the one reading).
    if has_fraction_of_hour_or_minute(value):
        raise AsOfRefused(text, "a fraction is read on seconds only (10:30 for half past ten, 10:00:00.5 for half a second)")
    try:
        moment = iso_moment(value)
    except BadTimeError as exc:
        if exc.reason == "out-of-range":
            # 9999-12-31T23:59:59-05:00 is year 10000 in UTC, which the graph's times cannot hold.
            raise AsOfError(f"--as-of {text!r}: out of range (after conversion to UTC)") from None
        raise AsOfError(f"--as-of {text!r}: expected a date (2026-11-15) or an ISO 8601 time") from None
    return _in_range(text, moment)


def _in_range(text: str, moment: datetime) -> str:
    """``moment`` in the graph's time form; :class:`AsOfRefused` before 1970 (:func:`before_the_epoch`)."""
    if (early := before_the_epoch(moment)) is not None:
        raise AsOfRefused(text, early)
    return format_utc(moment)


@dataclass(frozen=True, slots=True)
class GraphAsOf:
    nodes: list[Node]
    edges: list[Edge]
    points: dict[str, list[PointRow]]


def graph_as_of(
    nodes: Iterable[Node],
    edges: Iterable[Edge],
    *,
    node_points: Mapping[str, Sequence[PointRow]],
    edge_points: Mapping[EdgeKey, Sequence[PointRow]],
    claims: Mapping[str, Sequence[ClaimRow]],
    sessions: Mapping[str, SessionRecord],
    as_of: str,
) -> GraphAsOf:
    """The part of the graph known at ``as_of`` (see the module docstring); ``sessions``: the
    SESSION nodes among ``nodes`` known then, as recall reads them at ``as_of``."""
    known_points = {
        node_id: [p for p in points if p.observed_at is not None and p.observed_at <= as_of]
        for node_id, points in node_points.items()
    }
    known_points = {k: v for k, v in known_points.items() if v}
    # A notes file has no time of its own: it is known once something it said was (its points carry its import's time).
    known_files = {p.anchor for points in known_points.values() for p in points}
    kept: dict[str, Node] = {}
    for node in nodes:
        if node.label == NOTE_LABEL:
            if node.id in known_files:
                kept[node.id] = node
            continue
        if node.label == SESSION_LABEL:
            if (seen := sessions.get(node.id)) is not None:
                kept[node.id] = node if seen.summary else _without_summary(node)
            continue
        if node.label in ANCHOR_LABELS:
            # A turn without a time is known at no date, as recall (``RecallIndex.turns``) and its
            # session (``sessions``) have it: kept, it showed at every date a turn recall hides.
            created = node.properties.get("createdAt")
            if isinstance(created, str) and created <= as_of:
                kept[node.id] = node
            continue
        points = known_points.get(node.id)
        if not points:
            continue
        anchors = {p.anchor for p in points}
        said = [c.facts for c in claims.get(node.id, ()) if c.anchor in anchors or not c.anchor.startswith(("session:", "note:"))]
        facts = combine_all(said) if said else facts_of(node.properties)
        kept[node.id] = Node(node.id, node.label, node.name, with_facts(node.properties, facts))
    out: list[Edge] = []
    for edge in edges:
        key = (edge.source, edge.target, edge.relationship)
        if edge.source not in kept or edge.target not in kept or edge.relationship in (MENTIONED_IN, DISCUSSED_IN):
            continue
        points = edge_points.get(key)
        if points is None:
            out.append(edge)
            continue
        seen = [p for p in points if p.observed_at is not None and p.observed_at <= as_of]
        if seen:
            out.append(Edge(*key, float(max(1, place_count(seen))), edge.properties))
    for node_id, points in sorted(known_points.items()):
        if node_id in kept:
            for anchor in sorted({p.anchor for p in points}):
                out.extend(e for e in anchor_edges(node_id, anchor, [p for p in points if p.anchor == anchor]) if e.target in kept)
    out.sort(key=lambda e: (e.source, e.target, e.relationship))
    return GraphAsOf(sorted(kept.values(), key=lambda n: n.id), out, {k: v for k, v in known_points.items() if k in kept})


def _without_summary(session: Node) -> Node:
    """``session`` without its summary (not known yet, or none)."""
    return Node(session.id, session.label, session.name, {k: v for k, v in session.properties.items() if k != "summary"})
