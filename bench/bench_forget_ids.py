"""What a forget's id step costs (forgetids, fourteenth session).

    python bench/bench_forget_ids.py [--sessions 250 2000] [--rounds 20] [--postgres URL]

On the forgetbytes bench's graph (``bench.bench_forget_bytes.build``: ``--sessions`` sessions of
12 turns, ``bench_provenance``'s corpus, committed with identity resolution, every turn in
recall's full-text index), with a merge by hand of one node into another in every tenth session
(merge records to read), ``forget_session`` of a different old session each round, as a dry run
(the whole forget, rolled back) twice, each way first in turn: as main did it (the same unit
with the two new steps answering "nothing": ``MergeStore.records_near`` → no record, ``MergeStore.rekey_unsupported`` → no node) and as it
does now (the records near the nodes it may remove read by index before, and each node left
whose id a forgotten row gave probed, re-keyed when no row gives it any more). Medians, and the
ratio. Then (forgetqueue, fifteenth session) the commit of an old session extracted again with
nothing left to say, rolled back, without and with ``prune_saved_edges`` (the merge records near
the nodes it removes read first, their saved edges to those nodes taken out): ``commit_*``.
PostgreSQL runs when ``--postgres`` (or ``REM_TEST_POSTGRES_URL``) names a server: a fresh schema.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_forget_bytes import build, median_ms  # noqa: E402
from bench.bench_provenance import Graph  # noqa: E402
from bench.bench_reextract import databases  # noqa: E402
from bench.growth import engines  # noqa: E402
from pipelines.extract.commit import commit_session  # noqa: E402
from pipelines.extract.reduce import reduce_session  # noqa: E402
from pipelines.forget import forget_session  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.logs import configure_logging  # noqa: E402


def hand_merges(g: Graph, every: int, rng: random.Random) -> int:
    """Merge one node into another, by hand, for every ``every`` sessions of the graph: pairs of
    the tail's nodes (one session's names), so that later forgets meet merge records and re-keys."""
    ids = [r[0] for r in g.db.query("SELECT id FROM nodes WHERE label NOT IN ('MEMORY', 'SESSION', 'NOTE') ORDER BY id")]
    sessions = g.db.query("SELECT COUNT(*) FROM nodes WHERE label = 'SESSION'")[0][0]
    merges = DatabaseUnitOfWork(g.db).merges
    done = 0
    for _ in range(sessions // every):
        merged, into = rng.sample(ids, 2)
        if g.db.query("SELECT COUNT(*) FROM nodes WHERE id IN (?, ?)", (merged, into))[0][0] == 2:
            merges.merge_nodes(merged, into)
            ids.remove(merged)
            done += 1
    return done


def forgets(g: Graph, history: int, rounds: int) -> dict[str, Any]:
    """Median time of a forget of one old session, main's way and now, each a dry run (the whole
    forget, rolled back) of the same session, each way first in turn: paired, so the sessions'
    sizes cancel."""
    now = DatabaseUnitOfWork(g.db)
    main = DatabaseUnitOfWork(g.db)
    main.merges.records_near = lambda node_ids: set()  # type: ignore[method-assign]
    main.merges.rekey_unsupported = lambda node_ids: {}  # type: ignore[method-assign]
    times: dict[str, list[float]] = {"main": [], "now": []}
    rekeyed = 0
    for round_, victim in enumerate(random.Random(7).sample(range(history), rounds)):
        for way, unit in (("main", main), ("now", now))[:: 1 if round_ % 2 else -1]:
            t0 = time.perf_counter()
            report = forget_session(unit, f"s{victim:05d}", dry_run=True)
            times[way].append(time.perf_counter() - t0)
            rekeyed += len(report["nodes_rekeyed"]) if way == "now" else 0
    return {"forget_main_ms": median_ms(times["main"]), "forget_now_ms": median_ms(times["now"]),
            "forget_ratio": round(statistics.median(times["now"]) / statistics.median(times["main"]), 2), "rekeyed": rekeyed}


class _RolledBack(Exception):
    """Raised inside a timed commit so that nothing of it is kept."""


def orphaning_commits(g: Graph, history: int, rounds: int) -> dict[str, Any]:
    """Median time of a commit that removes nodes — an old session extracted again with nothing
    left to say, so every node only it named leaves the graph — without and with the merge
    records' saved edges to those nodes taken out (``prune_saved_edges``: the nodes' edges and the
    records near them read before, by index), each rolled back, paired as :func:`forgets`."""
    unit = DatabaseUnitOfWork(g.db)
    times: dict[bool, list[float]] = {False: [], True: []}
    for round_, victim in enumerate(random.Random(11).sample(range(history), rounds)):
        sid = f"s{victim:05d}"
        for prune in (False, True)[:: 1 if round_ % 2 else -1]:
            t0 = time.perf_counter()
            try:
                with unit.transaction():
                    commit_session(reduce_session(sid, []), unit=unit, graph_index=None, on_commit=lambda: None,
                                   queue_append=lambda lines: 0, matcher=lambda candidates, index: {}, prune_saved_edges=prune)
                    raise _RolledBack
            except _RolledBack:
                pass
            times[prune].append(time.perf_counter() - t0)
    return {"commit_main_ms": median_ms(times[False]), "commit_now_ms": median_ms(times[True]),
            "commit_ratio": round(statistics.median(times[True]) / statistics.median(times[False]), 2)}


def run(sessions: list[int], rounds: int, postgres_url: str | None) -> list[dict[str, Any]]:
    results = []
    for engine, url in engines(postgres_url):
        with tempfile.TemporaryDirectory() as tmp, databases(Path(tmp), url) as fresh:
            for history in sessions:
                db = fresh(f"h{history}")
                try:
                    g = Graph(db=db)
                    rng = random.Random(13)
                    build(g, history, rng)
                    row: dict[str, Any] = {"engine": engine, "sessions": history, "hand_merges": hand_merges(g, 10, rng),
                                           "merge_records": db.query("SELECT COUNT(*) FROM merges")[0][0]}
                    row.update(forgets(g, history, rounds))
                    row.update(orphaning_commits(g, history, rounds))
                    print(row, flush=True)
                    results.append(row)
                finally:
                    db.close()
    return results


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[250, 2000])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--postgres", default=os.environ.get("REM_TEST_POSTGRES_URL") or None)
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    return run(args.sessions, args.rounds, args.postgres)


if __name__ == "__main__":
    main()
