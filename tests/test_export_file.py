"""``export --out OUT``: OUT is the old file or the whole new one — after a failure, a full disk, a
kill or a power cut — and nothing is left beside it but OUT."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from store.graph import GraphStore, Node
from tests.conftest import ROOT
from tests.graph_fixtures import build_sample_graph

NODES = 7 + 1500  # the sample graph's and the padding's: an export of some 300 KB


@pytest.fixture
def data(tmp_path: Path) -> Path:
    db = build_sample_graph(tmp_path / "data" / "graph.sqlite3")
    GraphStore(db).upsert_nodes(Node(f"CONCEPT:padding{n}", "CONCEPT", f"padding {n}", {"description": "x" * 100})
                                for n in range(NODES - 7))
    db.close()
    return tmp_path / "data"


def _export(data: Path, out: Path, *, file_size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data)}

    def limit() -> None:  # a full disk: a write past the limit fails (EFBIG; SIGXFSZ ignored)
        if file_size_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run([sys.executable, "-m", "worker", "export", "--out", str(out)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT, preexec_fn=limit)


def _nodes(out: Path) -> int:
    return len(json.loads(out.read_text(encoding="utf-8"))["nodes"])


def test_an_export_that_runs_out_of_space_leaves_the_old_file_and_no_part(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "graph.json"
    assert _export(data, out).returncode == 0
    before = out.read_bytes()
    assert _nodes(out) == NODES and len(before) > 200_000

    failed = _export(data, out, file_size_limit=100_000)
    assert failed.returncode == 1, failed.stderr
    assert "Traceback" not in failed.stderr
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "graph.json"]  # no graph.json.part

    assert _export(data, out).returncode == 0  # space again: the same command completes
    assert _nodes(out) == NODES


def test_a_part_left_by_a_killed_export_is_replaced_not_written_through(data: Path, tmp_path: Path) -> None:
    """A SIGKILL leaves OUT.part; the next export replaces it. Before, it opened OUT.part as it
    found it: a link there had the export written into the link's target (and OUT became the link)."""
    out = tmp_path / "graph.json"
    victim = tmp_path / "someone-elses.txt"
    victim.write_text("mine\n", encoding="utf-8")
    (tmp_path / "graph.json.part").symlink_to(victim)

    done = _export(data, out)
    assert done.returncode == 0, done.stderr
    assert victim.read_text(encoding="utf-8") == "mine\n"
    assert not out.is_symlink() and _nodes(out) == NODES
    assert not (tmp_path / "graph.json.part").exists()


@pytest.mark.skipif(shutil.which("strace") is None and os.environ.get("CI", "").lower() != "true",
                    reason="strace is not installed (CI installs it: .ci/run)")
def test_the_export_is_on_the_disk_before_it_replaces_the_old_file(data: Path, tmp_path: Path) -> None:
    """The file's data is flushed (fsync) before the rename, and the folder's entry after it: after a
    power cut OUT is the old file or the whole new one. Before, neither was flushed (the rename
    could reach the disk before the data: an empty or partial OUT)."""
    out = tmp_path / "graph.json"
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT), "REM_DATA_DIR": str(data)}
    done = subprocess.run(["strace", "-f", "-qq", "-e", "signal=none", "-e", "trace=openat,fsync,rename,renameat,renameat2",
                           "-o", str(trace), sys.executable, "-m", "worker", "export", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    calls = [re.sub(r"^\d+\s+", "", line) for line in trace.read_text().splitlines()]
    part_fd = next(m.group(1) for c in calls if (m := re.search(rf'openat\(.*"{re.escape(str(out))}\.part".* = (\d+)$', c)))
    folder_fd = [m.group(1) for c in calls if (m := re.search(rf'openat\(.*"{re.escape(str(tmp_path))}", O_RDONLY.* = (\d+)$', c))]
    renamed = next(i for i, c in enumerate(calls) if re.match(r"rename(at2?)?\(.*graph\.json\.part", c))
    synced = [(i, m.group(1)) for i, c in enumerate(calls) if (m := re.match(r"fsync\((\d+)\)\s+= 0$", c))]
    assert any(fd == part_fd for i, fd in synced if i < renamed)
    assert any(fd in folder_fd for i, fd in synced if i > renamed)
    assert _nodes(out) == NODES
