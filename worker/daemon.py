"""The long-running daemon: a REM cycle every ``REM_INTERVAL_SECONDS``, one anyio event loop.

Lifetime of the process: hold the daemon lock (a second daemon on the same data dir exits at
once), open the health/metrics endpoint, then loop: cycle, cool down, cycle … until SIGTERM or
SIGINT. A cycle that fails in any way — in a phase, or around the phases for want of a lock file,
a database connection or a file descriptor — is recorded ``failed`` in ``rem_runs`` with a reason
code (``worker.failures``), and the next one retries. A signal sets the cycle's stop event
(``worker.signals``) — the cycle ends after its current transaction and is recorded
``interrupted`` — and the daemon exits 0. Should the cycle not reach a transaction
boundary within ``REM_GRACE_SECONDS``, it is cancelled (the in-flight SQLite transaction still
completes: thread calls are not abandoned) and recorded ``interrupted`` with reason ``cancelled``.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio

from config import Settings
from pipelines.extract.inflight import HeldAnswers
from store.claims import worker_owner
from store.library_log import get_logger
from worker.cycle import EXIT_OK, REFUSALS, CycleBusyError, run_cycle, single_flight
from worker.failures import FailureRecorder
from worker.signals import stop_on_signals

log = get_logger(__name__)


def next_delay(*, interval: float, started: float, finished: float) -> float:
    """Seconds to wait before the next cycle. A cycle that overran its interval cools down for a
    full interval from its completion instead of starting again at once. Pure."""
    elapsed = finished - started
    return interval if elapsed >= interval else interval - elapsed


def daemon_lock_path(settings: Settings) -> Path:
    """The lock a daemon holds for its whole life (``Settings.daemon_lock_path``)."""
    return settings.daemon_lock_path


async def run_daemon(settings: Settings) -> int:
    """Run cycles until stopped; returns the exit status. Raises :class:`CycleBusyError` when
    another daemon holds this data dir."""
    async with AsyncExitStack() as stack:
        if not settings.shared_extract:  # shared: several daemons may work on one data dir
            await stack.enter_async_context(single_flight(settings, lock_path=daemon_lock_path(settings), what="rem-cycle daemon"))
        # Create/migrate the database before the endpoint starts answering /readyz, and keep a
        # connection for recording crashed cycles (see worker.failures).
        recorder = FailureRecorder(settings, retries=True)
        await anyio.to_thread.run_sync(recorder.open)
        stack.callback(recorder.close)
        if settings.http_port:
            from worker.http import serve_http

            server = await stack.enter_async_context(serve_http(settings))
            log.info("http endpoint listening", url=server.url)
        stop = (await stack.enter_async_context(stop_on_signals(grace_seconds=settings.grace_seconds))).event
        log.info("daemon started", interval_seconds=settings.interval_seconds, run_at_startup=settings.run_at_startup)
        await _schedule(settings, stop, recorder)
    log.info("daemon stopped")
    return EXIT_OK


async def _schedule(settings: Settings, stop: anyio.Event, recorder: FailureRecorder) -> None:
    # One lease owner for the daemon's life: its cycles run one after another, so a single-flight
    # lock a cycle could not release (the database dropped its connection) is not waited out by
    # the next cycle for REM_LEASE_TIMEOUT_SECONDS.
    owner = worker_owner()
    # Paid answers the database refused to store: each extract phase writes them to the data dir's
    # file for the next; what the file refuses stays here, and the next cycle stores it.
    held = HeldAnswers()
    if not settings.run_at_startup:
        await _sleep_unless_stopped(stop, settings.interval_seconds)
    while not stop.is_set():
        started = time.monotonic()
        # A crashed cycle the database could not take at the time is written first.
        await anyio.to_thread.run_sync(recorder.flush)
        try:
            # Every failure but a busy lock is recorded and returned (worker.cycle.run_cycle).
            await run_cycle(settings, reason="scheduled", mode="daemon", stop=stop, recorder=recorder, lease_owner=owner,
                            held_answers=held)
        except CycleBusyError as exc:
            log.warning("cycle skipped", reason=str(exc))
        except REFUSALS as exc:
            log.error("cycle refused", reason=str(exc))
        except Exception:  # noqa: BLE001 - not even the recording worked; the daemon outlives it
            log.exception("cycle crashed and could not be recorded")
        delay = next_delay(interval=settings.interval_seconds, started=started, finished=time.monotonic())
        await _sleep_unless_stopped(stop, delay)


async def _sleep_unless_stopped(stop: anyio.Event, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        await stop.wait()
