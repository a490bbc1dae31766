"""A turn an agent deleted from Chroma is gone from what agents read after the next cycle: recall,
``search_nodes`` and ``show_node`` over MCP (the official SDK client, a real server process) and
``rem-cycle recall``; the rest of its session stays."""

from __future__ import annotations

import json
import sqlite3

import pytest
from mcp import Client

from config import Settings
from store.chroma import ChromaStore
from tests.conftest import run_cli
from tests.test_mcp import graph, stdio_params  # noqa: F401 - the fixture
from tests.test_recall import strings
from worker.cycle import run_cycle

pytestmark = pytest.mark.timeout(120)

DELETED = "memory:am2"  # "Agreed: drain() must rename the queue file first, then read it, so a torn line is quarantined."


async def test_a_turn_deleted_from_chroma_is_not_served_after_the_next_cycle(graph: Settings) -> None:
    chroma = ChromaStore(graph)
    memories = await chroma.memories()
    await chroma._call(memories.delete, ids=["am2"])
    assert (await run_cycle(graph)).outcome == "completed"

    # The re-extraction took back what am2 said; its MEMORY node and verbatim text had stayed, so
    # recall kept serving the deleted turn word for word, for ever.
    db = sqlite3.connect(graph.graph_path)
    try:
        assert db.execute("SELECT COUNT(*) FROM nodes WHERE id = ?", (DELETED,)).fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM recall_turns WHERE memory_id = ?", (DELETED,)).fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM recall_turns WHERE memory_id = 'memory:am1'").fetchone() == (1,)
    finally:
        db.close()
    async with Client(stdio_params(graph)) as client:
        answers = [
            await client.call_tool("recall", {"query": "quarantined torn line rename the queue file", "budget_tokens": 20_000}),
            await client.call_tool("recall", {"query": "quarantined", "user": "alice", "session": "alice-s1"}),
            await client.call_tool("search_nodes", {"query": "quarantined drain"}),
            await client.call_tool("show_node", {"node_id": "CLASS:LazyEdgeQueue"}),
        ]
        answered = [{k: v for k, v in a.structured_content.items() if k not in ("signals", "query", "terms")} for a in answers]
        said = "\n".join(s for a in answered for s in strings(a)).casefold()
        assert "quarantined" not in said and DELETED not in said
        assert answers[0].structured_content["turns"]  # the rest of the graph still answers
        kept = await client.call_tool("recall", {"query": "worker crashes mid-write", "session": "alice-s1"})
        assert [t["memory_id"] for t in kept.structured_content["turns"]] == ["memory:am1"]
    done = run_cli("recall", "quarantined", "--json", env={"REM_DATA_DIR": str(graph.data_dir)}, timeout=60)
    assert done.returncode == 0 and DELETED not in [t["memory_id"] for t in json.loads(done.stdout)["turns"]]
