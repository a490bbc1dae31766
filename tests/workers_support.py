"""Several real worker processes (``python -m worker --once`` with ``REM_SHARED_EXTRACT``) on one
graph database — the data dir's SQLite file, or the PostgreSQL database a ``database_url`` names —
and one embedded Chroma, extracting through the loopback model server — for tests/test_workers.py
and bench/bench_workers.py; and a database that refuses the model's answers (a trigger), for the
tests of answers held in a worker's memory."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from config import Settings, load_settings
from pipelines.extract.inflight import HeldAnswers
from pipelines.importer import import_sessions
from store.backend import open_database_at
from store.chroma import ChromaStore
from store.held_file import HeldAnswersFile
from tests.conftest import ROOT, write_sessions
from tests.daemon_support import start_worker, worker_env
from tests.llm_server import LLMServer
from tests.test_extract_cycle import llm_settings
from tests.test_forkreuse import HISTORY, conversation
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


async def ingested(data_dir: Path, sessions: list[dict[str, Any]], work: Path, *, database_url: str | None = None) -> Settings:
    """Import ``sessions`` into the data dir's embedded Chroma and ingest them (no extraction) into
    the data dir's SQLite file, or the PostgreSQL database ``database_url``."""
    settings = load_settings(data_dir=data_dir, batch_limit=max(1, len(sessions)), database_url=database_url or "")
    await import_sessions(write_sessions(work / f"{data_dir.name}.jsonl", sessions), chroma=ChromaStore(settings),
                          memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    result = await run_cycle(settings, phases=tuple(p for p in PHASES if p[0] == "ingest"))
    assert result.outcome == "completed", result.message
    return settings


REFUSED = "chunk_results refuses writes"


def refuse_answers(settings: Settings, database_url: str | None, *, chunk: str | None = None) -> None:
    """Make the graph database refuse every write of ``chunk_results`` (a trigger that raises);
    ``chunk``: only that chunk's answer (its ``ok`` row)."""
    only = f"NEW.chunk_id = '{chunk}' AND NEW.status = 'ok'" if chunk else "TRUE"
    if database_url is None:
        with sqlite3.connect(settings.graph_path) as conn:
            for verb in ("INSERT", "UPDATE"):
                conn.execute(f"CREATE TRIGGER refuse_{verb.lower()} BEFORE {verb} ON chunk_results WHEN {only} "
                             f"BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END")
        return
    with psycopg.connect(database_url) as conn:
        conn.execute(f"CREATE FUNCTION refuse_answers() RETURNS trigger LANGUAGE plpgsql AS "
                     f"$$BEGIN IF {only} THEN RAISE EXCEPTION '{REFUSED}'; END IF; RETURN NEW; END$$")
        conn.execute("CREATE TRIGGER refuse_answers BEFORE INSERT OR UPDATE ON chunk_results "
                     "FOR EACH ROW EXECUTE FUNCTION refuse_answers()")


def slow_commits_elsewhere(database_url: str, *, seconds: float = 0.3) -> None:
    """(PostgreSQL) Each statement that inserts ``nodes`` rows for the worker running as if on
    another host (:data:`ELSEWHERE`) waits ``seconds`` before it returns, inside its transaction: its
    commit stays observable long enough for a kill to land mid-commit on a loaded machine, where a
    commit of a few milliseconds can fall between two looks at ``pg_locks`` every time."""
    with psycopg.connect(database_url) as conn:
        conn.execute(f"CREATE FUNCTION slow_commits_elsewhere() RETURNS trigger LANGUAGE plpgsql AS "
                     f"$$BEGIN IF current_setting('application_name') LIKE '%-{ELSEWHERE}' THEN "
                     f"PERFORM pg_sleep({float(seconds)}); END IF; RETURN NULL; END$$")
        conn.execute("CREATE TRIGGER slow_commits_elsewhere AFTER INSERT ON nodes "
                     "FOR EACH STATEMENT EXECUTE FUNCTION slow_commits_elsewhere()")


def accept_answers(settings: Settings, database_url: str | None) -> None:
    if database_url is None:
        with sqlite3.connect(settings.graph_path) as conn:
            conn.execute("DROP TRIGGER refuse_insert")
            conn.execute("DROP TRIGGER refuse_update")
        return
    with psycopg.connect(database_url) as conn:
        conn.execute("DROP TRIGGER refuse_answers ON chunk_results")


async def extract_phase(settings: Settings, held: HeldAnswers | None = None) -> dict[str, Any]:
    result = await run_cycle(settings, held_answers=held)
    assert result.outcome == "completed", result.message
    return result.phases["extract"]

def held_count(settings: Settings, held: HeldAnswers) -> int:
    """How many paid answers are held: in ``held`` and in the data dir's file (an extract phase
    writes what it holds there when it ends: worker.held_answers)."""
    return len(held) + len(HeldAnswersFile(settings.held_answers_path, root=settings.data_dir).read().records)


async def three_answers_held(data_dir: Path, llm: LLMServer, work: Path, held: HeldAnswers, *, database_url: str | None) -> Settings:
    """Session ``s`` (three chunks) ingested, then extracted once while the database refused every
    answer: the three answers are held (in ``held`` or the data dir's file) and the database accepts
    writes again. Returns the settings of the loopback model server ``llm``."""
    config = llm_settings(data_dir, llm, **({"database_url": database_url} if database_url else {}))
    await ingested(data_dir, [conversation("s", HISTORY)], work, database_url=database_url)
    refuse_answers(config, database_url)
    await extract_phase(config, held)
    assert held_count(config, held) == 3
    accept_answers(config, database_url)
    return config


@dataclass
class WorkersRun:
    """What a run of workers did."""

    workers: int
    wall_seconds: float
    kills: int = 0
    launches: int = 0
    exit_codes: list[int] = field(default_factory=list)
    # Per kill: the sessions the killed worker held claims on, each with its lease's end.
    killed_claims: list[dict[str, str]] = field(default_factory=list)


# A worker that runs as if on another host: its lease-owner ids name that host, so the others cannot
# see that its process is gone and take its claims over only when its leases run out. (A second host
# cannot run here; the hostname is all the lease rules read of one.)
ELSEWHERE = "elsewhere"
_ON_ANOTHER_HOST = (
    f"import runpy, socket; socket.gethostname = lambda: {ELSEWHERE!r}; "
    "runpy.run_module('worker', run_name='__main__', alter_sys=True)"
)


def run_workers(data_dir: Path, llm_url: str, *, workers: int, logs: Path, kills: int = 0, seed: int = 1,
                kill_after: tuple[float, float] = (0.3, 1.5), timeout: float = 600, database_url: str | None = None,
                remote_first: bool = False, mid_commit: bool = False, **overrides: Any) -> WorkersRun:
    """Keep ``workers`` ``--once`` processes running until no session is left to digest (a
    finished worker is started again while work remains); with ``kills``, SIGKILL a worker that
    holds session claims (mid-extraction or mid-commit) that many times, a random delay in
    ``kill_after`` seconds apart. ``database_url``: the workers' graph is that PostgreSQL database
    (each worker's connections are named ``rem-worker-<slot>``). ``remote_first``: the first worker
    of slot 0 runs as if on another host (:data:`ELSEWHERE`), and it alone is killed. ``mid_commit``
    (PostgreSQL): a kill waits until a claim holder's open transaction has written graph rows — it
    dies mid-commit."""
    if mid_commit and database_url is None:
        raise ValueError("mid_commit needs PostgreSQL: SQLite does not show who is inside a transaction")
    env = worker_env(data_dir, **worker_settings(llm_url, **overrides), **({"database_url": database_url} if database_url else {}))
    rng = random.Random(seed)
    logs.mkdir(parents=True, exist_ok=True)
    run = WorkersRun(workers=workers, wall_seconds=0.0)
    procs: list[subprocess.Popen[bytes] | None] = [None] * workers
    remote: subprocess.Popen[bytes] | None = None
    started = time.perf_counter()
    next_kill = started + rng.uniform(*kill_after) if kills else float("inf")
    with graph_database(data_dir, database_url) as db:
        try:
            while True:
                remaining = pending(db)
                # The worker to be killed holds claims before the others start: started together, one
                # of them could claim every session first and leave it nothing to die holding.
                waiting = remote is not None and run.kills < kills and remote.poll() is None and remote.pid not in claim_holders(db)
                for slot, proc in enumerate(procs):
                    if proc is not None and proc.poll() is not None:
                        run.exit_codes.append(proc.returncode)
                        procs[slot] = None
                    if procs[slot] is None and remaining and not (waiting and slot > 0):
                        run.launches += 1
                        procs[slot] = _launch(env, slot, logs, remote=remote_first and run.launches == 1)
                        remote = procs[slot] if remote_first and run.launches == 1 else remote
                if not remaining and all(p is None for p in procs):
                    break
                now = time.perf_counter()
                if run.kills < kills and now >= next_kill:
                    holding = claim_holders(db)
                    committing = committing_slots(db) if mid_commit else set(range(workers))
                    alive = [p for slot, p in enumerate(procs)
                             if p is not None and p.poll() is None and p.pid in holding and slot in committing
                             and (remote is None or p is remote)]
                    if alive:
                        victim = rng.choice(alive)
                        victim.kill()
                        victim.wait()
                        run.kills += 1
                        run.killed_claims.append(claims_of(db, victim.pid))
                        next_kill = now + rng.uniform(*kill_after)
                if now - started > timeout:
                    raise TimeoutError(f"workers did not finish in {timeout} s: {remaining} sessions left")
                time.sleep(0.002 if mid_commit and run.kills < kills else 0.02)
        finally:
            for proc in procs:
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
    run.wall_seconds = time.perf_counter() - started
    return run


def _launch(env: dict[str, str], slot: int, logs: Path, *, remote: bool) -> subprocess.Popen[bytes]:
    env = {**env, "PGAPPNAME": f"rem-worker-{slot}" + (f"-{ELSEWHERE}" if remote else "")}
    log_path = logs / f"worker-{slot}.log"
    if not remote:
        return start_worker("--once", env=env, log_path=log_path)
    with log_path.open("ab") as handle:
        return subprocess.Popen([sys.executable, "-c", _ON_ANOTHER_HOST, "--once"], stdout=handle, stderr=subprocess.STDOUT,
                                env=env, cwd=ROOT)


@contextmanager
def graph_database(data_dir: Path, database_url: str | None = None) -> Iterator[Any]:
    """The workers' graph database, read-only: the data dir's SQLite file or ``database_url``."""
    db = open_database_at(path=data_dir / "graph.sqlite3", url=database_url, readonly=True)
    try:
        yield db
    finally:
        db.close()


def _pid(owner: str) -> int | None:
    parts = owner.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def claim_holders(db: Any) -> set[int]:
    """The pids of the processes that hold session claims (owner ``host:pid:nonce``)."""
    return {pid for (owner,) in db.query("SELECT DISTINCT owner FROM session_claims") if (pid := _pid(owner)) is not None}


def claims_of(db: Any, pid: int) -> dict[str, str]:
    """The session claims process ``pid`` holds: session id → its lease's end."""
    rows = db.query("SELECT owner, session_id, lease_expires_at FROM session_claims")
    return {session_id: expires for owner, session_id, expires in rows if _pid(owner) == pid}


def commit_naming(db: Any, session: str, node: str, name: str, *, fold: str | None = None, rule: str = "judge") -> None:
    """What another worker's commit of ``session`` naming ``node`` (of the type its id says) writes
    on the graph database ``db``, in one transaction (commit_session: its claim, then its fold of
    ``fold`` into ``node`` by ``rule``, the folded name kept by the claims moved): it starts no new
    identity epoch, so a kept index must learn it."""
    from store.facts import NodeFacts
    from store.graph import GraphStore, Node
    from store.merges import MergeStore
    from store.provenance import ClaimRow, ProvenanceStore
    from store.runstate import RunStateStore, SessionRevision

    runstate = RunStateStore(db)
    runstate.mark_ingested(SessionRevision(session, "r1", "2026-11-01T00:00:00Z"), "run-a")
    with db.transaction():
        runstate.begin_commit()
        GraphStore(db).upsert_nodes([Node(node, node.partition(":")[0], name, {"aliases": [name]})])
        ProvenanceStore(db).add_claims([ClaimRow(node, f"session:{session}", node, NodeFacts.of(aliases=[name]), name=name)])
        if fold is not None:
            MergeStore(db).merge_nodes(fold, node, rule=rule, name_as_alias=False)
        runstate.mark_digested(session, "r1", "run-a")


def committing_slots(db: Any) -> set[int]:
    """(PostgreSQL) The worker slots whose open transaction has written ``nodes`` rows: a session's
    commit is under way (the lock is held until the transaction ends)."""
    rows = db.query(
        "SELECT DISTINCT a.application_name FROM pg_stat_activity AS a JOIN pg_locks AS l ON l.pid = a.pid "
        "WHERE a.application_name LIKE 'rem-worker-%' AND l.relation = 'nodes'::regclass AND l.mode = 'RowExclusiveLock'"
    )
    return {int(name.split("-")[2]) for (name,) in rows}


def pending(db: Any) -> int:
    """Sessions still to digest (undigested at their ingested revision)."""
    return db.query(
        "SELECT COUNT(*) FROM session_digests WHERE state = 'undigested' AND ingested_revision = input_revision"
    )[0][0]


def digest_report(data_dir: Path, database_url: str | None = None) -> dict[str, Any]:
    """States of the digests, sessions digested as counted by every run, commits, the runs'
    outcomes, and the commit rate: sessions committed per second between the first commit and the
    last (start-up excluded: every worker pays it once, whatever the corpus)."""
    with graph_database(data_dir, database_url) as db:
        states = {state: count for state, count in db.query("SELECT state, COUNT(*) FROM session_digests GROUP BY state")}
        digested_by_runs = 0
        outcomes: dict[str, int] = {}
        roles = {"leader": 0, "follower": 0}
        for outcome, phases in db.query("SELECT outcome, phases FROM rem_runs"):
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            parsed = json.loads(phases or "{}")
            digested_by_runs += int(parsed.get("extract", {}).get("sessions_digested", 0))
            if "extract" in parsed:
                roles["leader" if "ingest" in parsed else "follower"] += 1
        commits = db.query("SELECT COUNT(*), COUNT(DISTINCT commit_seq), MAX(commit_seq) FROM session_digests WHERE state = 'digested'")[0]
        # UTC ISO stamps of one format: text order is time order on both engines.
        first, last = db.query("SELECT MIN(updated_at), MAX(updated_at) FROM session_digests WHERE state = 'digested'")[0]
        claims_left = db.query("SELECT COUNT(*) FROM session_claims")[0][0]
    span = (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds() if first is not None else 0.0
    return {
        "states": states, "digested_by_runs": digested_by_runs, "run_outcomes": outcomes, "roles": roles,
        "digested": commits[0], "distinct_commit_seqs": commits[1], "last_commit_seq": commits[2],
        "claims_left": claims_left, "commit_span_seconds": round(span, 3),
        "sessions_per_second": round((commits[0] - 1) / span, 2) if span > 0 else None,
    }


def canonical_dump(data_dir: Path, database_url: str | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """The graph as data without write times or merge ids (tests/test_forget.py's view), on either engine."""
    from tests.test_forget import canonical

    return canonical(load_settings(data_dir=data_dir, database_url=database_url or ""))
