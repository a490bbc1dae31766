"""pgcut's rule, attacked (audit19): what the database refuses because of what a session (or a
queue line) asked it to store is its own failure, not an outage. Real PostgreSQL, embedded Chroma,
the loopback model server, real queue files and table."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from pipelines.drain import drain_queue
from pipelines.enqueue import enqueue_lazy_edges
from store.lazy_table import LazyEdgeTable
from tests.lazy_fixtures import add_concepts, edge_count, queue_of
from tests.llm_server import LLMServer, ok
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_extract_cycle import llm_settings
from tests.test_drainstall_busy import dead_letters
from tests.test_pgcut_sessions import charged, extract_one, ingested, stores_on
from worker.cycle import Stores


def _plane_b(start: int, count: int) -> str:
    """``count`` distinct CJK Extension B characters (4 bytes each in UTF-8)."""
    return "".join(chr(0x20000 + (start + i * 7919) % 40000) for i in range(count))


# A node whose description is MAX_TEXT_CHARS (2,000) letters of 4 bytes: its properties are ~8 kB
# of incompressible JSON. rem-cycle's own indexes hold no node's properties, but an index an
# operator added on them (``nodes_by_properties`` below) cannot hold this one: the server refuses
# the commit with SQLSTATE 54000 (program_limit_exceeded, "index row requires … bytes" / "index row
# size … exceeds …"), and every cycle it would be refused again. (Until audit28 this test used an
# ``edges`` key over the limit, under a 64-letter REM_SEMANTIC_TYPES type; a semantic id is now
# bounded in bytes, pipelines.extract.model.MAX_SEMANTIC_ID_BYTES, and such an edge commits.)
OVERSIZED = {
    "summary": "a long description",
    "nodes": [{"id": "a", "type": "CONCEPT", "name": "osprey", "description": _plane_b(0, 2_000),
               "evidence": [{"turn": 0, "quote": "CHUNK"}]}],
    "edges": [],
}


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_a_session_whose_own_answer_the_server_cannot_index_is_charged_not_deferred_for_ever(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, database_url: str
) -> None:
    """The server refuses the session's commit for its own content (an index row over the btree
    limit: ``program_limit_exceeded``, a psycopg ``OperationalError``). That is no outage: it
    fails the same way every time, so the session is charged an attempt (with its backoff, and
    ``undigestible`` after ``max_chunk_attempts``, shown by ``status``) and the reason is recorded. Before, the error was
    classified ``DatabaseUnreadableError``, one of ``DATABASE_OUTAGES``: the session was deferred,
    charged nothing, and extracted again every cycle for ever."""
    mine = llm_settings(settings.data_dir, llm_server)
    llm_server.default = ok(OVERSIZED)
    with stores_on(mine, timeout=5.0) as stores:
        await ingested(mine, stores, tmp_path)
        with stores.db.transaction() as conn:
            conn.execute("CREATE INDEX nodes_by_properties ON nodes (properties)")
        assert await extract_one(mine, stores) == "failed"
        state, attempts, _ = charged(stores)
        assert (state, attempts) == ("undigested", 1)  # charged, backing off; undigestible at max_chunk_attempts
        reason = stores.runstate.get_digests(["s1"])["s1"].defer_reason or ""
        assert "index row" in reason, reason


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("form", ["file", "database"])
async def test_a_queue_line_the_server_cannot_index_is_charged_and_the_rest_of_the_queue_drains(
    settings: Settings, stores: Stores, database_url: str, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queued edge between two existing nodes with 300-character names, under a 128-character
    relationship: its ``edges`` key is ~2.9 kB, over the server's btree limit
    (``program_limit_exceeded``). That line's own failure: it is charged (dead-lettered at its last
    attempt) and the good lines beside it link. Before, the error was an outage, "no line's fault":
    every drain stopped on that line, charged nothing, and the queue never drained. Since pghostile
    the queue's own rule refuses such a key (``MAX_EDGE_KEY_BYTES``, tests/test_pg_hostile.py); it is
    lifted here so that the line reaches the server, which stands for any refusal of a line's content."""
    monkeypatch.setattr("pipelines.lazy_edge.MAX_EDGE_KEY_BYTES", 10**6)
    settings = settings.model_copy(update={"lazy_queue": form})
    far = add_concepts(stores.graph, _plane_b(0, 300), _plane_b(20000, 300))
    add_concepts(stores.graph, "c0", "c1")
    enqueue_lazy_edges(settings.lazy_queue_target, [
        {"source": far[0], "target": far[1], "relationship": _plane_b(30000, 128)},
        {"source": "CONCEPT:c0", "target": "CONCEPT:c1", "relationship": "NEXT"},
    ])
    stats = await drain_queue(queue_of(settings), unit=stores.unit, chroma=stores.chroma, max_attempts=1,
                              table=LazyEdgeTable(stores.db))
    assert (stats.succeeded, stats.dead_lettered) == (1, 1)
    assert edge_count(stores.graph, "NEXT") == 1
    assert dead_letters(settings, stores.db) == 1
