"""`rem-cycle import`: round trip into a real embedded Chroma, bad lines, idempotency."""

import json
from pathlib import Path

import pytest

from config import Settings
from pipelines.importer import ImportLineError, import_sessions, parse_session_line, session_rows
from tests.conftest import make_session, run_cli, write_sessions
from worker.cycle import Stores


async def run_import(stores: Stores, settings: Settings, path: Path):
    return await import_sessions(path, chroma=stores.chroma, memory_collection=settings.memory_collection,
                                 summary_collection=settings.session_collection)


async def test_round_trip(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    session = make_session("s1", 3)
    session["turns"][1]["id"] = "custom-id"
    session["turns"][2]["createdAt"] = "2026-11-01T10:05:00+01:00"
    stats = await run_import(stores, settings, write_sessions(tmp_path / "a.jsonl", [session, make_session("s2", 1, summary=False)]))
    assert (stats.sessions, stats.memories_written, stats.summaries_written) == (2, 4, 1)
    rows = await stores.chroma.memories_for_session("s1")
    assert [r.id for r in rows] == ["s1-t0000", "custom-id", "s1-t0002"]
    assert rows[0].metadata == {"sessionId": "s1", "turnIndex": 0, "role": "user", "createdAt": "2026-11-01T10:00:00Z", "userId": "user-1"}
    assert rows[2].created_at == "2026-11-01T09:05:00.000Z"
    summaries = await stores.chroma.summaries_for_sessions(["s1", "s2"])
    assert list(summaries) == ["s1"]
    assert summaries["s1"].id == "summary_s1" and summaries["s1"].document == "Summary of s1"
    assert summaries["s1"].metadata["memoryCount"] == 3


async def test_reimport_changes_nothing(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "a.jsonl", [make_session("s1", 3), make_session("s2", 2)])
    await run_import(stores, settings, path)
    again = await run_import(stores, settings, path)
    assert (again.memories_written, again.memories_unchanged, again.summaries_written, again.summaries_unchanged) == (0, 5, 0, 2)


async def test_bad_lines_reported_with_numbers_rest_imported(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    good = json.dumps(make_session("ok", 2))
    lines = [good, "{not json", "[1,2]", json.dumps({"sessionId": "bad id"}), json.dumps({"sessionId": "x", "turns": [{"role": "user"}]}),
             "", json.dumps(make_session("ok2", 1))]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode() + b"\xff\xfe not utf8\n")
    stats = await run_import(stores, settings, path)
    assert stats.sessions == 2
    assert [b["line"] for b in stats.bad_lines] == [2, 3, 4, 5, 8]
    assert "not JSON" in stats.bad_lines[0]["error"]
    assert "expected a JSON object" in stats.bad_lines[1]["error"]
    assert "sessionId" in stats.bad_lines[2]["error"]
    assert "turns.0.text" in stats.bad_lines[3]["error"]
    assert "UTF-8" in stats.bad_lines[4]["error"]
    assert len(await stores.chroma.memories_for_session("ok2")) == 1


@pytest.mark.parametrize("line", ['{"sessionId": "s", "turns": "nope"}', '{"sessionId": "s", "createdAt": "yesterday"}',
                                  '{"sessionId": "s", "turns": [{"id": "../../etc", "text": "x"}]}', '{"turns": []}'])
def test_parse_rejects(line: str) -> None:
    with pytest.raises(ImportLineError):
        parse_session_line(line)


def test_deterministic_ids_and_metadata() -> None:
    session = parse_session_line(json.dumps(make_session("abc", 2)))
    memories, summary = session_rows(session)
    assert [m[0] for m in memories] == ["abc-t0000", "abc-t0001"]
    assert summary is not None and summary[0] == "summary_abc"
    assert session_rows(session) == (memories, summary)


def test_cli_import_exit_codes(tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "d")}
    good = write_sessions(tmp_path / "g.jsonl", [make_session("s1", 2)])
    done = run_cli("import", str(good), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["memories_written"] == 2
    bad = tmp_path / "b.jsonl"
    bad.write_text("nope\n")
    failed = run_cli("import", str(bad), env=env)
    assert failed.returncode == 1 and "line 1: not JSON" in failed.stderr
    missing = run_cli("import", str(tmp_path / "missing.jsonl"), env=env)
    assert missing.returncode == 1 and "No such file" in missing.stderr
