"""Paths an operator names for a command's output, through the real CLI: ``export --out`` and
``backup PATH`` replace what is at PATH, so a PATH among rem-cycle's own files (a tab completion
away: ``--out .rem-data/g<TAB>``) would replace the graph database or the lazy-edge queue with a
JSON document or a copy. They refuse, with one line, and change nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import copy_digested_sample, run_cli


@pytest.fixture(scope="module")
def sample_data(tmp_path_factory: pytest.TempPathFactory, digested_sample: Path) -> Path:
    data = copy_digested_sample(digested_sample, tmp_path_factory.mktemp("paths") / "data")
    assert (data / "lazy-edges.jsonl").stat().st_size > 0  # the sample's three waiting edges
    return data


def _fingerprint(data: Path) -> dict[str, str]:
    return {str(p.relative_to(data)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(data.rglob("*")) if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


@pytest.mark.parametrize("name", ["graph.sqlite3", "lazy-edges.jsonl", "lazy-edges.dead.jsonl", "graph.json", "chroma/x.json"])
@pytest.mark.parametrize("command", ["export", "backup"])
def test_output_onto_rem_cycles_own_files_is_refused(sample_data: Path, command: str, name: str) -> None:
    env = {"REM_DATA_DIR": str(sample_data)}
    before = _fingerprint(sample_data)
    target = sample_data / name
    args = ["export", "--out", str(target)] if command == "export" else ["backup", str(target)]
    done = run_cli(*args, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"rem-cycle: refusing to write to {target.resolve()}: rem-cycle keeps its own files there (the graph database, "
        "the lazy-edge queue, locks, the embedded Chroma) and one could be replaced; name a file in another folder "
        "(a folder of your own inside the data dir is fine)"
    ]
    assert _fingerprint(sample_data) == before
    assert run_cli("status", env=env).returncode == 0


def test_a_folder_of_your_own_inside_the_data_dir_is_fine(sample_data: Path) -> None:
    env = {"REM_DATA_DIR": str(sample_data)}
    assert run_cli("backup", str(sample_data / "backups" / "graph.sqlite3"), env=env).returncode == 0
    (sample_data / "exports").mkdir()
    assert run_cli("export", "--out", str(sample_data / "exports" / "graph.json"), env=env).returncode == 0
    assert (sample_data / "exports" / "graph.json").read_text(encoding="utf-8").startswith("{")
