"""What the third README walk left and a fourth met (RELIABILITY.md, "userwalk4"): ``recall``'s
scope echoed the session as given, a PostgreSQL URL's user without a password was masked (and a
user named like a word masked that word everywhere), ``--once`` promised a retry nobody makes, a
busy lock named its file and not its holder, a path in ``REM_CHROMA_URL`` was dropped, and an
output folder that cannot be made or written was answered with a bare errno. Every command runs
through the real CLI."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import anyio
import pytest

from config import load_settings
from tests.conftest import copy_digested_sample, free_port, run_cli
from tests.test_audit_cli_database import without_root_powers

pytestmark = pytest.mark.timeout(120)

SESSION = "sess-2026-11-09-7e0cb4"  # one of examples/sessions.jsonl


def test_recall_echoes_the_session_scope_in_one_form(digested_sample: Path, tmp_path: Path) -> None:
    """``--session sess-…`` echoed ``sess-…`` and ``--session session:sess-…`` echoed that: the
    same scope, two spellings. Now both say ``session:sess-…``, as ``show`` and the answer name it."""
    env = {"REM_DATA_DIR": str(copy_digested_sample(digested_sample, tmp_path / "data"))}
    echoed = []
    for given in (SESSION, f"session:{SESSION}", f"SESSION:{SESSION}"):
        done = run_cli("recall", "flaky test", "--session", given, "--json", env=env)
        assert done.returncode == 0, done.stderr
        echoed.append(json.loads(done.stdout)["signals"]["scope"]["session"])
    assert echoed == [f"session:{SESSION}"] * 3


def test_a_postgresql_user_without_a_password_is_shown(tmp_path: Path) -> None:
    """``postgresql://postgres@host/db`` was logged as ``postgresql://***@host/db``, and (the user
    being remembered as a secret) ``postgresql`` itself became ``***ql`` in ``status``. A role name
    is no secret; a password (either form) still is."""
    env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x"}
    status = run_cli("status", env=env)
    once = run_cli("--once", env=env)
    assert status.returncode == 1 and once.returncode == 1
    said = "cannot connect to the PostgreSQL database postgresql://postgres@127.0.0.1:1/x: connection failed"
    assert status.stderr.startswith(f"rem-cycle: {said}"), status.stderr
    assert f'{said}' in once.stdout and "***" not in once.stdout + once.stderr, once.stdout + once.stderr
    env["REM_DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/x?password=hunter22"
    status = run_cli("status", env=env)
    assert "postgresql://postgres@127.0.0.1:1/x?password=***" in status.stderr and "hunter22" not in status.stderr, status.stderr


def test_once_does_not_promise_a_retry_of_its_unrecorded_failure(tmp_path: Path) -> None:
    """``--once`` logged ``cycle failure not recorded yet, will retry`` and exited: nothing
    retries. It says what README says, ``not recorded in rem_runs yet``, and nothing more."""
    once = run_cli("--once", env={"REM_DATA_DIR": str(tmp_path / "data"), "REM_DATABASE_URL": "postgresql://rem@127.0.0.1:1/x"})
    assert once.returncode == 1
    events = [json.loads(line)["event"] for line in once.stderr.splitlines() if line.startswith("{")]
    assert "cycle failure not recorded in rem_runs yet" in events, once.stderr
    assert "will retry" not in once.stdout + once.stderr


def test_a_busy_cycle_lock_names_the_process_holding_it(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    """A second ``--once`` said ``another REM cycle is running on D (lock D/rem-cycle.lock)``: the
    file, not who holds it. The holder writes itself into the lock file while it holds it."""
    from store.claims import host_identity
    from worker.cycle import single_flight

    settings = load_settings(data_dir=tmp_path / "data")
    held, release = threading.Event(), threading.Event()

    async def hold() -> None:
        async with single_flight(settings):
            held.set()
            await anyio.to_thread.run_sync(release.wait)

    holder = threading.Thread(target=anyio.run, args=(hold,))
    holder.start()
    try:
        assert held.wait(30)
        once = run_cli("--once", env={"REM_DATA_DIR": str(settings.data_dir)})
    finally:
        release.set()
        holder.join(30)
    assert once.returncode == 3, once.stdout + once.stderr
    said = (f"another REM cycle is running on {settings.data_dir}: pid {os.getpid()} on {host_identity()} since ")
    assert said in once.stderr and f"(it holds {settings.lock_path})" in once.stderr, once.stderr
    assert settings.lock_path.read_text() == ""  # released: nobody holds it


def test_a_path_in_the_chroma_url_is_refused(tmp_path: Path) -> None:
    """``REM_CHROMA_URL=http://host:8000/api/v2`` was taken as ``http://host:8000``, the path
    dropped without a word."""
    done = run_cli("status", env={"REM_DATA_DIR": str(tmp_path / "data"), "REM_CHROMA_URL": f"http://127.0.0.1:{free_port()}/api/v2"})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "rem-cycle: invalid configuration: REM_CHROMA_URL: must be the Chroma server's address with nothing after the "
        "port (http://host:8000): rem-cycle's client adds /api/v2 itself, and a path, query or fragment is not used"
    ]


def test_an_output_folder_that_cannot_be_made_or_written_names_the_target(digested_sample: Path, tmp_path: Path) -> None:
    """``backup /proc/nope/x`` said ``[Errno 2] No such file or directory: '/proc/nope'``;
    ``export --out`` into a folder this user may not write in named its ``.part`` file with the
    errno. One line now names the target given and what to do."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {"REM_DATA_DIR": str(copy_digested_sample(digested_sample, tmp_path / "data"))}
    backup = run_cli("backup", "/proc/nope/x", env=env)
    assert backup.returncode == 1
    assert backup.stderr.splitlines() == [
        "rem-cycle: cannot write /proc/nope/x: cannot create its folder /proc/nope: No such file or directory "
        "(name a file in a folder this user may create and write in)"]
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | env | {"PYTHONPATH": str(ROOT)}
    export = subprocess.run([*without_root_powers(), sys.executable, "-m", "worker", "export", "--out", str(locked / "g.json")],
                            capture_output=True, text=True, env=full_env, timeout=60)
    assert export.returncode == 1
    assert export.stderr.splitlines() == [
        f"rem-cycle: cannot write {locked / 'g.json'}: Permission denied in its folder {locked} "
        "(name a file in a folder this user may create and write in)"]


def test_status_names_the_embedded_chroma_in_full(digested_sample: Path, tmp_path: Path) -> None:
    """With the default relative data dir, ``status`` said ``data dir /abs/.rem-data · chroma
    embedded at .rem-data/chroma``: the one path of the line a reader elsewhere cannot place."""
    copy_digested_sample(digested_sample, tmp_path / ".rem-data")
    done = run_cli("status", env={"REM_DATA_DIR": ".rem-data"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"data dir {tmp_path / '.rem-data'} · chroma embedded at {tmp_path / '.rem-data' / 'chroma'}" in done.stdout, done.stdout


def test_restore_names_the_graph_it_replaced_by_its_absolute_path(digested_sample: Path, tmp_path: Path) -> None:
    """``backup`` said ``backed up /abs/.rem-data/graph.sqlite3 to …``; ``restore`` of that backup
    said ``restored .rem-data/graph.sqlite3 from …``, relative to a folder the line does not name
    (found by userwalk4b, a second walk of the same sections)."""
    copy_digested_sample(digested_sample, tmp_path / ".rem-data")
    env = {"REM_DATA_DIR": ".rem-data"}
    assert run_cli("backup", "b.sqlite3", env=env, cwd=tmp_path).returncode == 0
    done = run_cli("restore", "b.sqlite3", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"restored {tmp_path / '.rem-data' / 'graph.sqlite3'} from b.sqlite3 ("), done.stdout
