"""Whole-cycle growth benchmark (issue 12): what does a REM cycle that digests 25 new sessions cost
on top of 250, 2,000 and 8,000 sessions of history?

Real components: embedded Chroma (offline ``hash`` embedding), the real cycle (``run_cycle``: the
ingest change scan, extract with the heuristic extractor and identity resolution, drain, finalize
with counts). The corpus is ``bench_provenance``'s: sessions of 12 turns where a few popular
classes and files recur in almost every session, plus a long tail of names.

The history is written to Chroma in bulk and digested by one big cycle per step (not timed); then
``--rounds`` rounds of 25 new sessions are written and digested by one timed cycle each. Each timed
cycle is interleaved with a *reference* cycle: 25 sessions digested on top of the first step's 250
sessions, its graph restored from a copy before each round — so the machine's load cancels out of
``relative`` (growing ÷ reference, the median over the rounds).

Community detection runs once the sessions digested since the last one reach a tenth of those
before it (``REM_COMMUNITY_REFRESH_FRACTION``): every cycle of 25 on 250 sessions, one cycle in 32
on 8,000. The timed cycles leave it out, each round times it on its own, and the *amortized* cycle
adds its share: detection × 25 ÷ (0.1 × history). The change scan reads only the rows added since
the last cycle, and every row once per ``REM_FULL_SCAN_INTERVAL_SECONDS`` (6 h: one hourly cycle in
6): each round times such a full-scan cycle's ingest with nothing new, and the amortized cycle adds
a sixth of it. Both cycles keep their identity index, as a daemon does between cycles while only
commits change the graph: the reference is handed, each round, a copy of the index its setup cycle
kept at the snapshot (``worker.knowledge.kept_identity_index`` / ``install_identity_index``; a
restored graph is otherwise, rightly, not taken for the kept one, and its cycle would build the
index every round — a build the growing cycle never pays, which made the first step's ratio depend
on how long that build happened to take; a timed cycle that builds it fails the benchmark). Also timed per round, on both graphs:
building the identity index from every knowledge node (what a daemon's first cycle, or one after a
write that was not a commit, pays) and ``forget`` of one of the round's sessions (a
take-back of every claim it made, popular nodes included; on a copy of the graph, so that it does
not make the next timed cycle rebuild its index). The verdicts: the last step's relative cost ÷
the first step's, for the extract phase and for the amortized cycle. Database bytes per
provenance point are reported too.

    python bench/bench_cycle_growth.py                      # 250 → 2,000 → 8,000 (about 10 minutes)
    python bench/bench_cycle_growth.py --steps 250 2000     # quicker
    python bench/bench_cycle_growth.py --profile /tmp/prof  # + cProfile of one timed cycle per step
"""

from __future__ import annotations

import argparse
import cProfile
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_ingest import load_corpus  # noqa: E402
from bench.bench_provenance import TURNS_PER_SESSION, turn_text  # noqa: E402
from config import Settings, load_settings  # noqa: E402
from pipelines.communities import REFRESH_FRACTION  # noqa: E402
from pipelines.forget import forget_session  # noqa: E402
from pipelines.identity import AliasIndex  # noqa: E402
from pipelines.resolver import node_refs  # noqa: E402
from pipelines.vocabulary import ANCHOR_LABELS  # noqa: E402
from store.chroma import ChromaStore  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import GraphStore  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.cycle import CycleResult, Stores, run_cycle  # noqa: E402
from worker.knowledge import install_identity_index, kept_identity_index, refresh_communities  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

Row = tuple[str, str, dict[str, Any]]
PHASES = ("ingest", "extract", "drain", "finalize")
RELATIVE = ("amortized", "cycle", "ingest", "extract", "finalize", "detect", "full_scan", "identity_index", "forget")


def session_rows(rng: random.Random, sid: str, number: int) -> tuple[list[Row], Row]:
    """One session's memory rows and summary row; ``number`` orders sessions in time."""
    created = f"2026-{1 + number // 2800 % 12:02d}-{1 + number // 100 % 28:02d}T{number % 24:02d}:{number % 60:02d}:00Z"
    memories = [
        (f"{sid}-t{t:03d}", turn_text(rng, number, t),
         {"sessionId": sid, "turnIndex": t, "role": "assistant" if t % 2 else "user", "createdAt": created, "userId": "u-bench"})
        for t in range(TURNS_PER_SESSION)
    ]
    summary = (f"summary_{sid}", f"Session {number}", {"sessionId": sid, "title": f"Session {number}", "createdAt": created, "userId": "u-bench"})
    return memories, summary


def sessions(rng: random.Random, prefix: str, first: int, count: int) -> tuple[list[Row], list[Row]]:
    memories: list[Row] = []
    summaries: list[Row] = []
    for number in range(first, first + count):
        m, s = session_rows(rng, f"{prefix}{number:05d}", number)
        memories += m
        summaries.append(s)
    return memories, summaries


class DataDir:
    """One data dir: its settings and its (long-lived, as in the daemon) Chroma store."""

    def __init__(self, path: Path, *, batch_limit: int = 500) -> None:
        # Timed cycles never detect communities (timed apart, see the module docstring).
        self.settings = load_settings(data_dir=path, batch_limit=batch_limit, community_refresh_fraction=100)
        self.chroma = ChromaStore(self.settings)

    async def add(self, memories: list[Row], summaries: list[Row]) -> None:
        await load_corpus(self.chroma, self.settings, memories, summaries)

    async def cycle(self, *, settings: Settings | None = None, profile: Path | None = None) -> CycleResult:
        settings = settings or self.settings
        db = Database(settings.graph_path)
        stores = Stores(db=db, unit=DatabaseUnitOfWork(db), chroma=self.chroma)
        profiler = cProfile.Profile() if profile else None
        try:
            if profiler:
                profiler.enable()
            result = await run_cycle(settings, stores=stores)
            if profiler:
                profiler.disable()
                profiler.dump_stats(str(profile))
        finally:
            stores.close()
        if result.outcome != "completed":
            raise RuntimeError(f"cycle {result.outcome}: {result.message}")
        return result

    async def digest_all(self, count: int) -> None:
        """One untimed cycle that ingests and digests ``count`` sessions at once."""
        big = load_settings(data_dir=self.settings.data_dir, batch_limit=max(count, 1))
        result = await self.cycle(settings=big)
        extracted = result.phases["extract"].get("sessions_digested", result.phases["extract"].get("digested"))
        print(f"  digested history: {result.wall_ms / 1000:.1f} s, extract {extracted}", flush=True)

    async def full_scan(self) -> float:
        """Seconds of the ingest phase of a cycle that reads every Chroma row (what one cycle in
        ``REM_FULL_SCAN_INTERVAL_SECONDS ÷ REM_INTERVAL_SECONDS`` does), with nothing new to ingest."""
        full = load_settings(data_dir=self.settings.data_dir, batch_limit=self.settings.batch_limit,
                             community_refresh_fraction=100, full_scan_interval_seconds=0)
        result = await self.cycle(settings=full)
        assert result.phases["ingest"]["scan"] == "full"
        return result.phases["ingest"]["duration_ms"] / 1000

    async def detect(self) -> float:
        """Seconds to detect and store the communities (what ``finalize`` does when it is due)."""
        db = Database(self.settings.graph_path)
        try:
            t0 = time.perf_counter()
            await refresh_communities(db)
            return time.perf_counter() - t0
        finally:
            db.close()

    def identity_index(self) -> float:
        """Seconds to build the identity index from the graph (once per extract phase)."""
        db = Database(self.settings.graph_path)
        try:
            t0 = time.perf_counter()
            AliasIndex.build(node_refs(GraphStore(db).node_names(exclude_labels=ANCHOR_LABELS)))
            return time.perf_counter() - t0
        finally:
            db.close()

    def forget(self, session_id: str) -> float:
        """Seconds to forget one session — on a copy of the graph: a forget is an operator's action,
        and it changes what identity resolution indexes, so the next timed cycle would rebuild its
        kept identity index for a reason no daemon meets every 25 sessions."""
        copy = self.settings.graph_path.with_name("forget-copy.sqlite3")
        shutil.copyfile(self.settings.graph_path, copy)
        db = Database(copy)
        try:
            t0 = time.perf_counter()
            forget_session(DatabaseUnitOfWork(db), session_id)
            return time.perf_counter() - t0
        finally:
            db.close()
            for path in (copy, Path(f"{copy}-wal"), Path(f"{copy}-shm")):
                path.unlink(missing_ok=True)

    def points_and_bytes(self) -> tuple[int, int]:
        db = Database(self.settings.graph_path)
        try:
            points = db.query("SELECT (SELECT COUNT(*) FROM node_points) + (SELECT COUNT(*) FROM edge_points)")[0][0]
            db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            db.close()
        return points, self.settings.graph_path.stat().st_size


def times(result: CycleResult) -> dict[str, float]:
    """Seconds per phase and for the whole cycle."""
    spent = {name: result.phases[name]["duration_ms"] / 1000 for name in PHASES}
    spent["cycle"] = result.wall_ms / 1000
    spent["index_builds"] = result.phases["extract"].get("identity_index_builds", 0)
    return spent


async def measure(steps: list[int], *, new: int, rounds: int, workdir: Path, profile: Path | None, seed: int) -> list[dict[str, Any]]:
    configure_logging(level="warning", fmt="json")
    rng = random.Random(seed)
    grow, ref = DataDir(workdir / "grow"), DataDir(workdir / "reference")
    t0 = time.perf_counter()
    # The reference: the first step's history, then 25 sessions whose rows stay in its Chroma; its
    # graph is restored before each reference round, so every round digests them afresh.
    history = sessions(rng, "s", 0, steps[0])
    for data in (grow, ref):
        await data.add(*history)
        await data.digest_all(steps[0])
    snapshot = workdir / "reference-graph.sqlite3"
    shutil.copyfile(ref.settings.graph_path, snapshot)
    # The index the reference's setup cycle kept, as of the snapshot (each round installs a copy:
    # the resolver learns every commit into it).
    ref_index = kept_identity_index(ref.settings)
    if ref_index is None:
        raise RuntimeError("the reference's setup cycle kept no identity index")
    await ref.add(*sessions(rng, "r", 90_000, new))
    reference_share = new / max(new, REFRESH_FRACTION * steps[0])
    # One cycle in (full scan interval ÷ cycle interval) reads every Chroma row (defaults: 1 in 6).
    full_scan_share = grow.settings.interval_seconds / grow.settings.full_scan_interval_seconds
    print(f"setup of {steps[0]} sessions: {time.perf_counter() - t0:.0f} s", flush=True)
    done, fresh, results = steps[0], 100_000, []
    for step in steps:
        if step > done:
            t0 = time.perf_counter()
            await grow.add(*sessions(rng, "s", done, step - done))
            await grow.digest_all(step - done)
            done = step
            print(f"history grown to {step} sessions: {time.perf_counter() - t0:.0f} s", flush=True)
        timed: dict[str, list[float]] = {}
        for r in range(rounds):
            await grow.add(*sessions(rng, "n", fresh, new))
            mine = times(await grow.cycle(profile=profile / f"grow-{step}.prof" if profile and r == 0 else None))
            shutil.copyfile(snapshot, ref.settings.graph_path)
            install_identity_index(ref.settings, ref_index)
            theirs = times(await ref.cycle(profile=profile / f"reference-{step}.prof" if profile and r == 0 else None))
            mine["detect"], theirs["detect"] = await grow.detect(), await ref.detect()
            mine["identity_index"], theirs["identity_index"] = grow.identity_index(), ref.identity_index()
            mine["forget"], theirs["forget"] = grow.forget(f"n{fresh + new // 2:05d}"), ref.forget(f"r{90_000 + new // 2:05d}")
            mine["full_scan"], theirs["full_scan"] = await grow.full_scan(), await ref.full_scan()
            mine["amortized"] = (mine["cycle"] + mine["detect"] * new / max(new, REFRESH_FRACTION * (done + r * new))
                                 + mine["full_scan"] * full_scan_share)
            theirs["amortized"] = theirs["cycle"] + theirs["detect"] * reference_share + theirs["full_scan"] * full_scan_share
            if mine["index_builds"] or theirs["index_builds"]:
                raise RuntimeError("a timed cycle rebuilt its identity index: the comparison is no longer like for like")
            fresh += new
            for key in mine:
                timed.setdefault(key, []).append(mine[key])
                timed.setdefault(f"ref_{key}", []).append(theirs[key])
        done += new * rounds
        points, size = grow.points_and_bytes()
        row: dict[str, Any] = {"history": step, "points": points, "db_bytes": size, "bytes_per_point": size / points}
        for key in ("cycle", *PHASES, "detect", "full_scan", "amortized", "identity_index", "forget"):
            row[f"{key}_ms"] = 1000 * statistics.median(timed[key])
            row[f"ref_{key}_ms"] = 1000 * statistics.median(timed[f"ref_{key}"])
            row[f"relative_{key}"] = statistics.median(a / b if b else 1.0 for a, b in zip(timed[key], timed[f"ref_{key}"]))
        results.append(row)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[250, 2000, 8000], help="sessions of history")
    parser.add_argument("--new", type=int, default=25, help="new sessions per timed cycle")
    parser.add_argument("--rounds", type=int, default=8, help="timed cycles per step (4 left the first step's ratio noisy on a loaded machine)")
    parser.add_argument("--profile", type=Path, help="write cProfile stats of the first timed cycle of each step here")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = anyio.run(lambda: measure(sorted(args.steps), new=args.new, rounds=args.rounds, workdir=Path(tmp),
                                            profile=args.profile, seed=args.seed))
    first, last = results[0], results[-1]
    print("| history | provenance points | DB bytes / point | cycle (no detection) | ingest | extract | drain | finalize | "
          "detection | full scan | amortized cycle | reference amortized | identity index | forget |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['history']:,} | {r['points']:,} | {r['bytes_per_point']:.0f} | {r['cycle_ms']:.0f} ms | {r['ingest_ms']:.0f} ms | "
              f"{r['extract_ms']:.0f} ms | {r['drain_ms']:.0f} ms | {r['finalize_ms']:.0f} ms | {r['detect_ms']:.0f} ms | {r['full_scan_ms']:.0f} ms | "
              f"{r['amortized_ms']:.0f} ms | {r['ref_amortized_ms']:.0f} ms | {r['identity_index_ms']:.0f} ms | {r['forget_ms']:.0f} ms |")
    print()
    print("| history | " + " | ".join(f"{key} ÷ reference" for key in RELATIVE) + " |")
    print("| --- |" + " --- |" * len(RELATIVE))
    for r in results:
        print(f"| {r['history']:,} | " + " | ".join(f"{r[f'relative_{key}']:.2f}" for key in RELATIVE) + " |")
    summary = {key: last[f"relative_{key}"] / first[f"relative_{key}"] for key in RELATIVE}
    print()
    print(f"{last['history']:,} ÷ {first['history']:,} sessions of history, relative to the reference: "
          + ", ".join(f"{key} {value:.2f}×" for key, value in summary.items())
          + " (targets: extract ≤ 1.2×, amortized cycle ≤ 1.5×)")
    return {"ratios": summary, "steps": results}


if __name__ == "__main__":
    main()
