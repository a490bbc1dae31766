"""``forget --node`` keeps a name out on every path, not only in the extraction commit: a hand
``merge`` or an ``unmerge`` that would give a node a name kept out under its type is refused (exit
2, nothing changed, the message naming the forgotten node and ``--undo``), and with
``REM_LLM_JUDGE`` the model is never asked about a node the commit then drops. Real cycles, real
SQLite (and PostgreSQL where marked), the ``rem-cycle`` CLI in a subprocess, and a real
OpenAI-compatible server on loopback whose identity questions are read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from store.graph import Node
from tests.conftest import add_nodes, run_cli
from tests.llm_server import LLMServer, Reply
from tests.test_change_scan import _query
from tests.test_forget import _build, _env, _session, canonical
from tests.test_migrations_identity_verdicts import _import, model, questions
from worker.cycle import run_cycle


def _unchanged(settings: Settings) -> dict[str, object]:
    """The graph, its merge records and its suppressions, as data."""
    return {
        "graph": canonical(settings),
        "merges": _query(settings, "SELECT merge_id, merged_id, into_id, undone_at FROM merges ORDER BY merge_id"),
        "suppressed": _query(settings, "SELECT key, label, node_id FROM suppression_keys ORDER BY 1, 2, 3"),
    }


async def _forgotten(settings: Settings, tmp_path: Path) -> dict[str, str]:
    """Sessions a, b and c built; a CONCEPT ``DrainWorker`` and a CLASS ``retrypolicy`` added;
    CLASS ``RetryPolicy`` merged into ``GraphStore``; then CLASS ``DrainWorker`` and CLASS
    ``retrypolicy`` forgotten. The environment of a ``rem-cycle`` subprocess."""
    await _build(settings, tmp_path, ["a", "b", "c"])
    add_nodes(settings, [Node("CONCEPT:drainworker", "CONCEPT", "DrainWorker", {}), Node("CLASS:retrypolicy", "CLASS", "retrypolicy", {})])
    env = _env(settings)
    assert run_cli("merge", "CLASS:RetryPolicy", "CLASS:GraphStore", env=env).returncode == 0
    for forgotten in ("CLASS:DrainWorker", "CLASS:retrypolicy"):
        done = run_cli("forget", "--node", forgotten, env=env)
        assert done.returncode == 0, done.stderr
    return env


@pytest.mark.both_backends
async def test_a_merge_that_would_carry_a_kept_out_name_is_refused(settings: Settings, tmp_path: Path) -> None:
    """CLASS ``DrainWorker`` is forgotten while a CONCEPT ``DrainWorker`` stays (suppressions are per
    type): merging the CONCEPT into a CLASS would give that CLASS the kept-out name, so it is
    refused — exit 2, nothing changed, the message naming the key and the forgotten node's
    ``--undo``. Into a FILE it goes through. Before, the CLASS took the forgotten name as an alias."""
    env = await _forgotten(settings, tmp_path)
    before = _unchanged(settings)
    merged = run_cli("merge", "CONCEPT:drainworker", "CLASS:GraphStore", env=env)
    assert merged.returncode == 2, merged.stderr
    assert "'drainworker'" in merged.stderr and "rem-cycle forget --node CLASS:DrainWorker --undo" in merged.stderr, merged.stderr
    assert _unchanged(settings) == before
    assert _query(settings, "SELECT COUNT(*) FROM node_aliases WHERE node_id = 'CLASS:GraphStore' AND alias_key = 'drainworker'")[0][0] == 0

    into_file = run_cli("merge", "CONCEPT:drainworker", "FILE:src/queue/lazy.py", env=env)
    assert into_file.returncode == 0, into_file.stderr


@pytest.mark.both_backends
async def test_an_unmerge_that_would_bring_back_a_kept_out_name_is_refused(settings: Settings, tmp_path: Path) -> None:
    """CLASS ``RetryPolicy`` was merged into ``GraphStore`` before a CLASS named ``retrypolicy`` was
    forgotten: unmerging it would re-create a CLASS under the kept-out name, so it is refused
    (exit 2, nothing changed) until that forget is undone; then it goes through. Before, the
    unmerge re-created the node."""
    env = await _forgotten(settings, tmp_path)
    before = _unchanged(settings)
    unmerged = run_cli("unmerge", "CLASS:RetryPolicy", env=env)
    assert unmerged.returncode == 2, unmerged.stderr
    assert "rem-cycle forget --node CLASS:retrypolicy --undo" in unmerged.stderr, unmerged.stderr
    assert _unchanged(settings) == before

    assert run_cli("forget", "--node", "CLASS:retrypolicy", "--undo", env=env).returncode == 0
    again = run_cli("unmerge", "CLASS:RetryPolicy", env=env)
    assert again.returncode == 0, again.stderr
    assert _query(settings, "SELECT COUNT(*) FROM nodes WHERE id = 'CLASS:RetryPolicy'")[0][0] == 1


def _new_names(server: LLMServer) -> list[str]:
    """The names of the new nodes the model was asked about, in order."""
    return [json.loads(prompt)["new"]["name"] for prompt in questions(server)]


@pytest.mark.both_backends
@pytest.mark.parametrize("via", ["cycle", "import-notes"])
async def test_the_judge_is_never_asked_about_a_node_the_commit_drops(settings: Settings, tmp_path: Path, via: str) -> None:
    """``alpha.py`` (FILE) is forgotten; then ``store/alpha.py`` and ``store/bravo.py`` are said; then
    a session (``via`` a cycle) or a notes file (``import-notes``) says the bare names
    ``alpha.py`` and ``bravo.py``: each is a question for the model (``file-basename``) — except
    ``alpha.py``, which the commit drops. Before, the model was asked about ``alpha.py`` too (a
    paid call whose answer the commit threw away)."""
    with LLMServer(default=Reply(model)) as server:
        mine = settings.model_copy(update={"extractor": "openai", "llm_base_url": server.url, "llm_judge": True, "llm_max_retries": 0})
        await _import(mine, tmp_path / "first.jsonl", [_session("first", "2026-11-01T10:00:00Z", ["See alpha.py."])])
        assert (await run_cycle(mine)).outcome == "completed"
        done = run_cli("forget", "--node", "FILE:alpha.py", env=_env(settings))
        assert done.returncode == 0, done.stderr
        await _import(mine, tmp_path / "full.jsonl", [_session("full", "2026-11-02T10:00:00Z", ["See store/alpha.py.", "See store/bravo.py."])])
        assert (await run_cycle(mine)).outcome == "completed"
        assert questions(server) == []

        said = ["Then alpha.py changed.", "Then bravo.py changed."]
        if via == "cycle":
            await _import(mine, tmp_path / "bare.jsonl", [_session("bare", "2026-11-03T10:00:00Z", said)])
            result = await run_cycle(mine)
            assert result.outcome == "completed" and result.phases["extract"]["suppressed"] >= 1, result.phases["extract"]
        else:
            notes = tmp_path / "notes.md"
            notes.write_text("\n\n".join(said) + "\n", encoding="utf-8")
            env = {**_env(settings), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": server.url, "REM_LLM_JUDGE": "true",
                   "REM_LLM_MAX_RETRIES": "0"}
            imported = run_cli("import-notes", str(notes), "--json", env=env)
            assert imported.returncode == 0, imported.stderr
        assert _new_names(server) == ["bravo.py"]
    assert _query(settings, "SELECT COUNT(*) FROM nodes WHERE id = 'FILE:alpha.py'")[0][0] == 0
    assert _query(settings, "SELECT COUNT(*) FROM node_aliases WHERE alias_key = 'alpha.py'")[0][0] == 0
    assert _query(settings, "SELECT COUNT(*) FROM nodes WHERE id = 'FILE:store/bravo.py' OR id = 'FILE:bravo.py'")[0][0] == 1  # linked


@pytest.mark.both_backends
def test_a_namesake_split_does_not_bring_back_a_kept_out_name(settings: Settings) -> None:
    """`Kate` (bare), then `Kate Miller` (joins it); a PERSON `K. Miller` also called `Kate Miller`
    is forgotten by its id, which keeps the name `Kate Miller` out of PERSON nodes; then `Kate
    Smith` arrives, a namesake, whose commit would split `Kate Miller` back out of `Kate` — re-creating
    the node `PERSON:Kate Miller` under the kept-out name. The split is skipped: no such node, the
    link record stands, and the name stays on the node that held it before the forget."""
    from pipelines.extract.commit import CommitStats
    from store.backend import open_database
    from tests.test_identity_namesakes import BARE, MILLER, SMITH, commit_scene
    from worker.knowledge import identity_resolver

    def scene(s: tuple[str, tuple[tuple[str, str], ...]]) -> CommitStats:
        db = open_database(settings)
        try:
            return commit_scene(db, s, index_per_session=True, resolver=identity_resolver(db))
        finally:
            db.close()

    scene(BARE)
    scene(MILLER)
    add_nodes(settings, [Node("PERSON:K. Miller", "PERSON", "K. Miller", {"aliases": ["Kate Miller"]})])
    done = run_cli("forget", "--node", "PERSON:K. Miller", env=_env(settings))
    assert done.returncode == 0, done.stderr
    stats = scene(SMITH)
    # off32: the skipped split is counted (it was counted nowhere: not `suppressed`, not `names_split`).
    assert (stats.splits_kept_out, stats.names_split) == (1, 0), stats
    people = {r[0] for r in _query(settings, "SELECT id FROM nodes WHERE label = 'PERSON'")}
    assert "PERSON:Kate Miller" not in people, people
    assert {"PERSON:Kate", "PERSON:Kate Smith"} <= people, people
    records = _query(settings, "SELECT into_id, undone_at FROM merges WHERE merged_id = 'PERSON:Kate Miller'")
    assert [(r[0], r[1]) for r in records] == [("PERSON:Kate", None)], records
