"""What the change scan's steady state costs as the Chroma collections grow, embedded and on `chroma run`.

An idle cycle's change scan (``pipelines.ingest.scan_changed_sessions`` with marks at the end of
both collections: no new row) and one that finds 20 new turns of one session, against the reads
Chroma offers, each alone: the positional read the scan makes (``get(offset=rows - 32, limit=…)``),
the read of the mark's last row by id that the scan makes too (its text and metadata, to see it
was not written again: ``pipelines.ingest.last_rows``), a read of the first 20 rows
(``offset=0``), ``count()``, a read of 32 ids by id, and a read by a ``where`` on ``sessionId``
(``limit=1``). Collections of N memory rows (sessions of 20 turns) and
N / 20 summaries, at 1× and 8× N, the offline ``hash`` embedding, best of 21 (the reads taken in
turn). The memory index is a dict (the graph's side is measured elsewhere): what is timed is
rem-cycle's Chroma calls. Chroma 1.x answers every read in SQL of its own (embedded and server are
the same Rust frontend and ``SqliteMetadataReader``): any read but one by id orders all of the
collection's rows by their internal id (INTERNALS "What a cycle reads of Chroma", the known limit).

    python bench/bench_scan_offset.py [--rows 2500] [--scales 1 8] [--modes embedded server]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import Settings, load_settings  # noqa: E402
from pipelines.ingest import TAIL_CHECK_IDS, collection_location, last_rows, scan_changed_sessions, with_last_row  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from store.scan_marks import ScanMark  # noqa: E402
from tests.conftest import free_port, start_chroma_server  # noqa: E402

TURNS_PER_SESSION = 20
NEW_ROWS = 20
REPEAT = 21
COLUMNS = ("idle scan", f"scan, {NEW_ROWS} new", "the tail read", "the last row by id", "the first 20", "count()", "32 ids by id",
           "where sessionId")


class DictIndex:
    """The memory index (memory id → session id) as a dict: ingest's side of the scan, kept out of
    the timing."""

    def __init__(self, sessions: dict[str, str]) -> None:
        self._sessions = sessions
        self._members: dict[str, list[str]] = {}
        for memory_id, sid in sessions.items():
            self._members.setdefault(sid, []).append(memory_id)

    def memory_index(self) -> dict[str, str]:
        return dict(self._sessions)

    def sessions_of_memories(self, memory_ids: Iterable[str]) -> dict[str, str]:
        return {m: self._sessions[m] for m in memory_ids if m in self._sessions}

    def memories_of_sessions(self, session_ids: Iterable[str]) -> dict[str, list[str]]:
        return {sid: list(self._members[sid]) for sid in session_ids if sid in self._members}


async def best_ms(calls: dict[str, Callable[[], Awaitable[Any]]], *, repeat: int = REPEAT) -> dict[str, float]:
    """Each call's best time of ``repeat``, in ms, the calls taken in turn (so that the machine's
    other work and the server's own spread over all of them alike)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            t0 = time.perf_counter()
            await call()
            times[name].append(time.perf_counter() - t0)
    return {name: min(spent) * 1000 for name, spent in times.items()}


def memory_id(i: int) -> str:
    return f"s{i // TURNS_PER_SESSION:06d}-t{i % TURNS_PER_SESSION:04d}"


async def fill(chroma: ChromaStore, settings: Settings, rows: int) -> None:
    """``rows`` memory rows, sessions of 20 turns, and one summary a session."""
    meta = {"createdAt": "2026-11-01T00:00:00Z"}
    for start in range(0, rows, 2000):
        ids = [memory_id(i) for i in range(start, min(rows, start + 2000))]
        await chroma.upsert(settings.memory_collection, ids, [f"turn {i}" for i in ids], [{**meta, "sessionId": i[:7]} for i in ids])
    sessions = sorted({memory_id(i)[:7] for i in range(rows)})
    for start in range(0, len(sessions), 2000):
        part = sessions[start : start + 2000]
        await chroma.upsert(settings.session_collection, [f"sum-{s}" for s in part], [f"summary {s}" for s in part], [{**meta, "sessionId": s} for s in part])


async def mark_of(chroma: ChromaStore, name: str, rows: int, location: str, back: int = 0) -> ScanMark:
    """The mark a scan leaves after ``rows - back`` rows of ``name``."""
    applied = rows - back
    tail = await chroma.ids_from(name, offset=max(0, applied - TAIL_CHECK_IDS), limit=min(applied, TAIL_CHECK_IDS))
    mark = ScanMark(collection=name, location=collection_location(location, await chroma.collection_id(name)),
                    rows_applied=applied, tail_ids=tuple(tail), full_scan_at=datetime.now(UTC).isoformat())
    return with_last_row(mark, await last_rows(chroma, name, [mark]))


async def measure(settings: Settings, rows: int) -> dict[str, float]:
    chroma = ChromaStore(settings)
    await fill(chroma, settings, rows)
    memories, summaries = settings.memory_collection, settings.session_collection
    known = {memory_id(i): memory_id(i)[:7] for i in range(rows)}
    location = chroma.location
    summary_mark = await mark_of(chroma, summaries, rows // TURNS_PER_SESSION, location)
    marks = {"idle": {memories: await mark_of(chroma, memories, rows, location), summaries: summary_mark},
             "new": {memories: await mark_of(chroma, memories, rows, location, back=NEW_ROWS), summaries: summary_mark}}
    # The last NEW_ROWS turns are "new" to the second scan: out of its index, as after an append.
    new_index = DictIndex({m: s for m, s in known.items() if m not in {memory_id(i) for i in range(rows - NEW_ROWS, rows)}})

    async def scan(which: str, index: DictIndex) -> Any:
        result = await scan_changed_sessions(chroma, memory_collection=memories, summary_collection=summaries, index=index,
                                             marks=marks[which], location=location, now=datetime.now(UTC), full_scan_interval_seconds=21600)
        assert not result.full and result.rows_scanned == (0 if which == "idle" else NEW_ROWS), (which, result.full, result.rows_scanned)
        return result

    coll = await chroma.memories()
    tail_ids = [memory_id(i) for i in range(rows - TAIL_CHECK_IDS, rows)]
    idle_index = DictIndex(known)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        COLUMNS[0]: lambda: scan("idle", idle_index),
        COLUMNS[1]: lambda: scan("new", new_index),
        COLUMNS[2]: lambda: chroma.ids_from(memories, offset=rows - TAIL_CHECK_IDS, limit=50_000 + TAIL_CHECK_IDS + 1),
        COLUMNS[3]: lambda: last_rows(chroma, memories, [marks["idle"][memories]]),
        COLUMNS[4]: lambda: chroma.ids_from(memories, offset=0, limit=20),
        COLUMNS[5]: lambda: chroma._call(coll.count),
        COLUMNS[6]: lambda: chroma._call(coll.get, ids=tail_ids, include=[]),
        COLUMNS[7]: lambda: chroma._call(coll.get, where={"sessionId": memory_id(rows - 1)[:7]}, include=[], limit=1),
    }
    return {"rows": rows, **await best_ms(calls)}


async def run_mode(mode: str, scales: list[int], base_rows: int, root: Path) -> list[dict[str, float]]:
    results = []
    for scale in scales:
        data = root / f"{mode}-x{scale}"
        if mode == "embedded":
            results.append(await measure(load_settings(data_dir=data), scale * base_rows))
            continue
        proc = start_chroma_server(data / "server", port := free_port())
        try:
            results.append(await measure(load_settings(data_dir=data, chroma_url=f"http://127.0.0.1:{port}"), scale * base_rows))
        finally:
            proc.terminate()
            proc.wait(10)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2500, help="memory rows at 1×")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--modes", nargs="+", choices=("embedded", "server"), default=["embedded", "server"])
    args = parser.parse_args(argv)
    for mode in args.modes:
        with tempfile.TemporaryDirectory() as tmp:
            results = asyncio.run(run_mode(mode, args.scales, args.rows, Path(tmp)))
        first = results[0]
        print(f"\n{mode}: best of {REPEAT}, ms (÷ the first row)\n")
        print("| memory rows | " + " | ".join(COLUMNS) + " |")
        print("| --- |" + " --- |" * len(COLUMNS))
        for r in results:
            print(f"| {int(r['rows']):,} | " + " | ".join(f"{r[c]:.2f} ({r[c] / first[c]:.2f}×)" for c in COLUMNS) + " |")
        last = results[-1]
        slope = (last[COLUMNS[0]] - first[COLUMNS[0]]) / (last["rows"] - first["rows"])
        print(f"\nidle scan at a million turns, the line through {int(first['rows']):,} and {int(last['rows']):,}: "
              f"~{first[COLUMNS[0]] + slope * (1_000_000 - first['rows']):.0f} ms")


if __name__ == "__main__":
    main()
