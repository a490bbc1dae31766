"""Files written whole or not at all, and durable once written."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypeVar

T = TypeVar("T")


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s entries (a file created, renamed or removed in it) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: str | os.PathLike[str], write: Callable[[TextIO], T]) -> T:
    """Replace the file at ``path`` with what ``write`` writes (UTF-8 text), and return what
    ``write`` returns. ``write`` fills ``PATH.part`` beside it, which is flushed to the disk and
    renamed onto ``path``, then the folder's entry is flushed too: even after a power cut, ``path``
    is the old file or the whole new one. A failure (``write``'s, a full disk's) removes
    ``PATH.part``. A kill cannot; the next call replaces what it left (a link left there is
    replaced, never written through). Folders of ``path`` not there yet are made first."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)  # as a backup's folder is made: ``--out exports/graph.json``
    part = target.with_name(f"{target.name}.part")
    part.unlink(missing_ok=True)  # what a killed writer left
    out = open(part, "x", encoding="utf-8")  # "x": a link made there since is not followed
    try:
        with out:
            result = write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return result
