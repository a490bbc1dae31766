"""What a session's commit pays for its edges' justifications as the graph's history grows.
``commit_session`` rebuilds the justification of every edge it touches from the texts the other
sessions' points carry. An edge's justification is the parts of its ``JUSTIFICATION_TEXTS`` (16)
least texts (day400; before, every text of its history), read for all edges in one query, seeking
text by text through ``edge_points_reason`` and stopping at 16 (``ProvenanceStore.edge_texts``). The
session below shares every one of its edges with ``history`` other sessions — all with one text
(the heuristic extractor's), or each with its own (the worst case: before, the edge's text itself
grew with its history) — at 1× and 8× that history, in one process; each step times the commit of a
changed extraction of the session (median; the steps take turns on the 1× and 8× databases, round by round), the commit of a new session saying the same edges, and
the reads of the other sessions' texts alone, as before day400 (every distinct text of the edge's
points, a query per edge: :data:`READ_BEFORE`) and as the commit reads them now, and shows the
length of an edge's justification. SQLite by default; ``--postgres-url`` runs it on a PostgreSQL
database too (a fresh schema, dropped afterwards).

    python bench/bench_reextract.py [--edges 100] [--history 25 200] [--repeats 15] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import load_settings  # noqa: E402
from pipelines.extract.commit import commit_session  # noqa: E402
from pipelines.extract.model import ChunkExtraction, Evidence, ExtractedEdge, ExtractedNode  # noqa: E402
from pipelines.extract.reduce import ReducedSession, reduce_session  # noqa: E402
from store.backend import open_database  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import Node  # noqa: E402
from store.provenance import EdgeKey  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402

TARGET = "bench-target"
# The read of an edge's other texts before day400 (ProvenanceStore.edge_reasons then): every
# distinct text of its points, the cost of its history.
READ_BEFORE = (
    "SELECT DISTINCT justification FROM edge_points WHERE source = ? AND target = ? AND relationship = ? "
    "AND anchor != ? AND justification IS NOT NULL AND justification != ''"
)


def extraction(session_id: str, edges: int, justification: str) -> ReducedSession:
    """One session saying a chain of ``edges`` DEPENDS_ON edges between CLASS nodes, each from its
    first turn, each with ``justification``."""
    turn = f"{session_id}-t0"
    nodes = tuple(ExtractedNode(f"CLASS:Node{i:04d}", "CLASS", f"Node{i:04d}", evidence=(Evidence(turn, f"Node{i:04d}"),))
                  for i in range(edges + 1))
    said = tuple(ExtractedEdge(f"CLASS:Node{i:04d}", f"CLASS:Node{i + 1:04d}", "DEPENDS_ON", justification,
                               (Evidence(turn, f"Node{i:04d}"),)) for i in range(edges))
    return reduce_session(session_id, [ChunkExtraction(f"{session_id}:chunk:0", nodes=nodes, edges=said)])


def commit(unit: DatabaseUnitOfWork, reduced: ReducedSession) -> None:
    commit_session(reduced, unit=unit, graph_index=None, on_commit=lambda: None, queue_append=lambda lines: 0,
                   matcher=lambda candidates, index: {})


def built(db: Database, *, edges: int, history: int, texts: str) -> dict[str, Callable[[], object]]:
    """The history committed to ``db``; the steps to time on it, by name."""
    unit = DatabaseUnitOfWork(db)
    sessions = [f"bench-{i:05d}" for i in range(history)] + [TARGET]
    unit.graph.upsert_nodes([Node(f"session:{s}", "SESSION", s, {}) for s in sessions])
    for session_id in sessions:
        commit(unit, extraction(session_id, edges, f"said in {session_id}" if texts == "distinct" else "said together"))
    keys: list[EdgeKey] = [(f"CLASS:Node{i:04d}", f"CLASS:Node{i + 1:04d}", "DEPENDS_ON") for i in range(edges)]
    provenance, anchor = unit.provenance, f"session:{TARGET}"
    variants, newcomers = iter(range(10**6)), iter(range(10**6))

    def newcomer() -> None:
        session_id = f"bench-new-{next(newcomers):03d}"
        unit.graph.upsert_nodes([Node(f"session:{session_id}", "SESSION", session_id, {})])
        commit(unit, extraction(session_id, edges, f"said in {session_id}" if texts == "distinct" else "said together"))

    return {
        "commit_ms": lambda: commit(unit, extraction(TARGET, edges, f"said again {next(variants)}")),
        "new_ms": newcomer,
        "per_edge_ms": lambda: {key: db.query(READ_BEFORE, (*key, anchor)) for key in keys},
        "batched_ms": lambda: provenance.edge_texts(keys, besides=anchor),
    }


def measured(db: Database, steps: dict[str, Callable[[], object]], times: dict[str, list[float]], history: int, edges: int) -> dict[str, Any]:
    """Each step's median milliseconds, the edge points and an edge's justification length."""
    text = DatabaseUnitOfWork(db).graph.get_edge("CLASS:Node0000", "CLASS:Node0001", "DEPENDS_ON").properties["justification"]
    return {"history": history, "points": db.query("SELECT COUNT(*) FROM edge_points")[0][0], "text_chars": len(text),
            **{name: statistics.median(times[name]) for name in steps}}


@contextmanager
def databases(workdir: Path, postgres_url: str | None) -> Iterator[Callable[[str], Database]]:
    """Opens a fresh database per name: an SQLite file, or a fresh schema of ``postgres_url``."""
    from bench.bench_backends import Schemas

    schemas = Schemas(postgres_url) if postgres_url else None

    def fresh(name: str) -> Database:
        url = schemas.new("reextract") if schemas is not None else None
        return open_database(load_settings(data_dir=workdir / name, **({"database_url": url} if url else {})))

    try:
        yield fresh
    finally:
        if schemas is not None:
            schemas.drop()


def run(*, edges: int, history: list[int], repeats: int, postgres_url: str | None, texts: str) -> list[dict[str, Any]]:
    """Builds a database per history, then times the steps round by round, each round on every
    database in turn (the machine's load falls on 1× and 8× alike)."""
    with tempfile.TemporaryDirectory() as tmp, databases(Path(tmp), postgres_url) as fresh:
        dbs = [fresh(f"h{count}") for count in history]
        try:
            steps = [built(db, edges=edges, history=count, texts=texts) for db, count in zip(dbs, history, strict=True)]
            times: list[dict[str, list[float]]] = [{name: [] for name in s} for s in steps]
            for _ in range(repeats):
                for name in steps[0]:
                    for step, spent in zip(steps, times, strict=True):
                        t0 = time.perf_counter()
                        step[name]()
                        spent[name].append((time.perf_counter() - t0) * 1000)
            return [measured(db, step, spent, count, edges) for db, step, spent, count in zip(dbs, steps, times, history, strict=True)]
        finally:
            for db in dbs:
                db.close()


TEXTS = {
    "shared": "every session justifies the edges with one text (the heuristic extractor's)",
    "distinct": "each session with a text of its own (the edge's text grows with its history)",
}


def report(engine: str, edges: int, texts: str, results: list[dict[str, Any]]) -> None:
    first = results[0]
    print(f"{engine}: a session of {edges} edges, each shared with `history` other sessions; {TEXTS[texts]}")
    print("| history (other sessions per edge) | edge points | justification chars | re-extraction commit (median) | ÷ first "
          "| new session's commit | ÷ first | other texts, every one, a query per edge (before) | ÷ first | as the commit reads them now | ÷ first |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['history']:,} | {r['points']:,} | {r['text_chars']:,} | {r['commit_ms']:.1f} ms | {r['commit_ms'] / first['commit_ms']:.2f}× "
              f"| {r['new_ms']:.1f} ms | {r['new_ms'] / first['new_ms']:.2f}× "
              f"| {r['per_edge_ms']:.1f} ms | {r['per_edge_ms'] / first['per_edge_ms']:.2f}× "
              f"| {r['batched_ms']:.1f} ms | {r['batched_ms'] / first['batched_ms']:.2f}× |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=100, help="edges of the re-extracted session")
    parser.add_argument("--history", type=int, nargs="+", default=[25, 200], help="other sessions per edge (1× and 8×)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args(argv)
    history = sorted(args.history)
    for engine, url in (("SQLite", None), ("PostgreSQL", args.postgres_url)):
        if engine == "SQLite" or url:
            for texts in TEXTS:
                report(engine, args.edges, texts, run(edges=args.edges, history=history, repeats=args.repeats, postgres_url=url, texts=texts))


if __name__ == "__main__":
    main()
