"""Total parsing of the times source rows and import lines carry.

Two forms are accepted — an ISO 8601 string (``createdAt``) and epoch milliseconds (``timestamp``) —
and both become one UTC form, ``YYYY-MM-DDTHH:MM:SS.mmmZ``, which sorts as text. Any value outside
``EARLIEST`` … ``LATEST`` (after conversion to UTC) or not understood raises :class:`BadTimeError`
with a one-word reason; nothing here raises anything else, whatever the input.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

# Agent memories are written by clocks: before the Unix epoch is a sign or unit bug (a negative
# epoch), and after year 9999 cannot be represented (9999-12-31T23:59:59-05:00 is year 10000 in UTC).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
# The longest ISO 8601 form fromisoformat reads is ~40 characters; longer text is not a time.
MAX_ISO_CHARS = 64

TIME_REASONS: tuple[str, ...] = ("wrong-type", "unparseable", "not-finite", "out-of-range")

# ISO 8601's end of a day: the hour 24 with nothing after it but zeros (24, 24:00, 24:00:00.000),
# the next day's 00:00. Python's fromisoformat refuses the hour 24.
_END_OF_DAY = re.compile(r"(?P<date>[^Tt ]+)[Tt ]24(?::?00(?::?00(?:[.,]0+)?)?)?(?P<zone>(?:[Zz]|[+-].*)?)")
# A time whose last part is an hour or a minute with a fraction (10.5, 10:30.5, 1030,5): ISO 8601
# reads it as a fraction of that hour or minute (10.5 is 10:30), Python's fromisoformat as
# milliseconds (10:00:00.500). What follows is the zone, which fromisoformat reads or refuses.
_FRACTION_OF_HOUR_OR_MINUTE = re.compile(
    r"(?P<date>[^Tt ]+)[Tt ](?P<hour>\d{2})(?::?(?P<minute>\d{2}))?[.,](?P<fraction>\d+)(?P<zone>.*)"
)


class BadTimeError(ValueError):
    """A time value that cannot be used; ``reason`` is one of :data:`TIME_REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def format_utc(moment: datetime) -> str:
    """``moment`` (aware) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def has_fraction_of_hour_or_minute(text: str) -> bool:
    """Whether the ISO 8601 time ``text`` ends its time with a fraction of an hour or a minute
    (``T10.5``, ``T10:30.5``), which :func:`iso_moment` reads as ISO 8601 does. Pure."""
    return _FRACTION_OF_HOUR_OR_MINUTE.fullmatch(text.strip()) is not None


def iso_moment(text: str) -> datetime:
    """The moment (aware, UTC) an ISO 8601 date or time names, as ISO 8601 reads it: naive means
    UTC, ``z`` is ``Z`` (RFC 3339), ``T24:00`` is the next day's ``T00:00`` (the end of a day), and a
    fraction of an hour or a minute is that fraction (``T10.5`` is 10:30, ``T10:30.5`` 10:30:30),
    where Python's ``fromisoformat`` alone refused the first and read the second as 10:00:00.500.
    The one reading of ``createdAt`` (:func:`iso_to_utc`) and of ``--as-of`` times
    (``pipelines.asof.parse_as_of``). :class:`BadTimeError` ``unparseable`` or ``out-of-range``
    (after conversion to UTC); no range check of :data:`EARLIEST` … :data:`LATEST`."""
    value = text.strip()
    later = timedelta()
    if (end_of_day := _END_OF_DAY.fullmatch(value)) is not None:
        value, later = f"{end_of_day['date']}T00:00{end_of_day['zone']}", timedelta(days=1)
    elif (fraction := _FRACTION_OF_HOUR_OR_MINUTE.fullmatch(value)) is not None:
        unit = timedelta(minutes=1) if fraction["minute"] else timedelta(hours=1)
        value = f"{fraction['date']}T{fraction['hour']}:{fraction['minute'] or '00'}{fraction['zone']}"
        # Exact to the microsecond: the digits as an integer over their power of ten.
        later = timedelta(microseconds=round(int(fraction["fraction"]) * (unit // timedelta(microseconds=1))
                                             / 10 ** len(fraction["fraction"])))
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadTimeError("unparseable", f"not an ISO 8601 time: {text[:40]!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return (parsed + later).astimezone(UTC)
    except (OverflowError, ValueError):
        raise BadTimeError("out-of-range", f"time out of range: {text[:40]!r}") from None


def iso_to_utc(value: object) -> str:
    """An ISO 8601 string (:func:`iso_moment`) in the canonical UTC form; :class:`BadTimeError`
    when it is not a string, not ISO 8601, or outside ``EARLIEST`` … ``LATEST``."""
    if not isinstance(value, str):
        raise BadTimeError("wrong-type", f"expected an ISO 8601 string, got {type(value).__name__}")
    if not value or len(value) > MAX_ISO_CHARS:
        raise BadTimeError("unparseable", f"not an ISO 8601 time: {value[:40]!r}")
    return _in_range(iso_moment(value), value)


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
