"""Metrics scrape and online backup (issue 5) on a year-old deployment's database.

A graph of 100,000 memories in 5,000 sessions (10 % back-filled), a year of hourly runs with
phase records, 20,000 chunk results and a 10,000-line lazy-edge queue. Times one ``/metrics``
scrape (the collector reads everything at scrape time) against the baseline of the graph counts
alone (what ``status`` already ran), and ``rem-cycle backup`` against a plain file copy.

    python bench/bench_metrics.py
    python bench/bench_metrics.py --memories 100000 --sessions 5000 --runs 8760
    python bench/bench_metrics.py --growth    # a scrape at 1× and 8× that size (12,500 → 100,000 memories), queue drained:
                                             # right after a write (reads the database) and with the files unchanged;
                                             # and the back-filled nodes counted by reading them (before migration 28)
                                             # against the counts its triggers keep
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import generate_latest  # noqa: E402

from config import load_settings  # noqa: E402
from store.db import Database, backup_database  # noqa: E402
from store.dialect import Dialect  # noqa: E402
from store.graph import Edge, GraphStore, Node, dumps  # noqa: E402
from store.lazy_queue import LazyEdgeQueue  # noqa: E402
from worker import metrics  # noqa: E402
from worker.metrics import build_registry  # noqa: E402


def build(root: Path, *, memories: int, sessions: int, runs: int, queued: int = 10_000) -> Any:
    settings = load_settings(data_dir=root)
    db = Database(settings.graph_path)
    graph = GraphStore(db)
    graph.upsert_nodes(
        Node(f"session:s{n}", "SESSION", f"s{n}", {"backfilled": True, "minimal": n % 20 == 0} if n % 10 == 0 else {"liveIngested": True})
        for n in range(sessions)
    )
    graph.upsert_nodes(
        Node(f"memory:m{n}", "MEMORY", f"m{n}", {"backfilled": True} if n % 10 == 0 else {"liveIngested": True})
        for n in range(memories)
    )
    graph.link_nodes(Edge(f"memory:m{n}", f"session:s{n % sessions}", "ORIGINATES_IN") for n in range(memories))
    graph.fold_counts()  # as the last cycle's finalize left them
    phases = dumps({
        "provider-ready": {"state": "completed", "duration_ms": 3.0},
        "ingest": {"state": "completed", "duration_ms": 850.0},
        "extract": {"state": "completed", "duration_ms": 12_000.0, "chunks_reused": 4},
        "drain": {"state": "completed", "duration_ms": 120.0},
        "finalize": {"state": "completed", "duration_ms": 40.0},
    })
    with db.transaction() as conn:
        conn.executemany(
            "INSERT INTO rem_runs(run_id, reason, mode, started_at, finished_at, outcome, phases) VALUES (?,?,?,?,?,?,?)",
            [
                (f"run-{n}", "scheduled", "daemon", "2026-01-01T00:00:00Z", "2026-01-01T00:00:13Z",
                 "completed" if n % 50 else "failed", phases)
                for n in range(runs)
            ],
        )
        conn.executemany(
            "INSERT INTO chunk_results(session_id, chunk_id, content_hash, fingerprint, status, tokens_in, tokens_out, "
            "updated_at) VALUES (?,?,?,?,?,?,?,?)",
            [(f"s{n % sessions}", f"s{n % sessions}:chunk:{n}", f"h{n}", "fp", "ok" if n % 25 else "failed", 4000, 600,
              "2026-11-29T00:00:00Z") for n in range(20_000)],
        )
    LazyEdgeQueue(settings.queue_path).append(
        ({"source": f"CONCEPT:c{n}", "target": f"memory:x{n}", "relationship": "MENTIONED_IN"} for n in range(queued)),
        fsync=False,
    )
    return settings, graph


def backfill_before_28(dialect: Dialect) -> str:
    """How a scrape counted the back-filled MEMORY/SESSION nodes before migration 28 (the
    baseline): every one of them read, ``(label, backfilled, backfilled-minimal)`` rows."""
    backfilled, minimal = (dialect.json_flag("properties", key) for key in ("backfilled", "minimal"))
    return ("SELECT label, "
            f"SUM(CASE WHEN {backfilled} AND NOT {minimal} THEN 1 ELSE 0 END), "
            f"SUM(CASE WHEN {backfilled} AND {minimal} THEN 1 ELSE 0 END) "
            "FROM nodes WHERE label IN ('MEMORY', 'SESSION') GROUP BY label")


def scrape_growth(workdir: Path, *, memories: int, sessions: int, runs: int) -> None:
    """A scrape at 1× and 8× the data (the queue drained): right after another connection wrote
    (the collector reads the database) and with the files unchanged (it reuses that reading)."""
    print("| data | scrape after a write | scrape, files unchanged | graph counts alone | back-fill: nodes read (before 28) "
          "| back-fill: counts (now) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for scale in (1, 8):
        settings, graph = build(workdir / f"data{scale}", memories=memories * scale // 8, sessions=sessions * scale // 8,
                                runs=runs * scale // 8, queued=0)
        registry = build_registry(settings)
        generate_latest(registry)  # the duration histograms, built once

        def after_write() -> None:
            graph.db.conn.execute("UPDATE rem_runs SET heartbeat_at = ? WHERE run_id = 'run-0'", (str(time.time()),))
            generate_latest(registry)

        written = best_of(after_write)
        time.sleep(metrics.SETTLE_SECONDS + 0.5)
        generate_latest(registry)  # reads once more, now that the files have settled, and keeps it
        unchanged = best_of(lambda: generate_latest(registry), repeat=20)
        counts = best_of(graph.counts)
        read_nodes = best_of(lambda: graph.db.query(backfill_before_28(graph.db.dialect)))
        backfill = best_of(graph.backfill_counts)
        print(f"| {scale}× ({memories * scale // 8:,} memories, {runs * scale // 8:,} runs) | {written * 1000:.1f} ms | "
              f"{unchanged * 1000:.2f} ms | {counts * 1000:.1f} ms | {read_nodes * 1000:.1f} ms | {backfill * 1000:.2f} ms |")
        graph.db.close()


def best_of(fn: Callable[[], Any], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=8_760)
    parser.add_argument("--growth", action="store_true", help="scrape cost at 1× and 8× the data, after a write and unchanged")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-metrics-"))
    try:
        if args.growth:
            scrape_growth(workdir, memories=args.memories, sessions=args.sessions, runs=args.runs)
            return
        t0 = time.perf_counter()
        settings, graph = build(workdir / "data", memories=args.memories, sessions=args.sessions, runs=args.runs)
        print(f"built in {time.perf_counter() - t0:.1f}s: {args.memories} memories, {args.sessions} sessions, "
              f"{args.runs} runs, 20000 chunk results, 10000 queued edges")
        registry = build_registry(settings)
        t0 = time.perf_counter()
        size = len(generate_latest(registry))
        cold = time.perf_counter() - t0  # the first scrape also builds the duration histograms
        scrape = best_of(lambda: generate_latest(registry))
        counts = best_of(graph.counts)
        print(f"/metrics scrape: first {cold * 1000:.0f} ms, then {scrape * 1000:.0f} ms median ({size} bytes); "
              f"graph counts alone: {counts * 1000:.0f} ms; ratio {scrape / counts:.1f}x")
        graph.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db_bytes = settings.graph_path.stat().st_size
        backup = best_of(lambda: backup_database(settings.graph_path, workdir / "backup.sqlite3"), repeat=3)
        copy = best_of(lambda: shutil.copyfile(settings.graph_path, workdir / "copy.sqlite3"), repeat=3)
        print(f"backup of {db_bytes / 1e6:.0f} MB: {backup * 1000:.0f} ms (online backup + integrity_check); "
              f"plain file copy {copy * 1000:.0f} ms; ratio {backup / copy:.1f}x")
        graph.db.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
