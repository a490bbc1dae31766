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

from config import Settings
from tests.conftest import ROOT, SAMPLE, free_port, run_cli
from tests.daemon_support import integrity, read_runs, start_worker, stop, wait_for, wait_for_http, worker_env

COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"


def _tool(name: str) -> str:
    """The tool's path; CI must have it (``.ci/run`` installs it), elsewhere the test skips."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not installed; .ci/run must install it")
    pytest.skip(f"{name} not installed")


@pytest.fixture(scope="module")
def compose_config() -> dict[str, Any]:
    """``docker-compose config``: validates the file against the compose schema (no engine needed)
    and renders it with defaults interpolated."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    done = subprocess.run(
        [_tool("docker-compose"), "--project-directory", str(ROOT), "-f", str(COMPOSE), "--profile", "llm", "config"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_compose_topology(compose_config: dict[str, Any]) -> None:
    services = compose_config["services"]
    assert set(services) == {"chroma", "worker", "ollama"}
    chroma, worker, ollama = services["chroma"], services["worker"], services["ollama"]

    assert chroma["image"].startswith("chromadb/chroma:")
    assert any(v.startswith("chroma-data:/data") for v in chroma["volumes"])
    assert "/api/v2/heartbeat" in " ".join(chroma["healthcheck"]["test"])

    assert worker["depends_on"] == {"chroma": {"condition": "service_healthy"}}
    env = worker["environment"]
    assert env["REM_CHROMA_URL"] == "http://chroma:8000"
    assert env["REM_EXTRACTOR"] == "heuristic"
    assert env["REM_LLM_BASE_URL"] == "http://ollama:11434/v1"
    # Secrets are pass-through only: never a value in the file.
    assert env["REM_LLM_API_KEY"] is None and env["REM_CHROMA_TOKEN"] is None
    assert any(v.startswith("rem-data:/data") for v in worker["volumes"])
    assert all(str(p).startswith("127.0.0.1:") for p in worker["ports"]), "the endpoint is published on loopback only"
    grace = _seconds(worker["stop_grace_period"])
    assert grace > Settings.model_fields["grace_seconds"].default

    assert ollama["profiles"] == ["llm"]
    assert "ollama" not in worker["depends_on"], "the optional profile must not be required by the worker"
    assert {"chroma-data", "rem-data", "ollama-models"} <= set(compose_config["volumes"])


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", value)
    assert match, value
    return int(match.group(1) or 0) * 60 + float(match.group(2) or 0)


def test_compose_without_the_llm_profile_runs_chroma_and_worker_only() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    done = subprocess.run(
        [_tool("docker-compose"), "--project-directory", str(ROOT), "-f", str(COMPOSE), "config"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert services["ollama"].get("profiles") == ["llm"]  # listed, but only started with --profile llm


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
    assert {".git", ".rem-data", "*.sqlite3", "venv", ".venv", "tests", "**/__pycache__"} <= ignored


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
