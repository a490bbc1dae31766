"""A model server URL with no OpenAI-compatible API behind it (REM_LLM_BASE_URL without its
``/v1``, a static web server): ``provider-ready`` fails naming the URL, and a chat request answered
404/405/501 is a configuration failure — no chunk or session charged (leftalone25). Before, the
models check passed on a 404 and every chunk was charged a try (``HTTP 501: <!DOCTYPE HTML> …``).
Real CLI subprocesses, real SQLite files, embedded Chroma, the loopback model server and a plain
``http.server``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler
from pathlib import Path

import pytest

from config import Settings
from tests.conftest import run_cli
from tests.http_proxy import serving
from tests.llm_server import LLMServer, Status
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_extract_cycle import TURNS, llm_settings, session
from tests.test_leftalone_damaged import charged, ingested
from worker.cycle import run_cycle


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet test output
        pass


@pytest.fixture
def static_server(tmp_path: Path) -> Iterator[str]:
    """A plain web server of an empty folder: GET answers 404, POST 501 (``<!DOCTYPE HTML>``)."""
    folder = tmp_path / "www"
    folder.mkdir()
    with serving(partial(_Quiet, directory=str(folder))) as url:
        yield url


def _chunk_rows(graph: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(graph) as conn:
        return conn.execute("SELECT chunk_id, status, attempts FROM chunk_results ORDER BY chunk_id").fetchall()


async def readiness_refused(settings: Settings, tmp_path: Path, url: str) -> str:
    """``--once`` against the model server at ``url``, one session ingested: exit 1 at
    ``provider-ready`` (``llm-unavailable``), no chunk asked, none charged. Returns its message."""
    await ingested(settings, tmp_path, [session("s1", TURNS)])
    env = {"REM_DATA_DIR": str(settings.data_dir), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": url,
           "REM_LLM_MAX_RETRIES": "0"}
    done = run_cli("--once", "--json", env=env)
    report = json.loads(done.stdout)
    assert (done.returncode, report["failure_phase"], report["reason_code"]) == (1, "provider-ready", "llm-unavailable"), done.stdout
    assert _chunk_rows(settings.graph_path) == [] and charged(settings.graph_path) == [("s1", "undigested", 0)]
    return report["message"]


async def test_provider_ready_fails_naming_the_url_when_no_models_endpoint_is_there(
    settings: Settings, tmp_path: Path, static_server: str
) -> None:
    """``--once`` against a server whose ``GET /models`` is 404: exit 1 at ``provider-ready``,
    one line naming the URL and the missing ``/v1``; no chunk asked, none charged."""
    assert await readiness_refused(settings, tmp_path, static_server) == (
        f"LLM server {static_server} has no OpenAI-compatible API there: GET {static_server}/models answered HTTP 404; "
        f"REM_LLM_BASE_URL usually ends in /v1 (try {static_server}/v1)"
    )


class _ListlessRedirecting(BaseHTTPRequestHandler):
    """No model list (``GET`` 404); the chat endpoint redirects (``POST`` 308) to another host."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(308)
        self.send_header("Location", "https://elsewhere.invalid/v1/chat/completions")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet test output
        pass


async def test_provider_ready_names_the_chat_endpoints_redirect_when_there_is_no_model_list(settings: Settings, tmp_path: Path) -> None:
    """A server with no model list whose chat endpoint redirects: ``provider-ready`` says where the
    chat requests are sent, not that the URL lacks ``/v1`` (the model list's 404, which said so)."""
    with serving(_ListlessRedirecting) as url:
        message = await readiness_refused(settings, tmp_path, url)
    assert message == (f"LLM server {url} redirects POST {url}/chat/completions to https://elsewhere.invalid/v1/chat/completions "
                       "(HTTP 308), and rem-cycle follows no redirect: set REM_LLM_BASE_URL to the address it redirects to "
                       "(https://elsewhere.invalid/v1)")


@pytest.mark.parametrize("refusal", [Status(404, "<!DOCTYPE HTML><html>no</html>"), Status(405, "<!DOCTYPE HTML><html>no</html>"),
                                     Status(501, "<!DOCTYPE HTML><html>no</html>"),
                                     # audit26: a redirect, which the client does not follow
                                     Status(308, "", {"Location": "https://elsewhere.invalid/v1/chat/completions"})],
                         ids=["404", "405", "501", "308"])
async def test_a_chat_request_with_no_endpoint_charges_no_chunk_nor_session(
    settings: Settings, llm_server: LLMServer, tmp_path: Path, refusal: Status
) -> None:
    """The models list answers, every chat request is refused as no endpoint there: the session
    is deferred (an outage, charged nothing), no chunk row or backoff, the log line says why; once
    the server answers, the next cycle asks each chunk at once."""
    settings = llm_settings(settings.data_dir, llm_server)
    await ingested(settings, tmp_path, [session("s1", TURNS)])
    llm_server.script(*[refusal] * 2)
    first = await run_cycle(settings)
    extract = first.phases["extract"]
    assert (first.outcome, extract["sessions_deferred"], extract["sessions_failed"]) == ("completed", 1, 0), extract
    assert _chunk_rows(settings.graph_path) == [] and charged(settings.graph_path) == [("s1", "undigested", 0)]
    asked = llm_server.chat_count
    second = await run_cycle(settings)
    assert second.phases["extract"]["sessions_digested"] == 1 and llm_server.chat_count - asked == 2
