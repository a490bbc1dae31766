"""No write escapes the data dir, and the dead-letter file is cut only where rem-cycle tore it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from store import lazy_queue
from store.confined import UnsafePathError, open_confined
from store.db import Database
from store.lazy_queue import LazyEdgeQueue
from tests.conftest import run_cli

VICTIM = b"precious bytes outside the data dir\n"
# One line that fails to link (its memory does not exist: re-queued) and one malformed (dead-lettered):
# a drain then writes both scratch files, the dead-letter file and the live queue.
QUEUE = b'{"source":"CONCEPT:a","target":"memory:nowhere","relationship":"MENTIONED_IN"}\n{"broken\n'


@pytest.fixture(scope="module")
def drained_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir with a graph database (a drain refuses to run without one) where one drain has run:
    copied by each test rather than made by a drain of its own."""
    data = tmp_path_factory.mktemp("confinement") / "data"
    data.mkdir()
    Database(data / "graph.sqlite3").close()
    first = run_cli("drain", env={"REM_DATA_DIR": str(data)})
    assert first.returncode == 0, first.stderr
    return data


@pytest.fixture
def data_and_outside(drained_once: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of ``drained_once`` with :data:`QUEUE` queued, and a folder outside it."""
    data, outside = tmp_path / "data", tmp_path / "outside"
    outside.mkdir()
    shutil.copytree(drained_once, data)
    (data / "lazy-edges.jsonl").write_bytes(QUEUE)
    return data, outside


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ("lazy-edges.jsonl.requeue-pending", "drain"),
        ("lazy-edges.jsonl.dead-pending", "drain"),
        ("lazy-edges.jsonl.publishing.tmp", "drain"),
        ("lazy-edges.dead.jsonl", "drain"),
        ("lazy-edges.jsonl.lock", "drain"),
        ("graph.sqlite3-wal", "drain"),
        ("graph.sqlite3", "drain"),
        ("rem-cycle.lock", "--once"),
    ],
)
def test_a_link_planted_at_any_file_rem_cycle_writes_is_refused(data_and_outside: tuple[Path, Path], name: str, command: str) -> None:
    data, outside = data_and_outside
    victim = outside / "victim.txt"
    victim.write_bytes(VICTIM)
    planted = data / name
    planted.unlink(missing_ok=True)
    planted.symlink_to(victim)
    result = run_cli(command, env={"REM_DATA_DIR": str(data)})
    assert victim.read_bytes() == VICTIM, result.stderr
    assert planted.is_symlink()
    assert result.returncode == 1, result.stdout + result.stderr
    message = result.stderr.strip().splitlines()
    assert len(message) == 1 and "symbolic link" in message[0] and name in message[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_hard_link_or_a_fifo_is_refused_too(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_bytes(VICTIM)
    os.link(victim, data / "scratch")
    with pytest.raises(UnsafePathError, match="hard links"):
        open_confined(data / "scratch", os.O_WRONLY | os.O_TRUNC, root=data)
    os.mkfifo(data / "fifo")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        open_confined(data / "fifo", os.O_WRONLY | os.O_CREAT, root=data)
    (data / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_confined(data / "sub" / "new.txt", os.O_WRONLY | os.O_CREAT, root=data)
    with pytest.raises(UnsafePathError, match="not inside the data dir"):
        open_confined(outside / "new.txt", os.O_WRONLY | os.O_CREAT, root=data)
    assert victim.read_bytes() == VICTIM and sorted(p.name for p in outside.iterdir()) == ["victim.txt"]


def test_a_dead_letter_file_without_a_final_newline_keeps_every_record(data_and_outside: tuple[Path, Path]) -> None:
    # Edited by hand (or copied) without the last newline: the drain appends after it, cuts nothing.
    data, _ = data_and_outside
    dead = data / "lazy-edges.dead.jsonl"
    edited = b'{"reason":"malformed-json","line":"kept-1"}\n{"reason":"malformed-json","line":"kept-2"}'
    dead.write_bytes(edited)
    result = run_cli("drain", "--json", env={"REM_DATA_DIR": str(data)})
    assert result.returncode in (0, 1), result.stderr
    content = dead.read_bytes()
    assert content.startswith(edited + b"\n"), content
    records = [json.loads(line) for line in content.splitlines()]
    assert [r["line"] for r in records] == ["kept-1", "kept-2", '{"broken']


def _publish(queue: LazyEdgeQueue, dead_lines: list[bytes]) -> Path:
    queue.append([{"source": "CONCEPT:a", "target": "memory:m", "relationship": "R"}])
    rotated = queue.rotate()
    assert rotated is not None
    requeue, dead = queue.open_scratch()
    with requeue, dead:
        for line in dead_lines:
            dead.write(line)
    return rotated


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (no ``finally`` of ours cleans up)."""


def test_a_publish_killed_midway_is_cut_back_exactly_to_where_it_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    earlier = b'{"reason":"malformed-json","line":"hand-edited, no newline"}'
    queue.dead_letter_path.write_bytes(earlier)
    records = [json.dumps({"reason": "malformed-json", "line": f"n{i}"}).encode() + b"\n" for i in range(3)]
    rotated = _publish(queue, records)

    def torn_write(fd: int, lines: object) -> None:  # a kill inside the append: a line and a half land
        os.write(fd, b"\n" + records[0] + records[1][:10])
        raise _Killed

    monkeypatch.setattr(lazy_queue, "_write_whole_lines", torn_write)
    with pytest.raises(_Killed):
        queue.commit_drain([rotated])
    monkeypatch.undo()
    assert queue.publish_marker_path.exists() and rotated.exists()

    # The next drain: the marker proves which bytes this publish wrote; exactly those go.
    assert queue.recover_publish() == "dead-letters-rolled-back"
    assert queue.dead_letter_path.read_bytes() == earlier
    assert rotated.exists() and not queue.publish_marker_path.exists()
    _publish(queue, records)  # drained again from its input, published whole
    queue.commit_drain(queue.draining_files())
    lines = queue.dead_letter_path.read_bytes().splitlines()
    assert lines == [earlier, *[r.rstrip(b"\n") for r in records]]


def test_bytes_after_the_recorded_length_that_rem_cycle_did_not_write_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    rotated = _publish(queue, [b'{"reason":"malformed-json","line":"mine"}\n'])

    def killed(fd: int, lines: object) -> None:
        raise _Killed

    monkeypatch.setattr(lazy_queue, "_write_whole_lines", killed)
    with pytest.raises(_Killed):
        queue.commit_drain([rotated])
    monkeypatch.undo()
    # Someone adds a record by hand before the next drain: it is not what the drain was writing.
    queue.dead_letter_path.write_bytes(b'{"reason":"by-hand","line":"theirs"}')
    assert queue.recover_publish() == "dead-letters-kept"
    assert queue.dead_letter_path.read_bytes() == b'{"reason":"by-hand","line":"theirs"}'


def test_a_publish_killed_after_its_outputs_are_out_finishes_without_duplicates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    rotated = _publish(queue, [b'{"reason":"malformed-json","line":"once"}\n'])

    def killed(inputs: object) -> None:
        raise _Killed

    monkeypatch.setattr(queue, "_finish_publish", killed)
    with pytest.raises(_Killed):
        queue.commit_drain([rotated])
    monkeypatch.undo()
    assert rotated.exists()
    assert queue.recover_publish() == "finished"
    assert not rotated.exists() and queue.draining_files() == []
    assert queue.dead_letter_count() == 1



def test_a_link_planted_at_the_embedded_chroma_dir_is_refused(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    outside.mkdir()
    data.mkdir()
    (data / "chroma").symlink_to(outside, target_is_directory=True)
    result = run_cli("--once", env={"REM_DATA_DIR": str(data)})
    assert result.returncode == 1 and "chroma-unavailable" in result.stdout + result.stderr, result.stderr
    assert "symbolic link" in result.stdout + result.stderr
    assert list(outside.iterdir()) == []


def test_a_hard_link_planted_at_the_wal_is_refused(data_and_outside: tuple[Path, Path]) -> None:
    data, outside = data_and_outside
    victim = outside / "victim.txt"
    victim.write_bytes(VICTIM)
    wal = data / "graph.sqlite3-wal"
    wal.unlink(missing_ok=True)
    os.link(victim, wal)
    result = run_cli("drain", env={"REM_DATA_DIR": str(data)})
    assert result.returncode == 1 and "hard links" in result.stderr, result.stderr
    assert victim.read_bytes() == VICTIM
