"""The ``rem-cycle`` console script and ``python -m worker``: :func:`worker.cli.main`, with a
Ctrl-C at any moment ending as one line and exit 130 — also while the command's modules load
(Chroma's client among them: most of the first second of every command), which happens before
anything in :mod:`worker.cli` can catch it. Only the standard library is imported here."""

from __future__ import annotations

import io
import os
import signal
import sys

# A command ended by signal N exits 128 + N, as a shell reports a process killed by it.
EXIT_SIGNAL_BASE = 128


def interrupted() -> int:
    """Say that SIGINT stopped the command; returns its exit status, 128 + SIGINT."""
    print("rem-cycle: interrupted by SIGINT", file=sys.stderr)
    return EXIT_SIGNAL_BASE + signal.SIGINT


def reader_gone() -> int:
    """End a command whose output's reader went away (``rem-cycle export | head``) as a Unix tool
    ended by SIGPIPE: no message, exit 128 + SIGPIPE (141). A stream that cannot be flushed is
    pointed at /dev/null, so the interpreter's last flush cannot fail again."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    return EXIT_SIGNAL_BASE + signal.SIGPIPE


def degrade_unencodable_output() -> None:
    """Print a character the terminal's encoding lacks (``PYTHONIOENCODING=ascii``, a latin-1
    locale) as its escape, ``\\u2192``, rather than crash the command on it. ``--json`` output
    is ASCII anyway; ``export`` writes UTF-8 whatever the encoding (the same bytes as ``--out``)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rem-cycle`` console script."""
    degrade_unencodable_output()
    try:
        from worker.cli import main as run_command

        status = run_command(argv)
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's last flush
        return status
    except SystemExit:
        # argparse's --help/--version/usage exit: their text may still be in the buffer, and a
        # reader that went away must show here too, not in the interpreter's last flush.
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            return reader_gone()
        raise
    except KeyboardInterrupt:
        return interrupted()
    except BrokenPipeError:
        return reader_gone()
