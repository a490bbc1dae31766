"""What a session's re-extraction pays to rebuild its edges' justifications as the graph's history
grows. ``commit_session`` replaces the session's old points; for each edge the session had points on
it reads the justifications the other sessions' points carry — one query per old edge before,
reading all the edge's points; now (``pipelines.extract.commit.other_reasons``) one query for all
edges of few texts, seeking text by text, and one per edge of many (more than ``SOUGHT_TEXTS``). The session below shares every one of its edges with ``history`` other
sessions — all with one text (the heuristic extractor's), or each with its own (the worst case:
the edge's text itself grows with its history) — at 1× and 8× that history, in one process; each step times the commit of a changed extraction of the session
(median), and the reads of the other sessions' justifications alone, as before (one query per edge)
and as the commit reads them now. SQLite by default; ``--postgres-url`` runs it on a PostgreSQL database too (a fresh
schema, dropped afterwards).

    python bench/bench_reextract.py [--edges 100] [--history 25 200] [--repeats 7] [--postgres-url URL]
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
from pipelines.extract.commit import commit_session, other_reasons  # noqa: E402
from pipelines.extract.model import ChunkExtraction, Evidence, ExtractedEdge, ExtractedNode  # noqa: E402
from pipelines.extract.reduce import ReducedSession, reduce_session  # noqa: E402
from store.backend import open_database  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import Node  # noqa: E402
from store.provenance import EdgeKey  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402

TARGET = "bench-target"


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


def timed(action: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of ``repeats`` runs of ``action``."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        action()
        runs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(runs)


def measure(db: Database, *, edges: int, history: int, repeats: int, texts: str) -> dict[str, float]:
    unit = DatabaseUnitOfWork(db)
    sessions = [f"bench-{i:05d}" for i in range(history)] + [TARGET]
    unit.graph.upsert_nodes([Node(f"session:{s}", "SESSION", s, {}) for s in sessions])
    for session_id in sessions:
        commit(unit, extraction(session_id, edges, f"said in {session_id}" if texts == "distinct" else "said together"))
    keys: list[EdgeKey] = [(f"CLASS:Node{i:04d}", f"CLASS:Node{i + 1:04d}", "DEPENDS_ON") for i in range(edges)]
    provenance, anchor = unit.provenance, f"session:{TARGET}"
    variants = iter(range(10**6))
    commit_ms = timed(lambda: commit(unit, extraction(TARGET, edges, f"said again {next(variants)}")), repeats)
    edges = {key: unit.graph.get_edge(*key) for key in keys}
    per_edge_ms = timed(lambda: {key: provenance.edge_reasons(key, besides=anchor) for key in keys}, repeats)
    batched_ms = timed(lambda: other_reasons(provenance, edges, keys, besides=anchor), repeats)
    assert other_reasons(provenance, edges, keys, besides=anchor) == {key: provenance.edge_reasons(key, besides=anchor) for key in keys}
    return {"history": history, "points": db.query("SELECT COUNT(*) FROM edge_points")[0][0], "commit_ms": commit_ms,
            "per_edge_ms": per_edge_ms, "batched_ms": batched_ms}


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
    results = []
    with tempfile.TemporaryDirectory() as tmp, databases(Path(tmp), postgres_url) as fresh:
        for count in history:
            db = fresh(f"h{count}")
            try:
                results.append(measure(db, edges=edges, history=count, repeats=repeats, texts=texts))
            finally:
                db.close()
    return results


TEXTS = {
    "shared": "every session justifies the edges with one text (the heuristic extractor's)",
    "distinct": "each session with a text of its own (the edge's text grows with its history)",
}


def report(engine: str, edges: int, texts: str, results: list[dict[str, Any]]) -> None:
    first = results[0]
    print(f"{engine}: a session of {edges} edges, each shared with `history` other sessions; {TEXTS[texts]}")
    print("| history (other sessions per edge) | edge points | re-extraction commit (median) | ÷ first "
          "| other sessions' texts, one query per edge (before) | ÷ first | as the commit reads them now | ÷ first |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['history']:,} | {r['points']:,} | {r['commit_ms']:.1f} ms | {r['commit_ms'] / first['commit_ms']:.2f}× "
              f"| {r['per_edge_ms']:.1f} ms | {r['per_edge_ms'] / first['per_edge_ms']:.2f}× "
              f"| {r['batched_ms']:.1f} ms | {r['batched_ms'] / first['batched_ms']:.2f}× |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=100, help="edges of the re-extracted session")
    parser.add_argument("--history", type=int, nargs="+", default=[25, 200], help="other sessions per edge (1× and 8×)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args(argv)
    history = sorted(args.history)
    for engine, url in (("SQLite", None), ("PostgreSQL", args.postgres_url)):
        if engine == "SQLite" or url:
            for texts in TEXTS:
                report(engine, args.edges, texts, run(edges=args.edges, history=history, repeats=args.repeats, postgres_url=url, texts=texts))


if __name__ == "__main__":
    main()
