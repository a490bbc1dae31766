"""Imports flow one way: worker → pipelines → store → config (DESIGN §1)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["config", "store", "pipelines", "worker"]


def imported_modules(path: Path) -> set[str]:
    """Every top-level module ``path`` imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def imported_packages(path: Path) -> set[str]:
    return imported_modules(path) & set(LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_no_upward_imports(layer: str) -> None:
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - allowed)
        for path in sorted((ROOT / layer).rglob("*.py"))
        if imported_packages(path) - allowed
    }
    assert offenders == {}


def test_only_the_store_layer_speaks_sqlite() -> None:
    """The database engines stay behind store/: callers catch store.errors.StoreError, never the
    exceptions of sqlite3 or psycopg."""
    offenders = [
        str(path.relative_to(ROOT))
        for layer in LAYERS
        if layer != "store"
        for path in sorted((ROOT / layer).rglob("*.py"))
        if {"sqlite3", "psycopg", "psycopg_pool"} & imported_modules(path)
    ]
    assert offenders == []


# The concrete stores behind pipelines.ports' Protocols, and the connection they share.
CONCRETE_STORES = {
    "store.db": {"Database"},
    "store.postgres": {"PostgresDatabase"},
    "store.graph": {"GraphStore"},
    "store.provenance": {"ProvenanceStore"},
    "store.merges": {"MergeStore"},
    "store.runstate": {"RunStateStore"},
    "store.chunks": {"ChunkResultStore"},
    "store.tombstones": {"TombstoneStore"},
    "store.recall_index": {"RecallIndex"},
    "store.lazy_table": {"LazyEdgeTable"},
    "store.unit_of_work": {"DatabaseUnitOfWork"},
}


def concrete_store_imports(path: Path) -> list[str]:
    """``module.Name`` for each concrete store class (or its whole module) ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module in CONCRETE_STORES:
            found += [f"{node.module}.{a.name}" for a in node.names if a.name in CONCRETE_STORES[node.module] or a.name == "*"]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in CONCRETE_STORES]
    return found


def test_pipelines_reach_stores_through_the_protocols_and_the_unit_of_work() -> None:
    """Pipelines are typed against pipelines.ports (graph, provenance, merges, run state, chunk
    results, tombstones, recall index, queue table, unit of work) and never construct a store or
    open a transaction on a connection: the worker composes the stores and hands them over."""
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "pipelines").rglob("*.py"))
        if (found := concrete_store_imports(path))
    }
    assert offenders == {}
    sources = {path: path.read_text(encoding="utf-8") for path in sorted((ROOT / "pipelines").rglob("*.py"))}
    assert [str(p.relative_to(ROOT)) for p, text in sources.items() if ".db.transaction(" in text or ".db)" in text] == []


def test_every_module_logs_through_the_library_logger() -> None:
    """``structlog.get_logger`` unconfigured prints on stdout, a library caller's protocol channel:
    our modules take their logger from ``store.library_log`` (tests/test_library_stdout.py)."""
    offenders = [
        str(path.relative_to(ROOT))
        for layer in LAYERS
        for path in sorted((ROOT / layer).rglob("*.py"))
        if "structlog.get_logger" in path.read_text(encoding="utf-8") and path.name != "library_log.py"
    ]
    assert offenders == []
