"""``rem-cycle drain`` (and ``drain --dry-run``) on a data dir without a graph database refuses in one
line, exit 1, and creates nothing; the commands meant to create a graph still do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

EDGE = {"source": "CONCEPT:a", "target": "memory:m1", "relationship": "MENTIONED_IN"}


@pytest.mark.parametrize("command", [["drain"], ["drain", "--dry-run"]])
def test_without_a_data_dir_the_command_refuses_and_creates_nothing(tmp_path: Path, command: list[str]) -> None:
    data = tmp_path / "d"
    done = run_cli(*command, env={"REM_DATA_DIR": str(data)})
    # Before: exit 0, "0 lines", and a data dir with an empty graph.sqlite3 (and a lock file) in it.
    assert done.returncode == 1, done.stdout
    assert done.stderr.strip().splitlines() == [
        f"rem-cycle: no data dir at {data}, so no graph database (set REM_DATA_DIR or data_dir in --config; "
        "`rem-cycle --once` creates it)"
    ]
    assert not data.exists()


@pytest.mark.parametrize("command", [["drain"], ["drain", "--dry-run"]])
def test_a_data_dir_with_queued_lines_but_no_graph_is_left_as_it_was(tmp_path: Path, command: list[str]) -> None:
    data = tmp_path / "d"
    data.mkdir()
    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps(EDGE) + "\n")
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("enqueue", str(edges), env=env).returncode == 0  # enqueue needs a data dir, not a graph
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    done = run_cli(*command, env=env)
    assert done.returncode == 1, done.stdout
    assert done.stderr.strip().splitlines() == [
        f"rem-cycle: no graph database at {data / 'graph.sqlite3'} (run a REM cycle first: rem-cycle --once)"
    ]
    assert {p.name: p.read_bytes() for p in data.iterdir()} == before  # no graph, no lock, the line still queued


def test_the_cycle_still_creates_the_graph_and_drains_what_waited(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps(EDGE) + "\n")
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("enqueue", str(edges), env=env).returncode == 0
    once = run_cli("--once", "--json", env=env)
    assert once.returncode == 0, once.stderr[-2000:]
    assert (data / "graph.sqlite3").is_file()
    assert json.loads(once.stdout)["phases"]["drain"]["total_lines"] == 1  # the refused drain's line, drained by the cycle
    done = run_cli("drain", "--json", env=env)
    assert done.returncode == 0, done.stderr
