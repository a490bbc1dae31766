"""Signals and pipes around the CLI's own messages (operator audit).

``--help`` and ``--version`` end like every other command whose reader went away
(``rem-cycle --help | head -1``): exit 141 (128 + SIGPIPE) without a message. argparse swallows
the write error of its own messages, so they exited 0 as if the reader had read them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, make_session, run_cli, write_sessions


def _run_with_reader_gone(*args: str, data: Path) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m worker ARGS`` with stdout a pipe whose reader is already closed."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env |= {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data)}
    try:
        return subprocess.run(
            [sys.executable, "-m", "worker", *args], stdout=write_end, stderr=subprocess.PIPE,
            timeout=120, env=env, cwd=ROOT,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["export", "--help"], ["-h"]])
def test_help_and_version_whose_reader_went_away_exit_141_quietly(tmp_path: Path, args: list[str]) -> None:
    done = _run_with_reader_gone(*args, data=tmp_path / "d")
    assert done.returncode == 141, done.stderr.decode()[-2000:]
    assert done.stderr == b""


# SIGINT the moment the finished cycle's report starts to print (``worker.report`` is imported only
# for it): Ctrl-C just after the cycle finished.
_SIGINT_WHEN_THE_REPORT_PRINTS = """
import os, signal, sys
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "worker.report":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _CtrlC())
sys.argv = ["rem-cycle", *sys.argv[1:]]
import runpy
runpy.run_module("worker", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_just_after_a_once_cycle_finished_still_prints_its_report_and_exits_0(tmp_path: Path) -> None:
    data = tmp_path / "d"
    sessions = write_sessions(tmp_path / "s.jsonl", [make_session("s1", 4, text="turn {i}: the LazyEdgeQueue drains")])
    assert run_cli("import", str(sessions), env={"REM_DATA_DIR": str(data)}).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")}
    env |= {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data)}
    done = subprocess.run(
        [sys.executable, "-c", _SIGINT_WHEN_THE_REPORT_PRINTS, "--once"],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )
    assert "interrupted by SIGINT" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "completed" in done.stdout
    status = run_cli("status", "--json", env={"REM_DATA_DIR": str(data)})
    assert json.loads(status.stdout)["runs"][0]["outcome"] == "completed"
