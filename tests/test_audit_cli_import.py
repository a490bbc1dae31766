"""Files as editors write them, through the real CLI: a UTF-8 byte-order mark at the start (Windows
PowerShell's ``Out-File -Encoding utf8``, older Notepad) with CRLF line ends is no part of the
first line (RFC 8259 lets a parser ignore it), so no session of such a file is rejected (``enqueue``
already read it so: ``json.loads`` of bytes skips the mark)."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

from tests.conftest import make_session, run_cli


def _windows_file(path: Path, objects: list[dict]) -> Path:
    path.write_bytes(codecs.BOM_UTF8 + "".join(json.dumps(o) + "\r\n" for o in objects).encode("utf-8"))
    return path


def test_an_import_file_with_a_byte_order_mark_imports_every_line(tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    path = _windows_file(tmp_path / "sessions.jsonl", [make_session("win-1", 2), make_session("win-2", 3)])
    done = run_cli("import", str(path), "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["sessions"], report["memories_written"], report["summaries_written"], report["bad_lines"]) == (2, 5, 2, 0)
    # A mark that is not at the start of the file is no byte-order mark: that line is still rejected.
    path.write_bytes(path.read_bytes() + codecs.BOM_UTF8 + json.dumps(make_session("win-3", 1)).encode() + b"\r\n")
    done = run_cli("import", str(path), "--json", env=env)
    assert done.returncode == 1
    assert [e["line"] for e in json.loads(done.stdout)["errors"]] == [3]



def test_an_import_of_a_file_that_cannot_be_read_creates_nothing(tmp_path: Path) -> None:
    # A mistyped path must not leave an empty data dir (and embedded Chroma) behind.
    data = tmp_path / "data"
    for path, reason in ((tmp_path / "sesions.jsonl", "No such file or directory"), (tmp_path, "Is a directory")):
        done = run_cli("import", str(path), env={"REM_DATA_DIR": str(data)})
        assert done.returncode == 1
        assert done.stderr.splitlines() == [f"rem-cycle: cannot read {path}: {reason}"]
        assert not data.exists()
