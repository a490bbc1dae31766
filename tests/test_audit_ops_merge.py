"""``merge``/``unmerge`` by hand (operator audit).

``merge`` folds one knowledge node into another. It took any two nodes: ``merge session:S
CLASS:X`` deleted the SESSION node (its turns' ``ORIGINATES_IN`` edges moved onto the class, while
its digest still said digested, so no cycle brought it back), and ``merge CLASS:X memory:T`` made
a turn carry a class's aliases and semantic edges. MEMORY, SESSION and NOTE nodes are provenance
anchors (``forget`` takes them out): a merge naming one is refused (exit 1), changing nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import make_session, run_cli, write_sessions

TEXT = "turn {i}: the LazyEdgeQueue feeds the GraphStore and the RetryBudget"


@pytest.fixture(scope="module")
def digested_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("merge")
    data = root / "data"
    sessions = write_sessions(root / "s.jsonl", [make_session("s1", 4, text=TEXT), make_session("s2", 4, text=TEXT)])
    assert run_cli("import", str(sessions), env={"REM_DATA_DIR": str(data)}).returncode == 0
    assert run_cli("--once", env={"REM_DATA_DIR": str(data)}).returncode == 0
    return data


@pytest.fixture
def data(digested_once: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(digested_once, copy)
    return copy


def _graph_digest(data: Path) -> str:
    done = run_cli("export", "--include-anchors", env={"REM_DATA_DIR": str(data)})
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads(done.stdout)
    payload.pop("generated_at")
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize(
    ("merged", "into"),
    [
        ("session:s1", "CLASS:LazyEdgeQueue"),
        ("CLASS:LazyEdgeQueue", "memory:s1-t0000"),
        ("memory:s1-t0001", "memory:s1-t0000"),
        ("session:s2", "session:s1"),
    ],
)
def test_a_merge_naming_a_memory_or_session_node_is_refused_and_changes_nothing(data: Path, merged: str, into: str) -> None:
    before = _graph_digest(data)
    done = run_cli("merge", merged, into, env={"REM_DATA_DIR": str(data)})
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert "provenance anchor" in done.stderr.splitlines()[-1]
    assert _graph_digest(data) == before


def test_knowledge_nodes_still_merge_and_unmerge(data: Path) -> None:
    env = {"REM_DATA_DIR": str(data)}
    def shown(node_id: str) -> dict:
        done = run_cli("show", node_id, "--json", env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    assert run_cli("merge", "CLASS:RetryBudget", "CLASS:GraphStore", env=env).returncode == 0
    assert shown("CLASS:RetryBudget")["id"] == "CLASS:GraphStore"  # by its alias now
    assert run_cli("unmerge", "CLASS:RetryBudget", env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    assert shown("CLASS:RetryBudget")["id"] == "CLASS:RetryBudget"
    assert "RetryBudget" not in shown("CLASS:GraphStore")["aliases"]
