"""A drain killed inside its re-queue append leaves the head of a line in the live queue.

The next drain must not dead-letter that head as malformed: the line it began is re-queued whole
when the drain's inputs are drained again. (CI saw this once in the SIGKILL matrix: a ghost edge's
head in the dead-letter file.) The kill is simulated inside ``_write_whole_lines`` (an exception
nothing of ours catches, so no cleanup of ours runs), as in ``test_confinement``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from store import lazy_queue
from store.lazy_queue import LazyEdgeQueue
from tests.lazy_fixtures import add_concepts, drain, queue_of, read_jsonl
from worker.cycle import Stores

GHOSTS = 12


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


def _tear_appends_to(queue: LazyEdgeQueue, monkeypatch: pytest.MonkeyPatch, *, keep: int) -> None:
    """The next append to the live queue writes ``keep`` whole lines and half of the next one,
    then the process 'dies'."""
    whole = lazy_queue._write_whole_lines

    def torn(fd: int, lines: Any) -> None:
        if not lazy_queue._same_file(fd, queue.path):
            return whole(fd, lines)
        lines = list(lines)
        os.write(fd, b"".join(lines[:keep]) + lines[keep][: len(lines[keep]) // 2])
        raise _Killed

    monkeypatch.setattr(lazy_queue, "_write_whole_lines", torn)


async def _drain_killed_in_its_requeue(settings: Settings, stores: Stores, monkeypatch: pytest.MonkeyPatch, *,
                                       keep: int) -> LazyEdgeQueue:
    """Queue edges to nodes that do not exist and drain them; the drain 'dies' inside its re-queue
    append after ``keep`` whole lines and half of the next."""
    add_concepts(stores.graph, "known")
    queue = queue_of(settings)
    queue.append(_ghost_edges())
    _tear_appends_to(queue, monkeypatch, keep=keep)
    with pytest.raises(_Killed):
        await drain(settings, stores)
    monkeypatch.undo()
    return queue


def _ghost_edges() -> list[dict[str, Any]]:
    return [{"source": "CONCEPT:known", "target": f"CONCEPT:ghost-{i}", "relationship": "RELATES_TO"} for i in range(GHOSTS)]


def _keys(path: Path) -> set[tuple[str, str]]:
    return {(r["source"], r["target"]) for r in read_jsonl(path)}


async def test_a_drain_killed_inside_its_requeue_append_dead_letters_nothing(
    settings: Settings, stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = await _drain_killed_in_its_requeue(settings, stores, monkeypatch, keep=3)
    fragment = [line for line in queue.path.read_bytes().splitlines() if line.strip()][-1]
    with pytest.raises(ValueError):
        json.loads(fragment)  # the kill really left a head without its tail

    # A producer appends before the next drain: its line lands after the fragment, whole.
    queue.append([{"source": "CONCEPT:known", "target": "CONCEPT:late", "relationship": "RELATES_TO"}])
    stats = await drain(settings, stores)
    assert stats.dead_lettered == 0 and not queue.dead_letter_path.exists()
    expected = {("CONCEPT:known", f"CONCEPT:ghost-{i}") for i in range(GHOSTS)} | {("CONCEPT:known", "CONCEPT:late")}
    assert _keys(queue.path) == expected  # every line still queued; the 3 whole ones twice is harmless
    assert queue.draining_files() == [] and not queue.publish_marker_path.exists()


async def test_the_recovery_says_what_it_blanked_and_keeps_a_producers_own_fragment(
    settings: Settings, stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = await _drain_killed_in_its_requeue(settings, stores, monkeypatch, keep=0)
    # A producer killed mid-write after the drain's kill: its fragment is not the drain's to judge.
    with open(queue.path, "ab") as handle:
        handle.write(b'\n{"source": "CONCEPT:known", "tar')
    with queue.exclusive():
        assert queue.recover_publish() == "publish-interrupted, torn-requeue-line-blanked"
    lines = [line for line in queue.path.read_bytes().splitlines() if line.strip()]
    assert lines == [b'{"source": "CONCEPT:known", "tar']  # only the drain's head was blanked

    stats = await drain(settings, stores)
    assert stats.skipped_malformed == 1  # the producer's fragment, dead-lettered as before
    dead = read_jsonl(queue.dead_letter_path)
    assert [d["line"] for d in dead] == ['{"source": "CONCEPT:known", "tar']
    assert _keys(queue.path) == {("CONCEPT:known", f"CONCEPT:ghost-{i}") for i in range(GHOSTS)}

