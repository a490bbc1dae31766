"""pgcut's rule, attacked (audit19): what the database refuses because of what a session asked it
to store is the session's failure, not an outage. Real PostgreSQL, embedded Chroma, the loopback
model server."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from tests.llm_server import LLMServer, ok
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_extract_cycle import llm_settings
from tests.test_pgcut_sessions import charged, extract_one, ingested, stores_on


def _han(start: int, count: int) -> str:
    """``count`` distinct Han characters (3 bytes each in UTF-8, which the server cannot compress)."""
    return "".join(chr(0x4E00 + (start + i * 7919) % 20000) for i in range(count))


# An edge between two nodes with 300-character names (MAX_NAME_CHARS), with a 500-character
# justification: its ``edge_points_reason`` index row is ~3.3 kB, over the server's 2704-byte
# btree limit (SQLSTATE 54000, program_limit_exceeded). Every cycle it would be refused again.
OVERSIZED = {
    "summary": "long names",
    "nodes": [
        {"id": "a", "type": "CONCEPT", "name": _han(0, 300), "evidence": [{"turn": 0, "quote": "CHUNK"}]},
        {"id": "b", "type": "CONCEPT", "name": _han(5000, 300), "evidence": [{"turn": 0, "quote": "CHUNK"}]},
    ],
    "edges": [{"source": "a", "target": "b", "relationship": "relates_to", "justification": _han(10000, 500),
               "evidence": [{"turn": 0, "quote": "CHUNK"}]}],
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
        assert await extract_one(mine, stores) == "failed"
        state, attempts, _ = charged(stores)
        assert (state, attempts) == ("undigested", 1)  # charged, backing off; undigestible at max_chunk_attempts
        reason = stores.runstate.get_digests(["s1"])["s1"].defer_reason or ""
        assert "index row" in reason, reason
