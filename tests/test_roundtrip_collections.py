"""Collections another program made, with an embedding function rem-cycle cannot load (the agents'
own, registered by a package not installed here): cycles read them; recall's vector signal is left
out with the reason, and `import` stops with one line, where both ended in a `ValueError` traceback.
Real embedded Chroma, written by another process (roundtrip audit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from config import Settings
from pipelines.recall import RecallRequest
from tests.conftest import make_session, run_cli, write_sessions
from worker.cycle import run_cycle
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
