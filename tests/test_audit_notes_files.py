"""Notes files and their provenance, adversarially (audit-notes): ``import-notes``, ``show``,
``recall`` and ``forget`` through the real CLI (``python -m worker``) on real SQLite and Chroma."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import copy_digested_sample, make_session, run_cli, write_sessions

pytestmark = pytest.mark.timeout(180)

DESIGN = """# Frobnicator design

The FrobnicatorService writes through the GraphStore.

We chose the FrobnicatorService over the BazQuxAdapter because of #77.
"""


def _imported(tmp_path: Path, env: dict[str, str]) -> tuple[Path, str]:
    """design.md imported by its relative name from its own folder; its file and note id."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "design.md").write_text(DESIGN, encoding="utf-8")
    done = run_cli("import-notes", "design.md", "--json", env=env, cwd=folder)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["imported"] == 1
    return folder / "design.md", report["files"][0]["note_id"]


def test_forget_note_takes_the_note_id_that_every_reader_prints(tmp_path: Path) -> None:
    # import-notes, show and export name a notes file by its note:<id>; forget --note took only a
    # path, resolved against the working directory: the id (or the name given from another
    # directory, or a file since moved away) was hashed as a path of its own, and forget said
    # "note note:<another id> is not in the graph: nothing was removed", exit 0.
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    file, note_id = _imported(tmp_path, env)
    shown = json.loads(run_cli("show", "CLASS:FrobnicatorService", "--json", env=env).stdout)
    assert note_id in {s["id"] for s in shown["sources"]}
    file.unlink()  # moved away since: the id still names it

    elsewhere = run_cli("forget", "--note", "design.md", "--dry-run", "--json", env=env)  # from the project dir
    assert elsewhere.returncode == 0 and json.loads(elsewhere.stdout)["points"] == 0
    said = run_cli("forget", "--note", "design.md", "--dry-run", env=env).stdout
    assert "is not in the graph: nothing would be removed" in said and "named by the note:<id>" in said
    for given in (note_id, note_id.upper()):
        dry = run_cli("forget", "--note", given, "--dry-run", "--json", env=env)
        assert dry.returncode == 0, dry.stderr
        report = json.loads(dry.stdout)
        assert report["id"] == note_id and report["points"] > 0
        assert "CLASS:FrobnicatorService" in report["knowledge_nodes_removed"]
    done = run_cli("forget", "--note", note_id, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"removed note {note_id}:")
    assert run_cli("show", "CLASS:FrobnicatorService", env=env).returncode == 1
    assert run_cli("show", note_id, env=env).returncode == 1
    again = run_cli("forget", "--note", note_id, env=env)
    assert again.returncode == 0 and "is not in the graph: nothing was removed" in again.stdout


def test_show_prints_the_quotes_a_notes_file_gave_under_that_file(tmp_path: Path) -> None:
    # A notes file has no turns, so its points (the quote, the chunk) were never printed: `show` of
    # a node known from a file said only "from note …", and --json had no quote of it anywhere.
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    _, note_id = _imported(tmp_path, env)
    for extra in ((), ("--as-of", "9999-12-31")):
        done = run_cli("show", "CLASS:FrobnicatorService", "--json", *extra, env=env)
        assert done.returncode == 0, done.stderr
        view = json.loads(done.stdout)
        assert view["turns"] == []
        (source,) = view["sources"]
        assert (source["id"], source["label"]) == (note_id, "NOTE")
        assert source["evidence"] == ["FrobnicatorService"], extra
        assert source["chunks"] == [f"note-{note_id[5:]}:chunk:0"], extra
    text = run_cli("show", "CLASS:FrobnicatorService", env=env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"from note {note_id}:"))
    assert lines[at + 1].strip() == 'evidence: "FrobnicatorService"'


def test_an_edited_notes_file_keeps_the_time_of_what_it_already_said(tmp_path: Path) -> None:
    # A notes file's points are observed when it is imported. Re-importing it after an edit
    # re-timed every point of the file to the new import, so `--as-of` a moment between the two
    # imports no longer knew what the file had said since the first (and `first_seen` moved).
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    file, note_id = _imported(tmp_path, env)

    def view(node_id: str, *extra: str) -> dict:
        done = run_cli("show", node_id, "--json", *extra, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first = view("CLASS:FrobnicatorService")["first_seen"]
    with file.open("a", encoding="utf-8") as notes:
        notes.write("\nThe BlipCache sits beside the FrobnicatorService and the GraphStore.\n")
    again = run_cli("import-notes", str(file), "--json", env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["imported"] == 1, again.stderr
    assert view("CLASS:BlipCache")["first_seen"] > first
    assert view("CLASS:FrobnicatorService")["first_seen"] == first

    done = run_cli("export", "--as-of", first, env=env)
    assert done.returncode == 0, done.stderr
    then = json.loads(done.stdout)
    ids = {n["id"] for n in then["nodes"]}
    assert {"CLASS:FrobnicatorService", "CLASS:GraphStore", "CLASS:BazQuxAdapter", "ISSUE:#77"} <= ids
    assert "CLASS:BlipCache" not in ids
    assert ("CLASS:FrobnicatorService", "CLASS:GraphStore") in {(e["source"], e["target"]) for e in then["edges"]}
    assert then["node_sessions"]["CLASS:FrobnicatorService"] == [note_id]
    assert view("CLASS:FrobnicatorService", "--as-of", first)["sources"][0]["evidence"] == ["FrobnicatorService"]


def test_a_reference_an_edited_notes_file_no_longer_writes_leaves_the_graph(tmp_path: Path) -> None:
    # `memory:<id>` / `session:<id>` written in a note link that row to the file. After an edit that
    # removed a reference, the re-import replaced the file's points but kept the old link: export and
    # show said the file cites a turn it no longer names.
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    sessions = [{**make_session(sid, 2), "turns": [{"id": f"{sid}-t{i}", "role": "user", "text": f"turn {i} of {sid}"} for i in range(2)]}
                for sid in ("a", "b")]
    assert run_cli("import", str(write_sessions(tmp_path / "ab.jsonl", sessions)), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    note = tmp_path / "decisions.md"

    def references(text: str) -> set[str]:
        note.write_text(text, encoding="utf-8")
        done = run_cli("import-notes", str(note), "--json", env=env)
        assert done.returncode == 0, done.stderr
        note_id = json.loads(done.stdout)["files"][0]["note_id"]
        exported = run_cli("export", "--include-anchors", env=env)
        assert exported.returncode == 0, exported.stderr
        return {e["source"] for e in json.loads(exported.stdout)["edges"]
                if e["relationship"] == "REFERENCED_BY" and e["target"] == note_id}

    assert references("We chose rename-then-drain, see memory:a-t0 and session:b.\n") == {"memory:a-t0", "session:b"}
    assert references("We chose rename-then-drain, see memory:a-t0.\n") == {"memory:a-t0"}
    assert references("We chose rename-then-drain.\n") == set()
    assert references("Back to session:b and memory:b-t1.\n") == {"session:b", "memory:b-t1"}


def test_the_byte_order_mark_of_a_windows_notes_file_is_no_text(tmp_path: Path) -> None:
    # Notepad and PowerShell write UTF-8 with a byte order mark; it was read as text (U+FEFF) and
    # served as the first character of the descriptions, quotes and recall facts of the paragraph.
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    note = tmp_path / "windows.md"
    note.write_bytes("\ufeffFrobQueue is the queue of the BlipStore.\r\n\r\nThe BlipStore keeps it.\r\n".encode())
    done = run_cli("import-notes", str(note), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["imported"] == 1
    exported = run_cli("export", env=env)
    assert exported.returncode == 0, exported.stderr
    assert "\ufeff" not in exported.stdout and "\\ufeff" not in exported.stdout
    nodes = {n["id"]: n for n in json.loads(exported.stdout)["nodes"]}
    assert nodes["CLASS:FrobQueue"]["properties"]["description"] == "FrobQueue is the queue of the BlipStore."
    recalled = run_cli("recall", "FrobQueue", "--json", env=env)
    assert recalled.returncode == 0, recalled.stderr
    assert "\ufeff" not in recalled.stdout and "\\ufeff" not in recalled.stdout


def test_a_notes_file_gone_from_its_folder_is_reported_with_how_to_take_it_out(tmp_path: Path) -> None:
    # Re-importing a folder after a file was deleted or moved out of it said nothing of that file:
    # the graph kept serving what it said, and nothing told the user, nor which id forgets it.
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (tmp_path / "notes2").mkdir()
    (folder / "keep.md").write_text("The KeptThing stays.\n", encoding="utf-8")
    (folder / "sub" / "old.md").write_text("The OldThing goes.\n", encoding="utf-8")
    (folder / "renamed.md").write_text("The RenamedThing moves.\n", encoding="utf-8")
    (tmp_path / "notes2" / "other.md").write_text("The OtherThing is elsewhere.\n", encoding="utf-8")
    (folder / "named.rst").write_text("The NamedThing is named on its own.\n", encoding="utf-8")  # no folder scan finds it
    first = run_cli("import-notes", str(folder), str(tmp_path / "notes2"), str(folder / "named.rst"), "--json", env=env)
    assert first.returncode == 0, first.stderr
    ids = {Path(f["path"]).name: f["note_id"] for f in json.loads(first.stdout)["files"]}
    assert json.loads(first.stdout)["gone"] == []

    (folder / "sub" / "old.md").unlink()
    (folder / "renamed.md").rename(folder / "renamed.md.bak")
    again = run_cli("import-notes", str(folder), "--json", env=env)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["unchanged"] == 1  # keep.md; named.rst is there, not gone
    assert report["gone"] == [
        {"note_id": ids["renamed.md"], "path": str((folder / "renamed.md").resolve())},
        {"note_id": ids["old.md"], "path": str((folder / "sub" / "old.md").resolve())},
    ]
    text = run_cli("import-notes", str(folder), env=env)
    assert text.returncode == 0, text.stderr
    assert f"rem-cycle forget --note {ids['old.md']}" in text.stdout and "2 gone" in text.stdout
    assert run_cli("forget", "--note", ids["old.md"], env=env).returncode == 0
    after = json.loads(run_cli("import-notes", str(folder), "--json", env=env).stdout)
    assert [g["note_id"] for g in after["gone"]] == [ids["renamed.md"]]


def test_the_graph_as_of_a_day_before_a_notes_file_was_imported_does_not_list_it(tmp_path: Path) -> None:
    # A NOTE node has no createdAt, and an anchor without one counted as always known: `export
    # --as-of` a day before any import listed every notes file in `file_sources` (and, with
    # --include-anchors, its NOTE node): a snapshot of the past naming files imported since.
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    assert run_cli("import", str(write_sessions(tmp_path / "a.jsonl", [make_session("a", 2)])), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    _, note_id = _imported(tmp_path, env)
    (tmp_path / "notes" / "empty.md").write_text("", encoding="utf-8")  # says nothing: known at no time
    assert run_cli("import-notes", str(tmp_path / "notes" / "empty.md"), env=env).returncode == 0

    def snapshot(*extra: str) -> dict:
        done = run_cli("export", "--include-anchors", *extra, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    before = snapshot("--as-of", "2026-11-15")
    assert "session:a" in before["sessions"]
    assert before["file_sources"] == {}
    assert not [n for n in before["nodes"] if n["label"] == "NOTE"]
    assert not [a for anchors in before["node_sessions"].values() for a in anchors if a.startswith("note:")]
    now = snapshot("--as-of", "9999-12-31")
    assert list(now["file_sources"]) == [note_id]
    assert set(snapshot()["file_sources"]) >= {note_id}


def test_a_notes_file_with_decomposed_accents_gives_the_graph_of_its_composed_twin(tmp_path: Path) -> None:
    # "é" written as "e" + U+0301 (some editors and pasted text) is the same letter, but the
    # combining mark is no word character: the name "CaféQueue" became two nodes, "Cafe" and
    # "Queue", and the description kept the decomposed spelling no query of "café" matches.
    text = "The CaféQueue talks to the ÉclairStore.\n\nThe ÉclairStore keeps what the CaféQueue sends.\n"
    graphs = []
    for form in ("NFC", "NFD"):
        env = {"REM_DATA_DIR": str(tmp_path / form / "data")}
        note = tmp_path / form / "cafe.md"
        note.parent.mkdir()
        note.write_text(unicodedata.normalize(form, text), encoding="utf-8")
        assert run_cli("import-notes", str(note), env=env).returncode == 0
        exported = run_cli("export", env=env)
        assert exported.returncode == 0, exported.stderr
        graph = json.loads(exported.stdout)
        graphs.append(({n["id"]: (n["name"], n["properties"].get("description")) for n in graph["nodes"]},
                       sorted((e["source"], e["target"], e["relationship"]) for e in graph["edges"])))
    composed, decomposed = graphs
    assert decomposed == composed
    assert any("CaféQueue" == name for name, _ in composed[0].values())


def test_search_and_show_find_a_name_typed_with_a_decomposed_accent(tmp_path: Path) -> None:
    # Names are composed (NFC); a name typed with a combining accent (a macOS input method, a
    # copy from a decomposed source) matched nothing: `search` listed no node, `show` said "no node".
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    note = tmp_path / "cafe.md"
    note.write_text("The CaféQueue talks to the ÉclairStore.\n\nThe ÉclairStore keeps what the CaféQueue sends.\n", encoding="utf-8")
    assert run_cli("import-notes", str(note), env=env).returncode == 0
    for typed in ("CaféQueue", "Cafe\u0301Queue", "cafe\u0301queue"):
        found = run_cli("search", typed, "--json", env=env)
        assert found.returncode == 0, found.stderr
        assert [r["name"] for r in json.loads(found.stdout)["results"]] == ["CaféQueue"], typed
        shown = run_cli("show", typed, "--json", env=env)
        assert shown.returncode == 0, (typed, shown.stderr)
        assert json.loads(shown.stdout)["name"] == "CaféQueue"


def test_show_says_how_many_sources_it_left_out(tmp_path: Path, digested_sample: Path) -> None:
    # `show` prints the first --limit (20) sessions / notes files a node came from, as it does its
    # edges and turns, but said nothing of the rest: a node from 19 sessions shown with --limit 5
    # listed 5 "from session …" lines as if that were all of its provenance.
    env = {"REM_DATA_DIR": str(copy_digested_sample(digested_sample, tmp_path / "data"))}

    def view(*extra: str) -> dict:
        done = run_cli("show", "CLASS:RetryPolicy", "--json", *extra, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    everything = view("--limit", "0")
    total = len(everything["sources"])
    assert total > 10 and everything["sources_total"] == total
    cut = view("--limit", "5")
    assert cut["sources_total"] == total and len(cut["sources"]) < total
    assert {s["id"] for s in cut["sources"]} <= {s["id"] for s in everything["sources"]}
    text = run_cli("show", "CLASS:RetryPolicy", "--limit", "5", env=env)
    assert f"… {total - len(cut['sources'])} more sources (rem-cycle show CLASS:RetryPolicy --limit 0 for all)" in text.stdout


def test_what_a_terminal_would_act_on_is_shown_not_sent(tmp_path: Path) -> None:
    # Turn text (tool output), descriptions and file names reach `show`, `recall`, `search` and
    # `import-notes` from agents and folders nobody vetted; an escape sequence in them went to the
    # terminal as is (clear the screen, set the title, write the clipboard with OSC 52), as did a
    # carriage return (overwrite the line) and a right-to-left override (reorder what is read).
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    hostile = "The GlitchRunner failed\x1b[2J\x1b]0;owned\x07\x1b]52;c;ZWNobyBvd25lZA==\x07 again\rFAKE \u202eevil"
    session = {"sessionId": "s1", "title": "Glitch \x1b[31mred", "createdAt": "2026-11-01T10:00:00Z", "summary": "about GlitchRunner",
               "turns": [{"id": "s1-t0", "role": "user", "text": hostile}]}
    assert run_cli("import", str(write_sessions(tmp_path / "s.jsonl", [session])), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "odd\x1b[31mname.md").write_text("The GlitchRunner is documented here.\n", encoding="utf-8")
    outputs = [
        run_cli("show", "CLASS:GlitchRunner", env=env),
        run_cli("recall", "GlitchRunner glitch", env=env),
        run_cli("search", "Glitch", env=env),
        run_cli("import-notes", str(notes), env=env),
    ]
    for done in outputs:
        assert done.returncode == 0, done.stderr
        for sent in ("\x1b", "\x07", "\r", "\u202e"):
            assert sent not in done.stdout and sent not in done.stderr, (done.args, sent)
    assert "\\x1b[2J" in outputs[0].stdout and "\\u202eevil" in outputs[0].stdout
    assert "odd\\x1b[31mname.md" in outputs[3].stdout
    shown = json.loads(run_cli("show", "CLASS:GlitchRunner", "--json", env=env).stdout)
    assert any(t["text"] == hostile for t in shown["turns"])  # the data itself is kept as it was


def test_import_notes_of_nothing_creates_no_graph(tmp_path: Path) -> None:
    # A mistyped path created graph.sqlite3 (and the cycle's lock file) in a data dir that had no
    # graph: nothing is imported, so nothing is created; the error is said as before.
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "empty").mkdir()
    env = {"REM_DATA_DIR": str(data)}
    done = run_cli("import-notes", str(tmp_path / "missing.md"), str(tmp_path / "empty"), "--json", env=env)
    assert done.returncode == 1
    assert json.loads(done.stdout)["errors"] == [f"{tmp_path / 'missing.md'}: no such file or folder"]
    assert list(data.iterdir()) == []
    note = tmp_path / "empty" / "a.md"
    note.write_text(DESIGN, encoding="utf-8")
    assert run_cli("import-notes", str(note), env=env).returncode == 0  # something to import creates the graph
    assert (data / "graph.sqlite3").is_file()


def test_import_notes_of_a_missing_file_says_the_error_only(tmp_path: Path) -> None:
    """No file was read: the error is the answer, exit 1 — not a line of zeros beside it on stdout
    (leftalone23: it printed `0 imported, 0 unchanged, 0 failed` too). ``--json`` keeps its counts."""
    missing = tmp_path / "nothere.md"
    done = run_cli("import-notes", str(missing), env={"REM_DATA_DIR": str(tmp_path / "data")})
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"error     {missing}: no such file or folder\n")
