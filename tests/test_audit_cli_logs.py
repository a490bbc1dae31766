"""The log stream failing under the worker: stderr redirected to a file on a full disk (``/dev/full``
answers every write with ``ENOSPC``) or into a pipe whose reader went away. Logs are the
operator's view, not the work: the cycle still does every phase and records what it did, and the
daemon keeps running. And a cycle that crashes between two phases is recorded ``failed``, never
``completed`` with the phases after it silently skipped."""

from __future__ import annotations


from config import Settings
from tests.daemon_support import read_runs
from worker.cycle import Stores, run_cycle

async def test_a_crash_between_two_phases_is_recorded_failed(settings: Settings, stores: Stores) -> None:
    ran: list[str] = []

    async def broken(ctx: object) -> dict:  # a phase whose counts are no mapping: a bug between phases
        ran.append("broken")
        return None  # type: ignore[return-value]

    async def after(ctx: object) -> dict:
        ran.append("after")
        return {}

    result = await run_cycle(settings, stores=stores, phases=(("broken", broken), ("after", after)))
    assert ran == ["broken"]
    assert (result.outcome, result.failure_phase, result.reason_code) == ("failed", "broken", "crashed")
    (run,) = read_runs(settings.graph_path)
    assert (run["outcome"], run["failure_phase"], run["reason_code"]) == ("failed", "broken", "crashed")
    assert run["phases"]["broken"]["state"] == "failed"
