"""README is the user's manual: its settings table and its command table must say what the code
does. A new setting, a renamed one, a changed default or a new flag that README does not name fails
here (the docsrun audit found `status --runs`, `export --include-anchors` and others missing). Its
example commands of merging and forgetting a node run on the shipped sample as written."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from config import Settings, load_settings
from tests.conftest import ROOT, run_cli
from worker.cli import build_parser

README = (ROOT / "README.md").read_text(encoding="utf-8")
# Flags every command takes, documented once for all ("Every command takes `--config FILE` …").
COMMON_FLAGS = {"--help", "--config", "--json"}


def _settings_table() -> dict[str, str | None]:
    """``REM_NAME`` → the default README's Configuration table gives it (None: no literal default).
    A row may name several settings, the later ones by their suffix alone (`_ENTITIES`), with
    their defaults in the same order."""
    section = README.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, str | None] = {}
    for row in re.findall(r"^\| `REM_.*$", section, re.MULTILINE):
        names_cell, defaults_cell = row.strip("|").split("|")[:2]
        names: list[str] = []
        for token in re.findall(r"`(REM_[A-Z0-9_]+|_[A-Z0-9_]+)`", names_cell):
            names.append(names[-1].rsplit("_", 1)[0] + token if token.startswith("_") else token)
        defaults = re.findall(r"`([^`]*)`", defaults_cell)
        for index, name in enumerate(names):
            table[name] = defaults[index] if index < len(defaults) else None
    return table


def test_the_settings_table_names_every_setting_and_nothing_else() -> None:
    settings = {f"REM_{name.upper()}" for name in Settings.model_fields}
    documented = set(_settings_table())
    assert settings - documented == set(), "settings missing from README's Configuration table"
    assert documented - settings == set(), "names in README's Configuration table that are no setting"


def test_the_settings_tables_defaults_are_the_real_ones(clean_env: pytest.MonkeyPatch) -> None:
    # Set as the environment, every literal default README gives changes nothing.
    defaults = load_settings()
    literal = {name: value for name, value in _settings_table().items() if value is not None and "<" not in value}
    for name, value in literal.items():
        clean_env.setenv(name, value)
    assert load_settings() == defaults, literal


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, by name, as ``rem-cycle --help`` lists them."""
    parser = build_parser()
    (subparsers,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return dict(subparsers.choices)


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """The long options ``parser`` takes."""
    return {option for action in parser._actions for option in action.option_strings if option.startswith("--")}


@pytest.mark.parametrize("command", sorted(_commands()))
def test_the_command_table_names_every_command_and_flag(command: str) -> None:
    # The rows of "Running it"'s command table that name the command (`rem-cycle search TEXT`, …).
    rows = [row for row in re.findall(r"^\| `rem-cycle .*$", README, re.MULTILINE)
            if re.search(rf"`rem-cycle {re.escape(command)}(?![\w-])", row)]
    assert rows, f"rem-cycle {command} is not in README's command table"
    missing = {flag for flag in _flags(_commands()[command]) - COMMON_FLAGS if flag not in " ".join(rows)}
    assert missing == set(), f"rem-cycle {command}: flags missing from its README row"


def test_the_top_level_flags_are_documented() -> None:
    for flag in _flags(build_parser()) - {"--help"}:
        assert f"`{flag}" in README or f"{flag}`" in README or f"[{flag}" in README, flag


def test_the_mcp_section_gives_show_nodes_budget_refusal_in_its_own_words() -> None:
    """README's MCP section shows the tool error of a ``show_node`` whose entity alone exceeds
    ``budget_tokens`` as the code words it (the numbers aside). README did not say it (leftalone23)."""
    from pipelines.recall import RecallInputError, item_tokens, pack_entity

    entity = {"id": "CLASS:GraphExplorerPanel", "label": "CLASS", "name": "GraphExplorerPanel", "description": "x" * 400}
    with pytest.raises(RecallInputError) as refused:
        pack_entity(entity, [], budget_tokens=50)
    taken = item_tokens(entity)
    assert str(refused.value) == f"CLASS:GraphExplorerPanel alone takes {taken} tokens, more than budget_tokens 50: ask with a larger budget"
    section = README.split("\n### MCP server: recall for agents\n", 1)[1].split("\n### ", 1)[0]
    words = re.compile(r"\d+")
    assert words.sub("N", str(refused.value)) in words.sub("N", " ".join(section.split()))


def _sh_block(section: str) -> list[list[str]]:
    """The commands of the first ``sh`` block under README's heading ``section``, as a shell splits
    them (comments dropped)."""
    block = re.search(rf"^{re.escape(section)}\n+```sh\n(.*?)```", README, re.MULTILINE | re.DOTALL)
    assert block, section
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines() if line.strip()]


def test_the_identity_and_forget_node_examples_run_on_the_shipped_sample(tmp_path: Path) -> None:
    """README's demo (import the shipped sample, one cycle) and then the example blocks of
    "Identity resolution, merges and unmerge" and "Forgetting a node", in order, as written: each
    exits 0 — their ids are nodes the sample builds (they named `FILE:lazy_queue.py`,
    `CLASS:LazyEdgeQueues` and `Jane Doe`, which it does not: `no node …`, exit 1)."""
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    for command in (["import", "examples/sessions.jsonl"], ["--once"]):
        done = run_cli(*command, env=env)
        assert done.returncode == 0, (command, done.stderr)
    for section in ("### Identity resolution, merges and unmerge", "### Forgetting a node"):
        for command in _sh_block(section):
            assert command[0] == "rem-cycle", command
            done = run_cli(*command[1:], env=env)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
