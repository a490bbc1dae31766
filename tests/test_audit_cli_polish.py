"""Small defects of the local journey, through the real CLI: read commands that must create
nothing, output whose reader went away, a terminal that cannot show every character, and the
words of a refused argument."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, make_session, run_cli, write_sessions

SAMPLE = ROOT / "examples" / "sessions.jsonl"


@pytest.fixture(scope="module")
def sample_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("polish") / "data"
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("import", str(SAMPLE), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    return data


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_status_on_a_data_dir_without_a_graph_says_so_and_creates_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    imported = tmp_path / "imported"  # an import made the data dir (its embedded Chroma), no cycle yet
    sessions = write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])
    assert run_cli("import", str(sessions), env={"REM_DATA_DIR": str(imported)}).returncode == 0
    for data in (empty, imported):
        before = _tree(data)
        for args in (["status"], ["status", "--json"]):
            done = run_cli(*args, env={"REM_DATA_DIR": str(data)})
            assert done.returncode == 1, (args, done.stdout, done.stderr[-2000:])
            assert done.stdout == ""
            assert done.stderr.splitlines() == [
                f"rem-cycle: no graph database at {(data / 'graph.sqlite3').resolve()} "
                "(run a REM cycle first: rem-cycle --once)"
            ]
            assert _tree(data) == before
