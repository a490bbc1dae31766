"""audit32: an attack on the thirty-second session's code (RELIABILITY.md, "An attack on the
thirty-second session's code")."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config import Settings


@pytest.mark.parametrize("variable", ["REM_LLM_API_KEY", "REM_EMBEDDING_API_KEY", "REM_CHROMA_TOKEN", "REM_MCP_TOKEN"])
def test_a_refused_token_is_not_quoted_by_the_validation_error_itself(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    # load_settings says only the message; Settings() built directly (bench/*.py does) lets
    # pydantic's error through, whose text quotes the input value: the whole key.
    monkeypatch.setenv(variable, "sk-audit32secret\u00a0tail")
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert "audit32secret" not in str(raised.value)
    assert "U+00A0" in str(raised.value)
