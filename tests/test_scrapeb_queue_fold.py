"""The queue gauges (``rem_cycle_lazy_queue_depth``, ``rem_cycle_lazy_queue_oldest_age_seconds``) fold
what was added to the queue files since the last scrape, and report what a full read of every line
reports whatever happens to the files between scrapes (scrapeb)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import example, given, settings as hsettings, strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from config import Settings
from store.lazy_queue import MAX_LINE_BYTES, DeadLetterCounter, LazyEdgeQueue, LineFold, edge_line
from worker import metrics
from worker.cycle import PHASES, Stores, run_cycle
from worker.metrics import QueueGauges, QueueSummary, add_queue_line, build_registry, summarize_queue_lines

WITHOUT_EXTRACT = tuple(phase for phase in PHASES if phase[0] != "extract")
BOUND = 40  # a per-line bound generated lines pass now and then
# Read 7 bytes at a time: most lines are split across pieces.
SMALL = LineFold(QueueSummary(), add_queue_line, max_line_bytes=BOUND, piece_bytes=7)
STAMPS = ("2026-11-29T10:00:00Z", "2026-11-29T10:00:00+00:00", "2026-11-28T09:00:00.000Z", "2026-11-30T00:00:00",
          "not a time", None, 5)


def full_read(queue: LazyEdgeQueue, bound: int = MAX_LINE_BYTES) -> QueueSummary:
    """What a scrape reported before scrapeb: every line of the live queue and of each ``.draining``
    file, read anew by the queue's reader."""

    def lines():  # noqa: ANN202 - a generator of lines
        for file in [queue.path, *queue.draining_files()]:
            try:
                yield from LazyEdgeQueue.read_lines(file, max_line_bytes=bound)
            except FileNotFoundError:
                continue

    return summarize_queue_lines(lines())


def bytes_read() -> int:
    """Bytes this process has read through ``read`` calls (the kernel's own count)."""
    return int(next(line for line in Path("/proc/self/io").read_text().splitlines() if line.startswith("rchar:")).split()[1])


# A line as a kind and a size; each gets a serial number of its own (queue lines carry their time
# and content: no two are alike).
kinds = st.tuples(st.sampled_from(("json", "padded", "junk", "blank", "blank-head", "list")), st.integers(0, 300),
                  st.sampled_from(range(len(STAMPS))))


def materialise(kind: tuple[str, int, int], serial: int) -> bytes:
    name, size, stamp = kind
    if name == "json":  # past the bound with a long ``p``: only its head is read, which does not parse
        return json.dumps({"n": serial, "timestamp": STAMPS[stamp], "p": "x" * size}).encode()
    if name == "padded":  # past the bound, and its head parses: that timestamp counts
        return b'{"timestamp":"2026-11-27T00:00:00Z"}' + b" " * 10 + str(serial).encode()
    if name == "junk":
        return f"junk {serial}".encode()
    if name == "blank":  # past the bound too, now and then: no line either way
        return b" " * size
    if name == "blank-head":  # past the bound, its head blank: today's reader does not count it
        return b" " * (BOUND + 5) + f"x{serial}".encode()
    return f"[{serial}]".encode()  # JSON but no object: counted, no timestamp


targets = st.integers(0, 2)  # the live queue, the first .draining file, the last one
appends = st.tuples(st.just("append"), targets, st.lists(kinds, max_size=12), st.booleans())
# Each step: a change to the files, and whether a scrape follows it.
steps = st.lists(st.tuples(st.one_of(
    appends, appends,  # twice as likely as any other change: files long enough to have a past
    st.tuples(st.just("cut"), targets, st.floats(0, 1)),
    st.tuples(st.just("replace"), targets, st.lists(kinds, max_size=6)),
    st.tuples(st.just("rotate")),
    st.tuples(st.just("delete"), targets),
    st.tuples(st.just("blank"), st.integers(0, 2)),
), st.booleans()), min_size=4, max_size=40)


@hsettings(max_examples=1000)
@given(steps)
# A forget's blank well before the end of what was folded, then an append (the blank stamp's case).
@example([(("append", 0, [("json", 300, 0)] * 3, True), True), (("blank", 1), False), (("append", 0, [("junk", 0, 0)], True), False)])
# A drain renames the queue, a producer starts a new one, the drain deletes its input.
@example([(("append", 0, [("json", 9, 0), ("junk", 0, 0)], False), True), (("rotate",), False),
          (("append", 0, [("list", 0, 0)], True), True), (("append", 1, [("padded", 0, 0)], True), True), (("delete", 1), False)])
def test_the_fold_reports_what_a_full_read_reports_whatever_happens_to_the_files(plan: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "QUEUE_LINES", SMALL)
        queue = LazyEdgeQueue(Path(directory) / "lazy-edges.jsonl")
        gauges = QueueGauges(queue.path)
        serial, clock = 0, 1_700_000_000 * 10**9

        def target(which: int) -> Path | None:
            files = [queue.path, *queue.draining_files()]
            chosen = files[0] if which == 0 else files[1] if which == 1 and len(files) > 1 else files[-1] if len(files) > 1 else None
            return chosen if chosen is not None and chosen.exists() else None

        def written(path: Path) -> None:
            # Each write lands in a later tick of the file system's clock (what the fold relies on,
            # as the dead-letter count does, to see a file rewritten at the same size); a blank
            # in place is left to the real clock: the stamp it replaces is what makes it seen.
            nonlocal clock
            clock += 10**9
            os.utime(path, ns=(clock, clock))

        def lines(chosen: list[tuple[str, int, int]], newline_last: bool = True) -> bytes:
            nonlocal serial
            out = []
            for number, kind in enumerate(chosen):
                serial += 1
                end = b"\n" if newline_last or number < len(chosen) - 1 else b""
                out.append(materialise(kind, serial) + end)
            return b"".join(out)

        for step, scrape in plan:
            if step[0] == "append":
                path = queue.path if step[1] == 0 else target(step[1])
                if path is not None:
                    with path.open("ab") as out:
                        out.write(lines(step[2], step[3]))
                    written(path)
            elif step[0] == "cut" and (path := target(step[1])) is not None:
                os.truncate(path, int(path.stat().st_size * step[2]))
                written(path)
            elif step[0] == "replace":
                path = queue.path if step[1] == 0 else target(step[1])
                if path is not None:
                    other = path.with_name("other")
                    other.write_bytes(lines(step[2]))
                    written(other)
                    os.replace(other, path)
            elif step[0] == "rotate":
                queue.rotate()
            elif step[0] == "delete" and (path := target(step[1])) is not None:
                path.unlink()
            elif step[0] == "blank":
                with queue.exclusive():
                    queue.blank(lambda body, pick=step[1]: zlib.crc32(body) % 3 == pick, None)
            if scrape:
                assert gauges.read() == full_read(queue, BOUND)
        assert gauges.read() == full_read(queue, BOUND)


def test_lines_past_the_real_bound_and_across_pieces_are_read_as_the_queue_reads_them(tmp_path: Path) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    gauges = QueueGauges(queue.path)
    exactly = b'{"timestamp":"2026-11-20T00:00:00Z","p":"' + b"x" * (MAX_LINE_BYTES - 43) + b'"}'
    assert len(exactly) == MAX_LINE_BYTES  # the longest line read whole
    over = b'{"timestamp":"2026-11-10T00:00:00Z"}' + b" " * (MAX_LINE_BYTES + 10) + b"tail"  # its head parses
    blank_over = b" " * (MAX_LINE_BYTES + 3000)
    queue.path.write_bytes(edge_line({"source": "a", "target": "b", "timestamp": "2026-11-25T00:00:00Z"}) + exactly + b"\n"
                           + blank_over + b"\n" + over + b"\n")
    assert gauges.read() == full_read(queue) == QueueSummary(3, "2026-11-10T00:00:00Z", metrics.parse_utc("2026-11-10T00:00:00Z"))
    with queue.path.open("ab") as out:  # a writer killed inside a line longer than the bound
        out.write(b'{"timestamp":"2026-11-01T00:00:00Z"}' + b" " * (MAX_LINE_BYTES + 1))
    assert gauges.read() == full_read(queue) and gauges.read().depth == 4
    assert gauges.read().oldest_timestamp == "2026-11-01T00:00:00Z"


def test_a_blank_in_place_then_an_append_before_the_next_scrape_is_seen(tmp_path: Path) -> None:
    """A forget blanks queue lines where they are (the file keeps its size), then a producer
    appends before the next scrape: the file grew and its last folded bytes are unchanged, which
    alone reads as an append. The blank stamp the forget replaced makes the fold start anew."""
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    queue.append([{"source": "a", "target": "memory:gone", "relationship": "R", "timestamp": "2026-11-01T00:00:00Z"},
                  {"source": "b", "target": "memory:kept", "relationship": "R", "timestamp": "2026-11-20T00:00:00Z",
                   "properties": {"p": "x" * 400}}])  # the blanked line is not among the bytes checked at the end
    gauges = QueueGauges(queue.path)
    assert gauges.read().depth == 2 and gauges.read().oldest_timestamp == "2026-11-01T00:00:00Z"
    with queue.exclusive():
        assert queue.blank(lambda body: b"memory:gone" in body, None) == 1
    queue.append([{"source": "c", "target": "memory:new", "relationship": "R", "timestamp": "2026-11-25T00:00:00Z"}])
    assert gauges.read() == full_read(queue)
    assert (gauges.read().depth, gauges.read().oldest_timestamp) == (2, "2026-11-20T00:00:00Z")


def test_scrapes_from_several_threads_end_where_a_full_read_does(tmp_path: Path) -> None:
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    gauges = QueueGauges(queue.path)
    done = threading.Event()
    errors: list[BaseException] = []

    def scrape() -> None:
        while not done.is_set():
            try:
                gauges.read()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    readers = [threading.Thread(target=scrape) for _ in range(4)]
    for reader in readers:
        reader.start()
    for n in range(300):
        queue.append([{"source": f"s{n}", "target": "memory:x", "relationship": "R"}], fsync=False)
        if n % 100 == 99:
            queue.rotate()
    done.set()
    for reader in readers:
        reader.join()
    assert not errors
    assert gauges.read() == full_read(queue) and gauges.read().depth == 300


def _samples(registry) -> dict[str, float]:  # noqa: ANN001 - a prometheus registry
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


async def test_a_scrape_reads_of_the_queue_only_what_was_appended(settings: Settings, stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before scrapeb every scrape read and parsed every line of the queue (9 MiB here, growing
    with the queue): unchanged, the files now cost a ``stat`` each; grown, the lines appended."""
    await run_cycle(settings, stores=stores, phases=WITHOUT_EXTRACT)
    monkeypatch.setattr(metrics, "SETTLE_SECONDS", 0.0)  # the database is read once, then kept
    queue = LazyEdgeQueue(settings.queue_path)
    edge = {"source": "CONCEPT:x", "target": "memory:nope", "relationship": "MENTIONED_IN", "properties": {"p": "y" * 200}}
    queue.path.write_bytes(b"".join(edge_line({**edge, "n": n}, timestamp="2026-11-20T00:00:00.000Z") for n in range(28_000)))
    queue.rotate()  # a drain's input, still waiting
    queue.path.write_bytes(b"".join(edge_line({**edge, "n": n}, timestamp="2026-11-22T00:00:00.000Z") for n in range(4_000)))
    assert queue.path.stat().st_size + queue.draining_path.stat().st_size > 8 * 2**20
    registry = build_registry(settings)
    assert _samples(registry)["rem_cycle_lazy_queue_depth"] == 32_000
    before = bytes_read()
    samples = _samples(registry)
    assert bytes_read() - before < 256 * 1024, bytes_read() - before  # unchanged
    assert samples["rem_cycle_lazy_queue_depth"] == 32_000 and samples["rem_cycle_metrics_ok"] == 1
    queue.append([{**edge, "timestamp": "2026-11-01T00:00:00.000Z"}, edge])  # a producer's append
    before = bytes_read()
    samples = _samples(registry)
    assert bytes_read() - before < 256 * 1024, bytes_read() - before
    assert samples["rem_cycle_lazy_queue_depth"] == 32_002 == full_read(queue).depth
    age = samples["rem_cycle_lazy_queue_oldest_age_seconds"]
    assert abs(age - metrics.age_seconds("2026-11-01T00:00:00.000Z", metrics.datetime.now(metrics.UTC))) < 60


def test_the_dead_letter_count_on_the_same_fold_still_counts_every_non_blank_record(tmp_path: Path) -> None:
    """The dead-letter count now goes through the same fold: a record longer than the queue's bound
    counts unless all of it is white space (a blanked record, however long), as it did."""
    queue = LazyEdgeQueue(tmp_path / "lazy-edges.jsonl")
    counter = DeadLetterCounter(queue)
    record = b'{"reason":"max-attempts","line":"{}"}\n'
    long_blanked = b" " * (MAX_LINE_BYTES + 10) + b"\n"
    long_with_a_blank_head = b" " * 4096 + b"x" * MAX_LINE_BYTES + b"\n"
    content = record + long_blanked + long_with_a_blank_head + record
    queue.dead_letter_path.write_bytes(content)
    assert counter.count() == 3 == sum(1 for part in content.split(b"\n") if part.strip())
    with queue.dead_letter_path.open("ab") as out:
        out.write(long_blanked + record + b" " * (2 * MAX_LINE_BYTES))  # the last without its newline
    assert counter.count() == 4
    with queue.dead_letter_path.open("ab") as out:
        out.write(b"x\n")
    assert counter.count() == 5
