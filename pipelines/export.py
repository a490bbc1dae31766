"""Graph snapshot export: one payload a viewer renders (JSON) and the same graph as GraphML.

:func:`build_snapshot` is pure: it takes the graph's nodes, edges and stored communities and
returns a JSON-ready dict (schema in README "Exploring the graph"):

- ``nodes``: knowledge nodes (anchors too with ``include_anchors``) — ``id``, ``label``, ``name``,
  ``properties``, ``community``, ``first_seen``/``last_seen`` (turn times of its points);
- ``edges``: semantic edges between exported nodes (every edge with ``include_anchors``), with
  ``first_seen``/``last_seen``;
- ``sessions``: ``session:<id>`` → title; ``file_sources``: ``note:<hash>`` → file path;
- ``node_sessions``: node id → the anchors (sessions, notes files) it came from, sorted;
- ``communities``: id, label, label source, sorted members, size;
- ``provenance``: node id → its provenance points (session, memory, chunk, evidence quote).

:func:`graphml_text` renders a snapshot as GraphML (networkx), JSON-encoding the values GraphML
cannot hold (lists, dicts) so Gephi/Cytoscape open it and nothing is lost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, TextIO

from pipelines.vocabulary import (
    ANCHOR_LABELS,
    MEMORY_LABEL,
    NOTE_LABEL,
    ORIGINATES_IN,
    PROVENANCE_RELATIONSHIPS,
    SESSION_LABEL,
    is_semantic_edge,
)
from store.communities import CommunityRecord
from store.graph import Edge, Node
from store.ids import InvalidIdError, normalize_graph_node_id

SNAPSHOT_VERSION = 1
FORMATS = ("json", "graphml")
# Node/edge attribute names the GraphML writer sets itself; a property of the same name is
# written as ``property.<name>`` instead of silently overwriting them.
_NODE_RESERVED = frozenset({"label", "name", "community", "sessions", "provenance", "first_seen", "last_seen"})
_EDGE_RESERVED = frozenset({"relationship", "weight", "first_seen", "last_seen"})


def build_snapshot(
    nodes: Iterable[Node],
    edges: Iterable[Edge],
    communities: Iterable[CommunityRecord] = (),
    *,
    generated_at: str | None = None,
    include_anchors: bool = False,
    points: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    edge_seen: Mapping[tuple[str, str, str], tuple[str | None, str | None]] | None = None,
    list_points: bool = True,
) -> dict[str, Any]:
    """The snapshot payload of a graph (pure; see the module docstring for the shape); ``points``:
    node id → its provenance points; ``edge_seen``: edge key → (first, last) turn time of its points.
    ``list_points=False``: ``points`` holds only what the sources and turn times need (one point per
    anchor with its first and last time), ``provenance`` is left empty and :func:`write_json` lists
    the points as it reads them."""
    points, edge_seen = points or {}, edge_seen or {}
    by_id = {n.id: n for n in nodes}
    edge_list = list(edges)
    memory_session = _memory_sessions(by_id, edge_list)
    exported = {i: n for i, n in by_id.items() if include_anchors or n.label not in ANCHOR_LABELS}

    anchors: dict[str, set[str]] = {i: set() for i, n in exported.items() if n.label not in ANCHOR_LABELS}
    for edge in edge_list:
        if edge.source in anchors and edge.relationship in PROVENANCE_RELATIONSHIPS:
            anchor = _anchor(edge.target, by_id, memory_session)
            if anchor:
                anchors[edge.source].add(anchor)
    provenance: dict[str, list[dict[str, Any]]] = {}
    for node_id in anchors:
        own = [dict(p) for p in points.get(node_id, ())]
        if own and list_points:
            provenance[node_id] = own
        for point in own:
            anchor = _point_anchor(point, by_id, memory_session)
            if anchor:
                anchors[node_id].add(anchor)

    community_of: dict[str, str] = {}
    community_rows = []
    for community in communities:
        members = sorted(m for m in community.members if m in exported)
        if not members:  # all forgotten or merged since detection, or not known yet (--as-of)
            continue
        for member in members:
            community_of.setdefault(member, community.id)
        community_rows.append(
            {
                "id": community.id,
                "label": community.label,
                "label_source": community.label_source,
                "members": members,
                "size": len(members),
            }
        )

    node_rows = [
        {
            "id": node.id,
            "label": node.label,
            "name": node.name,
            "properties": dict(node.properties),
            "community": community_of.get(node.id),
            **_seen(p.get("observed_at") for p in points.get(node.id, ())),
        }
        for node in sorted(exported.values(), key=lambda n: n.id)
    ]
    edge_rows = [
        {
            "source": e.source,
            "target": e.target,
            "relationship": e.relationship,
            "weight": e.weight,
            "properties": e.properties,
            **_seen(edge_seen.get((e.source, e.target, e.relationship), ())),
        }
        for e in sorted(edge_list, key=lambda e: (e.source, e.target, e.relationship))
        if e.source in exported
        and e.target in exported
        and (include_anchors or is_semantic_edge(e.relationship, exported[e.source].label, exported[e.target].label))
    ]
    return {
        "version": SNAPSHOT_VERSION,
        "generated_at": generated_at,
        "nodes": node_rows,
        "edges": edge_rows,
        "sessions": {i: n.name for i, n in sorted(by_id.items()) if n.label == SESSION_LABEL},
        "file_sources": {
            i: str(n.properties.get("path") or n.name) for i, n in sorted(by_id.items()) if n.label == NOTE_LABEL
        },
        "node_sessions": {i: sorted(a) for i, a in sorted(anchors.items()) if a},
        "communities": community_rows,
        "provenance": provenance,
        "counts": {"nodes": len(node_rows), "edges": len(edge_rows), "communities": len(community_rows)},
    }


def _seen(times: Iterable[str | None]) -> dict[str, str | None]:
    """``first_seen``/``last_seen``: the earliest and latest of the turn times given."""
    known = sorted(t for t in times if isinstance(t, str))
    return {"first_seen": known[0] if known else None, "last_seen": known[-1] if known else None}


def graphml_text(snapshot: Mapping[str, Any]) -> str:
    """The snapshot as a GraphML document (a directed multigraph keyed by relationship). Pure."""
    import networkx as nx  # here, not at the top: only a GraphML export needs it, and it is slow to import

    graph = nx.MultiDiGraph()
    graph.graph["version"] = snapshot.get("version", SNAPSHOT_VERSION)
    if snapshot.get("generated_at"):
        graph.graph["generated_at"] = snapshot["generated_at"]
    if snapshot.get("as_of"):  # a snapshot of the past says so, as the JSON one does
        graph.graph["as_of"] = snapshot["as_of"]
    if snapshot.get("communities"):  # nodes name their community's id; its label and size are here
        graph.graph["communities"] = _xml_safe(json.dumps(snapshot["communities"], ensure_ascii=False, sort_keys=True))
    node_sessions = snapshot.get("node_sessions", {})
    provenance = snapshot.get("provenance", {})
    node_attrs = []
    for node in snapshot["nodes"]:
        attrs: dict[str, Any] = {
            "label": node["label"],
            "name": node["name"],
            "community": node.get("community") or "",
            "sessions": node_sessions.get(node["id"], []),
            "provenance": provenance.get(node["id"], []),
            "first_seen": node.get("first_seen"),
            "last_seen": node.get("last_seen"),
        }
        attrs.update(_prefixed(node["properties"], _NODE_RESERVED))
        node_attrs.append((node["id"], attrs))
    edge_attrs = []
    for edge in snapshot["edges"]:
        attrs = {"relationship": edge["relationship"], "weight": float(edge["weight"]),
                 "first_seen": edge.get("first_seen"), "last_seen": edge.get("last_seen")}
        attrs.update(_prefixed(edge["properties"], _EDGE_RESERVED))
        edge_attrs.append((edge["source"], edge["target"], edge["relationship"], attrs))
    for node_id, attrs in zip((n for n, _ in node_attrs), _scalars([a for _, a in node_attrs]), strict=True):
        graph.add_node(_xml_safe(node_id), **{k: _xml_safe(v) for k, v in attrs.items()})
    for (source, target, key, _), attrs in zip(edge_attrs, _scalars([a for *_, a in edge_attrs]), strict=True):
        graph.add_edge(_xml_safe(source), _xml_safe(target), key=_xml_safe(key), **{k: _xml_safe(v) for k, v in attrs.items()})
    return "\n".join(nx.generate_graphml(graph)) + "\n"


# Characters XML 1.0 cannot hold, even escaped: C0 controls but tab, newline and carriage return
# (terminal colours' ESC in tool output), surrogates, U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_safe(value: Any) -> Any:
    """A string with the characters XML cannot hold written as their escapes (``\\x1b``), so the
    GraphML stays a well-formed document; any other value as it is."""
    if not isinstance(value, str):
        return value
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), value)


def render(snapshot: Mapping[str, Any], fmt: str) -> str:
    """The snapshot as text in ``fmt`` (``json`` or ``graphml``)."""
    if fmt == "json":
        return json.dumps(snapshot, ensure_ascii=False, sort_keys=True, indent=2) + "\n"
    if fmt == "graphml":
        return graphml_text(snapshot)
    raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")


_STREAMED = "\u0000provenance\u0000"


def write_json(snapshot: Mapping[str, Any], points: Iterable[tuple[str, Mapping[str, Any]]], out: TextIO) -> None:
    """Write ``render(snapshot, "json")`` of a snapshot built with ``list_points=False`` to ``out``,
    its ``provenance`` filled from ``points`` — (node id, point) pairs ordered by node — as they are
    read, so memory does not grow with a node's points. Points of nodes the snapshot does not list
    provenance for (anchors, nodes not exported) are skipped."""
    owners = {n["id"] for n in snapshot["nodes"] if n["label"] not in ANCHOR_LABELS}
    head, tail = render({**snapshot, "provenance": _STREAMED}, "json").split(json.dumps(_STREAMED), 1)
    out.write(head)
    current = None
    for node_id, point in points:
        if node_id not in owners:
            continue
        text = _point_json(point).replace("\n", "\n      ")
        if node_id != current:
            out.write(("{\n" if current is None else "\n    ],\n") + f"    {json.dumps(node_id, ensure_ascii=False)}: [\n      {text}")
            current = node_id
        else:
            out.write(f",\n      {text}")
    out.write("{}" if current is None else "\n    ]\n  }")
    out.write(tail)


def _point_json(point: Mapping[str, Any]) -> str:
    """``render``'s text of one point (``json.dumps`` sorted, indented by 2, not ASCII-escaped).
    A point of text and nulls is written here directly: ``indent`` makes ``json.dumps`` encode in
    Python, item by item, which was most of the export of a node with many points."""
    if not point or not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in point.items()):
        return json.dumps(point, ensure_ascii=False, sort_keys=True, indent=2)
    items = ",\n  ".join(f"{encode_basestring(k)}: {'null' if v is None else encode_basestring(v)}" for k, v in sorted(point.items()))
    return f"{{\n  {items}\n}}"


def _prefixed(properties: Mapping[str, Any], reserved: frozenset[str]) -> dict[str, Any]:
    return {(f"property.{k}" if k in reserved else k): v for k, v in properties.items()}


def _scalars(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """GraphML declares one type per attribute name: values that are not str/bool/number, or an
    attribute whose values mix types across elements, become JSON strings; ``None`` is left out."""
    kinds: dict[str, set[type]] = {}
    for row in rows:
        for key, value in row.items():
            if value is not None:
                kinds.setdefault(key, set()).add(_kind(value))
    mixed = {key for key, types in kinds.items() if len(types) > 1}
    out = []
    for row in rows:
        clean: dict[str, Any] = {}
        for key, value in row.items():
            if value is None:
                continue
            kind = _kind(value)
            if key in mixed or kind is dict:
                clean[key] = json.dumps(value, ensure_ascii=False, sort_keys=True)
            else:
                clean[key] = float(value) if kind is float else value
        out.append(clean)
    return out


def _kind(value: Any) -> type:
    """The GraphML type a value maps to: bool, float (any number), str, or dict (encode as JSON)."""
    if isinstance(value, bool):
        return bool
    if isinstance(value, (int, float)):
        return float
    if isinstance(value, str):
        return str
    return dict


def _memory_sessions(by_id: Mapping[str, Node], edges: Iterable[Edge]) -> dict[str, str]:
    """memory node id → session node id, from ORIGINATES_IN edges, else the memory's ``sessionId``."""
    found: dict[str, str] = {}
    for node in by_id.values():
        session = node.properties.get("sessionId")
        if node.label == MEMORY_LABEL and isinstance(session, str):
            found[node.id] = _session_id(session) or ""
    for edge in edges:
        if edge.relationship == ORIGINATES_IN:
            found[edge.source] = edge.target
    return {m: s for m, s in found.items() if s}


def _anchor(node_id: str, by_id: Mapping[str, Node], memory_session: Mapping[str, str]) -> str | None:
    """The session/notes anchor a provenance edge target stands for."""
    node = by_id.get(node_id)
    label = node.label if node else None
    if label in (SESSION_LABEL, NOTE_LABEL) or node_id.startswith("session:"):
        return node_id
    if label == MEMORY_LABEL or node_id.startswith("memory:"):
        return memory_session.get(node_id)
    return None


def _point_anchor(point: Mapping[str, Any], by_id: Mapping[str, Node], memory_session: Mapping[str, str]) -> str | None:
    session = point.get("session")
    if isinstance(session, str) and session:
        if session in by_id and by_id[session].label == NOTE_LABEL:
            return session
        return _session_id(session)
    memory = point.get("memory")
    if isinstance(memory, str) and memory:
        return memory_session.get(_prefixed_id("memory", memory) or "")
    return None


def _session_id(value: str) -> str | None:
    return _prefixed_id("session", value)


def _prefixed_id(kind: str, value: str) -> str | None:
    """``kind:<value>`` normalised, accepting a bare id or an already prefixed one."""
    candidate = value if value.lower().startswith(f"{kind}:") else f"{kind}:{value}"
    try:
        return normalize_graph_node_id(candidate)
    except InvalidIdError:
        return None
