"""The extraction commit of one big session, with the garbage collector running (before) and
paused (now, :func:`pipelines.extract.commit.collector_paused`).

A session of N turns with tests/test_bad_rows.py's 100,000-turn texts (``turn i: FooWidget calls
bar_{i % 7}() in src/mod{i % 5}.py``, no time), extracted by the heuristic extractor and reduced
as the cycle does (once per size); then, per round and per way in turn (each first every other
round), a fresh database (an SQLite file, or a fresh schema of ``--postgres-url``) gets what the
ingest phase writes for it (the SESSION and MEMORY nodes, the ``ORIGINATES_IN`` edges) and the
session is committed with identity resolution, as the extract phase commits it. *Before* is
``commit_session.__wrapped__``, the function without the pause (its body is the code before
this change), with the collector running; *now* is ``commit_session``. Wall time and the
process's CPU time of the commit alone, medians over the rounds, the full (oldest-generation)
collections it ran, and whether the two ways' graphs are equal (:func:`store.backend.canonical_dump`
and the graph counts, compared for the sizes up to ``--compare-up-to`` turns).

``--history H1 H2``: a small session's commit as the history grows instead. Graphs of H1 and H2
sessions of ``bench_provenance``'s corpus (12 turns each, popular names in most), built through
the extract path; then 40 new sessions, each committed on every graph in turn, and, before each
commit, the read of the edges it touches as the commit made it before (``get_edge`` per key) and
as it makes it now (``get_edges``, one statement per batch of keys). Medians, and the larger
graph's ÷ the smaller's.

    python bench/bench_commit_big.py [--turns 2500 20000 100000] [--rounds 5] [--postgres-url URL]
    python bench/bench_commit_big.py --history 250 2000 [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import load_settings  # noqa: E402
from pipelines.extract.commit import commit_session  # noqa: E402
from pipelines.extract.heuristic import extract_heuristic  # noqa: E402
from pipelines.extract.model import validate_extraction  # noqa: E402
from pipelines.extract.reduce import ReducedSession, reduce_session  # noqa: E402
from pipelines.extract.units import WorkUnit, plan_units  # noqa: E402
from pipelines.extract.workflow import source_turns, turn_times  # noqa: E402
from pipelines.ingest import plan_session_sync  # noqa: E402
from store.backend import canonical_dump, open_database  # noqa: E402
from store.chroma import MemoryRow  # noqa: E402
from store.graph import GraphStore  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.knowledge import identity_resolver  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

SESSION = "huge"
WAYS: dict[str, Callable[..., Any]] = {"before": commit_session.__wrapped__, "now": commit_session}  # type: ignore[attr-defined]


def session_rows(turns: int) -> list[MemoryRow]:
    """The 100,000-turn test's rows (its ``turns("huge", n)``)."""
    return [MemoryRow(f"{SESSION}-t{i:06d}", f"turn {i}: FooWidget calls bar_{i % 7}() in src/mod{i % 5}.py",
                      {"sessionId": SESSION, "turnIndex": i}) for i in range(turns)]


def extracted(rows: list[MemoryRow], budget_tokens: int | None, semantic_types: tuple[str, ...]) -> tuple[list[WorkUnit], ReducedSession]:
    """The session's units and its reduced extraction (heuristic extractor), as the cycle makes them."""
    units = plan_units(SESSION, source_turns(rows), budget_tokens=budget_tokens)
    return units, reduce_session(SESSION, [validate_extraction(extract_heuristic(u), u, semantic_types=semantic_types) for u in units])


@contextmanager
def full_collections() -> Iterator[list[int]]:
    """Counts the oldest generation's collections run in the block."""
    seen = [0]

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen[0] += 1

    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)


def one_commit(way: str, settings: Any, rows: list[MemoryRow], units: list[WorkUnit], reduced: ReducedSession) -> dict[str, Any]:
    """A fresh database with the session ingested; the commit timed; the database (left open)."""
    db = open_database(settings)
    unit = DatabaseUnitOfWork(db)
    sessions, memories, edges, _ = plan_session_sync(SESSION, rows, None, {})
    with db.transaction():
        unit.graph.upsert_nodes(sessions + memories)
        unit.graph.link_nodes(edges)
    resolver = identity_resolver(db)

    async def prepare() -> None:
        await resolver.prepare(reduced.nodes, session=SESSION)

    anyio.run(prepare)
    gc.collect()  # what the setup left is not the commit's to collect
    with full_collections() as collections:
        wall, cpu = time.perf_counter(), time.process_time()
        stats = WAYS[way](reduced, unit=unit, graph_index=None, on_commit=lambda: None, queue_append=len, matcher=resolver,
                          merges=unit.merges, observed_at=turn_times(rows, units), on_begin=unit.runstate.begin_commit)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"db": db, "wall": wall, "cpu": cpu, "full_collections": collections[0], "edges": stats.edges_written}


class Databases:
    """A fresh database per call: an SQLite file under ``workdir``, or a fresh schema of ``url``."""

    def __init__(self, workdir: Path, url: str | None) -> None:
        from bench.bench_backends import Schemas

        self.workdir, self.count = workdir, 0
        self.schemas = Schemas(url) if url else None

    def settings(self) -> Any:
        self.count += 1
        url = self.schemas.new("commit") if self.schemas is not None else None
        return load_settings(data_dir=self.workdir / f"d{self.count}", **({"database_url": url} if url else {}))

    def drop(self) -> None:
        if self.schemas is not None:
            self.schemas.drop()


def run(engine: str, url: str | None, turns: int, rounds: int, compare: bool) -> dict[str, Any]:
    """Both ways, ``rounds`` times each, in turn, on a session of ``turns`` turns."""
    with tempfile.TemporaryDirectory() as tmp:
        databases = Databases(Path(tmp), url)
        try:
            defaults = load_settings(data_dir=Path(tmp) / "defaults")
            rows = session_rows(turns)
            units, reduced = extracted(rows, defaults.chunk_budget_tokens, defaults.semantic_types)
            found: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
            dumps: dict[str, Any] = {}
            for r in range(rounds):
                for way in (list(WAYS) if r % 2 == 0 else list(reversed(WAYS))):
                    done = one_commit(way, databases.settings(), rows, units, reduced)
                    db = done.pop("db")
                    if compare and way not in dumps:
                        dumps[way] = (canonical_dump(db), GraphStore(db).counts())
                    db.close()
                    found[way].append(done)
            result: dict[str, Any] = {"engine": engine, "turns": turns, "edges": found["now"][0]["edges"],
                                      "same_graph": (dumps["before"] == dumps["now"]) if compare else None}
            for way, runs in found.items():
                for measure in ("wall", "cpu", "full_collections"):
                    result[f"{way}_{measure}"] = statistics.median(r[measure] for r in runs)
            return result
        finally:
            databases.drop()


def small_commits(engine: str, url: str | None, history: list[int], sessions: int = 40) -> None:
    """The ``--history`` part: a small session's commit and its edge reads on graphs of each size."""
    import random

    from bench.bench_provenance import TURNS_PER_SESSION, Graph, reduced_session, turn_text
    from pipelines.extract.commit import edge_keys
    from store.provenance import AnchorRows

    with tempfile.TemporaryDirectory() as tmp:
        databases = Databases(Path(tmp), url)
        try:
            graphs = {}
            for size in history:
                graphs[size] = Graph(db=open_database(databases.settings()))
                rng = random.Random(12)
                for done in range(size):
                    graphs[size].extract(f"s{done:05d}", [turn_text(rng, done, t) for t in range(TURNS_PER_SESSION)], day=done)
            spent: dict[int, dict[str, list[float]]] = {size: {"commit": [], "get_edge": [], "get_edges": []} for size in history}
            rng = random.Random(99)
            for i in range(sessions):
                texts = [turn_text(rng, 10**6 + i, t) for t in range(TURNS_PER_SESSION)]
                keys = sorted(edge_keys(reduced_session(f"new-{i:02d}", texts), {}, AnchorRows([], [], [])))
                for size in (history if i % 2 == 0 else history[::-1]):
                    graph, times = graphs[size].graph, spent[size]
                    t0 = time.perf_counter()
                    one_by_one = {key: edge for key in keys if (edge := graph.get_edge(*key)) is not None}
                    t1 = time.perf_counter()
                    assert graph.get_edges(keys) == one_by_one
                    t2 = time.perf_counter()
                    times["get_edge"].append(t1 - t0)
                    times["get_edges"].append(t2 - t1)
                    times["commit"].append(graphs[size].extract(f"new-{i:02d}", texts, day=10**4)["commit"])
            first = {name: statistics.median(values) for name, values in spent[history[0]].items()}
            for size in history:
                found = {name: statistics.median(values) for name, values in spent[size].items()}
                print(f"| {engine} | {size:,} | {found['commit'] * 1000:.1f} ms | {found['commit'] / first['commit']:.2f}× "
                      f"| {found['get_edge'] * 1000:.2f} ms | {found['get_edges'] * 1000:.2f} ms | {found['get_edges'] / found['get_edge']:.2f} |",
                      flush=True)
            for graph in graphs.values():
                graph.db.close()
        finally:
            databases.drop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[2500, 20000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--compare-up-to", type=int, default=20000, help="compare the two ways' graphs up to this many turns")
    parser.add_argument("--history", type=int, nargs="+", help="a small session's commit on graphs of these many sessions instead")
    args = parser.parse_args(argv)
    configure_logging(level="warning", fmt="json")
    engines = [("SQLite", None), *([("PostgreSQL", args.postgres_url)] if args.postgres_url else [])]
    if args.history:
        print("| engine | sessions of history | a new session's commit (median) | ÷ first | its edges read by get_edge each (before) "
              "| by get_edges (now) | now ÷ before |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for engine, url in engines:
            small_commits(engine, url, sorted(args.history))
        return
    print("| engine | turns | edges written | before: wall, CPU (full collections) | now: wall, CPU (full collections) "
          "| CPU now ÷ before | wall now ÷ before | same graph |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for engine, url in engines:
        for turns in args.turns:
            r = run(engine, url, turns, args.rounds, turns <= args.compare_up_to)
            same = "not compared" if r["same_graph"] is None else ("yes" if r["same_graph"] else "**NO**")
            print(f"| {engine} | {turns:,} | {r['edges']:,} | {r['before_wall']:.2f} s, {r['before_cpu']:.2f} s "
                  f"({r['before_full_collections']:.0f}) | {r['now_wall']:.2f} s, {r['now_cpu']:.2f} s ({r['now_full_collections']:.0f}) "
                  f"| {r['now_cpu'] / r['before_cpu']:.2f} | {r['now_wall'] / r['before_wall']:.2f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
