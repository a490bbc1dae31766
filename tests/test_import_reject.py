"""`rem-cycle import` never loses or hides input: every line is validated whole before anything of
it is written, every rejected line is reported with its number and reason, and the command ends
non-zero when anything was rejected. Through the real CLI, into a real embedded Chroma."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import chromadb

from config import load_settings
from store.chroma import ChromaStore, MemoryRow
from tests.conftest import ROOT, free_port, make_session, run_cli, start_chroma_server, write_sessions


def import_json(path: Path, data_dir: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    done = run_cli("import", str(path), "--json", *extra, env={"REM_DATA_DIR": str(data_dir)})
    assert done.stdout, done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


async def stored(data_dir: Path, *session_ids: str) -> tuple[dict[str, list[MemoryRow]], set[str]]:
    """Memory rows by session and the sessions that have a summary, read after the CLI has exited."""
    settings = load_settings(data_dir=data_dir)
    chroma = await ChromaStore.connect(settings)
    memories = await chroma.memories_for_sessions(session_ids)
    summaries = await chroma.summaries_for_sessions(session_ids) or {}
    return memories, set(summaries)


def reasons(result: dict[str, Any]) -> dict[int, str]:
    return {e["line"]: e["error"] for e in result["errors"]}


async def test_lone_surrogate_rejects_its_line_only(tmp_path: Path) -> None:
    bad_text = make_session("bad-text", 2)
    bad_title = make_session("bad-title", 1)
    path = tmp_path / "s.jsonl"
    lines = [json.dumps(make_session("a", 2)), json.dumps(bad_text).replace("turn 1 of bad-text", "turn \\ud800 one"),
             json.dumps(bad_title).replace("Session bad-title", "title \\udfff"), json.dumps(make_session("d", 1))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, result = import_json(path, tmp_path / "d")
    assert code == 1
    assert result["sessions"] == 2 and result["bad_lines"] == 2
    found = reasons(result)
    assert sorted(found) == [2, 3]
    assert "turns.1.text" in found[2] and "surrogate" in found[2]
    assert "title" in found[3] and "surrogate" in found[3]
    memories, summaries = await stored(tmp_path / "d", "a", "bad-text", "bad-title", "d")
    assert {sid: len(rows) for sid, rows in memories.items()} == {"a": 2, "bad-text": 0, "bad-title": 0, "d": 1}
    assert summaries == {"a", "d"}


def session_with_ids(sid: str, *turn_ids: str) -> dict[str, Any]:
    session = make_session(sid, len(turn_ids))
    for turn, tid in zip(session["turns"], turn_ids, strict=True):
        turn["id"] = tid
    return session


async def test_turn_id_of_another_session_is_rejected_unless_allow_move(tmp_path: Path) -> None:
    data = tmp_path / "d"
    path = write_sessions(tmp_path / "two.jsonl", [session_with_ids("a", "T1", "A2"), session_with_ids("b", "B1", "T1")])
    code, result = import_json(path, data)
    assert code == 1 and result["sessions"] == 1 and result["turns_moved"] == 0
    assert "'T1'" in reasons(result)[2] and "session 'a' (line 1)" in reasons(result)[2]
    memories, summaries = await stored(data, "a", "b")
    assert [r.id for r in memories["a"]] == ["T1", "A2"] and memories["b"] == [] and summaries == {"a"}

    # Against rows already in Chroma, from an earlier import.
    later = write_sessions(tmp_path / "later.jsonl", [session_with_ids("c", "C1", "A2")])
    code, result = import_json(later, data)
    assert code == 1 and result["sessions"] == 0
    assert "'A2'" in reasons(result)[1] and "session 'a' (already stored)" in reasons(result)[1]

    # --allow-move moves the turn and says so; nothing is rejected.
    code, result = import_json(later, data, "--allow-move")
    assert code == 0 and result["sessions"] == 1 and result["turns_moved"] == 1
    assert result["moves"] == [{"line": 1, "turn": "A2", "from_session": "a", "to_session": "c"}]
    memories, summaries = await stored(data, "a", "c")
    assert [r.id for r in memories["a"]] == ["T1"] and [r.id for r in memories["c"]] == ["C1", "A2"]


async def test_allow_move_inside_one_file_reports_the_move(tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "two.jsonl", [session_with_ids("a", "T1", "A2"), session_with_ids("b", "B1", "T1")])
    done = run_cli("import", str(path), "--allow-move", env={"REM_DATA_DIR": str(tmp_path / "d")})
    assert done.returncode == 0, done.stderr
    assert "1 turns moved between sessions" in done.stdout
    assert "line 2: moved turn 'T1' from session 'a' to 'b'" in done.stderr
    memories, _ = await stored(tmp_path / "d", "a", "b")
    assert [r.id for r in memories["a"]] == ["A2"] and [r.id for r in memories["b"]] == ["B1", "T1"]


async def test_the_same_turn_id_twice_in_one_session_is_rejected(tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "dup.jsonl", [session_with_ids("a", "T1", "T2", "T1")])
    code, result = import_json(path, tmp_path / "d")
    assert code == 1 and result["sessions"] == 0
    assert "turn id 'T1' is used by turns 0 and 2" in reasons(result)[1]
    # A generated id may collide with a given one, too.
    session = make_session("g", 2)
    session["turns"][1]["id"] = "g-t0000"
    code, result = import_json(write_sessions(tmp_path / "gen.jsonl", [session]), tmp_path / "d")
    assert code == 1 and "turn id 'g-t0000' is used by turns 0 and 1" in reasons(result)[1]


async def test_generated_turn_ids_over_the_id_limit_are_rejected(tmp_path: Path) -> None:
    long_id, fits = "L" * 200, "F" * 194  # <sessionId>-t0000 adds 6 characters
    with_ids = session_with_ids("W" * 200, "w-1")
    path = write_sessions(tmp_path / "long.jsonl", [make_session(long_id, 2), make_session(fits, 2), with_ids])
    code, result = import_json(path, tmp_path / "d")
    assert code == 1 and result["sessions"] == 2
    assert list(reasons(result)) == [1]
    assert "generated turn id" in reasons(result)[1] and "206 characters" in reasons(result)[1]
    memories, _ = await stored(tmp_path / "d", long_id, fits, "W" * 200)
    assert [len(memories[s]) for s in (long_id, fits, "W" * 200)] == [0, 2, 1]
    # What was imported ingests without an id error.
    done = run_cli("--once", "--json", env={"REM_DATA_DIR": str(tmp_path / "d")})
    assert done.returncode == 0, done.stderr[-2000:]
    ingest = json.loads(done.stdout)["phases"]["ingest"]
    assert ingest["errors"] == 0 and ingest["processed"] == 3


async def test_the_same_session_on_two_lines_is_rejected_not_mixed(tmp_path: Path) -> None:
    first, again = make_session("a", 3), make_session("a", 1, text="other {i}")
    again["summary"] = "a different summary"
    path = write_sessions(tmp_path / "s.jsonl", [first, make_session("b", 1), again])
    code, result = import_json(path, tmp_path / "d")
    assert code == 1 and result["sessions"] == 2
    assert reasons(result) == {3: "sessionId 'a' is also on line 1 (one line per session)"}
    memories, _ = await stored(tmp_path / "d", "a")
    assert [r.document for r in memories["a"]] == ["turn 0 of a", "turn 1 of a", "turn 2 of a"]


async def test_poison_created_at_rejects_the_line_with_a_reason(tmp_path: Path) -> None:
    late = make_session("late", 1, created="9999-12-31T23:59:59-05:00")
    early = make_session("early", 2)
    early["turns"][1]["createdAt"] = "0001-01-01T00:00:00+05:00"
    path = write_sessions(tmp_path / "dates.jsonl", [late, early, make_session("ok", 1)])
    code, result = import_json(path, tmp_path / "d")
    assert code == 1 and result["sessions"] == 1
    found = reasons(result)
    assert "createdAt" in found[1] and "out of range" in found[1]
    assert "turns.1.createdAt" in found[2] and "out of range" in found[2]
    memories, _ = await stored(tmp_path / "d", "late", "early", "ok")
    assert {s: len(r) for s, r in memories.items()} == {"late": 0, "early": 0, "ok": 1}


def test_json_python_cannot_take_is_a_reason_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    lines = ['{"sessionId": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
             '{"sessionId": "digits", "x": ' + "7" * 5_000 + "}", json.dumps(make_session("ok", 1))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, result = import_json(path, tmp_path / "d")
    assert code == 1 and result["sessions"] == 1
    assert reasons(result) == {1: "not usable JSON: nested too deeply", 2: reasons(result)[2]}
    assert reasons(result)[2].startswith("not usable JSON: Exceeds the limit (4300 digits)")


def test_a_small_session_then_a_large_one_are_written_in_separate_batches(tmp_path: Path) -> None:
    # 499 + 4,970 turns in one write passed Chroma's max batch size (5,461) and aborted the file.
    sessions = [make_session("small", 499, text="small {i}"), make_session("large", 4_970, text="large {i}")]
    code, result = import_json(write_sessions(tmp_path / "s.jsonl", sessions), tmp_path / "d")
    assert code == 0 and (result["sessions"], result["memories_written"]) == (2, 5_469)


def test_reimport_after_rejections_changes_nothing(tmp_path: Path) -> None:
    lines = [session_with_ids("a", "T1"), session_with_ids("b", "T1"), make_session("a", 1), make_session("c", 2)]
    path = write_sessions(tmp_path / "s.jsonl", lines)
    first_code, first = import_json(path, tmp_path / "d")
    again_code, again = import_json(path, tmp_path / "d")
    assert first_code == again_code == 1
    assert first["errors"] == again["errors"] and [e["line"] for e in again["errors"]] == [2, 3]
    assert (first["memories_written"], first["summaries_written"]) == (3, 2)
    assert (again["memories_written"], again["memories_unchanged"], again["summaries_written"]) == (0, 3, 0)


def test_human_output_lists_every_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(f"not json {i}\n" for i in range(120)) + json.dumps(make_session("ok", 1)) + "\n")
    done = run_cli("import", str(path), env={"REM_DATA_DIR": str(tmp_path / "d")})
    assert done.returncode == 1
    assert "1 sessions" in done.stdout and "120 lines rejected" in done.stdout
    assert [line.split(":")[0] for line in done.stderr.splitlines()] == [f"  line {i}" for i in range(1, 121)]


PEAK_RSS = (
    "import resource, sys\n"
    "from worker.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def import_peak_kib(path: Path, data_dir: Path) -> tuple[int, dict[str, Any], int]:
    """Run the CLI's ``main`` in a fresh process; (exit code, JSON output, peak resident KiB)."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, "import", str(path), "--json"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data_dir)})
    return done.returncode, json.loads(done.stdout), int(done.stderr.strip().splitlines()[-1])


def test_an_oversized_line_is_rejected_while_streaming(tmp_path: Path) -> None:
    size = 200 * 1024 * 1024
    small = write_sessions(tmp_path / "small.jsonl", [make_session("a", 2), make_session("c", 1)])
    big = tmp_path / "big.jsonl"
    with big.open("wb") as handle:
        handle.write((json.dumps(make_session("a", 2)) + "\n").encode())
        handle.write(b'{"sessionId": "huge", "turns": [{"text": "')
        handle.write(b"x" * (size - 46))
        handle.write(b'"}]}\n')
        handle.write((json.dumps(make_session("c", 1)) + "\n").encode())
    assert big.stat().st_size > size
    code, result, small_peak = import_peak_kib(small, tmp_path / "d1")
    assert code == 0 and result["sessions"] == 2
    code, result, big_peak = import_peak_kib(big, tmp_path / "d2")
    # Reading the 200 MB line whole cost 400+ MB; read in pieces, a line costs at most the 64 MiB
    # limit, whatever its size.
    assert big_peak - small_peak < 100 * 1024, (small_peak, big_peak)
    assert code == 1 and result["sessions"] == 2
    assert result["errors"] == [{"line": 2, "error": f"line is {size} bytes, the limit is {64 * 1024 * 1024}"}]


def test_chroma_going_away_mid_import_still_reports_what_was_done(tmp_path: Path) -> None:
    port = free_port()
    server = start_chroma_server(tmp_path / "chroma", port)
    fifo = tmp_path / "sessions.fifo"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env.update(PYTHONPATH=str(ROOT), REM_DATA_DIR=str(tmp_path / "d"), REM_CHROMA_URL=f"http://127.0.0.1:{port}")
    importer = subprocess.Popen([sys.executable, "-m", "worker", "import", str(fifo), "--json"], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with fifo.open("w", encoding="utf-8") as feed:
            # A full batch (500 turns) is written as soon as its line is read; line 2 is rejected.
            feed.write(json.dumps(make_session("first", 500)) + "\n" + "not json\n")
            feed.flush()
            client = chromadb.HttpClient(host="127.0.0.1", port=port)
            settings = load_settings(data_dir=tmp_path / "d")
            collections = (settings.memory_collection, settings.session_collection)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and _stored(client, collections, "first") != (500, 1):
                time.sleep(0.2)
            assert _stored(client, collections, "first") == (500, 1)
            time.sleep(1)  # the summary write's answer reaches the importer, which waits for line 3
            server.kill()
            server.wait(10)
            feed.write(json.dumps(make_session("second", 500)) + "\n")
        out, err = importer.communicate(timeout=180)
    finally:
        importer.kill()
        server.kill()
    assert importer.returncode == 1, err[-3000:]
    result = json.loads(out)
    assert (result["sessions"], result["memories_written"], result["done_through_line"]) == (1, 500, 2)
    assert result["errors"] == [{"line": 2, "error": "not JSON: Expecting value at column 1"}]
    assert "Chroma" in result["stopped"]
    assert "import stopped: " in err and "lines 1-2 are imported or listed as rejected" in err
    assert "re-running the import is safe" in err and "Traceback" not in err


def _stored(client: Any, collections: tuple[str, str], session_id: str) -> tuple[int, int]:
    """(memory rows, summary rows) of a session on the server."""
    try:
        return tuple(len(client.get_collection(name).get(where={"sessionId": session_id}, include=[])["ids"])
                     for name in collections)  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 - a collection is not there yet
        return (0, 0)
