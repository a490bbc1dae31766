"""Graph node id normalisation and validation (DESIGN §3)."""

import pytest

from store.ids import (
    InvalidIdError,
    normalize_graph_node_id,
    row_kind,
    row_suffix,
    validate_row_id,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("MEMORY:x", "memory:x"),
        ("memory:x", "memory:x"),
        ("Memory:AbC-1", "memory:AbC-1"),
        ("SESSION:Sess.42", "session:Sess.42"),
        ("sEsSiOn:s:with:colons", "session:s:with:colons"),
        ("CONCEPT:Graph", "CONCEPT:Graph"),
        ("CLASS:LazyEdgeQueue", "CLASS:LazyEdgeQueue"),
        ("AGENT:claude", "AGENT:claude"),
        ("plain-id", "plain-id"),
    ],
)
def test_normalisation(raw: str, expected: str) -> None:
    assert normalize_graph_node_id(raw) == expected


@pytest.mark.parametrize(
    "bad",
    ["", " memory:x", "memory:x ", "memory:", "memory:a b", "memory:../etc", "session:" + "x" * 201,
     "CONCEPT:" + "y" * 600, "CONCEPT:a\nb", "CONCEPT:\x00", 42, None],
)
def test_invalid_ids_rejected_with_clear_error(bad: object) -> None:
    with pytest.raises(InvalidIdError, match="invalid"):
        normalize_graph_node_id(bad)  # type: ignore[arg-type]


def test_row_helpers() -> None:
    assert row_kind("memory:a") == "memory"
    assert row_kind("SESSION:a") == "session"
    assert row_kind("CONCEPT:a") is None
    assert row_kind("memoryless") is None
    assert row_suffix("memory:a:b") == "a:b"
    assert validate_row_id("sess-2026-11-10-f805d4-t0007") == "sess-2026-11-10-f805d4-t0007"
