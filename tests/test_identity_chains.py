"""Chains of spellings group the same whatever order their names commit in (README "Several
workers"): a name that links several nodes by a spelling rule joins them, the group keeps its least
id, and every spelling linked into a node stays one of its forms for identity resolution — also
once the index is rebuilt from the graph (the next cycle, another worker). Short names (the
qualified and acronym rules) join longer names only while those name one thing, and are split back
out when a different one arrives: the same in every order too."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.extract.commit import commit_session
from pipelines.extract.model import UnitTurn, WorkUnit, validate_extraction
from pipelines.extract.reduce import reduce_session
from pipelines.identity import CANDIDATE, LINK, AliasIndex, NodeRef, resolve
from pipelines.resolver import GraphResolver
from store.backend import open_database
from store.db import Database
from store.graph import Node
from store.runstate import RunStateStore
from store.unit_of_work import DatabaseUnitOfWork
from tests.test_forget import canonical
from worker.knowledge import identity_resolver

# Name, aliases. LazyEdgeQueue ≈ "lazy edge queue" ≈ lazy_edge_queue by words, but two identifiers
# are compared as written: LazyEdgeQueue ≉ lazy_edge_queue.
SPELLINGS = [("CLASS", "LazyEdgeQueue", ()), ("CLASS", "lazy edge queue", ()), ("CLASS", "lazy_edge_queue", ())]
# Aliases chain: Robert ~ "Bob" ~ "Bobby T." — each shares an alias with the next only.
ALIASES = [("PERSON", "Robert Tables", ("Bob",)), ("PERSON", "Bob", ("Bobby T.",)), ("PERSON", "Bobby T.", ())]
OTHERS = [("CLASS", "DrainWorker", ()), ("CLASS", "DrainWorkers", ()), ("PERSON", "Ada Lovelace", ()), ("CLASS", "LazyEdgeTable", ())]


def _ref(node_type: str, name: str, aliases: Sequence[str] = ()) -> NodeRef:
    return NodeRef(f"{node_type}:{name}", node_type, name, tuple(aliases))


@pytest.mark.parametrize("chain", [SPELLINGS, ALIASES], ids=["spellings", "aliases"])
def test_the_chains_are_chains(chain: list[tuple[str, str, tuple[str, ...]]]) -> None:
    """The premise: A ≈ B and B ≈ C by the pairwise rules, A ≉ C, and B beside A and C is ambiguous."""
    a, b, c = (_ref(*name) for name in chain)

    def verdict(node: NodeRef, *existing: NodeRef) -> Any:
        return resolve(node, AliasIndex.build(existing))

    assert verdict(b, a).action == LINK and verdict(c, b).action == LINK
    assert verdict(c, a).action != LINK and verdict(a, c).action != LINK
    both = verdict(b, a, c)
    assert both.action == CANDIDATE and both.rule.startswith("ambiguous-") and {m.node_id for m in both.candidates} == {a.id, c.id}


def commit_names(
    db: Database, names: Sequence[tuple[str, str, tuple[str, ...]]], *, index_per_session: bool, resolver: GraphResolver | None = None,
    again: str = "",
    as_worker: bool = False,
) -> None:
    """Commit each name as a one-node session of its own, through the worker's identity resolver
    and the extraction commit. ``index_per_session``: each session resolves against an index
    built from the graph (as each cycle, or another worker, does); else one index learns them all
    (``resolver``'s, when given: a worker's). ``again``: a suffix of the session ids (the names said
    again in other sessions). ``as_worker``: each commit begins and ends as the extract phase's do
    (``begin_commit``, ``mark_digested``), which is what keeps the graph's identity epoch."""
    unit = DatabaseUnitOfWork(db)
    runstate = RunStateStore(db)
    resolver = resolver or identity_resolver(db)
    for node_type, name, aliases in names:
        sid = f"s-{name}{again}".replace(" ", "-").replace(".", "").replace("()", "-call")
        work = WorkUnit(f"{sid}:chunk:0", sid, 0, (UnitTurn(1, f"{sid}-m1", name),), "h")
        raw = {"summary": "", "nodes": [{"id": "n", "type": node_type, "name": name, "aliases": list(aliases),
                                         "evidence": [{"turn": 1, "quote": name}]}], "edges": []}
        reduced = reduce_session(sid, [validate_extraction(raw, work, semantic_types=(node_type,))])
        unit.graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), Node(f"memory:{sid}-m1", "MEMORY", "m")])
        if index_per_session:
            resolver = identity_resolver(db)
        stats = commit_session(reduced, unit=unit, graph_index=None, queue_append=len, matcher=resolver, merges=unit.merges,
                               on_begin=runstate.begin_commit if as_worker else None,
                               on_commit=(lambda sid=sid: runstate.mark_digested(sid, "r", "run")) if as_worker else lambda: None)
        if stats.nodes_removed or stats.nodes_folded:
            resolver.reset()  # as the extract phase does


def built(path: Path, names: Sequence[tuple[str, str, tuple[str, ...]]], *, index_per_session: bool = False) -> dict[str, Any]:
    db = Database(path)
    try:
        commit_names(db, names, index_per_session=index_per_session)
    finally:
        db.close()
    return canonical(path)


def groups(graph: dict[str, Any]) -> set[frozenset[str]]:
    """The sessions whose claims ended on one node."""
    by_node: dict[str, set[str]] = {}
    for node_id, anchor, *_ in graph["claims"]:
        by_node.setdefault(node_id, set()).add(anchor)
    return {frozenset(anchors) for anchors in by_node.values()}


@pytest.mark.parametrize("index_per_session", [False, True], ids=["one-index", "index-per-session"])
@pytest.mark.parametrize("chain", [SPELLINGS, ALIASES], ids=["spellings", "aliases"])
def test_a_chain_groups_the_same_in_every_order(tmp_path: Path, chain: list[tuple[str, str, tuple[str, ...]]], index_per_session: bool) -> None:
    reference = built(tmp_path / "reference.sqlite3", chain)
    assert len(groups(reference)) == 1  # the three spellings are one node
    for number, order in enumerate(itertools.permutations(chain)):
        assert built(tmp_path / f"order{number}.sqlite3", order, index_per_session=index_per_session) == reference, order
    survivor = min(f"{t}:{n}" for t, n, _ in chain) if chain is SPELLINGS else "PERSON:Bob"
    assert [n[0] for n in reference["nodes"] if n[1] == chain[0][0]] == [survivor]


def test_random_orders_of_chains_and_other_names_build_one_graph(tmp_path: Path) -> None:
    """A property over several shuffled orders of two chains and names that link or not."""
    names = SPELLINGS + ALIASES + OTHERS
    reference = built(tmp_path / "reference.sqlite3", names)
    rng = random.Random(15)
    for number in range(8):
        order = rng.sample(names, len(names))
        assert built(tmp_path / f"shuffled{number}.sqlite3", order, index_per_session=number % 2 == 1) == reference, order


@pytest.mark.both_backends
@pytest.mark.parametrize("order", [[2, 0, 1], [0, 2, 1], [1, 0, 2]], ids=["bridge-last-reversed", "bridge-last", "bridge-first"])
def test_a_bridging_name_folds_the_nodes_it_links_on_either_engine(tmp_path: Path, settings: Settings, order: list[int]) -> None:
    """The name that links two existing nodes arrives last (it folds them: a merge each, undoable)
    or first: the graph equals the one SQLite builds in the chain's own order."""
    reference = built(tmp_path / "reference.sqlite3", SPELLINGS)
    db = open_database(settings)
    try:
        commit_names(db, [SPELLINGS[i] for i in order], index_per_session=False)
        folds = db.query("SELECT merged_id, into_id, evidence FROM merges WHERE evidence LIKE '%bridge%'")
    finally:
        db.close()
    assert canonical(settings) == reference
    if order[-1] == 1:
        assert sorted((r[0], r[1]) for r in folds) == [("CLASS:lazy_edge_queue", "CLASS:LazyEdgeQueue")]


def test_an_undone_merge_is_never_bridged_back(tmp_path: Path) -> None:
    """An operator unmerged two spellings: a later name linking both stays a candidate for review."""
    path = tmp_path / "graph.sqlite3"
    db = Database(path)
    try:
        commit_names(db, [SPELLINGS[0], SPELLINGS[2], SPELLINGS[1]], index_per_session=False)
        unit = DatabaseUnitOfWork(db)
        unit.merges.unmerge("CLASS:lazy_edge_queue")
        assert unit.graph.existing_ids(["CLASS:LazyEdgeQueue", "CLASS:lazy_edge_queue"]) == {"CLASS:LazyEdgeQueue", "CLASS:lazy_edge_queue"}
        commit_names(db, [("CLASS", "the lazy edge queues", ())], index_per_session=True)
        assert unit.graph.existing_ids(["CLASS:LazyEdgeQueue", "CLASS:lazy_edge_queue"]) == {"CLASS:LazyEdgeQueue", "CLASS:lazy_edge_queue"}
        assert db.query("SELECT COUNT(*) FROM identity_candidates WHERE node_id LIKE 'CLASS:%lazy edge queues%'")[0][0] >= 1
    finally:
        db.close()


# Short names (README "Several workers", *Short names*): `get_head` stands for one qualified name,
# not for two that differ; `LEQ` for one expansion, not for two. Each set is a chain in every order.
QUALIFIED = [("METHOD", "get_head", ()), ("METHOD", "Repo.get_head", ()), ("METHOD", "Other.get_head", ())]
# The bare name is the least id here: the longer names were joined *into* it.
QUALIFIED_UNDER_SHORT = [("METHOD", "get_head", ()), ("METHOD", "x.get_head", ()), ("METHOD", "y.get_head", ())]
# Every two of the longer names match each other: one function, one node.
QUALIFIED_ONE_THING = [("METHOD", "get_head", ()), ("METHOD", "Repo.get_head", ()), ("METHOD", "self.repo.get_head", ())]
ACRONYM = [("CLASS", "LEQ", ()), ("CLASS", "Lazy Edge Queue", ()), ("CLASS", "Lazy Event Queue", ())]
ACRONYM_ONE_THING = [("CLASS", "LEQ", ()), ("CLASS", "Lazy Edge Queue", ()), ("CLASS", "LazyEdgeQueue", ())]
SHORT_CHAINS = {"qualified": QUALIFIED, "qualified-under-short": QUALIFIED_UNDER_SHORT, "qualified-one-thing": QUALIFIED_ONE_THING,
                "acronym": ACRONYM, "acronym-one-thing": ACRONYM_ONE_THING}


@pytest.mark.parametrize("index_per_session", [False, True], ids=["one-index", "index-per-session"])
@pytest.mark.parametrize("chain", list(SHORT_CHAINS.values()), ids=list(SHORT_CHAINS))
def test_a_short_name_groups_the_same_in_every_order(tmp_path: Path, chain: list[tuple[str, str, tuple[str, ...]]], index_per_session: bool) -> None:
    """All 6 orders of a short name and two longer ones give one graph: the short name joins them
    when they name one thing, and is a node of its own beside two that differ."""
    reference = built(tmp_path / "reference.sqlite3", chain)
    expected = 1 if chain in (QUALIFIED_ONE_THING, ACRONYM_ONE_THING) else 3
    assert len(groups(reference)) == expected
    survivors = {"METHOD:self.repo.get_head"} if chain is QUALIFIED_ONE_THING else {"CLASS:Lazy Edge Queue"} if chain is ACRONYM_ONE_THING else {
        f"{t}:{n}" for t, n, _ in chain}
    assert {n[0] for n in reference["nodes"] if n[1] == chain[0][0]} == survivors  # a short name never survives
    for number, order in enumerate(itertools.permutations(chain)):
        assert built(tmp_path / f"order{number}.sqlite3", order, index_per_session=index_per_session) == reference, order


def test_random_orders_of_short_names_and_spelling_chains_build_one_graph(tmp_path: Path) -> None:
    """A property over shuffled orders of every chain, spelling and short-name ones together."""
    names = SPELLINGS + ALIASES + OTHERS + QUALIFIED + QUALIFIED_UNDER_SHORT + ACRONYM + [("METHOD", "a.b.save", ()), ("METHOD", "save", ()), ("METHOD", "b.save", ())]
    reference = built(tmp_path / "reference.sqlite3", names)
    rng = random.Random(42)
    for number in range(6):
        order = rng.sample(names, len(names))
        assert built(tmp_path / f"shuffled{number}.sqlite3", order, index_per_session=number % 2 == 1) == reference, order


def _split_graph(db: Database) -> DatabaseUnitOfWork:
    """`get_head` joined `Repo.get_head`, then `Other.get_head` arrived: the split."""
    commit_names(db, QUALIFIED[:2], index_per_session=False)
    unit = DatabaseUnitOfWork(db)
    assert unit.graph.existing_ids(["METHOD:get_head"]) == set()
    commit_names(db, QUALIFIED[2:], index_per_session=False)
    return unit


@pytest.mark.both_backends
def test_a_split_moves_the_short_name_out_and_blocks_nothing(tmp_path: Path, settings: Settings) -> None:
    """The short name's rows go back to its own node; the undone record says why and blocks no
    pair; the ambiguous pairs are listed for review; the graph equals the one of the other order."""
    reference = built(tmp_path / "reference.sqlite3", [QUALIFIED[i] for i in (1, 2, 0)])
    db = open_database(settings)
    try:
        unit = _split_graph(db)
        ids = ["METHOD:get_head", "METHOD:Repo.get_head", "METHOD:Other.get_head"]
        assert unit.graph.existing_ids(ids) == set(ids)
        records = unit.merges.records(merged_id="METHOD:get_head")
        assert [(r.into_id, r.undone_at is not None, r.evidence.get("split", {}).get("ambiguous_with")) for r in records] == [
            ("METHOD:Repo.get_head", True, "Other.get_head")]
        assert unit.merges.blocked_pairs() == frozenset()
        assert {(c["node_id"], c["candidate_id"]) for c in unit.merges.candidates()} == {("METHOD:get_head", "METHOD:Repo.get_head")}
        assert db.query("SELECT COUNT(*) FROM node_claims WHERE node_id = ? AND anchor LIKE 'session:%'", ("METHOD:get_head",))[0][0] == 1
    finally:
        db.close()
    assert canonical(settings) == reference


def test_a_split_name_named_again_stays_its_own_node(tmp_path: Path) -> None:
    """After the split, a later session naming the short name again (on a fresh index too) and a
    third qualified name keep it apart."""
    path = tmp_path / "graph.sqlite3"
    db = Database(path)
    try:
        unit = _split_graph(db)
        commit_names(db, [("METHOD", "get_head()", ()), ("METHOD", "Third.get_head", ())], index_per_session=True)
        claims = db.query("SELECT node_id, COUNT(*) FROM node_claims WHERE anchor LIKE 'session:%' GROUP BY node_id ORDER BY node_id")
        assert [tuple(r) for r in claims] == [("METHOD:Other.get_head", 1), ("METHOD:Repo.get_head", 1), ("METHOD:Third.get_head", 1), ("METHOD:get_head", 2)]
        assert [(r.merged_id, r.into_id, r.rule) for r in unit.merges.records(active=True)] == [("METHOD:get_head()", "METHOD:get_head", "alias")]
    finally:
        db.close()


def test_unmerge_and_merge_after_a_split_agree_with_the_graph(tmp_path: Path) -> None:
    """A split leaves no active merge of the short name (unmerge says so); merging it by hand works
    and unmerging that blocks the pair as any operator's unmerge does."""
    from store.merges import MergeError

    db = Database(tmp_path / "graph.sqlite3")
    try:
        unit = _split_graph(db)
        with pytest.raises(MergeError, match="no active merge"):
            unit.merges.unmerge("METHOD:get_head")
        merge_id = unit.merges.merge_nodes("METHOD:get_head", "METHOD:Repo.get_head")
        assert unit.graph.existing_ids(["METHOD:get_head"]) == set()
        assert [r.merge_id for r in unit.merges.records(active=True)] == [merge_id]
        unit.merges.unmerge("METHOD:get_head")
        assert unit.graph.existing_ids(["METHOD:get_head"]) == {"METHOD:get_head"}
        assert unit.merges.blocked_pairs() == frozenset({("METHOD:get_head", "METHOD:Repo.get_head")})
    finally:
        db.close()


def test_a_split_reaches_through_a_later_fold(tmp_path: Path) -> None:
    """`LEQ` joined `LazyEdgeQueue`, whose node was then folded into `Lazy Edge Queue` (a spelling,
    the least id): `Lazy Event Queue` takes `LEQ` out all the same — the fold is undone and made
    again — and the graph is the one of an order without any split."""
    names = [("CLASS", "LEQ", ()), ("CLASS", "LazyEdgeQueue", ()), ("CLASS", "Lazy Edge Queue", ()), ("CLASS", "Lazy Event Queue", ())]
    reference = built(tmp_path / "reference.sqlite3", [names[i] for i in (3, 1, 2, 0)])
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit_names(db, names, index_per_session=False)
        records = DatabaseUnitOfWork(db).merges.records()
    finally:
        db.close()
    assert canonical(tmp_path / "graph.sqlite3") == reference
    split = [(r.merged_id, r.into_id) for r in records if "split" in r.evidence]
    assert split == [("CLASS:LazyEdgeQueue", "CLASS:Lazy Edge Queue"), ("CLASS:LEQ", "CLASS:LazyEdgeQueue")]
    again = [(r.merged_id, r.into_id) for r in records if r.undone_at is None and "again_after_split" in r.evidence]
    assert again == [("CLASS:LazyEdgeQueue", "CLASS:Lazy Edge Queue")]


def test_another_workers_split_is_seen_before_linking_the_short_name(tmp_path: Path) -> None:
    """Worker B's index knew `get_head` as a form of `Repo.get_head`; worker A split it out. B's
    next `get_head` goes to the split node (B notices its index is stale), as on A."""
    db = Database(tmp_path / "graph.sqlite3")
    try:
        commit_names(db, QUALIFIED[:2], index_per_session=False)
        worker_b = identity_resolver(db)
        commit_names(db, [("METHOD", "unrelated", ())], index_per_session=False, resolver=worker_b)  # B's index: get_head inside Repo.get_head
        commit_names(db, QUALIFIED[2:], index_per_session=False)  # worker A: the split
        commit_names(db, [("METHOD", "get_head", ())], index_per_session=False, resolver=worker_b, again="-2")
        claims = db.query("SELECT node_id FROM node_claims WHERE anchor = 'session:s-get_head-2'")
        assert [r[0] for r in claims] == ["METHOD:get_head"]
    finally:
        db.close()


def test_another_workers_split_is_seen_under_another_spelling(tmp_path: Path) -> None:
    """As above, but B's next mention is `get_head()`, whose own id no node has: B's index would
    still send it into `Repo.get_head`. The split starts a new identity epoch, so B rebuilds and
    links it where a fresh index does."""
    said_again = [("METHOD", "get_head()", ())]

    def run(path: Path, *, stale_worker: bool) -> list[str]:
        db = Database(path)
        try:
            commit_names(db, QUALIFIED[:2], index_per_session=False, as_worker=True)
            worker_b = identity_resolver(db)
            commit_names(db, [("METHOD", "unrelated", ())], index_per_session=False, resolver=worker_b, as_worker=True)
            commit_names(db, QUALIFIED[2:], index_per_session=False, as_worker=True)  # worker A: the split
            commit_names(db, said_again, index_per_session=not stale_worker, resolver=worker_b if stale_worker else None,
                         again="-2", as_worker=True)
            return [r[0] for r in db.query("SELECT node_id FROM node_claims WHERE anchor = 'session:s-get_head-call-2'")]
        finally:
            db.close()

    fresh = run(tmp_path / "fresh.sqlite3", stale_worker=False)
    assert fresh and fresh != ["METHOD:Repo.get_head"]
    assert run(tmp_path / "stale.sqlite3", stale_worker=True) == fresh
