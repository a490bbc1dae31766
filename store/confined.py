"""Opening files inside the data dir without following links out of it: the one place where
rem-cycle opens a file it creates, truncates, appends to or reads back from its data dir.

Anyone who can write in the data dir could plant a symbolic link (or a hard link) at a name
rem-cycle writes — a drain's scratch file, a lock, the graph database — and make the next write
truncate or overwrite a file elsewhere. :func:`open_confined` walks from the data dir to the file
one component at a time with ``O_NOFOLLOW``, so a link anywhere below the data dir is refused
before the first byte is written; the data dir itself may be a link the operator made.

Files the user names on the command line (``export --out``, ``backup PATH``) are the user's choice
and are not confined (see README, "Files").
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from store.errors import StoreError

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


class DataDirPathError(StoreError, OSError):
    """A path of the data dir rem-cycle cannot use: a :class:`~store.errors.StoreError`, and an
    ``OSError`` (with its ``errno``) as the file system refused it, built as ``(errno, message)``;
    shown as the message alone, without OSError's ``[Errno 20]`` before the line a user reads."""

    def __str__(self) -> str:
        return str(self.strerror)


class UnsafePathError(DataDirPathError):
    """A file rem-cycle keeps in its data dir is a link, not a regular file, or outside the data dir."""


class DataDirAccessError(DataDirPathError):
    """The file system refused this user a file or folder rem-cycle keeps in its data dir (a data
    dir owned by the daemon's user, a parent folder without write permission). Its message names
    the whole path and what rem-cycle needs, where the bare ``OSError`` of an open relative to a
    folder's descriptor named only the file (``Permission denied: 'rem-cycle.lock'``)."""


# Refusals of access, and what rem-cycle needs instead: the user's permissions (EACCES), a rule
# beyond them (EPERM: an immutable file), a file system mounted read-only (EROFS: no user may write).
_ACCESS_NEEDED = ("rem-cycle needs to create, read and write the files of its data dir: run it as the user that "
                  "owns the data dir, or give this user write access to it")
_ACCESS_REFUSED = {
    errno.EACCES: _ACCESS_NEEDED,
    errno.EPERM: _ACCESS_NEEDED,
    errno.EROFS: "rem-cycle writes in its data dir: put it on a file system mounted read-write (REM_DATA_DIR)",
}


def _refused_access(exc: OSError, verb: str, shown: Path) -> OSError:
    """``exc`` as a :class:`DataDirAccessError` naming ``shown`` in full when it is a refusal of
    access; ``exc`` itself otherwise."""
    needed = _ACCESS_REFUSED.get(exc.errno or 0)
    if needed is None:
        return exc
    return DataDirAccessError(exc.errno, f"cannot {verb} {os.path.abspath(shown)}: {exc.strerror} ({needed})")


def open_confined(path: str | os.PathLike[str], flags: int, *, root: str | os.PathLike[str], mode: int = 0o640) -> int:
    """``os.open(path, flags, mode)`` for a file inside ``root`` (the data dir), refusing to follow
    a symbolic link at any component below ``root``, to open anything but a regular file, and to
    write to a file with more than one hard link. Missing directories below ``root`` are created
    when ``flags`` has ``O_CREAT``. ``O_TRUNC`` truncates only after those checks passed.
    Raises :class:`UnsafePathError` (an ``OSError``) for an unsafe path."""
    with _parent(Path(path), Path(root), create=bool(flags & os.O_CREAT)) as (directory, name):
        # O_NONBLOCK: a FIFO planted at the name must not block the open; refused just below.
        fd = _checked_open(name, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, directory, Path(path))
    try:
        info = os.fstat(fd)
        _refuse_unsafe(info.st_mode, info.st_nlink, Path(path), written=bool(flags & _WRITE_FLAGS))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_confined(path: str | os.PathLike[str], *, root: str | os.PathLike[str]) -> None:
    """Raise :class:`UnsafePathError` unless ``path`` is missing or a regular file with one hard
    link, inside ``root`` and reached without links — for files a library opens by name and writes,
    such as SQLite's database and ``-wal``. It looks without opening the file: closing a descriptor
    of a database file would drop the POSIX locks SQLite holds on it in this process."""
    try:
        with _parent(Path(path), Path(root), create=False) as (directory, name):
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePathError(errno.ELOOP, f"{path} is a symbolic link; rem-cycle refuses to follow it")
    _refuse_unsafe(info.st_mode, info.st_nlink, Path(path), written=True)


def confined_dir(path: str | os.PathLike[str], *, root: str | os.PathLike[str]) -> Path:
    """Create the directory ``path`` below ``root`` (and its parents) without following links;
    returns ``path``. Raises :class:`UnsafePathError` when a component is a link or a file."""
    with _parent(Path(path) / "_", Path(root), create=True):
        return Path(path)


@contextmanager
def exclusive_lock(path: str | os.PathLike[str], *, root: str | os.PathLike[str], holder: str | None = None) -> Iterator[bool]:
    """Try an exclusive ``flock`` on the lock file ``path`` (created confined); yields ``True``
    while held, ``False`` at once when another process holds it. The kernel drops the lock when
    the process dies, even by SIGKILL. ``holder``: a line saying who holds it, written into the
    file while held (and emptied at release) for :func:`lock_holder` to read; only the holder
    writes the file."""
    fd = open_confined(path, os.O_RDWR | os.O_CREAT, root=root)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        # What an earlier holder wrote is no one's now (it may have died without emptying it).
        os.ftruncate(fd, 0)
        if holder is not None:
            os.pwrite(fd, holder.encode("utf-8", "replace"), 0)
        try:
            yield True
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # also releases the flock


def lock_holder(path: str | os.PathLike[str], *, root: str | os.PathLike[str]) -> str:
    """The line the holder of the lock file ``path`` wrote (:func:`exclusive_lock`'s ``holder``),
    its first line only (anything after it is no holder's), or ``a process that did not say which``
    when it wrote none (or the file is gone or unreadable). Its characters are as written: a caller
    showing it to a terminal makes them printable."""
    try:
        fd = open_confined(path, os.O_RDONLY, root=root)
    except OSError:
        return _NO_HOLDER_LINE
    try:
        said = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    return said.splitlines()[0].strip() if said else _NO_HOLDER_LINE


# What a refused process says of a holder that wrote no line (an older release, or the instant
# between a holder's truncate and its write).
_NO_HOLDER_LINE = "a process that did not say which"


def _refuse_unsafe(mode: int, links: int, path: Path, *, written: bool) -> None:
    if not stat.S_ISREG(mode):
        raise UnsafePathError(errno.EINVAL, f"{path} is not a regular file; rem-cycle refuses to use it")
    if written and links > 1:
        raise UnsafePathError(
            errno.EMLINK, f"{path} has {links} hard links; rem-cycle refuses to write to a file linked elsewhere"
        )


@contextmanager
def _parent(path: Path, root: Path, *, create: bool) -> Iterator[tuple[int, str]]:
    """``(descriptor of path's directory, path's name)``, reached from ``root`` one directory at a
    time with ``O_NOFOLLOW`` (creating missing ones when ``create``); the descriptor is closed after."""
    parts = _parts_below(path, root)
    directory = _open_directory(root, create=create)
    try:
        for index, part in enumerate(parts[:-1]):
            below = _open_directory(part, dir_fd=directory, create=create, shown=Path(root, *parts[: index + 1]))
            os.close(directory)
            directory = below
        yield directory, parts[-1]
    finally:
        os.close(directory)


def _parts_below(path: Path, root: Path) -> tuple[str, ...]:
    """The components of ``path`` below ``root`` (both made absolute, ``..`` folded lexically)."""
    absolute, base = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    for candidate in (base, Path(os.path.realpath(base))):
        try:
            parts = absolute.relative_to(candidate).parts
        except ValueError:
            continue
        if parts:
            return parts
    raise UnsafePathError(errno.EXDEV, f"{path} is not inside the data dir {root}; rem-cycle refuses to use it")


def _open_directory(name: str | Path, *, dir_fd: int | None = None, create: bool, shown: Path | None = None) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (os.O_NOFOLLOW if dir_fd is not None else 0)
    shown = shown or Path(name)
    if dir_fd is None and os.path.exists(name) and not os.path.isdir(name):
        # The data dir itself (followed if a link: the operator's own) is a file: no link to refuse.
        raise UnsafePathError(errno.ENOTDIR, f"{os.path.abspath(shown)} is a file, not a folder: the data dir must be a folder")
    try:
        return _checked_open(name, flags, 0, dir_fd, shown)
    except FileNotFoundError:
        if not create:
            raise
    try:
        if dir_fd is None:
            os.makedirs(name, mode=0o750, exist_ok=True)
        else:
            os.mkdir(name, mode=0o750, dir_fd=dir_fd)
    except FileExistsError:
        pass  # created meanwhile by another process; the open below checks what it is
    except OSError as exc:
        raise _refused_access(exc, "create the folder", shown) from None
    return _checked_open(name, flags, 0, dir_fd, shown)


def _checked_open(name: str | Path, flags: int, mode: int, dir_fd: int | None, shown: Path) -> int:
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError(
                exc.errno, f"{shown} is a symbolic link or not a directory where one is expected; rem-cycle refuses to follow it"
            ) from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader, or a device
            raise UnsafePathError(exc.errno, f"{shown} is not a regular file; rem-cycle refuses to use it") from None
        raise _refused_access(exc, "create or open" if flags & os.O_CREAT else "open", shown) from None
