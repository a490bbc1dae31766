"""SIGKILL a real ``rem-cycle drain`` process at random points: no line is lost, no edge doubled.

Each trial copies a prepared data dir (embedded Chroma with 200 memories in 40 sessions, a graph
with 13 concepts), queues 3,000 lines (2,600 resolvable edges needing back-fill, 300 pointing at
memories that do not exist, 100 malformed), starts ``python -m worker drain`` with 100-line
batches, kills it with SIGKILL at a random moment (from launch, or once a random share of the edges
is linked), then drains again in this process and checks
every line's fate.

The drains are forked by the command server (tests/command_server.py), not started as new
interpreters: a start paid about a second of imports before the drain's first step, so the moments
drawn from launch (0.3–2.5 s then) spent most of their range waiting on the start-up. They are now
drawn over one uninterrupted drain's measured time from launch to exit (:func:`drain_seconds`), so
they still fall on every step (start-up, rename, batches, commit, some after the end) whatever the
machine's speed, and the trials by share of edges linked are unchanged.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from config import Settings, load_settings
from tests.conftest import ForkedCommand, make_session
from tests.daemon_support import start_worker, worker_env
from tests.lazy_fixtures import add_concepts, drain, edge_count, queue_of, read_jsonl, seed_chroma
from worker.cycle import open_stores

TRIALS = 20
RESOLVABLE, MISSING, MALFORMED = 2600, 300, 100


def queue_lines(seed: int) -> list[bytes]:
    lines = []
    for i in range(RESOLVABLE):
        session, turn = divmod(i % 200, 5)
        target = f"MEMORY:k{session}-t{turn:04d}" if i % 3 else f"memory:k{session}-t{turn:04d}"
        lines.append({"source": f"CONCEPT:c{i // 200}", "target": target, "relationship": "MENTIONED_IN", "properties": {"line": i}})
    for i in range(MISSING):
        lines.append({"source": "CONCEPT:c0", "target": f"memory:missing-{i}", "relationship": "MENTIONED_IN"})
    encoded = [(json.dumps(line) + "\n").encode() for line in lines]
    encoded += [f'{{"broken": {i}\n'.encode() for i in range(MALFORMED)]
    random.Random(seed).shuffle(encoded)
    return encoded


async def make_template(root: Path) -> Path:
    settings = load_settings(data_dir=root / "data")
    stores = await open_stores(settings)
    try:
        sessions = [make_session(f"k{n}", 5, summary=n % 4 != 0) for n in range(40)]
        await seed_chroma(stores, settings, sessions, root)
        add_concepts(stores.graph, *[f"c{n}" for n in range(13)])
    finally:
        stores.close()
    return root / "data"


def start_drain(settings: Settings) -> subprocess.Popen[bytes] | ForkedCommand:
    """``rem-cycle drain --json`` (100-line batches) on ``settings``' data dir, forked by the
    command server, its output to a log beside the data dir."""
    env = worker_env(settings.data_dir, write_batch_size="100", log_level="warning")
    return start_worker("drain", "--json", env=env, log_path=settings.data_dir.with_suffix(".log"))


def drain_seconds(settings: Settings) -> float:
    """Seconds from launch to exit of an uninterrupted drain of ``settings``' queue (a copy of a
    trial's): the range the kills from launch are drawn over. Timed from the fork, as
    :func:`kill_drain` times its kills (the command server's own start on first use excluded)."""
    proc = start_drain(settings)
    started = time.monotonic()
    assert proc.wait(120) == 0, settings.data_dir.with_suffix(".log").read_text()[-2000:]
    return time.monotonic() - started


def kill_drain(settings: Settings, *, share: float | None = None, delay: float = 0.0) -> None:
    """Run ``rem-cycle drain`` (100-line batches) on ``settings``' data dir and SIGKILL it once
    ``share`` of the resolvable edges are linked, or ``delay`` seconds after launch."""
    proc = start_drain(settings)
    started = time.monotonic()
    if share is not None:
        watcher = sqlite3.connect(settings.graph_path, timeout=30)
        try:
            while proc.poll() is None and time.monotonic() - started < 120:
                linked = watcher.execute("SELECT COUNT(*) FROM edges WHERE relationship = 'MENTIONED_IN'").fetchone()[0]
                if linked >= share * RESOLVABLE:
                    break
                time.sleep(0.002)
        finally:
            watcher.close()
    else:
        time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def reference_drain_seconds(template: Path, data: Path, lines: list[bytes]) -> float:
    """:func:`drain_seconds` of ``lines`` queued in a copy of ``template`` at ``data`` (then removed)."""
    shutil.copytree(template, data)
    settings = load_settings(data_dir=data)
    queue_of(settings).append_lines(lines)
    seconds = drain_seconds(settings)
    shutil.rmtree(data)
    return seconds


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_sigkill_at_random_points_loses_no_line(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    template = await make_template(tmp_path / "template")
    span = reference_drain_seconds(template, tmp_path / "reference", queue_lines(0))
    rng = random.Random(4242)
    kill_points: list[int] = []  # edges linked when the drain was killed, per trial
    for trial in range(TRIALS):
        data = tmp_path / f"trial-{trial}"
        shutil.copytree(template, data)
        settings = load_settings(data_dir=data)
        queue = queue_of(settings)
        queue.append_lines(queue_lines(trial))
        if trial % 2:
            # A random point of the drain's progress: after a random share of the edges is linked
            # (a share of 1 lands in the commit: re-queueing, dead letters, deleting .draining).
            kill_drain(settings, share=1.0 if trial % 10 == 9 else rng.uniform(0.02, 0.95))
        else:  # a random moment from launch: start-up, rename, batches, commit
            kill_drain(settings, delay=rng.uniform(0, span))

        stores = await open_stores(settings)
        try:
            linked_at_kill = edge_count(stores.graph, "MENTIONED_IN")
            kill_points.append(linked_at_kill)
            stats = await drain(settings, stores)
            assert stats.total_lines >= MISSING  # the recovery drain saw at least the failing lines
            # Every resolvable line is an edge, exactly once per (source, target, relationship).
            assert edge_count(stores.graph, "MENTIONED_IN") == RESOLVABLE, f"trial {trial}: {stats}"
            memories = stores.graph.nodes_by_label("MEMORY")
            assert len(memories) == 200 and all(m.properties.get("backfilled") for m in memories)
            assert edge_count(stores.graph, "ORIGINATES_IN") == 200
            assert stores.db.integrity_check() == "ok"
        finally:
            stores.close()
        # The failing lines wait in the queue (or, never, were lost); malformed ones are dead letters.
        assert queue.draining_files() == [] and not queue.requeue_pending_path.exists(), f"trial {trial}"
        waiting = {r["target"] for r in read_jsonl(queue.path)}
        assert waiting == {f"memory:missing-{i}" for i in range(MISSING)}, f"trial {trial}"
        assert all(r["attempts"] in (1, 2) for r in read_jsonl(queue.path))
        dead = read_jsonl(queue.dead_letter_path)
        broken = {f'{{"broken": {i}' for i in range(MALFORMED)}
        assert {d["line"] for d in dead} >= broken, f"trial {trial}"
        assert all(d["reason"] == "malformed-json" for d in dead)
        # A kill inside the commit's re-queue write can leave the head of a line; it is dead-lettered
        # as malformed, and the whole line is in the queue (the drain re-published it from its input).
        whole = queue.path.read_text().splitlines()
        torn = [d["line"] for d in dead if d["line"] not in broken]
        assert all(any(line.startswith(head) and line != head for line in whole) for head in torn), f"trial {trial}: {torn}"
        shutil.rmtree(data)
    mid_drain = sum(1 for linked in kill_points if 0 < linked < RESOLVABLE)
    print(f"drain kills: uninterrupted drain {span:.2f}s, edges linked at each kill {kill_points}")
    assert mid_drain >= TRIALS // 4, f"only {mid_drain} kills landed mid-drain: {kill_points}"
