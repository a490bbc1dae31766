"""The twenty-third session's code, attacked (audit26): the model server's redirects and its "no
such model", the id scan after a whole tail went, the cycle lock's holder line. Real CLI
subprocesses, real SQLite files, embedded Chroma, the loopback model server and plain
``http.server`` handlers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from config import Settings
from pipelines.ingest import TAIL_CHECK_IDS
from store.backend import open_database
from store.chroma import ChromaStore
from store.graph import GraphStore
from tests.conftest import run_cli
from tests.http_proxy import serving
from tests.llm_server import LLMServer, Status
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_extract_cycle import TURNS, llm_settings, session
from tests.test_inplace import TURNS as PARTS
from tests.test_inplace import _cycle, _import, _session_of
from tests.test_leftalone_damaged import charged, ingested
from tests.test_leftalone_no_endpoint import _chunk_rows
from worker.cycle import run_cycle


@pytest.fixture
def redirecting_server() -> Iterator[str]:
    """A server that sends every request elsewhere: ``http://`` to ``https://`` of the same path,
    as a reverse proxy in front of a model server does (nothing listens at the target)."""

    class Redirect(BaseHTTPRequestHandler):
        def _redirect(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(301)
            self.send_header("Location", f"https://127.0.0.1:9/v1{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _redirect

        def log_message(self, *args: object) -> None:
            pass

    with serving(Redirect) as url:
        yield url


async def test_provider_ready_fails_naming_where_a_redirecting_server_sends_the_client(
    settings: Settings, tmp_path: Path, redirecting_server: str
) -> None:
    """``GET /models`` answered 301: the client follows no redirect (a request's key must not go
    where the user did not send it), so nothing of the API is there; readiness fails naming where
    the server points, and no chunk is asked or charged."""
    await ingested(settings, tmp_path, [session("s1", TURNS)])
    env = {"REM_DATA_DIR": str(settings.data_dir), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": redirecting_server,
           "REM_LLM_MAX_RETRIES": "0"}
    done = run_cli("--once", "--json", env=env)
    report = json.loads(done.stdout)
    assert (done.returncode, report["failure_phase"], report["reason_code"]) == (1, "provider-ready", "llm-unavailable"), done.stdout
    assert report["message"] == (
        f"LLM server {redirecting_server} redirects GET {redirecting_server}/models to https://127.0.0.1:9/v1/models "
        "(HTTP 301), and rem-cycle follows no redirect: set REM_LLM_BASE_URL to the address it redirects to "
        "(https://127.0.0.1:9/v1)"
    )
    assert _chunk_rows(settings.graph_path) == [] and charged(settings.graph_path) == [("s1", "undigested", 0)]


async def test_a_redirected_chat_request_charges_no_chunk_nor_session(settings: Settings, llm_server: LLMServer, tmp_path: Path) -> None:
    """The models list answers, the chat request is redirected (308): a configuration failure as
    a missing endpoint is — the session deferred, no chunk row nor backoff; once the server
    answers, the next cycle asks each chunk at once."""
    settings = llm_settings(settings.data_dir, llm_server)
    await ingested(settings, tmp_path, [session("s1", TURNS)])
    llm_server.script(*[Status(308, "", {"Location": "https://elsewhere.invalid/v1/chat/completions"})] * 2)
    first = await run_cycle(settings)
    extract = first.phases["extract"]
    assert (first.outcome, extract["sessions_deferred"], extract["sessions_failed"]) == ("completed", 1, 0), extract
    assert _chunk_rows(settings.graph_path) == [] and charged(settings.graph_path) == [("s1", "undigested", 0)]
    asked = llm_server.chat_count
    second = await run_cycle(settings)
    assert second.phases["extract"]["sessions_digested"] == 1 and llm_server.chat_count - asked == 2


async def test_a_404_for_a_model_the_server_lacks_names_the_model_not_the_url(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """OpenAI's and Ollama's answer to a model they do not have is a 404 whose JSON says so: the
    URL is right, the API is there, and the warning must send the user to REM_LLM_MODEL, not say
    that no OpenAI-compatible API is there."""
    settings = llm_settings(settings.data_dir, llm_server, llm_model="gpt-nope")
    await ingested(settings, tmp_path, [session("s1", TURNS)])
    said = {"error": {"message": "The model `gpt-nope` does not exist or you do not have access to it.",
                      "type": "invalid_request_error", "param": None, "code": "model_not_found"}}
    llm_server.script(*[Status(404, json.dumps(said))] * 2)
    result = await run_cycle(settings)
    assert result.phases["extract"]["sessions_deferred"] == 1
    assert charged(settings.graph_path) == [("s1", "undigested", 0)]
    warned = [line for line in capfd.readouterr().err.splitlines() if "chunk extraction failed" in line]
    assert warned
    assert all("has no OpenAI-compatible API there" not in w for w in warned), warned
    assert any(f"LLM server {llm_server.url} has no model gpt-nope (set REM_LLM_MODEL to one GET {llm_server.url}/models "
               f"lists): POST {llm_server.url}/chat/completions answered HTTP 404: " in w for w in warned), warned


def _memory_name(settings: Settings, memory_id: str) -> str | None:
    """The MEMORY node's name: its text's first 80 characters."""
    db = open_database(settings, readonly=True)
    try:
        node = GraphStore(db).get_node(f"memory:{memory_id}")
        return node.name if node else None
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_row_written_again_while_the_whole_tail_went_is_read_again(settings: Settings, tmp_path: Path) -> None:
    """The newest session (the marks' whole tail, 32 rows) deleted, and an older turn deleted and
    added again with new words in the same interval: the id scan cannot tell the row written again
    from the rows that stayed (no tail id is left to say where the new rows start), so it compares
    the rows' text as a full scan does — the turn's new words are in the graph after the cycle."""
    await _import(settings, tmp_path, [session("s-a", PARTS[:3]), session("s-b", [f"filler turn {i:02d}" for i in range(TAIL_CHECK_IDS)])])
    await _cycle(settings)
    chroma = ChromaStore(settings)
    coll = await chroma.collection(settings.memory_collection)
    assert coll is not None
    coll.delete(where={"sessionId": "s-b"})
    before = coll.get(ids=["s-a-t1"], include=["documents", "metadatas"])
    coll.delete(ids=["s-a-t1"])
    coll.add(ids=["s-a-t1"], documents=["turn 01 now names the PartQItem component instead"], metadatas=before["metadatas"])

    ingest = (await _cycle(settings)).phases["ingest"]

    assert ingest["scan"] == "full", ingest
    assert _session_of(settings, "s-b-t0") == (None, [], None)
    assert _memory_name(settings, "s-a-t1") == "turn 01 now names the PartQItem component instead"
