"""A node's id after a forget (forgetids, fourteenth session): a semantic node's id is made from
the name that first named it (the least of its group's ids), so a forget that took that name's
source out but left the node other sources (a case variant linked at commit, a hand merge) left
it under an id that still spelled the forgotten name — in ``nodes``, edges, points, claims, merge
records and communities. And a merge record of a node the forget did not touch kept a saved edge
to a node it removed. Real CLI functions on real SQLite and Chroma, and the same on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from store.backend import open_database
from store.chroma import ChromaStore
from pipelines.importer import import_sessions
from tests.conftest import write_sessions
from tests.test_forget_rest import rows_holding
from worker.cycle import run_cycle
from worker.knowledge import forget, merge_node, unmerge_node


def _session(sid: str, turns: list[tuple[str, str]], summary: str) -> dict[str, object]:
    return {"sessionId": sid, "title": f"Session {sid}", "createdAt": "2026-11-01T10:00:00Z", "userId": "user-1",
            "summary": summary, "turns": [{"role": role, "text": text} for role, text in turns]}


async def _built(settings: Settings, tmp_path: Path, sessions: list[dict[str, object]]) -> None:
    await import_sessions(write_sessions(tmp_path / "in.jsonl", sessions), chroma=ChromaStore(settings),
                          memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    result = await run_cycle(settings)
    assert result.outcome == "completed", result.message


def _counts(settings: Settings) -> tuple[int, int]:
    db = open_database(settings)
    try:
        return db.query("SELECT COUNT(*) FROM nodes")[0][0], db.query("SELECT COUNT(*) FROM edges")[0][0]
    finally:
        db.close()


def _node_ids(settings: Settings, label: str) -> list[str]:
    db = open_database(settings)
    try:
        return [r[0] for r in db.query("SELECT id FROM nodes WHERE label = ? ORDER BY id", (label,))]
    finally:
        db.close()


@pytest.mark.both_backends
@pytest.mark.parametrize("what", [{"session": "s-upper"}, {"memory": "s-upper-t0000"}], ids=["session", "turn"])
async def test_a_speaker_first_named_by_a_forgotten_session_takes_the_spelling_the_others_give(
    settings: Settings, tmp_path: Path, what: dict[str, str],
) -> None:
    # "ZQ ROWAN" and "Zq Rowan" are one person; the group keeps the least id, the upper-case one.
    await _built(settings, tmp_path, [
        _session("s-upper", [("ZQ ROWAN", "GraphStore reads ConfigLoader at start."), ("assistant", "Noted.")], "GraphStore."),
        _session("s-title", [("Zq Rowan", "RetryPolicy wraps GraphStore."), ("assistant", "Right.")], "RetryPolicy."),
    ])
    assert _node_ids(settings, "PERSON") == ["PERSON:ZQ ROWAN"]
    before = _counts(settings)

    report = forget(settings, **what)
    # What it says it removed is what left the graph: a re-keyed node's edges are not counted.
    after = _counts(settings)
    assert (report["nodes_removed"], report["edges_removed"]) == (before[0] - after[0], before[1] - after[1])
    assert _node_ids(settings, "PERSON") == ["PERSON:Zq Rowan"]
    assert rows_holding(settings, "ZQ ROWAN", case=True) == []
    assert report["nodes_rekeyed"] == {"PERSON:ZQ ROWAN": "PERSON:Zq Rowan"}
    # The node is what s-title made of it: its turn, its session, no merge left to undo.
    db = open_database(settings)
    try:
        edges = sorted(tuple(r) for r in db.query("SELECT target, relationship FROM edges WHERE source = ?", ("PERSON:Zq Rowan",)))
        assert edges == [("memory:s-title-t0000", "MENTIONED_IN"), ("session:s-title", "DISCUSSED_IN")]
        assert db.query("SELECT COUNT(*) FROM merges")[0][0] == 0
        assert db.query("SELECT COUNT(*) FROM node_points WHERE merge_id IS NOT NULL")[0][0] == 0
    finally:
        db.close()
    # A later cycle of the same sessions changes nothing.
    assert (await run_cycle(settings)).outcome == "completed"
    assert _node_ids(settings, "PERSON") == ["PERSON:Zq Rowan"]


@pytest.mark.both_backends
async def test_a_node_a_hand_merge_folded_into_one_only_the_forgotten_session_named_takes_its_own_id_back(
    settings: Settings, tmp_path: Path,
) -> None:
    await _built(settings, tmp_path, [
        _session("s-gone", [("user", "ZqGoneGadget wraps GraphStore. ZqGoneGadget depends on ConfigLoader.")], "GraphStore."),
        _session("s-keep", [("user", "RetryPolicy wraps GraphStore. ZqKeptTool calls RetryPolicy.")], "RetryPolicy."),
    ])
    merge_node(settings, "CLASS:RetryPolicy", "CLASS:ZqGoneGadget")  # one edge to GraphStore, both sessions' points
    merge_node(settings, "CLASS:ZqKeptTool", "CLASS:ZqGoneGadget")  # a second merge into it, which stays
    before = _counts(settings)

    report = forget(settings, session="s-gone")
    after = _counts(settings)
    assert (report["nodes_removed"], report["edges_removed"]) == (before[0] - after[0], before[1] - after[1])
    assert rows_holding(settings, "ZqGoneGadget") == []
    assert report["nodes_rekeyed"] == {"CLASS:ZqGoneGadget": "CLASS:RetryPolicy"}
    db = open_database(settings)
    try:  # the edge s-keep said stays, under the new key, with its point
        assert db.query("SELECT COUNT(*) FROM edge_points WHERE source = 'CLASS:GraphStore' AND target = 'CLASS:RetryPolicy'")[0][0] == 2
    finally:
        db.close()
    # The merge of RetryPolicy dissolved (the node is RetryPolicy); ZqKeptTool's is still undone exactly.
    undone = unmerge_node(settings, "CLASS:ZqKeptTool")
    assert [u["into"] for u in undone] == ["CLASS:RetryPolicy"]
    assert "CLASS:ZqKeptTool" in _node_ids(settings, "CLASS") and "CLASS:RetryPolicy" in _node_ids(settings, "CLASS")


@pytest.mark.both_backends
async def test_a_node_whose_new_id_another_node_has_takes_it_with_a_suffix(settings: Settings, tmp_path: Path) -> None:
    await _built(settings, tmp_path, [
        _session("s-gone", [("user", "ZqGoneGadget depends on GraphStore and ConfigLoader.")], "GraphStore."),
        _session("s-keep", [("user", "RetryPolicy wraps GraphStore.")], "RetryPolicy."),
    ])
    merge_node(settings, "CLASS:RetryPolicy", "CLASS:ZqGoneGadget")
    db = open_database(settings)
    try:  # a node of the same id, written since by another tool: not joined behind anyone's back
        with db.transaction() as conn:
            conn.execute("INSERT INTO nodes(id, label, name, properties, created_at, updated_at) "
                         "VALUES ('CLASS:RetryPolicy', 'CLASS', 'RetryPolicy', '{}', '2026-11-02T10:00:00Z', '2026-11-02T10:00:00Z')")
    finally:
        db.close()

    report = forget(settings, session="s-gone")
    assert rows_holding(settings, "ZqGoneGadget") == []
    assert report["nodes_rekeyed"] == {"CLASS:ZqGoneGadget": "CLASS:RetryPolicy~2"}
    assert {"CLASS:RetryPolicy", "CLASS:RetryPolicy~2"} <= set(_node_ids(settings, "CLASS"))


@pytest.mark.both_backends
async def test_a_node_whose_id_its_other_sources_still_give_keeps_it(settings: Settings, tmp_path: Path) -> None:
    await _built(settings, tmp_path, [
        _session("s-gone", [("user", "ZqGoneGadget depends on GraphStore and ConfigLoader.")], "GraphStore."),
        _session("s-keep", [("user", "RetryPolicy wraps GraphStore and ConfigLoader.")], "RetryPolicy."),
    ])
    report = forget(settings, session="s-gone")
    assert report["nodes_rekeyed"] == {}
    assert {"CLASS:GraphStore", "CLASS:ConfigLoader"} <= set(_node_ids(settings, "CLASS"))


@pytest.mark.both_backends
async def test_a_merge_record_of_a_node_the_forget_did_not_touch_loses_its_saved_edge_to_a_node_it_removed(
    settings: Settings, tmp_path: Path,
) -> None:
    await _built(settings, tmp_path, [
        _session("s-gone", [("user", "ZqGoneGadget depends on ConfigLoader.")], "ConfigLoader."),
        _session("s-keep", [("user", "RetryPolicy wraps GraphStore. ZqKeptTool calls GraphStore and ConfigLoader.")], "RetryPolicy."),
    ])
    db = open_database(settings)
    try:  # an edge another tool wrote (no points), from a node s-gone never names to one only it names
        with db.transaction() as conn:
            conn.execute("INSERT INTO edges(source, target, relationship, weight, properties, created_at, updated_at) "
                         "VALUES ('CLASS:ZqKeptTool', 'CLASS:ZqGoneGadget', 'USES', 1.0, '{}', '2026-11-01T10:00:00Z', '2026-11-01T10:00:00Z')")
    finally:
        db.close()
    merge_node(settings, "CLASS:ZqKeptTool", "CLASS:RetryPolicy")  # saves the edge; RetryPolicy gets it
    merge_node(settings, "CLASS:RetryPolicy", "CLASS:GraphStore")  # and on to GraphStore: a chain
    assert len(rows_holding(settings, "ZqGoneGadget")) > 3

    report = forget(settings, session="s-gone")
    assert rows_holding(settings, "ZqGoneGadget") == []
    assert report["knowledge_nodes_removed"] == ["CLASS:ZqGoneGadget"] and report["merges_rewritten"] == 2
    unmerge_node(settings, "CLASS:RetryPolicy")
    unmerge_node(settings, "CLASS:ZqKeptTool")
    db = open_database(settings)
    try:
        assert [tuple(r) for r in db.query("SELECT target FROM edges WHERE source = 'CLASS:ZqKeptTool' AND relationship = 'USES'")] == []
    finally:
        db.close()


@pytest.mark.both_backends
async def test_a_node_given_a_suffix_keeps_it_when_a_later_forget_touches_it(settings: Settings, tmp_path: Path) -> None:
    # Its rows are extracted for CLASS:RetryPolicy, never for its suffixed id: every later forget
    # of a turn it was pointed from found it "unsupported" and moved it on (~3 → ~4 …).
    await _built(settings, tmp_path, [
        _session("s-gone", [("user", "ZqGoneGadget depends on GraphStore and ConfigLoader.")], "GraphStore."),
        _session("s-keep", [("user", "RetryPolicy wraps GraphStore."), ("user", "RetryPolicy retries ConfigLoader."),
                            ("user", "RetryPolicy logs to StderrSink.")], "RetryPolicy."),
    ])
    merge_node(settings, "CLASS:RetryPolicy", "CLASS:ZqGoneGadget")
    db = open_database(settings)
    try:  # the id and its first suffix both taken since, by another tool
        with db.transaction() as conn:
            for node_id in ("CLASS:RetryPolicy", "CLASS:RetryPolicy~2"):
                conn.execute("INSERT INTO nodes(id, label, name, properties, created_at, updated_at) "
                             "VALUES (?, 'CLASS', 'RetryPolicy', '{}', '2026-11-02T10:00:00Z', '2026-11-02T10:00:00Z')", (node_id,))
    finally:
        db.close()
    assert forget(settings, session="s-gone")["nodes_rekeyed"] == {"CLASS:ZqGoneGadget": "CLASS:RetryPolicy~3"}

    report = forget(settings, memory="s-keep-t0002")
    assert report["nodes_rekeyed"] == {}
    assert {"CLASS:RetryPolicy", "CLASS:RetryPolicy~2", "CLASS:RetryPolicy~3"} <= set(_node_ids(settings, "CLASS"))
    assert "CLASS:StderrSink" not in _node_ids(settings, "CLASS")

    # A suffix below it freed since (audit15): the node keeps ~3 all the same (it moved to ~2).
    db = open_database(settings)
    try:
        with db.transaction() as conn:
            conn.execute("DELETE FROM nodes WHERE id = 'CLASS:RetryPolicy~2'")
    finally:
        db.close()
    assert forget(settings, memory="s-keep-t0001")["nodes_rekeyed"] == {}
    assert "CLASS:RetryPolicy~3" in _node_ids(settings, "CLASS")


@pytest.mark.both_backends
async def test_a_node_at_the_end_of_a_merge_chain_takes_the_id_of_the_link_into_it(settings: Settings, tmp_path: Path) -> None:
    # AaKeptTool → RetryPolicy → ZqGoneGadget. The node holds AaKeptTool's rows too, and that is
    # the least id they give; but AaKeptTool is recorded as merged into RetryPolicy. Taking it made
    # the node the merged node of its own chain: records AaKeptTool → RetryPolicy and RetryPolicy →
    # AaKeptTool, and `unmerge AaKeptTool` told the operator to unmerge RetryPolicy first.
    await _built(settings, tmp_path, [
        _session("s-gone", [("user", "ZqGoneGadget wraps GraphStore. ZqGoneGadget depends on ConfigLoader.")], "GraphStore."),
        _session("s-keep", [("user", "RetryPolicy wraps GraphStore. AaKeptTool calls ConfigLoader.")], "RetryPolicy."),
    ])
    merge_node(settings, "CLASS:AaKeptTool", "CLASS:RetryPolicy")
    merge_node(settings, "CLASS:RetryPolicy", "CLASS:ZqGoneGadget")

    report = forget(settings, session="s-gone")
    assert report["nodes_rekeyed"] == {"CLASS:ZqGoneGadget": "CLASS:RetryPolicy"}
    assert rows_holding(settings, "ZqGoneGadget") == []
    db = open_database(settings)
    try:
        assert [tuple(r) for r in db.query("SELECT merged_id, into_id FROM merges WHERE undone_at IS NULL")] == [
            ("CLASS:AaKeptTool", "CLASS:RetryPolicy")]
    finally:
        db.close()
    assert [u["into"] for u in unmerge_node(settings, "CLASS:AaKeptTool")] == ["CLASS:RetryPolicy"]
    assert {"CLASS:AaKeptTool", "CLASS:RetryPolicy"} <= set(_node_ids(settings, "CLASS"))
    db = open_database(settings)
    try:  # each node holds its own rows again
        held = {tuple(r) for r in db.query("SELECT node_id, extracted_for FROM node_claims WHERE anchor = 'session:s-keep'")}
        assert ("CLASS:AaKeptTool", "CLASS:AaKeptTool") in held and ("CLASS:RetryPolicy", "CLASS:RetryPolicy") in held
    finally:
        db.close()


@pytest.mark.both_backends
async def test_the_verdicts_of_a_session_in_flight_that_answer_with_a_removed_or_rekeyed_node_go(
    settings: Settings, tmp_path: Path,
) -> None:
    # s-later's extraction asked the auditor and was killed before its commit: its verdicts wait
    # (store/verdicts.py). Two answer with nodes the forget of s-upper takes out of the graph — one
    # re-keyed, one removed — and spell what only s-upper said; the others stay.
    from store.verdicts import VerdictStore

    await _built(settings, tmp_path, [
        _session("s-upper", [("ZQ ROWAN", "GraphStore reads ZqOnlyLoader at start."), ("assistant", "Noted.")], "GraphStore."),
        _session("s-title", [("Zq Rowan", "RetryPolicy wraps GraphStore."), ("assistant", "Right.")], "RetryPolicy."),
    ])
    assert {"PERSON:ZQ ROWAN", "CLASS:ZqOnlyLoader", "CLASS:RetryPolicy"} <= set(_node_ids(settings, "PERSON") + _node_ids(settings, "CLASS"))
    db = open_database(settings)
    try:
        verdicts = VerdictStore(db)
        for question, target in (("q-person", "PERSON:ZQ ROWAN"), ("q-loader", "CLASS:ZqOnlyLoader"),
                                 ("q-retry", "CLASS:RetryPolicy"), ("q-new", None)):
            verdicts.keep(question, target, session="s-later")
    finally:
        db.close()

    report = forget(settings, session="s-upper")
    assert report["nodes_rekeyed"] == {"PERSON:ZQ ROWAN": "PERSON:Zq Rowan"} and "CLASS:ZqOnlyLoader" in report["knowledge_nodes_removed"]
    assert rows_holding(settings, "ZQ ROWAN", case=True) == [] and rows_holding(settings, "ZqOnlyLoader") == []
    assert report["identity_verdicts_withdrawn"] == 2
    db = open_database(settings)
    try:
        assert VerdictStore(db).given(["q-person", "q-loader", "q-retry", "q-new"]) == {"q-retry": "CLASS:RetryPolicy", "q-new": None}
    finally:
        db.close()


@pytest.mark.both_backends
@pytest.mark.parametrize("written_by", ["another-tool", "s-gone"])
async def test_a_saved_edge_to_a_node_that_left_the_graph_before_the_forget_goes_with_it(
    settings: Settings, tmp_path: Path, written_by: str,
) -> None:
    # s-gone named ZqGoneGadget, a merge saved an edge to it (one s-gone said, or one another tool
    # wrote), then s-gone was extracted again without it: the node left the graph, the record kept
    # the edge, and no index led the later forget of s-gone from its rows to that record.
    said = "ZqGoneGadget depends on ZqKeptTool." if written_by == "s-gone" else "ZqGoneGadget depends on ConfigLoader."
    await _built(settings, tmp_path, [
        _session("s-gone", [("user", said)], "ConfigLoader."),
        _session("s-keep", [("user", "RetryPolicy wraps GraphStore. ZqKeptTool calls GraphStore.")], "RetryPolicy."),
    ])
    db = open_database(settings)
    try:
        if written_by == "another-tool":  # no points, from a node s-gone never names to one only it names
            with db.transaction() as conn:
                conn.execute("INSERT INTO edges(source, target, relationship, weight, properties, created_at, updated_at) "
                             "VALUES ('CLASS:ZqKeptTool', 'CLASS:ZqGoneGadget', 'USES', 1.0, '{}', '2026-11-01T10:00:00Z', '2026-11-01T10:00:00Z')")
        assert db.query("SELECT COUNT(*) FROM edges WHERE 'CLASS:ZqKeptTool' IN (source, target) "
                        "AND 'CLASS:ZqGoneGadget' IN (source, target)")[0][0] == 1
    finally:
        db.close()
    merge_node(settings, "CLASS:ZqKeptTool", "CLASS:RetryPolicy")  # saves the edge
    await _built(settings, tmp_path, [_session("s-gone", [("user", "ConfigLoader reads GraphStore at start.")], "ConfigLoader.")])
    assert "CLASS:ZqGoneGadget" not in _node_ids(settings, "CLASS")

    forget(settings, session="s-gone")
    assert rows_holding(settings, "ZqGoneGadget") == []
    undone = unmerge_node(settings, "CLASS:ZqKeptTool")  # the record still works
    assert [u["into"] for u in undone] == ["CLASS:RetryPolicy"]
