"""Several workers on one database: throughput of 1, 2 and 4 worker processes digesting one corpus
through the loopback chat-completions server (tests/llm_server.py) answering each chunk after
200 ms, and the crash run — three workers, one SIGKILLed at random 20 times — on SQLite and, with
``--postgres-url``, on PostgreSQL too.

Each run starts from one ingested data dir (SQLite: a copy of an ingested template; PostgreSQL: a
fresh schema of that database, ingested anew, dropped at the end) and starts real
``python -m worker --once`` processes with ``REM_SHARED_EXTRACT=true`` (one leads, the others
follow; a finished worker is started again while sessions remain). Throughput is the commit rate:
sessions committed per second between the first commit and the last (process start-up, paid once
per worker whatever the corpus, is reported apart as wall time); each engine's speed-ups are
against its own one-worker run. Every run checks that each session was digested exactly once: as
many commits (``rem_counters.commit``) as sessions, no claim left. The graphs of every run, both
engines, must equal the first run's (canonical dump, tests/test_forget.py).

    /work/main/.venv/bin/python bench/bench_workers.py [--sessions 240] [--latency 0.2] [--kills 20] \
        [--postgres-url postgresql://rem@127.0.0.1:5432/rem_bench]
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


def one_run(data: Path, url: str | None, work: Path, name: str, server: LLMServer, *, workers: int, sessions: int,
            **options: Any) -> dict[str, Any]:
    """Run ``workers`` workers over the ingested data dir ``data`` (graph: its SQLite file, or ``url``)."""
    before = server.chat_count
    run = run_workers(data, server.url, workers=workers, logs=work / f"{name}-logs", database_url=url, **options)
    report = digest_report(data, url)
    exactly_once = report["digested"] == sessions == report["last_commit_seq"] and report["claims_left"] == 0
    return {"name": name, "workers": workers, "wall_seconds": round(run.wall_seconds, 2), "launches": run.launches,
            "kills": run.kills, "model_calls": server.chat_count - before, "exactly_once": exactly_once, **report,
            "dump": canonical_dump(data, url)}


def engine_runs(engine: str, args: argparse.Namespace, work: Path, server: LLMServer, schemas: Any) -> list[dict[str, Any]]:
    """The throughput runs and the crash run on one engine (``schemas``: PostgreSQL's, else None)."""
    sessions = corpus(args.sessions)
    template = work / "template"
    if schemas is None and not template.exists():
        asyncio.run(ingested(template, sessions, work))

    def prepared(name: str) -> tuple[Path, str | None]:
        data = work / f"{engine}-{name}"
        if schemas is None:
            shutil.copytree(template, data)
            return data, None
        url = schemas.new(f"workers_{name}")
        asyncio.run(ingested(data, sessions, work, database_url=url))
        return data, url

    runs = [(f"w{n}", {"workers": n}) for n in args.workers]
    if args.kills:
        runs.append(("crash", {"workers": 3, "kills": args.kills, "lease_timeout_seconds": 3, "kill_after": (0.1, 0.6)}))
    results = []
    for name, options in runs:
        data, url = prepared(name)
        results.append({"engine": engine, **one_run(data, url, work, f"{engine}-{name}", server, sessions=args.sessions,
                                                    llm_concurrency=args.concurrency, **options)})
    base = results[0]
    for result in results:
        result["speedup"] = round(result["sessions_per_second"] / base["sessions_per_second"], 2) if result["sessions_per_second"] else None
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=240)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=4, help="REM_LLM_CONCURRENCY of each worker")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs in the crash run (0: no crash run)")
    parser.add_argument("--postgres-url", default="",
                        help="also run on PostgreSQL: a database the bench may create (and drops) schemas in")
    parser.add_argument("--engines", nargs="+", choices=("sqlite", "postgresql"), default=None,
                        help="which engines to run (default: sqlite, and postgresql with --postgres-url)")
    args = parser.parse_args(argv)
    engines = args.engines or (["sqlite", "postgresql"] if args.postgres_url else ["sqlite"])
    if "postgresql" in engines and not args.postgres_url:
        parser.error("--engines postgresql needs --postgres-url")
    configure_logging(level="warning", fmt="json")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, LLMServer(default=slow(args.latency)) as server:
        work = Path(tmp)
        for engine in engines:
            if engine == "sqlite":
                results += engine_runs(engine, args, work, server, None)
                continue
            from bench.bench_backends import Schemas  # psycopg is loaded only for PostgreSQL

            schemas = Schemas(args.postgres_url)
            try:
                results += engine_runs(engine, args, work, server, schemas)
            finally:
                schemas.drop()
    base_dump = results[0]["dump"]
    for result in results:
        result["dump_equal_to_first"] = result.pop("dump") == base_dump
    report = {"sessions": args.sessions, "latency_seconds": args.latency, "concurrency_per_worker": args.concurrency,
              "engines": engines, "runs": results}
    print(json.dumps(report, indent=1, sort_keys=True))
    return report


if __name__ == "__main__":
    main()
