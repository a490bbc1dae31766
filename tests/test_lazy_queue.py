"""The queue file itself: line format, append protocol, rotation, scratch/commit files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store.lazy_queue import LazyEdgeQueue, QueueBusyError, edge_line
from tests.conftest import ROOT

EDGE = {"source": "CONCEPT:a", "target": "memory:m1", "relationship": "MENTIONED_IN"}


def test_edge_line_keeps_every_field_and_adds_timestamp() -> None:
    line = edge_line({**EDGE, "justification": "because", "weight": 0.5}, timestamp="2026-11-29T10:00:00.000Z")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    record = json.loads(line)
    assert record == {**EDGE, "justification": "because", "weight": 0.5, "timestamp": "2026-11-29T10:00:00.000Z"}
    # A producer's own timestamp wins.
    assert json.loads(edge_line({**EDGE, "timestamp": "x"}))["timestamp"] == "x"


def test_append_depth_and_file_names(tmp_path: Path) -> None:
    queue = LazyEdgeQueue(tmp_path / "q" / "lazy-edges.jsonl")
    assert queue.depth() == 0 and queue.dead_letter_count() == 0
    assert queue.append([EDGE, {**EDGE, "target": "memory:m2"}]) == 2
    assert queue.append([]) == 0
    assert queue.depth() == 2
    assert queue.dead_letter_path.name == "lazy-edges.dead.jsonl"
    assert queue.draining_path.name == "lazy-edges.jsonl.draining"


def test_rotate_and_draining_files(tmp_path: Path) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    assert queue.rotate() is None
    queue.append([EDGE])
    first = queue.rotate()
    assert first == queue.draining_path and not queue.path.exists()
    queue.append([EDGE, EDGE])  # a producer after the rename creates a fresh queue
    second = queue.rotate()
    assert second is not None and second.name == "lazy-edges.jsonl.draining-1"
    assert queue.draining_files() == [first, second]
    assert queue.draining_depth() == 3 and queue.depth() == 0


def test_commit_publishes_scratch_and_removes_inputs(tmp_path: Path) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    queue.append([EDGE])
    rotated = queue.rotate()
    assert rotated is not None
    queue.append([{**EDGE, "target": "memory:new"}])
    requeue, dead = queue.open_scratch()
    with requeue, dead:
        requeue.write(edge_line({**EDGE, "attempts": 1}))
        dead.write(b'{"reason":"malformed-json","line":"x"}\n')
    queue.commit_drain([rotated])
    assert not rotated.exists()
    assert not queue.requeue_pending_path.exists() and not queue.dead_pending_path.exists()
    live = [json.loads(line) for line in queue.path.read_bytes().splitlines()]
    assert [r["target"] for r in live] == ["memory:new", "memory:m1"]
    assert queue.dead_letter_count() == 1


def test_a_torn_line_never_swallows_the_next_append(tmp_path: Path) -> None:
    # A writer killed inside a large write() leaves the head of a line and no newline (Linux cuts a
    # write short at a page when SIGKILL arrives). The next append must not glue onto it.
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    queue.append([EDGE])
    torn = edge_line({**EDGE, "target": "memory:torn"})[:30]
    with queue.path.open("ab") as handle:
        handle.write(torn)
    queue.append([{**EDGE, "target": "memory:after"}])
    lines = list(LazyEdgeQueue.read_lines(queue.path))
    assert lines[1] == torn + b"\n"  # the fragment is a line of its own (a malformed one)
    assert json.loads(lines[2])["target"] == "memory:after"  # the good line is whole


def test_exclusive_is_single_flight(tmp_path: Path) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    with queue.exclusive():
        with pytest.raises(QueueBusyError):
            with queue.exclusive():
                pass
    with queue.exclusive():
        pass


PRODUCER = """
import sys
from store.lazy_queue import LazyEdgeQueue
queue = LazyEdgeQueue(sys.argv[1])
name, count = sys.argv[2], int(sys.argv[3])
for i in range(count):
    queue.append([{"source": f"CONCEPT:{name}", "target": f"memory:{name}-{i}", "relationship": "MENTIONED_IN",
                   "properties": {"pad": "x" * (i % 300)}}], fsync=False)
"""


def test_concurrent_producers_and_rotation_lose_nothing(tmp_path: Path) -> None:
    """Producer processes append while this process keeps renaming the queue away and consuming
    the renamed files: every line arrives exactly once, whole."""
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    producers = [
        subprocess.Popen([sys.executable, "-c", PRODUCER, str(queue.path), f"p{n}", "400"], env=env)
        for n in range(3)
    ]
    seen: list[bytes] = []

    def consume() -> None:
        rotated = queue.rotate()
        if rotated is not None:
            seen.extend(LazyEdgeQueue.read_lines(rotated))
            rotated.unlink()

    while any(p.poll() is None for p in producers):
        consume()
        time.sleep(0.002)
    consume()
    assert all(p.returncode == 0 for p in producers)
    records = [json.loads(line) for line in seen]
    targets = sorted(r["target"] for r in records)
    assert len(targets) == 1200
    assert targets == sorted(f"memory:p{n}-{i}" for n in range(3) for i in range(400))


def test_blank_overwrites_the_picked_lines_in_place_and_a_kept_count_sees_it(tmp_path: Path) -> None:
    # A forget blanks its own lines (store.lazy_queue.LazyEdgeQueue.blank): no other byte moves, and
    # a dead-letter count a long-lived process keeps is taken anew although the size is the same.
    from store.lazy_queue import DeadLetterCounter

    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    queue.append([{"source": "a", "target": "memory:gone", "relationship": "R"}, {"source": "b", "target": "memory:kept", "relationship": "R"}])
    # the kept record long enough that the blanked one is not among the bytes a count checks at its end
    records = [json.dumps({"reason": "max-attempts", "detail": "x" * 400 * (t == "kept"), "line": f'{{"target": "memory:{t}"}}'}) + "\n"
               for t in ("gone", "kept")]
    queue.dead_letter_path.write_text("".join(records))
    hour_ago = time.time_ns() - 3600 * 10**9  # written a while before: the blank's mtime differs from it
    os.utime(queue.dead_letter_path, ns=(hour_ago, hour_ago))
    counter = DeadLetterCounter(queue)
    assert counter.count() == 2
    sizes = (queue.path.stat().st_size, queue.dead_letter_path.stat().st_size)
    with queue.exclusive():
        assert queue.blank(lambda line: b"memory:gone" in line, lambda record: b"memory:gone" in record) == 2
    assert (queue.path.stat().st_size, queue.dead_letter_path.stat().st_size) == sizes
    assert [json.loads(line)["source"] for line in queue.read_lines(queue.path)] == ["b"]
    assert b"gone" not in queue.path.read_bytes() + queue.dead_letter_path.read_bytes()
    assert counter.count() == 1 and queue.dead_letter_count() == 1


def test_a_kept_count_sees_a_blank_when_the_file_grew_before_it_counts_again(tmp_path: Path) -> None:
    """Found by forgetqueue, fixed by audit15: a forget blanked a dead letter, then a drain appended
    one before the daemon's next scrape. The file had grown and its last counted bytes were
    unchanged, so ``rem_cycle_dead_letters`` counted on from there: one high per blanked record
    until the daemon restarted."""
    from store.lazy_queue import DeadLetterCounter

    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    records = [json.dumps({"reason": "max-attempts", "detail": "x" * 400 * (t == "kept"), "line": f'{{"target": "memory:{t}"}}'}) + "\n"
               for t in ("gone", "kept")]
    queue.dead_letter_path.write_text("".join(records))
    counter = DeadLetterCounter(queue)
    assert counter.count() == 2
    with queue.exclusive():
        assert queue.blank(lambda line: False, lambda record: b"memory:gone" in record) == 1
    with queue.dead_letter_path.open("a") as dead:  # a drain's next dead letter
        dead.write(json.dumps({"reason": "max-attempts", "detail": "", "line": '{"target": "memory:new"}'}) + "\n")
    assert queue.dead_letter_count() == 2
    assert counter.count() == 2
    # A copy a blank killed before its rename left is removed by the next blank.
    queue.blanking_path.write_text("leftover\n")
    with queue.exclusive():
        assert queue.blank(lambda line: False, lambda record: False) == 0
    assert not queue.blanking_path.exists()
