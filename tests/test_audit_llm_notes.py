"""Audit of `rem-cycle import-notes` with the model extractor, through the real CLI and the
loopback chat-completions server of tests/llm_server.py: what it says about a chunk that failed
before is true, and the way to try it now works."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.llm_server import LLMServer, server_error


def test_a_note_chunk_backing_off_is_said_to_wait_not_to_have_failed_again(tmp_path: Path) -> None:
    """Found by the audit: after the model server answered 500, re-running `import-notes` with
    the server healthy made no call (the chunk waits for its backoff) but printed the same
    `provider-error: HTTP 500` as if the server had failed again, with nothing about the wait or
    how to skip it. Now it says the chunk is waiting, until when, and the `retry` that tries it
    now — which works."""
    note = tmp_path / "design.md"
    note.write_text("# Design\n\nThe LazyEdgeQueue is drained by the DrainWorker.\n", encoding="utf-8")
    with LLMServer() as server:
        env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url,
               "REM_LLM_MAX_RETRIES": "0"}
        server.script(server_error(500))
        first = run_cli("import-notes", str(note), env=env)
        assert first.returncode == 1 and "HTTP 500" in first.stdout, first.stdout + first.stderr
        assert server.chat_count == 1

        waiting = run_cli("import-notes", str(note), env=env)
        assert waiting.returncode == 1, waiting.stdout + waiting.stderr
        assert server.chat_count == 1  # the backoff holds: no second call
        said = waiting.stdout
        assert "waiting to retry" in said and "HTTP 500" in said, said
        (hint,) = [line for line in said.splitlines() if "rem-cycle retry --session" in line]
        key = hint.split("rem-cycle retry --session ")[1].split()[0]

        assert run_cli("retry", "--session", key, env=env).returncode == 0
        done = run_cli("import-notes", str(note), env=env)
        assert done.returncode == 0 and "1 imported" in done.stdout, done.stdout + done.stderr
        assert server.chat_count == 2
