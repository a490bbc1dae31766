"""What a stored text claim costs the map per chunk (textclaim), on SQLite and PostgreSQL.

With ``REM_SHARED_EXTRACT`` a unit about to call the extractor claims its words in ``text_claims``
(one transaction: the answer check and the claim) and deletes the claim when the call ends (a
second): two round trips a chunk extracted (pipelines/extract/map.py, store/claims.py). Measured in
one process, best of ``--repeat`` (the two interleaved): a session of ``--chunks`` chunks of new text through the real map with the
``heuristic`` extractor (a call of well under a millisecond: the worst case for the overhead),
without text claims (the baseline, a lone worker) and with them (no other worker holding any). And
the same with an extractor that takes ``--call-ms`` per call (a fast model), ``--concurrency`` at a
time, where the overhead is what a worker with a model pays. And the claim and its landing alone, one
chunk after another (``claim + land``): the round trips' own time per chunk.

    python bench/bench_text_claims.py [--chunks 200] [--call-ms 200] [--repeat 5] [--postgres-url URL]

``--postgres-url`` (or REM_TEST_POSTGRES_URL): also on PostgreSQL, in a schema made and dropped here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import load_settings  # noqa: E402
from pipelines.extract.heuristic import HeuristicExtractor  # noqa: E402
from pipelines.extract.map import map_units  # noqa: E402
from pipelines.extract.model import ExtractorReply, WorkUnit  # noqa: E402
from pipelines.extract.units import SourceTurn, plan_units  # noqa: E402
from store.backend import open_database_at  # noqa: E402
from store.chunks import ChunkResultStore  # noqa: E402
from store.claims import TextClaimStore, worker_owner  # noqa: E402

BUDGET = 150  # tokens: one 300-byte turn a chunk


class SlowExtractor(HeuristicExtractor):
    """The heuristic extractor, each call taking ``seconds`` more (a model's latency)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    async def extract(self, unit: WorkUnit) -> ExtractorReply:
        await anyio.sleep(self.seconds)
        return await super().extract(unit)


def turns(sid: str, count: int, word: str) -> list[SourceTurn]:
    return [SourceTurn(f"{sid}-m{i:05d}", f"Turn {i:05d} talks about the {word}Policy{i} class. ".ljust(300, "x"), "user")
            for i in range(count)]


@contextmanager
def database(engine: str, work: Path, server: str) -> Iterator[Any]:
    """A fresh graph database: a SQLite file, or a PostgreSQL schema dropped afterwards."""
    if engine == "sqlite":
        db = open_database_at(path=work / "graph.sqlite3", url=None)
        try:
            yield db
        finally:
            db.close()
        return
    import psycopg

    from store.postgres import close_pools

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in server else "?"
    db = open_database_at(path=work / "unused", url=f"{server}{separator}options={quote(f'-csearch_path={schema}')}")
    try:
        yield db
    finally:
        db.close()
        close_pools()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def measure(db: Any, chunks: int, extractor: HeuristicExtractor, concurrency: int, repeat: int) -> dict[str, float]:
    settings = load_settings(data_dir=Path(tempfile.mkdtemp()))
    store = ChunkResultStore(db)
    claims = TextClaimStore(db, owner=worker_owner(), lease_seconds=60)
    runs = iter(range(1_000_000))

    async def mapped(text_claims: TextClaimStore | None) -> float:
        n = next(runs)
        units = plan_units(f"s{n}", turns(f"s{n}", chunks, f"New{n}"), budget_tokens=BUDGET)
        started = time.perf_counter()
        outcomes = await map_units(units, extractor=extractor, store=store, semantic_types=settings.semantic_types,
                                   limiter=anyio.CapacityLimiter(concurrency), now=datetime.now(UTC), run_id="bench",
                                   retry_base_seconds=60, retry_max_seconds=3600, text_claims=text_claims)
        took = time.perf_counter() - started
        assert len(outcomes) == chunks and {o.status for o in outcomes} == {"ok"}, {(o.status, o.error) for o in outcomes}
        return took

    def claimed_alone() -> float:
        n = next(runs)
        started = time.perf_counter()
        for i in range(chunks):
            assert claims.claim(extractor.fingerprint, f"alone{n}-{i}") == "mine"
            claims.land(extractor.fingerprint, f"alone{n}-{i}")
        return time.perf_counter() - started

    figures: dict[str, list[float]] = {"without": [], "with": [], "alone": []}
    for _ in range(repeat):  # interleaved, so that a busy moment of the machine hits both
        figures["without"].append(await mapped(None))
        figures["with"].append(await mapped(claims))
        figures["alone"].append(claimed_alone())
    assert db.query("SELECT COUNT(*) FROM text_claims")[0][0] == 0
    return {name: min(times) for name, times in figures.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--call-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--postgres-url", default=os.environ.get("REM_TEST_POSTGRES_URL", ""))
    args = parser.parse_args(argv)
    engines = ["sqlite", *(["postgresql"] if args.postgres_url else [])]
    print(f"a session of {args.chunks} chunks of new text through the map, best of {args.repeat}, "
          f"{args.concurrency} calls at a time:")
    print("| engine | extractor | without claims | with claims | ÷ without | per chunk | claim + land alone, per chunk |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for engine in engines:
        for name, extractor in (("heuristic", HeuristicExtractor()), (f"{args.call_ms:g} ms a call", SlowExtractor(args.call_ms / 1000))):
            with tempfile.TemporaryDirectory() as work, database(engine, Path(work), args.postgres_url) as db:
                got = anyio.run(measure, db, args.chunks, extractor, args.concurrency, args.repeat)
            extra = (got["with"] - got["without"]) / args.chunks * 1000
            print(f"| {engine} | {name} | {got['without'] * 1000:.0f} ms | {got['with'] * 1000:.0f} ms | "
                  f"{got['with'] / got['without']:.2f}× | {extra:+.2f} ms | {got['alone'] / args.chunks * 1000:.2f} ms |")


if __name__ == "__main__":
    main()
