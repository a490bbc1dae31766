"""Run every benchmark in this folder, one after another: ``python bench/run_all.py [NAME…]``.

Each ``bench_*.py`` module has a ``main(argv)`` that prints its figures; results are recorded by
hand in ``bench/RESULTS.md`` with the machine they were measured on.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> None:
    wanted = set(argv if argv is not None else sys.argv[1:])
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem
        if wanted and name not in wanted and name.removeprefix("bench_") not in wanted:
            continue
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        importlib.import_module(f"bench.{name}").main([])
        print(f"== {name} done in {time.perf_counter() - t0:.1f}s\n", flush=True)


if __name__ == "__main__":
    main()
