"""What the day-400 benchmarks share: each engine asked for, and a measure run on a fresh database
per scale (1× and 8× by default), in one process."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
import statistics
from typing import Any

import anyio

from bench.bench_reextract import databases
from store.db import Database


def engines(postgres_url: str | None) -> Iterator[tuple[str, str | None]]:
    """``("SQLite", None)``, then ``("PostgreSQL", postgres_url)`` when a URL is given."""
    yield "SQLite", None
    if postgres_url:
        yield "PostgreSQL", postgres_url


def at_scales(url: str | None, measure: Callable[[Database, int], dict[str, Any]], scales: tuple[int, ...] = (1, 8)) -> list[dict[str, Any]]:
    """``measure(db, scale)`` on a fresh database per scale (an SQLite file, or a fresh schema of
    ``url``, dropped afterwards)."""
    results = []
    with tempfile.TemporaryDirectory() as tmp, databases(Path(tmp), url) as fresh:
        for scale in scales:
            db = fresh(f"x{scale}")
            try:
                results.append(measure(db, scale))
            finally:
                db.close()
    return results


def fence_summary(what: str, times: dict[bool, list[float]], url: str | None, **sizes: int) -> dict[str, Any]:
    """The fence benchmarks' result: the median seconds of ``what`` unfenced and fenced (``times``
    by ``fenced``), their ratio, the engine and the sizes measured."""
    plain, fenced = statistics.median(times[False]), statistics.median(times[True])
    return {"engine": "postgresql" if url else "sqlite", **sizes, f"{what}_unfenced_s": round(plain, 3),
            f"{what}_fenced_s": round(fenced, 3), "fenced_over_unfenced": round(fenced / plain, 3)}


def run_fence_bench(bench: Callable[..., Awaitable[dict[str, Any]]], *args: Any, prefix: str, url: str | None) -> dict[str, Any]:
    """Run a fence benchmark ``bench(*args, workdir, url)`` in a scratch folder (removed after),
    print its figures a line each and return them: the ``main`` of bench_ingest_fence and
    bench_finalize_fence."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        result = anyio.run(bench, *args, workdir, url)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for key, value in result.items():
        print(f"{key:24} {value}")
    return result
