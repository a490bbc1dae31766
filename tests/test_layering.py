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
