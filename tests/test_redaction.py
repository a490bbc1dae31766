"""A password inside a URL setting appears nowhere: not on stderr, not on stdout, not in the database."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import free_port, make_session, run_cli, write_sessions
from tests.llm_server import LLMServer, server_error

CHROMA_SECRET, LLM_SECRET, EMBEDDING_SECRET = "chroma-pw-7f3a91", "llm-pw-c04e22", "embed-pw-9b1d57"
SECRETS = (CHROMA_SECRET, LLM_SECRET, EMBEDDING_SECRET)


def _with_password(url: str, secret: str) -> str:
    return url.replace("http://", f"http://rem:{secret}@", 1)


def _assert_nowhere(data: Path, *outputs: str) -> None:
    for secret in SECRETS:
        for text in outputs:
            assert secret not in text, text
        for path in data.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


def test_url_passwords_are_redacted_when_nothing_answers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {
        "REM_DATA_DIR": str(data),
        "REM_LOG_LEVEL": "debug",
        "REM_CHROMA_URL": _with_password(f"http://127.0.0.1:{free_port()}", CHROMA_SECRET),
        "REM_EXTRACTOR": "openai",
        "REM_LLM_BASE_URL": _with_password(f"http://127.0.0.1:{free_port()}/v1", LLM_SECRET),
    }
    once = run_cli("--once", env=env)
    assert once.returncode == 1 and "chroma-unavailable" in once.stdout + once.stderr, once.stderr
    assert "rem:***@127.0.0.1" in once.stdout + once.stderr  # the location is still told, masked
    status = run_cli("status", "--json", env=env)
    assert status.returncode == 0 and '"chroma": "http://rem:***@127.0.0.1' in status.stdout, status.stdout
    sessions = write_sessions(tmp_path / "sessions.jsonl", [make_session("s-redact")])
    embedding_env = {
        "REM_DATA_DIR": str(data),
        "REM_LOG_LEVEL": "debug",
        "REM_EMBEDDING": "ollama",
        "REM_EMBEDDING_URL": _with_password(f"http://127.0.0.1:{free_port()}", EMBEDDING_SECRET),
    }
    imported = run_cli("import", str(sessions), env=embedding_env)
    assert imported.returncode != 0, imported.stdout
    _assert_nowhere(data, once.stdout, once.stderr, status.stdout, status.stderr, imported.stdout, imported.stderr)


def test_url_passwords_are_redacted_when_the_servers_answer(tmp_path: Path, chroma_server: str) -> None:
    data = tmp_path / "data"
    with LLMServer(default=server_error(500)) as llm:
        env = {
            "REM_DATA_DIR": str(data),
            "REM_LOG_LEVEL": "debug",
            "REM_CHROMA_URL": _with_password(chroma_server, CHROMA_SECRET),
            "REM_MEMORY_COLLECTION": "redaction-memories",
            "REM_SESSION_COLLECTION": "redaction-sessions",
            "REM_EXTRACTOR": "openai",
            "REM_LLM_BASE_URL": _with_password(llm.url, LLM_SECRET),
            "REM_LLM_MAX_RETRIES": "0",
        }
        sessions = write_sessions(tmp_path / "sessions.jsonl", [make_session("s-redact", 4)])
        imported = run_cli("import", str(sessions), env=env)
        assert imported.returncode == 0, imported.stderr
        once = run_cli("--once", "--json", env=env)
        assert llm.chat_count >= 1  # the model was reached (and failed): errors were recorded
    status = run_cli("status", "--json", env=env)
    assert '"llm": "http://rem:***@127.0.0.1' in once.stdout, once.stdout
    _assert_nowhere(data, imported.stdout, imported.stderr, once.stdout, once.stderr, status.stdout, status.stderr)
