"""Collections another program made, with an embedding function rem-cycle cannot load (the agents'
own, registered by a package not installed here): cycles read them; recall's vector signal is left
out with the reason, and `import` stops with one line, where both ended in a `ValueError` traceback.
Real embedded Chroma, written by another process (roundtrip audit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import chromadb
import pytest
from chromadb.config import Settings as ChromaSettings

from config import Settings
from pipelines.importer import import_sessions
from pipelines.recall import RecallRequest
from store.backend import open_database
from store.chroma import ChromaStore
from tests.conftest import make_session, run_cli, write_sessions
from worker.cycle import CycleContext, PhaseError, extract, ingest, open_stores, run_cycle
from worker.recall import run_recall

AGENTS_WRITER = textwrap.dedent("""
    import sys
    import chromadb
    from chromadb.api.types import EmbeddingFunction
    from chromadb.utils.embedding_functions import register_embedding_function

    @register_embedding_function
    class AgentsEmbedding(EmbeddingFunction):
        def __init__(self): pass
        def __call__(self, input): return [[float(len(t) % 7), 1.0, 0.5] for t in input]
        @staticmethod
        def name(): return "agents-own-embedding"
        def get_config(self): return {}
        @staticmethod
        def build_from_config(config): return AgentsEmbedding()

    client = chromadb.PersistentClient(path=sys.argv[1])
    memories = client.create_collection(sys.argv[2], embedding_function=AgentsEmbedding())
    summaries = client.create_collection(sys.argv[3], embedding_function=AgentsEmbedding())
    memories.add(ids=["ag-t0", "ag-t1"], documents=["We chose Kafka for the event bus.", "The QueueDrainer renames files."],
                 metadatas=[{"sessionId": "ag", "turnIndex": 0, "role": "user"}, {"sessionId": "ag", "turnIndex": 1, "role": "assistant"}])
    summaries.add(ids=["sum-ag"], documents=["Kafka for the event bus"], metadatas=[{"sessionId": "ag", "title": "The bus"}])
""")


def _agents_write_their_collections(settings: Settings) -> None:
    settings.chroma_path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", AGENTS_WRITER, str(settings.chroma_path), settings.memory_collection,
                           settings.session_collection], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


async def test_collections_with_an_embedding_function_rem_cycle_cannot_load(settings: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _agents_write_their_collections(settings)
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    assert result.phases["extract"]["sessions_digested"] == 1

    # Before: ValueError ("Embedding function agents-own-embedding not found") out of recall.
    answer = await run_recall(settings.model_copy(update={"recall_vector": True}), RecallRequest(query="Kafka event bus"))
    assert answer["signals"]["vector"]["enabled"] is False
    assert "embeds with a function this rem-cycle cannot load" in answer["signals"]["vector"]["error"]
    assert "memory:ag-t0" in [t["memory_id"] for t in answer["turns"]]  # answered from the graph

    # Before: a traceback. Now one line naming the collection, and the usual account of the import.
    source = write_sessions(tmp_path / "in.jsonl", [make_session("mine", 2)])
    done = run_cli("import", str(source), env={"REM_DATA_DIR": str(settings.data_dir), "REM_MEMORY_COLLECTION": settings.memory_collection,
                                                "REM_SESSION_COLLECTION": settings.session_collection}, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith(f"rem-cycle: import stopped: the collection {settings.memory_collection!r} (embedded at ")
    assert "embeds with a function this rem-cycle cannot load" in said and "re-running the import is safe" in said


async def test_collections_recreated_mid_cycle_charge_no_session_an_attempt(settings: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Agents re-index their store — drop the collections and write them again — while a cycle
    runs. Before: every session the extract phase read after that crashed on Chroma's
    `NotFoundError` (a traceback each), was charged an attempt (three such cycles make a session
    undigestible) and the cycle said `completed`. Now the phase fails as `chroma-unavailable`,
    charging nothing, and the next cycle digests every session."""
    source = write_sessions(tmp_path / "in.jsonl", [make_session(f"re-{i}", 2) for i in range(4)])

    async def write_rows() -> None:
        stats = await import_sessions(source, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                                      summary_collection=settings.session_collection)
        assert stats.memories_written == 8

    await write_rows()
    stores = await open_stores(settings)
    try:
        ctx = CycleContext(settings=settings, stores=stores, run_id="run-recreated")
        assert (await ingest(ctx))["sessions_synced"] == 4
        client = chromadb.PersistentClient(path=str(settings.chroma_path), settings=ChromaSettings(anonymized_telemetry=False))
        for name in (settings.memory_collection, settings.session_collection):
            client.delete_collection(name)
        await write_rows()  # the same rows, in new collections
        with pytest.raises(PhaseError) as failed:
            await extract(ctx)
        assert failed.value.reason_code == "chroma-unavailable"
        assert f"the collection {settings.memory_collection!r}" in str(failed.value) and "was deleted while" in str(failed.value)
    finally:
        stores.close()
    db = open_database(settings)
    try:
        assert [tuple(r) for r in db.query("SELECT state, attempts, COUNT(*) FROM session_digests GROUP BY state, attempts")] == [("undigested", 0, 4)]
    finally:
        db.close()
    after = await run_cycle(settings)
    assert (after.outcome, after.phases["extract"]["sessions_digested"]) == ("completed", 4)
