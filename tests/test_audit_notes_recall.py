"""Recall's facts and their provenance, adversarially (audit-notes), on both engines: a real cycle
over real Chroma, notes imported by the real import path, recall read through the index."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from tests.test_recall import SESSIONS, ask, build
from worker.knowledge import import_notes
from worker.recall import search_nodes, show_node

pytestmark = pytest.mark.timeout(120)

NOTE = "The FrobnicatorService writes through the LazyEdgeQueue.\n\nThe BazQuxAdapter wraps the FrobnicatorService.\n"
SESSION_OF = {f"memory:{turn['id']}": f"session:{s['sessionId']}" for s in SESSIONS for turn in s["turns"]}


@pytest.mark.both_backends
async def test_every_quote_recall_serves_names_the_session_or_notes_file_it_came_from(settings: Settings, tmp_path: Path) -> None:
    # A fact or relation known from a notes file came with its quote and `memory_id: null`, and
    # nothing else: an agent could not tell where the quote was written (README: every result is
    # traceable). Each quote now carries `session_id`: its session, or the note:<id> of its file.
    await build(settings, tmp_path)
    note = tmp_path / "frob.md"
    note.write_text(NOTE, encoding="utf-8")
    report = await import_notes(settings, [str(note)])
    note_id = report["files"][0]["note_id"]

    answer = ask(settings, "FrobnicatorService BazQuxAdapter LazyEdgeQueue", budget_tokens=50_000)
    facts = {f["id"]: f for f in answer["facts"]}
    frob = facts["CLASS:FrobnicatorService"]
    assert (frob["memory_id"], frob["session_id"]) == (None, note_id)
    assert frob["edges"] and all((e["memory_id"], e["session_id"]) == (None, note_id) for e in frob["edges"])
    queue = facts["CLASS:LazyEdgeQueue"]
    quotes = [(queue["memory_id"], queue["session_id"]), *((e["memory_id"], e["session_id"]) for e in queue["edges"])]
    for memory_id, session_id in quotes:  # a turn's quote: the turn and its own session, from one point
        assert session_id is not None
        assert session_id == note_id if memory_id is None else session_id == SESSION_OF[memory_id], (memory_id, session_id)
    assert any(m is not None for m, _ in quotes)

    found = {n["id"]: n for n in search_nodes(settings, "FrobnicatorService")["nodes"]}
    assert found["CLASS:FrobnicatorService"]["session_id"] == note_id
    shown = show_node(settings, "CLASS:FrobnicatorService", budget_tokens=5_000)
    assert shown is not None and shown["session_id"] == note_id and shown["turns"] == []


ACCENTS = [{
    "sessionId": "u1", "title": "Accents", "createdAt": "2026-11-01T10:00:00Z", "userId": "carol", "summary": "cafés",
    "turns": [
        {"id": "composed", "role": "user", "createdAt": "2026-11-01T10:00:00Z", "text": "The café on Main Street closes at noon."},
        {"id": "decomposed", "role": "user", "createdAt": "2026-11-01T10:01:00Z",
         "text": "The cafe\u0301 by the station opens early."},
        {"id": "other", "role": "user", "createdAt": "2026-11-01T10:02:00Z", "text": "The bakery sells bread."},
    ],
}]


@pytest.mark.both_backends
async def test_a_word_is_found_whether_its_accent_is_composed_or_decomposed(settings: Settings, tmp_path: Path) -> None:
    # "café" is one character (U+00E9) or "e" + a combining acute (U+0301, as macOS and some
    # keyboards write it). SQLite's tokenizer folds both to "cafe"; PostgreSQL indexes each as
    # written, so there a composed query missed the decomposed turn, and a decomposed query lost
    # its accent altogether (the mark is no word character): "cafe" found neither.
    await build(settings, tmp_path, ACCENTS)
    for query in ("café", "cafe\u0301", "CAFÉ", "CAFE\u0301"):
        answer = ask(settings, query)
        assert answer["signals"]["terms"]["used"] == ["café"], query
        found = {t["memory_id"] for t in answer["turns"] if "keyword" in t["signals"]}
        assert found == {"memory:composed", "memory:decomposed"}, (query, found)
