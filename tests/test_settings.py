"""Settings: env vars, TOML file, precedence and clear errors."""

from pathlib import Path

import pytest

from config import ConfigError, load_settings


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.data_dir == Path(".rem-data")
    assert s.graph_path == Path(".rem-data/graph.sqlite3")
    assert s.memory_collection == "neo-agent-memory"
    assert s.session_collection == "neo-agent-sessions"
    assert s.chroma_url == ""
    assert s.queue_path == Path(".rem-data/lazy-edges.jsonl")
    assert (s.context_limit_tokens, s.safe_processing_limit_tokens, s.chunk_limit_tokens, s.output_reserve_tokens) == (
        131072, 100000, 50000, 8192)
    assert s.http_host == "127.0.0.1"
    assert (s.chunk_retry_base_seconds, s.chunk_retry_max_seconds) == (60, 6 * 3600)


def test_env_overrides_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conf = tmp_path / "rem.toml"
    conf.write_text('batch_limit = 7\nmemory_collection = "team-memory"\n')
    monkeypatch.setenv("REM_BATCH_LIMIT", "9")
    s = load_settings(conf)
    assert s.batch_limit == 9
    assert s.memory_collection == "team-memory"


def test_bad_values_name_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REM_BATCH_LIMIT", "lots")
    with pytest.raises(ConfigError, match="REM_BATCH_LIMIT"):
        load_settings()


@pytest.mark.parametrize(
    ("key", "value"),
    [("REM_CHROMA_URL", "ftp://x"), ("REM_MEMORY_COLLECTION", "a"), ("REM_EXTRACTOR", "magic"), ("REM_HTTP_PORT", "70000")],
)
def test_invalid_settings(monkeypatch: pytest.MonkeyPatch, key: str, value: str) -> None:
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=key):
        load_settings()


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings("/nonexistent/rem.toml")


def test_queue_path_must_stay_inside_data_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="REM_LAZY_EDGES_PATH must lie inside REM_DATA_DIR"):
        load_settings(data_dir=tmp_path / "d", lazy_edges_path=tmp_path / "d" / ".." / "elsewhere.jsonl")
    ok = load_settings(data_dir=tmp_path / "d", lazy_edges_path=tmp_path / "d" / "q" / "edges.jsonl")
    assert ok.queue_path == tmp_path / "d" / "q" / "edges.jsonl"


def test_chunk_retry_backoff_from_env_and_max_below_base_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REM_CHUNK_RETRY_BASE_SECONDS", "2.5")
    monkeypatch.setenv("REM_CHUNK_RETRY_MAX_SECONDS", "90")
    s = load_settings()
    assert (s.chunk_retry_base_seconds, s.chunk_retry_max_seconds) == (2.5, 90)
    monkeypatch.setenv("REM_CHUNK_RETRY_MAX_SECONDS", "2")
    with pytest.raises(ConfigError, match="configuration: REM_CHUNK_RETRY_MAX_SECONDS must not be smaller than REM_CHUNK_RETRY_BASE_SECONDS$"):
        load_settings()
    monkeypatch.setenv("REM_CHUNK_RETRY_BASE_SECONDS", "0")
    with pytest.raises(ConfigError, match="REM_CHUNK_RETRY_BASE_SECONDS"):
        load_settings()
    monkeypatch.setenv("REM_CHUNK_RETRY_BASE_SECONDS", "60")
    monkeypatch.setenv("REM_CHUNK_RETRY_MAX_SECONDS", "1e12")  # a typo, not a year: refused, never an overflow
    with pytest.raises(ConfigError, match="REM_CHUNK_RETRY_MAX_SECONDS"):
        load_settings()


def test_chunk_budget() -> None:
    s = load_settings(chunk_limit_tokens=8000, prompt_envelope_tokens=1000)
    assert s.chunk_budget_tokens == 7000
    s = load_settings(safe_processing_limit_tokens=None, context_limit_tokens=10000, output_reserve_tokens=1000,
                      chunk_limit_tokens=50000, prompt_envelope_tokens=0)
    assert s.chunk_budget_tokens == 7500


def test_invalid_toml_names_the_file_line_and_column(tmp_path: Path) -> None:
    conf = tmp_path / "rem.toml"
    conf.write_text('batch_limit = 7\nmemory_collection = "unterminated\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^invalid configuration: {conf}: .*\(at line 2, column \d+\)$"):
        load_settings(conf)
    conf.write_bytes(b"\xff\xfe batch_limit = 7\n")
    with pytest.raises(ConfigError, match=rf"^invalid configuration: {conf}: 'utf-8' codec can't decode"):
        load_settings(conf)


def test_an_unknown_toml_key_is_named_with_the_closest_setting(tmp_path: Path) -> None:
    conf = tmp_path / "rem.toml"
    conf.write_text("chroma_page_sise = 10\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^invalid configuration: unknown setting 'chroma_page_sise' in {conf} \(did you mean chroma_page_size\?\)$"):
        load_settings(conf)


def test_unknown_rem_variables_are_named_with_the_closest_setting() -> None:
    from config import unknown_environment

    environ = {"REM_DATA_DIR": "d", "REM_CONFIG": "x.toml", "REM_LLM_MODLE": "m", "REM_ZZZ": "1", "HOME": "/root"}
    assert unknown_environment(environ) == [
        "REM_LLM_MODLE is not a rem-cycle setting and is ignored (did you mean REM_LLM_MODEL?)",
        "REM_ZZZ is not a rem-cycle setting and is ignored",
    ]


def test_semantic_types_from_the_environment_as_readme_writes_them(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("REM_SEMANTIC_TYPES", "CONCEPT CLASS tool")  # was a SettingsError traceback
    assert load_settings().semantic_types == ("CONCEPT", "CLASS", "TOOL")
    clean_env.setenv("REM_SEMANTIC_TYPES", '["CONCEPT", "FILE"]')
    assert load_settings().semantic_types == ("CONCEPT", "FILE")
    clean_env.setenv("REM_SEMANTIC_TYPES", "[CONCEPT")
    with pytest.raises(ConfigError, match="REM_SEMANTIC_TYPES"):
        load_settings()
