"""Notes import: files through chunk → extract → reduce → commit with the file as anchor;
re-importing an unchanged file costs nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from config import Settings
from pipelines.notes import find_note_paths, note_turns, read_note
from store.provenance import ProvenanceStore
from store.db import Database
from store.graph import GraphStore
from tests.conftest import run_cli
from tests.test_graph import dump as graph_dump
from worker.knowledge import import_notes, snapshot_from_db

DESIGN = """# Queue design

The LazyEdgeQueue appends one line per edge to store/lazy_queue.py files.

The DrainWorker renames the queue first, then reads it. See #42.
"""
RUNBOOK = "Restart the DrainWorker when the LazyEdgeQueue stalls.\n"


def _notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    (folder / "ops").mkdir(parents=True)
    (folder / "design.md").write_text(DESIGN, encoding="utf-8")
    (folder / "ops" / "runbook.txt").write_text(RUNBOOK, encoding="utf-8")
    (folder / ".hidden.md").write_text("SecretThing lives here.", encoding="utf-8")
    (folder / "diagram.png").write_bytes(b"\x89PNG")
    return folder


def test_find_files_and_paragraph_turns(tmp_path: Path) -> None:
    folder = _notes(tmp_path)
    found, errors = find_note_paths([folder, folder / "design.md", tmp_path / "missing.md"])
    files = [read_note(path, shown) for path, shown in found]
    assert [f.path.name for f in files] == ["design.md", "runbook.txt"]
    assert errors == [f"{tmp_path / 'missing.md'}: no such file or folder"]
    design = files[0]
    assert design.note_id == "note:" + hashlib.sha256(str((folder / "design.md").resolve()).encode()).hexdigest()[:16]
    assert [t.text.split()[0] for t in note_turns(design)] == ["#", "The", "The"]


async def test_import_reimport_and_change(settings: Settings, tmp_path: Path) -> None:
    folder = _notes(tmp_path)
    first = await import_notes(settings, [str(folder)])
    assert (first["imported"], first["unchanged"], first["failed"]) == (2, 0, 0)
    design_id = next(f["note_id"] for f in first["files"] if f["path"].endswith("design.md"))
    db = Database(settings.graph_path)
    try:
        graph = GraphStore(db)
        note = graph.get_node(design_id)
        assert note.label == "NOTE" and note.properties["path"] == str((folder / "design.md").resolve())
        queue = graph.get_node("CLASS:LazyEdgeQueue")
        points = ProvenanceStore(db).node_points("CLASS:LazyEdgeQueue")
        assert {p.anchor for p in points} == {design_id, next(f["note_id"] for f in first["files"] if f["note_id"] != design_id)}
        point = next(p for p in points if p.anchor == design_id)
        assert point.memory == "" and point.evidence == "LazyEdgeQueue" and point.chunk_id.startswith("note-")
        assert graph.get_edge("CLASS:LazyEdgeQueue", design_id, "DISCUSSED_IN") is not None
        assert graph.get_node("ISSUE:#42") is not None and graph.get_node("CLASS:SecretThing") is None
        snap = snapshot_from_db(db)
        assert snap["file_sources"][design_id] == str((folder / "design.md").resolve())
        assert design_id in snap["node_sessions"]["CLASS:LazyEdgeQueue"]
    finally:
        db.close()
    before = graph_dump(settings.graph_path)

    again = await import_notes(settings, [str(folder)])
    assert (again["imported"], again["unchanged"]) == (0, 2)
    assert graph_dump(settings.graph_path) == before

    (folder / "design.md").write_text(DESIGN + "\nThe GraphStore keeps the edges.\n", encoding="utf-8")
    changed = await import_notes(settings, [str(folder)])
    assert (changed["imported"], changed["unchanged"]) == (1, 1)
    design = next(f for f in changed["files"] if f["note_id"] == design_id)
    assert design["chunks"] == 1 and design["nodes_written"] > 0
    db = Database(settings.graph_path)
    try:
        assert GraphStore(db).get_edge("CLASS:GraphStore", design_id, "DISCUSSED_IN") is not None
    finally:
        db.close()


def test_cli_import_notes(tmp_path: Path) -> None:
    folder = _notes(tmp_path)
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    done = run_cli("import-notes", str(folder / "design.md"), "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["imported"] == 1 and report["files"][0]["path"] == str(folder / "design.md")
    text = run_cli("import-notes", str(folder / "design.md"), str(tmp_path / "nope.md"), env=env)
    assert text.returncode == 1 and "unchanged" in text.stdout and "no such file" in text.stderr


def test_references_in_notes_link_rows_to_the_file(tmp_path: Path) -> None:
    from tests.conftest import write_sessions

    env = {"REM_DATA_DIR": str(tmp_path / "data")}

    def session(sid: str) -> dict:
        return {"sessionId": sid, "title": sid, "createdAt": "2026-11-01T10:00:00Z", "summary": f"about {sid}",
                "turns": [{"id": f"{sid}-t{i}", "role": "user", "text": f"turn {i} of {sid}"} for i in range(2)]}

    assert run_cli("import", str(write_sessions(tmp_path / "ab.jsonl", [session("a"), session("b")])), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    # c is in Chroma but not in the graph yet; nope is nowhere.
    assert run_cli("import", str(write_sessions(tmp_path / "c.jsonl", [session("c")])), env=env).returncode == 0
    note = tmp_path / "decisions.md"
    note.write_text(
        "We chose rename-then-drain, see memory:a-t0 and session:b.\n\nThe crash is in memory:c-t1; memory:nope-t9 was lost.\n",
        encoding="utf-8",
    )
    done = run_cli("import-notes", str(note), "--json", env=env)
    assert done.returncode == 0, done.stderr
    note_id = json.loads(done.stdout)["files"][0]["note_id"]
    db = Database(tmp_path / "data" / "graph.sqlite3")
    try:
        graph = GraphStore(db)
        assert graph.get_edge("memory:a-t0", note_id, "REFERENCED_BY") is not None
        assert graph.get_edge("session:b", note_id, "REFERENCED_BY") is not None
        assert graph.get_node("memory:c-t1") is None  # not made up: queued for the drain
    finally:
        db.close()
    queued = [json.loads(line) for line in (tmp_path / "data" / "lazy-edges.jsonl").read_text().splitlines()]
    assert {(q["source"], q["target"]) for q in queued} == {("memory:c-t1", note_id), ("memory:nope-t9", note_id)}
    drained = run_cli("drain", "--json", env=env)
    assert drained.returncode == 0, drained.stderr
    db = Database(tmp_path / "data" / "graph.sqlite3")
    try:
        graph = GraphStore(db)
        assert graph.get_edge("memory:c-t1", note_id, "REFERENCED_BY") is not None  # back-filled from Chroma
        assert graph.get_node("memory:nope-t9") is None
    finally:
        db.close()
