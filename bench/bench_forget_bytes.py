"""What erasing forgotten text from the database's files costs (forgetbytes, thirteenth session).

    python bench/bench_forget_bytes.py [--sessions 250 2000] [--rounds 40] [--postgres URL]

A graph of ``--sessions`` sessions of 12 turns (``bench_provenance``'s corpus: popular names in
most sessions, a long tail), built through the extraction's commit (heuristic map → reduce →
``commit_session`` with identity resolution), every turn's text in recall's full-text index as
ingest writes it. Then, in one process on that graph, alternating so the machine's load cancels:

- ``commit`` (SQLite): a cycle's commit of a new session, and of a re-extraction of an old one
  (which takes back its old points: deletes), with the writing connection's ``secure_delete``
  OFF (python.org's builds), FAST and ON (Debian's builds, and rem-cycle's since this branch);
  medians of ``--rounds`` commits each, and the ratio to OFF.
- ``forget``: ``forget_session`` of a different old session each time, as main did it (no erase;
  SQLite: ``secure_delete`` OFF and ON) and as ``rem-cycle forget`` does now (the forget, then
  ``Database.erase_deleted``: on SQLite the recall tables' FTS5 ``optimize`` and a
  ``wal_checkpoint(TRUNCATE)``; on PostgreSQL a ``VACUUM`` of the text tables); medians.
- ``forget, recorded`` (forgetdur): what ``rem-cycle forget`` does since forgetdur — the forget and
  its ``queue_withdrawals`` row with ``erase_due`` marked in one transaction, then
  ``withdraw_retracted`` (its record read, its lines withdrawn from the queue table, the record
  deleted) and ``erase_when_due`` — against what it did before (the forget, then
  ``withdraw_queued_lines`` of its lines and ``erase_deleted_text``), alternating, a different old
  session each time; medians, their ratio, and the median of the ``record`` call itself.
- ``retraction`` (forgetrest): what a cycle that retracted a session whose rows left Chroma adds
  at its end since forgetrest — the same ``erase_deleted`` — beside the retraction itself
  (``retract_vanished`` of a different old session each time, without a tombstone); medians.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_provenance import TURNS_PER_SESSION, Graph, turn_text  # noqa: E402
from bench.bench_reextract import databases  # noqa: E402
from bench.growth import engines  # noqa: E402
from pipelines.forget import forget_session, retract_vanished  # noqa: E402
from store.recall_index import RecallIndex, TurnRecord  # noqa: E402
from store.tombstones import SESSION  # noqa: E402
from pipelines.lazy_edge import ExtractionLines  # noqa: E402
from store.lazy_queue import LazyEdgeQueue  # noqa: E402
from store.unit_of_work import DatabaseUnitOfWork  # noqa: E402
from worker.knowledge import erase_deleted_text, erase_when_due, withdraw_queued_lines, withdraw_retracted  # noqa: E402
from worker.logs import configure_logging  # noqa: E402

SECURE_DELETE = ("OFF", "FAST", "ON")


def build(g: Graph, sessions: int, rng: random.Random) -> None:
    """``sessions`` sessions committed and their turns indexed for recall."""
    recall = RecallIndex(g.db)
    for number in range(sessions):
        sid = f"s{number:05d}"
        texts = [turn_text(rng, number, t) for t in range(TURNS_PER_SESSION)]
        g.extract(sid, texts, day=number)
        recall.index_turns(
            TurnRecord(f"{sid}-t{t:03d}", sid, t, "assistant", "2026-11-01T10:00:00Z", text) for t, text in enumerate(texts)
        )


def median_ms(times: list[float]) -> float:
    return round(1000 * statistics.median(times), 2)


def commits(g: Graph, history: int, rounds: int, rng: random.Random) -> dict[str, Any]:
    """Median commit time per ``secure_delete`` mode: new sessions, and re-extractions of old ones."""
    new: dict[str, list[float]] = {mode: [] for mode in SECURE_DELETE}
    again: dict[str, list[float]] = {mode: [] for mode in SECURE_DELETE}
    for i in range(rounds):
        for mode in SECURE_DELETE:
            g.db.conn.execute(f"PRAGMA secure_delete={mode}")
            number = history + i * len(SECURE_DELETE) + SECURE_DELETE.index(mode)
            new[mode].append(g.extract(f"n{number:05d}", [turn_text(rng, number, t) for t in range(TURNS_PER_SESSION)], day=number)["commit"])
            old = rng.randrange(history)
            again[mode].append(g.extract(f"s{old:05d}", [turn_text(rng, old + 77_777, t) for t in range(TURNS_PER_SESSION)], day=old)["commit"])
    g.db.conn.execute("PRAGMA secure_delete=ON")
    out: dict[str, Any] = {}
    for kind, times in (("new", new), ("reextract", again)):
        for mode in SECURE_DELETE:
            out[f"{kind}_{mode}_ms"] = median_ms(times[mode])
        out[f"{kind}_ON_ratio"] = round(statistics.median(times["ON"]) / statistics.median(times["OFF"]), 3)
        out[f"{kind}_FAST_ratio"] = round(statistics.median(times["FAST"]) / statistics.median(times["OFF"]), 3)
    return out


def forgets(g: Graph, history: int, rounds: int, *, sqlite: bool) -> dict[str, Any]:
    """Median forget time of one old session per way: main's (SQLite: ``secure_delete`` OFF and ON)
    and now (the forget, then ``erase_deleted``)."""
    unit = DatabaseUnitOfWork(g.db)

    def main_with(mode: str) -> Callable[[str], object]:
        def run(session: str) -> object:
            g.db.conn.execute(f"PRAGMA secure_delete={mode}")
            return forget_session(unit, session)
        return run

    def now(session: str) -> object:
        if sqlite:
            g.db.conn.execute("PRAGMA secure_delete=ON")
        forget_session(unit, session)
        return g.db.erase_deleted()

    ways: dict[str, Callable[[str], object]] = (
        {"main_OFF": main_with("OFF"), "main_ON": main_with("ON"), "now": now} if sqlite
        else {"main": lambda session: forget_session(unit, session), "now": now}
    )
    times: dict[str, list[float]] = {way: [] for way in ways}
    victims = iter(random.Random(7).sample(range(history), rounds * len(ways)))
    for _ in range(rounds):
        for way, run in ways.items():
            session = f"s{next(victims):05d}"
            t0 = time.perf_counter()
            run(session)
            times[way].append(time.perf_counter() - t0)
    out: dict[str, Any] = {f"forget_{way}_ms": median_ms(t) for way, t in times.items()}
    baseline = "main_ON" if sqlite else "main"
    out["forget_now_ratio"] = round(statistics.median(times["now"]) / statistics.median(times[baseline]), 2)
    return out


def recorded_forgets(g: Graph, history: int, rounds: int, queue: LazyEdgeQueue) -> dict[str, Any]:
    """Median time of ``rem-cycle forget``'s work on one old session (not forgotten yet) before
    forgetdur and since (its withdrawal and erase recorded in its transaction, then done from the
    record), alternating; ``queue``: files that do not exist (the queue table is read)."""
    unit = DatabaseUnitOfWork(g.db)
    names = [f"s{n:05d}" for n in random.Random(17).sample(range(history), history)]
    forgotten = unit.tombstones.buried(SESSION, names)
    victims = iter(name for name in names if name not in forgotten)
    times: dict[str, list[float]] = {"before": [], "recorded": [], "record": []}
    for _ in range(rounds):
        session = next(victims)
        t0 = time.perf_counter()
        forget_session(unit, session)
        withdraw_queued_lines(g.db, ExtractionLines.of(session), queue=queue)
        erase_deleted_text(g.db)
        times["before"].append(time.perf_counter() - t0)
        session = next(victims)
        t0 = time.perf_counter()
        with unit.transaction():
            forget_session(unit, session)
            t1 = time.perf_counter()
            unit.withdrawals.record(session, extraction_stands=False)
            times["record"].append(time.perf_counter() - t1)
        withdraw_retracted(g.db, queue=queue)
        erase_when_due(g.db, at_once=True)
        times["recorded"].append(time.perf_counter() - t0)
    return {"forget_before_ms": median_ms(times["before"]), "forget_recorded_ms": median_ms(times["recorded"]),
            "forget_recorded_ratio": round(statistics.median(times["recorded"]) / statistics.median(times["before"]), 2),
            "record_call_ms": round(1000 * statistics.median(times["record"]), 3)}


def retractions(g: Graph, history: int, rounds: int, *, sqlite: bool) -> dict[str, Any]:
    """Median time of a cycle's retraction of one old session (one not forgotten yet), and of the
    erase the cycle now runs after it (``finalize``). PostgreSQL (erasedue2): every other
    retraction is followed instead by the ``VACUUM`` alone, as the erase was before it waited for
    snapshots older than the deletion (``vacuum_only_ms``, ``erase_over_vacuum``)."""
    unit = DatabaseUnitOfWork(g.db)
    names = [f"s{n:05d}" for n in random.Random(11).sample(range(history), history)]
    forgotten = unit.tombstones.buried(SESSION, names)
    retract: list[float] = []
    erase: list[float] = []
    vacuum: list[float] = []
    for n, session in enumerate([name for name in names if name not in forgotten][:rounds if sqlite else 2 * rounds]):
        t0 = time.perf_counter()
        retract_vanished(unit, [session])
        t1 = time.perf_counter()
        if sqlite or n % 2 == 0:
            g.db.erase_deleted()
            erase.append(time.perf_counter() - t1)
        else:
            from store.postgres import TEXT_TABLES  # psycopg, loaded for PostgreSQL only

            g.db.conn.execute(f"VACUUM {', '.join(TEXT_TABLES)}")
            vacuum.append(time.perf_counter() - t1)
        retract.append(t1 - t0)
    out = {"retract_ms": median_ms(retract), "retract_erase_ms": median_ms(erase),
           "retract_with_erase_ratio": round((statistics.median(retract) + statistics.median(erase)) / statistics.median(retract), 2)}
    if vacuum:
        out.update(vacuum_only_ms=median_ms(vacuum), erase_over_vacuum=round(statistics.median(erase) / statistics.median(vacuum), 2))
    return out


def run(sessions: list[int], rounds: int, postgres_url: str | None) -> list[dict[str, Any]]:
    results = []
    for engine, url in engines(postgres_url):
        with tempfile.TemporaryDirectory() as tmp, databases(Path(tmp), url) as fresh:
            for history in sessions:
                db = fresh(f"h{history}")
                try:
                    g = Graph(db=db)
                    rng = random.Random(13)
                    t0 = time.perf_counter()
                    build(g, history, rng)
                    row: dict[str, Any] = {"engine": engine, "sessions": history, "turns": history * TURNS_PER_SESSION,
                                           "build_s": round(time.perf_counter() - t0, 1)}
                    if url is None:
                        row.update(commits(g, history, rounds, rng))
                    row.update(forgets(g, history, max(5, rounds // 4), sqlite=url is None))
                    row.update(recorded_forgets(g, history, max(5, rounds // 4), LazyEdgeQueue(Path(tmp) / "no-queue" / "lazy-edges.jsonl")))
                    row.update(retractions(g, history, max(5, rounds // 4), sqlite=url is None))
                    print(row, flush=True)
                    results.append(row)
                finally:
                    db.close()
    return results


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[250, 2000])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--postgres", default=os.environ.get("REM_TEST_POSTGRES_URL") or None)
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    return run(args.sessions, args.rounds, args.postgres)


if __name__ == "__main__":
    main()
