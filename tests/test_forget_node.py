"""``rem-cycle forget --node``: one knowledge node out of the graph, and kept out — of a
re-extraction of its sessions, of a paid answer reused for another session, of a merge's alias —
until ``--undo``, which brings it back from the stored chunk results without a model call. Real
Chroma (embedded), real cycles, real SQLite (and PostgreSQL where marked), a real OpenAI-compatible
server on loopback whose requests are counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from store.graph import GraphStore, Node
from store.runstate import RunStateStore
from tests.conftest import run_cli, write_sessions
from tests.llm_server import LLMServer
from tests.test_audit_llm_chunks import llm_settings
from tests.test_change_scan import _query
from tests.test_forget import SESSIONS, _build, _env, canonical
from worker.cycle import run_cycle

NODE = "CLASS:DrainWorker"


def _traces(settings: Settings, node_id: str) -> dict[str, int]:
    """Every row that names ``node_id``: the node, edges touching it, its points, claims, aliases,
    search-index document and review pairs."""
    one = (node_id,)
    return {
        "nodes": _query(settings, "SELECT COUNT(*) FROM nodes WHERE id = ?", one)[0][0],
        "edges": _query(settings, "SELECT COUNT(*) FROM edges WHERE source = ? OR target = ?", one * 2)[0][0],
        "node_points": _query(settings, "SELECT COUNT(*) FROM node_points WHERE node_id = ?", one)[0][0],
        "edge_points": _query(settings, "SELECT COUNT(*) FROM edge_points WHERE source = ? OR target = ?", one * 2)[0][0],
        "claims": _query(settings, "SELECT COUNT(*) FROM node_claims WHERE node_id = ?", one)[0][0],
        "aliases": _query(settings, "SELECT COUNT(*) FROM node_aliases WHERE node_id = ?", one)[0][0],
        "node_docs": _query(settings, "SELECT COUNT(*) FROM recall_node_docs WHERE node_id = ?", one)[0][0],
        "candidates": _query(settings, "SELECT COUNT(*) FROM identity_candidates WHERE node_id = ? OR candidate_id = ?", one * 2)[0][0],
    }


async def _import(settings: Settings, tmp_path: Path, sessions: list[dict[str, Any]]) -> None:
    await import_sessions(
        write_sessions(tmp_path / f"in-{sessions[0]['sessionId']}.jsonl", sessions),
        chroma=ChromaStore(settings), memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )


async def _extract_again(settings: Settings, *session_ids: str) -> dict[str, Any]:
    """Mark ``session_ids`` for re-extraction (their input unchanged) and run a cycle: its extract phase."""
    db = open_database(settings)
    try:
        RunStateStore(db).require_extraction(session_ids)
    finally:
        db.close()
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message
    return result.phases["extract"]


@pytest.mark.both_backends
async def test_a_forgotten_node_stays_out_of_re_extraction_and_of_a_reused_answer(
    settings: Settings, tmp_path: Path, database_url: str | None,
) -> None:
    """The dry run reports what the real run removes and changes nothing; the real run leaves no
    row naming the node; re-extracting its session from the stored chunk results (no model call)
    and a new session with the same words (the paid answer reused) leave it out, counted
    ``suppressed``."""
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm, **({"database_url": database_url} if database_url else {}))
        await _import(config, tmp_path, [SESSIONS["a"], SESSIONS["b"]])
        assert (await run_cycle(config)).outcome == "completed"
        assert _traces(config, NODE)["nodes"] == 1 and _traces(config, NODE)["edges"] > 0
        env, full = _env(config), canonical(config)

        dry = run_cli("forget", "--node", "drainworker", "--dry-run", "--json", env=env)  # a name, case folded
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        assert planned["id"] == NODE and planned["dry_run"] and planned["nodes_removed"] == 1 and planned["edges_removed"] > 0
        assert canonical(config) == full
        assert _query(config, "SELECT COUNT(*) FROM suppressed_nodes")[0][0] == 0

        done = run_cli("forget", "--node", "drainworker", "--json", env=env)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        same = ("nodes_removed", "edges_removed", "knowledge_nodes_removed", "sessions", "suppressed_keys", "communities_rewritten",
                "merges_dropped", "queue_lines_withdrawn")
        assert {k: report[k] for k in same} == {k: planned[k] for k in same}
        assert report["sessions"] == ["b"] and "drainworker" in report["suppressed_keys"]
        assert set(_traces(config, NODE).values()) == {0}
        calls = llm.chat_count

        again = await _extract_again(config, "b")
        assert again["sessions_digested"] == 1 and again["suppressed"] >= 1, again
        assert llm.chat_count == calls  # re-committed from the stored chunk results
        assert set(_traces(config, NODE).values()) == {0}
        assert _traces(config, "CLASS:GraphStore")["nodes"] == 1  # what b says of the rest stands

        # The same words in another session: the answer paid for b's chunk is reused, and kept out.
        await _import(config, tmp_path, [{**SESSIONS["b"], "sessionId": "b2", "turns": [
            {**turn, "id": turn["id"].replace("b-", "b2-")} for turn in SESSIONS["b"]["turns"]]}])
        reused = await run_cycle(config)
        extract = reused.phases["extract"]
        assert extract["chunks_reused"] >= 1 and extract["suppressed"] >= 1, extract
        assert llm.chat_count == calls
        assert set(_traces(config, NODE).values()) == {0}


async def test_undo_brings_the_node_back_from_the_stored_results_without_a_model_call(settings: Settings, tmp_path: Path) -> None:
    """``--undo`` lifts the suppression and marks the node's sessions for re-extraction: the next
    cycle commits them again from their stored chunk results (no request to the model) and the
    node is back with its edges."""
    with LLMServer() as llm:
        config = llm_settings(settings.data_dir, llm)
        await _import(config, tmp_path, [SESSIONS["b"]])
        assert (await run_cycle(config)).outcome == "completed"
        before = _traces(config, NODE)
        env = _env(config)
        assert run_cli("forget", "--node", NODE, env=env).returncode == 0
        assert _traces(config, NODE)["nodes"] == 0
        calls = llm.chat_count

        undo = run_cli("forget", "--node", "DrainWorker", "--undo", "--json", env=env)
        assert undo.returncode == 0, undo.stderr
        assert json.loads(undo.stdout)["sessions_to_extract"] == ["b"]
        result = await run_cycle(config)
        assert result.outcome == "completed" and result.phases["extract"]["sessions_digested"] == 1
        assert llm.chat_count == calls
        assert _traces(config, NODE) == before
        assert run_cli("forget", "--node", NODE, "--undo", env=env).returncode == 1  # nothing is kept out now


async def test_an_ambiguous_name_an_anchor_or_an_unknown_node_changes_nothing(settings: Settings, tmp_path: Path) -> None:
    """Two nodes named alike: exit 2 naming both ids; a session, turn or notes file: exit 2 naming
    the option to use; an unknown name or a bad id: exit 1 — and the graph is as it was."""
    await _build(settings, tmp_path, ["a", "b"])
    db = open_database(settings)
    try:
        GraphStore(db).upsert_nodes([Node("CONCEPT:graph store", "CONCEPT", "GraphStore", {})])
    finally:
        db.close()
    env, full = _env(settings), canonical(settings)

    both = run_cli("forget", "--node", "graphstore", env=env)
    assert both.returncode == 2 and "CLASS:GraphStore" in both.stderr and "CONCEPT:graph store" in both.stderr, both.stderr
    anchor = run_cli("forget", "--node", "session:b", env=env)
    assert anchor.returncode == 2 and "--session" in anchor.stderr, anchor.stderr
    turn = run_cli("forget", "--node", "memory:b-t0", env=env)
    assert turn.returncode == 2 and "--memory" in turn.stderr, turn.stderr
    unknown = run_cli("forget", "--node", "NoSuchThing", env=env)
    assert unknown.returncode == 1 and "no knowledge node" in unknown.stderr, unknown.stderr
    bad = run_cli("forget", "--node", "CLASS:x\x07y", env=env)
    assert bad.returncode == 1 and "invalid node id" in bad.stderr, bad.stderr
    assert canonical(settings) == full
    assert _query(settings, "SELECT COUNT(*) FROM suppressed_nodes")[0][0] == 0


async def test_no_merge_or_alias_brings_a_forgotten_node_back(settings: Settings, tmp_path: Path) -> None:
    """A node merged by hand into the forgotten one is forgotten with it (its name is an alias of
    the forgotten node): re-extracting the session that says it leaves it out, and ``unmerge`` has
    no record left to bring either back."""
    await _build(settings, tmp_path, ["b", "c"])
    env = _env(settings)
    merged = run_cli("merge", "CLASS:RetryPolicy", NODE, env=env)
    assert merged.returncode == 0, merged.stderr
    done = run_cli("forget", "--node", NODE, "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert {"drainworker", "retrypolicy"} <= set(json.loads(done.stdout)["suppressed_keys"])

    again = await _extract_again(settings, "b", "c")
    assert again["sessions_digested"] == 2 and again["suppressed"] >= 2, again
    for node_id in (NODE, "CLASS:RetryPolicy"):
        assert set(_traces(settings, node_id).values()) == {0}, node_id
    assert _query(settings, "SELECT COUNT(*) FROM node_aliases WHERE alias_key IN ('drainworker', 'retrypolicy')")[0][0] == 0
    assert run_cli("unmerge", "CLASS:RetryPolicy", env=env).returncode == 1
    assert _traces(settings, "CLASS:LazyEdgeQueue")["nodes"] == 1


async def test_restore_forgets_again_a_node_forgotten_after_the_backup(settings: Settings, tmp_path: Path) -> None:
    """A backup made before ``forget --node`` and restored after it: the node is taken out again
    and kept out (the suppression carried over), as a tombstone is."""
    await _build(settings, tmp_path, ["b"])
    env = _env(settings)
    backup = tmp_path / "before.sqlite3"
    assert run_cli("backup", str(backup), env=env).returncode == 0
    assert run_cli("forget", "--node", NODE, env=env).returncode == 0
    restored = run_cli("restore", str(backup), "--json", env=env)
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["forgotten_again"]["nodes"] == 1
    assert set(_traces(settings, NODE).values()) == {0}
    again = await _extract_again(settings, "b")
    assert again["suppressed"] >= 1 and _traces(settings, NODE)["nodes"] == 0



async def test_the_queue_lines_extracted_from_the_node_are_withdrawn(settings: Settings, tmp_path: Path) -> None:
    """The lines rem-cycle's extraction queued from the forgotten node (a provenance edge to a turn
    not in the graph yet, its chunk ids one anchor's) are blanked in the queue file, the dry run
    counting them first; an agent's line from the node (no chunk ids) and the other nodes' lines stay."""
    from store.lazy_queue import LazyEdgeQueue

    await _build(settings, tmp_path, ["b"])
    queue = LazyEdgeQueue(settings.queue_path)
    extracted = {"relationship": "MENTIONED_IN", "target": "memory:later-t0", "weight": 1.0, "properties": {"chunk_ids": ["b:chunk:0"]}}
    queue.append([{**extracted, "source": NODE}, {**extracted, "source": "CLASS:GraphStore"},
                  {"source": NODE, "target": "memory:later-t0", "relationship": "MENTIONED_IN", "weight": 1.0}])
    env = _env(settings)
    dry = run_cli("forget", "--node", NODE, "--dry-run", "--json", env=env)
    assert dry.returncode == 0 and json.loads(dry.stdout)["queue_lines_withdrawn"] == 1, dry.stderr
    done = run_cli("forget", "--node", NODE, "--json", env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["queue_lines_withdrawn"] == 1, done.stderr
    kept = [json.loads(line) for line in settings.queue_path.read_bytes().splitlines() if line.strip()]
    assert sorted((r["source"], "properties" in r) for r in kept) == [(NODE, False), ("CLASS:GraphStore", True)]


@pytest.mark.both_backends
def test_a_key_two_forgotten_nodes_share_stays_suppressed_until_both_are_let_back(settings: Settings) -> None:
    """Two forgotten nodes of one type share a key (``GraphStore`` and ``graphstore``, two code
    identifiers, both fold to ``graphstore``). Letting one back must not let the other back under
    that key. Before, the second suppression's copy of the key was dropped (``ON CONFLICT DO
    NOTHING`` on the key and type alone), so lifting the first left ``graphstore`` free while its
    node was still forgotten."""
    from store.suppressions import SuppressionStore

    db = open_database(settings)
    try:
        store = SuppressionStore(db)
        store.suppress("CLASS:GraphStore", label="CLASS", name="GraphStore", keys={"graphstore", "graph store"}, anchors={"session:a"})
        store.suppress("CLASS:graphstore", label="CLASS", name="graphstore", keys={"graphstore"}, anchors={"session:b"})
        wanted = {("CLASS", "graphstore"), ("CLASS", "graph store")}
        assert store.suppressed(wanted) == wanted
        assert [s.node_id for s in store.holding(key="graphstore")] == ["CLASS:GraphStore", "CLASS:graphstore"]
        store.lift("CLASS:GraphStore")
        assert store.suppressed(wanted) == {("CLASS", "graphstore")}  # still the other forgotten node's
        store.lift("CLASS:graphstore")
        assert store.suppressed(wanted) == set()
    finally:
        db.close()
