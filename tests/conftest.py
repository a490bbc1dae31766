"""Shared fixtures: real SQLite files and real Chroma (embedded per test; a `chroma run` server
on a loopback port per session, started on demand)."""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, settings as hypothesis_settings

from config import Settings, load_settings
from worker.cycle import Stores, open_stores

# Property tests check what the code does, not how fast: Hypothesis' default 200 ms deadline per
# example (and its too-slow health check) fail a test whose process the machine pauses mid-example
# — CI runs three workers and their subprocesses on two cores (RELIABILITY.md "Flakes hunted").
# Timings are measured in bench/. A test's own @settings still overrides what it names.
hypothesis_settings.register_profile("rem-cycle", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("rem-cycle")

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples" / "sessions.jsonl"


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT and SIGHUP at their defaults for every process the tests start. Byte-compile the project once, so
    that the hundreds of ``python -m worker`` subprocesses the suite starts load it from
    ``__pycache__`` instead of each compiling ~19,000 lines: with PYTHONDONTWRITEBYTECODE=1 (set in
    CI's environment) Python never caches them itself."""
    import compileall

    # A suite started as a background job of a script (`bash .ci/run &`, a CI runner's shell)
    # inherits SIGINT ignored, and so does every process its tests start: the tests that press
    # Ctrl-C on a command then saw it ignored (RELIABILITY.md "Flakes hunted"). Start them with
    # SIGINT at its default, as a terminal does.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Under `nohup` SIGHUP is ignored, and an ignored signal stays ignored across exec: the daemon
    # then rightly keeps ignoring it (worker.signals), and the tests that hang up on it timed out.
    # A handler that does nothing keeps this run outliving its terminal as nohup asked, while exec
    # resets a handler, so the processes the tests start get SIGHUP at its default.
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, lambda signum, frame: None)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller has compiled it
        return
    for package in ("config", "store", "pipelines", "worker", "tests"):
        compileall.compile_dir(ROOT / package, quiet=1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def release_embedded_chroma() -> Iterator[None]:
    """Embedded Chroma keeps each data dir's system (its SQLite file and HNSW segments open) in a
    process-wide cache for the client's lifetime; a daemon has one, but a test session would build
    up hundreds and run out of descriptors. Stop them after every test."""
    yield
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


@pytest.fixture
def quick_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process cycles try a refused answer again after 0.01 s, not 1 s (the pause is not what
    the tests using this are about: tests/test_paidstore.py)."""
    import pipelines.extract.map

    monkeypatch.setattr(pipelines.extract.map, "STORE_RETRY_SECONDS", 0.01)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No ``REM_*`` variable of the developer's shell leaks into the test."""
    for key in list(os.environ):
        if key.startswith("REM_"):
            monkeypatch.delenv(key)
    return monkeypatch


# --- both backends ---------------------------------------------------------------------------
# A test marked ``both_backends`` runs once on SQLite and once on PostgreSQL: its ``settings`` (and
# ``open_graph_database``) point at a fresh schema of the PostgreSQL server REM_TEST_POSTGRES_URL
# names (.ci/run starts one). Without that server the PostgreSQL run is skipped — except under
# CI=true, where it fails: CI must not pass by skipping the backend it is there to test.
BACKENDS = ("sqlite", "postgresql")
# Read once, before any test's ``clean_env`` removes REM_* variables.
TEST_POSTGRES_URL = os.environ.get("REM_TEST_POSTGRES_URL", "")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests marked ``slow`` first, the rest in their order: pytest-xdist hands tests out in
    this order, so the workers start on the longest and finish on short ones, instead of one
    worker idling while the other runs a minutes-long test last (longest first keeps the suite's
    wall time near its CPU time over the cores)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_backends"):
        metafunc.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The engine this test runs on (``sqlite`` unless the test is marked ``both_backends``)."""
    return getattr(request, "param", "sqlite")


def _no_postgres(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}: the PostgreSQL tests must run in CI")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """The test PostgreSQL server (REM_TEST_POSTGRES_URL), checked once per session."""
    url = TEST_POSTGRES_URL
    if not url:
        _no_postgres("REM_TEST_POSTGRES_URL is not set")
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        _no_postgres(f"the PostgreSQL server at REM_TEST_POSTGRES_URL is unreachable ({exc})")
    return url


def drop_database(server: str, name: str) -> None:
    """``DROP DATABASE IF EXISTS name WITH (FORCE)`` on ``server``. An autovacuum worker the server
    started in it (a restore has just written its rows) is a process the test role may not end
    (``InsufficientPrivilege``, "must be a member of the role whose process is being terminated"):
    it ends on its own within moments, so the drop is tried again for up to 30 s."""
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            return
        except psycopg.errors.InsufficientPrivilege:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def database_named(server: str, name: str) -> str:
    """``server``'s URL naming the database ``name`` instead of its own."""
    return urlsplit(server)._replace(path=f"/{name}").geturl()


def schema_url(server: str, schema: str) -> str:
    """``server``'s URL with ``schema`` as the search path."""
    separator = "&" if "?" in server else "?"
    return f"{server}{separator}options={quote(f'-csearch_path={schema}')}"


def schema_script(server: str, schema: str) -> str:
    """pg_dump's SQL script of ``schema`` on ``server`` (rows as INSERTs, no owner), as one
    ``execute`` replays it: psql's meta-commands (pg_dump's ``\\restrict`` guard) are left out,
    they are not SQL."""
    dumped = subprocess.run(["pg_dump", "--schema", schema, "--no-owner", "--inserts", f"--dbname={server}"],
                            capture_output=True, text=True, check=True).stdout
    return "".join(line for line in dumped.splitlines(keepends=True) if not line.startswith("\\"))


@pytest.fixture(scope="session")
def migrated_schema_script(postgres_server_url: str) -> str:
    """pg_dump's SQL script of a schema that rem-cycle migrated to its newest version, made once
    per test process, the schema named :data:`MIGRATED_SCHEMA_PLACEHOLDER`. ``database_url``
    replays it into each test's schema: one transaction of the final tables, where migrating an
    empty schema ran every migration in its own transaction (0.13 s against 0.18 s a test at load
    2.4, bench/bench_test_schema.py, in each of the ~300 PostgreSQL tests)."""
    import psycopg

    from store.backend import open_database_at
    from store.postgres import close_pools

    schema = f"template_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        open_database_at(path=Path(os.devnull), url=schema_url(postgres_server_url, schema)).close()  # migrates it
        close_pools()
        script = schema_script(postgres_server_url, schema)
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    assert script.count(f"CREATE SCHEMA {schema};") == 1, "pg_dump's script does not create the schema"
    return script.replace(schema, MIGRATED_SCHEMA_PLACEHOLDER)


MIGRATED_SCHEMA_PLACEHOLDER = "rem_migrated_schema_placeholder"


def replay_migrated_schema(conn: Any, script: str, schema: str) -> None:
    """Create ``schema`` from :func:`migrated_schema_script` on ``conn`` (autocommit), in one
    transaction. The migration that made ``rem_counters`` drew the database's ``instance`` at
    random (store/postgres_schema.py): each replayed schema draws its own too, as each migrated
    one did, instead of all sharing the template's."""
    with conn.transaction():
        conn.execute(script.replace(MIGRATED_SCHEMA_PLACEHOLDER, schema))
        conn.execute(f"UPDATE {schema}.rem_counters SET value = floor(random() * 9007199254740991)::bigint WHERE name = 'instance'")


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """``None`` on SQLite; on PostgreSQL the URL of a fresh schema (dropped afterwards), holding
    rem-cycle's tables at the newest schema version as migrating an empty schema leaves them
    (:func:`migrated_schema_script`) — or empty, for a test marked ``empty_schema`` (one about the
    first migration itself, or a graph not created yet). A test marked ``own_database`` has its
    schema in a database of its own (dropped afterwards): one that holds a reader open, or needs
    none of the other tests' readers about while it erases."""
    if backend == "sqlite":
        yield None
        return
    import psycopg

    from store.postgres import close_pools

    admin = request.getfixturevalue("postgres_server_url")
    schema = f"test_{uuid.uuid4().hex[:16]}"
    own = request.node.get_closest_marker("own_database") is not None
    if own:
        # Its own database: a reader this test holds open is no reader of the other tests' erases
        # (their check counts the transactions of the current database only), nor theirs of its.
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {schema}")
    server = database_named(admin, schema) if own else admin
    with psycopg.connect(server, autocommit=True) as conn:
        if request.node.get_closest_marker("empty_schema"):
            conn.execute(f"CREATE SCHEMA {schema}")
        else:
            replay_migrated_schema(conn, request.getfixturevalue("migrated_schema_script"), schema)
    yield schema_url(server, schema)
    close_pools()
    if own:
        drop_database(admin, schema)
        return
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def open_graph_database(database_url: str | None) -> Callable[[Path], Any]:
    """Opens the test's graph database: the SQLite file at the path given, or (PostgreSQL) the
    test's schema, whatever the path."""
    from store.backend import open_database_at

    return lambda path, **options: open_database_at(path=path, url=database_url, **options)


@pytest.fixture
def settings(data_dir: Path, clean_env: pytest.MonkeyPatch, database_url: str | None) -> Settings:
    clean_env.setenv("REM_DATA_DIR", str(data_dir))
    if database_url is not None:
        clean_env.setenv("REM_DATABASE_URL", database_url)
        return load_settings(data_dir=data_dir, database_url=database_url)
    return load_settings(data_dir=data_dir)


@pytest.fixture
async def stores(settings: Settings) -> AsyncIterator[Stores]:
    opened = await open_stores(settings)
    try:
        yield opened
    finally:
        opened.close()


def add_nodes(settings: Settings, nodes: list[Any]) -> None:
    """Write ``nodes`` (:class:`store.graph.Node`) straight into the graph ``settings`` names, as an
    operator's earlier edit or another worker would have left them."""
    from store.backend import open_database
    from store.graph import GraphStore

    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes(nodes)
    finally:
        db.close()


def write_sessions(path: Path, sessions: list[dict[str, Any]]) -> Path:
    """Write sessions as an import JSONL file."""
    path.write_text("".join(json.dumps(s) + "\n" for s in sessions), encoding="utf-8")
    return path


def make_session(sid: str, n_turns: int = 3, *, created: str = "2026-11-01T10:00:00Z", summary: bool = True, text: str = "turn {i} of {sid}") -> dict[str, Any]:
    session: dict[str, Any] = {
        "sessionId": sid,
        "title": f"Session {sid}",
        "createdAt": created,
        "userId": "user-1",
        "turns": [{"role": "user" if i % 2 == 0 else "assistant", "text": text.format(i=i, sid=sid)} for i in range(n_turns)],
    }
    if summary:
        session["summary"] = f"Summary of {sid}"
    else:
        session["noSummary"] = True
    return session


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m worker ARGS`` as a real subprocess: forked by the command server
    (tests/command_server.py) when its environment apart from ``REM_*`` is the server's, else
    started as a new interpreter."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(ROOT)
    if start_environment(full_env) == start_environment(COMMAND_SERVER_ENV):
        return command_server().run(list(args), full_env, timeout, cwd or ROOT)
    return subprocess.run([sys.executable, "-m", "worker", *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd=cwd or ROOT)


# The command server's environment: the test process's at start, without REM_* (as run_cli's).
COMMAND_SERVER_ENV = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT)}


def start_environment(env: dict[str, str]) -> dict[str, str]:
    """What of ``env`` an interpreter start and the imports can read: all but the ``REM_*``
    settings (read when a command loads them) and pytest's name of the running test."""
    return {k: v for k, v in env.items() if not k.startswith("REM_") and k != "PYTEST_CURRENT_TEST"}


class CommandServer:
    """tests/command_server.py in a subprocess of this test process, started on first use."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="rem-commands-")
        self.path = os.path.join(self.folder, "socket")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.command_server", self.path], env=COMMAND_SERVER_ENV,
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n", "the command server did not start"
        atexit.register(self.close)

    def close(self) -> None:
        """Stop the server (it ends when its stdin closes) and reap it, so that its commands' CPU
        time counts in this process's children's, as started commands' does."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        shutil.rmtree(self.folder)

    def start(self, args: list[str], env: dict[str, str], cwd: Path, *, stdout: int, stderr: int) -> ForkedCommand:
        """``subprocess.Popen([python, "-m", "worker", *args], stdout=stdout, stderr=stderr, ...)``
        (descriptors; stdin is this process's), forked by the server."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(self.path)
            request = {"argv": args, "env": env, "cwd": str(cwd)}
            socket.send_fds(conn, [json.dumps(request).encode()], [0, stdout, stderr])
            pid = json.loads(conn.recv(4096))["pid"]
        except BaseException:
            conn.close()
            raise
        return ForkedCommand([sys.executable, "-m", "worker", *args], pid, conn)

    def run(self, args: list[str], env: dict[str, str], timeout: float, cwd: Path) -> subprocess.CompletedProcess[str]:
        """``subprocess.run([python, "-m", "worker", *args], capture_output=True, text=True, ...)``,
        forked by the server; on ``timeout`` the command is killed and
        :class:`subprocess.TimeoutExpired` raised, as there."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            command = self.start(args, env, cwd, stdout=out.fileno(), stderr=err.fileno())
            try:
                status = command.wait(timeout)
            except BaseException as exc:  # as subprocess.run: whatever stops the wait kills the command
                command.kill()
                command.wait()
                if not isinstance(exc, subprocess.TimeoutExpired):
                    raise
                raise subprocess.TimeoutExpired(command.args, timeout, output=read_text(out), stderr=read_text(err)) from None
            return subprocess.CompletedProcess(command.args, status, read_text(out), read_text(err))


class ForkedCommand:
    """A command the command server forked: the part of :class:`subprocess.Popen` the tests use
    (``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``). Its
    status (the exit code, or minus the signal that killed it) arrives on ``conn`` once the server
    has reaped it."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn

    def _receive(self, timeout: float | None) -> None:
        self._conn.settimeout(timeout)
        self.returncode = json.loads(self._conn.recv(4096))["status"]
        self._conn.close()

    def poll(self) -> int | None:
        """The status if the command has ended, else None (at once)."""
        if self.returncode is None:
            with contextlib.suppress(BlockingIOError, TimeoutError):
                self._receive(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the command to end; :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        if self.returncode is None:
            try:
                self._receive(timeout)
            except (TimeoutError, BlockingIOError):  # BlockingIOError: a timeout of 0
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the command unless it has ended (as Popen, which checks first)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def read_text(file: IO[bytes]) -> str:
    """A captured stream as ``subprocess.run(text=True)`` decodes it (locale encoding, universal newlines)."""
    file.seek(0)
    return io.TextIOWrapper(io.BytesIO(file.read())).read()


_COMMAND_SERVER: list[CommandServer] = []
_COMMAND_SERVER_START = threading.Lock()  # tests run commands from threads too


def command_server() -> CommandServer:
    """This test process's command server (started on the first command, stopped at exit)."""
    with _COMMAND_SERVER_START:
        if not _COMMAND_SERVER:
            _COMMAND_SERVER.append(CommandServer())
        return _COMMAND_SERVER[0]


def digest_sample_with_cli(data: Path) -> Path:
    """The README's demo through the real CLI: import the shipped sample into ``data`` and run one
    cycle (``--once``); returns ``data``."""
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("import", str(SAMPLE), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    return data


def run_temp_dir(base_temp: Path) -> Path:
    """The temporary folder of the whole test run, for templates its processes share: under
    pytest-xdist a worker's base folder (``popen-gwN``) is inside the run's own, fresh each run;
    without it, the base folder itself."""
    return base_temp.parent if "PYTEST_XDIST_WORKER" in os.environ else base_temp


@pytest.fixture(scope="session")
def digested_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data dir of :func:`digest_sample_with_cli`, built once per test run (the first worker to
    need it builds it, the other waits for it): the import and cycle of the 26 sample sessions cost
    two CLI runs that every test using it would repeat. Never used in place: take a copy
    (:func:`copy_digested_sample`)."""
    from filelock import FileLock

    template = run_temp_dir(tmp_path_factory.getbasetemp()) / "digested-sample"
    with FileLock(f"{template}.lock"):
        if not (template / "ready").exists():
            shutil.rmtree(template, ignore_errors=True)
            digest_sample_with_cli(template / "data")
            (template / "ready").touch()
    return template / "data"


def copy_digested_sample(digested: Path, data: Path) -> Path:
    """A copy at ``data`` of the ``digested_sample`` data dir (closed: no process has it open);
    returns ``data``."""
    shutil.copytree(digested, data)
    return data

def start_chroma_server(path: Path, port: int) -> subprocess.Popen[bytes]:
    """Start `chroma run` on 127.0.0.1:port over ``path`` and wait until it answers."""
    exe = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")
    proc = subprocess.Popen(
        [exe, "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("chroma run did not start")


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `chroma run` server on a free loopback port; yields its URL."""
    port = free_port()
    proc = start_chroma_server(tmp_path_factory.mktemp("chroma-server"), port)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)
