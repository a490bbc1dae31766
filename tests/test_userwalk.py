"""What a new user following README met (RELIABILITY.md, "userwalk"): ids copied from one command's
output refused by another, a ``--limit 0`` that said there was nothing, an ``export --out`` into a
folder not made yet, and ``show`` leaving out what README says it prints. Real CLI processes on
real graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from tests.conftest import copy_digested_sample, free_port, make_session, run_cli, write_sessions
from tests.llm_server import LLMServer, malformed
from tests.llm_server import llm_server  # noqa: F401 - fixture
from tests.test_forget import _env
from tests.test_identity import _import, _session


@pytest.fixture
def sample(tmp_path: Path, digested_sample: Path) -> dict[str, str]:
    """The environment of a command on a copy of the README demo's data dir."""
    return {"REM_DATA_DIR": str(copy_digested_sample(digested_sample, tmp_path / "data"))}


@pytest.mark.both_backends
async def test_forget_takes_a_session_by_the_id_show_and_recall_print(settings: Settings, tmp_path: Path) -> None:
    """``show``, ``recall`` and ``export`` name a session ``session:<id>``, and ``recall --session``
    takes that form; ``forget --session`` took it for another id: nothing removed, and a tombstone
    for an id no session has."""
    from worker.cycle import run_cycle

    await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The LazyEdgeQueue drops lines."])])
    assert (await run_cycle(settings)).outcome == "completed"
    env = _env(settings)
    shown = json.loads(run_cli("show", "CLASS:LazyEdgeQueue", "--json", env=env).stdout)
    session = shown["sources"][0]["id"]
    assert session == "session:a"
    done = run_cli("forget", "--session", session, "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["id"], report["tombstone"]) == ("a", True)
    assert report["points"] > 0 and "CLASS:LazyEdgeQueue" in report["knowledge_nodes_removed"]
    assert run_cli("show", "CLASS:LazyEdgeQueue", env=env).returncode == 1


def test_show_prints_when_a_node_was_first_and_last_seen(sample: dict[str, str]) -> None:
    """README: "``show`` prints ``first_seen`` and ``last_seen``" — only ``--json`` did."""
    view = json.loads(run_cli("show", "CLASS:LazyEdgeQueue", "--json", env=sample).stdout)
    assert view["first_seen"] < view["last_seen"]
    text = run_cli("show", "CLASS:LazyEdgeQueue", env=sample)
    assert text.returncode == 0, text.stderr
    assert f"first seen {view['first_seen']} · last seen {view['last_seen']}" in text.stdout


async def test_limit_zero_lists_everything_as_show_does(settings: Settings, tmp_path: Path) -> None:
    """``show --limit 0`` is all; ``search --limit 0`` said ``no node matches`` and ``candidates
    --limit 0`` ``no identity candidates to review`` while there were some."""
    from worker.cycle import run_cycle

    for sid, created, text in (
        ("a", "2026-11-01T10:00:00Z", "We changed src/store/graph_store.py, store/graph_store.py and pkg/loader.py today."),
        ("b", "2026-11-02T10:00:00Z", "Then graph_store.py and loader.py changed again."),
    ):
        await _import(settings, tmp_path, [_session(sid, created, [text])])
        assert (await run_cycle(settings)).outcome == "completed"
    env = {"REM_DATA_DIR": str(settings.data_dir), "COLUMNS": "200"}
    pairs = json.loads(run_cli("candidates", "--limit", "0", "--json", env=env).stdout)
    assert (len(pairs["candidates"]), pairs["total"]) == (3, 3)
    assert "identity candidate pairs (3 of 3)" in run_cli("candidates", "--limit", "0", env=env).stdout
    found = json.loads(run_cli("search", ".py", "--json", env=env).stdout)["results"]
    assert len(found) >= 3
    assert json.loads(run_cli("search", ".py", "--limit", "0", "--json", env=env).stdout)["results"] == found


def test_export_out_makes_the_folder_as_backup_does(sample: dict[str, str], tmp_path: Path) -> None:
    """``backup backups/graph.sqlite3`` makes ``backups/``; ``export --out exports/graph.json`` failed
    with ``[Errno 2] No such file or directory: 'exports/graph.json.part'``."""
    out = tmp_path / "exports" / "2026" / "graph.json"
    done = run_cli("export", "--out", str(out), env=sample)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["version"] == 1
    assert not out.with_name("graph.json.part").exists()


def test_show_with_chroma_down_does_not_call_its_turns_missing(sample: dict[str, str]) -> None:
    """With the turns' text unreadable (Chroma down) ``show`` said so, then printed ``(turn not
    found in Chroma)`` under every turn, as though the turns were deleted."""
    down = {**sample, "REM_CHROMA_URL": f"http://127.0.0.1:{free_port()}", "REM_CHROMA_TIMEOUT_SECONDS": "2"}
    text = run_cli("show", "CLASS:LazyEdgeQueue", "--limit", "2", env=down)
    assert text.returncode == 0, text.stderr
    assert "turn texts unavailable: cannot open Chroma" in text.stdout
    assert "(turn not found in Chroma)" not in text.stdout
    assert text.stdout.count("(text unavailable: Chroma could not be read)") == 2


async def test_retry_takes_a_session_by_its_node_id(settings: Settings, tmp_path: Path, llm_server: LLMServer) -> None:
    """``retry --session session:a`` reset nothing (``reset 0 sessions and 0 failed chunks``) while
    ``a``'s chunk had failed: the id ``show`` and ``recall`` print was read as another session's."""
    from worker.cycle import run_cycle

    llm_server.script(malformed(), malformed())  # the answer and its repair round: the chunk fails
    model = settings.model_copy(update={"extractor": "openai", "llm_base_url": llm_server.url, "llm_max_retries": 0})
    await _import(settings, tmp_path, [_session("a", "2026-11-01T10:00:00Z", ["The LazyEdgeQueue drops lines."])])
    assert (await run_cycle(model)).phases["extract"]["chunks_failed"] == 1
    retry = run_cli("retry", "--session", "session:a", "--json", env={"REM_DATA_DIR": str(settings.data_dir)})
    assert retry.returncode == 0, retry.stderr
    assert json.loads(retry.stdout) == {"chunks_reset": 1, "sessions_reset": 1, "unknown": []}


def test_show_as_of_before_a_node_was_known_says_so(sample: dict[str, str]) -> None:
    """``show CLASS:LazyEdgeQueue --as-of 2020-01-01`` said ``no node 'CLASS:LazyEdgeQueue'``, as
    for an id the graph never had."""
    before = run_cli("show", "CLASS:LazyEdgeQueue", "--as-of", "2020-01-01", env=sample)
    assert before.returncode == 1
    assert before.stderr.strip() == ("rem-cycle: CLASS:LazyEdgeQueue was not known yet as of 2020-01-01T23:59:59.999Z "
                                     "(first seen 2026-11-10T10:49:15.000Z)")
    assert run_cli("show", "CLASS:Nope", "--as-of", "2020-01-01", env=sample).stderr.strip() == "rem-cycle: no node 'CLASS:Nope'"


def test_show_as_of_by_name_before_the_node_was_known_says_so(sample: dict[str, str]) -> None:
    """``show LazyEdgeQueue --as-of 2020-01-01`` (the node's name, as ``show`` takes it) said
    ``no node 'LazyEdgeQueue'``: the look-up of the node as it is now was given the name, not the id."""
    before = run_cli("show", "lazyedgequeue", "--as-of", "2020-01-01", env=sample)
    assert before.returncode == 1
    assert before.stderr.strip() == ("rem-cycle: CLASS:LazyEdgeQueue was not known yet as of 2020-01-01T23:59:59.999Z "
                                     "(first seen 2026-11-10T10:49:15.000Z)")
    assert run_cli("show", "NoSuchName", "--as-of", "2020-01-01", env=sample).stderr.strip() == "rem-cycle: no node 'NoSuchName'"


def test_help_names_both_engines() -> None:
    """``rem-cycle --help`` opened with "into an SQLite knowledge graph" for a user whose
    ``REM_DATABASE_URL`` names PostgreSQL, as README's first section says it may."""
    shown = run_cli("--help")
    assert shown.returncode == 0
    assert "into a knowledge graph in SQLite or PostgreSQL" in " ".join(shown.stdout.split())


@pytest.mark.parametrize("as_of", [None, "2026-12-01"])
def test_show_of_a_session_or_a_turn_says_what_was_said_in_it(sample: dict[str, str], as_of: str | None) -> None:
    """``recall`` and ``show`` print ``session:…`` and ``memory:…`` ids; ``show`` of one printed its
    header alone: no edge, no source, not even the turn's text."""
    when = ["--as-of", as_of] if as_of else []
    session = json.loads(run_cli("show", "session:sess-2026-11-10-f805d4", "--limit", "0", "--json", *when, env=sample).stdout)
    said = {(e["relationship"], e["node"]) for e in session["edges"]}
    assert ("DISCUSSED_IN", "CLASS:RetryPolicy") in said and ("DISCUSSED_IN", "CLASS:LazyEdgeQueue") in said
    assert all(e["direction"] == "in" and not e["node"].startswith(("memory:", "session:")) for e in session["edges"])
    assert session["description"].startswith("Samuel Okafor asked the agent to investigate #1893")  # its summary
    turn = run_cli("show", "memory:sess-2026-11-10-f805d4-t0003", "--limit", "0", *when, env=sample)
    assert turn.returncode == 0, turn.stderr
    assert "MENTIONED_IN" in turn.stdout and "CLASS:LazyEdgeQueue" in turn.stdout
    assert "from session session:sess-2026-11-10-f805d4" in turn.stdout
    assert "sorry for the wall of text" in turn.stdout  # the turn's own text, read from Chroma


def test_help_names_the_data_dir_a_config_file_sets(tmp_path: Path) -> None:
    """``REM_CONFIG`` naming a file with ``data_dir`` (as a deployment sets it): every command used
    that data dir, while ``--help`` said ``./.rem-data`` of the working directory was "here"."""
    config = tmp_path / "rem.toml"
    config.write_text(f'data_dir = "{tmp_path / "graph-home"}"\n', encoding="utf-8")
    shown = run_cli("--help", env={"REM_CONFIG": str(config)}, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"here (unless --config sets data_dir):\n  {(tmp_path / 'graph-home').resolve()}\n" in shown.stdout


@pytest.mark.parametrize("embedding", ["ollama", "openai"])
def test_an_embedding_whose_client_package_is_missing_is_one_line(tmp_path: Path, embedding: str) -> None:
    """README offers ``REM_EMBEDDING=ollama`` and ``openai``; Chroma's functions for them call the
    vendors' client packages, which nothing installs: ``import`` died with a traceback ending
    ``ValueError: The ollama python package is not installed``."""
    import importlib.util

    if importlib.util.find_spec(embedding) is not None:
        pytest.skip(f"the {embedding} package is installed here")
    sessions = write_sessions(tmp_path / "in.jsonl", [make_session("s1", 1)])
    done = run_cli("import", str(sessions), env={"REM_DATA_DIR": str(tmp_path / "data"), "REM_EMBEDDING": embedding})
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"rem-cycle: the {embedding} embedding needs the {embedding} Python package, which Chroma's embedding "
        f"function calls: pip install {embedding}"
    ]


def test_a_config_key_written_as_its_variable_is_named(tmp_path: Path) -> None:
    """``REM_BATCH_LIMIT = 50`` in the TOML file (the variable README's table names) was refused with
    ``unknown setting 'REM_BATCH_LIMIT' in rem.toml`` and no hint, where ``batch_limt`` got one."""
    config = tmp_path / "rem.toml"
    config.write_text("REM_BATCH_LIMIT = 50\n", encoding="utf-8")
    done = run_cli("--config", str(config), "status", env={"REM_DATA_DIR": str(tmp_path / "data")})
    assert done.returncode == 2
    assert done.stderr.strip() == (f"rem-cycle: invalid configuration: unknown setting 'REM_BATCH_LIMIT' in {config} "
                                   "(did you mean batch_limit?)")


@pytest.mark.parametrize("key", ["llm_api_key", "REM_MCP_TOKEN", "database_url", "chroma_token", "embedding_api_key"])
def test_a_secret_in_the_config_file_is_refused_and_not_echoed(tmp_path: Path, key: str) -> None:
    """README says the secrets come from the environment only, but the TOML file's ``llm_api_key``,
    ``mcp_token``, ``database_url`` … were read and used: a secret in a file that is shared, copied
    and committed. Refused now (exit 2, one line naming the variable to set), the value not echoed."""
    config = tmp_path / "rem.toml"
    config.write_text(f'batch_limit = 5\n{key} = "postgresql://rem:hunter2@db/rem"\n', encoding="utf-8")
    done = run_cli("--config", str(config), "status", env={"REM_DATA_DIR": str(tmp_path / "data")})
    assert done.returncode == 2, done.stderr
    variable = "REM_" + key.lower().removeprefix("rem_").upper()
    assert done.stderr.strip() == (f"rem-cycle: invalid configuration: {config}: {key!r} is a secret: set {variable} "
                                   "in the environment, not in the config file")
    assert "hunter2" not in done.stdout + done.stderr
