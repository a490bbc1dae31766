"""A cycle failure of any kind is a ``failed`` row of ``rem_runs`` with a reason code: in a phase,
and around the phases (lock file, database, run row), before or after the run row exists. The
daemon under a real descriptor shortage is in tests/test_daemon_limits.py."""

from __future__ import annotations

import errno
import json
import os
import resource
from pathlib import Path

from config import Settings
from store.confined import UnsafePathError
from store.errors import DatabaseUnreadableError
from tests.conftest import run_cli
from tests.daemon_support import read_runs
from worker.cycle import CycleContext, Stores, provider_ready, run_cycle
from worker.failures import failure_reason


def test_failure_reason_looks_through_causes_and_groups() -> None:
    emfile = OSError(errno.EMFILE, "Too many open files")
    wrapped = RuntimeError("chroma failed")
    wrapped.__cause__ = emfile
    assert failure_reason(wrapped) == "too-many-open-files"
    assert failure_reason(ExceptionGroup("g", [ValueError(), OSError(errno.ENFILE, "file table full")])) == "too-many-open-files"
    assert failure_reason(DatabaseUnreadableError("unable to open database file")) == "database-error"
    assert failure_reason(UnsafePathError(errno.ELOOP, "a link")) == "os-error"  # a store error, not the database's
    assert failure_reason(PermissionError(errno.EACCES, "denied")) == "os-error"
    assert failure_reason(KeyError("x")) == "crashed"


async def test_running_out_of_descriptors_inside_a_phase_is_recorded(settings: Settings, stores: Stores) -> None:
    """Real exhaustion after the run row exists: the phase opens files until the (lowered) limit
    refuses, and the run is still finished in ``rem_runs`` while the descriptors are held."""
    held: list[int] = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    async def greedy(ctx: CycleContext) -> dict:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))

    try:
        result = await run_cycle(settings, stores=stores, phases=(("provider-ready", provider_ready), ("greedy", greedy)))
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert len(held) >= 8
    assert (result.outcome, result.reason_code, result.failure_phase) == ("failed", "too-many-open-files", "greedy")
    (run,) = read_runs(settings.graph_path)
    assert (run["outcome"], run["reason_code"], run["failure_phase"]) == ("failed", "too-many-open-files", "greedy")
    assert run["last_successful_phase"] == "provider-ready"
    assert "Too many open files" in run["phases"]["greedy"]["error"]


def test_once_failing_before_its_run_row_exists_is_recorded(tmp_path: Path) -> None:
    """The cycle lock cannot be opened (a directory stands in its way): no run row exists yet,
    and the failure is still recorded, and reported with exit code 1."""
    data = tmp_path / "data"
    env = {"REM_DATA_DIR": str(data)}
    (data / "rem-cycle.lock").mkdir(parents=True)
    done = run_cli("--once", "--json", env=env)
    assert done.returncode == 1, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert (result["outcome"], result["reason_code"], result["failure_phase"]) == ("failed", "os-error", "setup")
    (run,) = read_runs(data / "graph.sqlite3")
    assert (run["run_id"], run["outcome"], run["reason_code"], run["failure_phase"]) == (
        result["run_id"], "failed", "os-error", "setup"
    )
    assert run["finished_at"] and "Is a directory" in run["phases"]["setup"]["error"]
    # Once the obstacle is gone, the next cycle runs.
    (data / "rem-cycle.lock").rmdir()
    again = run_cli("--once", "--json", env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [r["outcome"] for r in read_runs(data / "graph.sqlite3")] == ["failed", "completed"]


def test_once_on_an_unreadable_database_fails_with_a_reason(tmp_path: Path) -> None:
    """The database itself cannot be opened: nothing can hold the row, so the failure is reported
    (exit 1, reason code, and that it is not recorded) rather than a traceback."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "graph.sqlite3").write_bytes(b"not a database at all " * 100)
    done = run_cli("--once", "--json", env={"REM_DATA_DIR": str(data)})
    assert done.returncode == 1, done.stderr[-2000:]
    result = json.loads(done.stdout)
    # A file that is no database is a damaged graph (leftalone23; it was `database-error`): restore a backup.
    assert (result["outcome"], result["reason_code"], result["failure_phase"]) == ("failed", "database-damaged", "setup")
    assert "not recorded in rem_runs yet" in result["message"]
    assert "restore it from a backup (rem-cycle restore BACKUP)" in result["message"]
    assert "Traceback" not in done.stderr


async def test_a_phase_failing_as_the_database_goes_away_is_recorded_as_that_phase(settings: Settings, stores: Stores) -> None:
    """The database goes away inside a phase: the phase fails, and then so does finishing its run
    row on the cycle's connection. The run is recorded (by the failure recorder's own connection)
    as failed in that phase, not in ``finish``, with the phase's error kept."""

    async def losing_the_database(ctx: CycleContext) -> dict:
        ctx.stores.db.close()
        ctx.stores.db.query("SELECT COUNT(*) FROM nodes")
        return {}

    result = await run_cycle(settings, stores=stores, phases=(("provider-ready", provider_ready), ("extract", losing_the_database)))
    assert (result.outcome, result.reason_code, result.failure_phase) == ("failed", "phase-error", "extract")
    assert "closed" in result.message and "run row could not be finished" in result.message
    (run,) = read_runs(settings.graph_path)
    assert (run["outcome"], run["reason_code"], run["failure_phase"], run["last_successful_phase"]) == (
        "failed", "phase-error", "extract", "provider-ready")
    assert run["phases"]["extract"]["state"] == "failed" and "closed" in run["phases"]["extract"]["error"]
    assert run["phases"]["finish"]["state"] == "failed"
