"""Ctrl-C while a command is still starting: loading its modules takes most of the first half
second of every ``rem-cycle`` command, so that is where an operator who
typed the wrong command presses it. README promises exit 130 and one line there too, never a
traceback — for the console script and for ``python -m worker``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT

# SIGINT arrives while ``pydantic_settings`` (which every command loads) is being imported, as a
# Ctrl-C in the first half second does: a meta-path finder sends it when the import starts
# (deterministic, whatever the machine's speed). It was ``chromadb``, then ``networkx``, until
# commands stopped loading them at start (tests/test_cli_start.py).
_SIGINT_DURING_IMPORT = """
import os, signal, sys
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "pydantic_settings":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _CtrlC())
sys.argv = ["rem-cycle", *sys.argv[1:]]
"""


def _console_script() -> str:
    """What pip's ``rem-cycle`` script runs: the entry point pyproject.toml names."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]["rem-cycle"]
    module, function = spec.split(":")
    return f"from {module} import {function}\nsys.exit({function}())\n"


ENTRIES = {
    "console script": _console_script,
    "python -m worker": lambda: "import runpy\nrunpy.run_module('worker', run_name='__main__', alter_sys=True)\n",
}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_ctrl_c_while_the_command_starts_is_one_line_and_exit_130(tmp_path: Path, entry: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data)}
    done = subprocess.run(
        [sys.executable, "-c", _SIGINT_DURING_IMPORT + ENTRIES[entry](), "status"],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )
    assert done.stderr.splitlines() == ["rem-cycle: interrupted by SIGINT"], done.stderr[-3000:]
    assert done.returncode == 128 + signal.SIGINT
    assert done.stdout == ""
    assert list(data.iterdir()) == []
