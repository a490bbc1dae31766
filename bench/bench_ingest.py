"""Ingest benchmark (issue 2): synthetic memories in embedded Chroma → a full REM cycle.

Reports end-to-end ingest rows/s, graph-write rows/s against a raw ``sqlite3.executemany`` insert of
the same rows measured in the same process, and the second (unchanged) cycle against the first.

    python bench/bench_ingest.py                       # 100,000 memories in 2,000 sessions
    python bench/bench_ingest.py --memories 10000 --sessions 200
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import Settings, load_settings  # noqa: E402
from pipelines.ingest import plan_session_sync  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from store.db import CACHE_KIB, Database, register_functions  # noqa: E402
from store.graph import GraphStore, utc_now  # noqa: E402
from worker.cycle import SESSIONS_PER_BATCH, run_cycle  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

WORDS = "graph queue drain chunk session memory turn edge node cycle worker chroma sqlite model token".split()


def synthetic_rows(memories: int, sessions: int, seed: int = 7) -> tuple[list[tuple[str, str, dict[str, Any]]], list[tuple[str, str, dict[str, Any]]]]:
    """(memory rows, summary rows) as (id, document, metadata)."""
    rng = random.Random(seed)
    per = memories // sessions
    mem_rows, sum_rows = [], []
    for s in range(sessions):
        sid = f"bench-s{s:05d}"
        created = f"2026-10-{1 + s % 28:02d}T{s % 24:02d}:00:00Z"
        sum_rows.append((f"summary_{sid}", f"Summary of session {s}", {"sessionId": sid, "title": f"Session {s}", "createdAt": created, "userId": "u"}))
        for t in range(per):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
            mem_rows.append((f"{sid}-t{t:04d}", text, {"sessionId": sid, "turnIndex": t, "role": "user", "createdAt": created, "userId": "u"}))
    return mem_rows, sum_rows


Row = tuple[str, str, dict[str, Any]]


async def load_corpus(chroma: ChromaStore, settings: Settings, memories: list[Row], summaries: list[Row], batch: int = 5000) -> float:
    """Write memory and summary rows into the configured collections; returns the seconds it took."""
    t0 = time.perf_counter()
    for name, rows in ((settings.memory_collection, memories), (settings.session_collection, summaries)):
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            await chroma.upsert(name, [r[0] for r in part], [r[1] for r in part], [r[2] for r in part])
    return time.perf_counter() - t0


def raw_insert_seconds(path: Path, nodes: list[tuple], edges: list[tuple]) -> float:
    """Baseline: plain executemany of the same node and edge rows into the same schema."""
    Database(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    register_functions(conn)  # the recall index's triggers fold text with rem-cycle's SQL functions
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA secure_delete=ON")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")  # as the graph store's connection
    t0 = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO nodes(id, label, name, properties, created_at, updated_at) VALUES (?,?,?,?,?,?)", nodes)
    conn.executemany("INSERT INTO edges(source, target, relationship, weight, properties, created_at, updated_at) VALUES (?,?,?,?,?,?,?)", edges)
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


Batch = tuple[list[Any], list[Any]]


async def planned_batches(chroma: ChromaStore, session_ids: list[str]) -> list[Batch]:
    """The nodes and edges the ingest phase plans for these sessions, in the cycle's batches."""
    rows_by_session: dict[str, list] = {}
    summaries: dict[str, Any] = {}
    for start in range(0, len(session_ids), 200):
        part = session_ids[start : start + 200]
        rows_by_session.update(await chroma.memories_for_sessions(part))
        summaries.update(await chroma.summaries_for_sessions(part) or {})
    batches = []
    for start in range(0, len(session_ids), SESSIONS_PER_BATCH):
        nodes_b, edges_b = [], []
        for sid in session_ids[start : start + SESSIONS_PER_BATCH]:
            s_nodes, m_nodes, e, _ = plan_session_sync(sid, rows_by_session[sid], summaries.get(sid), {})
            nodes_b += s_nodes + m_nodes
            edges_b += e
        batches.append((nodes_b, edges_b))
    return batches


def graph_write_seconds(graph: GraphStore, batches: list[Batch]) -> float:
    """Seconds to write ``batches`` through the graph store, one transaction per batch."""
    t0 = time.perf_counter()
    for nodes_b, edges_b in batches:
        with graph.db.transaction():
            graph.upsert_nodes(nodes_b)
            graph.link_nodes(edges_b)
    return time.perf_counter() - t0


def written_rows(db: Any) -> tuple[list[tuple], list[tuple]]:
    """The node and edge rows in ``db``, as a raw insert writes them (with one write time)."""
    now = utc_now()
    nodes = [tuple(r) + (now, now) for r in db.query("SELECT id, label, name, properties FROM nodes ORDER BY id")]
    edges = [tuple(r) + (now, now) for r in db.query("SELECT source, target, relationship, weight, properties FROM edges ORDER BY source, target, relationship")]
    return nodes, edges


async def bench(memories: int, sessions: int, workdir: Path) -> dict[str, Any]:
    configure_logging(level="warning", fmt="json")
    settings = load_settings(data_dir=workdir / "data", batch_limit=sessions)
    mem_rows, sum_rows = synthetic_rows(memories, sessions)
    chroma = ChromaStore(settings)
    load_s = await load_corpus(chroma, settings, mem_rows, sum_rows)

    first = await run_cycle(settings, reason="bench")
    assert first.outcome == "completed", first.message
    second = await run_cycle(settings, reason="bench")
    assert second.outcome == "completed", second.message
    first_s, second_s = first.wall_ms / 1000, second.wall_ms / 1000
    ingest1, ingest2 = first.phases["ingest"], second.phases["ingest"]

    # Graph writes alone, on a fresh database: the nodes and edges the ingest phase plans for these
    # rows, written through GraphStore in the cycle's batches (one transaction per batch).
    batches = await planned_batches(chroma, [r[2]["sessionId"] for r in sum_rows])
    graph = GraphStore(Database(workdir / "graph-only.sqlite3"))
    graph_s = graph_write_seconds(graph, batches)
    nodes, edges = written_rows(graph.db)
    graph.db.close()
    raw_s = raw_insert_seconds(workdir / "raw.sqlite3", nodes, edges)
    graph_rows = len(nodes) + len(edges)
    return {
        "memories": memories,
        "sessions": sessions,
        "chroma_load_s": round(load_s, 2),
        "first_cycle_s": round(first_s, 2),
        "cycle_rows_per_s": round(ingest1["processed"] / first_s),
        "ingest_phase_s": round(ingest1["duration_ms"] / 1000, 2),
        "ingest_phase_rows_per_s": round(ingest1["processed"] / (ingest1["duration_ms"] / 1000)),
        "extract_phase_s": round(first.phases.get("extract", {}).get("duration_ms", 0) / 1000, 2),
        "graph_rows": graph_rows,
        "graph_write_s": round(graph_s, 3),
        "graph_write_rows_per_s": round(graph_rows / graph_s),
        "raw_executemany_rows_per_s": round(graph_rows / raw_s),
        "graph_vs_raw": round(raw_s / graph_s, 3),
        "second_cycle_s": round(second_s, 2),
        "first_over_second": round(first_s / second_s, 1),
        "second_cycle_upserted": ingest2["upserted"],
        "second_cycle_sessions_synced": ingest2["sessions_synced"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=2_000)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-ingest-"))
    try:
        result = anyio.run(bench, args.memories, args.sessions, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for key, value in result.items():
        print(f"{key:32} {value}")
    ok = result["graph_vs_raw"] >= 0.25 and result["first_over_second"] >= 5 and result["second_cycle_upserted"] == 0
    print("targets (graph ≥ 25% of raw, second cycle ≥ 5× faster and writes nothing):", "met" if ok else "NOT met")
    return result


if __name__ == "__main__":
    main()
