"""``import-notes`` given paths that are not notes (operator audit): a FIFO or a device that
exists is said to be what it is — it was reported as ``no such file or folder``, sending the
operator looking for a typo — and is never opened (a FIFO would block the import)."""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.notes import find_note_paths


def test_a_fifo_or_device_named_is_not_reported_missing_and_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "notes.md"
    os.mkfifo(fifo)
    good = tmp_path / "good.md"
    good.write_text("The LazyEdgeQueue drains.\n", encoding="utf-8")
    found, errors = find_note_paths([str(fifo), "/dev/null", str(good), str(tmp_path / "missing.md")])
    assert [path for path, _ in found] == [good.resolve()]
    assert errors == [
        f"{fifo}: not a regular file or folder (a device, a FIFO or a socket); not read",
        "/dev/null: not a regular file or folder (a device, a FIFO or a socket); not read",
        f"{tmp_path / 'missing.md'}: no such file or folder",
    ]


async def test_a_notes_file_over_the_limit_is_refused_unread_and_the_others_imported(settings, tmp_path: Path, monkeypatch) -> None:
    """A notes file is read whole and extraction holds some twenty times its text (3 MB of
    Markdown: 420 MB resident, 6 MB: 500 MB), and every file found was read before the first was
    imported, so ``import-notes ~/docs`` holding a log dump took all of it at once. Files are now
    read one at a time, and one over ``NOTE_MAX_BYTES`` is refused, unread, with its size."""

    from pipelines import notes
    from worker.knowledge import import_notes

    monkeypatch.setattr(notes, "NOTE_MAX_BYTES", 1000)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "design.md").write_text("The LazyEdgeQueue drains.\n", encoding="utf-8")
    (folder / "dump.txt").write_text("RetryBudget grew.\n" * 100, encoding="utf-8")
    read: list[str] = []
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: read.append(self.name) or real(self, *a, **k))
    report = await import_notes(settings, [str(folder)])
    assert (report["imported"], report["failed"]) == (1, 0)
    assert report["errors"] == [f"{folder / 'dump.txt'}: 1800 bytes, a notes file is at most 1000 (split it); not read"]
    assert "dump.txt" not in read


async def test_a_file_name_that_is_not_utf8_is_listed_and_the_others_imported(settings, tmp_path: Path) -> None:
    """A notes file whose name is not UTF-8 (``caf\\xe9.md``, written by a Latin-1 system) stopped
    the whole ``import-notes`` with ``the database cannot store text that is not UTF-8``, naming no
    file, and nothing else in the folder was imported. It is listed with the reason; the rest is
    imported."""
    from worker.knowledge import import_notes

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("The GraphStore keeps.\n", encoding="utf-8")
    bad = os.path.join(os.fsencode(folder), b"caf\xe9.md")
    with open(bad, "w", encoding="utf-8") as handle:
        handle.write("The LazyEdgeQueue drains.\n")
    report = await import_notes(settings, [str(folder)])
    assert (report["imported"], report["failed"]) == (1, 0), report
    assert [f["path"] for f in report["files"]] == [str(folder / "good.md")]
    assert len(report["errors"]) == 1 and "not UTF-8" in report["errors"][0] and "rename" in report["errors"][0]
