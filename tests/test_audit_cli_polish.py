"""Small defects of the local journey, through the real CLI: read commands that must create
nothing, output whose reader went away, a terminal that cannot show every character, and the
words of a refused argument."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith(("-wal", "-shm")))


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


def _cli_process(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "worker", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=ROOT
    )


@pytest.mark.parametrize("args", [
    ["export"], ["export", "--format", "graphml"], ["status"], ["status", "--json"], ["show", "CLASS:LazyEdgeQueue"],
    ["search", "queue"], ["recall", "queue"], ["recall", "queue", "--json"], ["candidates"], ["drain", "--dry-run"],
])
def test_every_command_whose_reader_went_away_stops_quietly_with_141(sample_data: Path, args: list[str]) -> None:
    # `rem-cycle export | head -c 100`: the reader takes what it wants and goes; for the others it
    # goes before the command writes anything (their output fits the pipe's buffer).
    before = _tree(sample_data)
    process = _cli_process(*args, env={"REM_DATA_DIR": str(sample_data)})
    assert process.stdout is not None and process.stderr is not None
    if args[0] == "export":  # about 1 MB (GraphML: in one piece): far past the pipe's buffer
        assert len(process.stdout.read(100)) == 100
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, stderr[-2000:]
    assert stderr == ""
    assert _tree(sample_data) == before


def test_the_reader_gone_exit_status_is_documented() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^\| `141` \| the output's reader went away", readme, re.MULTILINE)
    assert "141  the output's reader went away" in run_cli("--help").stdout


def _run_encoded(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "worker", *args], capture_output=True, env=full_env, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_cannot_show_every_character_gets_escapes_not_a_crash(sample_data: Path, encoding: str) -> None:
    env = {"REM_DATA_DIR": str(sample_data), "PYTHONIOENCODING": encoding}
    for args in (["status"], ["show", "CLASS:LazyEdgeQueue"], ["recall", "queue"], ["search", "queue"], ["candidates"]):
        done = _run_encoded(*args, env=env)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        assert b"Traceback" not in done.stderr
        done.stdout.decode(encoding)  # all of it in the terminal's encoding
    # status's separator (U+00B7) and its cut cells' ellipsis (U+2026): escaped where not encodable.
    status = _run_encoded("status", env=env).stdout.decode(encoding)
    assert "\\u2026" in status and ("\\xb7" in status) == (encoding == "ascii")
    # One JSON object, ASCII (escaped in JSON's own way), the same data as on a UTF-8 terminal.
    utf8 = {**env, "PYTHONIOENCODING": "utf-8"}
    for args in (["status", "--json"], ["recall", "queue", "--json"], ["show", "CLASS:LazyEdgeQueue", "--json"]):
        done = _run_encoded(*args, env=env)
        assert done.returncode == 0 and done.stdout.isascii(), args
        answer, reference = json.loads(done.stdout), json.loads(_run_encoded(*args, env=utf8).stdout)
        if args[0] == "status":
            assert answer["graph"] == reference["graph"]
        else:
            assert answer == reference
    # export writes its file format's encoding (UTF-8), as --out does, whatever the terminal's.
    done = _run_encoded("export", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not done.stdout.isascii()
    assert json.loads(done.stdout.decode("utf-8"))["nodes"] == json.loads(_run_encoded("export", env=utf8).stdout)["nodes"]


@pytest.mark.parametrize(("option", "value", "accepted"), [
    ("--budget-tokens", "-5", "1 to 200000"), ("--budget-tokens", "0", "1 to 200000"),
    ("--budget-tokens", "200001", "1 to 200000"), ("--limit", "-1", "1 to 100"), ("--limit", "0", "1 to 100"),
])
def test_a_refused_recall_count_says_what_is_accepted(sample_data: Path, option: str, value: str, accepted: str) -> None:
    done = run_cli("recall", "queue", option, value, env={"REM_DATA_DIR": str(sample_data)})
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"rem-cycle recall: error: argument {option}: must be {accepted}, not {value}"
