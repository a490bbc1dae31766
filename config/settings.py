"""The one typed settings object.

Values come, highest precedence first, from keyword overrides, ``REM_*`` environment variables,
an optional TOML file (``--config PATH`` or ``REM_CONFIG``) and the defaults below. Every value is
validated; a bad one raises :class:`ConfigError` naming the setting.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import tomllib
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

DEFAULT_SEMANTIC_TYPES: tuple[str, ...] = (
    "CONCEPT",
    "CLASS",
    "METHOD",
    "FILE",
    "ISSUE",
    "TEST",
    "GUIDE",
    "STRATEGY",
    "DECISION",
    "PERSON",
    "AGENT",
    "TOOL",
    "PLACE",
    "ORGANIZATION",
    "WORK",
)

_COLLECTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$"
_TYPE_NAME = re.compile(r"[^\W_][\w-]{0,63}")

# A retry wait or a lease over a year is a mistake, and a long enough one (or ``inf``) would
# overflow the times computed from it: every cycle would crash in setup.
MAX_WAIT_SECONDS = 366 * 86_400.0


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it."""


class Settings(BaseSettings):
    """Every knob of rem-cycle. Environment variable = ``REM_`` + the upper-case field name."""

    # An error never quotes the value given (pydantic's own text does, input_value='…'): the tokens
    # and the database URL are secrets, and Settings() built directly (bench/) shows that text (audit32).
    model_config = SettingsConfigDict(env_prefix="REM_", extra="forbid", frozen=True, hide_input_in_errors=True)

    # --- storage -------------------------------------------------------------------------
    data_dir: Path = Field(Path("./.rem-data"), description="Graph DB, queue and embedded Chroma live here")
    chroma_url: str = Field("", description="Empty = embedded PersistentClient under data_dir; else a Chroma server URL")
    chroma_token: SecretStr | None = Field(None, description="Bearer token for a Chroma server")
    chroma_tenant: str = "default_tenant"
    chroma_database: str = "default_database"
    chroma_timeout_seconds: float = Field(
        120.0, gt=0, description="A Chroma server call (server mode) that has not answered by then fails as unavailable"
    )
    memory_collection: str = Field("neo-agent-memory", pattern=_COLLECTION_NAME)
    session_collection: str = Field("neo-agent-sessions", pattern=_COLLECTION_NAME)
    embedding: Literal["hash", "minilm", "ollama", "openai"] = Field(
        "hash", description="Embedding function for rows rem-cycle writes (import); 'hash' and 'minilm' work offline"
    )
    embedding_model: str = "nomic-embed-text"
    embedding_url: str = "http://127.0.0.1:11434"
    embedding_api_key: SecretStr | None = None
    lazy_edges_path: Path | None = Field(None, description="Default <data_dir>/lazy-edges.jsonl")
    database_url: SecretStr | None = Field(
        None, description="Empty = the SQLite file <data_dir>/graph.sqlite3; postgresql://… = that PostgreSQL database"
    )

    # --- cycle ---------------------------------------------------------------------------
    batch_limit: int = Field(500, ge=1, description="Sessions ingested/extracted per cycle at most")
    write_batch_size: int = Field(500, ge=1, le=100_000, description="Rows per graph transaction")
    chroma_page_size: int = Field(2_000, ge=1, le=100_000)
    interval_seconds: float = Field(3600.0, gt=0)
    run_at_startup: bool = True
    lease_timeout_seconds: float = Field(
        300.0, gt=0, le=MAX_WAIT_SECONDS, description="A running cycle without a heartbeat this long is stalled (/healthz 503, status, metrics)"
    )
    grace_seconds: float = Field(30.0, gt=0, description="Time allowed to finish the current transaction on SIGTERM")
    full_scan_interval_seconds: float = Field(
        21_600.0, ge=0,
        description="The change scan reads every Chroma row this often (else only rows added since the last scan): "
        "a summary or a turn updated in place is seen within this delay (0 = every cycle); a row deleted and re-added under its id "
        "is seen by the next cycle",
    )
    run_history_days: int = Field(
        90, ge=0, le=36500,
        description="Each cycle deletes finished runs older than this many days (0 keeps every run); counts and histograms keep them",
    )
    community_refresh_fraction: float = Field(
        0.1, ge=0, le=100,
        description="Re-detect communities once the sessions digested since the last detection reach this share of those before it (0 = every cycle)",
    )
    shared_extract: bool = Field(
        False,
        description="Several workers share this database: a cycle that finds the single-flight phases taken "
        "digests claimed sessions beside it instead of exiting busy (leases: REM_LEASE_TIMEOUT_SECONDS)",
    )

    # --- extraction ----------------------------------------------------------------------
    extractor: Literal["heuristic", "openai"] = "heuristic"
    llm_base_url: str = "http://127.0.0.1:11434/v1"
    llm_model: str = "llama3.1"
    llm_api_key: SecretStr | None = None
    llm_concurrency: int = Field(4, ge=1, le=256)
    llm_timeout_seconds: float = Field(120.0, gt=0)
    llm_max_retries: int = Field(3, ge=0, le=20)
    llm_json_mode: Literal["json_schema", "json_object", "none"] = "json_schema"
    context_limit_tokens: int = Field(131_072, gt=0)
    safe_processing_limit_tokens: int | None = Field(100_000, gt=0, description="Unset = 75% of the context limit")
    chunk_limit_tokens: int = Field(50_000, gt=0)
    output_reserve_tokens: int = Field(8_192, ge=0)
    prompt_envelope_tokens: int = Field(1_500, ge=0)
    max_chunk_attempts: int = Field(3, ge=1)
    chunk_retry_base_seconds: float = Field(
        60.0, gt=0, le=MAX_WAIT_SECONDS,
        description="Wait before retrying a failed chunk the first time; doubles with every failure",
    )
    chunk_retry_max_seconds: float = Field(
        21_600.0, gt=0, le=MAX_WAIT_SECONDS, description="Longest wait before retrying a failed chunk"
    )
    held_answer_max_age_days: float = Field(
        30.0, gt=0, le=36_500,
        description="A paid answer the database refused to store (held-answers.jsonl) and no attempt of its words "
        "took is dropped once held this many days (its words are asked again if they come)",
    )
    lazy_max_attempts: int = Field(5, ge=1)
    lazy_queue: Literal["file", "database"] = Field(
        "file",
        description="Where `rem-cycle enqueue` and the worker's own lazy edges go: the JSONL file (one host) or the "
        "lazy_edges table of the graph database (producers anywhere); the drain drains both",
    )
    # NoDecode: the environment's value is a plain word list ("CONCEPT CLASS"), split below.
    semantic_types: Annotated[tuple[str, ...], NoDecode] = DEFAULT_SEMANTIC_TYPES
    llm_judge: bool = Field(
        False,
        description="With extractor=openai: also ask the model to name communities and to settle ambiguous identity candidates",
    )

    # --- recall and the MCP server ------------------------------------------------------
    recall_vector: bool = Field(False, description="Recall also asks the memory collection for the nearest turns")
    recall_weight_keyword: float = Field(1.0, ge=0, le=100, description="RRF weight of BM25 over turns")
    recall_weight_entities: float = Field(0.5, ge=0, le=100, description="RRF weight of the turns matching nodes ground")
    recall_weight_vector: float = Field(0.5, ge=0, le=100, description="RRF weight of the nearest turns by embedding")
    recall_weight_context: float = Field(0.2, ge=0, le=100, description="RRF weight of the turns next to keyword hits")
    recall_weight_session: float = Field(1.0, ge=0, le=100, description="RRF weight of the turns of the best sessions by BM25 over whole sessions")
    recall_weight_recency: float = Field(0.5, ge=0, le=100, description="RRF weight of newest-first (with --recency)")
    recall_rrf_k: float = Field(20.0, gt=0, le=10_000, description="RRF constant k: larger flattens rank differences")
    recall_keyword_anchor: int = Field(
        0, ge=0, le=100, description="Keyword's first N turns keep the first places of a recall answer (0 = plain RRF)"
    )
    recall_scene_vote: float = Field(
        1.0, ge=0, le=100, description="Weight of the session votes of keyword and the session signal in recall's fusion (0 = turn-level RRF only)"
    )
    recall_passage_anchor: int = Field(
        1, ge=0, le=100,
        description="The first N turns by passage (query words in a turn and, at half weight, its neighbours, in the session signal's best sessions) take the first places (0 = off)",
    )
    recall_budget_tokens: int = Field(2_000, ge=1, le=200_000, description="Default token budget of a recall answer")
    mcp_host: str = Field("127.0.0.1", description="`rem-cycle mcp --http` binds here; beyond loopback REM_MCP_TOKEN is required")
    mcp_port: int = Field(8765, ge=1, le=65535)
    mcp_token: SecretStr | None = Field(None, description="Bearer token MCP clients must send over HTTP")
    mcp_user: str | None = Field(None, max_length=200, description="Pin every MCP call to this user's sessions")

    # --- operations ----------------------------------------------------------------------
    http_host: str = "127.0.0.1"
    http_port: int = Field(0, ge=0, le=65535, description="0 = no HTTP endpoint")
    http_max_connections: int = Field(
        16, ge=1, le=1024, description="Connections the HTTP endpoint serves at once; the one idle the longest makes room for a new one"
    )
    http_request_timeout_seconds: float = Field(
        10.0, gt=0, le=3600, description="A connection must send its whole request within this time, else it is closed"
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"

    @field_validator(
        "data_dir", "lazy_edges_path", "safe_processing_limit_tokens", "mcp_user", "http_host", "mcp_host", "chroma_tenant",
        "chroma_database", "llm_base_url", "llm_model", "embedding_model", "embedding_url", mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any, info: ValidationInfo) -> Any:
        # ``REM_X=`` (in .env, as .env.example shows them, or from an unset shell variable) means
        # unset: the default data dir (not the current directory, where every command would
        # write), the default queue path, 75 % of the context, no pinned MCP user (not user ''),
        # the loopback address (an empty host is every interface); the vocabulary: ``_split_types``.
        if isinstance(value, str) and not value.strip():
            return None if info.field_name == "safe_processing_limit_tokens" else cls.model_fields[info.field_name].default
        return value

    @field_validator("embedding", "extractor", "llm_json_mode", "lazy_queue", "log_level", "log_format", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        # A choice among words: ``REM_LOG_LEVEL=INFO`` is the logging module's own spelling.
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("data_dir", "lazy_edges_path", mode="after")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        # No shell expands ``~`` in a TOML file or in .env: unexpanded, it was a folder named ``~``
        # in the current directory.
        return None if value is None else home_expanded(value)

    @field_validator("chroma_url", "llm_base_url", "embedding_url")
    @classmethod
    def _check_url(cls, value: str, info: ValidationInfo) -> str:
        if not value and info.field_name == "chroma_url":
            return value  # embedded Chroma
        if not value.startswith(("http://", "https://")):
            empty = " (or be empty for embedded Chroma)" if info.field_name == "chroma_url" else ""
            raise ValueError(f"must start with http:// or https://{empty}")
        if problem := _unreadable_url(value, example="http://[::1]:8000"):
            raise ValueError(problem)
        if info.field_name != "chroma_url":
            return value
        parts = urlsplit(value)
        if parts.path.strip("/") or parts.query or parts.fragment:
            # The client asks {scheme}://{host}:{port}/api/v2/…: anything after the port was dropped.
            raise ValueError("must be the Chroma server's address with nothing after the port (http://host:8000): "
                             "rem-cycle's client adds /api/v2 itself, and a path, query or fragment is not used")
        return value.rstrip("/")

    @field_validator("chroma_token", "llm_api_key", "embedding_api_key", "mcp_token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        # ``REM_LLM_API_KEY=`` (.env.example's line uncommented) means no key: sent, it was the
        # header ``Bearer `` every server refuses. A token goes in an HTTP header, which carries
        # visible ASCII and spaces between them only: a key pasted with a no-break space, a newline
        # or README's ``sk-…`` failed every request later, its text quoted in the error (userwalk6).
        # Said without it. A space inside stays allowed: an `REM_MCP_TOKEN` passphrase worked, and
        # a header keeps it; at either end a header would drop it.
        if value is None or not value.get_secret_value().strip():
            return None
        text = value.get_secret_value()
        for place, char in enumerate(text, 1):
            if not ("!" <= char <= "~" or (char == " " and 1 < place < len(text))):
                raise ValueError(
                    f"character {place} of {len(text)} is {_character_name(char)}, which an HTTP header cannot carry "
                    "(the value is not shown: a secret); give the token as its issuer shows it, without spaces or "
                    "other characters copied with it"
                )
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        if not value.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("must start with postgresql:// (or be empty for the embedded SQLite file)")
        if problem := _unreadable_url(value.get_secret_value(), example="postgresql://user@[::1]:5432/db"):
            raise ValueError(problem)
        # A reserved character in the user or password cuts the URL elsewhere: another host, and
        # no password found to mask in messages. Said without the value (a secret).
        rest = value.get_secret_value().split("://", 1)[1]
        if "@" in rest and any(c in rest.rsplit("@", 1)[0] for c in "/?#[]@"):
            raise ValueError(
                "a character a URL reserves (/ ? # [ ] @) comes before its last @: percent-encode it in the user or "
                "password (/ is %2F, ? %3F, # %23, @ %40; or choose a password of letters, digits and - . _ ~), "
                "and an @ in a query parameter (%40)"
            )
        return value

    @field_validator("semantic_types", mode="before")
    @classmethod
    def _split_types(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return DEFAULT_SEMANTIC_TYPES  # unset, as every empty setting (an empty vocabulary made every node a CONCEPT)
        if isinstance(value, str) and value.lstrip().startswith("["):
            value = json.loads(value)  # a JSON list, as pydantic-settings reads complex values
        elif isinstance(value, str):
            value = [part for part in value.replace(",", " ").split() if part]
        if not isinstance(value, (list, tuple)) or not all(isinstance(part, str) for part in value):
            raise ValueError('expected type names (a TOML list of strings, or words: "CONCEPT CLASS FILE")')
        if not value:
            raise ValueError("expected at least one type name (empty: leave the setting out for the default)")
        # A name is a word: "CONCEPT;CLASS" is no type any extractor gives, so every node would be a CONCEPT.
        if bad := [part for part in value if not _TYPE_NAME.fullmatch(part)]:
            raise ValueError(f"not a type name (letters, digits, _ and -): {', '.join(repr(part) for part in bad[:3])}")
        return tuple(part.upper() for part in value)

    @model_validator(mode="after")
    def _check_limits(self) -> "Settings":
        if self.output_reserve_tokens >= self.context_limit_tokens:
            raise ValueError("REM_OUTPUT_RESERVE_TOKENS must be smaller than REM_CONTEXT_LIMIT_TOKENS")
        if self.chunk_budget_tokens is None:
            # The chunker's "no limit": every session would go to the model whole (or fail as
            # skip-over-band, cycle after cycle, until undigestible).
            raise ValueError(
                "the chunk budget, min(REM_CHUNK_LIMIT_TOKENS, REM_SAFE_PROCESSING_LIMIT_TOKENS, REM_CONTEXT_LIMIT_TOKENS - "
                f"REM_OUTPUT_RESERVE_TOKENS) - REM_PROMPT_ENVELOPE_TOKENS, is {self._chunk_budget_raw()} tokens: no chunk fits"
            )
        if self.memory_collection == self.session_collection:  # every summary would be read as a turn
            raise ValueError(
                "REM_MEMORY_COLLECTION and REM_SESSION_COLLECTION must name two collections, "
                f"not both {self.memory_collection!r}"
            )
        if self.lazy_edges_path is not None and (problem := self._queue_path_problem()):
            raise ValueError(problem)
        if self.chunk_retry_max_seconds < self.chunk_retry_base_seconds:
            raise ValueError("REM_CHUNK_RETRY_MAX_SECONDS must not be smaller than REM_CHUNK_RETRY_BASE_SECONDS")
        return self

    def _queue_path_problem(self) -> str | None:
        """Why the queue path cannot be the lazy-edge queue, or ``None``. Beside the queue ``Q`` a
        drain keeps ``Q.lock``, ``Q.draining`` … and renames ``Q`` away: a path naming one of
        rem-cycle's own files (or whose ``Q.*`` would be one) made the drain shred the graph
        database into dead letters, or skip as busy on the cycle's own lock, every cycle."""
        queue, data = self.queue_path.resolve(), self.data_dir.resolve()
        if not _inside(queue, data):
            return "REM_LAZY_EDGES_PATH must lie inside REM_DATA_DIR"
        refused = f"REM_LAZY_EDGES_PATH must name a file of the queue's own, not {queue}"
        if queue == data:
            return f"{refused}: that is the data dir itself"
        if _inside(queue, self.chroma_path):
            return f"{refused}: rem-cycle keeps its embedded Chroma there"
        for own, what in ((self.graph_path, "graph database"), (self.lock_path, "cycle lock"), (self.daemon_lock_path, "daemon lock"),
                          (self.held_answers_path, "held answers")):
            own = own.resolve()
            if queue.parent != own.parent:
                continue
            if queue.name.startswith(own.name):  # the file itself, or one of its companions (-wal, .restoring …)
                return f"{refused}: rem-cycle keeps its {what} there"
            if own.name.startswith(queue.name + "."):
                return f"{refused}: the queue's lock and scratch files ({queue.name}.*) would take the place of rem-cycle's {what}"
        return None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlFileSource(settings_cls))

    # --- derived paths -------------------------------------------------------------------
    @property
    def graph_path(self) -> Path:
        """The SQLite file holding the graph and the run state."""
        return self.data_dir / "graph.sqlite3"

    @property
    def chroma_path(self) -> Path:
        """Where the embedded Chroma keeps its files."""
        return self.data_dir / "chroma"

    @property
    def queue_path(self) -> Path:
        """The lazy-edge JSONL queue."""
        return self.lazy_edges_path or self.data_dir / "lazy-edges.jsonl"

    @property
    def lazy_queue_target(self) -> str | Path:
        """Where producers configured like this worker enqueue (``REM_LAZY_QUEUE``): the JSONL
        queue's path, or the graph database's URL — ``REM_DATABASE_URL``, else the SQLite file's
        (``pipelines.enqueue.enqueue_lazy_edges``)."""
        if self.lazy_queue == "file":
            return self.queue_path
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        return f"sqlite:///{self.graph_path.resolve()}"

    def keeps_files_at(self, path: str | os.PathLike[str]) -> bool:
        """Whether a file at ``path`` would be among rem-cycle's own: in the data dir itself (the
        graph database and its companions, the locks, the lazy-edge queue with its scratch and
        dead-letter files), in the queue's folder, or inside the embedded Chroma. Commands that
        write a file the operator names refuse such a path: they would replace one of them."""
        target = Path(path).resolve()
        return target.parent in {self.data_dir.resolve(), self.queue_path.resolve().parent} or _inside(target, self.chroma_path)

    @property
    def lock_path(self) -> Path:
        """The single-flight lock file."""
        return self.data_dir / "rem-cycle.lock"

    @property
    def daemon_lock_path(self) -> Path:
        """The lock a daemon holds for its whole life (the cycle lock is held only during a cycle,
        so that ``--once`` and other commands can run between the daemon's cycles)."""
        return self.data_dir / "rem-cycle.daemon.lock"

    @property
    def held_answers_path(self) -> Path:
        """The paid answers the database refused to store, kept for the next process (with its
        ``.lock`` and a killed writer's ``.part``: ``store.held_file``)."""
        return self.data_dir / "held-answers.jsonl"

    @property
    def effective_safe_limit(self) -> int:
        """The safe processing band: the setting, or 75% of the context limit when unset."""
        if self.safe_processing_limit_tokens is None:
            return int(self.context_limit_tokens * 0.75)
        return self.safe_processing_limit_tokens

    @property
    def chunk_budget_tokens(self) -> int | None:
        """Token budget of one chunk's text: ``min(chunk, safe, context - reserve) - envelope``
        (``None``, the chunker's "no limit", only for a budget validation refuses)."""
        limit = self._chunk_budget_raw()
        return limit if limit > 0 and math.isfinite(limit) else None

    def _chunk_budget_raw(self) -> int:
        return min(
            self.chunk_limit_tokens,
            self.effective_safe_limit,
            self.context_limit_tokens - self.output_reserve_tokens,
        ) - self.prompt_envelope_tokens


class _TomlFileSource(TomlConfigSettingsSource):
    """The TOML file, read as UTF-8 with a byte order mark skipped: Windows PowerShell's
    ``Out-File -Encoding utf8`` writes one, and TOML's parser refused the file at line 1, column 1."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        with file_path.open(mode="rb") as toml_file:
            values = tomllib.loads(toml_file.read().decode("utf-8").removeprefix("\ufeff"))
        # Secrets come from the environment only (README): a config file is shared, copied and
        # committed. A key written as its variable (REM_LLM_API_KEY) is the same secret.
        secrets = secret_settings(Settings)
        for key in values:
            name = key.lower().removeprefix("rem_")
            if name in secrets:
                raise ConfigError(
                    f"invalid configuration: {file_path}: {key!r} is a secret: set REM_{name.upper()} in the "
                    "environment, not in the config file"
                )
        return values


def secret_settings(settings_cls: type[BaseSettings]) -> frozenset[str]:
    """The settings that hold a secret (typed ``SecretStr``): never from a config file, never logged."""
    return frozenset(name for name, field in settings_cls.model_fields.items()
                     if field.annotation is SecretStr or SecretStr in get_args(field.annotation))


def _unreadable_url(url: str, *, example: str) -> str | None:
    """Why a client cannot read ``url``, or ``None``; said without the value. A client refusing
    one quotes the part it could not read — the password, often — and white space also stops
    :func:`config.redact.redact` from finding the password in a URL."""
    if any(c.isspace() for c in url):
        return "holds white space: percent-encode it in the user or password (a space is %20)"
    if re.search(r"%(?![0-9A-Fa-f]{2})", url):
        return "holds a % not followed by two hex digits: write a % in the user or password as %25"
    try:
        urlsplit(url)
    except ValueError:
        return f"is not a URL (an IPv6 host goes in brackets: {example})"
    return None


def home_expanded(path: str | os.PathLike[str]) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded, as a shell would; raises
    ``ValueError`` when ``~user`` names no user of this system."""
    expanded = Path(os.path.expanduser(path))
    if str(expanded).startswith("~"):
        raise ValueError(f"{str(path).split('/', 1)[0]} names no user's home directory here: write the full path")
    return expanded


def _character_name(char: str) -> str:
    """``char`` as a message names it without showing it: its code point and Unicode name."""
    return f"U+{ord(char):04X} ({unicodedata.name(char, 'a control character').lower()})"


def _inside(path: Path, root: Path) -> bool:
    resolved, base = path.resolve(), root.resolve()
    return resolved == base or base in resolved.parents


# ``REM_*`` variables rem-cycle reads that are not settings.
ENVIRONMENT_ONLY = frozenset({"REM_CONFIG"})


def load_settings(config_file: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Build :class:`Settings` from overrides, the environment and an optional TOML file.

    >>> load_settings(data_dir="/tmp/rem").graph_path
    PosixPath('/tmp/rem/graph.sqlite3')
    """
    path = config_file or os.environ.get("REM_CONFIG")
    cls: type[Settings] = Settings
    if path:
        try:
            path = home_expanded(path)
        except ValueError as exc:
            raise ConfigError(f"invalid configuration: REM_CONFIG: {exc}") from None
        if not Path(path).is_file():
            # A folder (``--config .``, a tab-completed directory) is there: "not found" sent users looking for it.
            if not Path(path).exists():
                raise ConfigError(f"config file not found: {path}")
            kind = "a folder" if Path(path).is_dir() else "not a regular file"
            raise ConfigError(f"invalid configuration: {path} is {kind}, not a TOML config file")
        cls = type("FileSettings", (Settings,), {"model_config": {**Settings.model_config, "toml_file": path}})
    try:
        return cls(**overrides)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:  # reading the TOML file;
        # a parse error's message ends "(at line L, column C)"
        raise ConfigError(f"invalid configuration: {path}: {exc}") from None
    except ValidationError as exc:
        problems = (_problem(error, config_file=path, given=overrides) for error in exc.errors())
        raise ConfigError(f"invalid configuration: {'; '.join(problems)}") from None


def _problem(error: Mapping[str, Any], *, config_file: str | os.PathLike[str] | None, given: Mapping[str, Any]) -> str:
    """One validation error in the user's terms, named where the value came from: ``REM_<FIELD>:
    why`` for the environment, ``<file>: <key>: why`` for the TOML file (the environment wins, so a
    value is the file's when neither ``given`` nor a variable sets it); for a rule across settings
    (no field of its own), the rule, which names its variables itself. An unknown key (only a TOML
    file can bring one) is named as written, with the closest setting."""
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:
        return message
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        where = f" in {config_file}" if config_file else ""
        # A file's keys drop REM_ and are lower case; a key written as its variable is that setting.
        spelled = key.lower().removeprefix("rem_")
        return f"unknown setting {key!r}{where}{_did_you_mean(spelled, Settings.model_fields)}"
    field = str(error["loc"][0])
    from_environment = any(name.upper() == f"REM_{field.upper()}" for name in os.environ)  # read in any case
    if config_file and field not in given and not from_environment:
        return f"{config_file}: {key}: {message}"
    return f"REM_{key.replace('.', '_').upper()}: {message}"


def unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``REM_*`` variable in ``environ`` that no setting reads (a typo is
    otherwise silently ignored), naming the closest known variable."""
    known = {f"REM_{name.upper()}" for name in Settings.model_fields} | ENVIRONMENT_ONLY
    return [
        f"{name} is not a rem-cycle setting and is ignored{_did_you_mean(name, known)}"
        for name in sorted(environ)
        if name.startswith("REM_") and name not in known
    ]


def idle_settings(settings: Settings) -> list[str]:
    """One warning per setting that another setting leaves with nothing to do: ``REM_LLM_JUDGE``
    asks the openai extractor's model, so with the heuristic extractor no model judges (userwalk6:
    README's identity section names the judge alone, and it was ignored without a word)."""
    if settings.llm_judge and settings.extractor != "openai":
        return [f"REM_LLM_JUDGE is on but REM_EXTRACTOR is {settings.extractor}: no model names communities or settles "
                "identity candidates (the judge is the openai extractor's model: set REM_EXTRACTOR=openai and REM_LLM_*)"]
    return []


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
