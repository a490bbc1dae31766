"""SIGTERM/SIGINT/SIGHUP: the daemon and ``--once`` stop at a transaction boundary; operator commands
(``import``, ``drain``, ``backfill`` …) stop, say what they did, and exit non-zero.

One watcher for both: :func:`stop_on_signals` sets a :class:`StopRequest` on the first signal. A
body that can stop by itself (the cycle, the drain: they check ``request.event`` between
transactions) gets ``GRACE_SHARE_BEFORE_CANCEL × grace_seconds`` to do so; one that cannot (an
import, a sync) is cancelled at once — its writes are idempotent batches, and a thread call in
flight still completes. A second signal cancels at once.

:func:`interruptible` wraps an operator command: a signal ends it with exit status ``128 + signal``
(130 for SIGINT, 143 for SIGTERM) and one line on stderr saying what was done so far and that
re-running is safe — never a silent exit 0 half done. A command of one transaction (``merge``,
``forget``, ``backup``, ``restore`` …) runs it and prints its result under
:meth:`CommandProgress.to_the_end`: a signal that comes once it is under way cannot cost the line
saying what it committed.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import anyio

from config import Settings
from store.library_log import get_logger
from worker.entry import EXIT_SIGNAL_BASE

log = get_logger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_signals() -> tuple[signal.Signals, ...]:
    """:data:`STOP_SIGNALS`, and SIGHUP (the terminal or SSH session the process was started from
    closed: its default action killed a daemon mid-cycle, leaving the run ``running``) unless it
    is ignored — ``nohup rem-cycle &`` asks to outlive the terminal, and a handler would override it."""
    ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    return STOP_SIGNALS if ignored else (*STOP_SIGNALS, signal.SIGHUP)
# Share of the grace time a body that stops by itself gets before it is cancelled; the rest is for
# the in-flight transaction and the record.
GRACE_SHARE_BEFORE_CANCEL = 0.8


@dataclass
class StopRequest:
    """What the first stop signal set: ``event`` for the body to check, ``signal`` for the exit status.

    ``stops_by_itself``: whether the body, right now, checks ``event`` at its boundaries; when
    False a signal cancels it at once (a command sets it around the parts that can stop cleanly)."""

    event: anyio.Event = field(default_factory=anyio.Event)
    signal: signal.Signals | None = None
    stops_by_itself: bool = True

    @property
    def exit_status(self) -> int:
        return EXIT_SIGNAL_BASE + int(self.signal or 0)


@asynccontextmanager
async def stop_on_signals(*, grace_seconds: float, stops_by_itself: bool = True) -> AsyncIterator[StopRequest]:
    """Yield a :class:`StopRequest` set by the first SIGTERM/SIGINT. Unless the body stops by
    itself within ``GRACE_SHARE_BEFORE_CANCEL × grace_seconds`` (or on a second signal, or at once
    when it cannot stop by itself), it is cancelled; the block then exits normally."""
    request = StopRequest(stops_by_itself=stops_by_itself)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_signals, request, grace_seconds * GRACE_SHARE_BEFORE_CANCEL, tg.cancel_scope)
            yield request
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The watcher never raises, so this is the body's own exception: give it back unwrapped.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def _watch_signals(request: StopRequest, grace: float, scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(*stop_signals()) as signals:
        async for signum in signals:
            request.signal = signal.Signals(signum)
            log.info("stop requested: finishing the current transaction", signal=request.signal.name)
            request.event.set()
            break
        if request.stops_by_itself:
            # A second signal while we wait ends the wait (and the body) at once.
            with anyio.move_on_after(grace) as waited:
                async for signum in signals:
                    log.warning("second stop signal: cancelling now", signal=signal.Signals(signum).name)
                    break
            if waited.cancelled_caught:
                log.warning("grace time over: cancelling", grace_seconds=grace)
        scope.cancel()


@dataclass
class CommandProgress:
    """Handed to an interruptible command: ``stop`` (see :class:`StopRequest`) and ``describe``,
    which says in words what the command has finished so far (for the message on a signal)."""

    stop: StopRequest
    describe: Callable[[], str] = lambda: "nothing was changed"
    # Whether the command ran its :meth:`to_the_end` step: it then printed what it did.
    finished: bool = False

    @contextmanager
    def to_the_end(self) -> Iterator[None]:
        """Around a command's one transaction and the line that says what it did (``merge``,
        ``restore`` …): a signal from here on no longer stops the command. The transaction would
        complete anyway (a thread call is never abandoned), so what it committed — or why it
        failed — is printed, and the command exits with its own status. A signal before this step
        stops the command with nothing changed; a second signal still ends the process at once."""
        try:
            with anyio.CancelScope(shield=True):
                yield
        finally:
            self.finished = True


InterruptibleCommand = Callable[[Settings, argparse.Namespace, CommandProgress], Awaitable[int]]


def interruptible(command: InterruptibleCommand, *, name: str, rerun: str) -> Callable[[Settings, argparse.Namespace], Awaitable[int]]:
    """``command`` as a CLI handler that a SIGINT/SIGTERM ends with exit status 128 + signal and
    the line ``rem-cycle: NAME stopped by SIGINT: <what was done>; <rerun>`` on stderr — unless the
    signal came once the command was in its :meth:`CommandProgress.to_the_end` step: it then
    finishes, reports and returns its own status."""

    async def run(settings: Settings, args: argparse.Namespace) -> int:
        status: int | None = None
        async with stop_on_signals(grace_seconds=settings.grace_seconds, stops_by_itself=False) as stop:
            progress = CommandProgress(stop=stop)
            status = await command(settings, args, progress)
        if status is not None and (stop.signal is None or progress.finished):
            return status
        print(f"rem-cycle: {name} stopped by {stop.signal.name if stop.signal else 'a signal'}: "
              f"{progress.describe()}; {rerun}", file=sys.stderr)
        return stop.exit_status

    return run
