"""The lazy-edge queue: a JSONL file of edges whose endpoints may not be in the graph yet.

One line per edge (a public interface, documented in README)::

    {"source": "CONCEPT:x", "target": "memory:abc", "relationship": "MENTIONED_IN",
     "weight": 1.0, "properties": {...}, "timestamp": "2026-11-29T10:00:00.000Z"}

Files next to the queue ``Q`` (default ``<data_dir>/lazy-edges.jsonl``):

- ``Q.draining`` (and ``Q.draining-N`` after repeated crashes): what a drain is working on;
- ``Q.requeue-pending`` / ``Q.dead-pending``: a drain's scratch output, discarded after a crash;
- ``Q.publishing``: present only while a drain publishes its outputs (see ``commit_drain``);
- ``<stem>.dead.jsonl``: the dead-letter file (lines that will never link, with the reason);
- ``Q.lock``: the drain's single-flight lock.
- ``Q.blanked``: replaced after lines of ``Q``, a ``.draining`` file or the dead-letter file were
  blanked, so that a count of their lines kept across reads (the metrics' :func:`fold_file`) starts anew.

Every one of them is opened through :func:`store.confined.open_confined`: a link planted at any
of these names is refused before a byte is read or written.

Append protocol (any producer, any process): open ``Q`` with ``O_APPEND``, take an *exclusive*
``flock``, check the descriptor still is ``Q`` (a drain may have renamed it meanwhile; if so,
reopen), write whole lines — after a newline of its own when ``Q`` ends inside a line — unlock,
close. A drain renames ``Q`` and then takes an exclusive ``flock`` on the renamed file, so it
starts reading only after every in-flight append has landed. Each ``write`` carries whole lines
only, so appends never interleave inside a line. A writer killed inside a large ``write`` can
leave the head of a line without its newline; the next append starts with a newline then, so the
fragment stays a line of its own (dead-lettered as malformed) and never swallows the good line
written after it. The lock is exclusive so that looking at the file's end and writing are one
step: under a shared lock a producer killed between another's look and its write glued the
other's first line to its fragment (both dead-lettered). The lock is released before ``fsync``,
so producers wait for each other's writes only, not for each other's disk flushes. A drain's own fragment (a kill inside its
re-queue append) is blanked by the next drain's recovery instead: its whole line is re-queued.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from store.claims import lock_holder_line
from store.confined import check_confined, exclusive_lock, lock_holder, open_confined
from store.durable import fsync_dir
from store.errors import QueueFullError
from store.graph import utc_now
from store.library_log import get_logger

log = get_logger(__name__)

# Appends are written in pieces of about this size, each made of whole lines.
_WRITE_CHUNK = 256 * 1024
# A write refused for want of space: the disk full, a quota, a file size limit (RLIMIT_FSIZE).
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# The longest line a reader takes in (an edge with generous properties is a few KiB). A longer
# line is skipped in pieces, never held in memory whole, and surfaces as an OversizedLine.
MAX_LINE_BYTES = 1024 * 1024
_READ_PIECE = 64 * 1024
# What a blank copies of the dead-letter file at a time.
_COPY_PIECE = 1 << 20
OVERSIZED_HEAD_BYTES = 1024


class OversizedLine(bytes):
    """A line longer than :data:`MAX_LINE_BYTES`: the value is its first
    :data:`OVERSIZED_HEAD_BYTES` bytes, ``size`` its full length in bytes (newline excluded),
    ``blank`` whether every byte of it is white space (a blanked record: no record)."""

    size: int
    blank: bool

    def __new__(cls, head: bytes, size: int, *, blank: bool = False) -> "OversizedLine":
        line = super().__new__(cls, head)
        line.size, line.blank = size, blank
        return line


class QueueBusyError(RuntimeError):
    """Another drain holds the queue's single-flight lock."""


def edge_line(edge: Mapping[str, Any], *, timestamp: str | None = None) -> bytes:
    """One queue line (with trailing newline) for ``edge``; every field of ``edge`` is kept and a
    ``timestamp`` is added when missing."""
    record = dict(edge)
    record.setdefault("timestamp", timestamp or utc_now())
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode("utf-8")


@dataclass(frozen=True, slots=True)
class LineFilter:
    """Which queue lines a read of the queue table selects for its caller's ``picks`` to decide on
    (the JSONL queue reads every line and ignores it): the lines whose first chunk id
    (``properties.chunk_ids[0]``, as :func:`edge_line` writes it) begins with one of
    ``first_chunk_prefixes`` — sought through an index (store.dialect.Dialect.queue_first_chunk) — and the
    lines that hold one of ``texts`` anywhere, which only a read of every line finds. Empty: none."""

    first_chunk_prefixes: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.first_chunk_prefixes or self.texts)

    def as_texts(self) -> tuple[str, ...]:
        """Every condition as a text such a line holds as :func:`edge_line` writes it (for a read
        that scans anyway): a first chunk id's prefix as ``"chunk_ids":["<prefix>``."""
        return (*(CHUNK_IDS_TEXT + json.dumps(prefix, ensure_ascii=False)[:-1] for prefix in self.first_chunk_prefixes), *self.texts)


# How a line's chunk ids begin, as :func:`edge_line` writes them: every extraction line holds it.
CHUNK_IDS_TEXT = '"chunk_ids":['


class LazyEdgeQueue:
    """The queue file at ``path`` and the files a drain keeps beside it (see the module doc).

    This class moves bytes and files; what a line means is decided in ``pipelines.drain``.
    """

    def __init__(self, path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path)
        # Every file of the queue is opened confined to ``root`` (default: the queue's directory).
        self.root = Path(root) if root is not None else self.path.parent

    def _open(self, path: Path, flags: int) -> int:
        return open_confined(path, flags, root=self.root)

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

    @property
    def publish_marker_path(self) -> Path:
        """Written while a drain publishes its outputs: what to undo or finish after a crash."""
        return self.path.with_name(self.path.name + ".publishing")

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
        """Append ready-made lines (each ending in ``\\n``) following the append protocol. Raises
        :class:`~store.errors.QueueFullError` when the file's disk (or a size limit) is full."""
        with self._open_live() as fd:
            start = os.fstat(fd).st_size
            try:
                _write_whole_lines(fd, lines)
            except OSError as exc:
                # Under the lock: a part written is no line of the append (it failed, and a commit
                # appending is rolled back) but a torn one the drain would dead-letter.
                os.ftruncate(fd, start)
                if exc.errno in _NO_SPACE:
                    raise QueueFullError(exc.errno, f"{exc.strerror}: {self.path}") from exc
                raise
            _unlock_and_sync(fd, fsync=fsync)

    def append_file(self, source: Path, *, fsync: bool = True) -> None:
        """Append the whole content of ``source`` (a file of complete lines) to the live queue."""
        with os.fdopen(self._open(source, os.O_RDONLY), "rb") as handle, self._open_live() as fd:
            _write_whole_lines(fd, handle)
            _unlock_and_sync(fd, fsync=fsync)

    def supersede(self, edges: Sequence[Mapping[str, Any]], *, filters: LineFilter = LineFilter(), picks: Callable[[bytes], bool]) -> int:
        """Append one line per edge, then blank the lines ``picks`` chooses in the live queue and
        the ``.draining`` files (:meth:`blank`; the dead letters stay) but for these new ones —
        when no drain holds the queue: one that does is working on those lines, and the new ones
        stay beside them. Appended first, so a failed append leaves the old lines; a failed
        blank leaves both (logged). ``filters``: unused (the file is read whole). Returns how
        many lines were appended."""
        lines = [edge_line(edge) for edge in edges]
        if not lines:
            return 0
        self.append_lines(lines)
        new = {line[:-1] for line in lines}
        try:
            with self.exclusive():
                self.blank(lambda body: body not in new and picks(body), None)
        except QueueBusyError:
            pass
        except OSError as exc:
            log.warning("queue lines an earlier extraction queued were not superseded: both stay", path=str(self.path), error=str(exc))
        return len(lines)

    @contextmanager
    def _open_live(self) -> Iterator[int]:
        while True:
            fd = self._open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if _same_file(fd, self.path):
                    yield fd
                    return
            finally:
                os.close(fd)  # also releases the flock
            # A drain renamed the file between our open and our lock: append to the fresh queue.

    # --- the drain's side ----------------------------------------------------------------
    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the single-flight drain lock, or raise :class:`QueueBusyError` at once, naming the
        process that holds it as it wrote itself in the lock file (as the cycle's lock does)."""
        with exclusive_lock(self.lock_path, root=self.root, holder=lock_holder_line()) as held:
            if not held:
                running = lock_holder(self.lock_path, root=self.root)
                raise QueueBusyError(f"another drain of {os.path.abspath(self.path)} is running: {running} "
                                     f"(it holds {os.path.abspath(self.lock_path)})")
            yield

    def rotate(self) -> Path | None:
        """Rename the live queue to a free ``.draining`` name and wait for in-flight appends to it;
        ``None`` when there is no live queue. Producers appending afterwards create a fresh file."""
        check_confined(self.path, root=self.root)  # a planted link raises before anything moves
        target = self.draining_path
        number = 0
        while target.exists():
            number += 1
            target = self.path.with_name(f"{self.draining_path.name}-{number}")
        try:
            os.rename(self.path, target)
        except FileNotFoundError:
            return None
        fsync_dir(self.path.parent)
        fd = self._open(target, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # returns once the producer holding the lock is done
        finally:
            os.close(fd)
        return target

    @staticmethod
    def read_lines(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
        """The non-blank lines of ``path`` (with their newline, if any), streamed. A line longer
        than ``max_line_bytes`` is read past in pieces and yielded as an :class:`OversizedLine`
        (its head and size), so memory stays bounded whatever a producer wrote. A link at ``path``
        is refused (:class:`~store.confined.UnsafePathError`)."""
        with os.fdopen(open_confined(path, os.O_RDONLY, root=path.parent), "rb") as handle:
            while True:
                line = handle.readline(max_line_bytes + 1)
                if not line:
                    return
                if len(line) > max_line_bytes and not line.endswith(b"\n"):
                    size, blank = len(line), not line.strip()
                    head = line[:OVERSIZED_HEAD_BYTES]
                    del line
                    while True:
                        piece = handle.readline(_READ_PIECE)
                        size += len(piece)
                        blank = blank and not piece.strip()
                        if not piece or piece.endswith(b"\n"):
                            break
                    yield OversizedLine(head, size - (1 if piece.endswith(b"\n") else 0), blank=blank)
                elif line.strip():
                    yield line

    def open_scratch(self) -> tuple[IO[bytes], IO[bytes]]:
        """Fresh (requeue, dead-letter) scratch files for a drain, truncating leftovers of a crash."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        requeue = os.fdopen(self._open(self.requeue_pending_path, flags), "wb")
        try:
            return requeue, os.fdopen(self._open(self.dead_pending_path, flags), "wb")
        except BaseException:
            requeue.close()
            raise

    def commit_drain(self, inputs: Iterable[Path]) -> None:
        """Publish a finished drain: dead letters to the dead-letter file, failures back to the live
        queue, then delete the drained files and the scratch files.

        A publish marker makes this recoverable (see :meth:`recover_publish`): ``publishing``
        records the dead-letter file's length before the append, ``published`` that every output
        is out and only the inputs are left to delete. A crash before this leaves the inputs in
        place (they are drained again: no line is lost). A crash inside the re-queue append may
        re-queue a failed line twice (replaying a line is idempotent), or leave the head of one;
        ``queueBytes`` in the marker lets the recovery blank that head, which would otherwise be
        dead-lettered as malformed beside the whole line.
        """
        inputs = list(inputs)
        dead, requeue = _size(self.dead_pending_path) > 0, _size(self.requeue_pending_path) > 0
        fd = self._open(self.dead_letter_path, os.O_RDWR | os.O_APPEND | os.O_CREAT) if dead else None
        try:
            if dead or requeue:
                marker: dict[str, Any] = {"state": "publishing"}
                if fd is not None:
                    marker |= {"deadLetterBytes": os.fstat(fd).st_size, "newlineFirst": _ends_mid_line(fd)}
                if requeue:
                    marker["queueBytes"] = _size(self.path)  # where the re-queue append starts
                self._write_marker(marker)
            if fd is not None:
                with os.fdopen(self._open(self.dead_pending_path, os.O_RDONLY), "rb") as src:
                    _write_whole_lines(fd, src)
                os.fsync(fd)
        finally:
            if fd is not None:
                os.close(fd)
        if requeue:
            self.append_file(self.requeue_pending_path)
        self._write_marker({"state": "published", "inputs": [path.name for path in inputs]})
        self._finish_publish(inputs)

    def recover_publish(self) -> str | None:
        """Undo or finish a publish a crash interrupted (call holding :meth:`exclusive`, before
        listing the inputs); returns what was done, ``None`` when there was nothing to recover.

        - ``published``: every output is out; the inputs are deleted (draining them again would
          dead-letter their lines twice).
        - ``publishing``: the inputs are still there and are drained again, so the dead letters
          are published again: the bytes appended after the recorded length are cut — only when
          they are, byte for byte, the start of what the drain was writing (its scratch file).
          Anything else (a file edited since, a scratch file gone) is left as it is. In the live
          queue, which producers append to meanwhile, nothing is cut: a line after the recorded
          length that is not JSON and is the head of a line of the re-queue scratch file (a kill
          inside the re-queue append) is overwritten with spaces, a blank line readers skip. Its
          whole line is re-queued again when the inputs are drained again.
        """
        try:
            with os.fdopen(self._open(self.publish_marker_path, os.O_RDONLY), "rb") as handle:
                marker = json.loads(handle.read(64 * 1024) or b"{}")
        except FileNotFoundError:
            return None
        except ValueError:
            marker = {}
        names = marker.get("inputs") if isinstance(marker, dict) else None
        inputs = [self.path.with_name(name) for name in names or () if isinstance(name, str) and self._is_draining_name(name)]
        state = marker.get("state") if isinstance(marker, dict) else None
        done = "marker-unreadable"
        if state == "published":
            done = "finished"
        elif state == "publishing":
            done = "publish-interrupted"
            if "deadLetterBytes" in marker:
                done = "dead-letters-rolled-back" if self._undo_dead_letter_append(marker) else "dead-letters-kept"
            if "queueBytes" in marker and self._blank_torn_requeue(marker):
                done += ", torn-requeue-line-blanked"
            inputs = []
        self._finish_publish(inputs)
        return done

    def _is_draining_name(self, name: str) -> bool:
        base = self.draining_path.name
        return name == base or (name.startswith(base + "-") and name[len(base) + 1 :].isdigit())

    def _undo_dead_letter_append(self, marker: Mapping[str, Any]) -> bool:
        start = marker.get("deadLetterBytes")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            return False
        try:
            fd = self._open(self.dead_letter_path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            end = os.fstat(fd).st_size
            if end <= start:
                return False
            try:
                pending = os.fdopen(self._open(self.dead_pending_path, os.O_RDONLY), "rb")
            except FileNotFoundError:
                return False
            with pending:
                first = b"\n" if marker.get("newlineFirst") is True else b""
                if not _holds_start_of(fd, start, end, first=first, source=pending):
                    return False
            os.ftruncate(fd, start)
            os.fsync(fd)
            return True
        finally:
            os.close(fd)

    def _blank_torn_requeue(self, marker: Mapping[str, Any]) -> bool:
        start = marker.get("queueBytes")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            return False
        try:
            fd = self._open(self.path, os.O_RDWR)  # not O_APPEND: pwrite must land where it is told
        except FileNotFoundError:
            return False
        try:
            with os.fdopen(os.dup(fd), "rb") as handle:
                suspects = [(at, body) for at, body in _lines_from(handle, start) if not _is_json(body)]
            torn = [(at, body) for at, body in suspects if self._heads_a_requeued_line(body)]
            for at, body in torn:
                os.pwrite(fd, b" " * len(body), at)
            if torn:
                os.fsync(fd)
                self._stamp_blanked()
            return bool(torn)
        finally:
            os.close(fd)

    def _heads_a_requeued_line(self, head: bytes) -> bool:
        try:
            lines = self.read_lines(self.requeue_pending_path)
            return any(len(line.rstrip(b"\n")) > len(head) and line.startswith(head) for line in lines)
        except FileNotFoundError:
            return False

    def _write_marker(self, marker: Mapping[str, Any]) -> None:
        temporary = self.publish_marker_path.with_name(self.publish_marker_path.name + ".tmp")
        fd = self._open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            _write_all(fd, json.dumps(marker).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, self.publish_marker_path)
        fsync_dir(self.path.parent)

    def _finish_publish(self, inputs: Iterable[Path]) -> None:
        for path in inputs:
            path.unlink(missing_ok=True)
        fsync_dir(self.path.parent)
        self.discard_scratch()
        self.publish_marker_path.unlink(missing_ok=True)
        fsync_dir(self.path.parent)

    def blank(self, queued: Callable[[bytes], bool], dead: Callable[[bytes], bool] | None, *, dry_run: bool = False) -> int:
        """Overwrite with spaces, where they are, the lines ``queued`` picks in the live queue and
        the ``.draining`` files and the records ``dead`` picks in the dead-letter file (each gets
        a line without its newline; ``dead`` ``None``: the dead-letter file is not read); returns how many. Readers skip a blank line, and no other
        byte moves, so no line is lost or reordered. The dead-letter file is replaced by such a
        copy of itself (:meth:`_replace_blanked`: a kept count must see it). Call holding
        :meth:`exclusive` (no drain renames or publishes meanwhile): a publish a crash interrupted
        is settled first (its recovery compares bytes this may blank) and a crashed drain's scratch
        files, copies of lines it was working on, are discarded. The live queue is blanked under the producers'
        ``flock``, so an append waits and then lands after it. ``dry_run``: only count them (no
        lock needed), changing nothing."""
        if not dry_run:
            self.recover_publish()
            self.discard_scratch()
        blanked = 0
        dead_letters = () if dead is None else ((self.dead_letter_path, dead),)
        for path, picks in ((self.path, queued), *((p, queued) for p in self.draining_files()), *dead_letters):
            try:
                # not O_APPEND: pwrite must land where it is told
                fd = self._open(path, os.O_RDONLY if dry_run else os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                if not dry_run:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                with os.fdopen(os.dup(fd), "rb") as handle:
                    chosen = [(at, body) for at, body in _lines_from(handle, 0) if body.strip() and picks(body)]
                blanked += len(chosen)
                if dry_run or not chosen:
                    continue
                if path == self.dead_letter_path:
                    self._replace_blanked(fd, path, chosen)
                else:
                    for at, body in chosen:
                        os.pwrite(fd, b" " * len(body), at)
                    os.fsync(fd)
                self._stamp_blanked()
            finally:
                os.close(fd)
        return blanked

    @property
    def blank_stamp_path(self) -> Path:
        """Replaced each time lines of the live queue or a ``.draining`` file are blanked in place,
        and each time the dead-letter file is replaced by its blanked copy."""
        return self.path.with_name(self.path.name + ".blanked")

    def blank_stamp(self) -> FileKey | None:
        """(device, inode, size, mtime ns) of :attr:`blank_stamp_path`, ``None`` before any blank.
        A fold kept across reads of the queue files (worker.metrics) or of the dead-letter file
        (:class:`DeadLetterCounter`) starts anew when it changed: a line blanked in place and then
        an append leave a file grown and unchanged at the end of what was folded, which
        :func:`fold_file` would read as appended to — and so does a dead-letter file replaced by a
        blanked copy that the file system gave the inode number of the file folded (ext4 hands a
        freed number out again at once: a second forget's copy has the first one's file's)."""
        try:
            stat = os.stat(self.blank_stamp_path, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return file_key(stat)

    def _stamp_blanked(self) -> None:
        """Replace the blank stamp by a new file (called after a blank, in place or of the dead-letter
        file by its copy): a new inode while the old one is still there, written now, so its key
        differs from the last one seen — an inode number handed out again comes with a later mtime
        (no ``fsync``: a crash ends the process that kept a fold too). The lines are blanked already: a stamp the
        disk refuses is logged, not raised, and a kept fold may count them until the daemon restarts."""
        temporary = self.blank_stamp_path.with_name(self.blank_stamp_path.name + ".tmp")
        try:
            fd = self._open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                _write_all(fd, str(time.time_ns()).encode("ascii"))
            finally:
                os.close(fd)
            os.rename(temporary, self.blank_stamp_path)
        except OSError as exc:
            log.warning("the queue's blank stamp was not replaced: the metrics may count blanked lines until restart",
                        path=str(self.blank_stamp_path), error=str(exc))

    @property
    def blanking_path(self) -> Path:
        """Where :meth:`blank` writes the dead-letter file's blanked copy before it replaces the file."""
        return self.dead_letter_path.with_name(self.dead_letter_path.name + ".blanking")

    def _replace_blanked(self, fd: int, path: Path, chosen: list[tuple[int, bytes]]) -> None:
        """Replace the file open on ``fd`` at ``path`` by a copy with the ``chosen`` lines blanked
        (every byte else where it was). The dead-letter file gets a new file rather than spaces
        written in place: a long-lived :class:`DeadLetterCounter` counts on from where it left off
        while the file it counted is still there, unchanged before its end, and grew — which a
        record blanked in place, then a drain's append before the next count, left it one high
        (until restarted). A kill leaves the old file or the new one, and at most this copy, which
        the next blank removes."""
        copy = self._open(self.blanking_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            try:
                os.fchmod(copy, os.fstat(fd).st_mode & 0o7777)
                with os.fdopen(os.dup(fd), "rb") as handle:
                    handle.seek(0)
                    while piece := handle.read(_COPY_PIECE):
                        _write_all(copy, piece)
                for at, body in chosen:
                    os.pwrite(copy, b" " * len(body), at)
                os.fsync(copy)
            finally:
                os.close(copy)
        except OSError:
            # A copy cut short (its disk full) holds the records it was to blank, and the space the
            # disk lacks (which the database beside it needs): it goes now, not at the next blank.
            self.blanking_path.unlink(missing_ok=True)
            raise
        os.rename(self.blanking_path, path)
        fsync_dir(path.parent)

    def discard_scratch(self) -> None:
        """Remove the scratch files a drain or a blank killed midway left (copies of lines)."""
        self.requeue_pending_path.unlink(missing_ok=True)
        self.dead_pending_path.unlink(missing_ok=True)
        self.blanking_path.unlink(missing_ok=True)

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


# Bytes of a file just before the end of what a :class:`FoldedFile` folded, kept to see that part is
# still there before only what follows is read (queue lines and dead letters carry their time and
# content, so bytes rewritten there differ from these).
_COUNTED_TAIL_BYTES = 256
_COUNT_PIECE = 1 << 20

S = TypeVar("S")
# (device, inode, size, mtime ns): what tells a file changed without reading it.
FileKey = tuple[int, int, int, int]


def file_key(stat: os.stat_result) -> FileKey:
    """The :data:`FileKey` of a file's ``stat``. Pure."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class LineFold(Generic[S]):
    """A fold over the lines :meth:`LazyEdgeQueue.read_lines` yields for a file (the non-blank lines
    without their newline, a line longer than ``max_line_bytes`` as its :class:`OversizedLine`), in
    file order: ``add(state, line)`` from ``empty``. Folded per file by :func:`fold_file`, which reads
    ``piece_bytes`` at a time whatever the lines' lengths."""

    empty: S
    add: Callable[[S, bytes], S]
    max_line_bytes: int = MAX_LINE_BYTES
    piece_bytes: int = _COUNT_PIECE


@dataclass(frozen=True, slots=True)
class FoldedFile(Generic[S]):
    """What :func:`fold_file` last read of a file: the file (device, inode, size, mtime), how far its
    whole lines go (``end``, just past the last newline), the fold of the lines before ``end``
    (``whole``) and with the line after it, whose newline is not written yet (``value``: what the
    file holds now), and the :data:`_COUNTED_TAIL_BYTES` before ``end``."""

    key: FileKey
    end: int
    whole: S
    value: S
    tail: bytes


def fold_file(path: Path, fold: LineFold[S], last: FoldedFile[S] | None, *, root: Path) -> FoldedFile[S] | None:
    """``fold`` over the lines of ``path`` (``None`` when there is no file), going on from ``last``
    (the previous call's answer for this path, from the same ``fold``) when the file still holds
    what it folded: unchanged, the file costs a ``stat``; grown, only the bytes after the last whole
    line folded are read. Replaced (another inode), cut back below that end, rewritten just before it
    or in place at the same size (a new mtime), it is folded anew. A file at ``path`` otherwise only
    appended to is never read twice; a rewrite well inside the folded part is seen when the file is
    replaced or cut, or when the caller drops ``last``. Read confined to ``root`` (a link refused);
    a line split across the pieces read is folded whole."""
    try:
        stat = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if last is not None and last.key == file_key(stat):
        return last
    try:
        handle = os.fdopen(open_confined(path, os.O_RDONLY, root=root), "rb")
    except FileNotFoundError:  # removed since (a drain's input deleted)
        return None
    with handle:
        # The key of what is read, taken from the file opened: bytes appended meanwhile are read
        # too, and the next call sees the size changed.
        key = file_key(os.fstat(handle.fileno()))
        # The same size with a new mtime: rewritten in place (a forget blanks records), fold anew.
        resized = last is not None and key[2] != last.key[2]
        start = last if resized and _still_folded(handle, last, key) else None
        return _fold_from(handle, start, key, fold)


def _still_folded(handle: IO[bytes], last: FoldedFile[Any], key: FileKey) -> bool:
    """Whether the file open on ``handle`` (now ``key``) still holds what ``last`` folded: the
    same file, no shorter than the folded whole lines, the bytes just before their end unchanged."""
    if key[:2] != last.key[:2] or key[2] < last.end:
        return False
    handle.seek(last.end - len(last.tail))
    return handle.read(len(last.tail)) == last.tail


class _LineSoFar:
    """The line being read across pieces: its first ``bound + 1`` bytes, its length, and whether
    every byte of it is white space — what :meth:`LazyEdgeQueue.read_lines` makes of it, whatever
    its length, without holding more than the bound."""

    __slots__ = ("bound", "held", "size", "blank")

    def __init__(self, bound: int) -> None:
        self.bound, self.held, self.size, self.blank = bound, bytearray(), 0, True

    def extend(self, part: bytes) -> None:
        if len(self.held) <= self.bound:
            self.held += part[: self.bound + 1 - len(self.held)]
        self.size += len(part)
        self.blank = self.blank and not part.strip()

    def line(self) -> bytes | None:
        """The line as :meth:`LazyEdgeQueue.read_lines` yields it (newline excluded), ``None`` for
        one it skips (empty or blank, within the bound)."""
        if self.size > self.bound:
            return OversizedLine(bytes(self.held[:OVERSIZED_HEAD_BYTES]), self.size, blank=self.blank)
        return None if self.blank else bytes(self.held)


def _fold_from(handle: IO[bytes], start: FoldedFile[S] | None, key: FileKey, fold: LineFold[S]) -> FoldedFile[S]:
    """Fold the lines of the file open on ``handle`` from ``start``'s end (the whole file without
    one), in pieces of ``fold.piece_bytes`` bytes whatever its lines' lengths."""
    state, end = (start.whole, start.end) if start is not None else (fold.empty, 0)
    bound, add = fold.max_line_bytes, fold.add
    position = end
    handle.seek(position)
    so_far = _LineSoFar(bound)
    while piece := handle.read(fold.piece_bytes):
        parts = piece.split(b"\n")
        for part in parts[:-1]:
            if not so_far.size and len(part) <= bound:  # a whole line in this piece: most lines
                if part.strip():
                    state = add(state, part)
            else:
                so_far.extend(part)
                line = so_far.line()
                if line is not None:
                    state = add(state, line)
                so_far = _LineSoFar(bound)
            position += len(part) + 1
        end = position if len(parts) > 1 else end
        so_far.extend(parts[-1])
        position += len(parts[-1])
    # A last line without its newline yet (being written, or a writer killed mid-line) is read as a
    # line, but only into ``value``: the next fold reads it again from ``end``.
    last_line = so_far.line()
    value = state if last_line is None else add(state, last_line)
    handle.seek(max(0, end - _COUNTED_TAIL_BYTES))
    tail = handle.read(end - max(0, end - _COUNTED_TAIL_BYTES))
    return FoldedFile(key, end, state, value, tail)


def _count_record(count: int, line: bytes) -> int:
    """A dead letter: any line but one past the bound that is all white space (a blanked record)."""
    return count + (not (isinstance(line, OversizedLine) and line.blank))


_DEAD_LETTER_RECORDS: LineFold[int] = LineFold(0, _count_record)


class DeadLetterCounter:
    """The dead-letter file's record count (its non-blank lines, as :meth:`LazyEdgeQueue.dead_letter_count`
    counts them), kept across calls by :func:`fold_file`: unchanged, the file costs a ``stat``;
    grown, only the bytes after the last whole line counted are read; replaced, cut back (a drain's
    recovery undoing an append; a forget blanking its own records, :meth:`LazyEdgeQueue.blank`),
    rewritten just before that point or in place at the same size, it is counted anew. Otherwise
    rem-cycle only appends to the file, so a count never rereads its history; a hand edit well
    inside the counted part is seen when the file is replaced or cut. A blank replaces the file, and
    the count starts anew when the blank stamp changed (:meth:`LazyEdgeQueue.blank_stamp`): the
    copy may have the inode number of the file counted. Calls may come from several threads: the
    state is one tuple replaced at once, and a lost race only reads again."""

    def __init__(self, queue: LazyEdgeQueue) -> None:
        self.queue = queue
        self._counted: tuple[FileKey | None, FoldedFile[int] | None] = (None, None)

    def count(self) -> int:
        """Records in the dead-letter file now."""
        # The stamp before the file: a blank after this read is seen at the next one.
        stamp = self.queue.blank_stamp()
        kept_stamp, kept = self._counted
        counted = fold_file(self.queue.dead_letter_path, _DEAD_LETTER_RECORDS, kept if stamp == kept_stamp else None, root=self.queue.root)
        self._counted = (stamp, counted)
        return 0 if counted is None else counted.value


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


def _unlock_and_sync(fd: int, *, fsync: bool) -> None:
    """Let the next producer (or the drain) in, then flush this append to disk if asked."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    if fsync:
        os.fsync(fd)


def _ends_mid_line(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _holds_start_of(fd: int, start: int, end: int, *, first: bytes, source: IO[bytes]) -> bool:
    """Whether bytes ``start``..``end`` of the file open on ``fd`` are exactly the first
    ``end - start`` bytes of ``first`` followed by the content of ``source``."""
    position, expected = start, first
    while position < end:
        if not expected:
            expected = source.read(_READ_PIECE)
            if not expected:
                return False  # the file holds more than was being written
        size = min(len(expected), end - position)
        if os.pread(fd, size, position) != expected[:size]:
            return False
        position, expected = position + size, expected[size:]
    return True


def _lines_from(handle: IO[bytes], start: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line without its newline)`` for each line of ``handle`` from byte ``start``;
    lines longer than :data:`MAX_LINE_BYTES` are read past (no re-queued line is that long)."""
    handle.seek(start)
    at = start
    while line := handle.readline(MAX_LINE_BYTES + 1):
        size = len(line)
        if size > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (piece := handle.readline(_READ_PIECE)) and not piece.endswith(b"\n"):
                size += len(piece)
            at += size + len(piece)
            continue
        yield at, line.rstrip(b"\n")
        at += size


def _is_json(body: bytes) -> bool:
    if not body.strip():
        return True  # a blank line is no fragment
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
