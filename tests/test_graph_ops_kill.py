"""Crash matrix for the graph's hand operations: a real ``rem-cycle forget``, ``merge`` and
``unmerge`` (forked from tests/fork_server.py, so a trial pays no interpreter start) killed with
SIGKILL at random points, on a graph big enough that each runs for a while (sessions of the growth
benchmark's corpus built through the stores, plus one long session whose forget touches thousands
of points; the merge moves the two most-cited nodes' rows).

Each operation is one SQLite transaction, so after every kill the graph (canonical dump: nodes,
edges, points, claims, aliases, merges, tombstones, without write times) must be exactly the state
before it or exactly the state an uninterrupted run leaves, with ``integrity_check`` ``ok``; and
running the command again must complete and leave the after-state (a merge or unmerge that had
already committed is refused with a clear error instead, changing nothing). The checks are on
states only: where a kill lands on a loaded machine is reported, never asserted.

The graph is 40 sessions and a 150-turn session (it was 80 and 300): the forget still adds or
removes about 3,000 rows in its one transaction and the merge about 5,600, and each kill is drawn
over the same share of the run (0 to 1.2 times its measured uninterrupted time from opening the
graph), so the trials hit the same steps (opening, the writes, the commit, after the end) at half
the build and about half of each run and re-run.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.bench_provenance import TURNS_PER_SESSION, Graph, turn_text
from config import load_settings
from tests.test_crash_matrix import ForkServer, alive, wait_for
from worker.cycle import EXIT_FAILED, EXIT_OK

SESSIONS, BIG_TURNS = 40, 150
TRIALS = 8  # per operation
SEED = 20261130
TABLES = ("nodes", "edges", "node_points", "edge_points", "node_claims", "node_aliases", "merges", "tombstones")
WRITE_TIMES = {"created_at", "updated_at"}


def canonical_dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the graph's tables without write times (``undone_at`` reduced to whether it is
    set), sorted."""
    conn = sqlite3.connect(path)
    try:
        dump = {}
        for table in TABLES:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] not in WRITE_TIMES]
            select = ", ".join("undone_at IS NOT NULL" if c == "undone_at" else c for c in columns)
            dump[table] = sorted(tuple(r) for r in conn.execute(f"SELECT {select} FROM {table}"))
    finally:
        conn.close()
    return dump


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def build_graph(data: Path) -> tuple[str, str]:
    """The template graph; returns (merged, into): its two nodes with the most points."""
    settings = load_settings(data_dir=data)
    data.mkdir(parents=True)
    graph = Graph(settings.graph_path)
    rng = random.Random(SEED)
    try:
        for n in range(SESSIONS):
            graph.extract(f"s{n:04d}", [turn_text(rng, n, t) for t in range(TURNS_PER_SESSION)], day=n)
        graph.extract("big", [turn_text(rng, SESSIONS, t) for t in range(BIG_TURNS)], day=SESSIONS)
        top = graph.db.query(
            "SELECT node_id FROM node_points WHERE node_id NOT LIKE 'memory:%' GROUP BY node_id ORDER BY COUNT(*) DESC, node_id LIMIT 2"
        )
    finally:
        graph.db.close()
    return top[0][0], top[1][0]


def opened(pid: int, path: Path) -> bool:
    """The process has ``path`` open (it is about to start, or is in, its transaction)."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return False


def run_to_end(forks: ForkServer, data: Path, args: list[str]) -> tuple[int, float]:
    """Run ``args`` uninterrupted; (exit code, seconds from opening the graph to exit)."""
    graph = load_settings(data_dir=data).graph_path
    pid = forks.run(args, {"REM_DATA_DIR": str(data), "REM_LOG_LEVEL": "error"})
    wait_for(lambda: opened(pid, graph), pid)
    started = time.monotonic()
    status = forks.wait(pid)
    return status, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_forget_merge_unmerge_killed_leave_before_or_after(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    template = tmp_path / "template"
    merged, into = build_graph(template)
    ops = {
        "forget": (template, ["forget", "--session", "big", "--json"]),
        "merge": (template, ["merge", merged, into, "--json"]),
        "unmerge": (tmp_path / "merged", ["unmerge", merged, "--json"]),
    }
    forks = ForkServer()
    try:
        # The after-states, from uninterrupted runs; unmerge starts from the merge's after-state.
        states: dict[str, tuple[dict[str, Any], dict[str, Any], float]] = {}
        for name, (start, args) in ops.items():
            ref = tmp_path / f"ref-{name}"
            shutil.copytree(start, ref)
            before = canonical_dump(load_settings(data_dir=ref).graph_path)
            status, seconds = run_to_end(forks, ref, args)
            assert status == EXIT_OK, f"{name} failed uninterrupted"
            states[name] = (before, canonical_dump(load_settings(data_dir=ref).graph_path), seconds)
            assert states[name][0] != states[name][1], f"{name} changed nothing"
            if name == "merge":
                shutil.copytree(ref, tmp_path / "merged")
        # An unmerge gives back exactly the graph before the merge (bar the merge's record).
        restored, original = states["unmerge"][1], states["merge"][0]
        assert {t: restored[t] for t in TABLES if t != "merges"} == {t: original[t] for t in TABLES if t != "merges"}

        rng = random.Random(SEED)
        landed: Counter[str] = Counter()
        for name, (start, args) in ops.items():
            before, after, seconds = states[name]
            for trial in range(TRIALS):
                data = tmp_path / f"{name}-{trial}"
                shutil.copytree(start, data)
                graph = load_settings(data_dir=data).graph_path
                pid = forks.run(args, {"REM_DATA_DIR": str(data), "REM_LOG_LEVEL": "error"})
                wait_for(lambda: opened(pid, graph), pid)
                time.sleep(rng.uniform(0, 1.2 * seconds))  # a few run to the end
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
                status = forks.wait(pid)
                assert integrity(graph) == "ok"
                dump = canonical_dump(graph)
                assert dump in (before, after), f"{name} trial {trial}: killed half-way, the graph is neither before nor after"
                state = "before" if dump == before else "after"
                landed[f"{name}:{'killed' if status == -signal.SIGKILL else 'finished'}:{state}"] += 1
                again = forks.wait(forks.run(args, {"REM_DATA_DIR": str(data), "REM_LOG_LEVEL": "error"}))
                if state == "after" and name != "forget":
                    assert again == EXIT_FAILED, f"{name} trial {trial}: a second {name} was not refused"
                else:
                    assert again == EXIT_OK, f"{name} trial {trial}: re-running failed"
                assert canonical_dump(graph) == after, f"{name} trial {trial}: re-running did not reach the after-state"
                shutil.rmtree(data)
    finally:
        forks.close()
    print(f"graph-op kills: {dict(sorted(landed.items()))}; uninterrupted "
          + ", ".join(f"{n} {s[2]:.2f}s" for n, s in states.items()))
