"""One bad row never stops the worker, and sessions of any size go through (issue 13).

Rows are written to a real embedded Chroma through the store (poison values cannot come through
``import``, which validates); the worker runs as a real ``python -m worker`` subprocess.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from config import Settings, load_settings
from pipelines.ingest import plan_session_sync
from store.chroma import ChromaQueryError, ChromaStore, MemoryRow, SummaryRow, read_created_at, read_turn_index
from store.timeparse import BadTimeError, epoch_ms_to_utc, iso_to_utc
from tests.conftest import make_session, run_cli, write_sessions

Row = tuple[str, str, dict[str, Any]]


async def write_rows(settings: Settings, *, memories: list[Row], summaries: list[Row]) -> None:
    """Write rows as an agent would, straight into the collections (one call each: the store
    batches them within the client's max batch size)."""
    chroma = await ChromaStore.connect(settings)
    for name, rows in ((settings.memory_collection, memories), (settings.session_collection, summaries)):
        if rows:
            ids, docs, metas = (list(column) for column in zip(*rows, strict=True))
            await chroma.upsert(name, ids, docs, metas)


def create_memory_collection_with_a_cheap_vector_index(settings: Settings) -> None:
    """Create the memory collection as the store would (the configured embedding function), but
    with a small HNSW graph (4 neighbours, built with 4 candidates) synced to disk once, not every
    1,000 rows. The rows written into it, their documents, metadata and vectors, are the same; only
    a nearest-neighbour query could tell the index apart, and the cycle makes none (it reads rows by
    id, session and page; ``nearest_memories`` is recall's). Chroma's default index is most of a
    large write's cost (RELIABILITY.md "suitetime4a": the 100,000-turn test 195 s -> 146 s)."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    from store.embedding import make_embedding_function

    client = chromadb.PersistentClient(path=str(settings.chroma_path),
                                       settings=ChromaSettings(anonymized_telemetry=False, allow_reset=False))
    client.create_collection(settings.memory_collection, embedding_function=make_embedding_function(settings),
                             configuration={"hnsw": {"ef_construction": 4, "max_neighbors": 4,
                                                     "batch_size": 10_000, "sync_threshold": 1_000_000}})


def turns(sid: str, n: int, **extra: Any) -> list[Row]:
    return [(f"{sid}-t{i:06d}", f"turn {i}: FooWidget calls bar_{i % 7}() in src/mod{i % 5}.py", {"sessionId": sid, "turnIndex": i, **extra}) for i in range(n)]


def summary(sid: str, **meta: Any) -> Row:
    return (f"summary_{sid}", f"Summary of {sid}", {"sessionId": sid, "title": f"Session {sid}", **meta})


def once(env: dict[str, str]) -> dict[str, Any]:
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return json.loads(done.stdout)


def graph_query(data_dir: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(data_dir / "graph.sqlite3")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def node_properties(data_dir: Path, node_id: str) -> dict[str, Any]:
    conn = sqlite3.connect(data_dir / "graph.sqlite3")
    try:
        return json.loads(conn.execute("SELECT properties FROM nodes WHERE id = ?", (node_id,)).fetchone()[0])
    finally:
        conn.close()


POISON_MEMORIES: list[Row] = [
    ("pm-0", "Poisoned turn zero mentions FooWidget", {"sessionId": "poison-memory", "turnIndex": 0, "createdAt": "0001-01-01T00:00:00+05:00"}),
    ("pm-1", "turn one", {"sessionId": "poison-memory", "turnIndex": 1, "timestamp": -5}),
    ("pm-2", "turn two", {"sessionId": "poison-memory", "turnIndex": True}),
    ("pm-3", "turn three", {"sessionId": "poison-memory", "turnIndex": 1e300}),
    ("pm-4", "turn four", {"sessionId": "poison-memory", "turnIndex": 2.5, "role": 7}),
    ("pm-5", "turn five", {"sessionId": "poison-memory", "turnIndex": 5, "createdAt": "yesterday"}),
    ("pm-6", "turn six", {"sessionId": "poison-memory", "turnIndex": 6, "createdAt": ["2026-01-01"]}),
    # Rows that cannot be placed in any session: skipped and counted.
    ("orphan-int", "no usable session", {"sessionId": 42, "turnIndex": 0}),
    ("orphan-list", "no usable session", {"sessionId": ["poison-memory"], "turnIndex": 0}),
]
EXPECTED_BAD_VALUES = {
    "createdAt:out-of-range": 2,  # the summary's 9999-12-31T23:59:59-05:00 and pm-0's 0001-01-01T00:00:00+05:00
    "createdAt:unparseable": 1,
    "createdAt:wrong-type": 1,
    "role:wrong-type": 1,
    "sessionId:wrong-type": 2,
    "timestamp:out-of-range": 1,
    "turnIndex:not-an-integer": 1,
    "turnIndex:out-of-range": 1,
    "turnIndex:wrong-type": 1,
}


async def write_poisoned_store(settings: Settings) -> None:
    await write_rows(
        settings,
        memories=[*turns("good-1", 3), *turns("good-2", 2), *turns("poison-summary", 2, createdAt="2026-11-03T00:00:00Z"), *POISON_MEMORIES],
        summaries=[
            summary("good-1", createdAt="2026-11-01T10:00:00Z"),
            summary("poison-summary", createdAt="9999-12-31T23:59:59-05:00"),
            summary("poison-memory", createdAt="2026-11-02T10:00:00Z"),
        ],
    )


async def test_poison_values_are_counted_and_every_session_is_digested(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    data = tmp_path / "d"
    settings = load_settings(data_dir=data)
    await write_poisoned_store(settings)
    result = once({"REM_DATA_DIR": str(data)})
    assert result["outcome"] == "completed", result
    ingest = result["phases"]["ingest"]
    assert ingest["bad_values"] == EXPECTED_BAD_VALUES
    assert (ingest["sessions_synced"], ingest["sessions_failed"], ingest["errors"]) == (4, 0, 2)
    assert ingest["processed"] == 3 + 2 + 2 + 7
    assert result["phases"]["extract"]["sessions_digested"] == 4
    # Bad values are read as missing (never clamped): the node has no createdAt, order falls back.
    assert "createdAt" not in node_properties(data, "session:poison-summary")
    assert "createdAt" not in node_properties(data, "memory:pm-0")
    assert node_properties(data, "memory:pm-0")["turnIndex"] == 0
    assert "turnIndex" not in node_properties(data, "memory:pm-3")
    assert "role" not in node_properties(data, "memory:pm-4")
    assert graph_query(data, "SELECT COUNT(*) FROM nodes WHERE label = 'MEMORY'")[0][0] == 14
    # The run record names the reasons.
    phases = json.loads(graph_query(data, "SELECT phases FROM rem_runs ORDER BY started_at DESC LIMIT 1")[0][0])
    assert phases["ingest"]["bad_values"] == EXPECTED_BAD_VALUES
    # The next cycle has nothing new to ingest and reads only the rows added since; the unplaceable
    # rows are counted again by the next full scan (REM_FULL_SCAN_INTERVAL_SECONDS), while they remain.
    again = once({"REM_DATA_DIR": str(data)})["phases"]["ingest"]
    assert (again["scan"], again["sessions_changed"], again["bad_values"]) == ("new rows", 0, {})
    full = once({"REM_DATA_DIR": str(data), "REM_FULL_SCAN_INTERVAL_SECONDS": "0"})["phases"]["ingest"]
    assert (full["scan"], full["sessions_changed"], full["bad_values"]) == ("full", 0, {"sessionId:wrong-type": 2})


async def test_backfill_survives_poison_values(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    data = tmp_path / "d"
    settings = load_settings(data_dir=data)
    await write_poisoned_store(settings)
    done = run_cli("backfill", "--days", "99999", "--json", env={"REM_DATA_DIR": str(data)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    # poison-summary has no usable summary time, so its memories date it; good-2 has no date at all.
    assert (result["sessions_in_window"], result["sessions_undated"], result["sessions_synced"]) == (3, 1, 3)
    assert result["sessions_failed"] == 0 and result["ingest"]["processed"] == 3 + 2 + 7
    assert result["bad_values"] == {k: v for k, v in EXPECTED_BAD_VALUES.items() if not k.startswith("sessionId")}
    text = run_cli("backfill", "--days", "99999", env={"REM_DATA_DIR": str(data)})
    assert text.returncode == 0 and "createdAt:out-of-range=2" in text.stdout, text.stdout


def test_time_parsing_is_total() -> None:
    assert iso_to_utc("2026-11-01T10:00:00+01:00") == "2026-11-01T09:00:00.000Z"
    assert iso_to_utc("2026-11-01T10:00:00") == "2026-11-01T10:00:00.000Z"
    assert epoch_ms_to_utc(1_700_000_000_000) == "2023-11-14T22:13:20.000Z"
    cases: list[tuple[Any, Any, str]] = [
        (iso_to_utc, "9999-12-31T23:59:59-05:00", "out-of-range"),
        (iso_to_utc, "0001-01-01T00:00:00+05:00", "out-of-range"),
        (iso_to_utc, "1969-12-31T23:59:59Z", "out-of-range"),
        (iso_to_utc, "2026-13-01", "unparseable"),
        (iso_to_utc, "", "unparseable"),
        (iso_to_utc, "2026-11-01" + " " * 100, "unparseable"),
        (iso_to_utc, 1_700_000_000_000, "wrong-type"),
        (epoch_ms_to_utc, -5, "out-of-range"),
        (epoch_ms_to_utc, 10**30, "out-of-range"),
        (epoch_ms_to_utc, float("nan"), "not-finite"),
        (epoch_ms_to_utc, float("-inf"), "not-finite"),
        (epoch_ms_to_utc, True, "wrong-type"),
        (epoch_ms_to_utc, "1700000000000", "wrong-type"),
    ]
    for parse, value, reason in cases:
        with pytest.raises(BadTimeError) as caught:
            parse(value)
        assert caught.value.reason == reason, (value, caught.value.reason)
    assert read_created_at({"createdAt": "bad", "timestamp": 1_700_000_000_000}) == ("2023-11-14T22:13:20.000Z", ["createdAt:unparseable"])
    assert read_turn_index(2**53) == (None, "out-of-range") and read_turn_index(-1) == (None, "out-of-range")
    assert read_turn_index(4.0) == (4, None) and read_turn_index(float("nan")) == (None, "not-finite")


meta_values = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=70)
               | st.lists(st.text(max_size=5), max_size=2) | st.sampled_from(["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00", "2026-11-01T10:00:00Z"]))
meta_keys = st.sampled_from(["sessionId", "createdAt", "timestamp", "turnIndex", "userId", "role", "agent", "title"])
KNOWN_REASONS = {"missing", "invalid", "wrong-type", "unparseable", "not-finite", "out-of-range", "not-an-integer"}


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(meta_keys, meta_values, max_size=8), st.dictionaries(meta_keys, meta_values, max_size=8))
def test_any_metadata_is_read_totally_and_every_bad_value_is_named(memory_meta: dict[str, Any], summary_meta: dict[str, Any]) -> None:
    row = MemoryRow("m-1", "text", memory_meta)
    _, memories, _, stats = plan_session_sync("s-1", [row], SummaryRow("sum-1", "summary", summary_meta), {})
    assert len(memories) + stats.errors == 1
    for key in stats.bad_values:
        field_name, reason = key.split(":")
        assert field_name in {"sessionId", "createdAt", "timestamp", "turnIndex", "userId", "role", "agent", "title"}
        assert reason in KNOWN_REASONS, key
    if memories:
        assert memories[0].properties.get("createdAt") in (None, row.created_at)


def test_nan_metadata_is_counted_not_fatal() -> None:
    # Embedded Chroma drops NaN metadata on write, a server or another client may not: the rows are read totally.
    rows = [MemoryRow("m-1", "x", {"sessionId": "s", "turnIndex": float("nan"), "timestamp": float("nan")})]
    _, memories, _, stats = plan_session_sync("s", rows, SummaryRow("sum", "y", {"sessionId": "s", "createdAt": 5}), {})
    assert len(memories) == 1 and stats.errors == 0
    assert stats.bad_values == {"turnIndex:not-finite": 1, "timestamp:not-finite": 1, "createdAt:wrong-type": 1}


async def test_large_id_reads_are_chunked_and_chroma_errors_are_not_unavailable(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    settings = load_settings(data_dir=tmp_path / "d")
    await write_rows(settings, memories=turns("s", 3), summaries=[])
    chroma = await ChromaStore.connect(settings)
    wanted = [f"s-t{i:06d}" for i in range(40_000)]
    # Unchunked, embedded Chroma's own SQLite refuses the read: Chroma answered, it is not down.
    with pytest.raises(ChromaQueryError) as caught:
        await chroma._call((await chroma.memories()).get, ids=wanted, include=["metadatas"])
    assert caught.value.reason_code == "chroma-error" and "too many SQL variables" in str(caught.value)
    assert len(await chroma.metadata_by_ids(settings.memory_collection, wanted)) == 3
    assert len(await chroma.memories_by_ids(wanted) or []) == 3
    assert len(await chroma.get_existing(settings.memory_collection, wanted)) == 3


async def test_reads_page_across_sessions_and_pages(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    """With a page of 7 rows every read of a batch of sessions spans many pages (as a 35,000-row
    batch does with the default page): nothing is lost or doubled."""
    data = tmp_path / "d"
    settings = load_settings(data_dir=data)
    sizes = {f"p{n}": 10 + 3 * n for n in range(30)}
    await write_rows(settings, memories=[row for sid, n in sizes.items() for row in turns(sid, n)],
                     summaries=[summary(sid) for sid in sizes])
    result = once({"REM_DATA_DIR": str(data), "REM_CHROMA_PAGE_SIZE": "7"})
    assert result["phases"]["ingest"]["processed"] == sum(sizes.values())
    assert result["phases"]["extract"]["sessions_digested"] == len(sizes)
    counts = dict(graph_query(data, "SELECT json_extract(properties, '$.sessionId'), COUNT(*) FROM nodes WHERE label = 'MEMORY' GROUP BY 1"))
    assert counts == sizes


def test_import_writes_sessions_larger_than_the_max_batch_size(tmp_path: Path) -> None:
    """A 499-turn session then a 4,970-turn one: 5,469 rows in one flush, past embedded Chroma's
    max batch size (5,461)."""
    path = write_sessions(tmp_path / "big.jsonl", [make_session("a", 499), make_session("b", 4_970)])
    env = {"REM_DATA_DIR": str(tmp_path / "d")}
    done = run_cli("import", str(path), "--json", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["memories_written"] == 5_469
    assert once(env)["phases"]["ingest"]["processed"] == 5_469


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_session_of_100k_turns_ingests_chunks_and_digests(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    data = tmp_path / "d"
    settings = load_settings(data_dir=data)
    create_memory_collection_with_a_cheap_vector_index(settings)
    # One upsert call of 100,000 rows (the store batches it) and a small session beside it.
    await write_rows(settings, memories=[*turns("huge", 100_000), *turns("small", 3)],
                     summaries=[summary("huge", createdAt="2026-11-01T10:00:00Z"), summary("small")])
    result = once({"REM_DATA_DIR": str(data)})
    assert result["outcome"] == "completed", result
    ingest, extract = result["phases"]["ingest"], result["phases"]["extract"]
    assert (ingest["processed"], ingest["sessions_synced"], ingest["errors"]) == (100_003, 2, 0), ingest
    assert (extract["sessions_digested"], extract["sessions_failed"]) == (2, 0), extract
    assert extract["chunks_total"] > 2 and extract["chunks_failed"] == 0
    assert graph_query(data, "SELECT COUNT(*) FROM nodes WHERE label = 'MEMORY'")[0][0] == 100_003
    assert graph_query(data, "SELECT state FROM session_digests WHERE session_id = 'huge'") == [("digested",)]


@pytest.mark.server
async def test_server_mode_batches_pages_and_survives_poison(tmp_path: Path, clean_env: pytest.MonkeyPatch, chroma_server: str) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_CHROMA_URL": chroma_server,
           "REM_MEMORY_COLLECTION": "poison-memory-srv", "REM_SESSION_COLLECTION": "poison-sessions-srv"}
    settings = load_settings(data_dir=tmp_path / "d", chroma_url=chroma_server, memory_collection=env["REM_MEMORY_COLLECTION"],
                             session_collection=env["REM_SESSION_COLLECTION"])
    chroma = await ChromaStore.connect(settings)
    limit = await chroma.max_batch_size()  # what the server says, asked through the async client
    assert limit > 0
    big = limit + 500  # one write and one session past the server's limit
    await write_poisoned_store(settings)
    await write_rows(settings, memories=turns("big", big), summaries=[summary("big")])
    result = once(env)
    assert result["outcome"] == "completed", result
    ingest = result["phases"]["ingest"]
    assert ingest["bad_values"] == EXPECTED_BAD_VALUES
    assert (ingest["sessions_synced"], ingest["processed"]) == (5, 14 + big)
    assert result["phases"]["extract"]["sessions_digested"] == 5


async def test_a_session_whose_sync_fails_costs_only_itself(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    """A real SQLite failure (a trigger refusing one session's node) fails that session alone; the
    others of its batch are ingested and digested, and it is synced once the fault is gone."""
    from store.db import Database

    data = tmp_path / "d"
    settings = load_settings(data_dir=data)
    await write_rows(settings, memories=[*turns("fine-1", 2), *turns("doomed", 2), *turns("fine-2", 2)],
                     summaries=[summary(sid) for sid in ("fine-1", "doomed", "fine-2")])
    db = Database(settings.graph_path)
    with db.transaction() as conn:
        conn.execute("CREATE TRIGGER refuse_doomed BEFORE INSERT ON nodes WHEN NEW.id = 'session:doomed' "
                     "BEGIN SELECT RAISE(ABORT, 'refused by test trigger'); END")
    db.close()
    result = once({"REM_DATA_DIR": str(data)})
    assert result["outcome"] == "completed", result
    ingest = result["phases"]["ingest"]
    assert (ingest["sessions_synced"], ingest["sessions_failed"], ingest["backlog"]) == (2, 1, 1)
    assert len(ingest["session_failures"]) == 1 and ingest["session_failures"][0].startswith("doomed: ")
    assert "refused by test trigger" in ingest["session_failures"][0]
    assert result["phases"]["extract"]["sessions_digested"] == 2
    conn = sqlite3.connect(data / "graph.sqlite3")
    conn.execute("DROP TRIGGER refuse_doomed")
    conn.commit()
    conn.close()
    again = once({"REM_DATA_DIR": str(data)})
    assert (again["phases"]["ingest"]["sessions_synced"], again["phases"]["extract"]["sessions_digested"]) == (1, 1)
