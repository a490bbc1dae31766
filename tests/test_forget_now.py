"""``rem-cycle forget --memory``: what the session said from the forgotten turn leaves the graph
when the command returns, not at the next cycle. Real Chroma (embedded), real cycles, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from pipelines.extract.model import ChunkExtraction, Evidence, ExtractedNode
from pipelines.forget import facts_without_turn
from pipelines.importer import import_sessions
from store.facts import NodeFacts
from store.backend import open_database
from store.chroma import ChromaStore
from tests.conftest import run_cli, write_sessions
from tests.test_forget import _env, _session
from worker.cycle import run_cycle

SECRET = "hunter2"
# "kept" says GraphStore plainly; in "told" only the turn t0 names GraphStore, and says more of it
# (the longer description wins), with a secret in it.
SESSIONS = [
    _session("kept", "2026-11-01T10:00:00Z", ["GraphStore keeps every node of the graph in one SQLite table.", "DrainWorker retries."]),
    _session("told", "2026-11-02T10:00:00Z", [
        f"GraphStore stores the {SECRET} password for the DrainWorker database in plain text.", "DrainWorker retries twice.",
    ]),
]


def _cli_json(env: dict[str, str], *args: str) -> Any:
    done = run_cli(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _served(env: dict[str, str]) -> dict[str, Any]:
    """Everything ``show``, ``recall`` and ``export`` serve about GraphStore, by command."""
    return {
        "show": _cli_json(env, "show", "CLASS:GraphStore"), "recall": _cli_json(env, "recall", "GraphStore password"),
        "export": _cli_json(env, "export"),
    }


def _facts(settings: Settings, node_id: str) -> tuple[str, dict[str, Any]]:
    db = open_database(settings)
    try:
        row = db.query("SELECT name, properties FROM nodes WHERE id = ?", (node_id,))[0]
        return row[0], {k: v for k, v in json.loads(row[1]).items() if k in ("description", "aliases", "tags", "confidence")}
    finally:
        db.close()


async def _extracted(settings: Settings, tmp_path: Path) -> dict[str, str]:
    """``kept`` and ``told`` extracted by a cycle; the CLI's environment."""
    await import_sessions(
        write_sessions(tmp_path / "in.jsonl", SESSIONS), chroma=ChromaStore(settings),
        memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )
    assert (await run_cycle(settings)).outcome == "completed"
    env = _env(settings)
    assert SECRET in _cli_json(env, "show", "CLASS:GraphStore")["description"]
    return env


@pytest.mark.both_backends
async def test_forgetting_a_turn_takes_what_it_said_out_at_once(settings: Settings, tmp_path: Path, clean_env) -> None:
    env = await _extracted(settings, tmp_path)

    dry = _cli_json(env, "forget", "--memory", "memory:told-t0", "--dry-run")
    assert SECRET in json.dumps(_served(env))  # a dry run changes nothing
    done = _cli_json(env, "forget", "--memory", "memory:told-t0")
    assert {k: v for k, v in dry.items() if k != "dry_run"} == {k: v for k, v in done.items() if k not in ("dry_run", "erased")}
    served = _served(env)
    assert SECRET not in json.dumps(served)
    assert done["claims"] == 2 and done["chunk_results"] == 1  # told's claims on GraphStore and DrainWorker
    assert served["show"]["description"] == "GraphStore keeps every node of the graph in one SQLite table."
    # What the next cycle's re-extraction of "told" (without the turn) leaves is what forget left.
    forgotten = _facts(settings, "CLASS:GraphStore")
    assert (await run_cycle(settings)).outcome == "completed"
    assert _facts(settings, "CLASS:GraphStore") == forgotten
    assert SECRET not in json.dumps(_served(env))


@pytest.mark.both_backends
async def test_a_claim_the_turn_shared_is_rewritten_to_what_the_other_turns_said(settings: Settings, tmp_path: Path, clean_env) -> None:
    """One turn per chunk: DrainWorker's claim from "split" is rewritten at once to what its other
    turn said (from the stored chunk extraction, no model call), and the next cycle's re-extraction
    of the session without the turn leaves the same facts."""
    settings = settings.model_copy(update={"chunk_limit_tokens": settings.prompt_envelope_tokens + 24})
    session = _session("split", "2026-11-03T10:00:00Z", [
        f"DrainWorker keeps the {SECRET} password in its configuration file for every deployment.",
        "DrainWorker retries the webhook delivery three times.",
    ])
    await import_sessions(
        write_sessions(tmp_path / "in.jsonl", [session]), chroma=ChromaStore(settings),
        memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )
    assert (await run_cycle(settings)).outcome == "completed"
    env = _env(settings)
    assert SECRET in _cli_json(env, "show", "CLASS:DrainWorker")["description"]
    done = _cli_json(env, "forget", "--memory", "memory:split-t0")
    shown = _cli_json(env, "show", "CLASS:DrainWorker")
    assert SECRET not in json.dumps(shown)
    assert shown["description"] == "DrainWorker retries the webhook delivery three times."
    assert done["claims"] == 1 and done["chunk_results"] == 1
    forgotten = _facts(settings, "CLASS:DrainWorker")
    assert (await run_cycle(settings)).outcome == "completed"
    assert _facts(settings, "CLASS:DrainWorker") == forgotten


def test_facts_without_a_turn_leave_out_every_chunk_node_that_may_come_from_it() -> None:
    """Pure: a chunk node quoting the turn, or unquoted in a chunk that quotes it, says nothing any
    more; what other chunks said of the same node stays, under the id the claims were written for."""
    def node(name: str, description: str, *turns: str) -> ExtractedNode:
        return ExtractedNode(f"CLASS:{name}", "CLASS", name, description, (name,), 0.5, (), tuple(Evidence(t, name) for t in turns))

    extractions = [
        ChunkExtraction("s:chunk:0", nodes=(node("Vault", "Vault holds hunter2.", "s-t0"), node("Drain", "Drain said in passing."))),
        ChunkExtraction("s:chunk:1", nodes=(node("Vault", "Vault rotates keys.", "s-t1"), node("Other", "Other, quoted elsewhere.", "s-t1"))),
    ]
    before, after = facts_without_turn("s", extractions, "s-t0")
    assert before["CLASS:Vault"].description == "Vault holds hunter2."
    assert after == {
        "CLASS:Vault": NodeFacts.of(description="Vault rotates keys.", aliases=["Vault"], confidence=0.5),
        "CLASS:Other": before["CLASS:Other"],
    }
    assert facts_without_turn("s", extractions, "s-t9")[1] == before  # a turn no chunk quotes takes nothing
