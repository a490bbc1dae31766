"""Library code never writes to stdout: a program that imports rem-cycle and has not configured
structlog (an agent whose stdout is its MCP stdio channel) gets our warnings on stderr; one that
configured structlog, before or after the import, gets them where it said."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The store's warning when the server closed an idle connection (a restart, a failover): the
# holder goes on with a new one.
CONNECTION_REPLACED = """
import sys
from pathlib import Path

import psycopg

import pipelines.enqueue  # noqa: F401 - what an agent that queues edges imports
from store.backend import open_database_at

url, server_url = sys.argv[1], sys.argv[2]
db = open_database_at(path=Path("unused.db"), url=url)
pid = db.query("SELECT pg_backend_pid()")[0][0]
with psycopg.connect(server_url, autocommit=True) as conn:
    assert conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]
with db.transaction() as tx:
    tx.execute("SELECT 1")
db.close()
"""

# The graph's warning for an edge whose endpoint is missing.
EDGE_CULLED = """
import sys
from pathlib import Path

import structlog

from store.backend import open_database_at
from store.graph import Edge, GraphStore

if sys.argv[2] == "configured-after-import":
    structlog.configure(processors=[structlog.processors.JSONRenderer()],
                        logger_factory=structlog.PrintLoggerFactory(sys.stdout))
db = open_database_at(path=Path(sys.argv[1]), url=None)
GraphStore(db).link_nodes([Edge("CONCEPT:a", "CONCEPT:b", "R")])
db.close()
"""


def run_library(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REM_")} | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_replaced_connection_is_warned_on_stderr_not_on_the_callers_stdout(database_url: str, postgres_server_url: str) -> None:
    """Before, the warning was printed on stdout, structlog's default: an MCP stdio agent's
    channel got a line that is not JSON-RPC."""
    done = run_library(CONNECTION_REPLACED, database_url, postgres_server_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "PostgreSQL connection replaced" in done.stderr


def test_an_unconfigured_caller_gets_warnings_on_stderr(tmp_path: Path) -> None:
    done = run_library(EDGE_CULLED, str(tmp_path / "graph.db"), "unconfigured")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "edge culled: endpoint missing" in done.stderr


def test_a_caller_that_configures_structlog_after_the_import_keeps_its_configuration(tmp_path: Path) -> None:
    """Nothing of ours configures structlog: the caller's configuration (here: JSON on its stdout,
    set after the import) is the one our loggers use."""
    done = run_library(EDGE_CULLED, str(tmp_path / "graph.db"), "configured-after-import")
    assert done.returncode == 0, done.stderr
    assert '"event": "edge culled: endpoint missing"' in done.stdout
    assert "edge culled" not in done.stderr
