"""What fencing ingest's writes with the single-flight lock costs (opsleft): the ingest phase of a
leader (every write transaction first renews the lock's row: ``LockStore.still_held``) against the
same phase unfenced, on the same Chroma rows, each into a fresh graph database, alternated in one
process. SQLite by default; ``--database-url`` for PostgreSQL (a fresh schema per run).

    python bench/bench_ingest_fence.py                          # 20,000 memories in 400 sessions
    python bench/bench_ingest_fence.py --database-url postgresql://rem@127.0.0.1:5432/rem
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_backends import Schemas  # noqa: E402
from bench.bench_ingest import load_corpus, synthetic_rows  # noqa: E402
from bench.growth import fence_summary, run_fence_bench  # noqa: E402
from config import Settings, load_settings  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from store.claims import CYCLE_LOCK, LockStore  # noqa: E402
from worker.cycle import CycleContext, ingest, open_stores  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


def _fresh(settings: Settings, schemas: Schemas | None) -> Settings:
    """``settings`` with an empty graph database: the SQLite file removed, or a new PostgreSQL schema."""
    if schemas is None:
        for path in settings.data_dir.glob("graph.sqlite3*"):
            path.unlink()
        return settings
    return load_settings(data_dir=settings.data_dir, batch_limit=settings.batch_limit, database_url=schemas.new("fence"))


async def _ingest_seconds(settings: Settings, *, fenced: bool) -> float:
    """Seconds of one ingest phase into ``settings``' (empty) graph, as a leader holding the lock
    (``fenced``) or without one."""
    stores = await open_stores(settings)
    try:
        lock = None
        if fenced:
            lock = LockStore(stores.db, owner="bench:1:fence", lease_seconds=300)
            assert lock.acquire(CYCLE_LOCK)
        ctx = CycleContext(settings=settings, stores=stores, run_id=f"bench-{uuid.uuid4().hex[:8]}", lock=lock)
        t0 = time.perf_counter()
        counts = await ingest(ctx)
        assert counts["sessions_failed"] == 0 and counts["backlog"] == 0, counts
        return time.perf_counter() - t0
    finally:
        stores.close()


async def bench(memories: int, sessions: int, rounds: int, workdir: Path, url: str | None) -> dict[str, Any]:
    configure_logging(level="warning", fmt="json")
    settings = load_settings(data_dir=workdir / "chroma-home", batch_limit=sessions)
    mem_rows, sum_rows = synthetic_rows(memories, sessions)
    await load_corpus(ChromaStore(settings), settings, mem_rows, sum_rows)
    times: dict[bool, list[float]] = {False: [], True: []}
    schemas = Schemas(url) if url is not None else None
    try:
        for _ in range(rounds):
            for fenced in (False, True):
                times[fenced].append(await _ingest_seconds(_fresh(settings, schemas), fenced=fenced))
    finally:
        if schemas is not None:
            schemas.drop()
    return fence_summary("ingest", times, url, memories=memories, sessions=sessions, rounds=rounds)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    return run_fence_bench(bench, args.memories, args.sessions, args.rounds, prefix="rem-bench-fence-", url=args.database_url)


if __name__ == "__main__":
    main()
