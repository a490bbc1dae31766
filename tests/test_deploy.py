"""The deployment: compose file and Dockerfile checked by tools that need no Docker engine
(Debian's ``docker-compose config``, ``hadolint``), and the compose topology run as processes —
a ``chroma run`` server on loopback plus the daemon pointed at it with ``REM_CHROMA_URL``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from config import Settings, load_settings
from tests.conftest import ROOT, SAMPLE, free_port, run_cli
from tests.daemon_support import integrity, read_runs, start_worker, stop, wait_for, wait_for_http, worker_env

COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_LLM = ROOT / "docker-compose.llm.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENV_EXAMPLE = ROOT / ".env.example"
# Settings the container fixes whatever .env says (the volume, the endpoint its HEALTHCHECK asks).
CONTAINER_FIXED = {"REM_DATA_DIR": "/data", "REM_HTTP_HOST": "0.0.0.0", "REM_HTTP_PORT": "8080"}


def _tool(name: str) -> str:
    """The tool's path; CI must have it (``.ci/run`` installs it), elsewhere the test skips."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not installed; .ci/run must install it")
    pytest.skip(f"{name} not installed")


def _render(project: Path, dotenv: str, *, llm: bool) -> dict[str, Any]:
    """``docker-compose config`` of a copy of the compose files with ``dotenv`` as ``.env``:
    validates them against the compose schema (no engine needed) and renders them with every
    variable interpolated and ``env_file`` folded into ``environment``."""
    project.mkdir(parents=True, exist_ok=True)
    for source in (COMPOSE, COMPOSE_LLM):
        shutil.copy(source, project / source.name)
    (project / ".env").write_text(dotenv, encoding="utf-8")
    files = ["-f", COMPOSE.name] + (["-f", COMPOSE_LLM.name] if llm else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REM_", "COMPOSE_"))}
    done = subprocess.run(
        [_tool("docker-compose"), "--project-directory", str(project), *files, "config"],
        capture_output=True, text=True, env=env, timeout=120, cwd=project,
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def _example_lines() -> dict[str, str]:
    """``NAME=default`` of every commented-out assignment in ``.env.example``."""
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    return dict(re.findall(r"^# ([A-Z][A-Z0-9_]*)=(.*)$", text, re.MULTILINE))


def _uncommented(extra: str = "") -> str:
    """``.env.example`` with every assignment made live, plus ``extra`` lines."""
    return "".join(f"{name}={value}\n" for name, value in _example_lines().items()) + extra


@pytest.fixture(scope="module")
def compose_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both compose files rendered with ``.env.example`` copied to ``.env`` (the README's first step)."""
    return _render(tmp_path_factory.mktemp("compose"), ENV_EXAMPLE.read_text(encoding="utf-8"), llm=True)


def _default_services(config: dict[str, Any]) -> dict[str, Any]:
    """The services ``docker compose up`` starts: those in no profile."""
    return {name: service for name, service in config["services"].items() if not service.get("profiles")}


def test_compose_topology(compose_config: dict[str, Any]) -> None:
    services = _default_services(compose_config)
    assert set(services) == {"chroma", "worker", "ollama"}
    chroma, worker, ollama = services["chroma"], services["worker"], services["ollama"]

    assert chroma["image"].startswith("chromadb/chroma:")
    assert any(v.startswith("chroma-data:/data") for v in chroma["volumes"])
    assert "/api/v2/heartbeat" in " ".join(chroma["healthcheck"]["test"])

    # The llm file's worker waits for the model server's healthcheck as well as for Chroma's.
    assert worker["depends_on"] == {"chroma": {"condition": "service_healthy"}, "ollama": {"condition": "service_healthy"}}
    assert ollama["healthcheck"]["test"] == ["CMD", "ollama", "list"]
    env = worker["environment"]
    assert {k: env[k] for k in CONTAINER_FIXED} == CONTAINER_FIXED
    assert env["REM_CHROMA_URL"] == "http://chroma:8000"
    assert env["REM_LOG_FORMAT"] == "json"
    assert env["REM_EXTRACTOR"] == "openai"
    assert env["REM_LLM_BASE_URL"] == "http://ollama:11434/v1"
    # One context window for the model server and the worker's chunks (cutprompt38): Ollama's own
    # default of 4,096 tokens cut every longer prompt from the front without an error.
    assert ollama["environment"]["OLLAMA_CONTEXT_LENGTH"] == env["REM_CONTEXT_LIMIT_TOKENS"] == "32768"
    # Secrets: not in the compose files; only .env can bring them (the example sets none).
    assert "REM_LLM_API_KEY" not in env and "REM_CHROMA_TOKEN" not in env
    for text in (COMPOSE.read_text(), COMPOSE_LLM.read_text()):
        assert not re.search(r"REM_(LLM_API_KEY|CHROMA_TOKEN|EMBEDDING_API_KEY)\s*:", text)
    assert any(v.startswith("rem-data:/data") for v in worker["volumes"])
    grace = _seconds(worker["stop_grace_period"])
    assert grace > Settings.model_fields["grace_seconds"].default
    assert {"chroma-data", "rem-data", "ollama-models", "postgres-data"} <= set(compose_config["volumes"])


def test_published_ports_are_on_loopback_by_default(compose_config: dict[str, Any]) -> None:
    services = compose_config["services"]
    # Chroma for agents outside the compose network, the worker's health/metrics endpoint.
    assert services["chroma"]["ports"] == ["127.0.0.1:8000:8000/tcp"]
    assert services["worker"]["ports"] == ["127.0.0.1:8080:8080/tcp"]
    assert "ports" not in services["ollama"]
    # PostgreSQL for producers outside the compose network; the replicas publish nothing.
    assert services["postgres"]["ports"] == ["127.0.0.1:5432:5432/tcp"]
    assert "ports" not in services["worker-pg"]


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", value)
    assert match, value
    return int(match.group(1) or 0) * 60 + float(match.group(2) or 0)


def test_compose_without_the_llm_file_runs_chroma_and_worker_only(tmp_path: Path) -> None:
    services = _default_services(_render(tmp_path, ENV_EXAMPLE.read_text(encoding="utf-8"), llm=False))
    assert set(services) == {"chroma", "worker"}
    assert services["worker"]["depends_on"] == {"chroma": {"condition": "service_healthy"}}
    assert "REM_EXTRACTOR" not in services["worker"]["environment"]  # heuristic, the setting's default


def test_env_example_lists_every_setting_with_its_default(clean_env: pytest.MonkeyPatch) -> None:
    documented = _example_lines()
    settings = {f"REM_{name.upper()}" for name in Settings.model_fields}
    assert settings - set(documented) == set(), "settings missing from .env.example"
    rem_names = {name for name in documented if name.startswith("REM_")}
    assert rem_names - settings == set(), "names in .env.example that are no setting"
    # The documented defaults are the real ones: loaded as the environment they change nothing.
    # (The expectation is taken before the variables are set: Settings() itself reads them.)
    defaults = load_settings()
    for name in rem_names:
        if documented[name]:
            clean_env.setenv(name, documented[name])
    assert load_settings() == defaults
    # Host-side knobs carry no REM_ prefix: rem-cycle would warn about them inside the container.
    assert {"PUBLISH_ADDRESS", "CHROMA_PUBLISH_PORT", "METRICS_PUBLISH_PORT", "CHROMA_VERSION",
            "POSTGRES_PASSWORD", "POSTGRES_PUBLISH_PORT", "POSTGRES_VERSION", "OLLAMA_CONTEXT_LENGTH"} <= set(documented) - rem_names


def test_the_model_servers_context_window_is_the_workers(tmp_path: Path) -> None:
    # REM_CONTEXT_LIMIT_TOKENS in .env would size chunks for another window: the llm file's wins.
    services = _render(tmp_path, "OLLAMA_CONTEXT_LENGTH=16384\nREM_CONTEXT_LIMIT_TOKENS=131072\n", llm=True)["services"]
    assert services["ollama"]["environment"]["OLLAMA_CONTEXT_LENGTH"] == "16384"
    assert services["worker"]["environment"]["REM_CONTEXT_LIMIT_TOKENS"] == "16384"


def test_every_setting_in_dotenv_reaches_the_worker(tmp_path: Path) -> None:
    dotenv = _uncommented("REM_LLM_API_KEY=sk-test-passed-through\nREM_BATCH_LIMIT=7\n")
    worker = _render(tmp_path, dotenv, llm=False)["services"]["worker"]
    env = worker["environment"]
    expected = {f"REM_{name.upper()}" for name in Settings.model_fields}
    assert expected - set(env) == set(), "settings that .env does not pass to the worker"
    assert env["REM_BATCH_LIMIT"] == "7" and env["REM_LLM_API_KEY"] == "sk-test-passed-through"
    assert env["REM_LOG_FORMAT"] == "auto"  # .env overrides a container default ...
    assert {k: env[k] for k in CONTAINER_FIXED} == CONTAINER_FIXED  # ... but not what the container fixes


def test_compose_postgres_profile_runs_two_workers_on_one_database(tmp_path: Path) -> None:
    """``docker compose --profile postgres up postgres worker-pg``: PostgreSQL with a named volume
    and a healthcheck, two worker replicas that wait for it and for Chroma, share the database (and
    its lazy-edge queue table) and are otherwise configured exactly like the single-host worker."""
    config = _render(tmp_path, _uncommented("POSTGRES_PASSWORD=pw-from-dotenv\n"), llm=False)
    services = config["services"]
    profiled = {name for name, service in services.items() if service.get("profiles")}
    assert profiled == {"postgres", "worker-pg"}
    postgres, replicas, single = services["postgres"], services["worker-pg"], services["worker"]
    assert postgres["profiles"] == replicas["profiles"] == ["postgres"]
    assert postgres["image"] == "postgres:16"
    assert "postgres-data:/var/lib/postgresql/data:rw" in postgres["volumes"] and "postgres-data" in config["volumes"]
    assert postgres["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert postgres["environment"]["POSTGRES_PASSWORD"] == "pw-from-dotenv"

    assert replicas["scale"] == 2
    assert replicas["depends_on"] == {"chroma": {"condition": "service_healthy"}, "postgres": {"condition": "service_healthy"}}
    env = replicas["environment"]
    assert env["REM_DATABASE_URL"] == "postgresql://rem:pw-from-dotenv@postgres:5432/rem"
    assert env["REM_LAZY_QUEUE"] == "database"
    assert {k: env[k] for k in CONTAINER_FIXED} == CONTAINER_FIXED
    # Everything else as the single-host worker: the same image, build, settings from .env, grace.
    for key in ("build", "image", "init", "restart", "stop_grace_period"):
        assert replicas[key] == single[key], key
    own = ("REM_DATABASE_URL", "REM_LAZY_QUEUE", "REM_SHARED_EXTRACT")
    assert {k: v for k, v in env.items() if k not in own} == {k: v for k, v in single["environment"].items() if k not in own}
    assert "volumes" not in replicas  # each replica's /data is its own (the image's VOLUME)
    # The password reaches the services from .env only.
    assert "pw-from-dotenv" not in COMPOSE.read_text() and not re.search(r"^\s*POSTGRES_PASSWORD:\s*[^$\s]", COMPOSE.read_text(), re.MULTILINE)
    listed = subprocess.run(
        [_tool("docker-compose"), "--project-directory", str(tmp_path), "-f", COMPOSE.name, "config", "--profiles"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert listed.stdout.split() == ["postgres"]


def test_chroma_client_and_server_versions_come_from_one_value(tmp_path: Path, compose_config: dict[str, Any]) -> None:
    services = compose_config["services"]
    tag = services["chroma"]["image"].removeprefix("chromadb/chroma:")
    assert services["worker"]["build"]["args"] == {"CHROMA_VERSION": tag}
    instructions = _instructions()
    assert ("ARG", f"CHROMA_VERSION={tag}") in instructions  # a plain `docker build` gets the same default
    (install,) = [arg for kind, arg in instructions if kind == "RUN" and "pip install" in arg]
    assert '"chromadb==${CHROMA_VERSION}"' in install
    assert _example_lines()["CHROMA_VERSION"] == tag
    # One variable moves both.
    moved = _render(tmp_path, "CHROMA_VERSION=1.2.3\n", llm=False)["services"]
    assert moved["chroma"]["image"] == "chromadb/chroma:1.2.3"
    assert moved["worker"]["build"]["args"] == {"CHROMA_VERSION": "1.2.3"}


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([_tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def test_dockerfile_is_slim_non_root_with_healthcheck_and_data_volume() -> None:
    instructions = _instructions()
    kinds = [kind for kind, _ in instructions]
    assert instructions[0] == ("FROM", "python:3.11-slim")
    users = [arg for kind, arg in instructions if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert kinds.index("USER") > max(i for i, kind in enumerate(kinds) if kind == "RUN"), "nothing runs as root after USER"
    (healthcheck,) = [arg for kind, arg in instructions if kind == "HEALTHCHECK"]
    assert "/healthz" in healthcheck and "urllib" in healthcheck
    assert ("VOLUME", '["/data"]') in instructions
    env = " ".join(arg for kind, arg in instructions if kind == "ENV")
    assert "REM_DATA_DIR=/data" in env and "REM_HTTP_HOST=0.0.0.0" in env
    assert ("ENTRYPOINT", '["rem-cycle"]') in instructions
    copied = {arg.split()[0] for kind, arg in instructions if kind == "COPY"}
    for package in ("config", "store", "pipelines", "worker"):  # pyproject's packages
        assert package in copied
    # 0.0.0.0 is a container-only default: outside the image the endpoint stays on loopback.
    assert Settings.model_fields["http_host"].default == "127.0.0.1"


def test_dockerignore_keeps_data_and_vcs_out_of_the_image() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")}
    assert {".git", ".rem-data", ".env", "*.sqlite3", "venv", ".venv", "tests", "**/__pycache__"} <= ignored


@pytest.mark.server
def test_compose_topology_as_processes(chroma_server: str, tmp_path: Path) -> None:
    """What ``docker compose up`` runs, as local processes: the daemon against a Chroma server."""
    data = tmp_path / "data"
    suffix = uuid.uuid4().hex[:8]  # the server is shared by the test session: own collections
    settings = {
        "chroma_url": chroma_server,
        "memory_collection": f"deploy-memory-{suffix}",
        "session_collection": f"deploy-sessions-{suffix}",
    }
    env = worker_env(data, **settings)
    imported = run_cli("import", str(SAMPLE), env=env)
    assert imported.returncode == 0, imported.stderr
    port = free_port()
    proc = start_worker(env=worker_env(data, interval_seconds="3600", http_port=str(port), **settings), log_path=tmp_path / "daemon.log")
    try:
        completed = wait_for(
            lambda: [r for r in read_runs(data / "graph.sqlite3") if r["outcome"] == "completed"],
            timeout=90, interval=0.1, what="a completed cycle against the Chroma server",
        )[0]
        assert completed["phases"]["provider-ready"]["chroma"] == chroma_server
        assert completed["phases"]["ingest"]["sessions_seen"] == 26
        assert completed["phases"]["finalize"]["graph"]["nodes"]["SESSION"] == 26
        ready = wait_for_http(f"http://127.0.0.1:{port}/readyz")
        assert ready.status_code == 200, ready.text
        assert "rem_cycle_graph_nodes" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text

        # Back up the graph while the daemon runs.
        backup = run_cli("backup", str(tmp_path / "backup" / "graph.sqlite3"), "--json", env=env)
        assert backup.returncode == 0, backup.stderr
        assert json.loads(backup.stdout)["integrity"] == "ok"
        assert integrity(tmp_path / "backup" / "graph.sqlite3") == "ok"
        status = run_cli("status", "--json", env=env)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["runs"][0]["outcome"] == "completed"
    finally:
        assert stop(proc) == 0, (tmp_path / "daemon.log").read_text()
