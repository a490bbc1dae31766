"""What the full change scan costs now that it reads every memory row (fullscan), and the idle scan.

The full scan (``pipelines.ingest.scan_changed_sessions`` with ``full_scan_interval_seconds=0``)
reads every memory row's metadata and text by id and compares each with its MEMORY node's payload
hash (``RunStateStore.ingested_payloads``), so that a row updated in place is seen; before
fullscan it read the ids only (and the metadata of rows not ingested yet). Timed on an unchanged
collection (nothing to sync): the full scan, the idle scan of the new rows (marks at the end of
both collections), and as the baseline in the same process an ids-only pass over the memory
collection (``ChromaStore.scan_ids``, the read the full scan made of every row before); besides,
the graph side alone — ``memory_index()`` (read before too) and ``ingested_payloads()`` (new) —
and, for the choice of the read, the same rows read in pages by offset with their documents
(each page sorts the collection: INTERNALS "Known limit"). Sessions of 20 turns of ~400
characters, N / 20 summaries, embedded Chroma with the offline ``hash`` embedding, the graph
database holding the MEMORY nodes and memory index a sync writes; best of 7, taken in turn.
Last (it deletes rows), the scan
a cycle makes after one row before the marks' tail was deleted, no full scan due (day400c: every
id, not every row's text; before, the full scan), each time from the same marks after another
deletion, the deletion itself not timed. Run it on a checkout of main for the "before" figures (the columns it cannot measure there print
``-``).

    python bench/bench_full_scan.py [--rows 2500] [--scales 1 8] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_scan_offset import best_ms, memory_id  # noqa: E402
from config import Settings, load_settings  # noqa: E402
from pipelines.ingest import LIVE_MARKER, TAIL_CHECK_IDS, memory_node, scan_changed_sessions, session_revision  # noqa: E402
from store.backend import open_database  # noqa: E402
from store.chroma import ChromaStore, MemoryRow, SummaryRow  # noqa: E402
from store.graph import GraphStore  # noqa: E402
from store.runstate import RunStateStore, SessionRevision  # noqa: E402
from store.scan_marks import ScanMarkStore  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

TURNS_PER_SESSION = 20
REPEAT = 7
COLUMNS = ("ids-only pass", "full scan", "idle scan", "memory_index()", "ingested_payloads()", "paged read with text", "scan after a deletion")
FILLER = "We moved ConfigLoader to src/config.py and GraphStore reads it at start; the retry policy wraps it. "


def text(i: int) -> str:
    return f"turn {i}: " + FILLER * 4


async def fill(chroma: ChromaStore, settings: Settings, rows: int) -> list[MemoryRow]:
    """``rows`` memory rows, sessions of 20 turns, one summary a session; returns the memory rows."""
    meta = {"createdAt": "2026-11-01T00:00:00Z", "role": "user"}
    written: list[MemoryRow] = []
    for start in range(0, rows, 2000):
        ids = [memory_id(i) for i in range(start, min(rows, start + 2000))]
        docs = [text(start + n) for n in range(len(ids))]
        metas = [{**meta, "sessionId": i[:7], "turnIndex": int(i[-4:])} for i in ids]
        await chroma.upsert(settings.memory_collection, ids, docs, metas)
        written += [MemoryRow(i, d, m) for i, d, m in zip(ids, docs, metas, strict=True)]
    sessions = sorted({memory_id(i)[:7] for i in range(rows)})
    for start in range(0, len(sessions), 2000):
        part = sessions[start : start + 2000]
        await chroma.upsert(settings.session_collection, [summary(s).id for s in part], [summary(s).document for s in part],
                            [summary(s).metadata for s in part])
    return written


def summary(session_id: str) -> SummaryRow:
    return SummaryRow(f"sum-{session_id}", f"summary {session_id}", {"createdAt": "2026-11-01T00:00:00Z", "sessionId": session_id})


def ingest(settings: Settings, rows: list[MemoryRow]) -> None:
    """The graph as a sync leaves it: a MEMORY node per row and each session's memory index and
    revision."""
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes([memory_node(row, marker=LIVE_MARKER) for row in rows])
        runstate = RunStateStore(db)
        by_session: dict[str, list[str]] = {}
        for row in rows:
            by_session.setdefault(row.session_id or "", []).append(row.id)
        for sid, ids in by_session.items():
            runstate.mark_ingested(SessionRevision(sid, session_revision(ids, summary(sid)), None, tuple(ids)), "bench")
    finally:
        db.close()


async def measure(settings: Settings, rows: int) -> dict[str, float]:
    chroma = ChromaStore(settings)
    ingest(settings, await fill(chroma, settings, rows))
    db = open_database(settings)
    runstate = RunStateStore(db)
    memories, summaries = settings.memory_collection, settings.session_collection

    async def scan(interval: float) -> Any:
        marks = ScanMarkStore(db).load()
        result = await scan_changed_sessions(chroma, memory_collection=memories, summary_collection=summaries, index=runstate,
                                             marks=marks, location=chroma.location, now=datetime.now(UTC),
                                             full_scan_interval_seconds=interval)
        assert not result.readded and not runstate.changed_sessions(result.revisions), "an unchanged collection"
        ScanMarkStore(db).save(result.marks)
        return result

    async def ids_only() -> None:
        async for _ in chroma.scan_ids(memories):
            pass

    async def paged() -> None:
        async for _ in chroma.scan(memories, include=("metadatas", "documents")):
            pass

    async def after_deletions() -> float:
        marks = ScanMarkStore(db).load()
        coll = await chroma.collection(memories)
        spent: list[float] = []
        for n in range(REPEAT):
            coll.delete(ids=[memory_id(n * TURNS_PER_SESSION)])  # a first turn: long before the tail
            t0 = time.perf_counter()
            result = await scan_changed_sessions(chroma, memory_collection=memories, summary_collection=summaries, index=runstate,
                                                 marks=marks, location=chroma.location, now=datetime.now(UTC),
                                                 full_scan_interval_seconds=21_600)
            spent.append(time.perf_counter() - t0)
            assert len(runstate.changed_sessions(result.revisions)) == n + 1, "each deleted turn's session"
        return min(spent) * 1000

    async def sync_call(fn: Callable[[], Any]) -> Any:
        return fn()

    try:
        await scan(0)  # the marks a full scan leaves
        assert len(ScanMarkStore(db).load()[memories].tail_ids) == TAIL_CHECK_IDS
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            COLUMNS[0]: ids_only, COLUMNS[1]: lambda: scan(0), COLUMNS[2]: lambda: scan(21_600),
            COLUMNS[3]: lambda: sync_call(runstate.memory_index), COLUMNS[5]: paged,
        }
        if hasattr(runstate, "ingested_payloads"):  # not on a checkout from before fullscan
            ids = sorted(runstate.memory_index())
            calls[COLUMNS[4]] = lambda: sync_call(lambda: [runstate.ingested_payloads(ids[start], ids[min(start + 999, len(ids) - 1)])
                                                           for start in range(0, len(ids), 1000)])
        timed = await best_ms(calls, repeat=REPEAT)
        return {"rows": rows, **timed, COLUMNS[6]: await after_deletions()}
    finally:
        db.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2500, help="memory rows at 1×")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--postgres-url", default=os.environ.get("REM_TEST_POSTGRES_URL", ""),
                        help="also with the graph on this PostgreSQL database, in a schema of its own (default: REM_TEST_POSTGRES_URL)")
    args = parser.parse_args(argv)
    configure_logging(level="warning", fmt="json")
    schemas = None
    if args.postgres_url:
        from bench.bench_backends import Schemas

        schemas = Schemas(args.postgres_url)
    try:
        for engine in ("sqlite", "postgresql") if schemas else ("sqlite",):
            results = []
            for scale in args.scales:
                extra = {"database_url": schemas.new("fullscan")} if engine == "postgresql" and schemas else {}
                with tempfile.TemporaryDirectory() as tmp:
                    settings = load_settings(data_dir=Path(tmp), **extra)
                    results.append(asyncio.run(measure(settings, scale * args.rows)))
            base = results[0]
            print(f"\n{engine}: best of {REPEAT}, ms (÷ the ids-only pass of the same collection; ×: ÷ the first row)\n")
            print("| memory rows | " + " | ".join(COLUMNS) + " |")
            print("| --- |" + " --- |" * len(COLUMNS))
            for r in results:
                cells = [f"{r[c]:.1f} ({r[c] / r[COLUMNS[0]]:.1f}; {r[c] / base[c]:.1f}×)" if c in r else "-" for c in COLUMNS]
                print(f"| {int(r['rows']):,} | " + " | ".join(cells) + " |")
    finally:
        if schemas:
            schemas.drop()


if __name__ == "__main__":
    main()
