"""What the identity index's redirects cost to read as merges accumulate, at 1× and 8× the merges.

An id folded into a node of another type by an active merge (a CONCEPT a person or the judge joined
to a PERSON) is linked where it went at its next mention (``merged-id``, sweep36): the index reads
those ids whenever it is built (``MergeStore.redirects``: every active merge, chains followed) —
once a process, and after a write that starts a new identity epoch, never on a cycle that reuses a
kept index. The figure is that read beside the index build's own read of the graph's names
(``GraphStore.node_names``), on a fresh SQLite file per size: N nodes, each with an active merge
across types into it, half of them the ``named`` rule's (which the redirects leave out). Best of 3,
in one process.

    python bench/bench_redirects.py [--merges 10000 80000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.identity import NAMED_RULE  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import GraphStore, Node  # noqa: E402
from store.merges import MergeStore  # noqa: E402


def best_ms(read: Callable[[], Any]) -> float:
    """The fastest of three runs of ``read``, in milliseconds."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def measure(merges: int, folder: Path) -> dict[str, Any]:
    """The redirects' read and the names' read on a graph of ``merges`` nodes, each merged into."""
    db = Database(folder / f"graph-{merges}.sqlite3")
    try:
        GraphStore(db).upsert_nodes([Node(f"PERSON:P{i}", "PERSON", f"P{i}") for i in range(merges)])
        with db.transaction() as conn:
            conn.executemany(
                "INSERT INTO merges(merged_id, into_id, rule, score, evidence, restore, created_at) VALUES (?,?,?,?,?,?,?)",
                [(f"CONCEPT:p{i}", f"PERSON:P{i}", NAMED_RULE if i % 2 else "manual", 1.0, "{}", "{}", "2026-12-05T00:00:00Z")
                 for i in range(merges)],
            )
        store = MergeStore(db)
        return {"merges": merges, "redirects": len(store.redirects(besides=(NAMED_RULE,))),
                "redirects_ms": round(best_ms(lambda: store.redirects(besides=(NAMED_RULE,))), 1),
                "node_names_ms": round(best_ms(GraphStore(db).node_names), 1)}
    finally:
        db.close()


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--merges", type=int, nargs=2, default=[10_000, 80_000], help="the two sizes (default 10000 80000)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rem-redirects-") as folder:
        rows = [measure(size, Path(folder)) for size in args.merges]
    for row in rows:
        print(f"merges={row['merges']:>7}  redirects={row['redirects']:>6}  read {row['redirects_ms']:7.1f} ms  "
              f"(the index's own read of the names: {row['node_names_ms']:7.1f} ms)")
    return rows


if __name__ == "__main__":
    main()
