"""Fuzzing the lazy-edge queue: whatever a producer writes, the drain never crashes, counts every
line and dead-letters what can never link with a reason; memory stays bounded by the line limit."""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from config import Settings
from pipelines.drain import MalformedLine, QueuedEdge, parse_line
from store.graph import dumps
from store.ids import MAX_NODE_ID_LENGTH, normalize_graph_node_id
from store.lazy_queue import MAX_LINE_BYTES, LazyEdgeQueue, OversizedLine
from tests.lazy_fixtures import add_concepts, drain, queue_of, read_jsonl
from worker.cycle import Stores

REASONS = {"malformed-json", "invalid-edge", "line-too-long"}

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=25,
)
node_ids = st.one_of(
    st.sampled_from(["CONCEPT:a", "memory:m1", "MEMORY:m1", "session:s-1", "SESSION:s-1", "memory:", ":", "x" * 600,
                     "memory:../../etc/passwd", "CONCEPT:\x00nul", "CONCEPT:bad\udc80", " CONCEPT:pad", ""]),
    st.text(max_size=40),
    json_values,
)
edge_records = st.fixed_dictionaries(
    {"source": node_ids, "target": node_ids, "relationship": st.one_of(st.sampled_from(["RELATES_TO", "", " X", "A\nB"]), json_values)},
    optional={"weight": json_values, "properties": json_values, "attempts": json_values, "justification": json_values,
              "timestamp": json_values},
)


def nested(depth: int) -> bytes:
    return b'{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"R","properties":' + b'{"k":' * depth + b"1" + b"}" * depth + b"}"


def deep_dict(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


raw_lines = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    edge_records.map(lambda r: json.dumps(r, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    st.integers(min_value=1, max_value=200_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(min_value=1, max_value=100_000).map(nested),
    st.sampled_from([b'{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"R","weight":NaN}',
                     b'{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"R","properties":{"x":Infinity}}',
                     b'{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"R","properties":{"x":"\\ud800"}}',
                     b'{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"R","weight":1e999}']),
)


@hsettings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_lines)
def test_parse_line_classifies_every_line_and_accepts_only_storable_edges(raw: bytes) -> None:
    result = parse_line(raw)
    if isinstance(result, MalformedLine):
        assert result.reason in REASONS and result.detail  # explained
        return
    assert isinstance(result, QueuedEdge)
    edge = result.edge
    for node_id in (edge.source, edge.target):
        assert normalize_graph_node_id(node_id) == node_id and len(node_id) <= MAX_NODE_ID_LENGTH
    assert isinstance(edge.relationship, str) and 0 < len(edge.relationship) <= 128
    assert edge.weight == edge.weight and abs(edge.weight) != float("inf")
    json.loads(dumps(edge.properties).encode("utf-8"))  # what the graph stores is valid JSON, UTF-8


def test_ids_over_the_limit_or_with_forbidden_characters_are_dead_letters_with_a_clear_reason() -> None:
    cases = {
        "x" * (MAX_NODE_ID_LENGTH + 1): "the limit is 512",
        "CONCEPT:tab\there": "control characters",
        "CONCEPT:lone\udc80": "lone surrogates",
        "memory:../etc/passwd": "expected 1-200 characters",
        "session:" + "s" * 201: "expected 1-200 characters",
    }
    for bad, why in cases.items():
        line = json.dumps({"source": bad, "target": "CONCEPT:b", "relationship": "R"}).encode()
        result = parse_line(line)
        assert isinstance(result, MalformedLine) and result.reason == "invalid-edge", bad
        assert why in result.detail, (why, result.detail)


def test_read_lines_bounds_memory_for_a_huge_line(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    good = b'{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"R"}\n'
    with path.open("wb") as handle:
        handle.write(good)
        handle.write(b'{"source":"' + b"x" * (50 * 1024 * 1024) + b'"}\n')  # one 50 MB line
        handle.write(good)
        handle.write(b"y" * (MAX_LINE_BYTES + 10))  # an over-long last line without a newline
    tracemalloc.start()
    try:
        lines = list(LazyEdgeQueue.read_lines(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [type(line) for line in lines] == [bytes, OversizedLine, bytes, OversizedLine]
    assert lines[1].size == 50 * 1024 * 1024 + 13 and lines[3].size == MAX_LINE_BYTES + 10
    assert lines[0] == lines[2] == good
    assert peak < 4 * MAX_LINE_BYTES, f"peak {peak} bytes while reading a 50 MB line"


def nasty_lines(rng: random.Random, count: int) -> tuple[list[bytes], int]:
    """``count`` lines, a share of them resolvable (CONCEPT:c0..c9 edges); returns (lines, good)."""
    lines, good = [], 0
    for i in range(count):
        kind = rng.randrange(8)
        if kind == 0:
            lines.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80))).replace(b"\n", b" ") + b"\n")
        elif kind == 1:
            lines.append(b"[" * 50_000 + b"\n")
        elif kind == 2:
            lines.append(json.dumps({"source": ["CONCEPT:c0"], "target": 7, "relationship": None}).encode() + b"\n")
        elif kind == 3:
            lines.append(json.dumps({"source": "CONCEPT:c1", "target": "x" * 700, "relationship": "R"}).encode() + b"\n")
        elif kind == 4:
            lines.append(b'{"source":"CONCEPT:c1","target":"CONCEPT:c2","relationship":"R","properties":{"v":NaN}}\n')
        else:
            good += 1
            a, b = rng.sample(range(10), 2)
            record: dict[str, Any] = {"source": f"CONCEPT:c{a}", "target": f"CONCEPT:c{b}", "relationship": "RELATES_TO",
                                      "properties": {"i": i, "deep": deep_dict(rng.randrange(1, 30))}}
            lines.append(json.dumps(record).encode() + b"\n")
    return lines, good


async def test_drain_of_fuzzed_queue_counts_every_line_and_never_crashes(settings: Settings, stores: Stores) -> None:
    add_concepts(stores.graph, *[f"c{n}" for n in range(10)])
    rng = random.Random(6)
    lines, good = nasty_lines(rng, 1500)
    queue = queue_of(settings)
    queue.append_lines(lines)
    with queue.path.open("ab") as handle:  # a 50 MB line in the middle of a producer's output
        handle.write(b'{"source":"CONCEPT:c0","target":"CONCEPT:c1","relationship":"R","properties":{"blob":"'
                     + b"z" * (50 * 1024 * 1024) + b'"}}\n')
    queue.append_lines(lines[:10])
    good += sum(1 for line in lines[:10] if b'"RELATES_TO"' in line)
    tracemalloc.start()
    try:
        stats = await drain(settings, stores)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    total = len(lines) + 11
    assert stats.total_lines == total
    assert stats.succeeded + stats.failed + stats.skipped_malformed == total
    assert stats.succeeded == good and stats.failed == 0
    dead = read_jsonl(queue.dead_letter_path)
    assert len(dead) == stats.dead_lettered == stats.skipped_malformed == total - good
    assert {d["reason"] for d in dead} == REASONS
    assert all(d["detail"] for d in dead)
    (huge,) = [d for d in dead if d["reason"] == "line-too-long"]
    assert f"the limit is {MAX_LINE_BYTES} bytes" in huge["detail"] and len(huge["line"]) <= 1024
    assert peak < 40 * 1024 * 1024, f"drain peak {peak / 1e6:.1f} MB with a 50 MB line queued"
    assert stores.db.integrity_check() == "ok"
