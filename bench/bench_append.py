"""What producers of the lazy-edge file queue pay for appending under an *exclusive* ``flock``
(the append protocol since the eleventh session: looking at the file's end and writing are one
step) beside the *shared* lock it replaced, with 1 and 4 producer processes appending one edge per
call with ``fsync`` — the way an agent's hook appends. The shared-lock baseline runs in the same
process tree, by swapping the lock the queue module takes (the only difference between the two).

    python bench/bench_append.py [--appends 1200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import fcntl
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import store.lazy_queue as lazy_queue  # noqa: E402


def _shared_lock_module() -> SimpleNamespace:
    """``fcntl`` as the queue module sees it, but the producer's exclusive lock is a shared one."""

    def flock(fd: int, operation: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_SH if operation == fcntl.LOCK_EX else operation)

    return SimpleNamespace(flock=flock, LOCK_EX=fcntl.LOCK_EX, LOCK_SH=fcntl.LOCK_SH, LOCK_UN=fcntl.LOCK_UN)


def _produce(path: str, first: int, count: int, shared: bool) -> None:
    if shared:
        lazy_queue.fcntl = _shared_lock_module()  # type: ignore[assignment]
    queue = lazy_queue.LazyEdgeQueue(path)
    for i in range(first, first + count):
        queue.append([{"source": "CONCEPT:producer", "target": f"CONCEPT:n{i}", "relationship": "RELATES_TO"}])


def measure(workdir: Path, *, producers: int, appends: int, shared: bool) -> float:
    """Seconds for ``producers`` processes to append ``appends`` edges between them."""
    path = workdir / f"q-{producers}-{int(shared)}-{time.monotonic_ns()}.jsonl"
    share = appends // producers
    procs = [multiprocessing.Process(target=_produce, args=(str(path), k * share, share, shared)) for k in range(producers)]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    elapsed = time.perf_counter() - started
    assert all(p.exitcode == 0 for p in procs)
    assert lazy_queue.LazyEdgeQueue(path).depth() == share * producers
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=1200)
    parser.add_argument("--rounds", type=int, default=7, help="runs per case (median)")
    args = parser.parse_args(argv)
    print("| producers | shared lock (before) | exclusive lock (now) | now ÷ before |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for producers in (1, 4):
            # The two locks take turns, round by round, so that a busy spell of the machine falls on both.
            runs: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.rounds):
                for shared in (True, False):
                    runs[shared].append(measure(Path(tmp), producers=producers, appends=args.appends, shared=shared))
            times = {shared: statistics.median(seconds) for shared, seconds in runs.items()}
            rate = {shared: args.appends / seconds for shared, seconds in times.items()}
            print(f"| {producers} | {rate[True]:,.0f} appends/s | {rate[False]:,.0f} appends/s | {times[False] / times[True]:.2f}× the time |")


if __name__ == "__main__":
    main()
