"""Imports flow one way: worker → pipelines → store → config (DESIGN §1)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["config", "store", "pipelines", "worker"]


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & set(LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_no_upward_imports(layer: str) -> None:
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - allowed)
        for path in sorted((ROOT / layer).rglob("*.py"))
        if imported_packages(path) - allowed
    }
    assert offenders == {}
