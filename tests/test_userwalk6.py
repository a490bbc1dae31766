"""A sixth walk through README as a new user (userwalk6, thirty-second session): "Extractors",
"Failures and retries", the identity judge and "Importing notes", against a loopback
OpenAI-compatible server. Each test is a place where what a command printed or did disagreed with
README, misled its reader or lost something."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from config import Settings
from tests.conftest import ROOT, run_cli
from tests.llm_server import LLMServer, Status, malformed
from tests.llm_server import llm_server  # noqa: F401 - fixture
from store.backend import open_database
from store.runstate import RunStateStore
from tests.test_forget import _env
from tests.test_identity import _import, _session

pytestmark = pytest.mark.timeout(120)

SECRET = "sk-proj-userwalk6SECRET"


@pytest.mark.parametrize("key, place", [
    (SECRET + "\u00a0", f"character {len(SECRET) + 1} of {len(SECRET) + 1} is U+00A0 (no-break space)"),
    ("sk-…", "character 4 of 4 is U+2026 (horizontal ellipsis)"),  # README's placeholder, pasted
    (SECRET + "\n", f"character {len(SECRET) + 1} of {len(SECRET) + 1} is U+000A (a control character)"),
])
def test_an_api_key_an_http_header_cannot_carry_is_refused_unshown(tmp_path: Path, llm_server: LLMServer, key: str, place: str) -> None:
    """README's OpenAI line pasted as written (``REM_LLM_API_KEY=sk-…``), or a key copied with a
    no-break space or a newline, failed the cycle in ``provider-ready`` with a ``phase-error``
    (``UnicodeEncodeError('ascii', 'Bearer sk-…', …)``) or ``llm-unavailable — … unreachable:
    Illegal header value b'Bearer …'`` — the server was fine — and that line, printed on stdout
    and kept in the run record, held the key. It is a configuration error, exit 2, naming the
    setting and the character, never the key."""
    env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": llm_server.url,
           "REM_LLM_API_KEY": key}
    done = run_cli("--once", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"rem-cycle: invalid configuration: REM_LLM_API_KEY: {place}, which an HTTP header cannot carry (the value is "
        "not shown: a secret); give the token as its issuer shows it, without spaces or other characters copied with it"]
    assert "userwalk6SECRET" not in done.stdout + done.stderr
    assert llm_server.requests == []


def test_a_space_inside_a_token_is_kept_and_one_at_an_end_refused() -> None:
    """audit32 noticed userwalk6's check refusing a token with a space inside, which a header
    carries and an ``REM_MCP_TOKEN`` passphrase used to be: it is allowed; at either end, where a
    header would drop it, refused."""
    from config import Settings

    assert Settings(mcp_token="correct horse battery staple").mcp_token.get_secret_value() == "correct horse battery staple"
    for token in (" leading", "trailing "):
        with pytest.raises(ValueError, match="U\\+0020 \\(space\\)"):
            Settings(mcp_token=token)


def test_an_empty_api_key_is_no_key(tmp_path: Path, llm_server: LLMServer) -> None:
    """``REM_LLM_API_KEY=`` (.env.example's line uncommented, or an unset shell variable) sent the
    header ``Bearer ``, and the cycle failed ``llm-unavailable — LLM server … unreachable: Illegal
    header value b'Bearer '``. An empty key is no key, as README says of every setting given empty."""
    env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": llm_server.url,
           "REM_LLM_API_KEY": ""}
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["outcome"] == "completed"
    assert llm_server.requests and all("authorization" not in {h.lower() for h in r.headers} for r in llm_server.requests)


def test_a_cycle_report_masks_a_configured_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run record masked a configured secret in a failed phase's error, but ``--once`` printed
    (and ``--once --json`` gave) the result as it came: the same line, unmasked. The report is
    masked as the record is."""
    from config import redact as redaction
    from worker.cycle import CycleResult

    monkeypatch.setattr(redaction, "_remembered", set())
    redaction.remember_secrets([SECRET])
    result = CycleResult(
        run_id="run-x", outcome="failed", started_at="", finished_at="", wall_ms=1.0, reason_code="phase-error",
        failure_phase="provider-ready", message=f"ValueError('Bearer {SECRET}')",
        phases={"provider-ready": {"state": "failed", "error": f"ValueError('Bearer {SECRET}')"}},
    )
    shown = json.dumps(result.as_dict())
    assert SECRET not in shown and "Bearer ***" in shown


@pytest.mark.both_backends
async def test_retry_all_gives_a_failing_session_fresh_attempts_and_a_second_retry_resets_nothing(
    settings: Settings, tmp_path: Path, llm_server: LLMServer,
) -> None:
    """After a chunk failed (the session charged attempt 1), ``retry --all`` said ``reset 0
    sessions and 1 failed chunks`` and left the attempt counted, where ``retry --session`` set it
    back to 0: after a ``retry --all`` for each of three fixes in turn, the third failure made the
    session ``undigestible``. And ``retry --session`` run again said ``reset 1 sessions and 0
    failed chunks; the next cycle tries them again`` with nothing failing. Both reset a failing
    session's attempts; a session with nothing to reset is not counted."""
    from worker.cycle import run_cycle

    llm_server.script(malformed(), malformed())  # the answer and its repair round: the chunk fails
    model = settings.model_copy(update={"extractor": "openai", "llm_base_url": llm_server.url, "llm_max_retries": 0})
    await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The LazyEdgeQueue drops lines."])])
    assert (await run_cycle(model)).phases["extract"]["chunks_failed"] == 1
    env = _env(settings)
    everything = run_cli("retry", "--all", "--json", env=env)
    assert everything.returncode == 0, everything.stderr
    assert json.loads(everything.stdout) == {"chunks_reset": 1, "sessions_reset": 1, "unknown": []}
    db = open_database(settings)
    try:
        digest = RunStateStore(db).get_digests(["a"])["a"]
    finally:
        db.close()
    assert (digest.state, digest.attempts) == ("undigested", 0)
    again = run_cli("retry", "--session", "a", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "nothing to reset: no session named is failing or undigestible (rem-cycle status lists them)"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_judge_bench_refuses_a_server_that_is_not_there(tmp_path: Path) -> None:
    """README: "To measure a model as the judge … ``bench/identity_judge.py``". Pointed at no
    server (a mistyped port, the model server not started), it asked every question, each failing
    after its retries, then printed the rules' figures under ``with judge`` and exited 0. It makes
    the cycle's ``provider-ready`` check first and stops with its line, exit 1."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "REM_EXTRACTOR": "openai", "REM_LLM_MAX_RETRIES": "0",
           "REM_LLM_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1", "REM_DATA_DIR": str(tmp_path / "data")}
    for args in (["--splits", "fresh", "--kinds", "prose"], ["--runs", f"x={tmp_path / 'none.jsonl'}"]):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "identity_judge.py"), *args, "--answers", str(tmp_path / "a.jsonl")],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stdout == ""
        assert done.stderr.splitlines()[-1].startswith(f"identity_judge.py: no judge to measure: LLM server {env['REM_LLM_BASE_URL']} unreachable")
    assert not (tmp_path / "data").exists()


def test_the_judge_without_the_openai_extractor_is_warned_about(tmp_path: Path) -> None:
    """README's identity section says "With ``REM_LLM_JUDGE=true`` the model settles same-type
    candidates"; with the default extractor nothing does, and nothing said so. Every command warns
    once, naming what to set."""
    done = run_cli("status", env={"REM_DATA_DIR": str(tmp_path / "none"), "REM_LLM_JUDGE": "true", "REM_LOG_FORMAT": "json"})
    warned = [json.loads(line)["event"] for line in done.stderr.splitlines() if line.startswith("{")]
    assert warned == ["REM_LLM_JUDGE is on but REM_EXTRACTOR is heuristic: no model names communities or settles identity "
                      "candidates (the judge is the openai extractor's model: set REM_EXTRACTOR=openai and REM_LLM_*)"]
    quiet = run_cli("status", env={"REM_DATA_DIR": str(tmp_path / "none"), "REM_LLM_JUDGE": "true", "REM_EXTRACTOR": "openai",
                                    "REM_LOG_FORMAT": "json"})
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("{")]


def notes_file_failed(tmp_path: Path, llm_server: LLMServer) -> tuple[Path, dict[str, str]]:
    """A notes file imported once with the model answering 500: its chunk failed, waiting to retry.
    The file and the environment of its data dir."""
    llm_server.script(Status(500))
    notes = tmp_path / "design.md"
    notes.write_text("The LazyEdgeQueue feeds the GraphStore.\n", encoding="utf-8")
    env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": llm_server.url,
           "REM_LLM_MAX_RETRIES": "0"}
    assert run_cli("import-notes", str(notes), env=env).returncode == 1
    return notes, env


def test_a_notes_file_retried_is_said_to_be_tried_by_import_notes(tmp_path: Path, llm_server: LLMServer) -> None:
    """A notes file whose chunk failed said ``… rem-cycle retry --session note-… tries them now``,
    and that ``retry`` said ``reset 0 sessions and 1 failed chunks; the next cycle tries them
    again`` — but no cycle reads notes files: nothing tried them until ``import-notes`` was run
    again. Both lines say that ``import-notes`` does."""
    notes, env = notes_file_failed(tmp_path, llm_server)
    waiting = run_cli("import-notes", str(notes), env=env)
    assert waiting.returncode == 1
    key = waiting.stdout.split("retry --session ", 1)[1].split()[0]
    assert f"; after rem-cycle retry --session {key} the next import-notes of it tries them at once)" in waiting.stdout, waiting.stdout
    retried = run_cli("retry", "--session", key, env=env)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == ("reset 0 sessions and 1 failed chunks; the next import-notes of the file tries them again "
                                      "(no cycle reads notes files)")
    assert run_cli("import-notes", str(notes), env=env).returncode == 0
