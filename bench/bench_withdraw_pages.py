"""What the queue table's withdrawal holds in memory as the queue grows (seventeenth session).

    python bench/bench_withdraw_pages.py [--rows 2500 20000] [--baseline-ref b487c5c]

A queue table (a fresh SQLite graph) of ``--rows`` extraction lines of 12 sessions, each line a
few hundred bytes; a retraction of 10 of them withdraws their lines. Past 8 anchors the filter is
the text every extraction line holds (``pipelines.lazy_edge.ExtractionLines.filters``), so every
row is a candidate. Timed (CPU) and, on another copy, traced (``tracemalloc``: the peak of Python
allocations during the call) for ``LazyEdgeTable.withdraw`` as it is now — a page of ``APPEND_BATCH_ROWS`` rows at a time
— and as it was at ``--baseline-ref`` (loaded from git into this process: every candidate row at
once), each on its own copy of the same table.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_extract_quality import baseline_module  # noqa: E402
from pipelines.lazy_edge import ExtractionLines  # noqa: E402
from store.backend import open_database_at  # noqa: E402
from store.lazy_queue import edge_line  # noqa: E402
from store.lazy_table import LazyEdgeTable  # noqa: E402

SESSIONS = [f"session-{i:02d}" for i in range(12)]


def queue_line(n: int) -> str:
    """The ``n``-th extraction line: a turn's ``REFERENCED_BY`` edge of one of the 12 sessions."""
    sid = SESSIONS[n % len(SESSIONS)]
    return edge_line({
        "source": f"memory:{sid}-turn-{n}", "target": f"memory:{sid}-ref-{n}", "relationship": "REFERENCED_BY",
        "properties": {"sessionId": sid, "chunk_ids": [f"{sid}:chunk:{n % 40}"], "note": "x" * 200},
    }).decode().rstrip("\n")


def one_way(graph: Path, table_class: Any, *, traced: bool) -> dict[str, float]:
    """Withdraw 10 of the 12 sessions' lines from the table in ``graph`` with ``table_class``: its
    time, or (``traced``) its peak of Python allocations — tracing slows the call several times."""
    taken = ExtractionLines.union([ExtractionLines.of(sid) for sid in SESSIONS[:10]])
    db = open_database_at(path=graph, url=None)
    try:
        if traced:
            tracemalloc.start()
        started = time.process_time()
        withdrawn = table_class(db).withdraw(taken.filters, taken.matches)
        seconds = time.process_time() - started
        if traced:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return {"withdrawn": withdrawn, "peak_mb": peak / 1e6}
    finally:
        db.close()
    return {"withdrawn": withdrawn, "ms": seconds * 1000}


def measure(rows: int, baseline: Any) -> dict[str, Any]:
    """Both ways on copies of one table of ``rows`` lines."""
    with tempfile.TemporaryDirectory(prefix="bench-withdraw-") as scratch:
        source = Path(scratch) / "source.sqlite3"
        db = open_database_at(path=source, url=None)
        try:
            LazyEdgeTable(db).append_lines(queue_line(n) for n in range(rows))
        finally:
            db.close()
        results: dict[str, dict[str, float]] = {"pages": {}, "baseline": {}}
        for traced in (False, True):
            for name, table_class in (("pages", LazyEdgeTable), ("baseline", baseline.LazyEdgeTable)):
                copy = Path(scratch) / f"{name}-{traced}.sqlite3"
                shutil.copy(source, copy)
                results[name].update(one_way(copy, table_class, traced=traced))
        assert results["pages"]["withdrawn"] == results["baseline"]["withdrawn"]
        return {"rows": rows, **results}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[2500, 20000])
    parser.add_argument("--baseline-ref", default="b487c5c", help="git ref of store/lazy_table.py to compare with")
    args = parser.parse_args(argv)
    baseline = baseline_module(args.baseline_ref, "store/lazy_table.py")
    print("| rows | withdrawn | pages: peak MB, ms | baseline: peak MB, ms |")
    print("| --- | --- | --- | --- |")
    for rows in args.rows:
        r = measure(rows, baseline)
        p, b = r["pages"], r["baseline"]
        print(f"| {rows:,} | {p['withdrawn']:,} | {p['peak_mb']:.1f}, {p['ms']:.0f} | {b['peak_mb']:.1f}, {b['ms']:.0f} |")


if __name__ == "__main__":
    main()
