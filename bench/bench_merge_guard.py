"""What the suppression guard costs a hand ``merge`` (suppress29, twenty-ninth session; SQLite).

A hand merge now runs inside :func:`pipelines.forget.refusing_kept_out`, which reads the node
merged into's keys before and after (its name, aliases and the spellings its claims gave:
``ProvenanceStore.node_sources``, its own points and claims) and looks the gained keys up among
the suppressions. Measured: merging a small node (4 points, 1 claim) into a hub with ``--points``
points from one anchor each (and a claim per anchor), then 8 × that, bare
(``MergeStore.merge_nodes``, as before) and guarded, alternately, each a new small node; 5000
suppressed nodes present (none named as the small nodes). Medians of ``--rounds``, in one process.

    python bench/bench_merge_guard.py [--points 2000] [--rounds 25]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import load_settings  # noqa: E402
from pipelines.forget import refusing_kept_out  # noqa: E402
from store.backend import open_database  # noqa: E402
from store.facts import NodeFacts  # noqa: E402
from store.graph import Node  # noqa: E402
from store.provenance import ClaimRow, NodePointRow, PointRow  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

HUB = "CLASS:Hub"


def _node(unit: DatabaseUnitOfWork, node_id: str, name: str, points: int) -> None:
    """``node_id`` with ``points`` points, each from its own anchor, and a claim per anchor."""
    unit.graph.upsert_nodes([Node(node_id, "CLASS", name, {})])
    anchors = [f"session:{name}-{i}" for i in range(points)]
    unit.provenance.add_node_points(NodePointRow(node_id, PointRow(a, f"memory:{a}-t0", f"{a}:chunk:0", name), node_id) for a in anchors)
    unit.provenance.add_claims(ClaimRow(node_id, a, node_id, NodeFacts.of(description=name), name=name) for a in anchors)


def merges(points: int, rounds: int) -> tuple[float, float]:
    """Median ms of a bare and of a guarded merge into a hub of ``points`` points."""
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(load_settings(data_dir=Path(tmp)))
        try:
            unit = DatabaseUnitOfWork(db)
            with unit.transaction():
                _node(unit, HUB, "Hub", points)
                for n in range(5000):
                    unit.suppressions.suppress(f"CLASS:Gone{n}", label="CLASS", name=f"Gone{n}", keys=(f"gone{n}",), anchors=())
                for r in range(2 * rounds):
                    _node(unit, f"CLASS:Leaf{r}", f"Leaf{r}", 4)
            bare, guarded = [], []
            for r in range(2 * rounds):
                leaf = f"CLASS:Leaf{r}"
                start = time.perf_counter()
                if r % 2:
                    refusing_kept_out(unit, [HUB], lambda: unit.merges.merge_nodes(leaf, HUB, rule="manual"), what="merge")
                    guarded.append(time.perf_counter() - start)
                else:
                    unit.merges.merge_nodes(leaf, HUB, rule="manual")
                    bare.append(time.perf_counter() - start)
            return statistics.median(bare) * 1000, statistics.median(guarded) * 1000
        finally:
            db.close()


def main(argv: list[str] | None = None) -> None:
    """Print bare and guarded merge medians at ``--points`` and 8× ``--points``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args(argv)
    configure_logging(level="error", fmt="json")  # the small nodes' anchors are not in the graph: culled edges, each said
    for points in (args.points, 8 * args.points):
        bare, guarded = merges(points, args.rounds)
        print(f"hub of {points:>6} points: merge {bare:.2f} ms bare, {guarded:.2f} ms guarded ({guarded / bare:.2f}x)")


if __name__ == "__main__":
    main()
