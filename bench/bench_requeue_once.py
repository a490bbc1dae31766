"""What a re-extraction's queueing costs now that its lines stand in for the earlier ones
(leftalone22).

    python bench/bench_requeue_once.py [--lines 2000 16000] [--repeat 20]

A queue (the JSONL file, and the table of a fresh SQLite graph) holding ``--lines`` extraction
lines of 12 other sessions (a few hundred bytes each) and the 3 lines an earlier extraction of
session ``s-again`` queued. A re-extraction of ``s-again`` queues its 3 lines again: timed (CPU
and wall, per call, the median of ``--repeat``) as the commit did it before (``append``: one more
copy each time) and as it does now (:func:`pipelines.lazy_edge.queue_superseding`: the earlier
lines for the same edges leave the queue; the file is read under the drain's lock, the table by
one ``LIKE`` scan). The ratio is against ``append`` in the same process, on the same queue. A
first extraction, and a cycle that extracts no session again, read nothing (not timed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.lazy_edge import queue_superseding  # noqa: E402
from store.backend import open_database_at  # noqa: E402
from store.lazy_queue import LazyEdgeQueue, edge_line  # noqa: E402
from store.lazy_table import LazyEdgeTable  # noqa: E402

OTHERS = [f"session-{i:02d}" for i in range(12)]


def _edge(sid: str, n: int) -> dict[str, Any]:
    return {"source": f"memory:{sid}-ref-{n}", "target": f"memory:{sid}-turn-{n}", "relationship": "REFERENCED_BY",
            "properties": {"chunk_ids": [f"{sid}:chunk:{n % 40}"], "evidence": ["x" * 200]}}


AGAIN = [_edge("s-again", n) for n in range(3)]


def _timed(call: Any, repeat: int) -> tuple[float, float]:
    """Median CPU and wall milliseconds of ``call()``."""
    cpu, wall = [], []
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        call()
        cpu.append((time.process_time() - c) * 1e3)
        wall.append((time.perf_counter() - w) * 1e3)
    return statistics.median(cpu), statistics.median(wall)


def measure(form: str, lines: int, repeat: int, scratch: Path) -> dict[str, Any]:
    """The two ways on one queue of ``form`` with ``lines`` other lines."""
    others = [edge_line(_edge(OTHERS[n % len(OTHERS)], n)) for n in range(lines)]
    if form == "file":
        sink: Any = LazyEdgeQueue(scratch / f"q{lines}" / "lazy-edges.jsonl")
        sink.path.parent.mkdir()
        sink.append_lines(others)
        db = None
    else:
        db = open_database_at(path=scratch / f"g{lines}.sqlite3", url=None)
        sink = LazyEdgeTable(db)
        sink.append_lines(others)
    sink.append(AGAIN)
    try:
        before = _timed(lambda: sink.append(AGAIN), repeat)
        now = _timed(lambda: queue_superseding(sink, AGAIN), repeat)
        after_copies = sum(1 for _ in _lines_of(sink)) - lines
    finally:
        if db is not None:
            db.close()
    return {"form": form, "lines": lines, "append_cpu_ms": before[0], "append_wall_ms": before[1],
            "supersede_cpu_ms": now[0], "supersede_wall_ms": now[1], "s_again_lines_left": after_copies}


def _lines_of(sink: Any) -> list[Any]:
    if isinstance(sink, LazyEdgeQueue):
        return [line for line in LazyEdgeQueue.read_lines(sink.path) if line.strip()]
    return sink.db.query("SELECT id FROM lazy_edges")


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print one line per form and queue size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[2000, 16000])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        for form in ("file", "table"):
            for lines in args.lines:
                r = measure(form, lines, args.repeat, Path(scratch))
                print(f"{form:5} {lines:6} other lines: append {r['append_cpu_ms']:.2f} ms CPU "
                      f"({r['append_wall_ms']:.2f} wall); superseding {r['supersede_cpu_ms']:.2f} ms CPU "
                      f"({r['supersede_wall_ms']:.2f} wall); s-again's lines left {r['s_again_lines_left']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
