"""Settings of the lazy-edge queue and of its neighbours, attacked as an operator types them (in
the shell, in ``.env``, in a TOML file): a value that would make rem-cycle destroy or expose
something is one ``invalid configuration`` line (exit 2), and an empty value is the default."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import ConfigError, load_settings
from config.settings import DEFAULT_SEMANTIC_TYPES
from tests.conftest import ROOT, free_port, make_session, run_cli, write_sessions


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", [
    "graph.sqlite3",              # the drain renamed the graph database away and shredded it into dead letters
    "graph.sqlite3-wal",          # SQLite's companions
    "graph.sqlite3.restoring",    # `restore`'s scratch copy
    "chroma/chroma.sqlite3",      # the embedded Chroma's database, same fate
    "chroma",                     # the embedded Chroma's folder
    "rem-cycle.lock",             # the cycle's lock: appended to, renamed
    "rem-cycle",                  # its drain lock would be rem-cycle.lock: every cycle's drain skipped as busy
    "rem-cycle.daemon.lock",
    "held-answers.jsonl",         # paid answers the database refused (heldonce): replaced whole, taken, removed
    "held-answers.jsonl.lock",
    ".",                          # the data dir itself
])
def test_a_queue_path_naming_a_file_rem_cycle_keeps_is_a_configuration_error(tmp_path: Path, name: str) -> None:
    data = tmp_path / "data"
    with pytest.raises(ConfigError, match=r"^invalid configuration: REM_LAZY_EDGES_PATH must name a file of the queue's own"):
        load_settings(data_dir=data, lazy_edges_path=data / name)
    for fine in ("lazy.jsonl", "graph.jsonl", "queue/edges.jsonl", "rem-cycle-queue.jsonl", "chroma-edges.jsonl"):
        assert load_settings(data_dir=data, lazy_edges_path=data / fine).queue_path == data / fine


def test_a_drain_told_the_queue_is_the_graph_database_refuses_and_leaves_the_graph_whole(tmp_path: Path) -> None:
    """Before: `rem-cycle drain` with REM_LAZY_EDGES_PATH=<data>/graph.sqlite3 renamed the graph
    database to graph.sqlite3.draining, dead-lettered its pages as malformed lines and deleted it
    (exit 0); every later command said `file is not a database`."""
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("--once", env=env).returncode == 0
    graph = data / "graph.sqlite3"
    before = _digest(graph)
    bad = {**env, "REM_LAZY_EDGES_PATH": str(graph)}
    for command in (["drain"], ["enqueue", "-"], ["--once"]):
        done = run_cli(*command, env=bad)
        assert done.returncode == 2, (command, done.stdout, done.stderr[-2000:])
        assert done.stderr.splitlines() == [
            f"rem-cycle: invalid configuration: REM_LAZY_EDGES_PATH must name a file of the queue's own, not "
            f"{graph.resolve()}: rem-cycle keeps its graph database there"
        ], command
    assert _digest(graph) == before and not (data / "graph.sqlite3.draining").exists()
    assert not (data / "graph.dead.sqlite3").exists()
    assert run_cli("status", env=env).returncode == 0


def test_an_empty_http_host_is_loopback_not_every_interface(tmp_path: Path) -> None:
    """``REM_HTTP_HOST=`` (a line of .env cleared, or ``$UNSET`` in a compose file) means unset, as
    every other empty setting does: the endpoint stays on loopback. Before, the empty host made the
    daemon bind 0.0.0.0 and serve /metrics to the network."""
    port = free_port()
    env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_HTTP_HOST": "", "REM_HTTP_PORT": str(port),
           "REM_RUN_AT_STARTUP": "false", "REM_LOG_FORMAT": "json"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 60
        url = None
        assert proc.stderr is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line, "the daemon exited before it listened"
            if '"http endpoint listening"' in line:
                url = json.loads(line)["url"]
        assert url == f"http://127.0.0.1:{port}"
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_host_tenant_and_model_settings_are_their_defaults(clean_env: pytest.MonkeyPatch, value: str) -> None:
    names = ("http_host", "mcp_host", "chroma_tenant", "chroma_database", "llm_base_url", "llm_model", "embedding_model",
             "embedding_url", "semantic_types")
    for name in names:
        clean_env.setenv(f"REM_{name.upper()}", value)
    settings = load_settings()
    for name in names:
        assert getattr(settings, name) == type(settings).model_fields[name].default, name
    assert settings.semantic_types == DEFAULT_SEMANTIC_TYPES and settings.http_host == "127.0.0.1"


def test_an_empty_vocabulary_setting_keeps_the_node_types(tmp_path: Path) -> None:
    """``REM_SEMANTIC_TYPES=`` made the vocabulary empty: every extracted node became CONCEPT (the
    sample's classes, files and issues flattened). Empty now means the default; a TOML list with no
    name, or names run together with a separator the setting does not split on, is refused."""
    data = tmp_path / "data"
    sample = tmp_path / "s.jsonl"
    write_sessions(sample, [make_session("s-1", 3, text="turn {i} edits store/lazy_queue.py in class LazyEdgeQueue, see #12")])
    env = {"REM_DATA_DIR": str(data), "REM_SEMANTIC_TYPES": ""}
    assert run_cli("import", str(sample), env=env).returncode == 0
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    with sqlite3.connect(data / "graph.sqlite3") as db:
        labels = {label for (label,) in db.execute("SELECT DISTINCT label FROM nodes")}
    assert {"CLASS", "FILE", "ISSUE"} <= labels, labels
    for toml, why in (("semantic_types = []", "at least one type name"), ('semantic_types = "CONCEPT;CLASS"', "CONCEPT;CLASS")):
        conf = tmp_path / "rem.toml"
        conf.write_text(toml + "\n", encoding="utf-8")
        done = run_cli("--config", str(conf), "--once", env={"REM_DATA_DIR": str(data)})
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr[-2000:]
        assert done.stderr.startswith(f"rem-cycle: invalid configuration: {conf}: semantic_types: ") and why in done.stderr


def test_a_home_relative_path_in_a_setting_is_under_home_not_a_folder_named_tilde(tmp_path: Path) -> None:
    """``data_dir = "~/rem"`` in a TOML file (or ``REM_DATA_DIR=~/rem`` in .env, where no shell
    expands it) made a folder literally named ``~`` in the current directory — one ``rm -rf ~``
    away from the operator's home. ``~`` and ``~user`` are expanded in the path settings and in
    ``REM_CONFIG``; a ``~name`` that names no user is a configuration error."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    conf = home / "rem.toml"
    conf.write_text('data_dir = "~/rem"\nlazy_edges_path = "~/rem/queue/edges.jsonl"\n', encoding="utf-8")
    env = {"HOME": str(home)}
    sample = write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])
    assert run_cli("--config", str(conf), "import", str(sample), env=env, cwd=work).returncode == 0
    edges = tmp_path / "edges.jsonl"
    edges.write_text('{"source": "CONCEPT:a", "target": "memory:m", "relationship": "R"}\n', encoding="utf-8")
    done = run_cli("enqueue", str(edges), env={**env, "REM_CONFIG": "~/rem.toml"}, cwd=work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(work.iterdir()) == []
    assert (home / "rem" / "chroma").is_dir() and (home / "rem" / "queue" / "edges.jsonl").is_file()
    done = run_cli("status", env={**env, "REM_DATA_DIR": "~no-such-user-here/rem"}, cwd=work)
    assert done.returncode == 2 and done.stderr.startswith("rem-cycle: invalid configuration: REM_DATA_DIR: "), done.stderr
    assert list(work.iterdir()) == []


@pytest.mark.parametrize(("url", "why"), [
    ("postgresql://rem:pa ss99@127.0.0.1:5/rem", "white space"),            # libpq: unexpected spaces found in "pa ss99"
    ("postgresql://rem:hu%zznter22@127.0.0.1:5/rem", "a % not followed by two hex digits"),  # invalid percent-encoded token: "hu%zznter22"
    ("postgresql://rem:hunter22@[::1/rem", "not a URL"),                  # a ValueError traceback
])
def test_a_database_url_libpq_cannot_read_is_refused_without_showing_its_password(tmp_path: Path, url: str, why: str) -> None:
    """Before: the connection error quoted the part of the URL it could not read — the password —
    on stderr (exit 1), or ended in a traceback."""
    done = run_cli("status", env={"REM_DATA_DIR": str(tmp_path / "data"), "REM_DATABASE_URL": url})
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("rem-cycle: invalid configuration: REM_DATABASE_URL: ")
    assert why in done.stderr
    for secret in ("pa ss99", "hu%zznter22", "zznter", "hunter22"):
        assert secret not in done.stderr


def test_the_database_password_is_masked_wherever_a_message_quotes_it(clean_env: pytest.MonkeyPatch) -> None:
    """The database URL's password is one of the secrets every message and log line is masked of,
    as the Chroma and model URLs' are: a driver's message quoting it outside a URL was shown."""
    from config.redact import redact, secret_values

    clean_env.setenv("REM_DATABASE_URL", "postgresql://rem:s%2Fcr3t-pw@db:5432/rem?sslpassword=k3y-pass")
    secrets = secret_values(load_settings())
    assert {"s%2Fcr3t-pw", "s/cr3t-pw", "k3y-pass"} <= secrets
    assert redact('FATAL: password "s/cr3t-pw" rejected; key k3y-pass', also=secrets) == 'FATAL: password "***" rejected; key ***'


@pytest.mark.parametrize("name", ["REM_LLM_BASE_URL", "REM_CHROMA_URL", "REM_EMBEDDING_URL"])
@pytest.mark.parametrize(("url", "why"), [
    ("http://u:pa ss99@127.0.0.1:1/v1", "white space"),
    ("http://u:hunter22@[::1:1/v1", "not a URL"),
    ("127.0.0.1:11434/v1", "must start with http:// or https://"),
])
def test_a_server_url_that_is_no_url_is_refused_without_showing_its_password(tmp_path: Path, name: str, url: str, why: str) -> None:
    """Before: ``REM_LLM_BASE_URL`` with a space in its password failed the cycle with `LLM server
    http://u:pa ss99@… unreachable` (the password shown: the masking reads a URL up to white
    space), an unbracketed IPv6 host logged a traceback, and neither it nor the embedding URL was
    checked at all."""
    env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_EXTRACTOR": "openai", name: url}
    done = run_cli("--once", env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith(f"rem-cycle: invalid configuration: {name}: ")
    assert why in done.stderr and "pa ss99" not in done.stderr and "hunter22" not in done.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(("env", "message"), [
    ({"REM_PROMPT_ENVELOPE_TOKENS": "60000"},
     "the chunk budget, min(REM_CHUNK_LIMIT_TOKENS, REM_SAFE_PROCESSING_LIMIT_TOKENS, REM_CONTEXT_LIMIT_TOKENS - "
     "REM_OUTPUT_RESERVE_TOKENS) - REM_PROMPT_ENVELOPE_TOKENS, is -10000 tokens: no chunk fits"),
    ({"REM_SAFE_PROCESSING_LIMIT_TOKENS": "0"}, "REM_SAFE_PROCESSING_LIMIT_TOKENS: Input should be greater than 0"),
    ({"REM_SAFE_PROCESSING_LIMIT_TOKENS": "-5"}, "REM_SAFE_PROCESSING_LIMIT_TOKENS: Input should be greater than 0"),
])
def test_token_limits_that_leave_no_room_for_a_chunk_are_a_configuration_error(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    """Before: a budget of zero or less silently meant "never chunk" (the chunker's rule for a
    missing limit), so every session went to the model whole, however far past its context."""
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert str(raised.value) == f"invalid configuration: {message}"


def test_one_collection_for_turns_and_summaries_is_a_configuration_error(tmp_path: Path) -> None:
    """Before: with REM_MEMORY_COLLECTION = REM_SESSION_COLLECTION the import wrote both kinds of
    rows into one collection and the cycle took every summary for a turn (the sample's 3 sessions:
    97 MEMORY nodes for 94 turns, their extraction counted twice)."""
    env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_MEMORY_COLLECTION": "agent-rows", "REM_SESSION_COLLECTION": "agent-rows"}
    sample = write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])
    for command in (["import", str(sample)], ["--once"]):
        done = run_cli(*command, env=env)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.splitlines() == [
            "rem-cycle: invalid configuration: REM_MEMORY_COLLECTION and REM_SESSION_COLLECTION must name two collections, "
            "not both 'agent-rows'"
        ]
    assert not (tmp_path / "data").exists()


def test_a_toml_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows PowerShell's ``Out-File -Encoding utf8`` (and older Notepad) start a file with a
    byte order mark, which TOML does not allow: the file was refused with `Invalid statement (at
    line 1, column 1)`, nothing to see there. The mark is skipped, as Python's utf-8-sig does."""
    conf = tmp_path / "rem.toml"
    conf.write_bytes(b"\xef\xbb\xbfbatch_limit = 7\r\nlog_level = \"debug\"\r\n")
    assert load_settings(conf).batch_limit == 7
    conf.write_bytes(b"\xef\xbb\xbfbatch_limit = \n")
    with pytest.raises(ConfigError, match=rf"^invalid configuration: {conf}: Invalid value \(at line 1, column 15\)$"):
        load_settings(conf)


def test_word_settings_take_any_case(clean_env: pytest.MonkeyPatch) -> None:
    """``REM_LOG_LEVEL=INFO`` (the logging module's own spelling), ``REM_EXTRACTOR=OpenAI``,
    ``REM_LAZY_QUEUE=Database``: a choice among words is taken in any case and without the spaces
    around it, as numbers and booleans already were; it stopped every command with exit 2."""
    for name, value in {"REM_LOG_LEVEL": "INFO", "REM_LOG_FORMAT": " JSON", "REM_EXTRACTOR": "OpenAI",
                        "REM_LAZY_QUEUE": "Database ", "REM_EMBEDDING": "HASH", "REM_LLM_JSON_MODE": "JSON_Object"}.items():
        clean_env.setenv(name, value)
    settings = load_settings()
    assert (settings.log_level, settings.log_format, settings.extractor, settings.lazy_queue, settings.embedding,
            settings.llm_json_mode) == ("info", "json", "openai", "database", "hash", "json_object")
    clean_env.setenv("REM_LOG_LEVEL", "verbose")
    with pytest.raises(ConfigError, match="^invalid configuration: REM_LOG_LEVEL: Input should be 'debug', 'info', 'warning' or 'error'$"):
        load_settings()
