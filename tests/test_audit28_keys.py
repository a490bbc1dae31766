"""An extracted edge's ``edges`` key fits PostgreSQL's btree page whatever the node type and the
name (audit28): the id of a semantic node is at most MAX_SEMANTIC_ID_BYTES bytes of UTF-8.
Real cycles on both engines, the loopback model server, embedded Chroma."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.extract.model import MAX_NAME_CHARS, MAX_SEMANTIC_ID_BYTES, semantic_node_id
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, ok
from tests.test_change_scan import _query
from worker.cycle import run_cycle

_RANDOM = random.Random(28)


def _plane_b(chars: int) -> str:
    """``chars`` random letters of CJK Extension B: 4 UTF-8 bytes each, incompressible."""
    return "".join(chr(_RANDOM.randrange(0x20000, 0x2A6E0)) for _ in range(chars))


def _long_type() -> tuple[str, str, str]:
    """A REM_SEMANTIC_TYPES type of 64 letters of 4 bytes (the longest config.settings accepts)
    and two names of 300 such letters: ids of 1,457 bytes, an edge key of ~2.9 kB."""
    return _plane_b(64), _plane_b(MAX_NAME_CHARS), _plane_b(MAX_NAME_CHARS)


def _folding_prose() -> tuple[str, str, str]:
    """A default prose type (STRATEGY) and two names whose case folding makes more characters:
    ``ΐ`` (2 bytes) folds to three characters (6 bytes), so 102 of them and 198 letters of 4 bytes
    made an id of 1,409 bytes, an edge key of 2,830 (PostgreSQL took this one only because its
    repeated Greek compresses: a key's room must not depend on that)."""
    return "STRATEGY", "\u0390" * 102 + _plane_b(198), "\u03b0" * 102 + _plane_b(198)


@pytest.mark.both_backends
@pytest.mark.parametrize("make", [_long_type, _folding_prose], ids=["long-type", "folding-prose-name"])
async def test_an_edge_between_the_longest_ids_any_type_and_name_make_is_digested(
    settings: Settings, tmp_path: Path, make: Any
) -> None:
    """Under a 64-letter type of 4-byte letters, or a default prose type with names that fold to
    more characters, the session is digested on both engines and the edge is stored between the
    two nodes; their ids are within MAX_SEMANTIC_ID_BYTES, the whole names kept. Before, under the
    long type PostgreSQL refused the commit (``index row size 2952 exceeds btree version 4 maximum
    2704 for index "edges_pkey"``) at every cycle until the session was ``undigestible``; SQLite
    digested it."""
    node_type, *names = make()
    turn = " ".join(names)
    sessions = write_sessions(tmp_path / "in.jsonl", [{
        "sessionId": "s1", "createdAt": "2026-11-01T10:00:00Z", "userId": "u", "title": "T", "summary": "S",
        "turns": [{"id": "s1-t0", "role": "user", "text": turn}]}])
    await import_sessions(sessions, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection)
    nodes = [{"id": n, "type": node_type, "name": n, "confidence": 0.9, "evidence": [{"turn": 1, "quote": n}]} for n in names]
    edge = {"source": names[0], "target": names[1], "relationship": "CAUSES_ISSUE", "justification": "why",
            "evidence": [{"turn": 1, "quote": names[0]}]}
    with LLMServer(default=ok({"summary": "long ids", "nodes": nodes, "edges": [edge]})) as llm:
        await run_cycle(settings.model_copy(update={"llm_base_url": llm.url, "extractor": "openai",
                                                    "semantic_types": (*settings.semantic_types, node_type)}))
    assert sorted(_query(settings, "SELECT state, defer_reason FROM session_digests")) == [("digested", None)]
    ids = [semantic_node_id(node_type, n) for n in names]
    assert all(i is not None and len(i.encode()) <= MAX_SEMANTIC_ID_BYTES for i in ids), [len(str(i).encode()) for i in ids]
    stored = _query(settings, "SELECT source, target FROM edges WHERE relationship = 'CAUSES_ISSUE'")
    assert [tuple(row) for row in stored] == [tuple(ids)]
    kept = [r[0] for r in _query(settings, "SELECT name FROM nodes WHERE id IN (?, ?)", tuple(ids))]
    assert sorted(kept) == sorted(names)  # the whole name is kept; only the id is cut
