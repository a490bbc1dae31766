"""The big-session fast paths give what the code they replaced gave (bench/RESULTS.md "A big
session costs less CPU"): sorting points by their attribute key is ``order=True``'s order, the
export's point text is ``json.dumps``'s, and ``store.names.plain`` of ASCII text is its NFKD reading."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from hypothesis import given, strategies as st

from pipelines.export import _point_json
from pipelines.extract.reduce import POINT_ORDER, Point
from store.names import QUOTES as _QUOTES, plain as _plain
from store.provenance import POINT_ROW_ORDER, PointRow

# Few distinct values, so that points often share their first fields and later ones decide.
_FIELD = st.sampled_from(["", "a", "b", "memory:x", "é", "\x00", "Z"])


def _sorted_or_error(items: list[Any], **key: Any) -> list[Any] | type[Exception]:
    try:
        return sorted(items, **key)
    except TypeError as exc:
        return type(exc)


@given(st.lists(st.builds(Point, _FIELD, _FIELD, _FIELD, _FIELD)))
def test_the_point_key_sorts_as_the_dataclass_order(points: list[Point]) -> None:
    assert sorted(points, key=POINT_ORDER) == sorted(points)


@given(st.lists(st.builds(PointRow, _FIELD, _FIELD, _FIELD, _FIELD, st.one_of(st.none(), _FIELD))))
def test_the_point_row_key_sorts_as_the_dataclass_order(rows: list[PointRow]) -> None:
    # None beside a time where the other fields tie cannot be ordered: both refuse it alike.
    assert _sorted_or_error(rows, key=POINT_ROW_ORDER) == _sorted_or_error(rows)


_JSON_VALUE = st.one_of(st.none(), st.text(), st.integers(), st.floats(allow_nan=False), st.booleans(), st.lists(st.text(), max_size=2))


@given(st.one_of(
    st.builds(lambda p, at: {**p.as_dict(), "observed_at": at}, st.builds(PointRow, st.text(), st.text(), st.text(), st.text()),
              st.one_of(st.none(), st.text())),
    st.dictionaries(st.text(), _JSON_VALUE, max_size=4),
))
def test_a_point_is_written_as_json_dumps_writes_it(point: dict[str, Any]) -> None:
    assert _point_json(point) == json.dumps(point, ensure_ascii=False, sort_keys=True, indent=2)


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_plain_of_ascii_text_is_its_nfkd_reading(text: str) -> None:
    decomposed = unicodedata.normalize("NFKD", text)
    assert _plain(text) == "".join(c for c in decomposed if not unicodedata.combining(c)).strip().strip(_QUOTES)
