"""What looking for nodes stored before audit28's byte cut costs an extraction commit (SQLite).

Every commit asks :func:`pipelines.extract.commit.before_cut` whether a node it writes was stored
under the longer id its name made before semantic ids were cut to ``MAX_SEMANTIC_ID_BYTES``
bytes. Measured, for a session of 300 nodes (a name and an alias each, names never seen before
so nothing is cached), in a graph of N and 8 × N nodes, best of 5, in one process, beside the
commit's suppression look-up (:func:`pipelines.extract.commit.drop_suppressed`, the same nodes)
as the baseline: ids of the default types (none is cut: no query at all), and ids of a long
non-ASCII type (each cut: one look-up of the uncut ids by primary key, none found). The cost must
not grow with N.

    python bench/bench_before_cut.py [--nodes 5000]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.growth import at_scales  # noqa: E402
from pipelines.extract.commit import Candidate, before_cut, drop_suppressed  # noqa: E402
from pipelines.extract.model import semantic_node_id, uncut_semantic_id  # noqa: E402
from pipelines.extract.reduce import ReducedNode, ReducedSession  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import GraphStore, Node  # noqa: E402
from store.merges import MergeStore  # noqa: E402
from store.suppressions import SuppressionStore  # noqa: E402

_LONG_TYPE = "\U00020000" * 64  # 64 letters of 4 bytes: a 300-letter name of them is cut
_fresh = itertools.count()


def _session(node_type: str, letter: str) -> tuple[list[Candidate], ReducedSession]:
    """300 nodes of ``node_type`` under names never used before (the id caches are cold)."""
    run = next(_fresh)
    names = [(f"{letter * 280}{run:08d}{i:06d}", f"alias {run} {i}") for i in range(300)]
    nodes = [ReducedNode(str(semantic_node_id(node_type, n)), node_type, n, "", (a,), 0.9, (), ()) for n, a in names]
    return [Candidate(n.id, n.type, n.name, n.aliases) for n in nodes], ReducedSession("s", "", tuple(nodes), (), ())


def measure(db: Database, scale: int, *, nodes: int) -> dict[str, float]:
    """Best of 5 seconds of each look-up in a graph of ``scale`` × ``nodes`` CLASS nodes."""
    graph, merges, suppressions = GraphStore(db), MergeStore(db), SuppressionStore(db)
    with db.transaction():
        graph.upsert_nodes(Node(f"CLASS:Thing{i}", "CLASS", f"Thing{i}") for i in range(scale * nodes))
    best: dict[str, float] = {}
    for label, node_type, letter in (("default type", "CONCEPT", "a"), ("cut ids", _LONG_TYPE, "\U00020001")):
        for _ in range(5):
            candidates, session = _session(node_type, letter)
            assert all(uncut_semantic_id(c.type, c.name) != c.id for c in candidates) == (label == "cut ids")
            start = time.perf_counter()
            joins = before_cut(candidates, graph, blocked=merges.blocked_pairs)
            took = time.perf_counter() - start
            assert joins == {}
            best[label] = min(best.get(label, float("inf")), took)
            start = time.perf_counter()
            drop_suppressed(session, suppressions, graph)
            best["suppression look-up"] = min(best.get("suppression look-up", float("inf")), time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    """Print each look-up per commit at ``--nodes`` and 8× ``--nodes`` graph nodes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    n = parser.parse_args(argv).nodes
    for count, best in zip((n, 8 * n), at_scales(None, partial(measure, nodes=n)), strict=True):
        base = best["suppression look-up"]
        for label in ("default type", "cut ids"):
            print(f"{count:>7} nodes, {label}: {best[label] * 1000:.2f} ms per commit "
                  f"({best[label] / base:.2f}x the suppression look-up, {base * 1000:.2f} ms)")


if __name__ == "__main__":
    main()
