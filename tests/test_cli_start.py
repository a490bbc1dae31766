"""A command starts without importing what only some commands need.

Every ``rem-cycle`` invocation imports ``worker.cli``; the slow libraries below are needed by a few
commands only (detection and GraphML by networkx, a model server by httpx, Chroma by ingest, the
MCP SDK by ``mcp``, psycopg by a PostgreSQL graph). Importing them up front cost each command about
half a second of CPU (bench/bench_cli_start.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.bench_cli_start import DEFERRED_LIBRARIES


def loaded_after(statement: str) -> list[str]:
    """The deferred libraries a fresh interpreter holds after running ``statement``."""
    probe = f"{statement}\nimport json, sys\nprint(json.dumps([m for m in {list(DEFERRED_LIBRARIES)!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_command_line_imports_no_deferred_library() -> None:
    assert loaded_after("import worker.cli") == []


@pytest.mark.parametrize(
    ("statement", "library"),
    [
        ("from pipelines.communities import semantic_graph; semantic_graph([], [])", "networkx"),
        ("from pipelines.export import graphml_text; graphml_text({'nodes': [], 'edges': []})", "networkx"),
        ("from pipelines.extract.llm import OpenAIExtractor", "httpx"),
    ],
)
def test_a_deferred_library_is_imported_where_it_is_used(statement: str, library: str) -> None:
    # The other side of the test above: the code that needs the library still gets it.
    assert library in loaded_after(statement)
