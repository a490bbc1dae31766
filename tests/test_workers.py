"""Several workers build the graph one worker builds: canonical names and merge survivors do not
depend on the order sessions commit in (README "Several workers", the rule), and real worker
processes — on SQLite and on PostgreSQL — digest every session exactly once, also when one of
three is SIGKILLed (again and again; on PostgreSQL mid-commit, as if on another host)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from config import Settings, load_settings
from pipelines.identity import survivors
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from store.backend import open_database
from store.facts import least_name
from tests.conftest import write_sessions
from tests.llm_server import LLMServer, held, slow
from tests.test_forget import canonical
from tests.workers_support import ELSEWHERE, commit_naming, corpus, digest_report, ingested, run_workers, slow_commits_elsewhere
from worker.cycle import PHASES, run_cycle


def session(sid: str, day: int, *turns: tuple[str, str]) -> dict[str, Any]:
    return {"sessionId": sid, "title": f"Session {sid}", "createdAt": f"2026-11-0{day}T10:00:00Z", "userId": "u-1",
            "summary": f"Summary of {sid}", "turns": [{"role": role, "text": text} for role, text in turns]}


# One person and one method, each written two ways; which spelling comes first depends on the order.
VARIANTS = [
    session("va", 1, ("user", "Tomás Herrera says the DrainWorker class calls QuerySet.iterator() before the lazy queue."),
            ("assistant", "I will read DrainWorker and QuerySet.iterator() now.")),
    session("vb", 2, ("user", "Tomas Herrera thinks DrainWorkers call iterator() too often."),
            ("assistant", "Right, the DrainWorkers loop calls iterator() per batch.")),
    session("vc", 3, ("user", "Ask Tomas Herrera whether LazyEdgeQueue and the DrainWorker share a lock."),
            ("assistant", "LazyEdgeQueue holds a file lock; DrainWorker takes it.")),
]


def test_survivors_are_the_least_id_of_each_linked_group() -> None:
    # b and c link to the existing z: all three become b; d links to a (a stays); e is new.
    assert survivors(["b", "c", "d", "e"], {"b": "z", "c": "z", "d": "a"}) == {"z": "b", "c": "b", "d": "a"}
    assert survivors(["x"], {"x": "x"}) == {}  # an exact id is no link
    person = "PERSON:Tomas Herrera"
    assert least_name(["Tomás Herrera", "Tomas Herrera", ""], node_id=person) == least_name(["Tomas Herrera", "Tomás Herrera"], node_id=person) == "Tomas Herrera"
    # The spelling of the id first, then case-folded order.
    assert least_name(["iterator", "QuerySet.iterator"], node_id="METHOD:QuerySet.iterator") == "QuerySet.iterator"
    assert least_name(["lazy edge queue", "LazyEdgeQueue"], node_id="CLASS:LazyEdgeQueue") == "LazyEdgeQueue"
    assert least_name(["Lazy queue", "lazy Queue"], node_id="CONCEPT:lazy queue") == "Lazy queue"
    assert least_name(["Zeta", "alpha"], node_id="CLASS:Other") == "alpha"
    assert least_name([], node_id=person) is None


async def digest_in_order(settings: Settings, work: Path, order: list[str]) -> dict[str, Any]:
    """Import and ingest :data:`VARIANTS`, then let extraction commit one session at a time in ``order``."""
    await import_sessions(write_sessions(work / "variants.jsonl", VARIANTS), chroma=ChromaStore(settings),
                          memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    assert (await run_cycle(settings, phases=tuple(p for p in PHASES if p[0] == "ingest"))).outcome == "completed"
    extract_only = tuple(p for p in PHASES if p[0] == "extract")
    for sid in order:
        conn = sqlite3.connect(settings.graph_path)
        with conn:  # every other undigested session waits (claims pick the oldest first)
            conn.execute("UPDATE session_digests SET state = 'undigestible' WHERE state = 'undigested' AND session_id != ?", (sid,))
        conn.close()
        result = await run_cycle(settings, phases=extract_only)
        assert result.outcome == "completed" and result.phases["extract"]["sessions_digested"] == 1, result.phases
        conn = sqlite3.connect(settings.graph_path)
        with conn:
            conn.execute("UPDATE session_digests SET state = 'undigested' WHERE state = 'undigestible'")
        conn.close()
    return canonical(settings.graph_path)


@pytest.mark.parametrize("order", [["vc", "vb", "va"], ["vb", "vc", "va"]])
async def test_the_graph_is_the_same_whatever_order_sessions_commit_in(tmp_path: Path, clean_env: pytest.MonkeyPatch, order: list[str]) -> None:
    oldest_first = await digest_in_order(load_settings(data_dir=tmp_path / "first"), tmp_path, ["va", "vb", "vc"])
    reordered = await digest_in_order(load_settings(data_dir=tmp_path / "other"), tmp_path, order)
    assert reordered == oldest_first
    nodes = {node_id: name for node_id, _, name, _ in oldest_first["nodes"]}
    # The least id of each linked pair survives, under the least spelling (README "Several workers").
    assert nodes["PERSON:Tomas Herrera"] == "Tomas Herrera" and "PERSON:Tomás Herrera" not in nodes
    assert nodes["METHOD:QuerySet.iterator"] == "QuerySet.iterator" and "METHOD:iterator" not in nodes
    assert "CLASS:DrainWorker" in nodes and "CLASS:DrainWorkers" not in nodes


@pytest.mark.slow
def test_three_workers_one_killed_repeatedly_digest_every_session_once(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    """Three ``--once`` workers with REM_SHARED_EXTRACT; a worker holding claims is SIGKILLed up
    to five times (while work is left). Every session is digested, by exactly one commit, no claim is left, and the graph equals
    the one a single in-process cycle builds from the same data."""
    sessions = 90
    with LLMServer(default=slow(0.05)) as server:
        template = tmp_path / "template"
        asyncio.run(ingested(template, corpus(sessions), tmp_path))
        single = tmp_path / "single"
        shutil.copytree(template, single)
        reference = asyncio.run(run_cycle(load_settings(data_dir=single, extractor="openai", llm_base_url=server.url, llm_max_retries=0)))
        assert reference.outcome == "completed" and reference.phases["extract"]["sessions_digested"] == sessions
        shared = tmp_path / "shared"
        shutil.copytree(template, shared)
        run = run_workers(shared, server.url, workers=3, logs=tmp_path / "logs", kills=5, kill_after=(0.2, 0.8),
                          lease_timeout_seconds=3, timeout=300)
    assert run.kills >= 1, run  # up to five: the work may all be done before the fifth (a loaded machine starts workers slowly)
    report = digest_report(shared)
    assert report["states"] == {"digested": sessions}, report  # nothing lost
    assert report["last_commit_seq"] == sessions == report["distinct_commit_seqs"], report  # nothing committed twice
    assert report["claims_left"] == 0, report
    assert sqlite3.connect(shared / "graph.sqlite3").execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert canonical(shared / "graph.sqlite3") == canonical(single / "graph.sqlite3")


def reference_graph(tmp_path: Path, sessions: list[dict[str, Any]], llm_url: str) -> dict[str, Any]:
    """The graph one in-process cycle builds from ``sessions`` (always on SQLite: the dump is the
    same on either engine)."""
    single = tmp_path / "single"
    asyncio.run(ingested(single, sessions, tmp_path))
    result = asyncio.run(run_cycle(load_settings(data_dir=single, database_url="", extractor="openai", llm_base_url=llm_url, llm_max_retries=0)))
    assert result.outcome == "completed" and result.phases["extract"]["sessions_digested"] == len(sessions), result.phases
    return canonical(single / "graph.sqlite3")


@pytest.mark.both_backends
def test_three_worker_processes_digest_disjoint_sessions_exactly_once(tmp_path: Path, settings: Settings, database_url: str | None) -> None:
    """Three ``--once`` workers on one graph database (SQLite: one writer at a time; PostgreSQL:
    claims ``FOR UPDATE … SKIP LOCKED``, commits concurrent): every session digested by exactly one
    commit of one run, more than one worker did some, and the graph is one worker's."""
    sessions = corpus(24)
    # The model holds its answers until a third request is asked: a worker with two in flight
    # cannot finish, so the others reach the single-flight lock while it is held and follow, however
    # late a loaded machine starts them (they led in turn once the first had finished all 24).
    answers = held()
    with LLMServer(default=answers) as server:
        asyncio.run(ingested(settings.data_dir, sessions, tmp_path, database_url=database_url))

        def answer_once_a_follower_asks() -> None:
            deadline = time.monotonic() + 120
            while server.chat_count < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            server.default = slow(0.05)
            answers.release.set()

        threading.Thread(target=answer_once_a_follower_asks, daemon=True).start()
        run = run_workers(settings.data_dir, server.url, workers=3, logs=tmp_path / "logs", timeout=120,
                          database_url=database_url, llm_concurrency=2)
        reference = reference_graph(tmp_path, sessions, server.url)
    report = digest_report(settings.data_dir, database_url)
    assert report["states"] == {"digested": 24} and report["claims_left"] == 0, report
    assert report["digested"] == report["distinct_commit_seqs"] == report["last_commit_seq"] == 24, report  # one commit each
    assert report["digested_by_runs"] == 24, report  # no run counted a session another run counted
    # Every worker's run completed (and the ingest-only run before them); one led, the others followed.
    assert report["run_outcomes"] == {"completed": run.launches + 1} and report["roles"]["follower"] >= 1, (report, run)
    assert canonical(settings) == reference


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_on_postgresql_a_worker_killed_mid_commit_loses_nothing_and_its_claims_wait_for_its_lease(
    tmp_path: Path, settings: Settings, database_url: str
) -> None:
    """Three workers on PostgreSQL; the first runs as if on another host (its death cannot be seen
    from here) and is SIGKILLed while its transaction has written graph rows — mid-commit. The
    server rolls that commit back; its claims stay until their lease runs out and are then taken
    over: every session digested once, the graph one worker's."""
    sessions = corpus(30)
    lease = 3.0
    with LLMServer(default=slow(0.05)) as server:
        asyncio.run(ingested(settings.data_dir, sessions, tmp_path, database_url=database_url))
        slow_commits_elsewhere(database_url)
        run = run_workers(settings.data_dir, server.url, workers=3, logs=tmp_path / "logs", timeout=120, database_url=database_url,
                          remote_first=True, mid_commit=True, kills=1, kill_after=(0.0, 0.0), lease_timeout_seconds=lease,
                          llm_concurrency=2)
        reference = reference_graph(tmp_path, sessions, server.url)
    assert run.kills == 1, run
    [held] = run.killed_claims
    assert held, run  # it died holding claims, mid-commit
    report = digest_report(settings.data_dir, database_url)
    assert report["states"] == {"digested": 30} and report["claims_left"] == 0, report  # nothing lost
    assert report["digested"] == report["distinct_commit_seqs"] == report["last_commit_seq"] == 30, report  # nothing twice
    db = open_database(settings)
    try:
        digested_at = dict(db.query("SELECT session_id, updated_at FROM session_digests"))
        remote_runs = db.query("SELECT COUNT(*) FROM rem_runs WHERE lease_owner LIKE ?", (f"{ELSEWHERE}%",))[0][0]
    finally:
        db.close()
    # Another host's claims are not known dead: each was taken over only once its lease had run out.
    assert all(digested_at[sid] >= expires for sid, expires in held.items()), (held, digested_at)
    assert remote_runs == 1  # the killed worker's run row, left running (its lease says it is gone)
    assert canonical(settings) == reference


def test_a_workers_identity_index_learns_what_the_others_committed(tmp_path: Path) -> None:
    """Worker B's resolver was built before worker A committed ``CLASS:GraphQueue``: at B's next
    call it has learned the node from A's commit (by commit number), so ``GraphQueues`` links to
    it; once A's node is gone, B's exact-id match on it makes B rebuild instead of linking to it."""
    from pipelines.extract.commit import Candidate
    from store.db import Database
    from store.facts import NodeFacts
    from store.graph import GraphStore, Node
    from store.provenance import ClaimRow, ProvenanceStore
    from store.runstate import RunStateStore, SessionRevision
    from worker.knowledge import identity_resolver

    path = tmp_path / "g.db"
    a, b = Database(path), Database(path)
    try:
        GraphStore(b).upsert_nodes([Node("CLASS:Unrelated", "CLASS", "Unrelated")])
        resolver = identity_resolver(b)
        assert resolver([Candidate("CLASS:Unrelated", "CLASS", "Unrelated")]) == {"CLASS:Unrelated": "CLASS:Unrelated"}  # index built
        runstate = RunStateStore(a)
        runstate.mark_ingested(SessionRevision("sa", "r1", "2026-11-01T00:00:00Z"), "run-a")
        with a.transaction():
            GraphStore(a).upsert_nodes([Node("CLASS:GraphQueue", "CLASS", "GraphQueue", {"aliases": ["GraphQueue"]})])
            ProvenanceStore(a).add_claims([ClaimRow("CLASS:GraphQueue", "session:sa", "CLASS:GraphQueue", NodeFacts.of(aliases=["GraphQueue"]), name="GraphQueue")])
            runstate.mark_digested("sa", "r1", "run-a")
        assert resolver([Candidate("CLASS:GraphQueues", "CLASS", "GraphQueues")]) == {"CLASS:GraphQueues": "CLASS:GraphQueue"}
        GraphStore(a).delete_node("CLASS:GraphQueue")
        assert resolver([Candidate("CLASS:GraphQueue", "CLASS", "GraphQueue")]) == {}  # gone: created anew, not linked
    finally:
        a.close()
        b.close()


def test_a_node_folded_by_another_workers_commit_leaves_a_kept_index(tmp_path: Path) -> None:
    """Worker A's commit folds ``FILE:store/alpha.py`` into ``FILE:alpha.py`` (the lesser id; the
    claims moved keep ``store/alpha.py`` an alias), as a judged link does, and starts no new
    identity epoch. Worker B's index, built before, learns the survivor from A's commit and drops
    the folded node: ``lib/alpha.py`` is then the survivor's candidate, as it is for an index
    built after the fold — not created apart with no candidate (foldidx)."""
    from pipelines.extract.commit import Candidate
    from store.db import Database
    from worker.knowledge import identity_resolver

    path = tmp_path / "g.db"
    a, b, c = Database(path), Database(path), Database(path)

    def committed(session: str, node: str, name: str, *, fold: str | None = None) -> None:
        commit_naming(a, session, node, name, fold=fold)

    def outcome(resolver: Any) -> tuple[str, str, list[str]]:
        [verdict] = resolver([Candidate("FILE:lib/alpha.py", "FILE", "lib/alpha.py")]).verdicts.values()
        return verdict.action, verdict.rule, [m.node_id for m in verdict.candidates]

    try:
        committed("s0", "FILE:store/alpha.py", "store/alpha.py")
        committed("s1", "FILE:bravo.py", "bravo.py")
        kept = identity_resolver(b)
        assert kept([Candidate("FILE:bravo.py", "FILE", "bravo.py")]) == {"FILE:bravo.py": "FILE:bravo.py"}  # index built
        committed("s2", "FILE:alpha.py", "alpha.py", fold="FILE:store/alpha.py")
        assert outcome(kept) == outcome(identity_resolver(c)) == ("candidate", "file-basename", ["FILE:alpha.py"])
        assert kept.builds == 1  # learned from the commit, not rebuilt
    finally:
        a.close()
        b.close()
        c.close()


def test_a_node_folded_by_another_worker_never_makes_an_ambiguity(tmp_path: Path) -> None:
    """Worker B's index knows ``CLASS:LazyQueues``; worker A folds it into ``CLASS:LazyQueue`` (a
    lesser id) and B learns the survivor, with the folded spelling among its aliases, from A's
    commit. Prose naming the class must link to the survivor — not be an ambiguity between the
    survivor and the stale node."""
    from pipelines.extract.commit import Candidate
    from store.db import Database
    from store.facts import NodeFacts
    from store.graph import GraphStore, Node
    from store.merges import MergeStore
    from store.provenance import ClaimRow, ProvenanceStore
    from store.runstate import RunStateStore, SessionRevision
    from worker.knowledge import identity_resolver

    path = tmp_path / "g.db"
    a, b = Database(path), Database(path)
    try:
        GraphStore(a).upsert_nodes([Node("CLASS:LazyQueues", "CLASS", "LazyQueues", {"aliases": ["LazyQueues"]}),
                                    Node("CLASS:Other", "CLASS", "Other")])
        resolver = identity_resolver(b)
        assert resolver([Candidate("CLASS:Other", "CLASS", "Other")]) == {"CLASS:Other": "CLASS:Other"}  # index built
        runstate = RunStateStore(a)
        runstate.mark_ingested(SessionRevision("sa", "r1", "2026-11-01T00:00:00Z"), "run-a")
        with a.transaction():  # what A's commit of a session naming LazyQueue does (commit_session's fold)
            GraphStore(a).upsert_nodes([Node("CLASS:LazyQueue", "CLASS", "LazyQueue", {"aliases": ["LazyQueue"]})])
            ProvenanceStore(a).add_claims([ClaimRow("CLASS:LazyQueue", "session:sa", "CLASS:LazyQueue", NodeFacts.of(aliases=["LazyQueue"]), name="LazyQueue")])
            MergeStore(a).merge_nodes("CLASS:LazyQueues", "CLASS:LazyQueue", name_as_alias=True)
            runstate.mark_digested("sa", "r1", "run-a")
        assert resolver([Candidate("CLASS:lazy queues", "CLASS", "lazy queues")]) == {"CLASS:lazy queues": "CLASS:LazyQueue"}
    finally:
        a.close()
        b.close()
