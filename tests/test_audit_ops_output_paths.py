"""Odd output paths for ``export --out`` and ``backup`` (operator audit).

Both write ``PATH.part``/``PATH.partial`` and rename it over ``PATH``. A rename replaces whatever
name it lands on: ``rem-cycle backup /dev/null`` (as root, as in a container) replaced the system's
``/dev/null`` device with a copy of the graph, and so would ``export --out /dev/null``. A FIFO, a
device or a socket at ``PATH`` is refused (exit 2, one line) and left as it was; a directory at
``PATH`` is refused before anything is written (it left a whole ``.partial`` copy beside it); an
empty path is a usage error (it was a ``ValueError`` traceback)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.conftest import make_session, run_cli, write_sessions

COMMANDS = {
    "export": lambda out: ["export", "--out", out],
    "backup": lambda out: ["backup", out],
}


@pytest.fixture(scope="module")
def graph_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ops-out")
    data = root / "data"
    sessions = write_sessions(root / "s.jsonl", [make_session("s1", 4, text="turn {i}: the LazyEdgeQueue drains")])
    assert run_cli("import", str(sessions), env={"REM_DATA_DIR": str(data)}).returncode == 0
    assert run_cli("--once", env={"REM_DATA_DIR": str(data)}).returncode == 0
    return data


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".part", ".partial", ".partial-journal")))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_fifo_at_the_output_path_is_refused_and_left_alone(graph_data: Path, tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = run_cli(*COMMANDS[command](str(fifo)), env={"REM_DATA_DIR": str(graph_data)})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "is not a regular file" in done.stderr.splitlines()[-1]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_directory_at_the_output_path_is_refused_before_anything_is_written(graph_data: Path, tmp_path: Path, command: str) -> None:
    folder = tmp_path / "backups"
    folder.mkdir()
    done = run_cli(*COMMANDS[command](str(folder)), env={"REM_DATA_DIR": str(graph_data)})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "is a directory" in done.stderr.splitlines()[-1]
    assert list(folder.iterdir()) == []
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_empty_output_path_is_a_usage_error(graph_data: Path, command: str) -> None:
    done = run_cli(*COMMANDS[command](""), env={"REM_DATA_DIR": str(graph_data)})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_link_at_the_output_path_is_still_replaced_not_followed(graph_data: Path, tmp_path: Path, command: str) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep me", encoding="utf-8")
    link = tmp_path / "out"
    link.symlink_to(target)
    done = run_cli(*COMMANDS[command](str(link)), env={"REM_DATA_DIR": str(graph_data)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert not link.is_symlink() and link.stat().st_size > 0
    assert target.read_text(encoding="utf-8") == "keep me"
