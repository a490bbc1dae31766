"""The dead-letter count a scrape reports reads only what was appended since it last counted, and
stays the file's record count whatever happens to the file (drainleft)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from store.lazy_queue import DeadLetterCounter, LazyEdgeQueue


def record(n: int) -> bytes:
    return (json.dumps({"reason": "max-attempts", "detail": "chroma-row-not-found: memory:x", "attempts": 5,
                        "deadLetteredAt": "2026-11-29T10:00:00.000Z", "line": f'{{"n": {n}}}'}) + "\n").encode()


def bytes_read() -> int:
    """Bytes this process has read through ``read`` calls (the kernel's own count)."""
    return int(next(line for line in Path("/proc/self/io").read_text().splitlines() if line.startswith("rchar:")).split()[1])


def test_a_count_after_an_append_reads_the_appended_records_only(tmp_path: Path) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    dead = queue.dead_letter_path
    dead.write_bytes(b"".join(record(n) for n in range(40_000)))  # about 8 MiB of history
    counter = DeadLetterCounter(queue)
    assert counter.count() == 40_000
    with dead.open("ab") as out:
        out.write(record(40_000) + record(40_001))  # what a drain publishes
    before = bytes_read()
    assert counter.count() == 40_002
    # Before: the whole file was read again after every change (8 MiB here, growing with history).
    assert bytes_read() - before < 64 * 1024, bytes_read() - before
    before = bytes_read()
    assert counter.count() == 40_002
    assert bytes_read() - before < 1024  # unchanged: a stat, nothing read


def test_the_count_follows_every_change_rem_cycle_or_an_operator_makes(tmp_path: Path) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    dead = queue.dead_letter_path
    counter = DeadLetterCounter(queue)

    def agrees(expected: int) -> None:
        assert (counter.count(), queue.dead_letter_count()) == (expected, expected)

    agrees(0)  # no file yet
    dead.write_bytes(b"")
    agrees(0)
    dead.write_bytes(record(0) + record(1))
    agrees(2)
    with dead.open("ab") as out:
        out.write(record(2)[:30])  # a record whose newline is not written yet (a drain killed mid-append)
    agrees(3)
    with dead.open("ab") as out:
        out.write(record(2)[30:] + b"\n   \n" + record(3))  # finished; a blank line is no record
    agrees(4)
    size = dead.stat().st_size
    os.truncate(dead, size - len(record(3)))  # a drain's recovery undoing its append
    agrees(3)
    with dead.open("r+b") as out:  # cut back and written again past where it was counted
        out.truncate(len(record(0)))
        out.seek(0, os.SEEK_END)
        out.write(record(7) + record(8) + record(9) + b"\n\n\n\n")
    agrees(4)
    replaced = tmp_path / "other"
    replaced.write_bytes(record(0))
    os.replace(replaced, dead)  # another file at the path (restored from a backup)
    agrees(1)
    dead.unlink()
    agrees(0)
