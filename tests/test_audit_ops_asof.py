"""``--as-of`` at the edges of the calendar (operator audit): a time that is a valid ISO 8601
string but lies outside what UTC can hold after its offset is applied is a usage error (exit 2, one
line), never a traceback; a date written in ISO 8601's basic form means the end of that day, as the
extended form does."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.asof import AsOfError, parse_as_of
from tests.conftest import run_cli


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00"])
def test_a_time_beyond_utc_after_its_offset_is_an_as_of_error(value: str) -> None:
    with pytest.raises(AsOfError, match="out of range"):
        parse_as_of(value)


def test_a_basic_form_date_is_the_end_of_that_day_as_the_extended_form() -> None:
    assert parse_as_of("20261115") == parse_as_of("2026-11-15") == "2026-11-15T23:59:59.999Z"


@pytest.mark.parametrize("command", [["export"], ["show", "CLASS:X"], ["search", "x"]])
def test_an_out_of_range_as_of_on_the_command_line_exits_2_with_one_line(tmp_path: Path, command: list[str]) -> None:
    done = run_cli(*command, "--as-of", "9999-12-31T23:59:59-05:00", env={"REM_DATA_DIR": str(tmp_path / "d")})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].endswith("is out of range: a moment must fall within the years 1-9999 in UTC")
    assert not (tmp_path / "d").exists()
