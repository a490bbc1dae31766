"""A fifth walk through README as a new user (userwalk5, thirtieth session): "Forgetting a node",
``--as-of``, "Identity resolution" and the operational commands, on the shipped sample. Each test
is a place where what a command printed disagreed with README or misled its reader."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.conftest import copy_digested_sample, run_cli

pytestmark = pytest.mark.timeout(120)

PERSON = "PERSON:Jonas Weber"  # one of examples/sessions.jsonl's people: an id with a space


def _env(digested_sample: Path, tmp_path: Path) -> dict[str, str]:
    return {"REM_DATA_DIR": str(copy_digested_sample(digested_sample, tmp_path / "data"))}


def _hint(line: str, marker: str) -> list[str]:
    """The command a printed line tells the reader to run (after ``marker``, up to its closing
    parenthesis or semicolon), split as a shell splits it pasted."""
    command = line.split(marker, 1)[1]
    for end in (");", ")"):
        command = command.split(end, 1)[0]
    return shlex.split(command)


def test_the_undo_commands_printed_for_an_id_with_a_space_run_as_pasted(digested_sample: Path, tmp_path: Path) -> None:
    """``forget --node "Jonas Weber"`` printed ``undo: rem-cycle forget --node PERSON:Jonas Weber
    --undo``, and ``merge`` ``undo: rem-cycle unmerge PERSON:Jonas Weber``: pasted into a shell, the
    id is two words (``unrecognized arguments: Weber``, exit 2). The ids are quoted as a shell reads
    them."""
    env = _env(digested_sample, tmp_path)
    merged = run_cli("merge", PERSON, "PERSON:Ravi Iyer", env=env)
    assert merged.returncode == 0, merged.stderr
    undo = _hint(merged.stdout, "undo: rem-cycle ")
    assert undo == ["unmerge", PERSON], merged.stdout
    again = run_cli("merge", PERSON, "PERSON:Ravi Iyer", env=env)
    assert again.returncode == 1
    assert _hint(again.stderr, "PERSON:Ravi Iyer: rem-cycle ")[:2] == ["unmerge", PERSON], again.stderr
    into = run_cli("unmerge", "PERSON:Ravi Iyer", env=env)
    assert into.returncode == 1
    assert _hint(into.stderr, "undo one with rem-cycle ") == ["unmerge", PERSON], into.stderr
    assert run_cli(*undo, env=env).returncode == 0

    forgot = run_cli("forget", "--node", "Jonas Weber", env=env)
    assert forgot.returncode == 0, forgot.stderr
    let_back = _hint(forgot.stdout, "undo: rem-cycle ")
    assert let_back == ["forget", "--node", PERSON, "--undo"], forgot.stdout
    done = run_cli(*let_back, env=env)
    assert done.returncode == 0, done.stderr


def test_forgetting_a_forgotten_node_again_says_it_is_kept_out(digested_sample: Path, tmp_path: Path) -> None:
    """A second ``forget --node "Jonas Weber"`` (or by its id) said ``no knowledge node 'Jonas
    Weber' …``, exit 1, as of a name never in the graph, although the name is kept out. It is the
    forget of a node gone already, as README's ``--session`` forget run again is: exit 0, saying
    so, the suppression kept."""
    env = _env(digested_sample, tmp_path)
    assert run_cli("forget", "--node", "Jonas Weber", env=env).returncode == 0
    for given in ("Jonas Weber", PERSON, "jonas weber"):
        again = run_cli("forget", "--node", given, env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith(f"removed {PERSON}: nothing (it was gone already); kept out"), again.stdout
    assert run_cli("forget", "--node", "Nobody Here", env=env).returncode == 1
    assert run_cli("forget", "--node", PERSON, "--undo", env=env).returncode == 0


def test_a_search_by_a_type_no_node_has_names_the_types(digested_sample: Path, tmp_path: Path) -> None:
    """``search queue --label CLAS`` (a typo) said ``no node matches 'queue'``, exit 0, as if no
    node's name held the word — the type it was filtered by unsaid. It names the type, and when no
    knowledge node has it, the types the graph has (``SESSION`` too: search finds knowledge nodes)."""
    env = _env(digested_sample, tmp_path)
    typo = run_cli("search", "queue", "--label", "CLAS", env=env)
    assert typo.returncode == 0, typo.stderr
    assert typo.stdout.strip() == ("no CLAS node matches 'queue' (no knowledge node is of type CLAS: the graph's types are "
                                   "CLASS, CONCEPT, FILE, ISSUE, METHOD, PERSON, TEST)"), typo.stdout
    anchors = run_cli("search", "flaky", "--label", "session", env=env)
    assert anchors.stdout.strip().startswith("no SESSION node matches 'flaky' (no knowledge node is of type SESSION:"), anchors.stdout
    none = run_cli("search", "zzzz", "--label", "CLASS", env=env)
    assert none.stdout.strip() == "no CLASS node matches 'zzzz'", none.stdout
    assert run_cli("search", "zzzz", env=env).stdout.strip() == "no node matches 'zzzz'"


@pytest.mark.parametrize("as_of", ["9999-12-31T23:59:59-05:00", "99999999999999999999"])
def test_an_as_of_out_of_range_says_which_range(digested_sample: Path, tmp_path: Path, as_of: str) -> None:
    """README: a time that leaves the years 1–9999 in UTC is a usage error; the line said only
    ``as_of '9999-12-31T23:59:59-05:00' is out of range``, leaving the reader to guess which range
    (the date looks valid as typed). It says the range, on every command that reads ``--as-of``."""
    env = _env(digested_sample, tmp_path)
    for command in (["search", "queue"], ["show", "CLASS:LazyEdgeQueue"], ["recall", "queue"]):
        done = run_cli(*command, "--as-of", as_of, env=env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"rem-cycle: as_of {as_of!r} is out of range: a moment must fall within the years 1-9999 in UTC"], done.stderr


def test_retry_with_nothing_to_reset_promises_no_retry(digested_sample: Path, tmp_path: Path) -> None:
    """``retry --all`` on a graph with nothing failing, or ``retry --session`` of a digested session,
    printed ``reset 0 sessions and 0 failed chunks; the next cycle tries them again`` — a retry of
    nothing promised; and of an unknown id that line came on stdout beside the error on stderr."""
    env = _env(digested_sample, tmp_path)
    for args in (["--all"], ["--session", "sess-2026-11-09-7e0cb4"]):
        done = run_cli("retry", *args, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == ("nothing to reset: no session named is failing or undigestible (rem-cycle status "
                                       "lists them)" if args[0] == "--session" else
                                       "nothing to reset: no session is failing or undigestible (rem-cycle status lists them)"), done.stdout
    unknown = run_cli("retry", "--session", "nope", env=env)
    assert unknown.returncode == 1
    assert unknown.stdout == "" and unknown.stderr.splitlines() == [
        "rem-cycle: no session 'nope' in the graph's run state: no cycle has read it (check the id: rem-cycle status lists failing sessions)"]


def test_show_of_a_forgotten_node_says_it_is_kept_out(digested_sample: Path, tmp_path: Path) -> None:
    """``show "Jonas Weber"`` after ``forget --node "Jonas Weber"`` said ``no node 'Jonas Weber'``,
    as of a name never in the graph: the reader could not tell a typo from a forget, nor how to let
    the node back. It names the forgotten node and the ``--undo``; still exit 1."""
    env = _env(digested_sample, tmp_path)
    assert run_cli("forget", "--node", "Jonas Weber", env=env).returncode == 0
    for given in ("Jonas Weber", PERSON):
        shown = run_cli("show", given, env=env)
        assert shown.returncode == 1
        assert shown.stderr.splitlines() == [
            f"rem-cycle: no node {given!r}: {PERSON} was forgotten and is kept out (rem-cycle forget --node; "
            "let it back: rem-cycle forget --node 'PERSON:Jonas Weber' --undo)"], shown.stderr
    assert run_cli("show", "Nobody Here", env=env).stderr.splitlines() == ["rem-cycle: no node 'Nobody Here'"]
