"""Recall benchmark (issue 14): quality per signal on real conversations, latency, index cost.

    python bench/bench_recall.py                          # everything, data from /tmp/qe-data
    python bench/bench_recall.py quality latency ingest   # some parts
    python bench/bench_recall.py --friends DIR/friends --work /tmp/recall-bench

Data: the Friends scripts (EmilHvitfeldt/friends, MIT; from emorynlp/character-mining, Apache-2.0),
one session per scene, converted by quality-extractor's ``bench/convert_transcripts.py`` into
``friends.tune.jsonl`` / ``friends.heldout.jsonl`` (split by a hash of the episode). The questions
(``bench/data/recall_questions.jsonl``, then ``recall_questions_untouched.jsonl``, then
``recall_questions_c.jsonl``) were each written from a seeded sample of scenes no earlier question
uses, before any run; each round tunes on the earlier sets and runs its new set once, at the end
(``--untouched``: the third round's; ``--set-c``: the fourth round's).

- ``quality``: each split imported into embedded Chroma and consolidated by one real cycle
  (heuristic extractor); evidence recall@5/@10 and MRR for keyword, entities, vector (the
  collection's ``hash`` embedding) and fused, in the same run.
- ``latency``: the core (no CLI, no process start) over 1,000 queries against 12,500 and 100,000
  turns (1× and 8×: real turns of both splits, repeated under new ids), p50/p95 without and with
  the vector signal; and the MCP round trip (``rem-cycle mcp`` over stdio, the SDK's client).
- ``ingest``: ingest's graph write path with the FTS index against the same path without it
  (index triggers dropped, turn text not written), same rows, same process; database growth.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import Settings, load_settings  # noqa: E402
from pipelines.importer import import_sessions  # noqa: E402
from pipelines.ingest import _write_sessions  # noqa: E402
from pipelines.recall import MAX_LIMIT as MAX_DEPTH  # noqa: E402
from pipelines.recall import SIGNALS, RecallRequest, RecallWeights, fuse, recall  # noqa: E402
from store.chroma import MemoryRow, SummaryRow, row_created_at  # noqa: E402
from store.db import Database  # noqa: E402
import store.recall_index as recall_index_module  # noqa: E402
from store.recall_index import RecallIndex  # noqa: E402
from worker.cycle import run_cycle  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

HERE = Path(__file__).resolve().parent
# The first question set (28 tune + 28 held-out): since the third round, both halves are tuning data.
QUESTIONS = HERE / "data" / "recall_questions.jsonl"
# Written and committed (47bbec7) before any ranking ran on them; run at the end of the third round
# (twice): since the fourth round, tuning data too.
UNTOUCHED = HERE / "data" / "recall_questions_untouched.jsonl"
# Set C: written and committed (a250848) before any ranking ran on them; run once, at the end of a round.
SET_C = HERE / "data" / "recall_questions_c.jsonl"
# Set D: written blind (no ranking run while writing it) and committed before any ranking ran on it;
# run once, at the end of the sixth round.
SET_D = HERE / "data" / "recall_questions_d.jsonl"
# A held-out question set by its flag: each question names the split whose graph it is asked against.
HELD_OUT_SETS = {"untouched": UNTOUCHED, "c": SET_C, "d": SET_D}
DEFAULT_WEIGHTS = RecallWeights()
ANCHORED = RecallWeights(keyword_anchor=5, scene_vote=0, passage_anchor=0)
NO_SCENE_VOTE = RecallWeights(scene_vote=0, passage_anchor=0)
NO_PASSAGE_ANCHOR = RecallWeights(passage_anchor=0)
# name → (signals, weights): each signal alone (its own ranking: no scene vote, which would regroup
# even one signal's turns by session, and no passage anchor), then fused as configured by default,
# with the vector signal, the fourth round's default (no passage anchor), the third round's (no scene
# vote) and the second round's (no session signal, keyword anchor 5) for comparison.
CONFIGS: dict[str, tuple[tuple[str, ...], RecallWeights]] = {
    "keyword": (("keyword",), NO_SCENE_VOTE),
    "entities": (("entities",), NO_SCENE_VOTE),
    "vector": (("vector",), NO_SCENE_VOTE),
    "context": (("context",), NO_SCENE_VOTE),
    "session": (("session",), NO_SCENE_VOTE),
    "fused, default (keyword+entities+context+session)": (("keyword", "entities", "context", "session"), DEFAULT_WEIGHTS),
    "fused, all five (+vector)": (("keyword", "entities", "vector", "context", "session"), DEFAULT_WEIGHTS),
    "fourth round's default (no passage anchor)": (("keyword", "entities", "context", "session"), NO_PASSAGE_ANCHOR),
    "third round's default (no scene vote)": (("keyword", "entities", "context", "session"), NO_SCENE_VOTE),
    "second round's default (keyword+entities+context, keyword anchor 5)": (("keyword", "entities", "context"), ANCHORED),
}
RANK_DEPTH = 50
TUNE_SIGNALS = ("keyword", "entities", "vector", "context", "session")


class ChromaVector:
    """The vector signal as recall's core sees it, over the embedded collection (synchronous)."""

    def __init__(self, settings: Settings) -> None:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        import store.embedding  # noqa: F401 - registers the persisted ``hash`` embedding function

        client = chromadb.PersistentClient(path=str(settings.chroma_path), settings=ChromaSettings(anonymized_telemetry=False))
        self.collection = client.get_collection(settings.memory_collection)

    def nearest(self, text: str, *, limit: int) -> list[str]:
        result = self.collection.query(query_texts=[text], n_results=limit, include=[])
        return [f"memory:{i}" for i in result["ids"][0]]


def sessions_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.open(encoding="utf-8")]


async def build_graph(settings: Settings, sessions_file: Path) -> dict[str, float]:
    """Import ``sessions_file`` into embedded Chroma and consolidate it with one real cycle."""
    configure_logging(level="warning", fmt="json")
    t0 = time.perf_counter()
    from store.chroma import ChromaStore

    await import_sessions(sessions_file, chroma=ChromaStore(settings), memory_collection=settings.memory_collection,
                          summary_collection=settings.session_collection, batch_rows=5_000)
    t1 = time.perf_counter()
    result = await run_cycle(settings, reason="bench")
    assert result.outcome == "completed", result.message
    return {"import_s": round(t1 - t0, 1), "cycle_s": round(time.perf_counter() - t1, 1)}


def graph_settings(work: Path, name: str, *, embedding: str = "hash") -> Settings:
    """A graph's settings; one built with another embedding than ``hash`` lives in its own folder."""
    folder = name if embedding == "hash" else f"{name}-{embedding}"
    return load_settings(data_dir=work / folder, batch_limit=100_000, embedding=embedding)


def ensure_graph(work: Path, name: str, sessions_file: Path, *, embedding: str = "hash") -> Settings:
    settings = graph_settings(work, name, embedding=embedding)
    marker = settings.data_dir / "bench-built"
    if not marker.exists():
        if settings.data_dir.exists():
            shutil.rmtree(settings.data_dir)
        timing = anyio.run(build_graph, settings, sessions_file)
        marker.write_text(json.dumps(timing))
    return settings


# --- quality -------------------------------------------------------------------------------
def metrics(ranked: Sequence[str], gold: set[str]) -> dict[str, float]:
    """Evidence recall@5/@10 (share of the answering turns in the top k) and reciprocal rank."""
    rr = next((1 / i for i, m in enumerate(ranked, start=1) if m in gold), 0.0)
    return {
        "recall@5": len(gold & set(ranked[:5])) / len(gold),
        "recall@10": len(gold & set(ranked[:10])) / len(gold),
        "mrr": rr,
    }


def per_question(friends: Path, work: Path, questions: Sequence[dict[str, Any]], *, embedding: str) -> dict[str, list[dict[str, float]]]:
    """config → each question's metrics (in ``questions``' order), every config in the same run; a
    question is asked against the graph of its ``haystack`` split (its ``split`` when it has none)."""
    results: dict[str, list[dict[str, float]]] = {config: [{}] * len(questions) for config in CONFIGS}
    for haystack in sorted({q.get("haystack", q["split"]) for q in questions}):
        settings = ensure_graph(work, f"friends-{haystack}", friends.with_name(f"{friends.name}.{haystack}.jsonl"), embedding=embedding)
        db = Database(settings.graph_path, readonly=True)
        index, vector = RecallIndex(db), ChromaVector(settings)
        for i, q in enumerate(questions):
            if q.get("haystack", q["split"]) != haystack:
                continue
            for config, (signals, weights) in CONFIGS.items():
                answer = recall(RecallRequest(query=q["question"], limit=RANK_DEPTH, budget_tokens=200_000),
                                source=index, vector=vector, signals=signals, weights=weights)
                ranked = [t["memory_id"] for t in answer.as_dict()["turns"]]
                results[config][i] = metrics(ranked, {f"memory:{a}" for a in q["answers"]})
        db.close()
    return results


def mean_rows(results: dict[str, list[dict[str, float]]], keep: Sequence[int]) -> dict[str, dict[str, float]]:
    return {config: {key: round(sum(rows[i][key] for i in keep) / len(keep), 3) for key in ("recall@5", "recall@10", "mrr")}
            for config, rows in results.items()}


FUSED_DEFAULT = "fused, default (keyword+entities+context+session)"


def paired_differences(results: dict[str, list[dict[str, float]]], *, resamples: int = 10_000, seed: int = 14) -> dict[str, Any]:
    """The default fusion minus each single signal, question by question: the mean difference and a
    95% bootstrap interval (questions resampled with replacement, seeded) per metric. An interval
    that excludes 0 is a difference beyond what the choice of questions explains."""
    rng = random.Random(seed)
    n = len(results[FUSED_DEFAULT])
    draws = [[rng.randrange(n) for _ in range(n)] for _ in range(resamples)]
    report: dict[str, Any] = {}
    for signal in ("keyword", "entities", "vector", "context", "session", "fourth round's default (no passage anchor)",
                   "third round's default (no scene vote)"):
        report[f"fused - {signal}"] = {}
        for key in ("recall@5", "recall@10", "mrr"):
            diffs = [f[key] - g[key] for f, g in zip(results[FUSED_DEFAULT], results[signal])]
            means = sorted(sum(diffs[i] for i in draw) / n for draw in draws)
            report[f"fused - {signal}"][key] = {"mean": round(sum(diffs) / n, 3), "ci95": [round(means[int(0.025 * resamples)], 3),
                                                                                        round(means[int(0.975 * resamples)], 3)]}
    return report


def quality(friends: Path, work: Path, *, splits: Sequence[str] = ("tune", "heldout"), embedding: str = "hash",
            held_out: str | None = None) -> dict[str, Any]:
    """Mean metrics per config: of the first set's ``splits`` (each, and both together) or, with
    ``held_out`` (a key of :data:`HELD_OUT_SETS`), of that set (per haystack split and all together)."""
    path = HELD_OUT_SETS[held_out] if held_out else QUESTIONS
    questions = [q for q in (json.loads(line) for line in path.open(encoding="utf-8")) if held_out or q["split"] in splits]
    results = per_question(friends, work, questions, embedding=embedding)
    group = (lambda q: q["haystack"]) if held_out else (lambda q: q["split"])
    report: dict[str, Any] = {"embedding": embedding, "questions": path.name}
    for name in sorted({group(q) for q in questions}):
        keep = [i for i, q in enumerate(questions) if group(q) == name]
        report[f"{held_out + ', haystack ' if held_out else ''}{name}"] = {"questions": len(keep), **mean_rows(results, keep)}
    report[held_out or "first set (both halves)"] = {"questions": len(questions), **mean_rows(results, range(len(questions)))}
    report["paired"] = paired_differences(results)
    return report


def tune_weights(friends: Path, work: Path, *, embedding: str = "hash") -> dict[str, Any]:
    """Grid of the fusion weights over the tuning data: the first question set (both halves) and
    the third round's untouched set (set C is never read here). Each signal ranks each question
    once, at the depth fusion sees; fusion is recomputed per setting. Besides the grid's best
    settings and the defaults' row, a leave-one-out estimate of choosing by grid: the best setting
    on all questions but one (by recall@10 + MRR), scored on that one — what a grid pick is worth
    on a new question."""
    questions = [json.loads(line) for path in (QUESTIONS, UNTOUCHED) for line in path.open(encoding="utf-8")]
    rankings = []
    for split in ("tune", "heldout"):
        settings = ensure_graph(work, f"friends-{split}", friends.with_name(f"{friends.name}.{split}.jsonl"), embedding=embedding)
        db = Database(settings.graph_path, readonly=True)
        index, vector = RecallIndex(db), ChromaVector(settings)
        for q in (q for q in questions if q.get("haystack", q["split"]) == split):
            per_signal, bm25, scene_of = {}, True, {}
            for signal in TUNE_SIGNALS:
                answer = recall(RecallRequest(query=q["question"], limit=MAX_DEPTH, budget_tokens=200_000),
                                source=index, vector=vector, signals=(signal,), weights=NO_SCENE_VOTE)
                turns = answer.as_dict()["turns"]
                per_signal[signal] = [t["memory_id"] for t in turns]
                scene_of |= {t["memory_id"]: t["session_id"] for t in turns}
                bm25 = answer.signals["terms"]["bm25"]
            rankings.append((per_signal, bm25, scene_of, {f"memory:{a}" for a in q["answers"]}))
        db.close()
    keys = ("session", "entities", "vector", "context", "rrf_k", "keyword_anchor", "scene_vote")
    grid: list[dict[str, Any]] = []
    per_setting: list[list[dict[str, float]]] = []
    for session, entities, vec, context, k, anchor, scene in itertools.product(
        (0.0, 0.5, 1.0, 2.0), (0.0, 0.5), (0.0, 0.5), (0.0, 0.2, 0.5), (10.0, 20.0, 60.0), (0, 5), (0.0, 0.5, 1.0, 2.0)
    ):
        weights = RecallWeights(keyword=1.0, session=session, entities=entities, vector=vec, context=context, rrf_k=k,
                                keyword_anchor=anchor, scene_vote=scene)
        rows = []
        for per_signal, bm25, scene_of, gold in rankings:
            fused = [m for m, _, _ in fuse({s: r for s, r in per_signal.items() if weights.of(s) > 0}, weights,
                                           anchor=per_signal["keyword"][:anchor] if bm25 else [], scene_of=scene_of)]
            rows.append(metrics(fused[:RANK_DEPTH], gold))
        per_setting.append(rows)
        grid.append(dict(zip(keys, (session, entities, vec, context, k, anchor, scene)))
                    | {key: round(sum(r[key] for r in rows) / len(rows), 3) for key in ("recall@5", "recall@10", "mrr")})
    n = len(rankings)

    def value(rows: Sequence[dict[str, float]]) -> float:
        return sum(r["recall@10"] + r["mrr"] for r in rows)

    loo = []
    for i in range(n):
        best = max(range(len(grid)), key=lambda g: value(per_setting[g][:i] + per_setting[g][i + 1:]))
        loo.append(per_setting[best][i])
    alone = {signal: {key: round(sum(metrics(p[signal][:RANK_DEPTH], gold)[key] for p, _, _, gold in rankings) / n, 3)
                      for key in ("recall@5", "recall@10", "mrr")} for signal in TUNE_SIGNALS}
    defaults = next(g for g in grid if all(g[key] == getattr(DEFAULT_WEIGHTS, key) for key in keys if key != "vector") and g["vector"] == 0)
    order = sorted(range(len(grid)), key=lambda g: -value(per_setting[g]))
    spread = {}
    for scene in (0.0, 0.5, 1.0, 2.0):
        region = [g for g in grid if g["keyword_anchor"] == 0 and g["session"] > 0 and g["scene_vote"] == scene]
        spread[f"anchor 0, session > 0, scene vote {scene}"] = {
            key: {"median": statistics.median(g[key] for g in region), "min": min(g[key] for g in region)}
            for key in ("recall@5", "recall@10", "mrr")}
    return {"questions": n, "settings": len(grid), "alone": alone, "defaults": defaults,
            "leave_one_out": {key: round(sum(r[key] for r in loo) / n, 3) for key in ("recall@5", "recall@10", "mrr")},
            "spread": spread, "best": [grid[g] for g in order[:5]]}


# --- latency -------------------------------------------------------------------------------
def replicated(friends: Path, turns: int, out: Path) -> Path:
    """Real turns of both splits, repeated under new ids until there are ``turns`` of them."""
    scenes = sessions_of(friends.with_name(f"{friends.name}.tune.jsonl")) + sessions_of(friends.with_name(f"{friends.name}.heldout.jsonl"))
    written = 0
    copy = 0
    with out.open("w", encoding="utf-8") as handle:
        while written < turns:
            for scene in scenes:
                if written >= turns:
                    break
                keep = scene["turns"][: turns - written]
                prefix = f"c{copy}-" if copy else ""
                session = {**scene, "sessionId": prefix + scene["sessionId"], "userId": f"user-{copy % 4}",
                           "turns": [{**t, "id": prefix + t["id"]} for t in keep]}
                handle.write(json.dumps(session) + "\n")
                written += len(keep)
            copy += 1
    return out


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def query_set(friends: Path, n: int, seed: int = 14) -> list[str]:
    """The benchmark's questions, then the first words of random real turns, ``n`` in all."""
    rng = random.Random(seed)
    queries = [json.loads(line)["question"] for line in QUESTIONS.open(encoding="utf-8")]
    turns = [t["text"] for s in sessions_of(friends.with_name(f"{friends.name}.tune.jsonl")) for t in s["turns"]]
    while len(queries) < n:
        words = rng.choice(turns).split()
        queries.append(" ".join(words[: rng.randint(2, 8)]) or "coffee")
    return queries[:n]


def time_core(settings: Settings, queries: Sequence[str], *, vector: bool, user: str | None = None) -> dict[str, float]:
    db = Database(settings.graph_path, readonly=True)
    index = RecallIndex(db)
    source = ChromaVector(settings) if vector else None
    times = []
    for q in queries:
        t0 = time.perf_counter()
        recall(RecallRequest(query=q, user=user, limit=10, budget_tokens=2_000), source=index, vector=source)
        times.append((time.perf_counter() - t0) * 1000)
    db.close()
    return {"p50_ms": round(percentile(times, 50), 2), "p95_ms": round(percentile(times, 95), 2), "queries": len(times)}


def time_alternating(settings: Settings, queries: Sequence[str], variants: dict[str, tuple[Sequence[str], RecallWeights]]) -> dict[str, Any]:
    """What one variant costs against the other: each query timed with both ``variants`` (name →
    (signals, weights)), alternating query by query and which goes first (same process, same cache,
    same load), no vector. The ratio is the first variant's time over the second's."""
    db = Database(settings.graph_path, readonly=True)
    index = RecallIndex(db)
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i, q in enumerate(queries):
        for name in (names if i % 2 else names[::-1]):
            signals, weights = variants[name]
            t0 = time.perf_counter()
            recall(RecallRequest(query=q, limit=10, budget_tokens=2_000), source=index, signals=signals, weights=weights)
            times[name].append((time.perf_counter() - t0) * 1000)
    db.close()
    report: dict[str, Any] = {name: {"p50_ms": round(percentile(t, 50), 2), "p95_ms": round(percentile(t, 95), 2)} for name, t in times.items()}
    first, second = names
    report["p50_ratio"] = round(report[first]["p50_ms"] / report[second]["p50_ms"], 2)
    report["p95_ratio"] = round(report[first]["p95_ms"] / report[second]["p95_ms"], 2)
    return report


async def time_mcp(settings: Settings, queries: Sequence[str]) -> dict[str, float]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {"REM_DATA_DIR": str(settings.data_dir), "PYTHONPATH": str(HERE.parent), "REM_LOG_LEVEL": "warning"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "worker", "mcp"], env=env, cwd=str(HERE.parent))
    times = []
    async with Client(params) as client:
        await client.call_tool("recall", {"query": "warm up"})
        for q in queries:
            t0 = time.perf_counter()
            result = await client.call_tool("recall", {"query": q, "limit": 10, "budget_tokens": 2_000})
            assert not result.is_error, result
            times.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(percentile(times, 50), 2), "p95_ms": round(percentile(times, 95), 2), "queries": len(times)}


def latency(friends: Path, work: Path, *, queries: int, mcp_queries: int) -> dict[str, Any]:
    qs = query_set(friends, queries)
    report: dict[str, Any] = {}
    for name, turns in (("1x", 12_500), ("8x", 100_000)):
        source = replicated(friends, turns, work / f"latency-{name}.jsonl")
        settings = ensure_graph(work, f"latency-{name}", source)
        report[name] = {
            "turns": RecallIndex(Database(settings.graph_path, readonly=True)).counts()["recall_turns"],
            "core_no_vector": time_core(settings, qs, vector=False),
            "session_signal_cost": time_alternating(settings, qs, {"with": (SIGNALS, DEFAULT_WEIGHTS),
                                                                   "without": (tuple(s for s in SIGNALS if s != "session"), DEFAULT_WEIGHTS)}),
            "passage_anchor_cost": time_alternating(settings, qs, {"with": (SIGNALS, DEFAULT_WEIGHTS), "without": (SIGNALS, NO_PASSAGE_ANCHOR)}),
            "core_no_vector_user": time_core(settings, qs, vector=False, user="user-0"),
            "core_with_vector": time_core(settings, qs[: max(100, queries // 5)], vector=True),
            "db_mb": round(settings.graph_path.stat().st_size / 1e6, 1),
        }
        if name == "8x":
            report[name]["mcp_stdio_round_trip"] = anyio.run(time_mcp, settings, qs[:mcp_queries])
    return report


# --- ingest cost ---------------------------------------------------------------------------
_RECALL_TRIGGERS = ("recall_sessions_from_nodes_ai", "recall_node_names_ai", "recall_nodes_au", "recall_turns_from_nodes_ad",
                    "recall_nodes_ad", "recall_claims_ai", "recall_claims_ad", "recall_claims_au")


def ingest_batches(friends: Path, sessions_per_batch: int = 50) -> list[tuple[list[str], dict[str, list[MemoryRow]], dict[str, SummaryRow]]]:
    """Real sessions as ingest receives them from Chroma (rows with the metadata import writes)."""
    batches = []
    scenes = sessions_of(friends.with_name(f"{friends.name}.tune.jsonl"))
    for start in range(0, len(scenes), sessions_per_batch):
        ids, rows, summaries = [], {}, {}
        for scene in scenes[start : start + sessions_per_batch]:
            sid = scene["sessionId"]
            ids.append(sid)
            rows[sid] = [MemoryRow(t["id"], t["text"], {"sessionId": sid, "turnIndex": i, "role": t["role"],
                                                          "createdAt": t["createdAt"], "userId": "u"})
                         for i, t in enumerate(scene["turns"])]
            meta = {"sessionId": sid, "title": scene["title"], "createdAt": scene["createdAt"], "userId": "u"}
            summaries[sid] = SummaryRow(f"summary_{sid}", f"Scene {sid}", meta)
            assert row_created_at(meta)
        batches.append((ids, rows, summaries))
    return batches


def fresh_database(path: Path, *, fts: bool) -> Database:
    """A new graph database at ``path``; without ``fts`` the recall index is switched off (its
    triggers dropped, ingest's turn indexing a no-op until the caller restores it)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    db = Database(path)
    if not fts:
        for trigger in _RECALL_TRIGGERS:
            db.conn.execute(f"DROP TRIGGER {trigger}")
        recall_index_module.RecallIndex.index_memory_nodes = lambda self, nodes, texts: 0  # type: ignore[method-assign]
    return db


def ingest_cost(friends: Path, work: Path, *, rounds: int = 3) -> dict[str, Any]:
    """Two ratios, each over the same rows in the same process, alternating variants: the graph
    write path alone (``_write_sessions`` over rows already in memory: the strictest view, the FTS
    work against SQLite writes only) and the live-sync phase end to end (the Chroma read included,
    as a cycle runs it: ``sync_sessions_to_graph`` over the tune split's embedded Chroma)."""
    from pipelines.ingest import sync_sessions_to_graph
    from store.chroma import ChromaStore
    from store.unit_of_work import DatabaseUnitOfWork

    batches = ingest_batches(friends)
    chroma_settings = ensure_graph(work, "friends-tune", friends.with_name(f"{friends.name}.tune.jsonl"))
    rows = sum(len(r) for _, by, _ in batches for r in by.values())
    original = recall_index_module.RecallIndex.index_memory_nodes
    timings: dict[str, list[float]] = {"with_fts": [], "without_fts": []}
    end_to_end: dict[str, list[float]] = {"with_fts": [], "without_fts": []}
    sizes: dict[str, int] = {}
    for _ in range(rounds):
        for variant in ("with_fts", "without_fts"):
            db = fresh_database(work / f"ingest-{variant}.sqlite3", fts=variant == "with_fts")
            unit = DatabaseUnitOfWork(db)
            try:
                t0 = time.perf_counter()
                for ids, by_session, summaries in batches:
                    _write_sessions(ids, by_session, summaries, unit)
                timings[variant].append(time.perf_counter() - t0)
                with db.transaction() as conn:
                    for table in ("edges", "nodes"):
                        conn.execute(f"DELETE FROM {table}")
                chroma = ChromaStore(chroma_settings)

                async def sync_all() -> float:
                    started = time.perf_counter()
                    for ids, _, _ in batches:
                        await sync_sessions_to_graph(ids, chroma=chroma, unit=unit)
                    return time.perf_counter() - started

                end_to_end[variant].append(anyio.run(sync_all))
            finally:
                recall_index_module.RecallIndex.index_memory_nodes = original  # type: ignore[method-assign]
            db.close()
    for variant in ("with_fts", "without_fts"):
        # Database growth: the graph write path's rows once more into a fresh file, checkpointed.
        size_path = work / f"ingest-size-{variant}.sqlite3"
        db = fresh_database(size_path, fts=variant == "with_fts")
        try:
            for ids, by_session, summaries in batches:
                _write_sessions(ids, by_session, summaries, DatabaseUnitOfWork(db))
        finally:
            recall_index_module.RecallIndex.index_memory_nodes = original  # type: ignore[method-assign]
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        sizes[variant] = size_path.stat().st_size
    with_s, without_s = statistics.median(timings["with_fts"]), statistics.median(timings["without_fts"])
    e2e_with, e2e_without = statistics.median(end_to_end["with_fts"]), statistics.median(end_to_end["without_fts"])
    return {
        "sync_with_fts_rows_per_s": round(rows / e2e_with),
        "sync_without_fts_rows_per_s": round(rows / e2e_without),
        "sync_ratio": round(e2e_without / e2e_with, 3),
        "turns": rows,
        "write_path_with_fts_rows_per_s": round(rows / with_s),
        "write_path_without_fts_rows_per_s": round(rows / without_s),
        "write_path_ratio": round(without_s / with_s, 3),
        "db_mb_with_fts": round(sizes["with_fts"] / 1e6, 1),
        "db_mb_without_fts": round(sizes["without_fts"] / 1e6, 1),
        "growth": round(sizes["with_fts"] / sizes["without_fts"], 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", choices=("quality", "tune", "latency", "ingest", []), default=[])
    parser.add_argument("--friends", type=Path, default=Path("/tmp/qe-data/friends"),
                        help="prefix of friends.tune.jsonl / friends.heldout.jsonl")
    parser.add_argument("--work", type=Path, default=Path("/tmp/recall-bench"))
    parser.add_argument("--split", choices=("tune", "heldout"), action="append",
                        help="quality on this half of the first question set only (repeatable; default both)")
    parser.add_argument("--untouched", action="store_const", const="untouched", dest="held_out",
                        help="quality on the third round's untouched question set instead (tuning data since the fourth round)")
    parser.add_argument("--set-c", action="store_const", const="c", dest="held_out",
                        help="quality on question set C instead (the fourth round's held-out set, run once then; tuning data since)")
    parser.add_argument("--set-d", action="store_const", const="d", dest="held_out",
                        help="quality on question set D instead (written blind in the sixth session, run once with the ranking of 0934fcb)")
    parser.add_argument("--embedding", choices=("hash", "minilm"), default="hash",
                        help="the memory collection's embedding for quality/tune (minilm needs the 'embeddings' extra)")
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--mcp-queries", type=int, default=200)
    args = parser.parse_args(argv)
    parts = args.parts or ["quality", "latency", "ingest"]
    if not args.friends.with_name(f"{args.friends.name}.tune.jsonl").exists():
        print(f"no {args.friends}.tune.jsonl: see this module's docstring for the data and its converter")
        return
    args.work.mkdir(parents=True, exist_ok=True)
    configure_logging(level="warning", fmt="json")
    report: dict[str, Any] = {}
    for part in parts:
        t0 = time.perf_counter()
        if part == "quality":
            report["quality"] = quality(args.friends, args.work, splits=args.split or ("tune", "heldout"), embedding=args.embedding,
                                        held_out=args.held_out)
        elif part == "tune":
            report["tune"] = tune_weights(args.friends, args.work, embedding=args.embedding)
        elif part == "latency":
            report["latency"] = latency(args.friends, args.work, queries=args.queries, mcp_queries=args.mcp_queries)
        else:
            report["ingest"] = ingest_cost(args.friends, args.work)
        report[f"{part}_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps({part: report[part]}, indent=1), flush=True)


if __name__ == "__main__":
    main()
