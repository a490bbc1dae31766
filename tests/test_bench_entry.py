"""Every benchmark can be run by ``bench/run_all.py``, which calls each module's ``main([])``."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_every_benchmark_main_takes_the_argument_list_run_all_gives_it() -> None:
    # Read, not imported: importing every benchmark would load chromadb and friends for nothing.
    refusing = []
    for path in sorted(BENCH.glob("bench_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
        if len(mains) != 1 or [a.arg for a in mains[0].args.args] != ["argv"]:
            refusing.append(path.name)
            continue
        # Its parser reads that list, not sys.argv, when it has one.
        calls = [node for node in ast.walk(mains[0]) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Attribute) and node.func.attr == "parse_args"]
        if any(not call.args for call in calls):
            refusing.append(path.name)
    assert refusing == []
