"""Guards on the operator's wiring: one composition root, registration-only handlers, no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

OPERATOR = Path(__file__).resolve().parents[3] / "operator"


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_only_the_entry_point_imports_the_registration_module() -> None:
    # autoscale.handlers once imported reconcile_isvc back from handlers (a cycle hidden in a function).
    importers = sorted(p.name for p in OPERATOR.glob("*.py") if p.name not in ("handlers.py", "cli.py")
                       and "modalscale.operator.handlers" in _imported_modules(p))
    assert importers == []


def test_handlers_module_holds_registration_only() -> None:
    tree = ast.parse((OPERATOR / "handlers.py").read_text())
    top = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    assert top == ["register"]


def test_deps_are_built_by_the_entry_point_not_by_a_handler() -> None:
    builders = sorted(p.name for p in OPERATOR.glob("*.py")
                      if p.name not in ("deps.py", "cli.py") and "build_deps(" in p.read_text())
    assert builders == []
