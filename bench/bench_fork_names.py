"""What the check that a reused answer does not name its session costs (``names_its_session``).

``answer_moved_to`` for the 200 heuristic answers of a 200-chunk session moved to a fork of it,
with the check and with it replaced by one that says no (main's way), alternated in one process,
best of 20 each. Pure CPU: no database. Two ids of the original: ``s`` (a letter in nearly every
answer's text, so the pattern runs each time: the worst case) and a dated id like the sample's.

    python bench/bench_fork_names.py
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pipelines.extract.model as model  # noqa: E402
from bench.bench_fork_reuse import BUDGET, turns  # noqa: E402
from config import load_settings  # noqa: E402
from pipelines.extract.heuristic import HeuristicExtractor  # noqa: E402
from pipelines.extract.units import plan_units  # noqa: E402

CHUNKS = 200


def measure(session_id: str) -> dict[str, float]:
    """Best wall time of moving every answer of ``session_id`` to its fork: with the check, without."""
    types = load_settings().semantic_types
    units = plan_units(session_id, turns(session_id, CHUNKS), budget_tokens=BUDGET)
    fork = plan_units("fork", turns("fork", CHUNKS), budget_tokens=BUDGET)
    extractor = HeuristicExtractor()
    answers = [model.validate_extraction(asyncio.run(extractor.extract(u)).raw, u, semantic_types=types) for u in units]
    checks = {"with": model.names_its_session, "without": lambda *_: False}
    best = dict.fromkeys(checks, float("inf"))
    try:
        for _ in range(20):
            for label, check in checks.items():
                model.names_its_session = check
                started = time.perf_counter()
                for answer, unit, source in zip(answers, fork, units):
                    assert model.answer_moved_to(answer, unit, source.memory_ids, session_id=session_id) is not None
                best[label] = min(best[label], time.perf_counter() - started)
    finally:
        model.names_its_session = checks["with"]
    return best


def main(argv: list[str] | None = None) -> None:
    print(f"answer_moved_to for {CHUNKS} answers, best of 20:")
    print("| original's id | with the check | without | ratio |\n| --- | --- | --- | --- |")
    for session_id in ("s", "sess-2026-11-09-3a5f31"):
        best = measure(session_id)
        print(f"| `{session_id}` | {best['with'] * 1000:.2f} ms | {best['without'] * 1000:.2f} ms | {best['with'] / best['without']:.2f}× |")


if __name__ == "__main__":
    main()
