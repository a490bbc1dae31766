"""What fencing finalize's community write with the single-flight lock costs (fencerest): a
detection of the graph's communities (:func:`worker.knowledge.refresh_communities`, what finalize
runs when one is due) written through a unit fenced with the lock (``LockStore.still_held`` first
in its transaction) against the same detection unfenced, alternated in one process on one graph.
Each round first changes a few edges, so every detection writes something. SQLite by default;
``--database-url`` for PostgreSQL (a fresh schema, dropped after).

    python bench/bench_finalize_fence.py                      # 20,000 nodes, 60,000 edges
    python bench/bench_finalize_fence.py --database-url postgresql://rem@127.0.0.1:5432/rem
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_backends import Schemas  # noqa: E402
from bench.growth import fence_summary, run_fence_bench  # noqa: E402
from config import load_settings  # noqa: E402
from store.backend import open_database  # noqa: E402
from store.claims import CYCLE_LOCK, LockStore  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import Edge, GraphStore, Node  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.knowledge import refresh_communities  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


def _graph(db: Database, nodes: int, edges: int, rng: random.Random) -> None:
    """``nodes`` CLASS nodes in clusters of 50, ``edges`` edges mostly inside a cluster."""
    graph = GraphStore(db)
    graph.upsert_nodes(Node(f"CLASS:n{i}", "CLASS", f"n{i}") for i in range(nodes))
    graph.link_nodes(_edges(nodes, edges, rng))


def _edges(nodes: int, count: int, rng: random.Random) -> list[Edge]:
    found: dict[tuple[int, int], Edge] = {}
    while len(found) < count:
        a = rng.randrange(nodes)
        b = a - a % 50 + rng.randrange(50) if rng.random() < 0.95 else rng.randrange(nodes)
        if a != b:
            found[(a, b)] = Edge(f"CLASS:n{a}", f"CLASS:n{b}", "DEPENDS_ON", 1.0)
    return list(found.values())


async def bench(nodes: int, edges: int, rounds: int, workdir: Path, url: str | None) -> dict[str, Any]:
    configure_logging(level="warning", fmt="json")
    schemas = Schemas(url) if url is not None else None
    settings = load_settings(data_dir=workdir, **({"database_url": schemas.new("ffence")} if schemas else {}))
    db = open_database(settings)
    rng = random.Random(7)
    try:
        _graph(db, nodes, edges, rng)
        lock = LockStore(db, owner="bench:1:fence", lease_seconds=300)
        assert lock.acquire(CYCLE_LOCK)
        fenced_unit = DatabaseUnitOfWork(db, fence=partial(lock.still_held, CYCLE_LOCK))
        await refresh_communities(db)  # the first detection writes every community
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            for fenced in (False, True):
                GraphStore(db).link_nodes(_edges(nodes, 200, rng))  # a little changed since the last detection
                t0 = time.perf_counter()
                await refresh_communities(db, unit=fenced_unit if fenced else None)
                times[fenced].append(time.perf_counter() - t0)
    finally:
        db.close()
        if schemas is not None:
            schemas.drop()
    return fence_summary("detection", times, url, nodes=nodes, edges=edges, rounds=rounds)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    return run_fence_bench(bench, args.nodes, args.edges, args.rounds, prefix="rem-bench-ffence-", url=args.database_url)


if __name__ == "__main__":
    main()
