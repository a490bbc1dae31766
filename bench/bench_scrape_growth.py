"""What the issue-13 metrics cost a scrape as the data grows (1× and 8×).

``rem_cycle_dead_letters`` counts the records of a file that only grows; a scrape recounts it only
when the file changed (a ``stat`` otherwise). ``rem_cycle_sessions_without_turns`` reads every
ingested session against the memory index; a scrape recomputes it only when a run started or
finished. Times, in the same process: a full recount / the query (what a scrape would pay without
the cache) against a cached scrape's ``stat`` / a dictionary lookup, at N and 8 × N.

    python bench/bench_scrape_growth.py
    python bench/bench_scrape_growth.py --dead-letters 20000 --sessions 5000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_metrics import best_of  # noqa: E402
from store.db import Database  # noqa: E402
from store.lazy_queue import LazyEdgeQueue  # noqa: E402
from store.runstate import RunStateStore  # noqa: E402
from worker.metrics import DeadLetterCounter  # noqa: E402

TURNS_PER_SESSION = 20


def dead_letter_file(queue: LazyEdgeQueue, records: int) -> None:
    record = {"reason": "max-attempts", "detail": "chroma-row-not-found: memory:x", "attempts": 5,
              "deadLetteredAt": "2026-11-29T10:00:00.000Z", "line": json.dumps({"source": "CONCEPT:a", "target": "memory:x"})}
    with queue.dead_letter_path.open("w", encoding="utf-8") as out:
        out.writelines(json.dumps({**record, "n": n}) + "\n" for n in range(records))


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


def measure(root: Path, *, dead_letters: int, sessions: int) -> dict[str, float]:
    root.mkdir(parents=True)
    queue = LazyEdgeQueue(root / "lazy-edges.jsonl")
    dead_letter_file(queue, dead_letters)
    counter = DeadLetterCounter(queue)
    assert counter.count() == dead_letters
    db = Database(root / "graph.sqlite3")
    try:
        session_tables(db, sessions)
        runstate = RunStateStore(db)
        assert runstate.sessions_without_turns() == sessions // 100
        return {
            "recount": best_of(queue.dead_letter_count),
            "cached_count": best_of(counter.count),
            "no_turn_query": best_of(runstate.sessions_without_turns),
        }
    finally:
        db.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dead-letters", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=5_000)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rem-bench-scrape-"))
    try:
        for scale in (1, 8):
            m = measure(workdir / f"x{scale}", dead_letters=scale * args.dead_letters, sessions=scale * args.sessions)
            print(
                f"{scale}x ({scale * args.dead_letters} dead letters, {scale * args.sessions} sessions): "
                f"dead-letter recount {m['recount'] * 1000:.1f} ms vs cached scrape {m['cached_count'] * 1e6:.0f} µs "
                f"(ratio {m['recount'] / m['cached_count']:.0f}x); sessions-without-turns query "
                f"{m['no_turn_query'] * 1000:.1f} ms (run once per finished run, cached between)"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
