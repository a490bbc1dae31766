"""What the third walk through README's operational sections found (RELIABILITY.md, "userwalk3"):
a bad value in the TOML file named as an environment variable nobody had set, a config path that
is a folder said "not found", a data dir this user may not write in answered by a bare
``[Errno 13] Permission denied: 'rem-cycle.lock'`` (or a temporary file's name), and ``unmerge``
of the node others were merged into (the one ``show`` redirects to) said there was nothing to
undo. The commands run in-process through ``worker.entry.main`` where no privilege must be dropped;
the permission checks run in one process without root's powers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from config import Settings, load_settings
from store.backend import open_database
from tests.conftest import ROOT, free_port, make_session, write_sessions
from tests.test_audit_cli_database import without_root_powers
from tests.test_identity import _import, _session
from worker.entry import main

pytestmark = pytest.mark.timeout(120)


def test_a_bad_value_in_the_config_file_is_named_as_the_file_writes_it(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """``batch_limit = "fifty"`` in rem.toml said ``REM_BATCH_LIMIT: Input should be a valid
    integer``: the operator looked for a variable no shell had set. A value the environment gives
    (it wins over the file) is still named by its variable."""
    conf = tmp_path / "rem.toml"
    conf.write_text('batch_limit = "fifty"\ninterval_seconds = -1\n', encoding="utf-8")
    clean_env.setenv("REM_DATA_DIR", str(tmp_path / "data"))
    assert main(["--config", str(conf), "status"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"rem-cycle: invalid configuration: {conf}: batch_limit: Input should be a valid integer, unable to parse "
        f"string as an integer; {conf}: interval_seconds: Input should be greater than 0"
    ]
    clean_env.setenv("rem_batch_limit", "lots")  # variables are read in any case
    assert main(["--config", str(conf), "status"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "rem-cycle: invalid configuration: REM_BATCH_LIMIT: Input should be a valid integer, unable to parse string as an "
        f"integer; {conf}: interval_seconds: Input should be greater than 0"
    ]
    assert not (tmp_path / "data").exists()


def test_a_config_path_that_is_a_folder_is_not_said_to_be_missing(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """``--config .`` (or a tab-completed folder) said ``config file not found: .``."""
    clean_env.setenv("REM_DATA_DIR", str(tmp_path / "data"))
    assert main(["--config", str(tmp_path), "status"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"rem-cycle: invalid configuration: {tmp_path} is a folder, not a TOML config file"]
    assert main(["--config", str(tmp_path / "nope.toml"), "status"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"rem-cycle: config file not found: {tmp_path / 'nope.toml'}"]


# Runs each (environment, arguments) of argv[1] through worker.entry.main in this one process:
# one interpreter start for all the commands, printed as [[status, stdout, stderr], …].
_COMMANDS = """
import contextlib, io, json, os, sys
from worker.entry import main
results = []
for env, args in json.loads(sys.argv[1]):
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    results.append([status, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""

NEEDS = ("(rem-cycle needs to create, read and write the files of its data dir: run it as the user that owns the data dir, "
         "or give this user write access to it)")


def test_a_data_dir_this_user_may_not_write_in_is_named_with_what_rem_cycle_needs(tmp_path: Path) -> None:
    """A data dir owned by the daemon's user, an operator running commands as themselves: the
    daemon and ``import-notes`` said ``[Errno 13] Permission denied: 'rem-cycle.lock'`` (the file's
    bare name), ``import`` ``PermissionError: … 'chroma'``, ``restore`` named a temporary file it
    had tried to make, ``--once`` and ``import`` under a folder it may not create the data dir in
    printed the errno; a ``backup`` into a folder this user may not write in said ``backup failed:
    unable to open database file``, as if the graph database were the trouble."""
    sessions = write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])
    note = tmp_path / "note.md"
    note.write_text("The LazyEdgeQueue feeds the GraphStore.\n", encoding="utf-8")
    locked, read_only = tmp_path / "locked", tmp_path / "ro"
    locked.mkdir()
    read_only.mkdir()
    missing = locked / "data"  # its folder may not be written: it cannot be created
    graph = tmp_path / "graph"  # a graph to back up into the folder this user may not write in
    open_database(load_settings(data_dir=graph)).close()
    runs = [
        ({"REM_DATA_DIR": str(missing)}, ["--once"]),
        ({"REM_DATA_DIR": str(missing)}, ["import", str(sessions)]),
        ({"REM_DATA_DIR": str(read_only)}, ["import", str(sessions)]),
        ({"REM_DATA_DIR": str(read_only), "REM_RUN_AT_STARTUP": "false"}, []),  # the daemon
        ({"REM_DATA_DIR": str(read_only)}, ["import-notes", str(note)]),
        ({"REM_DATA_DIR": str(read_only)}, ["restore", str(sessions)]),  # refused before the file is read
        ({"REM_DATA_DIR": str(graph)}, ["backup", str(read_only / "graph.sqlite3")]),
    ]
    for folder in (locked, read_only):
        folder.chmod(0o555)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT)}
        done = subprocess.run([*without_root_powers(), sys.executable, "-c", _COMMANDS, json.dumps(runs)], capture_output=True,
                              text=True, timeout=120, env=env, cwd=tmp_path)
    finally:
        for folder in (locked, read_only):
            folder.chmod(0o755)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    said = [[line for line in err.splitlines() if line.startswith("rem-cycle:")] for _, _, err in results]
    assert [status for status, _, _ in results] == [1] * len(runs)
    assert f"(phase setup: os-error — cannot create the folder {missing}: Permission denied {NEEDS}; not recorded" in results[0][1]
    assert said[1:] == [
        [f"rem-cycle: cannot open Chroma (embedded at {missing / 'chroma'}): cannot create the folder {missing}: "
         f"Permission denied {NEEDS}"],
        [f"rem-cycle: cannot open Chroma (embedded at {read_only / 'chroma'}): cannot create the folder "
         f"{read_only / 'chroma'}: Permission denied {NEEDS}"],
        [f"rem-cycle: cannot start the daemon: cannot create or open {read_only / 'rem-cycle.daemon.lock'}: Permission denied {NEEDS}"],
        [f"rem-cycle: cannot create or open {read_only / 'rem-cycle.lock'}: Permission denied {NEEDS}"],
        [f"rem-cycle: restore from {sessions} failed, nothing was changed: cannot create or open "
         f"{read_only / 'rem-cycle.daemon.lock'}: Permission denied {NEEDS}"],
        [f"rem-cycle: backup failed: cannot create {read_only / 'graph.sqlite3.partial'}: unable to open database file "
         "(its folder must be writable by this user)"],
    ]
    assert not missing.exists() and list(read_only.iterdir()) == []


@pytest.mark.both_backends
def test_unmerge_of_the_node_others_went_into_names_them(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """``rem-cycle unmerge CLASS:GraphStore`` after ``merge CLASS:LazyEdgeQueue CLASS:GraphStore``
    — the node ``show`` and ``search`` now lead to — said ``has no active merge to undo``, as if
    nothing had been merged; a second ``merge`` of the merged node said ``no node
    CLASS:LazyEdgeQueue``, not where it went."""
    from worker.cycle import run_cycle

    async def build() -> None:
        await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The LazyEdgeQueue feeds the GraphStore."])])
        assert (await run_cycle(settings)).outcome == "completed"

    anyio.run(build)

    def cli(*args: str) -> tuple[int, list[str]]:  # on this thread: a command watches for signals
        status = main(list(args))
        return status, capsys.readouterr().err.splitlines()

    capsys.readouterr()
    assert cli("merge", "CLASS:LazyEdgeQueue", "CLASS:GraphStore") == (0, [])
    assert cli("unmerge", "CLASS:GraphStore") == (1, [
        "rem-cycle: CLASS:GraphStore has no active merge to undo (merged into it, newest first: CLASS:LazyEdgeQueue; "
        "undo one with rem-cycle unmerge CLASS:LazyEdgeQueue)"
    ])
    assert cli("merge", "CLASS:LazyEdgeQueue", "CLASS:GraphStore") == (1, [
        "rem-cycle: no node CLASS:LazyEdgeQueue (it was merged into CLASS:GraphStore: rem-cycle unmerge "
        "CLASS:LazyEdgeQueue brings it back)"
    ])
    assert cli("unmerge", "CLASS:LazyEdgeQueue") == (0, [])
    assert cli("unmerge", "CLASS:GraphStore") == (1, ["rem-cycle: CLASS:GraphStore has no active merge to undo"])


def test_a_listen_address_that_does_not_resolve_is_said_in_the_resolvers_words(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """``REM_HTTP_HOST=metrics.internal`` mistyped: ``cannot listen on …: Unknown error -2`` (the
    resolver's negative errno read as a system error number); ``mcp --http`` shares the line."""
    host = "no-such-host.invalid"
    try:
        socket.getaddrinfo(host, 8080)
    except socket.gaierror as exc:
        reason = exc.strerror
    else:
        pytest.skip(f"{host} resolves here")
    clean_env.setenv("REM_DATA_DIR", str(tmp_path / "data"))
    clean_env.setenv("REM_HTTP_HOST", host)
    clean_env.setenv("REM_HTTP_PORT", "8080")
    assert main([]) == 1
    assert capsys.readouterr().err.splitlines() == [f"rem-cycle: cannot start the daemon: cannot listen on {host}:8080: {reason}"]


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def test_a_chroma_url_naming_another_web_server_says_it_is_no_chroma_answer(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """``REM_CHROMA_URL`` on the wrong port — another web server, or a proxy's error page: the line
    ended ``Exception: <!DOCTYPE HTML>``, the first line of the HTML page that answered."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietFiles, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    clean_env.setenv("REM_DATA_DIR", str(tmp_path / "data"))
    clean_env.setenv("REM_CHROMA_URL", url)
    try:
        assert main(["import", str(write_sessions(tmp_path / "s.jsonl", [make_session("s-1")]))]) == 1
    finally:
        server.shutdown()
        server.server_close()
    assert capsys.readouterr().err.splitlines() == [
        f"rem-cycle: cannot open Chroma ({url}): HTTP 404 File not found for GET {url}/api/v2/auth/identity, not an answer "
        "of a Chroma server (is REM_CHROMA_URL a Chroma server's address?)"
    ]


def test_a_data_dir_setting_that_names_a_file_says_so(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """``REM_DATA_DIR`` naming a file (a backup, the graph database itself): ``status`` said ``no
    data dir at … (`rem-cycle --once` creates it)``, which it cannot; ``import`` and the daemon
    said ``[Errno 20] … is a symbolic link or not a directory …; rem-cycle refuses to follow it``,
    about a plain file, and ``import`` put ``UnsafePathError:`` before it."""
    afile = tmp_path / "graph.sqlite3"
    afile.write_bytes(b"")
    clean_env.setenv("REM_DATA_DIR", str(afile))
    sessions = write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])
    said = []
    for args in (["status"], ["import", str(sessions)], ["--once"], []):
        assert main(args) == 1, args
        said.append(capsys.readouterr().err.splitlines())
    assert said == [
        [f"rem-cycle: the data dir {afile} is a file, not a folder, so no graph database (set REM_DATA_DIR or data_dir in "
         "--config to a folder)"],
        [f"rem-cycle: cannot open Chroma (embedded at {afile / 'chroma'}): {afile} is a file, not a folder: the data dir "
         "must be a folder"],
        [f"rem-cycle: {afile} is a file, not a folder: the data dir must be a folder"],
        [f"rem-cycle: cannot start the daemon: {afile} is a file, not a folder: the data dir must be a folder"],
    ]
    assert afile.read_bytes() == b""


async def test_an_mcp_server_without_a_graph_names_where_it_looked_in_full(
    tmp_path: Path, clean_env: pytest.MonkeyPatch,
) -> None:
    """A client starts ``rem-cycle mcp`` in a working directory of its own choosing: every call said
    ``no graph database at .rem-data/graph.sqlite3``, relative to a directory its user never saw."""
    from mcp import Client

    from worker.mcp_server import build_server

    clean_env.chdir(tmp_path)
    async with Client(build_server(load_settings())) as client:
        answer = await client.call_tool("recall", {"query": "torn lines"})
    assert answer.is_error
    assert [c.text for c in answer.content] == [
        f"Error executing tool recall: no graph database at {tmp_path / '.rem-data' / 'graph.sqlite3'} (run a REM cycle first)"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_postgresql_server_that_refuses_the_connection_is_one_line(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """README: a command that meets a store error prints it in one line. libpq's refusal ends
    ``Connection refused\\n\\tIs the server running …``: ``status`` and ``restore`` printed it on
    two lines (``--once``'s report already joined them)."""
    port = free_port()
    clean_env.setenv("REM_DATA_DIR", str(tmp_path / "data"))
    clean_env.setenv("REM_DATABASE_URL", f"postgresql://rem:pw@127.0.0.1:{port}/x")
    archive = tmp_path / "rem.dump"
    archive.write_bytes(b"PGDMP")
    said = []
    for args in (["status"], ["restore", str(archive)]):
        assert main(args) == 1, args
        said.append(capsys.readouterr().err.splitlines())
    refused = (f"cannot connect to the PostgreSQL database postgresql://rem:***@127.0.0.1:{port}/x: connection failed: "
               f'connection to server at "127.0.0.1", port {port} failed: Connection refused Is the server running')
    assert [len(lines) for lines in said] == [1, 1], said
    assert said[0][0].startswith(f"rem-cycle: {refused}"), said
    assert said[1][0].startswith(f"rem-cycle: restore from {archive} failed, nothing was changed: {refused}"), said
