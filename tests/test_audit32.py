"""audit32: an attack on the thirty-second session's code (RELIABILITY.md, "An attack on the
thirty-second session's code")."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from config import Settings
from tests.conftest import run_cli
from tests.llm_server import LLMServer
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_userwalk6 import notes_file_failed


@pytest.mark.parametrize("variable", ["REM_LLM_API_KEY", "REM_EMBEDDING_API_KEY", "REM_CHROMA_TOKEN", "REM_MCP_TOKEN"])
def test_a_refused_token_is_not_quoted_by_the_validation_error_itself(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    # load_settings says only the message; Settings() built directly (bench/*.py does) lets
    # pydantic's error through, whose text quotes the input value: the whole key.
    monkeypatch.setenv(variable, "sk-audit32secret\u00a0tail")
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert "audit32secret" not in str(raised.value)
    assert "U+00A0" in str(raised.value)


def test_retry_all_says_import_notes_tries_a_notes_files_chunks(tmp_path: Path, llm_server: LLMServer) -> None:
    """``retry --all`` that reset a notes file's failed chunk said "the next cycle tries them
    again", as ``retry --session note-…`` did before userwalk6: no cycle reads notes files."""
    _, env = notes_file_failed(tmp_path, llm_server)
    retried = run_cli("retry", "--all", env=env)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == ("reset 0 sessions and 1 failed chunks; the next import-notes of the file tries them again "
                                      "(no cycle reads notes files)")
