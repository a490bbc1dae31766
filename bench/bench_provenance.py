"""Provenance-rows benchmark (issue 12): does a commit cost what its session costs, whatever the
graph's history?

1. Growth: a corpus where popular entities recur (a few dozen classes and files named in most
   sessions, as in real coding sessions, plus a long tail). 25 new sessions are extracted
   (heuristic map → reduce → commit with identity resolution, the cycle's extract path without
   Chroma) on top of 250 sessions, then on top of 2,000 (and 8,000 with ``--large``), in the same
   process (four rounds of 25), each interleaved with a session on a reference graph that stays at
   250 (the machine's load cancels out). Reports per step the medians, the cost relative to the reference, the ratio
   of that between the last and the first step, and database bytes per provenance point.
2. ``forget`` of one session in a 2,000-session graph: its time and the rows it touched.
3. One node with 100,000 points (and an edge with 100,000 points): a commit of a session that
   mentions it against a commit of a session of the same size that mentions only fresh names.
4. ``--big-session N``: one session of N turns (tests/test_bad_rows.py's 100,000-turn texts). The
   heuristic extractor's turns/s, then, in the same process, each hot spot against the code it
   replaced on the same data (the output checked equal): sorting the session's points by
   ``order=True`` against the attribute key, writing the export's points with ``json.dumps``
   against :func:`pipelines.export._point_json`, and the ``hash`` embedding of the turns a row at
   a time (:func:`_hash_rows`, the code before) against the batched one. Medians of 5, old and new run in turn.

    python bench/bench_provenance.py            # 250 → 2,000
    python bench/bench_provenance.py --large    # 250 → 2,000 → 8,000
    python bench/bench_provenance.py --big-session 100000   # only part 4
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import load_settings  # noqa: E402
from pipelines.export import _point_json  # noqa: E402
from pipelines.extract.commit import commit_session  # noqa: E402
from pipelines.forget import forget_session  # noqa: E402
from pipelines.extract.heuristic import extract_heuristic  # noqa: E402
from pipelines.extract.model import validate_extraction  # noqa: E402
from pipelines.extract.reduce import POINT_ORDER, ReducedSession, reduce_session  # noqa: E402
from pipelines.extract.units import SourceTurn, plan_units  # noqa: E402
from store.db import Database  # noqa: E402
from store.embedding import _TOKEN, HashEmbeddingFunction  # noqa: E402
from store.graph import Edge, GraphStore, Node  # noqa: E402
from store.merges import MergeStore  # noqa: E402
from store.provenance import EdgePointRow, NodePointRow, PointRow, ProvenanceStore  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.knowledge import identity_resolver  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

TYPES = ("CONCEPT", "CLASS", "METHOD", "FILE", "ISSUE", "TEST", "DECISION", "PERSON", "TOOL")
POPULAR = [f"{a}{b}" for a in ("Graph", "Edge", "Session", "Memory", "Chunk", "Retry") for b in ("Store", "Queue", "Worker", "Policy", "Index")]
FILES = [f"src/{d}/{f}.py" for d in ("store", "queue", "worker", "extract") for f in ("core", "io", "util")]
TURNS_PER_SESSION = 12


def turn_text(rng: random.Random, session: int, turn: int) -> str:
    """One turn: two popular names (Zipf-like), a file, and one name of the long tail."""
    popular = [POPULAR[min(int(rng.paretovariate(1.2)) - 1, len(POPULAR) - 1)] for _ in range(2)]
    tail = f"Widget{rng.randrange(50_000):05d}"
    return (
        f"We changed {popular[0]} and {tail} in {rng.choice(FILES)} so that {popular[1]} keeps its "
        f"order; see #{1000 + rng.randrange(5000)} (session {session}, turn {turn})."
    )


def reduced_session(sid: str, texts: list[str]) -> ReducedSession:
    turns = [SourceTurn(f"{sid}-t{i:03d}", text, "assistant") for i, text in enumerate(texts)]
    units = plan_units(sid, turns, budget_tokens=None)
    return reduce_session(sid, [validate_extraction(extract_heuristic(u), u, semantic_types=TYPES) for u in units])


class Graph:
    def __init__(self, path: Path | None = None, *, db: Database | None = None) -> None:
        """The graph at ``path`` (an SQLite file), or in the database ``db`` already open."""
        self.db = db if db is not None else Database(path)
        self.graph = GraphStore(self.db)
        self.resolver = identity_resolver(self.db)
        self.merges = MergeStore(self.db)

    def extract(self, sid: str, texts: list[str], *, day: int) -> dict[str, float]:
        """Map + reduce + commit one session; seconds spent in each."""
        t0 = time.perf_counter()
        reduced = reduced_session(sid, texts)
        t1 = time.perf_counter()
        anchor = f"session:{sid}"
        # What ingest writes first: the session and its turns (so provenance edges are written, not queued).
        self.graph.upsert_nodes(
            [Node(anchor, "SESSION", sid, {"sessionId": sid, "liveIngested": True})]
            + [Node(f"memory:{sid}-t{i:03d}", "MEMORY", f"turn {i}", {"sessionId": sid, "liveIngested": True}) for i in range(len(texts))]
        )
        times = {f"memory:{sid}-t{i:03d}": f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T10:00:00Z" for i in range(len(texts))}
        commit_session(
            reduced, unit=DatabaseUnitOfWork(self.db), graph_index=None, on_commit=lambda: None, queue_append=len,
            matcher=self.resolver, merges=self.merges, observed_at=times,
        )
        t2 = time.perf_counter()
        return {"map_reduce": t1 - t0, "commit": t2 - t1}

    def points(self) -> int:
        return self.db.query("SELECT (SELECT COUNT(*) FROM node_points) + (SELECT COUNT(*) FROM edge_points)")[0][0]

    def size(self) -> int:
        self.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return self.db.path.stat().st_size


def growth(steps: list[int], *, new: int = 25, rounds: int = 4, seed: int = 12) -> list[dict[str, Any]]:
    """Per step: ``rounds`` × ``new`` new sessions on the growing graph, each interleaved with one of
    the same size on a reference graph that stays at the first step's size — so the machine's load,
    which changes over a long run, cancels out of ``relative`` (growing / reference: the median
    over the rounds of their summed times)."""
    rng = random.Random(seed)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        g, ref = Graph(Path(tmp) / "graph.sqlite3"), Graph(Path(tmp) / "reference.sqlite3")
        for done in range(steps[0]):
            texts = [turn_text(rng, done, t) for t in range(TURNS_PER_SESSION)]
            g.extract(f"s{done:05d}", texts, day=done)
            ref.extract(f"s{done:05d}", texts, day=done)
        done = steps[0]
        for step in steps:
            while done < step:
                g.extract(f"s{done:05d}", [turn_text(rng, done, t) for t in range(TURNS_PER_SESSION)], day=done)
                done += 1
            timed: dict[str, list[float]] = {"extract": [], "commit": [], "ref_extract": [], "ref_commit": []}
            for i in range(new * rounds):
                sid = f"new{step:05d}-{i:02d}"
                one = g.extract(sid, [turn_text(rng, done + i, t) for t in range(TURNS_PER_SESSION)], day=done + i)
                other = ref.extract(sid, [turn_text(rng, done + i, t) for t in range(TURNS_PER_SESSION)], day=done + i)
                timed["extract"].append(one["map_reduce"] + one["commit"])
                timed["commit"].append(one["commit"])
                timed["ref_extract"].append(other["map_reduce"] + other["commit"])
                timed["ref_commit"].append(other["commit"])
            done += new * rounds
            points = g.points()
            median = {k: 1000 * sorted(v)[len(v) // 2] for k, v in timed.items()}

            def relative(kind: str) -> float:
                ratios = sorted(
                    sum(timed[kind][r * new : (r + 1) * new]) / sum(timed[f"ref_{kind}"][r * new : (r + 1) * new]) for r in range(rounds)
                )
                return (ratios[(rounds - 1) // 2] + ratios[rounds // 2]) / 2
            results.append({
                "history": step, "sessions": done, "points": points, "bytes_per_point": g.size() / points,
                "extract_ms_median": median["extract"], "commit_ms_median": median["commit"],
                "reference_extract_ms_median": median["ref_extract"],
                "relative_extract": relative("extract"),
                "relative_commit": relative("commit"),
            })
            print(results[-1], flush=True)
        g.db.close()
        ref.db.close()
    return results


def forget_cost(history: int = 2000, *, seed: int = 12) -> dict[str, Any]:
    """Forget one session of a ``history``-session graph: time and rows touched (the report)."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        g = Graph(Path(tmp) / "graph.sqlite3")
        for done in range(history):
            g.extract(f"s{done:05d}", [turn_text(rng, done, t) for t in range(TURNS_PER_SESSION)], day=done)
        t0 = time.perf_counter()
        report = forget_session(DatabaseUnitOfWork(g.db), f"s{history // 2:05d}")
        seconds = time.perf_counter() - t0
        g.db.close()
    return {"history": history, "forget_ms": 1000 * seconds, **{k: report[k] for k in ("points", "claims", "nodes_removed", "edges_removed", "memories")},
            "knowledge_nodes_removed": len(report["knowledge_nodes_removed"])}


def hot_node(points: int = 100_000, *, repeats: int = 15) -> dict[str, Any]:
    """A commit touching a node with ``points`` points (and an edge with as many) vs a fresh one."""
    with tempfile.TemporaryDirectory() as tmp:
        g = Graph(Path(tmp) / "graph.sqlite3")
        # Seed the node and its heaviest edge the way commits would have left them.
        g.extract("seed", ["We changed GraphStore and EdgeQueue in src/store/core.py."], day=0)
        prov = ProvenanceStore(g.db)
        key = ("CLASS:EdgeQueue", "CLASS:GraphStore", "RELATES_TO")
        assert g.graph.get_edge(*key) is not None, g.graph.all_edges()
        with g.db.transaction():
            for start in range(0, points, 10_000):
                rows = [PointRow(f"session:old{i:06d}", f"memory:old{i:06d}-t0", f"old{i:06d}:chunk:0", "GraphStore", "2025-01-01T00:00:00Z")
                        for i in range(start, min(points, start + 10_000))]
                prov.add_node_points(NodePointRow("CLASS:GraphStore", r, "CLASS:GraphStore") for r in rows)
                prov.add_edge_points(EdgePointRow(key, r, key[0], key[1]) for r in rows)
            g.graph.link_nodes([Edge(*key, float(points + 1), g.graph.get_edge(*key).properties)])
        hot_text = "We changed GraphStore and EdgeQueue in src/store/core.py for #{n}."
        cold_text = "We changed Fresh{n}Store and Fresh{n}Queue in src/fresh/f{n}.py for #{n}."
        timings: dict[str, list[float]] = {"hot": [], "cold": []}
        for i in range(repeats):
            for kind, text in (("hot", hot_text), ("cold", cold_text)):
                spent = g.extract(f"{kind}{i:03d}", [text.format(n=7000 + i)], day=i)
                timings[kind].append(spent["commit"])
        weight = g.graph.get_edge(*key).weight
        g.db.close()
    hot, cold = sorted(timings["hot"])[repeats // 2], sorted(timings["cold"])[repeats // 2]
    return {"points": points, "hot_commit_ms": 1000 * hot, "fresh_commit_ms": 1000 * cold, "ratio": hot / cold, "edge_weight_after": weight}


def _hash_rows(texts: list[str], dim: int = 256) -> list[np.ndarray]:
    """The ``hash`` embedding as it was before it was batched (a vector per row): the baseline."""
    vectors = []
    for text in texts:
        vec = np.zeros(dim, dtype=np.float32)
        for token in _TOKEN.findall(str(text).lower()):
            digest = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
            vec[digest % dim] += 1.0 if digest >> 63 else -1.0
        norm = float(np.linalg.norm(vec))
        vectors.append(vec / norm if norm else vec)
    return vectors


def big_session(turns: int, *, repeats: int = 5) -> dict[str, Any]:
    """Part 4: the extractor's speed on one big session, and each replaced hot spot's ratio."""

    def paired(old: Any, new: Any) -> tuple[float, float]:
        """Median seconds of ``old`` and of ``new``, run in turn (a change of load hits both)."""
        spent: dict[Any, list[float]] = {old: [], new: []}
        for _ in range(repeats):
            for run in (old, new):
                t0 = time.perf_counter()
                run()
                spent[run].append(time.perf_counter() - t0)
        return statistics.median(spent[old]), statistics.median(spent[new])

    texts = [f"turn {i}: FooWidget calls bar_{i % 7}() in src/mod{i % 5}.py" for i in range(turns)]
    source = [SourceTurn(f"huge-t{i:06d}", text) for i, text in enumerate(texts)]
    # The chunk budget the cycle uses by default.
    units = plan_units("huge", source, budget_tokens=load_settings(data_dir=Path(tempfile.gettempdir())).chunk_budget_tokens)
    t0 = time.perf_counter()
    extractions = [validate_extraction(extract_heuristic(u), u, semantic_types=TYPES) for u in units]
    extract_seconds = time.perf_counter() - t0
    reduced = reduce_session("huge", extractions)
    points = [p for node in reduced.nodes for p in node.provenance]
    random.Random(4).shuffle(points)
    assert sorted(points) == sorted(points, key=POINT_ORDER)
    as_dicts = [{**p.as_dict(), "observed_at": "2026-11-01T10:00:00Z"} for p in points]
    assert all(_point_json(d) == json.dumps(d, ensure_ascii=False, sort_keys=True, indent=2) for d in as_dicts)
    sort_old, sort_new = paired(lambda: sorted(points), lambda: sorted(points, key=POINT_ORDER))
    json_old, json_new = paired(lambda: [json.dumps(d, ensure_ascii=False, sort_keys=True, indent=2) for d in as_dicts],
                                lambda: [_point_json(d) for d in as_dicts])
    embed = HashEmbeddingFunction()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(_hash_rows(texts), embed(texts), strict=True))
    embed_old, embed_new = paired(lambda: _hash_rows(texts), lambda: embed(texts))
    return {
        "embed_rows_ms": 1000 * embed_old, "embed_batched_ms": 1000 * embed_new, "embed_ratio": embed_old / embed_new,
        "turns": turns, "units": len(units), "points": len(points), "extract_turns_per_s": turns / extract_seconds,
        "sort_order_true_ms": 1000 * sort_old, "sort_key_ms": 1000 * sort_new, "sort_ratio": sort_old / sort_new,
        "point_json_dumps_ms": 1000 * json_old, "point_json_ms": 1000 * json_new, "point_json_ratio": json_old / json_new,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--large", action="store_true", help="also 8,000 sessions of history")
    parser.add_argument("--hot-points", type=int, default=100_000)
    parser.add_argument("--big-session", type=int, metavar="TURNS", help="run only part 4, on a session of TURNS turns")
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    if args.big_session:
        found = big_session(args.big_session)
        print(found)
        return found
    steps = [250, 2000, 8000] if args.large else [250, 2000]
    grown = growth(steps)
    first, last = grown[0], grown[-1]
    hot = hot_node(args.hot_points)
    forgot = forget_cost(2000)
    summary = {
        "forget": forgot,
        "growth": grown,
        "extract_ratio": last["relative_extract"] / first["relative_extract"],
        "commit_ratio": last["relative_commit"] / first["relative_commit"],
        "hot_node": hot,
    }
    print(summary)
    return summary


if __name__ == "__main__":
    main()
