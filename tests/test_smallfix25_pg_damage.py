"""PostgreSQL's own word for damaged pages, ``data_corrupted`` (XX001) or ``index_corrupted``
(XX002), ends the cycle as a damaged SQLite file does (smallfix25): ``database-damaged`` with the
restore advice, no other session asks the model, the paid answer held, ``/healthz`` unhealthy.
Before, the error was a plain ``DatabaseError``: the cycle "completed", each of the three sessions
asked the model (three paid calls, three chunks counted failed) and was deferred, cycle after cycle. Real PostgreSQL (the error raised by the server,
from a trigger on the table every chunk result's write appends to), embedded Chroma, the loopback
model server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest

from config import Settings
from store.backend import open_database
from store.errors import DatabaseDamagedError
from tests.llm_server import LLMServer
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_extract_cycle import TURNS, llm_settings, session
from tests.test_leftalone_damaged import RESTORE, ingested
from worker.cycle import run_cycle
from worker.http import Liveness

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


@pytest.mark.parametrize("state", ["XX001", "XX002"])
async def test_pages_postgresql_finds_damaged_end_the_cycle_as_a_damaged_file_does(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, database_url: str, state: str
) -> None:
    mine = llm_settings(settings.data_dir, llm_server, database_url=database_url, llm_concurrency=1)
    await ingested(mine, tmp_path, [session(f"s{i}", [t.replace("CHUNK", f"S{i}") for t in TURNS[:2]]) for i in range(3)])
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"""CREATE FUNCTION damaged() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'could not read block 7 in file "base/16384/16402"' USING ERRCODE = '{state}'; END $$""")
        conn.execute("CREATE TRIGGER damaged BEFORE INSERT ON state_count_changes FOR EACH ROW EXECUTE FUNCTION damaged()")
    result = await run_cycle(mine)
    # Before: ('completed', None, None), and llm_server.chat_count 3.
    assert (result.outcome, result.reason_code, result.failure_phase) == ("failed", "database-damaged", "extract"), result.message
    assert result.message is not None and result.message.endswith(RESTORE)
    assert 'could not read block 7 in file "base/16384/16402"' in result.message
    assert llm_server.chat_count == 1
    with psycopg.connect(database_url) as conn:
        attempts = conn.execute("SELECT session_id, attempts FROM session_digests ORDER BY session_id").fetchall()
    assert attempts == [(f"s{i}", 0) for i in range(3)]
    held = (mine.data_dir / "held-answers.jsonl").read_text().splitlines()
    assert len(held) == 1 and json.loads(held[0])["session_id"] == "s0"
    assert Liveness(mine).check() == {"status": "unhealthy", "reason": "database-damaged"}


def test_an_index_page_damaged_on_disk_is_a_damaged_database(settings: Settings, database_url: str) -> None:
    """The server's own ``data_corrupted``, for real: an index's leaf page overwritten in its file,
    then read. ``REINDEX`` writes the index's pages to the file, not through the server's buffer
    cache, so the next read of the page reads the damage ("invalid page in block 1 of relation …");
    the server's data directory is its backend's working directory. Before, a ``DatabaseError``."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE damaged (id integer PRIMARY KEY, body text)")
        conn.execute("INSERT INTO damaged SELECT g, 'x' FROM generate_series(1, 100) g")
        conn.execute("REINDEX INDEX damaged_pkey")
        pid, relative = conn.execute("SELECT pg_backend_pid(), pg_relation_filepath('damaged_pkey')").fetchone()
        try:
            with (Path(os.readlink(f"/proc/{pid}/cwd")) / relative).open("r+b") as pages:
                pages.seek(8192)  # block 1: the tree's one leaf (block 0 is its meta page)
                pages.write(b"\xff" * 24)  # its header: no longer a page
        except OSError as exc:
            pytest.skip(f"the PostgreSQL server's files are not writable from here ({exc})")
    db = open_database(settings)
    try:
        with pytest.raises(DatabaseDamagedError, match=r"invalid page in block 1 of relation"), db.transaction() as conn:
            conn.execute("SET LOCAL enable_seqscan = off")  # 100 rows: read through the index, as a big table is
            conn.execute("SELECT body FROM damaged WHERE id = 7").fetchall()
    finally:
        db.close()
