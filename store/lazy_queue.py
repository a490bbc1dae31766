"""The lazy-edge queue: a JSONL file of edges whose endpoints may not be in the graph yet.

One line per edge (a public interface, documented in README)::

    {"source": "CONCEPT:x", "target": "memory:abc", "relationship": "MENTIONED_IN",
     "weight": 1.0, "properties": {...}, "timestamp": "2026-11-29T10:00:00.000Z"}

Files next to the queue ``Q`` (default ``<data_dir>/lazy-edges.jsonl``):

- ``Q.draining`` (and ``Q.draining-N`` after repeated crashes): what a drain is working on;
- ``Q.requeue-pending`` / ``Q.dead-pending``: a drain's scratch output, discarded after a crash;
- ``<stem>.dead.jsonl``: the dead-letter file (lines that will never link, with the reason);
- ``Q.lock``: the drain's single-flight lock.

Append protocol (any producer, any process): open ``Q`` with ``O_APPEND``, take a *shared*
``flock``, check the descriptor still is ``Q`` (a drain may have renamed it meanwhile; if so,
reopen), write whole lines, close. A drain renames ``Q`` and then takes an *exclusive* ``flock``
on the renamed file, so it starts reading only after every in-flight append has landed. Each
``write`` carries whole lines only, so concurrent appends never interleave inside a line. A writer
killed inside a large ``write`` can leave the head of a line without its newline; the next append
starts with a newline then, so the fragment stays a line of its own (dead-lettered as malformed)
and never swallows the good line written after it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from filelock import FileLock, Timeout

from store.graph import utc_now

# Appends are written in pieces of about this size, each made of whole lines.
_WRITE_CHUNK = 256 * 1024
# The longest line a reader takes in (an edge with generous properties is a few KiB). A longer
# line is skipped in pieces, never held in memory whole, and surfaces as an OversizedLine.
MAX_LINE_BYTES = 1024 * 1024
_READ_PIECE = 64 * 1024
OVERSIZED_HEAD_BYTES = 1024


class OversizedLine(bytes):
    """A line longer than :data:`MAX_LINE_BYTES`: the value is its first
    :data:`OVERSIZED_HEAD_BYTES` bytes, ``size`` its full length in bytes (newline excluded)."""

    size: int

    def __new__(cls, head: bytes, size: int) -> "OversizedLine":
        line = super().__new__(cls, head)
        line.size = size
        return line


class QueueBusyError(RuntimeError):
    """Another drain holds the queue's single-flight lock."""


class UnsafeQueuePathError(OSError):
    """A queue file is a symbolic link: following it could read or write outside the data dir."""


def _open(path: Path, flags: int, mode: int = 0o640) -> int:
    """``os.open`` that refuses to follow a symbolic link in the last component: the settings
    check that the queue lies inside the data dir, and a link planted later must not undo that."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeQueuePathError(
                errno.ELOOP, f"{path} is a symbolic link; the lazy-edge queue refuses to follow it"
            ) from None
        raise


def edge_line(edge: Mapping[str, Any], *, timestamp: str | None = None) -> bytes:
    """One queue line (with trailing newline) for ``edge``; every field of ``edge`` is kept and a
    ``timestamp`` is added when missing."""
    record = dict(edge)
    record.setdefault("timestamp", timestamp or utc_now())
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode("utf-8")


class LazyEdgeQueue:
    """The queue file at ``path`` and the files a drain keeps beside it (see the module doc).

    This class moves bytes and files; what a line means is decided in ``pipelines.drain``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    # --- file names ----------------------------------------------------------------------
    @property
    def draining_path(self) -> Path:
        """Where the live queue is renamed to while a drain works on it."""
        return self.path.with_name(self.path.name + ".draining")

    @property
    def dead_letter_path(self) -> Path:
        """The dead-letter JSONL file: ``lazy-edges.jsonl`` → ``lazy-edges.dead.jsonl``."""
        suffix = self.path.suffix or ".jsonl"
        return self.path.with_name(self.path.stem + ".dead" + suffix)

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @property
    def requeue_pending_path(self) -> Path:
        return self.path.with_name(self.path.name + ".requeue-pending")

    @property
    def dead_pending_path(self) -> Path:
        return self.path.with_name(self.path.name + ".dead-pending")

    def draining_files(self) -> list[Path]:
        """Files a crashed drain left behind, oldest first: ``Q.draining``, ``Q.draining-1`` …"""
        found = []
        prefix = self.draining_path.name + "-"
        if self.path.parent.is_dir():
            for entry in self.path.parent.iterdir():
                if entry.name.startswith(prefix) and entry.name[len(prefix) :].isdigit():
                    found.append((int(entry.name[len(prefix) :]), entry))
        ordered = [entry for _, entry in sorted(found)]
        return [self.draining_path, *ordered] if self.draining_path.exists() else ordered

    # --- producers -----------------------------------------------------------------------
    def append(self, edges: Iterable[Mapping[str, Any]], *, fsync: bool = True) -> int:
        """Append one line per edge; returns the number of lines written."""
        lines = [edge_line(edge) for edge in edges]
        if lines:
            self.append_lines(lines, fsync=fsync)
        return len(lines)

    def append_lines(self, lines: Iterable[bytes], *, fsync: bool = True) -> None:
        """Append ready-made lines (each ending in ``\\n``) following the append protocol."""
        with self._open_live() as fd:
            _write_whole_lines(fd, lines)
            if fsync:
                os.fsync(fd)

    def append_file(self, source: Path, *, fsync: bool = True) -> None:
        """Append the whole content of ``source`` (a file of complete lines) to the live queue."""
        with os.fdopen(_open(source, os.O_RDONLY), "rb") as handle, self._open_live() as fd:
            _write_whole_lines(fd, handle)
            if fsync:
                os.fsync(fd)

    @contextmanager
    def _open_live(self) -> Iterator[int]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = _open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                if _same_file(fd, self.path):
                    yield fd
                    return
            finally:
                os.close(fd)  # also releases the flock
            # A drain renamed the file between our open and our lock: append to the fresh queue.

    # --- the drain's side ----------------------------------------------------------------
    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the single-flight drain lock, or raise :class:`QueueBusyError` at once."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.lock_path)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise QueueBusyError(f"another drain of {self.path} is running (lock {self.lock_path})") from None
        try:
            yield
        finally:
            lock.release()

    def rotate(self) -> Path | None:
        """Rename the live queue to a free ``.draining`` name and wait for in-flight appends to it;
        ``None`` when there is no live queue. Producers appending afterwards create a fresh file."""
        if self.path.is_symlink():
            _open(self.path, os.O_RDONLY)  # raises UnsafeQueuePathError before anything moves
        target = self.draining_path
        number = 0
        while target.exists():
            number += 1
            target = self.path.with_name(f"{self.draining_path.name}-{number}")
        try:
            os.rename(self.path, target)
        except FileNotFoundError:
            return None
        _fsync_dir(self.path.parent)
        fd = _open(target, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # returns once every producer holding LOCK_SH is done
        finally:
            os.close(fd)
        return target

    @staticmethod
    def read_lines(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
        """The non-blank lines of ``path`` (with their newline, if any), streamed. A line longer
        than ``max_line_bytes`` is read past in pieces and yielded as an :class:`OversizedLine`
        (its head and size), so memory stays bounded whatever a producer wrote."""
        with os.fdopen(_open(path, os.O_RDONLY), "rb") as handle:
            while True:
                line = handle.readline(max_line_bytes + 1)
                if not line:
                    return
                if len(line) > max_line_bytes and not line.endswith(b"\n"):
                    size = len(line)
                    head = line[:OVERSIZED_HEAD_BYTES]
                    del line
                    while True:
                        piece = handle.readline(_READ_PIECE)
                        size += len(piece)
                        if not piece or piece.endswith(b"\n"):
                            break
                    yield OversizedLine(head, size - (1 if piece.endswith(b"\n") else 0))
                elif line.strip():
                    yield line

    def open_scratch(self) -> tuple[IO[bytes], IO[bytes]]:
        """Fresh (requeue, dead-letter) scratch files for a drain, truncating leftovers of a crash."""
        return self.requeue_pending_path.open("wb"), self.dead_pending_path.open("wb")

    def commit_drain(self, inputs: Iterable[Path]) -> None:
        """Publish a finished drain: dead letters to the dead-letter file, failures back to the live
        queue, then delete the drained files and the scratch files.

        A crash before this leaves the inputs in place (they are drained again: no line is lost).
        A crash inside it may re-queue a failed line twice (replaying a line is idempotent), or leave
        the head of one, which the next drain dead-letters as malformed beside the whole line. A
        head left in the dead-letter file is dropped by the next publish, which writes it whole.
        """
        if self.dead_pending_path.stat().st_size:
            fd = _open(self.dead_letter_path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                # Only a drain writes here (under the drain lock), and a drain killed mid-write
                # re-publishes its dead letters whole: the head it left is a duplicate, drop it.
                _drop_torn_tail(fd)
                with self.dead_pending_path.open("rb") as src:
                    _write_whole_lines(fd, src)
                os.fsync(fd)
            finally:
                os.close(fd)
        if self.requeue_pending_path.stat().st_size:
            self.append_file(self.requeue_pending_path)
        for path in inputs:
            path.unlink(missing_ok=True)
        _fsync_dir(self.path.parent)
        self.discard_scratch()

    def discard_scratch(self) -> None:
        self.requeue_pending_path.unlink(missing_ok=True)
        self.dead_pending_path.unlink(missing_ok=True)

    # --- reporting -----------------------------------------------------------------------
    def depth(self) -> int:
        """Lines waiting in the live queue (not counting ``.draining`` files)."""
        return _count_lines(self.path)

    def draining_depth(self) -> int:
        """Lines in ``.draining`` files (a drain in progress, or one that crashed)."""
        return sum(_count_lines(path) for path in self.draining_files())

    def dead_letter_count(self) -> int:
        """Lines in the dead-letter file."""
        return _count_lines(self.dead_letter_path)


def _count_lines(path: Path) -> int:
    try:
        return sum(1 for _ in LazyEdgeQueue.read_lines(path))
    except FileNotFoundError:
        return 0


def _same_file(fd: int, path: Path) -> bool:
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (current.st_dev, current.st_ino)


def _write_whole_lines(fd: int, lines: Iterable[bytes]) -> None:
    """Append ``lines`` to the file open (read-write, ``O_APPEND``) on ``fd`` with as few ``write``
    calls as possible, each carrying whole lines only — after a newline of its own when the file
    ends inside a line (a writer killed mid-``write``)."""
    buffer: list[bytes] = [b"\n"] if _ends_mid_line(fd) else []
    size = len(buffer)
    for line in lines:
        if not line.endswith(b"\n"):
            line += b"\n"  # a torn last line of a crashed writer must not glue onto the next one
        buffer.append(line)
        size += len(line)
        if size >= _WRITE_CHUNK:
            _write_all(fd, b"".join(buffer))
            buffer, size = [], 0
    if buffer:
        _write_all(fd, b"".join(buffer))


def _ends_mid_line(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _drop_torn_tail(fd: int) -> None:
    """Truncate the file open on ``fd`` after its last newline (nothing when it ends in one)."""
    end = os.fstat(fd).st_size
    if not _ends_mid_line(fd):
        return
    while end > 0:
        start = max(0, end - _READ_PIECE)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline != -1:
            os.ftruncate(fd, start + newline + 1)
            return
        end = start
    os.ftruncate(fd, 0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
