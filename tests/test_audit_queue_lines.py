"""Queue lines any producer can write (the format is a public interface) that must never stop the
drain, ``status`` or ``/metrics``: numbers past a float or past Python's digit limit, nesting past
the parser's depth. Both queue forms, both engines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from config import Settings
from store.db import Database
from tests.conftest import run_cli
from tests.lazy_fixtures import add_concepts, drain, edge_count, queue_of, read_jsonl, table_of
from worker.cycle import Stores
from worker.metrics import build_registry

GOOD = b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R"}'
# Valid JSON, each: a weight no float can hold, an integer past Python's 4,300-digit limit.
HUGE_WEIGHT = b'{"source": "CONCEPT:a", "target": "CONCEPT:c", "relationship": "R", "weight": 1' + b"0" * 400 + b"}"
HUGE_NUMBER = b'{"source": "CONCEPT:a", "target": "CONCEPT:d", "relationship": "R", "properties": {"n": 1' + b"0" * 5000 + b"}}"
DEEP = b'{"source": "CONCEPT:a", "target": "CONCEPT:e", "relationship": "R", "properties": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"


def _dead_table(db: Database) -> list[tuple[str, str]]:
    return [(r["reason"], r["line"][:60]) for r in db.query("SELECT reason, line FROM lazy_edges_dead ORDER BY id")]


@pytest.mark.both_backends
async def test_numbers_past_a_float_or_pythons_digit_limit_are_dead_letters_not_a_poison(settings: Settings, stores: Stores) -> None:
    """Before: parse_line raised OverflowError (the weight) or ValueError (the digit limit) out of
    the drain, so every drain — and every cycle's drain phase — failed on the line for ever, the good
    lines behind it never linked."""
    add_concepts(stores.graph, "a", "b", "c", "d")
    queue_of(settings).path.parent.mkdir(parents=True, exist_ok=True)
    queue_of(settings).path.write_bytes(b"\n".join([HUGE_WEIGHT, HUGE_NUMBER, GOOD]) + b"\n")
    table_of(stores).append_lines([HUGE_WEIGHT, HUGE_NUMBER, GOOD])
    stats = await drain(settings, stores, table=table_of(stores))
    assert (stats.succeeded, stats.dead_lettered, stats.failed) == (2, 4, 0)
    assert edge_count(stores.graph, "R") == 1
    file_dead = [(record["reason"], record["detail"][:51]) for record in read_jsonl(queue_of(settings).dead_letter_path)]
    assert file_dead == [
        ("invalid-edge", "weight must be a finite number, got '10000000000000"),
        ("malformed-json", "not JSON we accept: Exceeds the limit (4300 digits)"),
    ]
    assert [reason for reason, _ in _dead_table(stores.db)] == ["invalid-edge", "malformed-json"]
    assert table_of(stores).depth() == 0 and not queue_of(settings).path.exists()


def test_enqueue_names_such_lines_instead_of_a_traceback(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    edges = tmp_path / "edges.jsonl"
    edges.write_bytes(b"\n".join([GOOD, HUGE_WEIGHT, HUGE_NUMBER]) + b"\n")
    done = run_cli("enqueue", str(edges), env={"REM_DATA_DIR": str(data)})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        "  line 2: invalid-edge: weight must be a finite number, got '1" + "0" * 39 + "'",
        "  line 3: malformed-json: Exceeds the limit (4300 digits) for integer string conversion: value has 5001 digits; "
        "use sys.set_int_max_str_digits() to increase the limit",
        "rem-cycle: 2 of 3 lines rejected; nothing was queued",
    ]
    assert not (data / "lazy-edges.jsonl").exists()


async def test_a_line_nested_too_deeply_never_breaks_status_or_metrics(settings: Settings, stores: Stores) -> None:
    """Before: ``status`` ended in a RecursionError traceback and every ``/metrics`` scrape was a
    500 until a drain took the line (up to REM_INTERVAL_SECONDS later)."""
    queue_of(settings).path.write_bytes(DEEP + b"\n" + GOOD[:-1] + b', "timestamp": "2026-11-30T10:00:00.000Z"}\n')
    text = generate_latest(build_registry(settings)).decode()
    assert "rem_cycle_lazy_queue_depth 2.0" in text
    done = run_cli("status", "--json", env={"REM_DATA_DIR": str(settings.data_dir)})
    assert done.returncode == 0, done.stderr[-3000:]
    queue = json.loads(done.stdout)["queue"]
    assert (queue["depth"], queue["oldest_timestamp"]) == (2, "2026-11-30T10:00:00.000Z")
    add_concepts(stores.graph, "a", "b")
    stats = await drain(settings, stores)
    assert (stats.succeeded, stats.dead_lettered) == (1, 1)
    assert read_jsonl(queue_of(settings).dead_letter_path)[0]["reason"] == "malformed-json"
