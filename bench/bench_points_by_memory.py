"""forgetgone: what the ``*_points_memory`` indexes (migration 24) cost and buy, on SQLite.

A graph of ``--history`` sessions (bench_provenance's corpus and extract path: 12 turns a session,
popular names recurring) is built once and copied; the copy loses the two indexes. Then, in the
same process:

1. Writes: ``--new`` new sessions committed to both graphs in turn (same texts), in rounds of 25;
   the commit time with the indexes ÷ without (the median round).
2. The look-up: ``TombstoneStore.session_of_memory`` of a turn with no memory index row (as after
   a retraction), with the indexes and without (the scan it replaced), median of 25.
3. The migration: the two ``CREATE INDEX`` statements run on a third copy of the graph, timed.

    python bench/bench_points_by_memory.py --history 1000
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_provenance import TURNS_PER_SESSION, Graph, turn_text  # noqa: E402
from store.db import MIGRATIONS, POINTS_BY_MEMORY_VERSION, Database, _statements  # noqa: E402
from store.tombstones import TombstoneStore  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

INDEXES = ("node_points_memory", "edge_points_memory")


def _texts(rng: random.Random, session: int) -> list[str]:
    return [turn_text(rng, session, t) for t in range(TURNS_PER_SESSION)]


def run(history: int, new: int, *, seed: int = 24) -> dict[str, Any]:
    """The three measures on a ``history``-session graph (see the module docstring)."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        indexed_path, bare_path, migrated_path = (Path(tmp) / f"{n}.sqlite3" for n in ("indexed", "bare", "migrated"))
        built = Graph(indexed_path)
        for done in range(history):
            built.extract(f"s{done:05d}", _texts(rng, done), day=done)
        points = built.points()
        built.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        built.db.close()
        for copy in (bare_path, migrated_path):
            shutil.copy(indexed_path, copy)
        migrated = Database(migrated_path)
        for name in INDEXES:
            migrated.conn.execute(f"DROP INDEX {name}")
        t0 = time.perf_counter()
        with migrated.transaction() as conn:
            for statement in _statements(MIGRATIONS[POINTS_BY_MEMORY_VERSION - 1]):
                conn.execute(statement)
        migration_s = time.perf_counter() - t0
        migrated.close()

        indexed, bare = Graph(indexed_path), Graph(bare_path)
        for name in INDEXES:
            bare.db.conn.execute(f"DROP INDEX {name}")
        ratios, with_ms, without_ms = [], [], []
        for r in range(new // 25):
            spent = {"with": 0.0, "without": 0.0}
            for i in range(25):
                n = history + r * 25 + i
                texts = _texts(rng, n)
                for label, graph in (("with", indexed), ("without", bare)) if i % 2 else (("without", bare), ("with", indexed)):
                    commit = graph.extract(f"new{n:05d}", texts, day=n)["commit"]
                    spent[label] += commit
                    (with_ms if label == "with" else without_ms).append(1000 * commit)
            ratios.append(spent["with"] / spent["without"])
        # A retracted turn: its memory index row gone, its points still there.
        turn = f"s{history // 2:05d}-t003"
        lookups: dict[str, list[float]] = {"with": [], "without": []}
        for graph, label in ((indexed, "with"), (bare, "without")):
            graph.db.conn.execute("DELETE FROM memory_index WHERE memory_id = ?", (turn,))
            tombstones = TombstoneStore(graph.db)
            for _ in range(25):
                t0 = time.perf_counter()
                assert tombstones.session_of_memory(turn) == f"s{history // 2:05d}"
                lookups[label].append(1000 * (time.perf_counter() - t0))
        indexed.db.close()
        bare.db.close()
    return {
        "history": history, "points": points, "new_sessions": new,
        "commit_ms_median_with": statistics.median(with_ms), "commit_ms_median_without": statistics.median(without_ms),
        "commit_with_over_without": statistics.median(ratios),
        "lookup_ms_with": statistics.median(lookups["with"]), "lookup_ms_without": statistics.median(lookups["without"]),
        "migration_s": migration_s,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--new", type=int, default=100, help="new sessions per graph (rounds of 25)")
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    result = run(args.history, args.new)
    print(result)
    return result


if __name__ == "__main__":
    main()
