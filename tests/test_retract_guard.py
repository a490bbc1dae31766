"""Chroma coming back with the wrong or an empty volume never wipes the graph: a full scan that
would retract most of the graph's sessions at once retracts nothing and fails the ingest phase with
``mass-retraction-refused``; ``rem-cycle --once --allow-mass-retraction`` accepts a real mass
deletion. Real embedded Chroma (offline ``hash`` embedding), real cycles, real graph databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import Settings
from pipelines.forget import MASS_RETRACTION_MIN_SESSIONS, MassRetractionRefused, sessions_to_retract
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from tests.conftest import SAMPLE, make_session, run_cli, write_sessions
from tests.test_forget import _env, _settings, canonical
from worker.cycle import run_cycle

NEW = make_session("brand-new", 4, created="2026-11-20T10:00:00Z", text="The NewWorker {i} writes src/new/mod{i}.py for {sid}.")
SAMPLE_SESSIONS = sum(1 for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip())


async def _import(settings: Settings, path: Path) -> None:
    stats = await import_sessions(
        path, chroma=ChromaStore(settings), memory_collection=settings.memory_collection, summary_collection=settings.session_collection,
    )
    assert not stats.bad_lines


def _empty_volume(settings: Settings, tmp_path: Path) -> Path:
    """Chroma comes back on an empty path (a volume not mounted, a new path): its files move aside.
    Returns where they went."""
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()  # the embedded client keeps the old files open
    aside = tmp_path / "chroma-aside"
    settings.chroma_path.rename(aside)
    return aside


def _sessions(settings: Settings) -> int:
    db = open_database(settings)
    try:
        return db.query("SELECT COUNT(*) FROM session_digests")[0][0]
    finally:
        db.close()


async def _sample_graph_on_an_empty_volume(settings: Settings, tmp_path: Path) -> dict[str, object]:
    """The sample digested; then Chroma back on an empty volume and one new session imported.
    Returns the graph as it was before the volume went."""
    await _import(settings, SAMPLE)
    built = await run_cycle(settings)
    assert built.outcome == "completed", built.message
    assert _sessions(settings) == SAMPLE_SESSIONS > 2 * MASS_RETRACTION_MIN_SESSIONS
    before = canonical(settings)
    _empty_volume(settings, tmp_path)
    await _import(settings, write_sessions(tmp_path / "new.jsonl", [NEW]))
    return before


@pytest.mark.both_backends
async def test_an_empty_volume_with_one_new_session_retracts_nothing(settings: Settings, tmp_path: Path) -> None:
    before = await _sample_graph_on_an_empty_volume(settings, tmp_path)
    for full_scan_interval in (0.0, settings.full_scan_interval_seconds):  # the marks of the old volume do not hold: full either way
        result = await run_cycle(settings.model_copy(update={"full_scan_interval_seconds": full_scan_interval}))
        assert (result.outcome, result.reason_code, result.failure_phase) == ("failed", "mass-retraction-refused", "ingest")
        assert f"{SAMPLE_SESSIONS} of the graph's {SAMPLE_SESSIONS} sessions" in (result.message or "")
        assert "--allow-mass-retraction" in (result.message or "")
        assert canonical(settings) == before  # nothing retracted, nothing written
        assert _sessions(settings) == SAMPLE_SESSIONS


@pytest.mark.both_backends
async def test_the_right_volume_back_goes_on_as_before(settings: Settings, tmp_path: Path) -> None:
    before = await _sample_graph_on_an_empty_volume(settings, tmp_path)
    refused = await run_cycle(settings)
    assert refused.reason_code == "mass-retraction-refused"
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
    settings.chroma_path.rename(tmp_path / "wrong-volume")
    (tmp_path / "chroma-aside").rename(settings.chroma_path)
    again = await run_cycle(settings)
    assert again.outcome == "completed", again.message
    assert (again.phases["ingest"]["sessions_retracted"], again.phases["ingest"]["sessions_changed"]) == (0, 0)
    assert canonical(settings) == before


@pytest.mark.both_backends
async def test_allow_mass_retraction_accepts_a_real_mass_deletion(settings: Settings, tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    await _sample_graph_on_an_empty_volume(settings, tmp_path)
    env = _env(settings)
    refused = run_cli("--once", "--json", env=env)
    assert refused.returncode == 1, refused.stderr
    assert json.loads(refused.stdout)["reason_code"] == "mass-retraction-refused"
    assert "mass-retraction-refused" in refused.stderr  # the log line, with the way forward
    assert "--allow-mass-retraction" in refused.stderr

    status = run_cli("status", "--json", env=env)
    newest = json.loads(status.stdout)["runs"][0]
    assert (newest["outcome"], newest["failure_phase"], newest["reason_code"]) == ("failed", "ingest", "mass-retraction-refused")
    text = run_cli("status", env=env)
    assert "failed in ingest (mass-retraction-refused)" in text.stdout and "--allow-mass-retraction" in text.stdout

    daemon = run_cli("--allow-mass-retraction", env=env)  # one cycle's confirmation, never a daemon's standing one
    assert daemon.returncode == 2 and "--once" in daemon.stderr

    accepted = run_cli("--once", "--allow-mass-retraction", "--json", env=env)
    assert accepted.returncode == 0, accepted.stderr
    ingest = json.loads(accepted.stdout)["phases"]["ingest"]
    assert (ingest["sessions_retracted"], ingest["sessions_synced"]) == (SAMPLE_SESSIONS, 1)

    # the graph is the one built from what Chroma now holds
    other = tmp_path / "only-new"
    clean_env.setenv("REM_DATA_DIR", str(other))
    reference = _settings(other)
    await _import(reference, tmp_path / "new.jsonl")
    assert (await run_cycle(reference)).outcome == "completed"
    assert canonical(settings) == canonical(other / "graph.sqlite3")


def test_the_guard_lets_a_few_or_a_minority_go_and_refuses_most() -> None:
    known = {f"s{i}" for i in range(20)}
    few = {f"s{i}" for i in range(MASS_RETRACTION_MIN_SESSIONS)}
    # a handful always goes, even all of a small graph's sessions
    assert sessions_to_retract(known - few, known, rows_scanned=5, allow_mass=False) == sorted(few)
    assert sessions_to_retract(set(), few, rows_scanned=5, allow_mass=False) == sorted(few)
    half = {f"s{i}" for i in range(10)}
    assert sessions_to_retract(known - half, known, rows_scanned=5, allow_mass=False) == sorted(half)  # half is no majority
    most = half | {"s10"}
    with pytest.raises(MassRetractionRefused) as refused:
        sessions_to_retract(known - most, known, rows_scanned=5, allow_mass=False)
    assert (refused.value.sessions, refused.value.known) == (11, 20)
    assert sessions_to_retract(known - most, known, rows_scanned=5, allow_mass=True) == sorted(most)
    # a scan that saw no row retracts nothing without the operator's word; most of a graph is refused
    assert sessions_to_retract(set(), few, rows_scanned=0, allow_mass=False) == []
    with pytest.raises(MassRetractionRefused):
        sessions_to_retract(set(), known, rows_scanned=0, allow_mass=False)
    assert sessions_to_retract(set(), known, rows_scanned=0, allow_mass=True) == sorted(known)
