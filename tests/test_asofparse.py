"""``--as-of`` spellings that meant another moment (asofparse, twenty-seventh session): ``UTC+2``
read the POSIX way (two hours behind), ``4/12/2026`` read month first, a fraction of an hour read
as milliseconds, a 12-digit date-time read as epoch milliseconds, two offsets of which the last
won, a day of the week the date is not, and ``T24:00`` (the end of a day) refused. Each is now read
as people mean it or refused with a message naming a form that is read, by the parsers, by every
``rem-cycle`` command that takes ``--as-of`` (real processes, one line, exit 2) and by the real
``rem-cycle mcp`` process."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from mcp import Client

from config import Settings
from pipelines.asof import AsOfError
from pipelines.asof import parse_as_of as show_as_of
from pipelines.recall import RecallInputError, parse_as_of
from tests.conftest import run_cli
from tests.test_forget import _env
from tests.test_mcp import stdio_params, text_of
from tests import test_recall_asof_bounds

# Its fixture: one session, turns at 2026-12-04T10:00:00.000Z (t1) and 10:00:00.250Z (t2).
graph = test_recall_asof_bounds.graph

pytestmark = pytest.mark.timeout(180)


def refused(text: str) -> str:
    """recall's message refusing ``text`` (the test fails when it is read)."""
    with pytest.raises(RecallInputError) as caught:
        moment = parse_as_of(text)
        pytest.fail(f"{text!r} was read as {moment}")
    return str(caught.value)


# --- UTC+2 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "moment"), [
    ("2026-12-04 10:00 UTC+2", "2026-12-04T08:00:00.000Z"),
    ("2026-12-04 10:00 GMT+2", "2026-12-04T08:00:00.000Z"),
    ("2026-12-04T10:00 UTC+02:00", "2026-12-04T08:00:00.000Z"),
    ("Dec 4 2026 10:00 GMT+0200", "2026-12-04T08:00:00.000Z"),
    ("2026-12-04 10:00 UTC+2:30", "2026-12-04T07:30:00.000Z"),
    ("2026-12-04 10:00 UTC-05:00", "2026-12-04T15:00:00.000Z"),
    ("2026-12-04 10:00 UTC -3", "2026-12-04T13:00:00.000Z"),  # the -3 was dropped: 10:00Z
    ("2026-12-04 10:00 UTC+2 (CEST)", "2026-12-04T08:00:00.000Z"),
    ("Fri, 04 Dec 2026 10:00:00 GMT+1", "2026-12-04T09:00:00.000Z"),
])
def test_utc_plus_an_offset_is_that_offset(text: str, moment: str) -> None:
    """``UTC+2`` is two hours ahead of UTC, as people (and the Windows zone list, JavaScript's
    ``GMT+0200``) write it; dateutil read it the POSIX way, two hours behind: 4 hours off."""
    assert parse_as_of(text) == moment


@pytest.mark.parametrize(("text", "says"), [
    ("2026-12-04 10:00 CEST+2", "puts an offset after the zone name 'CEST'"),
    ("2026-12-04T10:00Z+02:00", "puts an offset after the zone name 'Z'"),
    ("2026-12-04 10:00 utc+2", "write the offset alone (+02:00) or after UTC"),
    ("2026-12-04 10:00 +02:00 +03:00", "names two offsets"),
    ("2026-12-04 10:00 +2 -3", "names two offsets"),
    ("2026-12-04 10:00 UTC+24", "names no offset of a zone"),
])
def test_an_offset_read_two_ways_or_twice_is_refused(text: str, says: str) -> None:
    """A zone name other than UTC/GMT with an offset (its sign turned by dateutil), and two offsets
    (dateutil kept the last: ``+02:00 +03:00`` was 07:00Z), were read without a word."""
    assert says in refused(text)


# --- 4/12/2026 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["4/12/2026", "04.12.2026", "4.12.2026", "12-04-2026", "04 12 2026",
                                  "12/4/2026 10:00", "10:00 4/12/2026"])
def test_a_date_that_does_not_tell_the_day_from_the_month_is_refused(text: str) -> None:
    """``4/12/2026`` is the 4th of December to most of the world; dateutil read the 12th of April
    (``04.12.2026``, the German form, too). Refused, with the ISO spelling of both readings."""
    message = refused(text)
    assert "does not tell the day from the month" in message and "2026-12-04" in message and "2026-04-12" in message


@pytest.mark.parametrize("text", ["04/12/26", "4/12/26", "26/12/04", "1/2/3", "Dec 4 04", "4 Dec 26", "Dec 04 26 10:00"])
def test_a_date_with_a_short_year_is_refused(text: str) -> None:
    """dateutil took a year of two digits as the one nearest today: ``26/12/04`` was 2004-12-26
    (``2026/12/04`` written short?), ``Dec 04 26`` the 4th of December 2026 or the 26th of 2004."""
    assert "does not write its year in full" in refused(text)


@pytest.mark.parametrize(("text", "day"), [
    ("13/4/2026", "2026-04-13"), ("4/13/2026", "2026-04-13"), ("13.4.2026", "2026-04-13"), ("4/4/2026", "2026-04-04"),
    ("2026/12/04", "2026-12-04"), ("2026.12.04", "2026-12-04"), ("2026 12 04", "2026-12-04"), ("2026/4/12", "2026-04-12"),
    ("Dec-04-2026", "2026-12-04"), ("4 Dec 2026", "2026-12-04"), ("2026-12-04", "2026-12-04"), ("20261204", "2026-12-04"),
])
def test_a_date_that_tells_its_day_keeps_its_reading(text: str, day: str) -> None:
    """What was read right stays read: a day over 12, the same number twice, the year first."""
    assert parse_as_of(text) == f"{day}T23:59:59.999Z"


def test_a_year_first_date_goes_on_with_its_month() -> None:
    """``2026/13/04`` was read as year, day, month (the 13th of April); no one writes that order."""
    assert "there is no month 13" in refused("2026/13/04")


# --- T24:00 --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "moment"), [
    ("2026-12-04T24:00", "2026-12-05T00:00:00.000Z"),
    ("2026-12-04T24:00:00Z", "2026-12-05T00:00:00.000Z"),
    ("2026-12-04 24:00:00.000+02:00", "2026-12-04T22:00:00.000Z"),
    ("20261204T2400", "2026-12-05T00:00:00.000Z"),
    ("2026-12-31T24:00Z", "2027-01-01T00:00:00.000Z"),
])
def test_the_end_of_a_day_is_the_next_midnight(text: str, moment: str) -> None:
    """ISO 8601's ``T24:00`` names the same moment as the next day's ``T00:00``; it was refused."""
    assert show_as_of(text) == parse_as_of(text) == moment


@pytest.mark.parametrize("text", ["2026-12-04T24:30", "2026-12-04T24:00:01", "9999-12-31T24:00"])
def test_an_hour_24_that_is_not_the_end_of_a_day_is_refused(text: str) -> None:
    with pytest.raises(AsOfError):
        show_as_of(text)
    refused(text)


# --- a fraction of an hour, a 12-digit time, a weekday -------------------------------------------
@pytest.mark.parametrize("text", ["2026-12-04T10.5Z", "2026-12-04T10,5", "2026-12-04 10.30", "2026-12-04T10:30.5",
                                  "20261204T1030.5"])
def test_a_fraction_of_an_hour_or_a_minute_is_refused(text: str) -> None:
    """ISO 8601 reads ``10.5`` as half past ten; Python's fromisoformat read 10:00:00.500 (and
    ``10.30`` as 10:00:00.300), for show/search/export and recall alike."""
    with pytest.raises(AsOfError, match="a fraction is read on seconds only"):
        show_as_of(text)
    assert "a fraction is read on seconds only" in refused(text)
    assert show_as_of("2026-12-04T10:30:00.5Z") == parse_as_of("2026-12-04T10:30:00.5Z") == "2026-12-04T10:30:00.500Z"


@pytest.mark.parametrize(("text", "says"), [
    ("202612041000", "reads as epoch milliseconds and as 2026-12-04T10:00:00"),
    ("20261204100000", "reads as epoch milliseconds and as 2026-12-04T10:00:00"),
    ("2026120410", "reads as epoch seconds and as 2026-12-04T10:00:00"),
    ("04122026", "reads as epoch seconds and as 2026-12-04 or 2026-04-12"),
    ("13042026", "reads as epoch seconds and as 2026-04-13"),
])
def test_a_date_in_digits_is_not_an_epoch(text: str, says: str) -> None:
    """``202612041000`` (2026-12-04 10:00 without its ``T``) was epoch milliseconds, 1976-06-03;
    ``04122026`` epoch seconds, 1970-02-17; ``2026120410`` the end of 2026-12-04 (Python 3.11's
    ``date.fromisoformat`` dropped the ``10``). Real epochs are read as before."""
    assert says in refused(text)
    assert parse_as_of("1796378400000") == parse_as_of("1796378400") == "2026-12-04T10:00:00.000Z"
    assert parse_as_of("1712010100") == "2024-04-01T22:21:40.000Z"  # also 1712-01-01T00:00 in digits: not 1970-2099


def test_an_iso_date_is_all_the_text() -> None:
    """``date.fromisoformat`` of Python 3.11 read any 10 characters starting with a basic date as
    that date: ``20261204xx`` was 2026-12-04 for ``show``, ``search`` and ``export`` too."""
    with pytest.raises(AsOfError, match="expected a date"):
        show_as_of("20261204xx")
    assert "is not a date" in refused("20261204xx")
    assert show_as_of("2026-W49-5") == show_as_of("20261204") == "2026-12-04T23:59:59.999Z"


def test_a_day_of_the_week_the_date_is_not_is_refused() -> None:
    """``Mon Dec 4 2026``: the 4th is a Friday, and one of the two is wrong; the weekday was dropped."""
    assert "2026-12-04 is a Friday, not a Monday" in refused("Mon Dec 4 2026")
    assert parse_as_of("Fri Dec 4 2026 10:00") == parse_as_of("Friday, 4 December 2026 10:00") == "2026-12-04T10:00:00.000Z"


@pytest.mark.parametrize("text", ["Monday Aug 2026", "Aug 2026 Mon", "8Mon 2026"])
def test_a_weekday_without_its_day_names_no_date(text: str) -> None:
    """``Monday Aug 2026`` was 2026-08-03 (the first Monday): the day the text leaves out was
    filled from the weekday, the same from either default, so it passed for a whole date."""
    assert "names no whole date" in refused(text)


# --- properties ----------------------------------------------------------------------------------
MOMENTS = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2099, 12, 30, 23, 59)).map(
    lambda d: d.replace(second=0, microsecond=0))
OFFSETS = st.integers(min_value=-12 * 4, max_value=14 * 4).map(lambda quarters: timedelta(minutes=15 * quarters))


@hsettings(max_examples=300, derandomize=True, deadline=None)
@given(MOMENTS, OFFSETS, st.sampled_from(["UTC", "GMT"]), st.sampled_from(["{h}", "{h:02d}", "{h:02d}:{m:02d}", "{h:02d}{m:02d}"]),
       st.sampled_from(["", " "]))
def test_utc_plus_any_offset_is_the_iso_offset(moment: datetime, offset: timedelta, name: str, layout: str, space: str) -> None:
    """``10:00 UTC±H[:MM]`` is the moment ``10:00±HH:MM`` names, for every offset and spelling."""
    minutes = int(offset.total_seconds()) // 60
    if "{m" not in layout and minutes % 60:  # an hour alone cannot say a quarter
        layout += ":{m:02d}"
    written = layout.format(h=abs(minutes) // 60, m=abs(minutes) % 60)
    text = f"{moment:%Y-%m-%d %H:%M} {name}{space}{'-' if minutes < 0 else '+'}{written}"
    iso = moment.replace(tzinfo=timezone(offset)).astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert parse_as_of(text) == iso


@hsettings(max_examples=300, derandomize=True, deadline=None)
@given(st.dates(min_value=date(2001, 1, 1), max_value=date(2099, 12, 31)), st.sampled_from("/.- "), st.booleans(),
       st.booleans())
def test_a_numeric_date_is_read_as_iso_or_refused(day: date, separator: str, month_first: bool, padded: bool) -> None:
    """Every day written d/m/yyyy or m/d/yyyy is read as that day when its day and month tell
    themselves apart (a day over 12, or both the same) and refused otherwise; never another day."""
    parts = (day.month, day.day) if month_first else (day.day, day.month)
    text = separator.join([*(f"{p:02d}" if padded else str(p) for p in parts), str(day.year)])
    if day.day > 12 or day.day == day.month:
        assert parse_as_of(text) == f"{day.isoformat()}T23:59:59.999Z"
    else:
        assert "does not tell the day from the month" in refused(text)


@hsettings(max_examples=200, derandomize=True, deadline=None)
@given(st.dates(min_value=date(1970, 1, 1), max_value=date(9999, 12, 30)),
       st.sampled_from(["", "Z", "+02:00", "-05:30"]), st.sampled_from(["24:00", "24:00:00", "24:00:00.000"]))
def test_the_end_of_any_day_is_the_next_days_start(day: date, zone: str, hour: str) -> None:
    nxt = (day + timedelta(days=1)).isoformat()
    try:
        expected = show_as_of(f"{nxt}T00:00{zone}")
    except AsOfError:  # the next day's start is out of range (9999-12-31 with a negative offset)
        with pytest.raises(AsOfError):
            show_as_of(f"{day.isoformat()}T{hour}{zone}")
        return
    assert show_as_of(f"{day.isoformat()}T{hour}{zone}") == parse_as_of(f"{day.isoformat()} {hour}{zone}") == expected


# --- every command and the MCP tools -------------------------------------------------------------
@pytest.mark.parametrize(("command", "text"), [
    (("recall", "drain"), "4/12/2026"), (("recall", "drain"), "2026-12-04 10:00 CEST+2"),
    (("recall", "drain"), "2026-12-04T10.5Z"), (("show", "CLASS:OspreyStore"), "2026-12-04T10.5Z"),
    (("search", "drain"), "2026-12-04T10:30.5"), (("export",), "2026-12-04 10.30"), (("show", "CLASS:OspreyStore"), "4/12/2026"),
])
def test_every_command_refuses_a_moment_in_one_line_exit_2(graph: Settings, command: tuple[str, ...], text: str) -> None:
    """``recall`` read ``4/12/2026`` (the 12th of April), ``CEST+2`` and ``10.5``; ``show``,
    ``search`` and ``export`` read ``10.5`` and ``10:30.5`` as milliseconds and wrote a refusal
    after argparse's usage, three lines or more. Now one line, exit 2, for each."""
    done = run_cli(*command, "--as-of", text, env=_env(graph))
    assert done.returncode == 2, (command, done.stdout[-500:], done.stderr[-2000:])
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("rem-cycle: "), done.stderr
    assert repr(text) in done.stderr


def test_the_commands_read_utc_plus_2_and_the_end_of_a_day(graph: Settings) -> None:
    """``recall --as-of "2026-12-04 12:00 UTC+2"`` (10:00Z, the first turn's moment) was 14:00Z and
    gave both turns; ``show --as-of 2026-12-04T24:00`` was refused."""
    env = _env(graph)
    done = run_cli("recall", "drain", "--as-of", "2026-12-04 12:00 UTC+2", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert [t["memory_id"] for t in json.loads(done.stdout)["turns"]] == ["memory:t1"]
    shown = run_cli("show", "CLASS:OspreyStore", "--as-of", "2026-12-03T24:00", env=env)
    assert shown.returncode == 1 and "not known yet as of 2026-12-04T00:00:00.000Z" in shown.stderr, shown.stderr


async def test_the_mcp_tools_refuse_a_moment_alike(graph: Settings) -> None:
    """The MCP tools read ``as_of`` as recall does: ``4/12/2026`` was the 12th of April, ``UTC+2`` two hours behind."""
    async with Client(stdio_params(graph)) as client:
        for tool, arguments in (("recall", {"query": "drain"}), ("search_nodes", {"query": "drain"}),
                                ("show_node", {"node_id": "session:s1"})):
            result = await client.call_tool(tool, {**arguments, "as_of": "4/12/2026"})
            assert result.is_error and "does not tell the day from the month" in text_of(result), (tool, text_of(result))
        result = await client.call_tool("recall", {"query": "drain", "as_of": "2026-12-04 12:00 UTC+2"})
        assert not result.is_error, text_of(result)
        assert [t["memory_id"] for t in json.loads(text_of(result))["turns"]] == ["memory:t1"]
