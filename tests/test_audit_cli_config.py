"""Settings a user can type that every command must refuse up front, through the real CLI: a
value the worker cannot use is one ``invalid configuration`` line and exit 2, never a cycle that
crashes in ``setup`` or a traceback from ``status``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_session, run_cli, write_sessions


def test_a_lease_timeout_no_clock_can_reach_is_a_configuration_error(tmp_path: Path) -> None:
    # Each value refused by each command in turn on one data dir (the refusal depends on the value,
    # not on the dir: the dir and the allowed run are shared so as to start them once, not per value).
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("import", str(write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])), env=env).returncode == 0
    for value in ("inf", "1e300", "1e12"):
        bad = {**env, "REM_LEASE_TIMEOUT_SECONDS": value}
        for command in (["--once"], ["status"], ["forget", "--session", "s-1", "--dry-run"]):
            done = run_cli(*command, env=bad)
            assert done.returncode == 2, (value, command, done.stdout, done.stderr[-2000:])
            assert done.stderr.splitlines() == [
                "rem-cycle: invalid configuration: REM_LEASE_TIMEOUT_SECONDS: Input should be less than or equal to 31622400"
            ], (value, command)
            assert "Traceback" not in done.stderr
    # Nothing was recorded by the refused cycles, and the longest lease allowed runs a cycle.
    assert not (data / "graph.sqlite3").exists()
    done = run_cli("--once", env={**env, "REM_LEASE_TIMEOUT_SECONDS": str(366 * 86_400)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert run_cli("status", env={**env, "REM_LEASE_TIMEOUT_SECONDS": str(366 * 86_400)}).returncode == 0


@pytest.mark.parametrize("value", ["true", "5", "{concept = 1}", '["CONCEPT", 7]'])
def test_semantic_types_that_are_no_list_of_names_are_a_configuration_error(tmp_path: Path, value: str) -> None:
    conf = tmp_path / "rem.toml"
    conf.write_text(f"semantic_types = {value}\n", encoding="utf-8")
    done = run_cli("--config", str(conf), "status", env={"REM_DATA_DIR": str(tmp_path / "data")})
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        f"rem-cycle: invalid configuration: {conf}: semantic_types: expected type names "
        '(a TOML list of strings, or words: "CONCEPT CLASS FILE")'
    ]


def test_an_empty_data_dir_setting_is_the_default_not_the_current_directory(tmp_path: Path) -> None:
    # ``REM_DATA_DIR=`` in .env, or ``REM_DATA_DIR=$UNSET_VARIABLE``: the default, as --help says.
    work = tmp_path / "project"
    work.mkdir()
    done = run_cli("status", env={"REM_DATA_DIR": ""}, cwd=work)
    assert done.returncode == 1
    assert done.stderr.startswith(f"rem-cycle: no data dir at {(work / '.rem-data').resolve()}, so no graph database")
    assert list(work.iterdir()) == []
    assert str((work / ".rem-data").resolve()) in run_cli("--help", env={"REM_DATA_DIR": ""}, cwd=work).stdout
    sessions = write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])
    assert run_cli("import", str(sessions), env={"REM_DATA_DIR": ""}, cwd=work).returncode == 0
    assert [p.name for p in work.iterdir()] == [".rem-data"]
    conf = tmp_path / "rem.toml"
    conf.write_text('data_dir = ""\n', encoding="utf-8")
    done = run_cli("--config", str(conf), "status", cwd=work)  # the import's data dir: no graph yet
    assert done.returncode == 1
    assert done.stderr.startswith(f"rem-cycle: no graph database at {(work / '.rem-data' / 'graph.sqlite3').resolve()}")
    assert [p.name for p in work.iterdir()] == [".rem-data"]


@pytest.mark.parametrize("command", [
    ["show", "session:s-1", "--limit"], ["search", "turn", "--limit"], ["candidates", "--limit"], ["status", "--runs"],
])
def test_a_count_past_what_the_database_can_take_is_a_usage_error(tmp_path: Path, command: list[str]) -> None:
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    assert run_cli("import", str(write_sessions(tmp_path / "s.jsonl", [make_session("s-1")])), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    done = run_cli(*command, str(2**64), env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].endswith(f"{command[-1]}: must be 0 to 1000000000, not {2**64}")
    assert run_cli(*command, "1000000000", env=env).returncode == 0
