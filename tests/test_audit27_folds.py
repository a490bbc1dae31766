"""The twenty-sixth session's kept counts, attacked (audit27): the dead-letter count kept across
scrapes (:class:`store.lazy_queue.DeadLetterCounter`) when a forget's blanked copy of the file is
given the inode number of the file the count last saw. Real files on the test's file system."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from store.lazy_queue import DeadLetterCounter, LazyEdgeQueue


def dead_letter(number: int) -> bytes:
    """A dead-letter record of about 400 bytes (what a drain writes: the line, the reason, when)."""
    line = json.dumps({"source": f"CONCEPT:c{number}", "target": "memory:gone", "relationship": "MENTIONED_IN", "p": "x" * 250})
    return (json.dumps({"line": line, "reason": "missing-endpoint", "n": number, "at": "2026-12-04T07:00:00.000Z"}) + "\n").encode()


def drain_dead_letters(queue: LazyEdgeQueue, records: list[bytes]) -> None:
    """Publish ``records`` to the dead-letter file as a drain does (its scratch file, ``commit_drain``)."""
    requeue, dead = queue.open_scratch()
    requeue.close()
    with dead:
        dead.write(b"".join(records))
    with queue.exclusive():
        queue.commit_drain([])


def forget(queue: LazyEdgeQueue, number: int) -> None:
    """Blank dead letter ``number`` as ``rem-cycle forget`` does (``LazyEdgeQueue.blank``)."""
    with queue.exclusive():
        assert queue.blank(lambda _: False, lambda body: json.loads(body)["n"] == number) == 1


def put_back_under(queue: LazyEdgeQueue, kept: Path) -> None:
    """Give the dead-letter file's content (a forget's blanked copy) the inode number of ``kept``,
    the file a count saw, moved aside before the forget: what ext4 does at once by handing the
    number freed out again, done here on any file system. ``kept`` is written in place and renamed
    back, so the file at the path is that number again and holds the blanked copy's bytes."""
    copy = queue.dead_letter_path.read_bytes()
    with kept.open("r+b") as handle:
        handle.write(copy)
        handle.truncate()
    os.replace(kept, queue.dead_letter_path)


def test_a_dead_letter_file_replaced_under_the_inode_number_it_was_counted_at_is_counted_anew(tmp_path: Path) -> None:
    """Each forget replaces the dead-letter file by a blanked copy, a new file; a file system that
    hands a freed inode number out again (ext4 does at once) gives the copy of a second forget the
    number of the file a scrape counted. A drain's append then leaves it grown and unchanged just
    before the counted end (the records blanked are well inside), which the count read as an append:
    it went on counting the records forgotten since (on ``main`` 8bba9ad: ``8 != 6``). The number is
    given back by the test (:func:`put_back_under`), not waited for: the test skipped about one run
    in six when the file system gave no copy that number (la33ops)."""
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    drain_dead_letters(queue, [dead_letter(n) for n in range(8)])
    forget(queue, 0)
    counter = DeadLetterCounter(queue)
    assert counter.count() == queue.dead_letter_count() == 7
    counted = tmp_path / "counted"
    counted_at = os.stat(queue.dead_letter_path).st_ino
    os.rename(queue.dead_letter_path, counted)  # kept, so its number is not freed …
    shutil.copyfile(counted, queue.dead_letter_path)  # … and a copy stands for it, for the forgets to replace
    for number in (1, 2):  # forgets between two scrapes
        forget(queue, number)
    put_back_under(queue, counted)
    assert os.stat(queue.dead_letter_path).st_ino == counted_at
    drain_dead_letters(queue, [dead_letter(9)])
    assert counter.count() == queue.dead_letter_count() == 5 + 1
