"""sqlitecommit's full disk, attacked (audit20): the disk the worker's lazy-edge queue FILE lives on
is full while the database still takes writes. That is no session's fault, as a full database disk
is not: the session whose commit queues lines is deferred, charged nothing, and the queue file is
left as it was (no torn line). The file refuses writes past a size through ``RLIMIT_FSIZE`` (the
write returns ``EFBIG``, as ``ENOSPC`` on a full disk; ``SIGXFSZ`` ignored), with the queue file
already at that size and the database's files well under it. Real SQLite file, embedded Chroma,
the heuristic extractor (no model server)."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from config import Settings
from store.lazy_queue import edge_line
from tests.test_extract_cycle import load, session
from tests.test_pgcut_sessions import charged, extract_one, stores_on
from worker.cycle import PHASES, run_cycle

# A turn citing a memory row no session has: the heuristic extractor links it, and the commit
# queues the edge (its source missing) as a lazy edge line.
CITING = ["The RetryPolicy cites memory:legacy-0117. for its backoff.", "More words about RetryPolicy here."]
# The queue file's size before the session's commit: any line appended goes past the limit, while
# the graph database's file and its log stay far under it.
QUEUE_BYTES = 32 * 1024 * 1024


@contextmanager
def files_grow_no_further_than(size: int) -> Iterator[None]:
    """No file of this process may grow past ``size`` bytes in the block (a write past it fails
    with ``EFBIG``, as one to a full disk fails with ``ENOSPC``)."""
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, before)
        signal.signal(signal.SIGXFSZ, handler)


def agent_lines(path: Path, size: int) -> bytes:
    """Fill the queue file ``path`` with an agent's lines, about ``size`` bytes; returns its content."""
    line = edge_line({"source": "memory:agent-1", "target": "memory:agent-2", "relationship": "REFERENCED_BY"})
    content = line * (size // len(line))
    path.write_bytes(content)
    return content


async def test_a_session_whose_queue_lines_find_the_queue_disk_full_is_deferred_charged_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    """Session s1's commit queues a lazy edge line; the queue file's disk is full. The commit is
    rolled back, the session deferred (``outage``) with no attempt charged, and the queue file holds
    exactly what it held; once space is back the next extraction digests it and queues its line.
    Before, the ``OSError`` was the session's failure: an attempt charged per cycle while the disk
    stayed full (``undigestible`` at ``max_session_attempts``), and each attempt left a torn piece
    of its lines in the file (a malformed line for the drain to dead-letter)."""
    with stores_on(settings, timeout=5.0) as stores:
        await load(settings, stores, tmp_path, [session("s1", CITING)])
        assert (await run_cycle(settings, stores=stores, phases=PHASES[:2])).outcome == "completed"  # provider-ready, ingest
        queued = agent_lines(settings.queue_path, QUEUE_BYTES)

        with files_grow_no_further_than(len(queued) + 10):
            outcome = await extract_one(settings, stores)
        assert outcome == "outage"
        assert charged(stores) == ("undigested", 0, 0)
        assert settings.queue_path.read_bytes() == queued

        assert await extract_one(settings, stores) == "digested"
        added = settings.queue_path.read_bytes()[len(queued):]
        assert b'"source":"memory:legacy-0117"' in added, added[:300]
        assert charged(stores) == ("digested", 0, 0)
