"""What withdrawing a cycle's retracted sessions' queue lines costs (retractq, sixteenth session).

    python bench/bench_retract_queue.py [--sessions 250 2000] [--retracted 1 8 32] [--rounds 15] [--idle-only]

A queue as extraction leaves it: for each of ``--sessions`` sessions, two ``REFERENCED_BY`` lines
(an id its turns wrote that no Chroma row has) in ``lazy-edges.jsonl``, two dead letters in
``lazy-edges.dead.jsonl`` and two rows in the SQLite graph's ``lazy_edges`` table (six lines a
session: 250 sessions are 1,500 lines, 2,000 are 12,000 — 1× and 8×), plus one agent line per
session. A cycle that retracts ``N`` sessions (``--retracted``) withdraws their lines:

- ``one pass``: as the cycle does it (``worker.knowledge.withdraw_retracted``) — the N sessions'
  records read from ``queue_withdrawals`` (written by the retractions, not timed), their lines
  matched in one read of each file and one scan of each table, the records deleted;
- ``per session``: N withdrawals of one session each (``withdraw_queued_lines``), what wiring the
  forget's call into the retraction session by session would do (N reads of every file).

Each round restores the queue (not timed) and times both, alternating which runs first: medians of
the process's CPU time (``time.process_time``: the machine is shared). The ``fsync`` waits are not
in it: one per file changed per withdrawal, so per session pays N times as many.
Then ``idle cycle``: two real cycles (embedded Chroma, heuristic extractor, 20 sessions), the
second retracting nothing, counting the calls that read the queue files and tables for a
withdrawal (``LazyEdgeQueue.blank``, ``LazyEdgeTable.withdraw``) — 0 expected — and what the
look for recorded retractions costs there (the empty ``queue_withdrawals`` read once per ingest
phase; median CPU time of 200 calls) next to that idle cycle's ingest phase (its wall time); and
(erasedue) the erases it runs (``Database.erase_deleted``, counted) — 0 expected — and what the
look for a due erase costs (the ``rem_counters`` ``erase_due`` row read once per finalize; median
CPU time of 200 calls) next to that idle cycle's finalize phase (its wall time); and (erasedue2)
the counters ``finalize`` now reads (``EraseDueStore.state``: three rows) and what every session
commit now adds (``EraseDueStore.mark_superseded`` of a session no retraction touched: one
primary-key update that matches nothing; median CPU time of 200 calls) next to the first cycle's
extract phase per session it committed (its wall time over 20). ``--idle-only`` runs this part alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio  # noqa: E402

from config import load_settings  # noqa: E402
from pipelines.lazy_edge import dead_letter_record  # noqa: E402
from store.backend import open_database  # noqa: E402
from store.db import Database  # noqa: E402
from store.erasure import EraseDueStore  # noqa: E402
from store.lazy_queue import LazyEdgeQueue, edge_line  # noqa: E402
from store.lazy_table import LazyEdgeTable  # noqa: E402
from pipelines.lazy_edge import ExtractionLines  # noqa: E402
from store.withdrawals import QueueWithdrawalStore  # noqa: E402
from worker.knowledge import withdraw_queued_lines, withdraw_retracted  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


def session_line(sid: str, number: int) -> bytes:
    """A line extraction queues for session ``sid``: an id its turn ``number`` wrote, not in Chroma."""
    return edge_line({
        "source": f"memory:legacy-{sid}-{number}", "target": f"memory:{sid}-t{number:04d}", "relationship": "REFERENCED_BY",
        "weight": 1.0, "properties": {"sessionId": sid, "chunk_ids": [f"{sid}:chunk:{number}"], "evidence": [f"memory:legacy-{sid}-{number}"]},
    }, timestamp="2026-11-01T10:00:00.000Z")


def agent_line(sid: str) -> bytes:
    return edge_line({"source": f"CONCEPT:note-{sid}", "target": f"memory:{sid}-t0000", "relationship": "NOTED_IN"},
                     timestamp="2026-11-01T10:00:00.000Z")


def write_queue(folder: Path, sessions: list[str]) -> tuple[list[bytes], list[bytes]]:
    """The queue files of ``sessions`` under ``folder``; returns the table's lines (and the live file's)."""
    live = [line for sid in sessions for line in (session_line(sid, 0), session_line(sid, 1), agent_line(sid))]
    dead = [
        (json.dumps(dead_letter_record(session_line(sid, n + 2), reason="max-attempts", detail="no row", attempts=5,
                                       at="2026-11-01T10:00:00.000Z"), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        for sid in sessions for n in range(2)
    ]
    queue = LazyEdgeQueue(folder / "lazy-edges.jsonl")
    queue.path.write_bytes(b"".join(live))
    queue.dead_letter_path.write_bytes(b"".join(dead))
    return [session_line(sid, n) for sid in sessions for n in (4, 5)], live


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="bench-retractq-") as folder:
        yield Path(folder)


def measure(sessions: int, retracted: list[int], rounds: int) -> list[dict[str, Any]]:
    with scratch() as root:
        data, template = root / "data", root / "template"
        data.mkdir()
        template.mkdir()
        settings = load_settings(data_dir=data)
        sids = [f"s{n:05d}" for n in range(sessions)]
        table_lines, _ = write_queue(template, sids)
        db = open_database(settings)
        table = LazyEdgeTable(db)
        table.append_lines(table_lines)
        queue = LazyEdgeQueue(settings.queue_path)

        def restore() -> None:
            for name in ("lazy-edges.jsonl", "lazy-edges.dead.jsonl"):
                shutil.copyfile(template / name, data / name)
            with db.transaction() as conn:
                conn.execute("DELETE FROM lazy_edges")
            table.append_lines(table_lines)

        records = QueueWithdrawalStore(db)

        def record(chosen: list[str]) -> None:
            """What the retractions wrote in their transactions (not timed)."""
            with db.transaction():
                for sid in chosen:
                    records.record(sid)

        def one_pass(chosen: list[str]) -> int:
            return withdraw_retracted(db, queue=queue)["queue_lines_withdrawn"]

        def per_session(chosen: list[str]) -> int:
            return sum(withdraw_queued_lines(db, ExtractionLines.of(sid), queue=queue)["queue_lines_withdrawn"] for sid in chosen)

        rows = []
        try:
            for count in retracted:
                times: dict[str, list[float]] = {"one pass": [], "per session": []}
                for r in range(rounds):
                    chosen = sids[r * 7 % (sessions - count):][:count]
                    order: list[tuple[str, Callable[[list[str]], int]]] = [("one pass", one_pass), ("per session", per_session)]
                    for name, run in order if r % 2 == 0 else order[::-1]:
                        restore()
                        if run is one_pass:
                            record(chosen)
                        t0 = time.process_time()
                        withdrawn = run(chosen)
                        times[name].append(time.process_time() - t0)
                        assert withdrawn == 6 * count, (name, withdrawn)
                one, each = (round(1000 * statistics.median(times[k]), 2) for k in ("one pass", "per session"))
                rows.append({"sessions": sessions, "lines": 7 * sessions, "retracted": count,
                             "one_pass_cpu_ms": one, "per_session_cpu_ms": each, "per_session_over_one_pass": round(each / one, 2)})
        finally:
            db.close()
        return rows


def idle_cycle() -> dict[str, Any]:
    """Calls that read the queue for a withdrawal during a cycle that retracts nothing, and the
    CPU time of the look for recorded retractions there beside that cycle's ingest phase."""
    from pipelines.importer import import_sessions
    from worker.cycle import open_stores, run_cycle

    calls = {"blank": 0, "withdraw": 0, "erase": 0}
    looks: dict[str, float] = {}
    blank, withdraw, erase = LazyEdgeQueue.blank, LazyEdgeTable.withdraw, Database.erase_deleted

    def counted_blank(self: LazyEdgeQueue, *args: Any, **kwargs: Any) -> int:
        calls["blank"] += 1
        return blank(self, *args, **kwargs)

    def counted_withdraw(self: LazyEdgeTable, *args: Any, **kwargs: Any) -> int:
        calls["withdraw"] += 1
        return withdraw(self, *args, **kwargs)

    def counted_erase(self: Database) -> bool:
        calls["erase"] += 1
        return erase(self)

    async def run(data: Path) -> None:
        settings = load_settings(data_dir=data).model_copy(update={"full_scan_interval_seconds": 0})
        sessions = data.parent / "sessions.jsonl"
        sessions.write_text("".join(json.dumps({
            "sessionId": f"s{n}", "createdAt": "2026-11-01T10:00:00Z", "title": f"s{n}",
            "turns": [{"role": "user", "text": f"RetryPolicy{n} reads memory:legacy-{n} at start."}],
        }) + "\n" for n in range(20)))
        stores = await open_stores(settings)
        try:
            await import_sessions(sessions, chroma=stores.chroma, memory_collection=settings.memory_collection,
                                  summary_collection=settings.session_collection)
        finally:
            stores.close()
        first = await run_cycle(settings)
        assert first.outcome == "completed"
        LazyEdgeQueue.blank, LazyEdgeTable.withdraw, Database.erase_deleted = counted_blank, counted_withdraw, counted_erase  # type: ignore[method-assign]
        try:
            result = await run_cycle(settings)
        finally:
            LazyEdgeQueue.blank, LazyEdgeTable.withdraw, Database.erase_deleted = blank, withdraw, erase  # type: ignore[method-assign]
        assert result.outcome == "completed" and result.phases["ingest"]["sessions_retracted"] == 0
        assert LazyEdgeQueue(settings.queue_path).depth() == 20  # a queue there to read
        db = open_database(settings)
        try:
            times, erase_times, commit_times = [], [], []
            for _ in range(200):
                t0 = time.process_time()
                withdraw_retracted(db, queue=LazyEdgeQueue(settings.queue_path))
                times.append(time.process_time() - t0)
                t0 = time.process_time()
                EraseDueStore(db).state()
                erase_times.append(time.process_time() - t0)
                t0 = time.process_time()
                assert not EraseDueStore(db).mark_superseded("s0")
                commit_times.append(time.process_time() - t0)
        finally:
            db.close()
        looks["look_cpu_ms"] = round(1000 * statistics.median(times), 3)
        looks["idle_ingest_ms"] = result.phases["ingest"]["duration_ms"]
        looks["erase_look_cpu_ms"] = round(1000 * statistics.median(erase_times), 3)
        looks["idle_finalize_ms"] = result.phases["finalize"]["duration_ms"]
        looks["commit_mark_cpu_ms"] = round(1000 * statistics.median(commit_times), 3)
        looks["extract_ms_per_session"] = round(first.phases["extract"]["duration_ms"] / 20, 2)

    with scratch() as root:
        anyio.run(run, root / "data")
    return {"idle_cycle_calls": calls, **looks, "look_over_ingest": round(looks["look_cpu_ms"] / looks["idle_ingest_ms"], 4),
            "erase_look_over_finalize": round(looks["erase_look_cpu_ms"] / looks["idle_finalize_ms"], 4),
            "commit_mark_over_extract": round(looks["commit_mark_cpu_ms"] / looks["extract_ms_per_session"], 4)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[250, 2000])
    parser.add_argument("--retracted", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--idle-only", action="store_true", help="only the idle cycle part")
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    for sessions in [] if args.idle_only else args.sessions:
        for row in measure(sessions, args.retracted, args.rounds):
            print(json.dumps(row))
    print(json.dumps(idle_cycle()))


if __name__ == "__main__":
    main()
