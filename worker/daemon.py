"""The long-running daemon: a REM cycle every ``REM_INTERVAL_SECONDS``."""

from __future__ import annotations

import time

import anyio
import structlog

from config import Settings
from worker.cycle import EXIT_OK, CycleBusyError, run_cycle

log = structlog.get_logger(__name__)


def next_delay(*, interval: float, started: float, finished: float) -> float:
    """Seconds to wait before the next cycle. A cycle that overran its interval cools down for a
    full interval from its completion instead of starting again at once. Pure."""
    elapsed = finished - started
    return interval if elapsed >= interval else interval - elapsed


async def run_daemon(settings: Settings) -> int:
    """Run cycles forever."""
    if not settings.run_at_startup:
        await anyio.sleep(settings.interval_seconds)
    while True:
        started = time.monotonic()
        try:
            await run_cycle(settings, reason="scheduled", mode="daemon")
        except CycleBusyError as exc:
            log.warning("cycle skipped", reason=str(exc))
        await anyio.sleep(next_delay(interval=settings.interval_seconds, started=started, finished=time.monotonic()))
    return EXIT_OK
