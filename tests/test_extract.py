"""Pure parts of extraction: validation, ids, units, heuristic, reduce and the commit plan."""

from __future__ import annotations

import json
import random

from datetime import timedelta
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from config import DEFAULT_SEMANTIC_TYPES
from pipelines.extract.commit import Candidate, CommitState, CommitStats, commit_session, match_existing, plan_commit
from pipelines.extract.heuristic import TOOL_ONLY_MIN_TURNS, extract_heuristic, find_mentions
from pipelines.extract.map import chunk_backoff
from pipelines.extract.model import (
    ChunkExtraction,
    UnitTurn,
    WorkUnit,
    find_references,
    semantic_node_id,
    unit_content_hash,
    validate_extraction,
)
from pipelines.extract.reduce import reduce_session
from pipelines.extract.units import SourceTurn, plan_units
from pipelines.forget import forget_session
from store.db import Database
from store.graph import GraphStore, Node
from store.ids import normalize_graph_node_id
from store.facts import NodeFacts, combine_all, facts_of, without_claim
from store.provenance import AnchorRows, ProvenanceStore, facts_from_claims
from store.semantic_index import SemanticIndex
from store.unit_of_work import DatabaseUnitOfWork

TYPES = DEFAULT_SEMANTIC_TYPES


def unit(*texts: str, unit_id: str = "s:chunk:0", first_memory: int = 0) -> WorkUnit:
    turns = tuple(UnitTurn(n, f"m{first_memory + n - 1}", t) for n, t in enumerate(texts, start=1))
    return WorkUnit(unit_id, "s", int(unit_id.rsplit(":", 1)[1]), turns, unit_content_hash("s", turns))


def test_validation_coerces_grounds_and_counts() -> None:
    work = unit("The Chunker is linear now.", "It replaced the quadratic join.")
    raw = {
        "summary": "chunking",
        "nodes": [
            {"id": "a", "type": "class", "name": "Chunker", "evidence": [{"turn": 1, "quote": "the  chunker is LINEAR"}]},
            {"id": "b", "type": "gizmo", "name": "Quadratic-Join", "evidence": [{"turn": 1, "quote": "quadratic join"}]},
            {"id": "c", "type": "CONCEPT", "name": "invented", "evidence": [{"turn": 2, "quote": "never said"}]},
            {"type": "CLASS", "name": "  "},
            "not an object",
        ],
        "edges": [
            {"source": "a", "target": "b", "relationship": "replaces"},
            {"source": "a", "target": "ghost", "relationship": "DEPENDS_ON"},
        ],
    }
    extraction = validate_extraction(raw, work, semantic_types=TYPES)
    nodes = {n.id: n for n in extraction.nodes}
    assert set(nodes) == {"CLASS:Chunker", "CONCEPT:quadratic join", "CONCEPT:invented"}
    assert nodes["CLASS:Chunker"].evidence[0].memory_id == "m0"
    # a quote found in another turn than the cited one is re-attributed, not lost
    assert nodes["CONCEPT:quadratic join"].evidence[0].memory_id == "m1"
    assert nodes["CONCEPT:invented"].evidence == ()
    assert extraction.ungrounded == ({"owner": "CONCEPT:invented", "turn": 2, "quote": "never said"},)
    (edge,) = extraction.edges
    assert (edge.source, edge.target, edge.relationship) == ("CLASS:Chunker", "CONCEPT:quadratic join", "RELATES_TO")
    assert extraction.dropped_items == 3
    assert ChunkExtraction.from_payload(extraction.to_payload()) == extraction


def test_earlier_system_shape_is_accepted() -> None:
    raw = {"summary": "s", "graph": {"nodes": [{"id": "Class:GraphStore", "type": "CLASS"}], "edges": []}}
    extraction = validate_extraction(raw, unit("GraphStore"), semantic_types=TYPES)
    assert [n.id for n in extraction.nodes] == ["CLASS:GraphStore"]


@given(st.sampled_from(TYPES), st.text(max_size=700))
def test_semantic_ids_are_always_valid_graph_ids(node_type: str, name: str) -> None:
    node_id = semantic_node_id(node_type, name)
    if node_id is not None:
        assert normalize_graph_node_id(node_id) == node_id
        assert node_id.startswith(f"{node_type}:")


def test_references_strip_trailing_punctuation() -> None:
    work = unit("see memory:sess-1-t0007. and (session:sess-2) or `memory:a.b:c:` and session: nothing, MEMORY:Up1")
    assert [r.target for r in find_references(work)] == ["memory:sess-1-t0007", "session:sess-2", "memory:a.b:c", "memory:Up1"]


def test_chunk_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    waits = [chunk_backoff(n, base_seconds=7.5, max_seconds=50) for n in range(0, 6)]
    assert waits == [timedelta(seconds=s) for s in (7.5, 7.5, 15, 30, 50, 50)]
    assert chunk_backoff(4, base_seconds=5, max_seconds=5) == timedelta(seconds=5)  # constant when max == base
    assert chunk_backoff(10**6, base_seconds=60, max_seconds=21_600) == timedelta(hours=6)  # no overflow


def test_units_split_an_oversized_turn_into_parts_with_its_memory() -> None:
    turns = [SourceTurn("m0", "short"), SourceTurn("m1", "para one is here.\n\npara two is here.\n\npara three."), SourceTurn("m2", "end")]
    # 9 tokens: each paragraph (19 bytes) fits beside the `[1] ` the model is shown before it
    units = plan_units("s", turns, budget_tokens=9)
    assert [u.unit_id for u in units] == ["s:chunk:0", "s:chunk:1:part:0", "s:chunk:1:part:1", "s:chunk:1:part:2", "s:chunk:2"]
    parts = [u for u in units if ":part:" in u.unit_id]
    assert "".join(u.turns[0].text for u in parts) == turns[1].text
    assert {u.turns[0].memory_id for u in parts} == {"m1"}
    assert len({u.content_hash for u in units}) == len(units)
    assert plan_units("s", turns, budget_tokens=9) == units


_turn_texts = st.text(alphabet="ab .\né日", max_size=120)


@given(
    texts=st.lists(_turn_texts, min_size=1, max_size=30),
    roles=st.lists(st.sampled_from(["user", "assistant", None, "Monica Geller"]), min_size=30, max_size=30),
    appended=_turn_texts,
    budget=st.integers(min_value=4, max_value=200),
)
def test_an_appended_turn_changes_only_the_units_it_is_in(texts: list[str], roles: list[str | None], appended: str, budget: int) -> None:
    """A session that gains a turn pays the model only for the units holding that turn (its parts,
    or the last chunk it joins): every other unit is the same text, so its content hash is too."""
    turns = [SourceTurn(f"m{i}", text, roles[i]) for i, text in enumerate(texts)]
    before = {u.content_hash for u in plan_units("s", turns, budget_tokens=budget)}
    after = plan_units("s", [*turns, SourceTurn("new", appended, "user")], budget_tokens=budget)
    changed = [u for u in after if u.content_hash not in before]
    assert all(any(t.memory_id == "new" for t in u.turns) for u in changed)
    assert len([u for u in changed if len({t.memory_id for t in u.turns}) > 1]) <= 1


def test_heuristic_finds_code_entities_without_sentence_starts() -> None:
    text = (
        "The LazyEdgeQueue in src/store/lazy_queue.py calls drain() and clock.monotonic(); see #123 and "
        "https://example.com/x/y. Tomás Herrera and Docker Compose too. This Monday we ran test_drain_twice."
    )
    found = {(m.node_type, m.name) for m in find_mentions(text)}
    assert found >= {
        ("CLASS", "LazyEdgeQueue"), ("FILE", "src/store/lazy_queue.py"), ("METHOD", "drain"),
        ("METHOD", "clock.monotonic"), ("ISSUE", "#123"), ("FILE", "https://example.com/x/y"),
        ("CONCEPT", "Tomás Herrera"), ("CONCEPT", "Docker Compose"), ("TEST", "test_drain_twice"),
    }
    assert not any(name.startswith(("The ", "This ")) for _, name in found)
    reply = extract_heuristic(unit(text))
    assert extract_heuristic(unit(text)) == reply  # deterministic
    extraction = validate_extraction(reply, unit(text), semantic_types=TYPES)
    assert extraction.ungrounded == ()
    assert all(e.relationship == "RELATES_TO" for e in extraction.edges) and extraction.edges


def test_heuristic_descriptions_are_prose_never_log_lines() -> None:
    log = "2026-11-10T10:38:58.216Z ERROR [worker-4] upsert_edge failed src=LazyEdgeQueue dst=WebhookDispatcher: could not serialize"
    turns = (
        UnitTurn(1, "m1", log, "tool"),
        UnitTurn(2, "m2", "Here is the log:\n" + log, "user"),  # a person pasting a log line
        UnitTurn(3, "m3", "$ grep -n LazyEdgeQueue src/queue/lazy_edges.py", "user"),
        UnitTurn(4, "m4", "EmbeddingCache and LazyEdgeQueue both write the same row without ON CONFLICT.", "assistant"),
    )
    nodes = {n["id"]: n for n in extract_heuristic(WorkUnit("u", "s", 0, turns, "h"))["nodes"]}
    prose = "EmbeddingCache and LazyEdgeQueue both write the same row without ON CONFLICT."
    assert nodes["CLASS:LazyEdgeQueue"]["description"] == prose  # found in a later turn, still chosen
    assert nodes["CLASS:EmbeddingCache"]["description"] == prose
    assert nodes["CLASS:WebhookDispatcher"]["description"] == ""  # seen only in a log: no description
    assert nodes["FILE:src/queue/lazy_edges.py"]["description"] == ""


def test_reduce_merges_across_chunks_in_order() -> None:
    first = validate_extraction(
        {"summary": "one", "nodes": [
            {"id": "q", "type": "CLASS", "name": "LazyEdgeQueue", "description": "short", "confidence": 0.4,
             "tags": ["b"], "evidence": [{"turn": 1, "quote": "LazyEdgeQueue"}]},
            {"id": "g", "type": "CLASS", "name": "GraphStore", "evidence": [{"turn": 1, "quote": "GraphStore"}]}],
         "edges": [{"source": "q", "target": "g", "relationship": "DEPENDS_ON", "justification": "reads"}]},
        unit("LazyEdgeQueue feeds GraphStore"), semantic_types=TYPES)
    second = validate_extraction(
        {"summary": "two", "nodes": [
            {"id": "x", "type": "CLASS", "name": "LazyEdgeQueue", "description": "a much longer description",
             "confidence": 0.9, "tags": ["a"], "aliases": ["the queue"], "evidence": [{"turn": 1, "quote": "LazyEdgeQueue"}]},
            {"id": "g", "type": "CLASS", "name": "GraphStore", "evidence": [{"turn": 1, "quote": "GraphStore"}]}],
         "edges": [{"source": "x", "target": "g", "relationship": "DEPENDS_ON", "justification": "writes"}]},
        unit("the LazyEdgeQueue and GraphStore", unit_id="s:chunk:1", first_memory=5), semantic_types=TYPES)
    reduced = reduce_session("s", [first, second])
    assert reduced.remapped == {}  # one id in both chunks (`lazyedgequeue` would be another identifier)
    queue = next(n for n in reduced.nodes if n.id == "CLASS:LazyEdgeQueue")
    assert queue.description == "a much longer description" and queue.confidence == 0.9
    assert queue.tags == ("a", "b") and "the queue" in queue.aliases
    assert [(p.memory, p.chunk_id) for p in queue.provenance] == [("memory:m0", "s:chunk:0"), ("memory:m5", "s:chunk:1")]
    (edge,) = reduced.edges
    assert (edge.source, edge.justification, len(edge.provenance)) == ("CLASS:LazyEdgeQueue", "reads; writes", 2)
    assert reduced.summary == "one\ntwo"
    assert reduce_session("s", [first, second]) == reduced


def test_commit_plan_is_idempotent_and_weights_do_not_creep(tmp_path: Path) -> None:
    work = unit("LazyEdgeQueue and GraphStore")
    extraction = validate_extraction(extract_heuristic(work), work, semantic_types=TYPES)
    reduced = reduce_session("s", [extraction])
    base = {"session:s": Node("session:s", "SESSION", "s"), "memory:m0": Node("memory:m0", "MEMORY", "m0")}
    plan = plan_commit(reduced, matches={}, state=CommitState(base))
    nodes = {n.id: n for n in plan.nodes}
    edges = {(e.source, e.target, e.relationship): e for e in plan.edges}
    key = ("CLASS:GraphStore", "CLASS:LazyEdgeQueue", "RELATES_TO")
    assert edges[key].weight == 1.0 and [r.point.memory for r in plan.edge_points] == ["memory:m0"]
    # the same session again, with its earlier rows in the graph: the same writes, nothing removed
    committed = CommitState({**base, **nodes}, edges, {key: 1}, frozenset(nodes))
    old = AnchorRows(plan.node_points, plan.edge_points, plan.claims)
    again = plan_commit(reduced, matches={}, state=committed, old=old)
    assert (again.nodes, again.edges, again.node_points, again.edge_points, again.claims) == (
        plan.nodes, plan.edges, plan.node_points, plan.edge_points, plan.claims)
    assert not again.removed_edges and not again.orphans and not again.recombine
    # another session saying the same raises the weight once, and only once
    other = reduce_session("t", [validate_extraction(extract_heuristic(work), work, semantic_types=TYPES)])
    merged = plan_commit(other, matches={}, state=committed)
    merged_edges = {(e.source, e.target, e.relationship): e for e in merged.edges}
    assert merged_edges[key].weight == 2.0
    assert {e["target"] for e in merged.lazy} == {"session:t"}  # t is not in the graph: queued
    # a re-extraction of s that no longer yields the edge takes its place away: the edge goes
    empty = reduce_session("s", [])
    gone = plan_commit(empty, matches={}, state=committed, old=old)
    assert key in gone.removed_edges and gone.orphans == set(nodes)


def test_match_existing_by_name_and_alias(tmp_path: Path) -> None:
    db = Database(tmp_path / "g.sqlite3")
    try:
        GraphStore(db).upsert_nodes([
            Node("CLASS:LazyEdgeQueue", "CLASS", "LazyEdgeQueue", {"aliases": ["the lazy queue"]}),
            Node("CONCEPT:map reduce", "CONCEPT", "Map-Reduce", {"aliases": []}),
        ])
        found = match_existing(
            [Candidate("CLASS:lazyedgequeue", "CLASS", "lazyedgequeue"),
             Candidate("CLASS:Queue", "CLASS", "Queue", ("The Lazy Queue",)),
             Candidate("CONCEPT:map reduce", "CONCEPT", "map reduce"),
             Candidate("CLASS:Other", "CLASS", "Other")],
            SemanticIndex(db),
        )
        assert found == {
            "CLASS:lazyedgequeue": "CLASS:LazyEdgeQueue", "CLASS:Queue": "CLASS:LazyEdgeQueue",
            "CONCEPT:map reduce": "CONCEPT:map reduce",
        }
    finally:
        db.close()


NOISE = [
    ("CLASS", "b6166dccb4d2b48173aa7e7739be52db9d2d56a0", "node-name-blob"),  # a commit hash
    ("CLASS", "aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=", "node-name-blob"),  # base64
    ("CONCEPT", "550e8400-e29b-41d4-a716-446655440000", "node-name-blob"),  # a uuid
    ("METHOD", "function(a){return a;}", "node-name-blob"),  # minified code
    ("CONCEPT", "3.14", "node-name-number"),
    ("CONCEPT", "2026-11-30", "node-name-number"),
    ("ISSUE", "#0a0a0a", "node-name-colour"),
    ("ISSUE", "#000", "node-name-colour"),  # no issue number has a leading zero
    ("CONCEPT", "rgba(0, 0, 0, 0.5)", "node-name-colour"),
    ("CONCEPT", "$ git status", "node-name-shell-prompt"),
    ("CONCEPT", "dev@box:~/repo$ make", "node-name-shell-prompt"),
    ("CONCEPT", ">>> import os", "node-name-shell-prompt"),
    ("FILE", "s/query_patch.py/query_final.py", "node-name-edit-command"),  # sed -i 's/a.py/b.py/'
    ("FILE", "2476s/self.dataLim", "node-name-edit-command"),  # sed -i '2476s/…/…/'
]


def test_noise_never_becomes_a_node_and_is_counted_per_reason() -> None:
    work = unit(" ".join(name for _, name, _ in NOISE) + " #123 LazyEdgeQueue Pix2Sky_TAN XMLHttpRequest")
    keep = [("ISSUE", "#123"), ("CLASS", "LazyEdgeQueue"), ("CLASS", "Pix2Sky_TAN"), ("CLASS", "XMLHttpRequest")]
    raw = {"nodes": [{"type": t, "name": n, "evidence": [{"turn": 1, "quote": n}]} for t, n, _ in NOISE]
           + [{"type": t, "name": n} for t, n in keep]}
    extraction = validate_extraction(raw, work, semantic_types=TYPES)
    assert sorted(n.name for n in extraction.nodes) == sorted(n for _, n in keep)
    expected: dict[str, int] = {}
    for _, _, reason in NOISE:
        expected[reason] = expected.get(reason, 0) + 1
    assert dict(extraction.rejected) == expected and extraction.dropped_items == len(NOISE)


def test_heuristic_output_passes_the_same_noise_rules() -> None:
    text = "Commit b6166dccb4d2b48173aa7e7739be52db9d2d56a0 set color #ff0000 on AbCdEfGh12IjKlMn34OpQr; see #42."
    work = unit(text)
    extraction = validate_extraction(extract_heuristic(work), work, semantic_types=TYPES)
    names = {n.name for n in extraction.nodes}
    assert "#42" in names and not names & {"#ff0000", "AbCdEfGh12IjKlMn34OpQr", "b6166dccb4d2b48173aa7e7739be52db9d2d56a0"}


def test_heuristic_a_colour_in_decimal_digits_is_no_issue() -> None:
    # Issue 11, fourteenth round: aider's plotting and diagram edits set colours of digits only.
    text = ('ax.set_xlabel("date", color="#555")\nstyle a fill:#f0f0f0,stroke:#333,stroke-width:2px\nbg = "#333333"\n'
            "background-color: #999;\nFixes #42; see also #77.")
    names = {n.name for n in validate_extraction(extract_heuristic(unit(text)), unit(text), semantic_types=TYPES).nodes}
    assert {n for n in names if n.startswith("#")} == {"#42", "#77"}


def test_a_speaker_named_as_evidence_is_grounded_in_the_turn() -> None:
    turns = (UnitTurn(1, "m0", "We met in Paris.", "Alice"), UnitTurn(2, "m1", "Yes!", "Bob"))
    work = WorkUnit("s:chunk:0", "s", 0, turns, unit_content_hash("s", turns))
    raw = {"nodes": [{"type": "PERSON", "name": "Bob", "evidence": [{"turn": 2, "quote": "Bob"}]},
                     {"type": "PERSON", "name": "Carol", "evidence": [{"turn": 2, "quote": "Carol"}]}]}
    extraction = validate_extraction(raw, work, semantic_types=(*TYPES, "PERSON"))
    nodes = {n.name: n for n in extraction.nodes}
    assert [e.memory_id for e in nodes["Bob"].evidence] == ["m1"]
    assert nodes["Carol"].evidence == () and len(extraction.ungrounded) == 1


def conversation(*turns: tuple[str, str]) -> WorkUnit:
    unit_turns = tuple(UnitTurn(n, f"m{n}", text, role) for n, (role, text) in enumerate(turns, start=1))
    return WorkUnit("s:chunk:0", "s", 0, unit_turns, unit_content_hash("s", unit_turns))


def nodes_of(work: WorkUnit) -> dict[str, float]:
    extraction = validate_extraction(extract_heuristic(work), work, semantic_types=TYPES)
    assert extraction.ungrounded == () and extraction.rejected == ()
    return {n.id: n.confidence for n in extraction.nodes}


def test_heuristic_reads_people_places_and_works_in_conversation() -> None:
    assert set(nodes_of(conversation(("user", "Alice met Bob in Paris.")))) == {"PERSON:Alice", "PERSON:Bob", "PLACE:Paris"}
    found = nodes_of(conversation(
        ("Monica Geller", "Hey John, how was Boston? Last Friday I went to the Museum of Natural History."),
        ("John Smith", "Sometimes I'm tired. That's Boston for you! Oh Monica, we watched \"An Affair To Remember\"."),
    ))
    # speakers are people; "Hey John" is John (the speaker John Smith), "Oh Monica" is Monica Geller
    assert set(found) == {
        "PERSON:Monica Geller", "PERSON:John Smith", "CONCEPT:boston", "PLACE:Museum of Natural History",
        "WORK:An Affair To Remember",
    }
    # said in both turns, by both speakers: outranks the one-off
    assert found["CONCEPT:boston"] > found["PLACE:Museum of Natural History"]


def test_heuristic_a_word_glued_before_a_speakers_name_is_no_part_of_it() -> None:
    # Issue 11, eighth round (Friends, tuning scenes): "Damnit Phoebe", "Ask Joey", "Doctor Ross
    # Geller" are the speakers Phoebe, Joey and Ross, not three more names.
    found = nodes_of(conversation(
        ("Rachel Green", "Okay, you guys. Damnit Phoebe, give it back!"),
        ("Phoebe Buffay", "No! Ask Joey, he was there with Doctor Ross Geller."),
        ("Ross Geller", "Fun Bobby is here, and Monica Geller knows it."),
        ("Joey Tribbiani", "Hey."),
    ))
    assert not {"CONCEPT:damnit phoebe", "CONCEPT:ask joey", "CONCEPT:doctor ross geller"} & set(found)
    # A name the speakers do not hold stays whole ("Fun Bobby"), and so does a speaker's full name.
    assert {"CONCEPT:fun bobby", "PERSON:Monica Geller", "PERSON:Phoebe Buffay", "PERSON:Joey Tribbiani", "PERSON:Ross Geller"} <= set(found)


def test_heuristic_what_a_person_does_in_a_ticket_types_their_name() -> None:
    # Issue 11, eighth round: "Terry wants …" (Friends) and, in a coding session, "Bug report from
    # Jonas Weber" / "tag Jonas Weber" / "Jonas Weber suggested" make a person, not a CONCEPT.
    chat = nodes_of(conversation(("Gunther", "Good one. Actually, Terry wants you to take the training again, whenever.")))
    assert "PERSON:Terry" in chat
    coding = nodes_of(conversation(
        ("user", "Bug report from Jonas Weber: `LazyEdgeQueue` drops edges when Docker Compose restarts it."),
        ("tool", "$ pytest tests/test_lazy_queue.py\n1 failed"),
        ("assistant", "Fixed in `src/store/lazy_queue.py`; I'll tag Jonas Weber on the PR. The test restarts it the way Docker Compose does."),
    ))
    assert "PERSON:Jonas Weber" in coding and "CONCEPT:jonas weber" not in coding
    # Without such a word before it, a name of the session keeps its type.
    assert "CONCEPT:docker compose" in coding


def test_heuristic_a_phrase_after_a_person_lead_is_no_person() -> None:
    # Issue 11, ninth round (Friends, tuning scenes): "and", "with", "met" before a name type it
    # PERSON, but a phrase whose words the scene also writes in lower case is no person's name, nor
    # is what follows "the" ("and the Blowfish"), and what is "called" something is as often a band
    # or a road. Such names made the identity resolver's wrong namesake splits.
    found = nodes_of(conversation(
        ("Chandler Bing", "Yes, and we call Ross Lingers In The Bathroom. He lingers in the bathroom."),
        ("Monica Geller", "This great band called the Swing Kings played at the Met. Oh, the MET! The Metropolitan Museum of Art."),
        ("Rachel Green", "The museum? I went there with Julie and Mindy, and Tova Borgnine. Carol met Susan there."),
        ("Joey Tribbiani", "You partied with Hootie and the Blowfish? He and I...kind of did."),
    ))
    persons = {n for n in found if n.startswith("PERSON:")}
    phrases = {"Ross Lingers In The Bathroom", "Swing Kings", "Metropolitan Museum of Art", "Blowfish"}
    assert not {f"PERSON:{p}" for p in phrases} & persons
    assert {f"CONCEPT:{p.casefold()}" for p in phrases} <= set(found)
    assert not {"PERSON:I.", "CONCEPT:i."} & set(found)  # an initial alone is no name
    # Names the scene writes only capitalised keep the lead's evidence; a person verb still types a name.
    assert {"PERSON:Julie", "PERSON:Mindy", "PERSON:Tova Borgnine", "PERSON:Carol", "PERSON:Susan"} <= persons


def test_heuristic_speaker_roles_that_are_no_names_make_no_person() -> None:
    found = nodes_of(conversation(("user", "hi"), ("assistant", "hello"), ("Old Woman", "well"), ("Speaker 1", "ok"), ("#ALL#", "yes")))
    assert not [n for n in found if n.startswith("PERSON:")]


def test_heuristic_names_only_in_tool_output_need_several_tool_turns_and_a_definition() -> None:
    listing = "migrate_ids.py\nNOTES.md\nsrc/store/lazy_queue.py"
    once = nodes_of(conversation(("user", "fix the queue"), ("tool", listing), ("assistant", "I will edit src/store/lazy_queue.py")))
    assert set(once) == {"FILE:src/store/lazy_queue.py"}  # named by the assistant: kept; the rest only listed once
    # Repetition alone is boilerplate: the same listing after every command makes no node.
    assert nodes_of(conversation(*[("tool", listing)] * TOOL_ONLY_MIN_TURNS)) == {}
    view = "   12\tclass OrderedSet(MutableSet):\n   13\t    pass\nOrderedSet used by BaseCache"
    defined = nodes_of(conversation(*[("tool", view)] * TOOL_ONLY_MIN_TURNS))
    assert set(defined) == {"CLASS:OrderedSet"}  # the code of it was shown: kept; BaseCache only used
    assert nodes_of(conversation(*[("tool", view)] * (TOOL_ONLY_MIN_TURNS - 1))) == {}


def test_heuristic_text_pasted_into_a_message_is_tool_output() -> None:
    docs = "".join(f"<doc>\nSee [the docs](https://aider.chat/docs/d{i}.html) and help-tip.md\n</doc>\n" for i in range(3))
    found = nodes_of(conversation(("user", f"/help how do I add drv.py?\n\n# Relevant docs:\n\n{docs}"), ("assistant", "Use /add.")))
    assert set(found) == {"FILE:drv.py"}  # the question is the person's; the pasted documents are not
    # One block is no list of pasted documents (a task's <pr_description>), nor is the agent's own text.
    task = "<pr_description>\nFix drv.py, see https://example.org/bug\n</pr_description>"
    assert set(nodes_of(conversation(("user", task)))) == {"FILE:drv.py", "FILE:https://example.org/bug"}
    own = nodes_of(conversation(("user", "edit it"), ("assistant", "<source>\ndrv.py\n</source>\n<source>\nmain.js\n</source>")))
    assert set(own) == {"FILE:drv.py", "FILE:main.js"}


def test_heuristic_a_document_the_agent_writes_out_is_its_text_not_the_agents_words() -> None:
    history = "HISTORY.md\n```\n# Release history\n- Support for OpenRouter, see https://aider.chat/docs/llms.html\n```\n"
    code = "aider/io.py\n```python\n<<<<<<< SEARCH\n    self.tool_output()\n=======\n    self.tool_error()\n>>>>>>> REPLACE\n```"
    found = nodes_of(conversation(("user", "translate it"), ("assistant", f"Here it is:\n\n{history}\nand {code}")))
    # The document's file is what the agent works on; its links and product names are its text (issue 11,
    # fifth round). A code file's edit is the agent's code.
    assert set(found) == {"FILE:HISTORY.md", "FILE:aider/io.py", "METHOD:self.tool_output", "METHOD:self.tool_error"}


def test_heuristic_hidden_markup_and_url_queries() -> None:
    issue = ("<!-- Please read CONTRIBUTING.md and https://github.com/org/repo/blob/main/CODE_OF_CONDUCT.md -->\n"
             "Loading http://host/file.pl?flag and http://host/file.pl?/flag fails in drv.py")
    found = nodes_of(conversation(("user", issue)))
    # An issue template's comment is hidden text; a URL's query string is a request to one page.
    assert set(found) == {"FILE:http://host/file.pl", "FILE:drv.py"}
    page = '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1.dtd">\n<p>hi</p>'
    assert nodes_of(conversation(*[("tool", page)] * (TOOL_ONLY_MIN_TURNS + 1))) == {}
    # The agent's own HTML comments are its code, kept.
    assert "FILE:leaderboard.yml" in nodes_of(conversation(("user", "go"), ("assistant", "<!-- cog: load leaderboard.yml -->")))


def test_heuristic_bare_conventional_file_names_name_no_file() -> None:
    text = ("Read pyproject.toml, setup.cfg, pytest.ini, manage.py and __init__.py first; the fix is in "
            "django/forms/__init__.py and drv.py.")
    found = nodes_of(conversation(("user", text), ("assistant", text)))
    assert set(found) == {"FILE:django/forms/__init__.py", "FILE:drv.py"}


def test_heuristic_python_itself_is_no_node_but_the_projects_calls_are() -> None:
    text = ("for k, v in seen.items(): f.readlines(); a.all(); _cache.keys(); traceback.print_exc(); os.path.join(); x is NoneType\n"
            "self.add(); self.alias_map.items(); connection.schema_editor(); QuerySet.filter(); MyModel.objects.all()")
    found = nodes_of(conversation(("assistant", text)))
    assert set(found) == {"METHOD:self.add", "METHOD:connection.schema_editor", "METHOD:QuerySet.filter", "METHOD:MyModel.objects.all"}


def test_heuristic_incidental_calls_languages_and_test_named_settings_are_no_nodes() -> None:
    text = ("q1.deconstruct(); qs2.first(); main(); self.temp_dir.__enter__(); JavaScript and MySQL\n"
            "  - test_cmd: []\n    test_file = Path('x')\n"
            "h5py.File(); cli.main(); Message.__init__(); self.__init__(); connection.schema_editor(); "
            "test_relim and test_check_equality == 1")
    found = nodes_of(conversation(("assistant", text)))
    # Issue 11, fifth round: a numbered throwaway instance's method, a bare main(), a dunder on a
    # variable, a language's name, a setting or variable named like a test: none names the project's code.
    assert set(found) == {"METHOD:h5py.File", "METHOD:cli.main", "METHOD:Message.__init__", "METHOD:self.__init__",
                          "METHOD:connection.schema_editor", "TEST:test_relim", "TEST:test_check_equality"}
    # A test named by its kind in an explanation is a placeholder; a test called on a variable so named is not.
    explained = nodes_of(conversation(("assistant", "a class `TestClass` and method `test_method`; test_case.test_reproduction()"),
                                      ("assistant", "Now `test_case.test_reproduction()` passes.")))
    assert set(explained) == {"CLASS:TestClass", "METHOD:test_case.test_reproduction"}


def test_heuristic_the_standard_librarys_mocks_are_no_nodes() -> None:
    # Issue 11, sixth round (aider's own chat history): the mock API on any mock, the mock classes
    # and a patched stand-in named after what it patches are the test's scaffolding.
    edit = ("```python\n    with patch(\"aider.base_coder.RepoMap\") as MockRepoMap:\n        coder.repo = MagicMock()\n"
            "        main([\"--map-tokens\", \"0\"], input=DummyInput())\n        MockRepoMap.assert_not_called()\n"
            "        mock_prompt.assert_called_once()\n        mock_prompt.reset_mock()\n```")
    found = nodes_of(conversation(("user", "fix the test"), ("assistant", edit), ("assistant", "`MockRepoMap` stands in for `RepoMap`; `MagicMock()` again")))
    assert set(found) == {"CLASS:DummyInput", "CLASS:RepoMap"}


def test_heuristic_a_name_imported_from_the_standard_library_is_no_node() -> None:
    # Issue 11, thirteenth round: a class or a call the unit imports by name from the standard
    # library (StringIO, OrderedDict, Path.home) was labelled noise 8 times in 9; the project's
    # own imports, and the same names where the unit imports them from elsewhere, stay.
    edit = ("```python\nfrom io import StringIO\n+from pathlib import Path, PurePath as PP\n"
            "from collections import (OrderedDict, defaultdict)\nfrom aider.io import InputOutput\n"
            "buf = StringIO()\nhome = Path.home()\ncache = OrderedDict()\nio = InputOutput(pretty=False)\n```")
    found = nodes_of(conversation(("user", "fix InputOutput"), ("assistant", edit), ("assistant", "`InputOutput` now reads `Path.home()`.")))
    assert set(found) == {"CLASS:InputOutput"}
    elsewhere = nodes_of(conversation(("user", "fix the buffer"), ("assistant", "```python\nfrom mylib.buffers import StringIO\nbuf = StringIO()\n```"),
                                      ("assistant", "`StringIO` is ours.")))
    assert set(elsewhere) == {"CLASS:StringIO"}


def test_heuristic_a_sed_substitution_is_no_file() -> None:
    # Issue 11, fourteenth round: mini-swe-agent edits with sed; the `s/` of a quoted substitution
    # made "files" of the code it replaces (`s/self.config.pluginmanager._duplicatepaths.add`).
    command = ("```bash\nsed -i 's/self.config.pluginmanager._duplicatepaths.add(pkginit)/pass/' src/_pytest/main.py\n"
               "sed -i \"s/re.compile(r'x')/re.compile(r'y')/g\" tests/test_writer.py\n```")
    found = nodes_of(conversation(("user", "fix it"), ("assistant", command), ("assistant", "Done: `src/_pytest/main.py` and `docs/s/x.py`.")))
    assert {n for n in found if n.startswith("FILE:")} == {"FILE:src/_pytest/main.py", "FILE:tests/test_writer.py", "FILE:docs/s/x.py"}


def test_heuristic_a_standalone_scripts_scaffolding_is_no_node() -> None:
    # Issue 11, eighth round: mini-swe-agent's reproduction scripts configure Django, declare an
    # app and subclass the test framework's base class; said again in the agent's prose, those
    # were still labelled noise. The script's own test class and the issue's class stay.
    script = ("```bash\ncat <<'EOF' > reproduce.py\nimport django\nfrom django.conf import settings\n"
              "settings.configure(INSTALLED_APPS=[\"reproduce_app\"])\ndjango.setup()\n"
              "from django.apps import AppConfig\nfrom django.test import TestCase\n"
              "class ReproduceAppConfig(AppConfig):\n    name = \"reproduce_app\"\n"
              "class ExperimentTest(TestCase):\n    def test_subtraction(self):\n"
              "        Experiment.objects.annotate(delta=F(\"end\") - F(\"start\"))\nEOF\npython reproduce.py\n```")
    found = nodes_of(conversation(
        ("user", "make temporal subtraction work without ExpressionWrapper"), ("assistant", script),
        ("tool", "FieldError: Expression contains mixed types: DateTimeField, DurationField."),
        ("assistant", "`django.setup()` ran and `ReproduceAppConfig` loaded; `TestCase` fails in `ExperimentTest`, so "
                      "`settings.configure()` is right and `ExpressionWrapper` is still needed."),
    ))
    assert not {"METHOD:django.setup", "METHOD:settings.configure", "CLASS:TestCase", "CLASS:AppConfig", "CLASS:ReproduceAppConfig"} & set(found)
    assert {"CLASS:ExperimentTest", "CLASS:ExpressionWrapper", "FILE:reproduce.py", "TEST:test_subtraction"} <= set(found)


def test_heuristic_a_call_on_a_variable_said_once_in_a_coding_session_is_no_node() -> None:
    # Issue 11, sixth round: `pager.run()` in one edit of aider's history is the library's call.
    edit = ("aider/commands.py\n```python\n            source = StringSource(diff)\n            pager = Pager()\n"
            "            pager.add_source(source)\n            pager.run()\n        else:\n            self.io.tool_output()\n```")
    found = nodes_of(conversation(("user", "paginate the diff"), ("assistant", edit)))
    assert "METHOD:pager.run" not in found
    # The class's own calls, a model's manager and a method the unit defines stay; so does a call said again.
    assert {"METHOD:self.io.tool_output", "FILE:aider/commands.py"} <= set(found)
    defined = ("`expression.get_group_by_cols()` returns `[self]`; Book.objects.all() too\n"
               "```python\n    def get_group_by_cols(self, alias=None):\n```")
    assert {"METHOD:expression.get_group_by_cols", "METHOD:Book.objects.all"} <= set(nodes_of(conversation(("user", "go"), ("assistant", defined))))
    again = nodes_of(conversation(("user", "go"), ("assistant", edit), ("assistant", "`pager.run()` blocks until `q`.")))
    assert "METHOD:pager.run" in again


def test_heuristic_a_prose_name_said_once_in_a_coding_session_is_no_node() -> None:
    # Issue 11, sixth round: aider's settings dump (`Config File (…):`) and a CTF heading said once.
    dump = "Environment Variables:\n  OPENAI_API_KEY:    ...9doi\nConfig File (/Users/gauthier/Projects/aider/.aider.conf.yml):\n  lint-cmd: x"
    coding = conversation(("user", "/settings"), ("tool", "$ aider --verbose"), ("assistant", dump))
    assert "CONCEPT:config file" not in nodes_of(coding)
    said_twice = conversation(("user", "`solve.py` uses the Chinese Remainder Theorem"), ("tool", "$ ls"),
                              ("assistant", "Right, the Chinese Remainder Theorem gives `x`."))
    assert "CONCEPT:chinese remainder theorem" in nodes_of(said_twice)
    # Chat is no coding session: a name said once there stays.
    assert set(nodes_of(conversation(("user", "Alice met Bob in Paris.")))) == {"PERSON:Alice", "PERSON:Bob", "PLACE:Paris"}


def test_heuristic_a_name_shown_once_in_a_busy_turn_outside_any_edit_is_no_node() -> None:
    # Issue 11, seventh round: a long answer quoting a module's imports (mini-swe-agent on
    # django-12308) shows two dozen names; one shown there only, and in no edit, is incidental.
    widgets = ("CheckboxInput ClearableFileInput DateInput DateTimeInput EmailInput FileInput HiddenInput MultipleHiddenInput "
               "NullBooleanSelect NumberInput SelectMultiple SplitDateTimeWidget SplitHiddenDateTimeWidget TextInput TimeInput "
               "URLInput JSONField BoundField ValidationError ImproperlyConfigured").split()
    quote = ("THOUGHT: `django/forms/fields.py` imports:\n```python\nfrom io import BytesIO\nfrom django.forms.widgets import (\n    "
             + ",\n    ".join(widgets) + ",\n)\n```\nSo `JSONField.prepare_value` must handle `InvalidJSONInput`.")
    focused = "THOUGHT: `JSONField.prepare_value()` in `django/forms/fields.py` is the place; `InvalidJSONInput` stays a `str`."
    found = nodes_of(conversation(("user", "Fix `JSONField` display in the admin"), ("assistant", quote), ("assistant", focused)))
    assert "CLASS:DateTimeInput" not in found and "CLASS:TextInput" not in found
    assert {"CLASS:InvalidJSONInput", "METHOD:JSONField.prepare_value", "FILE:django/forms/fields.py"} <= set(found)
    # The same names shown once in a quiet turn stay, and so do those an edit writes in a busy turn.
    assert "CLASS:DateTimeInput" in nodes_of(conversation(("user", "go"), ("assistant", "`DateTimeInput` renders it; see `TextInput`.")))
    edit = ("django/forms/widgets.py\n```python\n<<<<<<< SEARCH\n__all__ = (\n    'TextInput',\n)\n=======\n__all__ = (\n    "
            + ",\n    ".join(f"'{w}'" for w in widgets) + ",\n)\n>>>>>>> REPLACE\n```\n" + " ".join(f"`{w}`" for w in widgets))
    written = nodes_of(conversation(("user", "export the widgets"), ("assistant", edit)))
    assert {"CLASS:DateTimeInput", "CLASS:TextInput"} <= set(written)


def test_heuristic_temporary_files_name_no_file() -> None:
    text = "Saved ../../private/var/folders/49/kx/T/tmplacu1lv7.png and out/tmpab12cd34.json; see scripts/reproduce.py"
    assert set(nodes_of(conversation(("assistant", text)))) == {"FILE:scripts/reproduce.py"}


def test_heuristic_prose_of_a_coding_session_is_not_conversation() -> None:
    # Without code in the unit, a lone capitalised word inside a sentence reads as a name ...
    assert "CONCEPT:python" in nodes_of(conversation(("user", "we use it"), ("assistant", "pip is the installer for Python.")))
    # ... in a coding session (tool output or Markdown code in the unit) it is more often a language or code.
    coding = conversation(("user", "install `pandas`"), ("tool", "$ pip list"), ("assistant", "pip is the installer for Python."))
    assert nodes_of(coding) == {}
    # ¿ and ¡ open a sentence: the capital after them is no name.
    assert nodes_of(conversation(("assistant", "¿Puedes compartir los archivos?"))) == {}


def test_heuristic_elided_paths_name_no_file() -> None:
    found = {(m.node_type, m.name) for m in find_mentions("It fails in .../componenttest/__init__.py, not in src/a/b.py")}
    assert ("FILE", "src/a/b.py") in found
    assert not any("componenttest" in name for _, name in found)


def test_heuristic_agent_prose_about_code_makes_no_people_or_places() -> None:
    text = "The Query class in Django handles `Value` joins.\n1. Configure Django settings.\n2. Call super() on a ValueError."
    assert set(nodes_of(conversation(("assistant", text)))) == set()


def test_heuristic_dates_are_stripped_but_names_that_start_like_dates_stay() -> None:
    found = nodes_of(conversation(("Ross Geller", "We moved to New York on New Year's Eve. Happy Birthday! Last Friday "
                                                  "and Tomorrow Night I work the Night Shift.")))
    assert set(found) == {"PERSON:Ross Geller", "PLACE:New York", "CONCEPT:night shift"}


def _commit(db: Database, sid: str, *texts: str) -> CommitStats:
    work = WorkUnit(f"{sid}:chunk:0", sid, 0, tuple(UnitTurn(n, f"{sid}-m{n}", t) for n, t in enumerate(texts, 1)), "h")
    reduced = reduce_session(sid, [validate_extraction(extract_heuristic(work), work, semantic_types=TYPES)])
    graph = GraphStore(db)
    graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid)] + [Node(f"memory:{sid}-m{n}", "MEMORY", "m") for n in range(1, len(texts) + 1)])
    return commit_session(reduced, unit=DatabaseUnitOfWork(db), graph_index=SemanticIndex(db), on_commit=lambda: None, queue_append=len)


def test_a_re_extraction_takes_back_what_it_no_longer_says(tmp_path: Path) -> None:
    db = Database(tmp_path / "g.sqlite3")
    try:
        graph, points = GraphStore(db), ProvenanceStore(db)
        _commit(db, "a", "The LazyEdgeQueue feeds GraphStore.")
        _commit(db, "b", "The LazyEdgeQueue feeds GraphStore and DrainWorker.")
        key = ("CLASS:GraphStore", "CLASS:LazyEdgeQueue", "RELATES_TO")
        assert graph.get_edge(*key).weight == 2.0
        # b again, now without GraphStore and DrainWorker: b's points on them go, DrainWorker
        # (only b said it) is removed, the shared edge falls back to a's weight
        again = _commit(db, "b", "The LazyEdgeQueue stays.")
        assert again.nodes_removed == 1 and graph.get_node("CLASS:DrainWorker") is None
        assert graph.get_edge(*key).weight == 1.0
        assert {p.anchor for p in points.node_points("CLASS:GraphStore")} == {"session:a"}
        assert graph.get_edge("CLASS:GraphStore", "session:b", "DISCUSSED_IN") is None
        assert graph.get_edge("CLASS:GraphStore", "memory:b-m1", "MENTIONED_IN") is None
        assert graph.get_edge("CLASS:LazyEdgeQueue", "memory:b-m1", "MENTIONED_IN") is not None
        # and committing it twice changes nothing
        before = (graph.all_nodes(), graph.all_edges())
        assert _commit(db, "b", "The LazyEdgeQueue stays.").nodes_written == 0
        assert (graph.all_nodes(), graph.all_edges()) == before
    finally:
        db.close()


def test_facts_a_session_takes_back_are_recombined_from_the_other_claims(tmp_path: Path) -> None:
    db = Database(tmp_path / "g.sqlite3")
    try:
        graph = GraphStore(db)
        raw = {"summary": "", "nodes": [{"id": "q", "type": "CLASS", "name": "LazyEdgeQueue", "description": "{d}",
                                          "aliases": ["{a}"], "evidence": [{"turn": 1, "quote": "LazyEdgeQueue"}]}], "edges": []}

        def commit(sid: str, description: str, alias: str) -> None:
            work = WorkUnit(f"{sid}:chunk:0", sid, 0, (UnitTurn(1, f"{sid}-m1", "LazyEdgeQueue"),), "h")
            data = json.loads(json.dumps(raw).replace("{d}", description).replace("{a}", alias))
            reduced = reduce_session(sid, [validate_extraction(data, work, semantic_types=TYPES)])
            graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), Node(f"memory:{sid}-m1", "MEMORY", "m")])
            commit_session(reduced, unit=DatabaseUnitOfWork(db), graph_index=SemanticIndex(db), on_commit=lambda: None, queue_append=len)

        commit("a", "short", "the queue")
        commit("b", "a much longer description", "LEQ")
        node = graph.get_node("CLASS:LazyEdgeQueue")
        assert node.properties["description"] == "a much longer description" and "LEQ" in node.properties["aliases"]
        assert [r[0] for r in db.query("SELECT node_id FROM node_aliases WHERE alias_key = 'leq'")] == ["CLASS:LazyEdgeQueue"]
        commit("b", "tiny", "lazy queue")
        node = graph.get_node("CLASS:LazyEdgeQueue")
        assert node.properties["description"] == "short"
        assert "LEQ" not in node.properties["aliases"] and {"the queue", "lazy queue"} <= set(node.properties["aliases"])
        assert db.query("SELECT COUNT(*) FROM node_aliases WHERE alias_key = 'leq'")[0][0] == 0
    finally:
        db.close()


class _ListLookup:
    """store.facts.ClaimLookup over a list of claims (what the database answers, in memory)."""

    def __init__(self, claims: list[NodeFacts]) -> None:
        self.claims = claims

    def says_description(self, text: str) -> bool:
        return any(c.description == text for c in self.claims)

    def says_confidence(self, value: float) -> bool:
        return any(c.confidence == value for c in self.claims)

    def says_alias(self, alias: str) -> bool:
        return any(alias in c.aliases for c in self.claims)

    def says_tag(self, tag: str) -> bool:
        return any(tag in c.tags for c in self.claims)

    def best_description(self) -> str:
        return combine_all(self.claims).description

    def max_confidence(self) -> float:
        return combine_all(self.claims).confidence


_WORDS = st.sampled_from(["", "a", "b", "ab", "ba", "abc", "queue", "Queue"])
_FACTS = st.builds(
    lambda d, a, t, c: NodeFacts.of(description=d, aliases=a, tags=t, confidence=c),
    _WORDS, st.lists(_WORDS, max_size=3), st.lists(_WORDS, max_size=2), st.sampled_from([0.0, 0.5, 0.9, 1.0]),
)


@given(st.lists(_FACTS, min_size=1, max_size=6), st.data())
def test_taking_one_claim_out_equals_combining_the_others(claims: list[NodeFacts], data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(claims) - 1))
    others = claims[:k] + claims[k + 1 :]
    assert without_claim(combine_all(claims), claims[k], _ListLookup(others)) == combine_all(others)


def test_take_backs_leave_the_facts_all_claims_give(tmp_path: Path) -> None:
    """Re-extractions that take things back and forgotten sessions, at random: a node's facts stay
    the combination of its claims (read here in full, as the commit no longer does)."""
    rng = random.Random(5)
    db = Database(tmp_path / "g.sqlite3")
    try:
        graph, provenance = GraphStore(db), ProvenanceStore(db)
        words = ["q", "queue", "lazy queue", "LEQ", "the edge queue", "edges"]

        def commit(sid: str) -> None:
            node = {"id": "q", "type": "CLASS", "name": "LazyEdgeQueue", "description": rng.choice(words),
                    "aliases": rng.sample(words, rng.randrange(3)), "tags": rng.sample(words, rng.randrange(2)),
                    "confidence": rng.choice([0.3, 0.6, 0.9]), "evidence": [{"turn": 1, "quote": "LazyEdgeQueue"}]}
            work = WorkUnit(f"{sid}:chunk:0", sid, 0, (UnitTurn(1, f"{sid}-m1", "LazyEdgeQueue"),), "h")
            reduced = reduce_session(sid, [validate_extraction({"summary": "", "nodes": [node], "edges": []}, work, semantic_types=TYPES)])
            graph.upsert_nodes([Node(f"session:{sid}", "SESSION", sid), Node(f"memory:{sid}-m1", "MEMORY", "m")])
            commit_session(reduced, unit=DatabaseUnitOfWork(db), graph_index=SemanticIndex(db), on_commit=lambda: None, queue_append=len)

        sessions = [f"s{i}" for i in range(8)]
        for sid in sessions:
            commit(sid)
        for step in range(40):
            sid = rng.choice(sessions)
            if step % 7 == 6:
                forget_session(DatabaseUnitOfWork(db), sid)
                sessions.remove(sid)
                commit(f"n{step}")
                sessions.append(f"n{step}")
            else:
                commit(sid)  # a re-extraction that says something else
            node = graph.get_node("CLASS:LazyEdgeQueue")
            assert facts_of(node.properties) == facts_from_claims(provenance.claims(node.id)), step
    finally:
        db.close()
