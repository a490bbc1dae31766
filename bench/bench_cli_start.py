"""What starting a command costs: CPU seconds of ``import worker.cli`` in a fresh interpreter.

``python bench/run_all.py cli_start`` — each figure is the median of ``RUNS`` fresh interpreters
(CPU time of the child: user + system), beside a bare ``python -c pass`` and beside the same import
with the deferred libraries imported first (what every command paid before they were deferred),
all in this process's run. Source is compiled to bytecode first (``compileall``), as an installed
package is: a checkout run with ``PYTHONDONTWRITEBYTECODE=1`` compiles every module on every start.
"""

from __future__ import annotations

import compileall
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = 9
# Libraries only some commands need; worker.cli must not import them (tests/test_cli_start.py).
DEFERRED_LIBRARIES = ("networkx", "httpx", "chromadb", "mcp", "psycopg")


def child_cpu_seconds(statement: str) -> float:
    """CPU seconds (user + system) a fresh interpreter spends running ``statement``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", statement], cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_cpu(statement: str) -> float:
    return statistics.median(child_cpu_seconds(statement) for _ in range(RUNS))


def main(argv: list[str] | None = None) -> None:
    for package in ("config", "store", "pipelines", "worker"):
        compileall.compile_dir(ROOT / package, quiet=1)
    bare = median_cpu("pass")
    now = median_cpu("import worker.cli")
    eager = median_cpu("import networkx, httpx\nimport worker.cli")
    print(f"python -c pass:                         {bare:.3f} s CPU")
    print(f"import worker.cli:                      {now:.3f} s CPU")
    print(f"… with networkx and httpx imported too: {eager:.3f} s CPU  (ratio now/eager {now / eager:.2f})")


if __name__ == "__main__":
    main(sys.argv[1:])
