"""Several workers on one database: throughput of 1, 2 and 4 worker processes digesting one corpus
through the loopback chat-completions server (tests/llm_server.py) answering each chunk after
200 ms, and the crash run — three workers, one SIGKILLed at random 20 times.

Each run copies one ingested data dir (SQLite file + embedded Chroma) and starts real
``python -m worker --once`` processes with ``REM_SHARED_EXTRACT=true`` (one leads, the others
follow; a finished worker is started again while sessions remain). Throughput is the commit rate:
sessions committed per second between the first commit and the last (process start-up, paid once
per worker whatever the corpus, is reported apart as wall time). Every run checks that each
session was digested exactly once: as many commits (``rem_counters.commit``) as sessions, no claim
left. The graphs of every run must be equal (canonical dump, tests/test_forget.py).

    /work/main/.venv/bin/python bench/bench_workers.py [--sessions 240] [--latency 0.2] [--kills 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.llm_server import LLMServer, slow  # noqa: E402
from tests.workers_support import canonical_dump, corpus, digest_report, ingested, run_workers  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


def one_run(template: Path, work: Path, name: str, server: LLMServer, *, workers: int, sessions: int, **options: Any) -> dict[str, Any]:
    data = work / name
    shutil.copytree(template, data)
    before = server.chat_count
    run = run_workers(data, server.url, workers=workers, logs=work / f"{name}-logs", **options)
    report = digest_report(data / "graph.sqlite3")
    exactly_once = report["digested"] == sessions == report["last_commit_seq"] and report["claims_left"] == 0
    return {"name": name, "workers": workers, "wall_seconds": round(run.wall_seconds, 2), "launches": run.launches,
            "kills": run.kills, "model_calls": server.chat_count - before, "exactly_once": exactly_once, **report,
            "dump": canonical_dump(data / "graph.sqlite3")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=240)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=4, help="REM_LLM_CONCURRENCY of each worker")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs in the crash run (0: no crash run)")
    args = parser.parse_args(argv)
    configure_logging(level="warning", fmt="json")
    with tempfile.TemporaryDirectory() as tmp, LLMServer(default=slow(args.latency)) as server:
        work = Path(tmp)
        template = work / "template"
        asyncio.run(ingested(template, corpus(args.sessions), work))
        results = [one_run(template, work, f"w{n}", server, workers=n, sessions=args.sessions, llm_concurrency=args.concurrency)
                   for n in args.workers]
        if args.kills:
            results.append(one_run(template, work, "crash", server, workers=3, sessions=args.sessions, kills=args.kills,
                                   llm_concurrency=args.concurrency, lease_timeout_seconds=3, kill_after=(0.1, 0.6)))
    base, base_dump = results[0], results[0]["dump"]
    for result in results:
        result["speedup"] = round(result["sessions_per_second"] / base["sessions_per_second"], 2) if result["sessions_per_second"] else None
        result["dump_equal_to_first"] = result.pop("dump") == base_dump
    report = {"sessions": args.sessions, "latency_seconds": args.latency, "concurrency_per_worker": args.concurrency, "runs": results}
    print(json.dumps(report, indent=1, sort_keys=True))
    return report


if __name__ == "__main__":
    main()
