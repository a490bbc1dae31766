"""suitetime5: the export reading `{}` without `json.loads`, and provenance edges without documents.

A graph shaped as a cycle writes it (``--sessions`` sessions of ``--turns`` turns: a MEMORY node
per turn with its properties, an ``ORIGINATES_IN`` edge per turn with none, a ``MENTIONED_IN``
edge per turn with its chunk and quote, a SESSION node per session; a few semantic nodes). In the
same process, in turn (each first every other round), ``--rounds`` times, plain and under
``tracemalloc`` (as tests/test_export_memory.py runs the export): its properties documents decoded
by ``store.graph.read_properties`` and by ``json.loads`` (every row through the decoder, as
before), and the graph exported (``export`` JSON) as it is now and as before (every row through
the decoder, every edge's document read: the export now leaves the provenance edges' unread); the
medians. The two exports' texts are compared (equal but for the generation time).

    python bench/bench_empty_properties.py --sessions 10 --turns 5000 --rounds 5
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import store.graph  # noqa: E402
from config import load_settings  # noqa: E402
from store.db import Database  # noqa: E402
from store.graph import Edge, GraphStore, Node  # noqa: E402
from worker.knowledge import export_graph  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

FAST = store.graph.read_properties
READ_ALL_EDGES = GraphStore.all_edges


def build(path: Path, sessions: int, turns: int) -> int:
    """The graph (see the module docstring); returns its rows (nodes and edges)."""
    db = Database(path)
    graph = GraphStore(db)
    names = [Node(f"CLASS:Widget{i}", "CLASS", f"Widget{i}", {"aliases": [f"Widget{i}"]}) for i in range(7)]
    graph.upsert_nodes(names)
    rows = len(names)
    for s in range(sessions):
        sid = f"s{s:04d}"
        nodes = [Node(f"session:{sid}", "SESSION", f"Session {s}", {"sessionId": sid, "title": f"Session {s}"})]
        edges = []
        for t in range(turns):
            mid = f"memory:{sid}-t{t:06d}"
            nodes.append(Node(mid, "MEMORY", f"turn {t}", {"sessionId": sid, "turnIndex": t, "chars": 40, "liveIngested": True}))
            edges.append(Edge(mid, f"session:{sid}", "ORIGINATES_IN"))
            edges.append(Edge(f"CLASS:Widget{t % 7}", mid, "MENTIONED_IN", 1.0,
                              {"chunk_ids": [f"{sid}:chunk:{t // 2000}"], "evidence": [f"Widget{t % 7}"]}))
        graph.upsert_nodes(nodes)
        graph.link_nodes(edges)
        rows += len(nodes) + len(edges)
    db.close()
    return rows


def _timed(fn: Callable[[], object], *, traced: bool) -> float:
    if traced:
        tracemalloc.start()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        if traced:
            tracemalloc.stop()


def run(sessions: int, turns: int, rounds: int) -> dict[str, Any]:
    """Medians of decoding the graph's properties documents and of the export, with the fast path
    and with the decoder for every row; whether the two exports' texts are equal."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(data_dir=Path(tmp))
        rows = build(settings.graph_path, sessions, turns)
        db = Database(settings.graph_path)
        documents = [r[0] for r in db.query("SELECT properties FROM nodes UNION ALL SELECT properties FROM edges")]
        db.close()
        texts: dict[str, str] = {}

        def export(name: str) -> None:
            out = io.StringIO()
            export_graph(settings, out, fmt="json")
            texts[name] = out.getvalue()

        times: dict[tuple[str, str, bool], list[float]] = {}
        for done in range(rounds):
            pair = [("fast", FAST), ("decoder", json.loads)]
            for name, decode in pair if done % 2 == 0 else pair[::-1]:  # each goes first in turn
                store.graph.read_properties = decode  # type: ignore[assignment]
                if name == "decoder":  # and every edge's document read, as the export did before
                    GraphStore.all_edges = lambda self, bare_relationships=(): READ_ALL_EDGES(self)  # type: ignore[method-assign]
                try:
                    for what, fn in (("decode", lambda: [decode(d) for d in documents]), ("export", lambda: export(name))):
                        for traced in (False, True):
                            times.setdefault((what, name, traced), []).append(_timed(fn, traced=traced))
                finally:
                    store.graph.read_properties = FAST
                    GraphStore.all_edges = READ_ALL_EDGES  # type: ignore[method-assign]
        stamp = json.loads(texts["fast"])["generated_at"]
        same = texts["fast"] == texts["decoder"].replace(json.loads(texts["decoder"])["generated_at"], stamp)
    result: dict[str, Any] = {"rows": rows, "empty": sum(d == "{}" for d in documents), "texts_equal": same}
    for what in ("decode", "export"):
        for traced in (False, True):
            fast, slow = (statistics.median(times[(what, n, traced)]) for n in ("fast", "decoder"))
            result[f"{what}{'_traced' if traced else ''}"] = {
                "fast_s": round(fast, 3), "decoder_s": round(slow, 3), "ratio": round(fast / slow, 3),
                "rows_per_s_fast": round(rows / fast), "rows_per_s_decoder": round(rows / slow)}
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    result = run(args.sessions, args.turns, args.rounds)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
