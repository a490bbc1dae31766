"""The CLI as a new operator meets it, through the real ``python -m worker``: read commands on a
data dir that is not there, a broken config file, a mistyped variable, ``--version``, the help
texts and exit codes, and what ``status`` says about identity candidates."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from worker.cli import build_parser

READ_COMMANDS = [
    ["status"], ["status", "--json"], ["search", "queue"], ["show", "CLASS:LazyEdgeQueue"], ["export"],
    ["export", "--out", "graph.json"], ["candidates"], ["backup", "copy.sqlite3"], ["retry", "--all"],
]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c))
def test_read_commands_on_a_missing_data_dir_say_so_and_create_nothing(tmp_path: Path, command: list[str]) -> None:
    before = _tree(tmp_path)
    done = run_cli(*command, env={"REM_DATA_DIR": "nowhere/data"}, cwd=tmp_path)  # relative: printed resolved
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == (
        f"rem-cycle: no data dir at {(tmp_path / 'nowhere' / 'data').resolve()}, so no graph database "
        "(set REM_DATA_DIR or data_dir in --config; `rem-cycle --once` creates it)"
    )
    assert done.stdout == ""
    assert _tree(tmp_path) == before, "a read command created files"


def test_read_commands_on_a_data_dir_without_a_graph_create_no_database(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for command in (["search", "queue"], ["candidates", "--json"]):
        done = run_cli(*command, env={"REM_DATA_DIR": str(data)})
        assert done.returncode == 1
        assert f"no graph database at {data.resolve() / 'graph.sqlite3'}" in done.stderr
        assert list(data.iterdir()) == []


def test_invalid_toml_is_a_one_line_configuration_error(tmp_path: Path) -> None:
    conf = tmp_path / "rem.toml"
    conf.write_text('batch_limit = 7\n[cycle\n', encoding="utf-8")
    done = run_cli("--config", str(conf), "status", env={"REM_DATA_DIR": str(tmp_path / "d")})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"rem-cycle: invalid configuration: {conf}: Expected ']' at the end of a table declaration (at line 2, column 7)"
    ]
    conf.write_text("batch_limt = 7\n", encoding="utf-8")
    done = run_cli("status", env={"REM_CONFIG": str(conf), "REM_DATA_DIR": str(tmp_path / "d")})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"rem-cycle: invalid configuration: unknown setting 'batch_limt' in {conf} (did you mean batch_limit?)"
    ]
    assert not (tmp_path / "d").exists()


def test_an_unknown_rem_variable_is_warned_about_once_with_the_closest_name(tmp_path: Path) -> None:
    env = {"REM_DATA_DIR": str(tmp_path / "d"), "REM_BATCH_LIMT": "3", "REM_LOG_FORMAT": "json",
           "REM_CONFIG": str(tmp_path / "rem.toml")}
    (tmp_path / "rem.toml").write_text("batch_limit = 2\n", encoding="utf-8")
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 0, done.stderr
    warnings = [json.loads(line) for line in done.stderr.splitlines() if "not a rem-cycle setting" in line]
    assert [(w["level"], w["event"]) for w in warnings] == [
        ("warning", "REM_BATCH_LIMT is not a rem-cycle setting and is ignored (did you mean REM_BATCH_LIMIT?)")
    ]
    assert "REM_CONFIG" not in done.stderr  # read, but not a setting: no warning


def test_version() -> None:
    from importlib.metadata import version

    done = run_cli("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"rem-cycle {version('rem-cycle')}")


def _parsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_every_argument_of_every_command_has_help() -> None:
    missing = [
        f"{prog} {action.option_strings or action.dest}"
        for prog, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()
    ]
    assert missing == []
    for prog, parser in _parsers(build_parser()):
        assert parser.description, f"{prog} --help has no description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions), prog


def test_help_says_no_command_runs_the_daemon_where_the_data_dir_is_and_the_exit_codes(tmp_path: Path) -> None:
    done = run_cli("--help", env={"REM_DATA_DIR": "somewhere"}, cwd=tmp_path)
    assert done.returncode == 0
    text = done.stdout
    assert "Without a COMMAND, rem-cycle runs the daemon" in text
    assert str((tmp_path / "somewhere").resolve()) in text
    codes = dict(re.findall(r"^  (\d)  (\S+)", text.split("exit codes:")[1], re.MULTILINE))
    assert sorted(codes) == ["0", "1", "2", "3"]
    # README documents the same codes (one table row each).
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for code in codes:
        assert re.search(rf"^\| `{code}` \|", readme, re.MULTILINE), f"exit code {code} is not in README"


async def test_status_counts_identity_candidates_as_the_run_records_do(settings, tmp_path: Path) -> None:
    """A run record's ``identity_candidates`` counts nodes found ambiguous; one node may have
    several pairs. ``status`` reports both, named, and its node count adds up with the runs'."""
    from tests.test_identity import _import, _session
    from worker.cycle import run_cycle

    env = {"REM_DATA_DIR": str(settings.data_dir)}
    per_run = []
    for sid, created, text in (
        ("a", "2026-11-01T10:00:00Z", "We changed src/store/graph_store.py, store/graph_store.py and pkg/loader.py today."),
        # A bare file name may be either spelling of the one file with that base name: graph_store.py
        # has two pairs (beside paths of two files it would have none).
        ("b", "2026-11-02T10:00:00Z", "Then graph_store.py and loader.py changed again."),
    ):
        await _import(settings, tmp_path, [_session(sid, created, [text])])
        result = await run_cycle(settings)
        assert result.outcome == "completed", result.message
        per_run.append(result.phases["extract"]["identity_candidates"])
    listed = json.loads(run_cli("candidates", "--json", env=env).stdout)
    status = run_cli("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    payload = json.loads(status.stdout)
    assert payload["data_dir"] == str(settings.data_dir.resolve())
    assert payload["identity_candidates"] == sum(per_run) == 2
    assert payload["identity_candidate_pairs"] == listed["total"] == 3
    text = run_cli("status", env={**env, "COLUMNS": "200"}).stdout
    assert "identity candidates to review: 2 nodes in 3 pairs" in text
    assert "identity candidate pairs (3 of 3)" in run_cli("candidates", env={**env, "COLUMNS": "200"}).stdout
