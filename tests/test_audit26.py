"""The twenty-third session's code, attacked (audit26): the model server's redirects and its "no
such model", the id scan after a whole tail went, the cycle lock's holder line. Real CLI
subprocesses, real SQLite files, embedded Chroma, the loopback model server and plain
``http.server`` handlers."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

import worker.cycle
from config import Settings, load_settings
from pipelines.extract.llm import misdirected
from pipelines.ingest import TAIL_CHECK_IDS
from store.backend import open_database
from store.chroma import ChromaRowsMovedError, ChromaStore
from store.graph import GraphStore
from tests.conftest import run_cli
from tests.http_proxy import serving
from tests.llm_server import LLMServer, Status
from tests.test_extract_cycle import TURNS, llm_settings, session
from tests.test_inplace import TURNS as PARTS
from tests.test_inplace import _cycle, _import, _session_of
from tests.test_leftalone_damaged import charged, damage, ingested, pages_never_used
from tests.test_leftalone_no_endpoint import readiness_refused
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
    the server points, and no chunk is asked or charged. (A chat request redirected:
    ``tests/test_leftalone_no_endpoint.py::test_a_chat_request_with_no_endpoint_charges_no_chunk_nor_session[308]``.)"""
    assert await readiness_refused(settings, tmp_path, redirecting_server) == (
        f"LLM server {redirecting_server} redirects GET {redirecting_server}/models to https://127.0.0.1:9/v1/models "
        "(HTTP 301), and rem-cycle follows no redirect: set REM_LLM_BASE_URL to the address it redirects to "
        "(https://127.0.0.1:9/v1)"
    )


async def test_a_404_for_a_model_the_server_lacks_names_the_model_not_the_url(
    settings: Settings, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """OpenAI's and Ollama's answer to a model they do not have is a 404 whose JSON says so: the
    URL is right, the API is there, and the warning must send the user to REM_LLM_MODEL, not say
    that no OpenAI-compatible API is there."""
    said = {"error": {"message": "The model `gpt-nope` does not exist or you do not have access to it.",
                      "type": "invalid_request_error", "param": None, "code": "model_not_found"}}
    with LLMServer(default=Status(404, json.dumps(said))) as server:
        settings = llm_settings(settings.data_dir, server, llm_model="gpt-nope")
        await ingested(settings, tmp_path, [session("s1", TURNS)])
        result = await run_cycle(settings)
        url = server.url
    assert result.phases["extract"]["sessions_deferred"] == 1
    assert charged(settings.graph_path) == [("s1", "undigested", 0)]
    warned = [line for line in capfd.readouterr().err.splitlines() if "chunk extraction failed" in line]
    assert warned
    assert all("has no OpenAI-compatible API there" not in w for w in warned), warned
    assert any(f"LLM server {url} has no model gpt-nope (set REM_LLM_MODEL to one GET {url}/models "
               f"lists): POST {url}/chat/completions answered HTTP 404: " in w for w in warned), warned


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


class _DeletingDuringTheScan(ChromaStore):
    """The real store; right after the first page of an id scan it deletes ``victim`` (a row
    before the page's end), as an agent deleting a memory while the cycle scans does."""

    victim = ""

    async def _call(self, fn: Any, **kwargs: Any) -> Any:
        result = await super()._call(fn, **kwargs)
        scanned = getattr(getattr(fn, "__self__", None), "name", None) == self._settings.memory_collection
        if _DeletingDuringTheScan.victim and scanned and kwargs.get("include") == [] and kwargs.get("offset") == 0 \
                and kwargs.get("limit") == self._settings.chroma_page_size * 50:
            victim, _DeletingDuringTheScan.victim = _DeletingDuringTheScan.victim, ""
            coll = await self.collection(self._settings.memory_collection)
            assert coll is not None
            coll.delete(ids=[victim])
        return result


def _memory_ids_in_graph(settings: Settings) -> set[str]:
    db = open_database(settings, readonly=True)
    try:
        return {row[0] for row in db.query("SELECT memory_id FROM memory_index")}
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_row_deleted_while_the_id_scan_pages_costs_no_other_row_its_place_in_the_graph(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ids are read in pages by offset: a row deleted before the end of a page already read
    moves every later row one place up, and the first row of the next page was never read — the
    scan took it for deleted and the cycle took that turn out of the graph (until the next full
    scan). Each page now starts with the page before's last id; when it is not there, the scan
    goes on after the last id read that still is."""
    settings = settings.model_copy(update={"chroma_page_size": 2})  # the id scan's pages: 100 ids
    filler = [f"filler turn {i:03d} of the long session" for i in range(150)]
    await _import(settings, tmp_path, [session("s-a", PARTS[:3]), session("s-b", filler)])
    await _cycle(settings)
    coll = await ChromaStore(settings).collection(settings.memory_collection)
    assert coll is not None
    coll.delete(ids=["s-a-t0"])  # the marks' tail is no longer where it was: the next cycle scans every id
    monkeypatch.setattr(worker.cycle, "ChromaStore", _DeletingDuringTheScan)
    _DeletingDuringTheScan.victim = "s-a-t1"

    ingest = (await _cycle(settings)).phases["ingest"]

    assert ingest["scan"] == "full" and not _DeletingDuringTheScan.victim, ingest
    in_chroma = set(coll.get(include=[])["ids"])
    assert in_chroma - _memory_ids_in_graph(settings) == set()  # no turn lost
    # The row deleted after it was read leaves at the next cycle, which finds its marks' tail moved.
    assert _memory_ids_in_graph(settings) - in_chroma == {"s-a-t1"}
    await _cycle(settings)
    assert _memory_ids_in_graph(settings) == in_chroma


class _DeletingAfterThePage(ChromaStore):
    """The real store; after the first page of a paged read it deletes ``doomed``."""

    doomed: list[str] = []

    async def _call(self, fn: Any, **kwargs: Any) -> Any:
        result = await super()._call(fn, **kwargs)
        if _DeletingAfterThePage.doomed and kwargs.get("offset") == 0 and "ids" not in kwargs:
            doomed, _DeletingAfterThePage.doomed = _DeletingAfterThePage.doomed, []
            getattr(fn, "__self__").delete(ids=doomed)
        return result


async def test_a_paged_read_goes_on_after_the_last_row_it_read_that_is_left(settings: Settings) -> None:
    """Three rows deleted after the first page was read, its last among them: the read goes on
    after the last row of that page still there, every other row read once; a whole page deleted
    is a clear error the next read starts over from (``chroma-unavailable``, no row missed)."""
    settings = settings.model_copy(update={"chroma_page_size": 2})  # id pages of 100 rows
    chroma = _DeletingAfterThePage(settings)
    coll = await chroma.collection(settings.memory_collection, create=True)
    ids = [f"r{i:03d}" for i in range(250)]
    coll.add(ids=ids, documents=[f"row {i}" for i in ids], metadatas=[{"sessionId": "s"} for _ in ids])
    _DeletingAfterThePage.doomed = ["r010", "r098", "r099"]  # read in the first page, deleted after it
    read = [i async for page in chroma.scan_ids(settings.memory_collection) for i in page]
    assert read == ids
    left = [i for i in ids if i not in ("r010", "r098", "r099")]
    _DeletingAfterThePage.doomed = left[:100]
    with pytest.raises(ChromaRowsMovedError, match="was deleted while they were being read"):
        [i async for page in chroma.scan_ids(settings.memory_collection) for i in page]


@pytest.mark.slow
async def test_a_chroma_that_does_not_answer_in_time_leaves_recall_the_graphs_answer(
    tmp_path: Path, digested_sample: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vector signal is optional: a Chroma server that does not answer the nearest-turns query
    within recall's deadline is reported in ``signals.vector.error`` and the graph answers. The
    graph's own deadline ran from the opening of the index, and the Chroma wait used it up: the
    reads after it were stopped, and recall failed saying to ask something narrower."""
    import time

    from pipelines.recall import RecallRequest
    from tests.conftest import copy_digested_sample, free_port, start_chroma_server
    from tests.http_proxy import forwarding_proxy
    from worker import recall as worker_recall

    data = copy_digested_sample(digested_sample, tmp_path / "data")
    server = start_chroma_server(data / "chroma", free_port())
    monkeypatch.setattr(worker_recall, "RECALL_DEADLINE_SECONDS", 1.0)

    def slow_queries(body: bytes) -> bool:
        if b"query_embeddings" in body:
            time.sleep(2.0)
        return True

    try:
        with forwarding_proxy(f"http://127.0.0.1:{server.args[-1]}", slow_queries) as url:
            settings = load_settings(data_dir=data, chroma_url=url, recall_vector=True)
            answer = await worker_recall.run_recall(settings, RecallRequest(query="drain edges queue lazy worker cycle session", limit=100))
    finally:
        server.terminate()
        server.wait(10)
    assert answer["signals"]["vector"]["error"] == "Chroma did not answer within 1 s", answer["signals"]["vector"]
    assert answer["turns"], answer["signals"]


def test_a_busy_lock_shows_one_printable_line_of_what_its_holder_wrote(settings: Settings, tmp_path: Path) -> None:
    """The holder line is read from a file anyone with the data dir's rights can write: a second
    line, or a terminal's escape sequence, went to the user's terminal as it was (the message split
    over two lines, the colour or title changed by whoever wrote it). Only its first line is shown,
    each control character as its escape."""
    import subprocess
    import sys

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    lock = settings.data_dir / "rem-cycle.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o640)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "os.pwrite(fd, b'\\x1b[31mpid 42\\x1b[0m on host since then\\nnot starting anything, all is well', 0)\n"
         "print('held', flush=True)\n"
         "time.sleep(30)\n", str(lock)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        done = run_cli("--once", env={"REM_DATA_DIR": str(settings.data_dir)})
    finally:
        holder.kill()
        holder.wait(10)
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"rem-cycle: another REM cycle is running on {settings.data_dir}: \\x1b[31mpid 42\\x1b[0m on host since then "
        f"(it holds {lock}); not starting a second one"
    ]


@pytest.mark.parametrize("harm", ["pages never used", "a table's page overwritten"])
async def test_a_backup_of_a_damaged_graph_says_the_graph_is_damaged(settings: Settings, tmp_path: Path, harm: str) -> None:
    """``backup`` copies the graph page for page, so a damaged graph makes a damaged copy, which
    it refuses. It said `backup failed: backup failed integrity_check: 3 problems, …` (or SQLite's
    bare `database disk image is malformed`): not which file, as if the copy had gone wrong. It
    names the graph as damaged and says what to do; nothing is written."""
    await ingested(settings, tmp_path, [session("s1", TURNS)])
    if harm == "pages never used":
        with sqlite3.connect(settings.graph_path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages_never_used(settings.graph_path, 3)
        found = "3 problems, the first: Page "
    else:
        damage(settings.graph_path, "chunk_results")
        found = "database disk image is malformed"
    out = tmp_path / "backups" / "b.sqlite3"
    done = run_cli("backup", str(out), env={"REM_DATA_DIR": str(settings.data_dir)})
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"rem-cycle: backup failed: the graph database {settings.graph_path} is damaged ({found}"), line
    assert line.endswith("), and so would be a copy of it; nothing was written: stop the workers and restore the graph "
                         "from an earlier backup (rem-cycle restore BACKUP)"), line
    assert not out.exists() and not list(out.parent.glob("*"))


@pytest.mark.parametrize("status", [404, 405])
async def test_a_provider_with_chat_completions_and_no_models_list_passes_readiness(
    settings: Settings, tmp_path: Path, status: int
) -> None:
    """Some OpenAI-compatible providers serve chat completions and no models list (``GET
    /models`` 404 or 405). Since leftalone25 that failed readiness, saying no API was there, and no
    session was ever extracted. The check now asks the chat endpoint itself, with a request no
    model works on (an empty JSON object, which a real server refuses as invalid: nothing paid):
    an answer other than "no endpoint" means the API is there."""
    with LLMServer(models=Status(status, json.dumps({"error": {"message": "Not Found"}}))) as server:
        await ingested(settings, tmp_path, [session("s1", TURNS)])
        env = {"REM_DATA_DIR": str(settings.data_dir), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url,
               "REM_LLM_MAX_RETRIES": "0"}
        done = run_cli("--once", "--json", env=env)
        report = json.loads(done.stdout)
        assert (done.returncode, report["outcome"]) == (0, "completed"), done.stdout
        assert report["phases"]["extract"]["sessions_digested"] == 1 and server.chat_count == 1


@pytest.fixture
def read_only_data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir holding its lock file, on a file system then mounted read-only (a tmpfs);
    skipped where mounting is not allowed (not root, or a container without the capability)."""
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a file system here: {mounted.stderr.strip()}")
    try:
        (folder / "data").mkdir()
        (folder / "data" / "rem-cycle.lock").touch()
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder / "data"
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_data_dir_on_a_read_only_file_system_is_named_with_what_to_do(read_only_data_dir: Path) -> None:
    """The data dir on a read-only mount: ``--once`` said `[Errno 30] Read-only file system:
    'rem-cycle.lock'` — the lock file without its folder, nor what to do. It names the path in
    full, as for a refusal of this user's rights, with the advice that fits a read-only file
    system."""
    done = run_cli("--once", env={"REM_DATA_DIR": str(read_only_data_dir)})
    assert done.returncode == 1
    assert (f"cannot create or open {read_only_data_dir / 'rem-cycle.lock'}: Read-only file system (rem-cycle writes "
            "in its data dir: put it on a file system mounted read-write (REM_DATA_DIR))") in done.stdout, done.stdout


@pytest.mark.parametrize(("location", "said"), [
    ("https://llm.example/v1/models", "set REM_LLM_BASE_URL to the address it redirects to (https://llm.example/v1)"),
    ("/v1/models/", "the server redirects to its own address; check its routes or the proxy in front of it"),
    ("https://login.example/sso?next=x", "set REM_LLM_BASE_URL to the address it redirects to (https://login.example/sso?next=x)"),
])
def test_a_redirect_is_told_with_the_base_url_it_implies(location: str, said: str) -> None:
    """A trailing slash the server adds (``/v1/models`` sent to ``/v1/models/``) is no new base
    URL: the advice named ``…/v1/models/`` as the base, and every request would then have gone to
    ``…/v1/models//chat/completions``."""
    request = httpx.Request("GET", "http://llm.example/v1/models")
    answer = httpx.Response(307, headers={"Location": location}, request=request)
    assert misdirected("http://llm.example/v1", "m", "GET", "/models", answer).endswith(f"follows no redirect: {said}")
