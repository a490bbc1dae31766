"""The data dir's file of paid answers the database refused to store (``held-answers.jsonl``): what
a process held when its extract phase ended, for the next process's (see ``worker.held_answers``).

One JSON object a line, read back one line at a time so that a damaged line costs only its own
answer. The file is replaced whole (``PATH.part``, flushed to the disk, renamed, the folder's entry
flushed): a kill or a power cut mid-write leaves the old file or the new one, never a torn one. It
is created mode 0600 (it quotes the turns it answered) and opened confined to the data dir
(:mod:`store.confined`). ``PATH.lock`` is the ``flock`` that makes a read and the write or removal
after it one step among the processes on the data dir. A record says when its answer was held
(``held_at``); one written before records said it was held at the latest when the file was written
(its modification time, :attr:`HeldFileContent.written_at`).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from config import Settings
from store.confined import open_confined
from store.durable import fsync_dir


@dataclass(slots=True)
class HeldFileContent:
    """What a read of the file found: the ``records`` it could read, in file order, how many
    lines it could not (``unreadable``, with the first one's ``problem``), and when the file was
    last written (``written_at``, UTC; now when there is no file)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0
    problem: str | None = None
    written_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def count_unreadable(self, problem: str) -> None:
        """Count one line (or record) that could not be read; the first ``problem`` is kept."""
        self.unreadable += 1
        self.problem = self.problem or problem


class HeldAnswersFile:
    """``path`` (inside the data dir ``root``): the held answers' records, replaced whole."""

    def __init__(self, path: Path, *, root: Path) -> None:
        self.path = path
        self.root = root
        self.part_path = path.with_name(f"{path.name}.part")
        self.lock_path = path.with_name(f"{path.name}.lock")

    def exists(self) -> bool:
        """Whether there is a file to read (no lock: a check before taking it)."""
        return self.path.exists() or self.part_path.exists()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the file's lock (waiting for the process holding it: it holds it for a read and a
        write of at most a few megabytes — ``HELD_ANSWERS_MAX_BYTES`` of
        ``pipelines.extract.inflight`` — and a read of the database)."""
        fd = open_confined(self.lock_path, os.O_RDWR | os.O_CREAT, root=self.root, mode=0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # also releases the flock

    def read(self) -> HeldFileContent:
        """The records in the file (none when there is none). A line that is not a JSON object is
        counted unreadable; an ``OSError`` (unreadable file, a link planted there) is raised."""
        content = HeldFileContent()
        try:
            fd = open_confined(self.path, os.O_RDONLY, root=self.root)
        except FileNotFoundError:
            return content
        with os.fdopen(fd, "rb") as handle:
            content.written_at = datetime.fromtimestamp(os.fstat(handle.fileno()).st_mtime, UTC)
            for number, line in enumerate(handle, 1):
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, cut short, nested past the parser
                    content.count_unreadable(f"line {number}: {exc}")
                    continue
                if isinstance(record, dict):
                    content.records.append(record)
                else:
                    content.count_unreadable(f"line {number}: not a JSON object")
        return content

    def replace(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Make ``records`` the file's whole content; no records: no file. A ``.part`` a killed
        writer left goes first (it may quote what was forgotten since)."""
        self.part_path.unlink(missing_ok=True)
        if not records:
            self.path.unlink(missing_ok=True)
            fsync_dir(self.path.parent)
            return
        fd = open_confined(self.part_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, root=self.root, mode=0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                for record in records:
                    out.write(record_line(record))
                out.flush()
                os.fsync(out.fileno())
            os.replace(self.part_path, self.path)
        except BaseException:
            self.part_path.unlink(missing_ok=True)
            raise
        fsync_dir(self.path.parent)


def record_line(record: Mapping[str, Any]) -> bytes:
    """``record``'s line in the file, its newline included (its size is what a held answer costs)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def held_answers_file(settings: Settings) -> HeldAnswersFile:
    """The data dir's file of held answers."""
    return HeldAnswersFile(settings.held_answers_path, root=settings.data_dir)
