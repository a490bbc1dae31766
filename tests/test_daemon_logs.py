"""Structured logs: every line of a cycle carries its run id and phase, per-session lines their
session id (JSON lines on stderr when it is not a terminal)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import SAMPLE, run_cli


def test_cycle_log_lines_carry_run_phase_and_session(tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    sample = tmp_path / "sessions.jsonl"
    sample.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:6]), encoding="utf-8")
    assert run_cli("import", str(sample), env=env).returncode == 0
    done = run_cli("--once", "--json", env=env | {"REM_LOG_LEVEL": "debug", "REM_LOG_FORMAT": "json"})
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    phases = [line for line in lines if line["event"] == "phase completed"]
    assert [p["phase"] for p in phases][:2] == ["provider-ready", "ingest"]
    assert all(p["run_id"] == run_id and p["level"] == "info" and p["timestamp"] for p in phases)
    ingested = [line for line in lines if line["event"] == "session ingested"]
    extracted = [line for line in lines if line["event"] == "session extracted"]
    assert len(ingested) == len(extracted) == 6
    assert {line["phase"] for line in ingested} == {"ingest"} and {line["phase"] for line in extracted} == {"extract"}
    assert {line["session_id"] for line in ingested} == {line["session_id"] for line in extracted}
    assert all(line["run_id"] == run_id for line in ingested + extracted)
    # Nothing of a session's context leaks into the lines after it.
    finished = next(line for line in lines if line["event"] == "cycle finished")
    assert "session_id" not in finished and "phase" not in finished
