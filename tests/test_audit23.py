"""The twenty-first session's code, attacked (audit23, twenty-second session).

Real embedded Chroma, real imports and cycles, real SQLite files and a real PostgreSQL schema.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from tests.test_lastrow import SECRET, _cycle, _gone, _import, _password, _sessions
from tests.test_forget_rest import rows_holding
from worker.knowledge import forget


@pytest.mark.both_backends
async def test_a_rewrite_the_scan_saw_and_the_batch_limit_deferred_is_synced_by_a_later_cycle(
    settings: Settings, tmp_path: Path,
) -> None:
    """A cycle that finds rows written again (here the collection's last row, redacted) syncs
    their sessions up to ``batch_limit`` and clears the scan marks before its first write; the
    sessions it left for later have the same ids as before, so the next scan — a full one, with no
    mark to say which rows came back — must still know they are due."""
    await _import(settings, tmp_path, _sessions("We moved ConfigLoader to src/config.py.", _password(SECRET)))
    await _cycle(settings)
    assert rows_holding(settings, SECRET)
    await _import(settings, tmp_path, _sessions("We moved ConfigLoader to src/config.py.", _password("[redacted]")))
    one = settings.model_copy(update={"batch_limit": 1})

    first = (await _cycle(one)).phases["ingest"]
    assert first["sessions_changed"] == 2 and first["sessions_synced"] == 1, first  # s-a: the secret is s-b's
    second = (await _cycle(one)).phases["ingest"]

    assert second["sessions_synced"] == 1, second
    await _cycle(one)  # the extraction of s-b, if the one before left it for its batch limit
    _gone(settings, SECRET)


@pytest.mark.both_backends
@pytest.mark.parametrize("rewritten", ["last", "middle"])
async def test_a_rewrite_not_yet_synced_survives_a_forget_of_another_turn(settings: Settings, tmp_path: Path, rewritten: str) -> None:
    """``forget --memory`` of one turn makes the next scan a full one, and did it by deleting the
    scan marks: that scan had no mark to read the rows written again after (their ids the same,
    in sessions whose ids are the same), nor the last row's fingerprint. A transcript imported
    again with a turn redacted — the newest, or one before it, which goes to the end of Chroma's
    order — and then another turn forgotten before the next cycle kept the redacted words."""
    last = "ConfigLoader has a test now."
    before = _sessions("We moved ConfigLoader to src/config.py.", _password(SECRET)) if rewritten == "last" else \
        _sessions(_password(SECRET), last)
    after = _sessions("We moved ConfigLoader to src/config.py.", _password("[redacted]")) if rewritten == "last" else \
        _sessions(_password("[redacted]"), last)
    await _import(settings, tmp_path, before)
    await _cycle(settings)
    assert rows_holding(settings, SECRET)
    await _import(settings, tmp_path, after)
    report = forget(settings, memory="s-a-t0001")  # a turn without the secret, in neither place
    assert report["points"] or report["nodes_removed"] or report.get("digests"), report

    result = await _cycle(settings)

    assert result.phases["ingest"]["scan"] == "full", result.phases["ingest"]
    _gone(settings, SECRET)


@pytest.mark.both_backends
async def test_a_turn_rewritten_while_an_ingest_left_a_backlog_leaves_the_graph(settings: Settings, tmp_path: Path) -> None:
    """A cycle that leaves changed sessions for later (its batch limit; a failed sync, a stop)
    deleted the scan marks before its first write, so that the next scan would read every row:
    with no mark, that scan could not see a turn deleted and added again meanwhile (its id and
    its session's ids the same), and the redacted words stayed."""
    await _import(settings, tmp_path, _sessions(_password(SECRET), "ConfigLoader has a test now."))
    await _cycle(settings)
    later = [{"sessionId": f"s-new{n}", "createdAt": "2026-11-02T10:00:00Z", "userId": "user-1",
              "turns": [{"role": "user", "text": f"RetryPolicy note {n}."}]} for n in range(2)]
    (tmp_path / "later").mkdir()
    await _import(settings, tmp_path / "later", later)
    limited = (await _cycle(settings.model_copy(update={"batch_limit": 1}))).phases["ingest"]
    assert limited["sessions_changed"] == 2 and limited["sessions_synced"] == 1, limited
    await _import(settings, tmp_path, _sessions(_password("[redacted]"), "ConfigLoader has a test now."))

    result = await _cycle(settings)

    assert result.phases["ingest"]["scan"] == "full", result.phases["ingest"]
    _gone(settings, SECRET)


async def test_show_as_of_of_an_undated_node_or_of_an_anchor_says_when_it_was_known(settings: Settings, tmp_path: Path) -> None:
    """``show NODE --as-of DATE`` of a node not known at the date said ``was not known yet as of …
    (first seen None)`` for a node said only in turns without a ``createdAt`` (an agent's rows, an
    import line without one), which no date shows, and for every session and turn: those are known
    from their own ``createdAt``, and have no points to be first seen by."""
    from tests.conftest import run_cli, write_sessions
    from tests.test_forget import _env

    lines = [{"sessionId": "s-undated", "userId": "user-1", "turns": [{"role": "user", "text": "RetryPolicy wraps GraphStore."}]},
             {"sessionId": "s-dated", "userId": "user-1", "createdAt": "2026-11-01T10:00:00Z",
              "turns": [{"role": "user", "text": "ConfigLoader reads rem.toml."}]}]
    stats = await import_sessions(write_sessions(tmp_path / "s.jsonl", lines), chroma=ChromaStore(settings),
                                  memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    assert not stats.bad_lines
    await _cycle(settings)
    env = _env(settings)
    assert run_cli("show", "CLASS:RetryPolicy", env=env).returncode == 0

    undated = run_cli("show", "CLASS:RetryPolicy", "--as-of", "2099-01-01", env=env)
    session = run_cli("show", "session:s-dated", "--as-of", "2020-01-01", env=env)

    assert (undated.returncode, session.returncode) == (1, 1)
    assert undated.stderr.strip() == ("rem-cycle: CLASS:RetryPolicy has no time of its own: no turn that said it has a "
                                      "createdAt, and --as-of shows only what was said at a known time")
    assert session.stderr.strip() == ("rem-cycle: session:s-dated was not known yet as of 2020-01-01T23:59:59.999Z "
                                      "(created 2026-11-01T10:00:00.000Z)")
    # The MCP show_node's line (worker.recall.unseen_entity) names its own parameter, not the CLI's flag (la32out).
    from worker.recall import unseen_entity

    assert await unseen_entity(settings, "CLASS:RetryPolicy", as_of="2099-01-01T23:59:59.999Z") == (
        "CLASS:RetryPolicy has no time of its own: no turn that said it has a createdAt, and as_of shows only "
        "what was said at a known time")


@pytest.mark.parametrize("command", ["import", "enqueue"])
def test_a_dash_with_standard_input_closed_is_one_line_not_a_traceback(tmp_path: Path, command: str) -> None:
    """``rem-cycle import -`` (userwalk2) and ``enqueue -`` started with standard input closed
    (``<&-``, as some supervisors start a job) died with ``AttributeError: 'NoneType' object has
    no attribute 'fileno'`` and a traceback."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env.update({"REM_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)})
    (tmp_path / "data").mkdir()  # enqueue's queue file goes in it
    done = subprocess.run(["sh", "-c", f'exec "$0" -m worker {command} - <&-', sys.executable], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)

    assert done.returncode == 1
    assert done.stderr.strip() == "rem-cycle: cannot read standard input: it is closed"
