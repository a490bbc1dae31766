"""What keeping the replaced graph's paid extractions costs a restore (SQLite).

``rem-cycle restore`` now reads the replaced database's ``ok`` chunk_results (500 a page) into a
temporary file and writes those the backup lacks into the checked copy before it goes in place.
Measured: a restore of an empty graph's backup over a graph holding N and 8 × N extractions
(payloads of ~1.5 KB, like a chunk's answer), with the carry (as ``cmd_restore`` composes it) and
without (the restore as it was), best of 3, in one process.

    python bench/bench_restore_answers.py [--chunks 2000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import load_settings  # noqa: E402
from store.backend import backup, open_database, restore  # noqa: E402
from store.chunks import ChunkResultStore  # noqa: E402
from worker.knowledge import forget_again, forgotten_and_paid_in_place, keep_answers  # noqa: E402

PAYLOAD = {"unit_id": "s:chunk:0", "summary": "x" * 200, "nodes": [
    {"id": f"n{i}", "type": "CLASS", "name": f"Thing{i}", "description": "d" * 80, "aliases": [], "confidence": 0.9,
     "tags": [], "evidence": [{"memory_id": "m", "quote": "q" * 40}]} for i in range(6)], "edges": []}


def graph_with(path: Path, chunks: int) -> Any:
    settings = load_settings(data_dir=path)
    db = open_database(settings)
    store = ChunkResultStore(db)
    for n in range(chunks):
        store.record_ok(session_id=f"s{n // 10}", chunk_id=f"s{n // 10}:chunk:{n % 10}", content_hash=f"h{n:08d}",
                        text_hash=f"t{n:08d}", memory_ids=("m",), fingerprint="openai:m", tokens_in=1000, tokens_out=300,
                        latency_ms=1.0, payload=PAYLOAD, run_id=None)
    db.close()
    return settings


def timed_restore(settings: Any, source: Path, *, carry: bool) -> float:
    with tempfile.TemporaryFile("w+", encoding="utf-8") as answers:

        def step_for() -> Any:
            tombstones, _, _ = forgotten_and_paid_in_place(settings, answers)

            def step(db: Any) -> None:
                forget_again(db, tombstones)
                keep_answers(db, answers)
            return step

        started = time.perf_counter()
        restore(settings, source, carry=step_for if carry else None)
        return time.perf_counter() - started


def measure(root: Path, chunks: int) -> tuple[float, float]:
    empty = load_settings(data_dir=root / "empty")
    open_database(empty).close()
    source = root / "backup.sqlite3"
    backup(empty, source)
    best = {True: float("inf"), False: float("inf")}
    for _ in range(3):
        for carry in (False, True):
            shutil.rmtree(root / "graph", ignore_errors=True)
            settings = graph_with(root / "graph", chunks)
            best[carry] = min(best[carry], timed_restore(settings, source, carry=carry))
    return best[False], best[True]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    args = parser.parse_args(argv)
    print("| extractions in the replaced graph | restore as it was | restore keeping them | ÷ as it was |")
    print("| --- | --- | --- | --- |")
    for scale in (1, 8):
        with tempfile.TemporaryDirectory() as tmp:
            before, now = measure(Path(tmp), args.chunks * scale)
        print(f"| {args.chunks * scale:,} | {before * 1000:.0f} ms | {now * 1000:.0f} ms | {now / before:.2f}× |")


if __name__ == "__main__":
    main()
