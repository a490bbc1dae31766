"""A graph written before audit28 cut semantic ids to MAX_SEMANTIC_ID_BYTES keeps one node per name
(longid29): a node stored under its longer, uncut id is folded into the cut id when its name is
extracted again, with every point, claim and edge. Real cycles on both engines, the loopback model
server, embedded Chroma; the old graph is written by a real cycle under the old rule (the cut is
the only change audit28 made to ``semantic_node_id``: without it, the id is the uncut one).

PostgreSQL holds such nodes too: a node's own key (an id of ~1.5 kB) fits its index, only an edge
between two of them did not (audit28), so the test runs on both engines, with edges from each long
node to a short one; on SQLite an edge between two long nodes as well."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.extract import model
from pipelines.extract.model import MAX_NAME_CHARS, MAX_SEMANTIC_ID_BYTES, semantic_node_id
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, ok
from tests.test_change_scan import _query
from worker.cycle import run_cycle
from worker.knowledge import unmerge_node

_RANDOM = random.Random(29)


def _plane_b(chars: int) -> str:
    """``chars`` random letters of CJK Extension B: 4 UTF-8 bytes each."""
    return "".join(chr(_RANDOM.randrange(0x20000, 0x2A6E0)) for _ in range(chars))


async def _extract(settings: Settings, tmp_path: Path, sid: str, node_type: str, names: list[str], edges: list[tuple[str, str, str]]) -> None:
    """Import session ``sid`` (one turn naming ``names``) and run a cycle whose model answers those
    nodes (a name of letters is ``node_type``, ``Widget``/``Gadget`` a CLASS) and ``edges``."""
    sessions = write_sessions(tmp_path / f"{sid}.jsonl", [{
        "sessionId": sid, "createdAt": "2026-11-01T10:00:00Z", "userId": "u", "title": "T", "summary": "S",
        "turns": [{"id": f"{sid}-t0", "role": "user", "text": " ".join(names)}]}])
    await import_sessions(sessions, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)
    nodes = [{"id": n, "type": "CLASS" if n.isascii() else node_type, "name": n, "confidence": 0.9,
              "evidence": [{"turn": 1, "quote": n}]} for n in names]
    answer = {"summary": "long ids", "nodes": nodes, "edges": [
        {"source": s, "target": t, "relationship": r, "justification": f"{r} in {sid}", "evidence": [{"turn": 1, "quote": t}]}
        for s, t, r in edges]}
    with LLMServer(default=ok(answer)) as llm:
        await run_cycle(settings.model_copy(update={"llm_base_url": llm.url, "extractor": "openai",
                                                    "semantic_types": (*settings.semantic_types, node_type)}))


def _graph(settings: Settings, node_type: str) -> dict[str, Any]:
    """The knowledge nodes of ``node_type`` and every row that names a node, as comparable values."""
    return {
        "nodes": sorted(r[0] for r in _query(settings, "SELECT id FROM nodes WHERE label = ?", (node_type,))),
        "edges": sorted(_query(settings, "SELECT source, target, relationship FROM edges WHERE relationship IN ('DEPENDS_ON', 'SUPPORTS', 'BLOCKS', 'EXTENDS')")),
        "edge_points": sorted(_query(settings, "SELECT source, target, relationship, anchor, justification FROM edge_points")),
        "node_points": sorted(_query(settings, "SELECT node_id, anchor, memory_id FROM node_points")),
        "claims": sorted(_query(settings, "SELECT node_id, anchor FROM node_claims")),
        "ids": {r[0] for table, column in (("nodes", "id"), ("edges", "source"), ("edges", "target"), ("edge_points", "source"),
                                             ("node_points", "node_id"), ("node_claims", "node_id"), ("node_aliases", "node_id"),
                                             ("recall_node_docs", "node_id"))
                for r in _query(settings, f"SELECT DISTINCT {column} FROM {table}")},
        "merges": sorted(_query(settings, "SELECT merged_id, into_id, COALESCE(undone_at, '') FROM merges")),
    }


@pytest.mark.both_backends
async def test_a_node_stored_under_its_uncut_id_is_folded_into_the_cut_one_when_its_name_comes_again(
    settings: Settings, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the cut, two names of a 64-letter type of 4-byte letters that differ only in their
    last 20 letters made two nodes, A and B (ids of 1,457 bytes); after it, both names make one
    id. A session naming A folds A's node into the cut id (identity resolution found it by name,
    on main too); a later session naming B folds B's node into it as well (on main B's node
    stayed beside it: the cut id existed, so the exact-id rule took it and nothing looked for
    B's own). Every edge point and node point the old session wrote is kept on the cut node, no
    row names an uncut id, and a further session changes nothing (idempotent). An unmerge of the
    fold keeps the pair apart, as any undone merge does. On SQLite, where an edge between two long
    ids was stored, a third long name D (its own cut id) with an edge from A keeps that edge and
    its point between the two cut ids."""
    node_type = _plane_b(64)
    shared = _plane_b(MAX_NAME_CHARS - 20)
    a, b = shared + _plane_b(20), shared + _plane_b(20)
    # SQLite only: PostgreSQL could never store an edge between two uncut ids (audit28).
    d = [_plane_b(MAX_NAME_CHARS)] if backend == "sqlite" else []
    with monkeypatch.context() as old:  # the rule before audit28: no cut in bytes
        old.setattr(model, "MAX_SEMANTIC_ID_BYTES", 10**9)
        model.semantic_node_id.cache_clear()
        long_a, long_b, *long_d = (semantic_node_id(node_type, n) for n in (a, b, *d))
        await _extract(settings, tmp_path, "s1", node_type, [a, b, *d, "Widget"],
                       [(a, "Widget", "DEPENDS_ON"), (b, "Widget", "SUPPORTS"), *((a, n, "EXTENDS") for n in d)])
    model.semantic_node_id.cache_clear()
    cut, *cut_d = (semantic_node_id(node_type, n) for n in (a, *d))
    cut_of = {long_a: cut, long_b: cut, **dict(zip(long_d, cut_d))}
    extends = [(cut, n, "EXTENDS") for n in cut_d]
    assert cut == semantic_node_id(node_type, b) and cut is not None and len(cut.encode()) <= MAX_SEMANTIC_ID_BYTES
    before = _graph(settings, node_type)
    assert before["nodes"] == sorted(cut_of), [len(i.encode()) for i in before["nodes"]]
    assert len(long_a.encode()) > MAX_SEMANTIC_ID_BYTES and len(before["edge_points"]) == 2 + len(d)

    await _extract(settings, tmp_path, "s2", node_type, [a, *d, "Widget"], [(a, "Widget", "DEPENDS_ON")])
    await _extract(settings, tmp_path, "s3", node_type, [b, "Gadget"], [(b, "Gadget", "BLOCKS")])
    after = _graph(settings, node_type)
    assert after["nodes"] == sorted([cut, *cut_d]), [len(i.encode()) for i in after["nodes"]]
    assert not set(cut_of) & after["ids"]
    widget, gadget = "CLASS:Widget", "CLASS:Gadget"
    assert after["edges"] == sorted([(cut, widget, "DEPENDS_ON"), (cut, widget, "SUPPORTS"), (cut, gadget, "BLOCKS"), *extends])
    # The old session's points, on the cut node, beside the new sessions' own.
    assert after["edge_points"] == sorted([
        (cut, widget, "DEPENDS_ON", "session:s1", "DEPENDS_ON in s1"), (cut, widget, "SUPPORTS", "session:s1", "SUPPORTS in s1"),
        (cut, widget, "DEPENDS_ON", "session:s2", "DEPENDS_ON in s2"), (cut, gadget, "BLOCKS", "session:s3", "BLOCKS in s3"),
        *((*e, "session:s1", "EXTENDS in s1") for e in extends)])
    old_points = [(cut_of.get(n, n), anchor, memory) for n, anchor, memory in before["node_points"]]
    assert set(old_points) <= set(after["node_points"]) and len([p for p in after["node_points"] if p[1] == "session:s1"]) == len(old_points)
    assert sorted(m[:2] for m in after["merges"]) == sorted(cut_of.items())  # undoable: rem-cycle unmerge

    await _extract(settings, tmp_path, "s4", node_type, [b, "Gadget"], [(b, "Gadget", "BLOCKS")])
    again = _graph(settings, node_type)
    assert again["nodes"] == after["nodes"] and again["merges"] == after["merges"] and again["edges"] == after["edges"]

    # An operator who undoes the fold keeps the two apart: the next session naming B does not fold
    # B's old node in again.
    unmerge_node(settings, long_b)
    await _extract(settings, tmp_path, "s5", node_type, [b, "Gadget"], [(b, "Gadget", "BLOCKS")])
    assert _graph(settings, node_type)["nodes"] == sorted([cut, long_b, *cut_d])
