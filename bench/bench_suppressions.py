"""What ``forget --node``'s suppressions cost an extraction commit (SQLite).

Every commit now asks the ``suppression_keys`` table about its own nodes' keys
(:func:`pipelines.extract.commit.drop_suppressed`) before identity resolution. Measured: that
look-up for a session of 300 CONCEPT nodes (two keys of two words each, so each is also asked
under the four types the ``named`` rule makes one thing with a CONCEPT), with no suppression, N and
8 × N suppressed nodes (three keys each), best of 5, in one process. The cost must not grow with N.

    python bench/bench_suppressions.py [--nodes 5000]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.growth import at_scales  # noqa: E402
from pipelines.extract.commit import drop_suppressed  # noqa: E402
from pipelines.extract.reduce import ReducedNode, ReducedSession  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import GraphStore  # noqa: E402
from store.suppressions import SuppressionStore  # noqa: E402

SESSION = ReducedSession("s", "", tuple(
    ReducedNode(f"CONCEPT:thing {i}", "CONCEPT", f"Thing {i}", "", (f"T {i}",), 0.9, (), ()) for i in range(300)), (), ())


def look_up(db: Database, scale: int, *, nodes: int) -> float:
    """Best of 5 seconds of one look-up with ``scale`` × ``nodes`` nodes kept out (none the session names)."""
    store, graph = SuppressionStore(db), GraphStore(db)
    with db.transaction():
        for n in range(scale * nodes):
            store.suppress(f"PERSON:p{n}", label="PERSON", name=f"p{n}", keys=(f"p{n}", f"q{n}", f"r{n}"), anchors=(f"session:s{n}",))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        _, dropped = drop_suppressed(SESSION, store, graph)
        best = min(best, time.perf_counter() - start)
        assert dropped == 0
    return best


def main(argv: list[str] | None = None) -> None:
    """Print the per-commit look-up at 0, ``--nodes`` and 8× ``--nodes`` suppressed nodes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    n = parser.parse_args(argv).nodes
    base, *scaled = at_scales(None, partial(look_up, nodes=n), scales=(0, 1, 8))
    for count, took in zip((n, 8 * n), scaled, strict=True):
        print(f"{count:>7} suppressed: {took * 1000:.2f} ms per commit ({took / base:.2f}x the look-up with none, {base * 1000:.2f} ms)")


if __name__ == "__main__":
    main()
