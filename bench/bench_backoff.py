"""What a cycle pays for sessions whose chunks all back off (a model outage on a backlog leaves up
to the whole backlog so, for up to ``REM_CHUNK_RETRY_MAX_SECONDS``): the extract phase of an idle
cycle (every session backing off) at 1× and 8× the sessions, beside what reading those sessions'
turns from Chroma costs — what every cycle paid before such sessions were left out of the claim.
One process, embedded Chroma, SQLite, the loopback chat-completions server of tests/llm_server.py
answering 500 (each session fails once, then backs off for an hour).

(rewriteerase) Beside them, what the claim's look-up of pending withdrawal records
(``queue_withdrawals``, empty) costs over those sessions — every one the claim reads and skips:
the median CPU time of a count of the sessions with that look-up, less the same count without it
(``time.process_time``, 200 of each, alternating).

(rewritequeue) And what ``rem-cycle status``'s ``withdrawal_waits`` costs over those sessions
(``store.claims.withdrawal_waits``: led by ``queue_withdrawals``, so it should not grow with them):
the median CPU time of 200 calls with the table empty, and with 5 of the sessions recorded.

    python bench/bench_backoff.py [--steps 50 400] [--cycles 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import load_settings  # noqa: E402
from pipelines.importer import import_sessions  # noqa: E402
from store.claims import withdrawal_waits  # noqa: E402
from store.db import Database  # noqa: E402
from store.withdrawals import QueueWithdrawalStore  # noqa: E402
from tests.conftest import make_session, write_sessions  # noqa: E402
from tests.llm_server import LLMServer, server_error  # noqa: E402
from worker.cycle import open_stores, run_cycle  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


async def measure(sessions: int, cycles: int, workdir: Path, server: LLMServer) -> dict[str, float]:
    settings = load_settings(data_dir=workdir / "data", extractor="openai", llm_base_url=server.url, llm_max_retries=0,
                             llm_concurrency=4, batch_limit=sessions, chunk_retry_base_seconds=3600)
    stores = await open_stores(settings)
    try:
        path = write_sessions(workdir / "in.jsonl", [make_session(f"bo-{i:05d}", 3) for i in range(sessions)])
        await import_sessions(path, chroma=stores.chroma, memory_collection=settings.memory_collection,
                              summary_collection=settings.session_collection)
        first = (await run_cycle(settings, stores=stores)).phases["extract"]
        assert first["sessions_failed"] == sessions, first
        calls = server.chat_count
        idle = []
        for _ in range(cycles):
            extract = (await run_cycle(settings, stores=stores)).phases["extract"]
            assert extract["sessions_queued"] == 0 and server.chat_count == calls, extract
            idle.append(extract["duration_ms"])
        memory_ids = stores.runstate.memories_of_sessions([f"bo-{i:05d}" for i in range(sessions)])
        t0 = time.perf_counter()
        for sid, ids in memory_ids.items():
            await stores.chroma.memories_for_session(sid, memory_ids=ids)
        reads_ms = (time.perf_counter() - t0) * 1000
        lookup_ms = record_lookup_ms(stores.db)
        waits_ms = status_waits_ms(stores.db)
        for i in range(5):
            QueueWithdrawalStore(stores.db).record(f"bo-{i:05d}")
        assert withdrawal_waits(stores.db)["sessions"] == 5
        waits_recorded_ms = status_waits_ms(stores.db)
    finally:
        stores.close()
    return {"sessions": sessions, "extract_ms": statistics.median(idle), "reads_ms": reads_ms, "lookup_ms": lookup_ms,
            "waits_ms": waits_ms, "waits_recorded_ms": waits_recorded_ms}


def status_waits_ms(db: Database, rounds: int = 200) -> float:
    """Median CPU ms of ``status``'s ``withdrawal_waits``."""
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        withdrawal_waits(db)
        times.append(time.process_time() - t0)
    return 1000 * statistics.median(times)


def record_lookup_ms(db: Database, rounds: int = 200) -> float:
    """What ``ClaimStore.claim``'s look-up of pending withdrawal records adds over every session
    digest: median CPU ms of a count with it, less that of a count without it."""
    counts = {
        "with": "SELECT COUNT(*) FROM session_digests AS d "
                "WHERE NOT EXISTS (SELECT 1 FROM queue_withdrawals AS w WHERE w.chunk_key = d.session_id)",
        "without": "SELECT COUNT(*) FROM session_digests AS d",
    }
    times: dict[str, list[float]] = {name: [] for name in counts}
    for i in range(rounds):
        for name in sorted(counts, reverse=bool(i % 2)):
            t0 = time.process_time()
            db.query(counts[name])
            times[name].append(time.process_time() - t0)
    return max(0.0, 1000 * (statistics.median(times["with"]) - statistics.median(times["without"])))


async def run(steps: list[int], cycles: int, workdir: Path) -> list[dict[str, float]]:
    configure_logging(level="error", fmt="json")
    with LLMServer(default=server_error(500)) as server:
        return [await measure(n, cycles, workdir / f"n{n}", server) for n in steps]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 400])
    parser.add_argument("--cycles", type=int, default=5, help="idle cycles timed per step (median)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = anyio.run(run, sorted(args.steps), args.cycles, Path(tmp))
    first = results[0]
    print("| sessions backing off | idle extract phase (median) | ÷ first | their Chroma reads (before) | ÷ first "
          "| the claim's record look-up over them (CPU) | ÷ extract phase | status's withdrawal_waits (CPU): none, 5 recorded |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['sessions']:,} | {r['extract_ms']:.1f} ms | {r['extract_ms'] / first['extract_ms']:.2f}× "
              f"| {r['reads_ms']:.1f} ms | {r['reads_ms'] / first['reads_ms']:.2f}× "
              f"| {r['lookup_ms']:.3f} ms | {100 * r['lookup_ms'] / r['extract_ms']:.2f}% "
              f"| {r['waits_ms']:.3f} ms, {r['waits_recorded_ms']:.3f} ms |")


if __name__ == "__main__":
    main()
