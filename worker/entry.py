"""The ``rem-cycle`` console script and ``python -m worker``: :func:`worker.cli.main`, with a
Ctrl-C at any moment ending as one line and exit 130 — also while the command's modules load
(Chroma's client among them: most of the first second of every command), which happens before
anything in :mod:`worker.cli` can catch it. Only the standard library is imported here."""

from __future__ import annotations

import signal
import sys

# A command ended by signal N exits 128 + N, as a shell reports a process killed by it.
EXIT_SIGNAL_BASE = 128


def interrupted() -> int:
    """Say that SIGINT stopped the command; returns its exit status, 128 + SIGINT."""
    print("rem-cycle: interrupted by SIGINT", file=sys.stderr)
    return EXIT_SIGNAL_BASE + signal.SIGINT


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rem-cycle`` console script."""
    try:
        from worker.cli import main as run_command

        return run_command(argv)
    except KeyboardInterrupt:
        return interrupted()
