"""Total parsing of the times source rows and import lines carry.

Two forms are accepted — an ISO 8601 string (``createdAt``) and epoch milliseconds (``timestamp``) —
and both become one UTC form, ``YYYY-MM-DDTHH:MM:SS.mmmZ``, which sorts as text. Any value outside
``EARLIEST`` … ``LATEST`` (after conversion to UTC) or not understood raises :class:`BadTimeError`
with a one-word reason; nothing here raises anything else, whatever the input.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

# Agent memories are written by clocks: before the Unix epoch is a sign or unit bug (a negative
# epoch), and after year 9999 cannot be represented (9999-12-31T23:59:59-05:00 is year 10000 in UTC).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
# The longest ISO 8601 form fromisoformat reads is ~40 characters; longer text is not a time.
MAX_ISO_CHARS = 64

TIME_REASONS: tuple[str, ...] = ("wrong-type", "unparseable", "not-finite", "out-of-range")


class BadTimeError(ValueError):
    """A time value that cannot be used; ``reason`` is one of :data:`TIME_REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def format_utc(moment: datetime) -> str:
    """``moment`` (aware) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_to_utc(value: object) -> str:
    """An ISO 8601 string (naive means UTC) in the canonical UTC form; :class:`BadTimeError` when
    it is not a string, not ISO 8601, or outside ``EARLIEST`` … ``LATEST``."""
    if not isinstance(value, str):
        raise BadTimeError("wrong-type", f"expected an ISO 8601 string, got {type(value).__name__}")
    if not value or len(value) > MAX_ISO_CHARS:
        raise BadTimeError("unparseable", f"not an ISO 8601 time: {value[:40]!r}")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadTimeError("unparseable", f"not an ISO 8601 time: {value[:40]!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        moment = parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        raise BadTimeError("out-of-range", f"time out of range: {value[:40]!r}") from None
    return _in_range(moment, value)


def epoch_ms_to_utc(value: object) -> str:
    """Epoch milliseconds (int or float, not bool) in the canonical UTC form; :class:`BadTimeError`
    when it is not a number, not finite, or outside ``EARLIEST`` … ``LATEST``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadTimeError("wrong-type", f"expected epoch milliseconds, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadTimeError("not-finite", f"epoch milliseconds is {value}")
    if not EARLIEST.timestamp() * 1000 <= value <= LATEST.timestamp() * 1000:
        raise BadTimeError("out-of-range", f"epoch milliseconds out of range: {value!r:.40}")
    return _in_range(datetime.fromtimestamp(value / 1000, UTC), value)


def _in_range(moment: datetime, given: object) -> str:
    if not EARLIEST <= moment <= LATEST:
        raise BadTimeError("out-of-range", f"time out of range: {str(given)[:40]!r}")
    return format_utc(moment)
