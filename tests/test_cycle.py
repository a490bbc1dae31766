"""`rem-cycle --once` end to end as a real subprocess: embedded and `chroma run` server mode."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLE, free_port, make_session, run_cli, write_sessions
from tests.test_graph import dump


def cycle_env(data_dir: Path, database_url: str | None) -> dict[str, str]:
    """The subprocess environment of a test: its data dir and (PostgreSQL) its database."""
    return {"REM_DATA_DIR": str(data_dir), **({"REM_DATABASE_URL": database_url} if database_url else {})}


def graph_dump(data_dir: Path, open_graph_database: Callable[[Path], Any]) -> list[tuple]:
    db = open_graph_database(data_dir / "graph.sqlite3")
    try:
        return dump(db)
    finally:
        db.close()


def once(env: dict[str, str]) -> dict:
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.both_backends
def test_once_twice_second_changes_nothing(tmp_path: Path, database_url: str | None, open_graph_database: Callable[[Path], Any]) -> None:
    env = cycle_env(tmp_path / "d", database_url)
    sessions = [make_session(f"s{i}", 4, created=f"2026-11-0{i + 1}T10:00:00Z") for i in range(3)]
    assert run_cli("import", str(write_sessions(tmp_path / "in.jsonl", sessions)), env=env).returncode == 0
    first = once(env)
    assert first["outcome"] == "completed" and first["last_successful_phase"] == "finalize"
    ingest = first["phases"]["ingest"]
    assert (ingest["sessions_synced"], ingest["processed"], ingest["errors"]) == (3, 12, 0)
    graph = first["phases"]["finalize"]["graph"]
    assert graph["nodes"]["MEMORY"] == 12 and graph["nodes"]["SESSION"] == 3
    assert graph["edges"]["ORIGINATES_IN"] == 12
    before = graph_dump(tmp_path / "d", open_graph_database)
    second = once(env)
    assert second["phases"]["ingest"]["sessions_changed"] == 0
    assert second["phases"]["ingest"]["upserted"] == 0
    assert graph_dump(tmp_path / "d", open_graph_database) == before
    # A new turn in one session: only that session is re-synced.
    sessions[1]["turns"].append({"role": "user", "text": "one more"})
    run_cli("import", str(write_sessions(tmp_path / "in.jsonl", sessions)), env=env)
    third = once(env)
    assert third["phases"]["ingest"]["sessions_synced"] == 1
    assert third["phases"]["ingest"]["upserted"] == 2  # the new memory + the session's memoryCount


@pytest.mark.both_backends
def test_status_json_lists_runs(tmp_path: Path, database_url: str | None) -> None:
    env = cycle_env(tmp_path / "d", database_url)
    run_cli("import", str(write_sessions(tmp_path / "in.jsonl", [make_session("s1", 2)])), env=env)
    once(env)
    status = run_cli("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    payload = json.loads(status.stdout)
    assert payload["runs"][0]["outcome"] == "completed"
    assert payload["graph"]["nodes"] == {"MEMORY": 2, "SESSION": 1}
    text = run_cli("status", env=env)
    assert "completed" in text.stdout and "MEMORY=2" in text.stdout


@pytest.mark.both_backends
def test_unreachable_chroma_fails_with_reason_and_exit_code(tmp_path: Path, database_url: str | None) -> None:
    env = {**cycle_env(tmp_path / "d", database_url), "REM_CHROMA_URL": f"http://127.0.0.1:{free_port()}"}
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert (result["outcome"], result["failure_phase"], result["reason_code"]) == ("failed", "provider-ready", "chroma-unavailable")
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["runs"][0]["outcome"] == "failed"


def test_bad_config_is_a_clear_usage_error(tmp_path: Path) -> None:
    done = run_cli("--once", env={"REM_DATA_DIR": str(tmp_path), "REM_BATCH_LIMIT": "0"})
    assert done.returncode == 2 and "REM_BATCH_LIMIT" in done.stderr


def test_server_mode_sample_data(tmp_path: Path, chroma_server: str) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_CHROMA_URL": chroma_server,
           "REM_MEMORY_COLLECTION": "srv-memory", "REM_SESSION_COLLECTION": "srv-sessions"}
    imported = run_cli("import", str(SAMPLE), "--json", env=env)
    assert imported.returncode == 0, imported.stderr[-2000:]
    counts = json.loads(imported.stdout)
    first = once(env)
    ingest = first["phases"]["ingest"]
    assert ingest["processed"] == counts["memories_written"] and ingest["errors"] == 0
    assert first["phases"]["finalize"]["graph"]["nodes"]["SESSION"] == counts["sessions"]
    again = once(env)["phases"]["ingest"]
    assert (again["upserted"], again["scan"], again["rows_scanned"]) == (0, "new rows", 0)  # read past the marks only
    assert not (tmp_path / "d" / "chroma").exists()  # server mode keeps no embedded store


def test_environment_problems_are_one_line_errors(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    outside = tmp_path / "outside.jsonl"
    outside.write_text('{"source": "a", "target": "b", "relationship": "R"}\n')
    (data / "lazy-edges.jsonl").symlink_to(outside)
    (data / "graph.sqlite3").touch()  # status needs a graph database to report on
    done = run_cli("status", env={"REM_DATA_DIR": str(data)})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "symbolic link" in done.stderr
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "graph.sqlite3").write_bytes(b"this is not a database" * 100)
    done = run_cli("status", env={"REM_DATA_DIR": str(damaged)})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "not a database" in done.stderr


def test_status_prints_no_empty_runs_table(tmp_path: Path) -> None:
    """``status --runs 0`` asks for no runs: no table (an empty one is only its header)."""
    env = cycle_env(tmp_path / "d", None)
    run_cli("import", str(write_sessions(tmp_path / "in.jsonl", [make_session("s1", 2)])), env=env)
    once(env)
    none_asked = run_cli("status", "--runs", "0", env=env)
    assert none_asked.returncode == 0, none_asked.stderr
    assert "recent runs" not in none_asked.stdout and "outcome" not in none_asked.stdout, none_asked.stdout
    assert "backlog:" in none_asked.stdout and "MEMORY=2" in none_asked.stdout
    assert json.loads(run_cli("status", "--runs", "0", "--json", env=env).stdout)["runs"] == []
    assert "completed" in run_cli("status", "--runs", "1", env=env).stdout
