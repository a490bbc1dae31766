"""What the issue-13 metrics cost a scrape as the data grows (1× and 8×).

``rem_cycle_dead_letters`` counts the records of a file that only grows: a scrape reads nothing when
the file is unchanged (a ``stat``), and after a drain appended dead letters it reads those only
(``after_append``; before the drainleft branch it recounted the whole file: ``recount``). ``rem_cycle_sessions_without_turns`` read every
ingested session against the memory index (:data:`NO_TURNS_BEFORE_17`); now a range of the partial
index ``session_digests_no_turns`` (the sessions without turns only); a scrape recomputes it only
when a run started or finished. Times, in the same process: a full recount / the query (what a scrape would pay without
the cache) against a cached scrape's ``stat`` / a dictionary lookup, at N and 8 × N.

The lazy-edge queue's gauges (depth, oldest line's age) read every line of the queue and of its
``.draining`` files at every scrape before scrapeb (:func:`full_read`, the baseline); now a fold
kept per file (worker.metrics ``QueueGauges``) costs a ``stat`` per file when unchanged and reads
the lines appended after a producer's append (:data:`QUEUE_APPEND` lines). Q lines (a quarter of
them in a ``.draining`` file) and 8 × Q.

Every scrape after a write reads the runs by outcome, each outcome's latest finish and the running
runs: from ``rem_run_counts`` and the ``rem_runs_outcome_finished`` index (migration 13), against
the three scans of ``rem_runs`` a scrape ran before it (:data:`SCANS_BEFORE_13`), on the same
database at R and 8 × R runs.

    python bench/bench_scrape_growth.py
    python bench/bench_scrape_growth.py --dead-letters 20000 --sessions 5000 --runs 1000 --queue-lines 20000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_metrics import best_of  # noqa: E402
from store.db import Database  # noqa: E402
from store.lazy_queue import DeadLetterCounter, LazyEdgeQueue, edge_line  # noqa: E402
from store.runstate import RunStateStore  # noqa: E402
from worker.metrics import QueueGauges, QueueSummary, summarize_queue_lines  # noqa: E402

TURNS_PER_SESSION = 20
# How the sessions left without turns were counted before migration 17: the memory index probed
# once for every session ever ingested.
NO_TURNS_BEFORE_17 = (
    "SELECT COUNT(*) FROM session_digests AS d WHERE d.ingested_revision IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM memory_index AS m WHERE m.session_id = d.session_id)"
)
RUNS_RUNNING = 2  # runs left running (a leader and a follower's), whatever the history
# What a scrape read of ``rem_runs`` before migration 13 (RunStateStore as it was): the baseline.
SCANS_BEFORE_13 = (
    "SELECT outcome, COUNT(*) FROM rem_runs GROUP BY outcome",
    "SELECT outcome, MAX(finished_at) FROM rem_runs WHERE finished_at IS NOT NULL GROUP BY outcome",
    "SELECT * FROM rem_runs WHERE outcome = 'running' ORDER BY started_at",
)


DEAD_RECORD = {"reason": "max-attempts", "detail": "chroma-row-not-found: memory:x", "attempts": 5,
               "deadLetteredAt": "2026-11-29T10:00:00.000Z", "line": json.dumps({"source": "CONCEPT:a", "target": "memory:x"})}
DEAD_PER_DRAIN = 10  # dead letters a drain appends between two scrapes


def dead_letter_file(queue: LazyEdgeQueue, records: int) -> None:
    with queue.dead_letter_path.open("w", encoding="utf-8") as out:
        out.writelines(json.dumps({**DEAD_RECORD, "n": n}) + "\n" for n in range(records))


def count_after_a_drain(queue: LazyEdgeQueue, count: Callable[[], int], repeat: int = 5) -> float:
    """Median time of ``count()`` right after a drain appended :data:`DEAD_PER_DRAIN` dead letters
    (the append itself not timed)."""
    times = []
    for _ in range(repeat):
        with queue.dead_letter_path.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps({**DEAD_RECORD, "n": -1}) + "\n" for _ in range(DEAD_PER_DRAIN))
        started = time.perf_counter()
        count()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


QUEUE_EDGE = {"source": "CONCEPT:x", "target": "memory:nope", "relationship": "MENTIONED_IN",
              "properties": {"chunk_ids": ["s1:chunk:0"], "confidence": 0.8}}
QUEUE_APPEND = 10  # lines a producer appends between two scrapes


def full_read(path: Path) -> QueueSummary:
    """The queue gauges' read before scrapeb: every line of the live queue and its ``.draining``
    files, parsed at every scrape."""
    queue = LazyEdgeQueue(path)
    return summarize_queue_lines(line for file in [path, *queue.draining_files()] for line in LazyEdgeQueue.read_lines(file))


def queue_files(queue: LazyEdgeQueue, lines: int) -> None:
    """``lines`` queue lines, the first quarter renamed to ``.draining`` (a drain's input)."""
    draining = lines // 4
    for count, offset in ((draining, 0), (lines - draining, draining)):
        queue.path.write_bytes(b"".join(edge_line({**QUEUE_EDGE, "n": offset + n}, timestamp="2026-11-29T10:00:00.000Z")
                                        for n in range(count)))
        if not offset:
            queue.rotate()


def after_an_append(queue: LazyEdgeQueue, read: Callable[[], QueueSummary], repeat: int = 5) -> float:
    """Median time of ``read()`` right after a producer appended :data:`QUEUE_APPEND` lines (the
    append not timed)."""
    times = []
    for _ in range(repeat):
        queue.append([QUEUE_EDGE] * QUEUE_APPEND, fsync=False)
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_queue(root: Path, lines: int) -> dict[str, float]:
    queue = LazyEdgeQueue(root / "queue" / "lazy-edges.jsonl")
    queue.path.parent.mkdir(parents=True)
    queue_files(queue, lines)
    gauges = QueueGauges(queue.path)
    assert gauges.read() == full_read(queue.path) and gauges.read().depth == lines
    measured = {
        "queue_full_unchanged": best_of(lambda: full_read(queue.path)),
        "queue_fold_unchanged": best_of(gauges.read, repeat=21),
        "queue_full_append": after_an_append(queue, lambda: full_read(queue.path)),
        "queue_fold_append": after_an_append(queue, gauges.read),
    }
    assert gauges.read() == full_read(queue.path)
    return measured


def session_tables(db: Database, sessions: int) -> None:
    with db.transaction() as conn:
        conn.executemany(
            "INSERT INTO session_digests(session_id, input_revision, ingested_revision, state, updated_at) VALUES (?,?,?,?,?)",
            [(f"s{n}", "r1", "r1", "digested", "2026-11-29T00:00:00Z") for n in range(sessions)],
        )
        # one session in a hundred has no turns left
        conn.executemany(
            "INSERT INTO memory_index(memory_id, session_id) VALUES (?, ?)",
            [(f"s{n}-t{t}", f"s{n}") for n in range(sessions) if n % 100 for t in range(TURNS_PER_SESSION)],
        )


def run_history(db: Database, runs: int) -> None:
    """``runs`` hourly runs, one in ten failed, the last RUNS_RUNNING still running; each run's
    phases document the size a real cycle records (five phases with their counts)."""
    outcomes = ("failed", *["completed"] * 9)
    phases = json.dumps({phase: {"duration_ms": 1200, "status": "ok", "sessions": 12, "chunks": 40, "tokens_in": 51234,
                                 "tokens_out": 8812, "skipped": 0, "failed": 0}
                         for phase in ("provider-ready", "ingest", "extract", "drain", "finalize")})
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def at(hours: float) -> str:
        return (start + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    with db.transaction() as conn:
        conn.executemany(
            "INSERT INTO rem_runs(run_id, reason, mode, started_at, finished_at, outcome, phases) VALUES (?,?,?,?,?,?,?)",
            [
                (f"run-{n:06d}", "interval", "once", at(n), None if n >= runs - RUNS_RUNNING else at(n + 0.5),
                 "running" if n >= runs - RUNS_RUNNING else outcomes[n % 10], phases)
                for n in range(runs)
            ],
        )


def run_reads(runstate: RunStateStore) -> None:
    """What a scrape reads of ``rem_runs`` (worker/metrics.py ``_run_families``)."""
    runstate.runs_by_outcome()
    runstate.last_finished_by_outcome()
    runstate.running_runs()


def measure(root: Path, *, dead_letters: int, sessions: int, runs: int, queue_lines: int) -> dict[str, float]:
    root.mkdir(parents=True)
    queued = measure_queue(root, queue_lines)
    queue = LazyEdgeQueue(root / "lazy-edges.jsonl")
    dead_letter_file(queue, dead_letters)
    counter = DeadLetterCounter(queue)
    assert counter.count() == dead_letters
    db = Database(root / "graph.sqlite3")
    try:
        session_tables(db, sessions)
        run_history(db, runs)
        runstate = RunStateStore(db)
        assert runstate.sessions_without_turns() == sessions // 100
        assert sum(runstate.runs_by_outcome().values()) == runs and len(runstate.running_runs()) == RUNS_RUNNING
        assert runstate.runs_by_outcome() == {r[0]: r[1] for r in db.query(SCANS_BEFORE_13[0])}
        assert runstate.last_finished_by_outcome() == {r[0]: r[1] for r in db.query(SCANS_BEFORE_13[1])}
        return {
            "run_reads": best_of(lambda: run_reads(runstate), repeat=21),
            "run_scans": best_of(lambda: [db.query(sql) for sql in SCANS_BEFORE_13], repeat=21),
            "recount": count_after_a_drain(queue, queue.dead_letter_count),
            "after_append": count_after_a_drain(queue, counter.count),
            "cached_count": best_of(counter.count),
            "no_turn_query": best_of(runstate.sessions_without_turns),
            "no_turn_before": best_of(lambda: db.query(NO_TURNS_BEFORE_17)),
            **queued,
        }
    finally:
        db.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dead-letters", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--queue-lines", type=int, default=20_000)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-scrape-"))
    try:
        measured = {}
        for scale in (1, 8):
            m = measured[scale] = measure(workdir / f"x{scale}", dead_letters=scale * args.dead_letters,
                                          sessions=scale * args.sessions, runs=scale * args.runs,
                                          queue_lines=scale * args.queue_lines)
            print(
                f"{scale}x ({scale * args.dead_letters} dead letters, {scale * args.sessions} sessions): "
                f"after a drain's {DEAD_PER_DRAIN} dead letters: recount {m['recount'] * 1000:.2f} ms (before) vs "
                f"counting the appended ones {m['after_append'] * 1000:.3f} ms (now); unchanged file {m['cached_count'] * 1e6:.0f} µs; "
                "sessions-without-turns query "
                f"{m['no_turn_query'] * 1000:.2f} ms (before migration 17: {m['no_turn_before'] * 1000:.1f} ms; run once per finished run, cached between); "
                f"{scale * args.runs} runs: a scrape's run reads {m['run_reads'] * 1e6:.0f} µs vs the scans before "
                f"migration 13 {m['run_scans'] * 1e6:.0f} µs; "
                f"{scale * args.queue_lines} queue lines: unchanged, full read {m['queue_full_unchanged'] * 1000:.2f} ms (before) vs "
                f"fold {m['queue_fold_unchanged'] * 1e6:.0f} µs (now); after an append of {QUEUE_APPEND}, full read "
                f"{m['queue_full_append'] * 1000:.2f} ms vs fold {m['queue_fold_append'] * 1e6:.0f} µs"
            )
        for name, label in (("recount", "dead-letter recount after a drain (before)"),
                            ("after_append", "dead-letter count after a drain (now)"), ("run_reads", "run reads (migration 13)"), ("run_scans", "scans before migration 13"),
                            ("no_turn_query", "sessions without turns (migration 17)"), ("no_turn_before", "sessions without turns before 17"),
                            ("queue_full_unchanged", "queue gauges, full read, unchanged (before)"),
                            ("queue_fold_unchanged", "queue gauges, fold, unchanged (now)"),
                            ("queue_full_append", "queue gauges, full read after an append (before)"),
                            ("queue_fold_append", "queue gauges, fold after an append (now)")):
            print(f"{label}: 8x / 1x = {measured[8][name] / measured[1][name]:.2f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
