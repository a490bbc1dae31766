"""Several real worker processes (``python -m worker --once`` with ``REM_SHARED_EXTRACT``) on one
SQLite file and one embedded Chroma, extracting through the loopback model server — for
tests/test_workers.py and bench/bench_workers.py."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from config import Settings, load_settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from tests.conftest import write_sessions
from tests.daemon_support import start_worker, worker_env
from worker.cycle import PHASES, run_cycle

START = datetime(2026, 11, 1, tzinfo=UTC)
# CamelCase words the loopback server turns into CLASS nodes: each session names three, so
# sessions share nodes and their commits touch the same rows.
VOCABULARY = tuple(f"{a}{b}" for a in ("Lazy", "Drain", "Graph", "Session", "Chunk", "Claim") for b in ("Queue", "Worker", "Store", "Index", "Lease"))


def corpus(count: int, *, seed: int = 7) -> list[dict[str, Any]]:
    """``count`` sessions of three short turns (one chunk each), oldest first. A third of them
    write one name in the plural (``ClaimLeases``): the same class, linked by identity resolution
    to the singular's node whichever comes first."""
    rng = random.Random(seed)
    sessions = []
    for i in range(count):
        names = rng.sample(VOCABULARY, 3)
        if i % 3 == 0:
            names[0] += "s"
        sessions.append({
            "sessionId": f"w{i:04d}", "title": f"work {i}", "createdAt": (START + timedelta(minutes=i)).isoformat().replace("+00:00", "Z"),
            "summary": f"session {i}", "userId": "u-1",
            "turns": [{"id": f"w{i:04d}-t{t}", "role": "user" if t % 2 == 0 else "assistant",
                       "text": f"Turn {t} of session {i} is about the {names[t]} and the {names[(t + 1) % 3]}."} for t in range(3)],
        })
    return sessions


def worker_settings(llm_url: str, **overrides: Any) -> dict[str, str]:
    """The ``REM_*`` values every worker of a run gets."""
    values = {"shared_extract": "true", "extractor": "openai", "llm_base_url": llm_url, "llm_max_retries": "0",
              "llm_concurrency": "4", "log_level": "warning", "log_format": "json"}
    values.update({k: str(v) for k, v in overrides.items()})
    return values


async def ingested(data_dir: Path, sessions: list[dict[str, Any]], work: Path) -> Settings:
    """Import ``sessions`` into the data dir's embedded Chroma and ingest them (no extraction)."""
    settings = load_settings(data_dir=data_dir, batch_limit=max(1, len(sessions)))
    await import_sessions(write_sessions(work / f"{data_dir.name}.jsonl", sessions), chroma=ChromaStore(settings),
                          memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    result = await run_cycle(settings, phases=tuple(p for p in PHASES if p[0] == "ingest"))
    assert result.outcome == "completed", result.message
    return settings


@dataclass
class WorkersRun:
    """What a run of workers did."""

    workers: int
    wall_seconds: float
    kills: int = 0
    launches: int = 0
    exit_codes: list[int] = field(default_factory=list)


def run_workers(data_dir: Path, llm_url: str, *, workers: int, logs: Path, kills: int = 0, seed: int = 1,
                kill_after: tuple[float, float] = (0.3, 1.5), timeout: float = 600, **overrides: Any) -> WorkersRun:
    """Keep ``workers`` ``--once`` processes running until no session is left to digest (a
    finished worker is started again while work remains); with ``kills``, SIGKILL a worker that
    holds session claims (mid-extraction or mid-commit) that many times, a random delay in
    ``kill_after`` seconds apart."""
    env = worker_env(data_dir, **worker_settings(llm_url, **overrides))
    rng = random.Random(seed)
    logs.mkdir(parents=True, exist_ok=True)
    run = WorkersRun(workers=workers, wall_seconds=0.0)
    procs: list[subprocess.Popen[bytes] | None] = [None] * workers
    started = time.perf_counter()
    next_kill = started + rng.uniform(*kill_after) if kills else float("inf")
    try:
        while True:
            remaining = pending(data_dir / "graph.sqlite3")
            for slot, proc in enumerate(procs):
                if proc is not None and proc.poll() is not None:
                    run.exit_codes.append(proc.returncode)
                    procs[slot] = None
                if procs[slot] is None and remaining:
                    run.launches += 1
                    procs[slot] = start_worker("--once", env=env, log_path=logs / f"worker-{slot}.log")
            if not remaining and all(p is None for p in procs):
                break
            now = time.perf_counter()
            if run.kills < kills and now >= next_kill:
                holding = claim_holders(data_dir / "graph.sqlite3")
                alive = [p for p in procs if p is not None and p.poll() is None and p.pid in holding]
                if alive:
                    victim = rng.choice(alive)
                    victim.kill()
                    victim.wait()
                    run.kills += 1
                    next_kill = now + rng.uniform(*kill_after)
            if now - started > timeout:
                raise TimeoutError(f"workers did not finish in {timeout} s: {remaining} sessions left")
            time.sleep(0.02)
    finally:
        for proc in procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    run.wall_seconds = time.perf_counter() - started
    return run


def claim_holders(graph_path: Path) -> set[int]:
    """The pids of this host's processes that hold session claims (owner ``host:pid:nonce``)."""
    conn = sqlite3.connect(graph_path, timeout=30)
    try:
        owners = [r[0] for r in conn.execute("SELECT DISTINCT owner FROM session_claims")]
    finally:
        conn.close()
    return {int(o.rsplit(":", 2)[1]) for o in owners if o.count(":") >= 2 and o.rsplit(":", 2)[1].isdigit()}


def pending(graph_path: Path) -> int:
    """Sessions still to digest (undigested at their ingested revision)."""
    conn = sqlite3.connect(graph_path, timeout=30)
    try:
        return conn.execute(
            "SELECT COUNT(*) FROM session_digests WHERE state = 'undigested' AND ingested_revision = input_revision"
        ).fetchone()[0]
    finally:
        conn.close()


def digest_report(graph_path: Path) -> dict[str, Any]:
    """States of the digests, sessions digested as counted by every run, commits, the runs'
    outcomes, and the commit rate: sessions committed per second between the first commit and the
    last (start-up excluded: every worker pays it once, whatever the corpus)."""
    conn = sqlite3.connect(graph_path, timeout=30)
    try:
        states = dict(conn.execute("SELECT state, COUNT(*) FROM session_digests GROUP BY state").fetchall())
        digested_by_runs = 0
        outcomes: dict[str, int] = {}
        roles = {"leader": 0, "follower": 0}
        for outcome, phases in conn.execute("SELECT outcome, phases FROM rem_runs"):
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            parsed = json.loads(phases or "{}")
            digested_by_runs += int(parsed.get("extract", {}).get("sessions_digested", 0))
            if "extract" in parsed:
                roles["leader" if "ingest" in parsed else "follower"] += 1
        commits = conn.execute("SELECT COUNT(*), COUNT(DISTINCT commit_seq), MAX(commit_seq) FROM session_digests WHERE state = 'digested'").fetchone()
        first, last = conn.execute(
            "SELECT MIN(julianday(updated_at)), MAX(julianday(updated_at)) FROM session_digests WHERE state = 'digested'"
        ).fetchone()
        claims_left = conn.execute("SELECT COUNT(*) FROM session_claims").fetchone()[0]
    finally:
        conn.close()
    span = (last - first) * 86400.0 if first is not None else 0.0
    return {
        "states": states, "digested_by_runs": digested_by_runs, "run_outcomes": outcomes, "roles": roles,
        "digested": commits[0], "distinct_commit_seqs": commits[1], "last_commit_seq": commits[2],
        "claims_left": claims_left, "commit_span_seconds": round(span, 3),
        "sessions_per_second": round((commits[0] - 1) / span, 2) if span > 0 else None,
    }


def canonical_dump(graph_path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """The graph as data without write times or merge ids (tests/test_forget.py's view)."""
    from tests.test_forget import canonical

    return canonical(graph_path)
