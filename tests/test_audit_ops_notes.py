"""``import-notes`` given paths that are not notes (operator audit): a FIFO or a device that
exists is said to be what it is — it was reported as ``no such file or folder``, sending the
operator looking for a typo — and is never opened (a FIFO would block the import)."""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.notes import find_note_files


def test_a_fifo_or_device_named_is_not_reported_missing_and_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "notes.md"
    os.mkfifo(fifo)
    good = tmp_path / "good.md"
    good.write_text("The LazyEdgeQueue drains.\n", encoding="utf-8")
    files, errors = find_note_files([str(fifo), "/dev/null", str(good), str(tmp_path / "missing.md")])
    assert [f.path for f in files] == [good.resolve()]
    assert errors == [
        f"{fifo}: not a regular file or folder (a device, a FIFO or a socket); not read",
        "/dev/null: not a regular file or folder (a device, a FIFO or a socket); not read",
        f"{tmp_path / 'missing.md'}: no such file or folder",
    ]
