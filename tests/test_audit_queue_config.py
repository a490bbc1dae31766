"""Settings of the lazy-edge queue and of its neighbours, attacked as an operator types them (in
the shell, in ``.env``, in a TOML file): a value that would make rem-cycle destroy or expose
something is one ``invalid configuration`` line (exit 2), and an empty value is the default."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest

from config import ConfigError, load_settings
from config.settings import DEFAULT_SEMANTIC_TYPES
from tests.conftest import free_port, run_cli


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
