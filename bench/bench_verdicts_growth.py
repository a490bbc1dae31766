"""What ``identity_verdicts`` holds, and what a session's verdicts cost, after 1× and 8× the sessions.

Each session's extraction asks the model ``--questions`` identity questions (``REM_LLM_JUDGE``): the
resolver looks them up (``VerdictStore.given``), keeps each answer as it comes (``keep``), and the
commit uses them. Before (day400) nothing was ever deleted: the table held every question ever
asked. Now the commit settles its session's verdicts (``settle``, in its transaction). The same
sessions are run both ways, on a fresh database each, at N and 8 × N sessions; the figure is the
rows left and the median time of one session's verdict work (look-up, keeps, settle) over its last
50 sessions, in one process.

    python bench/bench_verdicts_growth.py [--sessions 250 2000] [--questions 6] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.growth import at_scales, engines  # noqa: E402
from store.db import Database  # noqa: E402
from store.verdicts import VerdictStore  # noqa: E402

MEASURED = 50  # the last sessions of each run, whose verdict work is timed


def session_questions(session: int, questions: int) -> list[str]:
    return [hashlib.sha256(f"{session}:{q}".encode()).hexdigest() for q in range(questions)]


def measure(db: Database, *, sessions: int, questions: int, settle: bool) -> dict[str, Any]:
    store = VerdictStore(db)
    times = []
    for session in range(sessions):
        asked = session_questions(session, questions)
        t0 = time.perf_counter()
        store.given(asked)
        for question in asked:
            store.keep(question, f"CLASS:N{question[:6]}", session=f"s{session}")
        if settle:
            with db.transaction():  # the commit's transaction
                store.settle(f"s{session}")
        if session >= sessions - MEASURED:
            times.append((time.perf_counter() - t0) * 1000)
    return {"sessions": sessions, "rows": db.query("SELECT COUNT(*) FROM identity_verdicts")[0][0], "ms": statistics.median(times)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[250, 2000], help="sessions at 1× and 8×")
    parser.add_argument("--questions", type=int, default=6, help="identity questions per session")
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args(argv)
    for engine, url in engines(args.postgres_url):
        print(f"{engine}: {args.questions} identity verdicts per session")
        print("| sessions | rows left, before | session's verdict work, before | ÷ 1× | rows left, now | session's verdict work, now | ÷ 1× |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        counts = sorted(args.sessions)
        runs = {settle: at_scales(url, lambda db, count, settle=settle: measure(db, sessions=count, questions=args.questions, settle=settle),
                                  scales=tuple(counts)) for settle in (False, True)}
        first_before, first_now = runs[False][0], runs[True][0]
        for before, now in zip(runs[False], runs[True], strict=True):
            print(f"| {before['sessions']:,} | {before['rows']:,} | {before['ms']:.2f} ms | {before['ms'] / first_before['ms']:.2f}× "
                  f"| {now['rows']:,} | {now['ms']:.2f} ms | {now['ms'] / first_now['ms']:.2f}× |")


if __name__ == "__main__":
    main()
