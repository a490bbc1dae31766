"""Crash matrix: a real ``rem-cycle --once`` over the sample data, killed with SIGKILL at random
points of ingest, extract (map and commit) and drain — then checked, recovered and compared.

Setup (once): the sample sessions are imported into an embedded Chroma (a template data dir,
copied per trial); a producer has queued lazy edges before the cycle starts: resolvable ones
(memory → memory ``CITES``), ones whose endpoint never exists, and malformed lines. The chunk
limit is small so sessions split into several chunks. One uninterrupted subprocess run gives the
reference graph and the timeline (start-up, then each phase's duration) that the kill delays are
drawn from (seeded), round-robin over the phases so each one is hit.

After each kill:

- ``PRAGMA integrity_check`` is ``ok``;
- no session is digested without its graph writes: a session's extraction provenance (every
  ``DISCUSSED_IN`` edge into ``session:<id>`` and ``MENTIONED_IN`` edge into its memories) is
  exactly the reference's when it is marked digested, and absent when it is not (one transaction).
  "Exactly" is up to the identity folds the reference run recorded: a session committed later may
  fold an earlier session's node into its own (``CONCEPT:ravi iyer`` into ``PERSON:Ravi Iyer``), so a
  run killed between the two still holds the unfolded id;
- no queue line is lost: every line produced so far (the producer's, and the lazy lines of every
  digested session) is an edge in the graph, or a line of the live queue, a ``.draining`` file or
  the dead-letter file.

Then cycles run (in this process) until nothing is left to do, and the canonical dump (nodes and
edges without their timestamps) must equal the uninterrupted run's; the queue and dead letters
must hold exactly the lines that can never link.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.importer import import_sessions
from store.lazy_queue import LazyEdgeQueue
from tests.conftest import ROOT, SAMPLE
from worker.cycle import PHASES, open_stores, run_cycle

# CI runs the default; REM_TEST_CRASH_SEED / REM_TEST_CRASH_TRIALS let a flake hunt run other draws
# (RELIABILITY.md "Flakes hunted").
TRIALS = int(os.environ.get("REM_TEST_CRASH_TRIALS", "30"))
SEED = int(os.environ.get("REM_TEST_CRASH_SEED", "20261129"))
RESOLVABLE, NEVER, MALFORMED = 1200, 60, 40
ENV = {"REM_CHUNK_LIMIT_TOKENS": "1500", "REM_PROMPT_ENVELOPE_TOKENS": "0", "REM_WRITE_BATCH_SIZE": "100",
       "REM_LOG_LEVEL": "error"}
# Kill targets, round-robin: extract and drain are where most can go wrong.
TARGETS = ("ingest", "extract", "extract", "drain", "drain")
# The kills that must land in each phase. A kill aimed by the reference run's windows can land
# elsewhere when the machine's load changes between runs (a drain faster than the reference's:
# killed after it); trials past TRIALS, at most TRIALS more, aim at the phases still short.
QUOTA = {"ingest": TRIALS // 15, "extract": TRIALS // 6, "drain": TRIALS // 6}

Key = tuple[str, str, str]


def trial_settings(data: Path) -> Settings:
    return load_settings(data_dir=data, **{k[4:].lower(): v for k, v in ENV.items() if k != "REM_LOG_LEVEL"})


def producer_lines(memory_ids: list[str]) -> tuple[list[bytes], set[Key], set[Key], set[str]]:
    """(lines, resolvable keys, never-resolvable keys, malformed raw lines)."""
    rng = random.Random(SEED)
    lines: list[bytes] = []
    resolvable: set[Key] = set()
    while len(resolvable) < RESOLVABLE:
        a, b = rng.sample(memory_ids, 2)
        key = (f"memory:{a}", f"memory:{b}", "CITES")
        if key not in resolvable:
            resolvable.add(key)
            source = key[0] if len(resolvable) % 3 else f"MEMORY:{a}"  # any-case prefixes are accepted
            lines.append(json.dumps({"source": source, "target": key[1], "relationship": "CITES",
                                     "properties": {"n": len(resolvable)}, "justification": "producer"}).encode() + b"\n")
    never = {(f"memory:{memory_ids[i]}", f"memory:ghost-{i}", "CITES") for i in range(NEVER)}
    lines += [json.dumps({"source": s, "target": t, "relationship": r}).encode() + b"\n" for s, t, r in never]
    malformed = {f'{{"broken": {i}, ' for i in range(MALFORMED)}
    lines += [m.encode() + b"\n" for m in malformed]
    rng.shuffle(lines)
    return lines, resolvable, never, malformed


def canonical_dump(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Nodes and edges without created_at/updated_at, in a fixed order."""
    conn = sqlite3.connect(path)
    try:
        nodes = conn.execute("SELECT id, label, name, properties FROM nodes ORDER BY id").fetchall()
        edges = conn.execute(
            "SELECT source, target, relationship, weight, properties FROM edges ORDER BY source, target, relationship"
        ).fetchall()
    finally:
        conn.close()
    return nodes, edges


def dump_diff(got: tuple[list[Any], list[Any]], want: tuple[list[Any], list[Any]]) -> str:
    parts = []
    for name, mine, theirs in (("nodes", got[0], want[0]), ("edges", got[1], want[1])):
        extra, missing = set(mine) - set(theirs), set(theirs) - set(mine)
        if extra or missing:
            parts.append(f"{name}: {len(extra)} unexpected e.g. {sorted(extra)[:2]}, {len(missing)} missing e.g. {sorted(missing)[:2]}")
    return "; ".join(parts)[:3000]


def provenance_by_session(conn: sqlite3.Connection) -> dict[str, set[Key]]:
    """Extraction provenance edges grouped by the session they belong to."""
    found: dict[str, set[Key]] = {}
    index = dict(conn.execute("SELECT memory_id, session_id FROM memory_index").fetchall())
    for source, target, rel in conn.execute(
        "SELECT source, target, relationship FROM edges WHERE relationship IN ('DISCUSSED_IN', 'MENTIONED_IN')"
    ):
        sid = target.partition(":")[2] if rel == "DISCUSSED_IN" else index.get(target.partition(":")[2])
        found.setdefault(sid or "?", set()).add((source, target, rel))
    return found


def folded_ids(conn: sqlite3.Connection) -> dict[str, str]:
    """Each node id the run folded into another (merges not undone) -> the id it ends in."""
    into = dict(conn.execute("SELECT merged_id, into_id FROM merges WHERE undone_at IS NULL ORDER BY merge_id"))

    def final(node_id: str) -> str:
        seen = {node_id}
        while node_id in into and into[node_id] not in seen:
            node_id = into[node_id]
            seen.add(node_id)
        return node_id

    return {merged: final(merged) for merged in into}


def queued_keys(queue: LazyEdgeQueue) -> tuple[set[Key], set[str]]:
    """Keys of the well-formed lines in the live queue, ``.draining`` files and dead letters, and
    the raw text of the dead-lettered lines."""
    keys: set[Key] = set()
    dead_raw: set[str] = set()

    def add(text: str) -> None:
        try:
            record = json.loads(text)
        except ValueError:
            return
        if isinstance(record, dict) and {"source", "target", "relationship"} <= set(record):
            keys.add((_norm(record["source"]), _norm(record["target"]), record["relationship"]))

    for path in [queue.path, *queue.draining_files()]:
        if path.exists():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                add(line)
    if queue.dead_letter_path.exists():
        for line in queue.dead_letter_path.read_text(encoding="utf-8").splitlines():
            raw = json.loads(line)["line"]
            dead_raw.add(raw)
            add(raw)
    return keys, dead_raw


def _norm(node_id: str) -> str:
    prefix, _, rest = node_id.partition(":")
    return f"{prefix.lower()}:{rest}" if prefix.lower() in ("memory", "session") else node_id


def edge_keys(conn: sqlite3.Connection) -> set[Key]:
    return {tuple(r) for r in conn.execute("SELECT source, target, relationship FROM edges")}  # type: ignore[misc]


def check_invariants(data: Path, ref: dict[str, Any], produced: set[Key], malformed: set[str]) -> str:
    """The after-kill checks; returns where the kill landed (for the coverage report)."""
    settings = trial_settings(data)
    queue = LazyEdgeQueue(settings.queue_path)
    conn = sqlite3.connect(settings.graph_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        states = dict(conn.execute("SELECT session_id, state FROM session_digests").fetchall())
        digested = {sid for sid, state in states.items() if state == "digested"}
        provenance = provenance_by_session(conn)
        for sid in ref["sessions"]:
            if sid in digested:
                folded = {(ref["folded"].get(source, source), target, rel) for source, target, rel in provenance.get(sid, set())}
                assert folded == ref["provenance"][sid], f"digested {sid} lacks its graph writes"
            else:
                assert not provenance.get(sid), f"{sid} has graph writes but is not digested"
        assert set(provenance) <= set(ref["sessions"])
        keys, dead_raw = queued_keys(queue)
        present = keys | edge_keys(conn)
        owed = produced | {k for sid in digested for k in ref["lazy_by_session"].get(sid, ())}
        lost = owed - present
        assert not lost, f"{len(lost)} queue lines lost, e.g. {sorted(lost)[:3]}"
        drained = conn.execute("SELECT COUNT(*) FROM edges WHERE relationship = 'CITES'").fetchone()[0]
        assert dead_raw <= malformed, "a well-formed line was dead-lettered"
    finally:
        conn.close()
    if not run_count(settings.graph_path):
        return "start-up"
    if len(states) < len(ref["sessions"]) or not digested:
        return "ingest"
    if len(digested) < len(ref["sessions"]):
        return "extract"
    if queue.draining_files() or 0 < drained < RESOLVABLE:
        return "drain"
    return "after-drain" if drained else "before-drain"


def run_count(path: Path) -> int:
    """Rows in ``rem_runs``: 0 until the cycle has started."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM rem_runs").fetchone()[0]
    finally:
        conn.close()


def wait_for(predicate: Any, pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and alive(pid) and time.monotonic() < deadline:
        time.sleep(0.005)


def alive(pid: int) -> bool:
    """The process runs (a finished child stays a zombie until the fork server reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


class ForkServer:
    """tests/fork_server.py in a subprocess: ``rem-cycle --once`` processes without the start-up."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
        env["PYTHONPATH"] = str(ROOT)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fork_server"], env=env, cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def run(self, args: list[str], env: dict[str, str]) -> int:
        """Fork ``rem-cycle ARGS`` with ``env``; returns its pid."""
        return self._ask({"run": args, "env": env})["pid"]

    def run_once(self, data: Path) -> int:
        return self.run(["--once", "--json"], {**ENV, "REM_DATA_DIR": str(data)})

    def wait(self, pid: int) -> int:
        return self._ask({"wait": pid})["status"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def recover(data: Path, forks: "ForkServer") -> int:
    """Run ``--once`` cycles until every session is digested and no ``.draining`` file is left."""
    settings = trial_settings(data)
    queue = LazyEdgeQueue(settings.queue_path)
    for cycles in range(1, 5):
        assert forks.wait(forks.run_once(data)) == 0, "a recovery cycle failed"
        conn = sqlite3.connect(settings.graph_path)
        try:
            left = conn.execute("SELECT COUNT(*) FROM session_digests WHERE state != 'digested'").fetchone()[0]
        finally:
            conn.close()
        if left == 0 and not queue.draining_files():
            return cycles
    raise AssertionError("cycles did not finish the work")


async def make_template(root: Path) -> tuple[Path, list[bytes], set[Key], set[Key], set[str]]:
    data = root / "template"
    settings = trial_settings(data)
    stores = await open_stores(settings)
    try:
        await import_sessions(SAMPLE, chroma=stores.chroma, memory_collection=settings.memory_collection,
                              summary_collection=settings.session_collection)
    finally:
        stores.close()
    lines, resolvable, never, malformed = producer_lines(sample_memory_ids())
    LazyEdgeQueue(settings.queue_path).append_lines(lines)
    return data, lines, resolvable, never, malformed


def sample_memory_ids() -> list[str]:
    ids = []
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        ids += [turn["id"] for turn in json.loads(line)["turns"]]
    return sorted(ids)


async def extraction_lazy_lines(template: Path, root: Path) -> dict[str, set[Key]]:
    """The lazy lines extraction queues, by session: a cycle without the drain phase, in-process."""
    data = root / "no-drain"
    shutil.copytree(template, data)
    settings = trial_settings(data)
    before = set(LazyEdgeQueue(settings.queue_path).read_lines(settings.queue_path))
    result = await run_cycle(settings, phases=tuple(p for p in PHASES if p[0] != "drain"))
    assert result.outcome == "completed"
    found: dict[str, set[Key]] = {}
    for line in LazyEdgeQueue.read_lines(settings.queue_path):
        if line not in before:
            record = json.loads(line)
            key = (record["source"], record["target"], record["relationship"])
            found.setdefault(record["properties"]["sessionId"], set()).add(key)
    shutil.rmtree(data)
    return found


async def reference_run(template: Path, root: Path, forks: ForkServer) -> dict[str, Any]:
    data = root / "reference"
    shutil.copytree(template, data)
    started = time.monotonic()
    assert forks.wait(forks.run_once(data)) == 0
    total = time.monotonic() - started
    settings = trial_settings(data)
    conn = sqlite3.connect(settings.graph_path)
    try:
        (phases_json,) = conn.execute("SELECT phases FROM rem_runs WHERE outcome = 'completed'").fetchone()
        result = {"phases": json.loads(phases_json)}
        sessions = sorted(r[0] for r in conn.execute("SELECT session_id FROM session_digests WHERE state = 'digested'"))
        provenance = provenance_by_session(conn)
        folded = folded_ids(conn)
    finally:
        conn.close()
    lazy_by_session = await extraction_lazy_lines(template, root)
    assert sum(map(len, lazy_by_session.values())) == result["phases"]["extract"]["lazy_edges_queued"] > 0
    phases = result["phases"]
    windows: dict[str, tuple[float, float]] = {}  # seconds from the run's start
    offset = 0.0
    for name in ("provider-ready", "ingest", "extract", "drain", "finalize"):
        duration = phases[name]["duration_ms"] / 1000
        windows[name] = (offset, offset + duration)
        offset += duration
    assert phases["drain"]["succeeded"] >= RESOLVABLE and phases["drain"]["skipped_malformed"] == MALFORMED
    return {
        "sessions": sessions, "provenance": {s: provenance.get(s, set()) for s in sessions}, "folded": folded,
        "lazy_by_session": lazy_by_session, "dump": canonical_dump(settings.graph_path), "windows": windows,
        "total": total,
    }


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_sigkill_matrix(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    template, _, resolvable, never, malformed = await make_template(tmp_path)
    forks = ForkServer()
    try:
        await run_matrix(tmp_path, forks, template, resolvable, never, malformed)
    finally:
        forks.close()


async def run_matrix(tmp_path: Path, forks: ForkServer, template: Path, resolvable: set[Key], never: set[Key],
                     malformed: set[str]) -> None:
    ref = await reference_run(template, tmp_path, forks)
    assert len(ref["sessions"]) == 26
    rng = random.Random(SEED)
    landed: Counter[str] = Counter()
    started = time.monotonic()
    trial = -1
    while (short := [phase for phase, need in QUOTA.items() if landed[phase] < need]) or trial + 1 < TRIALS:
        trial += 1
        if trial >= 2 * TRIALS:
            break
        data = tmp_path / f"trial-{trial}"
        shutil.copytree(template, data)
        target = TARGETS[trial % len(TARGETS)] if trial < TRIALS else short[trial % len(short)]
        low, high = ref["windows"][target]
        settings = trial_settings(data)
        pid = forks.run_once(data)
        # Anchor the delay on what the process does, not on the clock of a loaded machine: the
        # run's row (its start), or for the drain the rename of the queue to ``.draining``.
        if target == "drain":
            wait_for(lambda: LazyEdgeQueue(settings.queue_path).draining_path.exists(), pid)
            delay = rng.uniform(0, high - low)
        else:
            wait_for(lambda: run_count(settings.graph_path) > 0, pid)
            delay = rng.uniform(low, high)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        status = forks.wait(pid)
        where = check_invariants(data, ref, resolvable | never, malformed) if status == -signal.SIGKILL else "finished"
        landed[where] += 1
        recover(data, forks)
        dump = canonical_dump(trial_settings(data).graph_path)
        assert dump == ref["dump"], f"trial {trial} (killed in {where}) differs: {dump_diff(dump, ref['dump'])}"
        # Exactly the lines that can never link are left: the ghosts queued, the malformed dead.
        queue = LazyEdgeQueue(trial_settings(data).queue_path)
        keys, dead_raw = queued_keys(queue)
        left = {k for k in keys if k[2] == "CITES"}
        assert left == never, f"trial {trial}: queue holds {len(left)} CITES lines"
        assert dead_raw == malformed
        assert queue.draining_files() == [] and not queue.requeue_pending_path.exists()
        shutil.rmtree(data)
    elapsed = time.monotonic() - started
    print(f"crash matrix: {min(trial + 1, 2 * TRIALS)} trials in {elapsed:.1f}s, kills landed: {dict(landed)}; "
          f"reference cycle {ref['total']:.2f}s, windows {ref['windows']}")
    assert all(landed[phase] >= need for phase, need in QUOTA.items()), dict(landed)
