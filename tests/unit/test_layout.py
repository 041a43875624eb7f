"""Guards on the package layout: one import root, nothing shadows the standard library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("operator", "autoscaler", "costmodel", "runtime")


def test_operator_folder_has_no_init_so_it_cannot_shadow_stdlib_operator() -> None:
    assert not (REPO / "operator" / "__init__.py").exists()


@pytest.mark.parametrize("folder", CODE_FOLDERS)
def test_code_folder_is_reached_through_a_committed_symlink_under_src(folder: str) -> None:
    link = REPO / "src" / "modalscale" / folder
    assert link.is_symlink(), f"{link} must be a symlink"
    assert Path(link.readlink()) == Path("..") / ".." / folder


@pytest.mark.parametrize("folder", CODE_FOLDERS)
def test_code_folder_imports_only_as_modalscale_subpackage(folder: str) -> None:
    import importlib

    mod = importlib.import_module(f"modalscale.{folder}")
    paths = [Path(p).resolve() for p in mod.__path__]
    assert (REPO / folder).resolve() in paths


def test_no_module_is_named_after_a_stdlib_module() -> None:
    offenders = []
    for py in (REPO / "src" / "modalscale").rglob("*.py"):
        for part in py.relative_to(REPO / "src" / "modalscale").with_suffix("").parts:
            if part in sys.stdlib_module_names and part != "__init__":
                offenders.append(str(py.relative_to(REPO)))
    # The folder `operator` itself is allowed: it is only ever `modalscale.operator`.
    offenders = [o for o in offenders if Path(o).with_suffix("").name != "operator"]
    assert offenders == []


def test_stdlib_operator_still_imports_from_the_repository_root() -> None:
    proc = subprocess.run([sys.executable, "-c", "import operator, sys; print(operator.add(2, 3)); "
                           "print(operator.__file__)"], cwd=REPO, capture_output=True, text=True, check=True)
    value, origin = proc.stdout.split()
    assert value == "5"
    assert "/work/" not in origin or "lib/python" in origin


def test_python_dash_m_runs_from_the_repository_root() -> None:
    proc = subprocess.run([sys.executable, "-m", "modalscale.cli", "--help"], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "cluster" in proc.stdout


def test_import_linter_contracts_hold() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize("folder", ["autoscaler", "costmodel", "runtime"])
def test_pure_packages_never_import_the_operator(folder: str) -> None:
    import ast

    offenders = []
    for py in (REPO / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(py.read_text(), filename=str(py))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{py.relative_to(REPO)}: {n}" for n in names if n.startswith("modalscale.operator")]
    assert offenders == []


def test_every_test_folder_is_a_package_so_test_module_names_never_collide() -> None:
    folders = {p.parent for p in (REPO / "tests").rglob("test_*.py")}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").exists()) == []


# The operator's pure planners (decide pure, act thin): they return a plan and a reason from observed state and
# never reach Kubernetes, kopf or HTTP themselves. import-linter cannot see the namespace portion
# `modalscale.operator`, so this is an AST scan of every import statement, function-local ones included.
PLANNERS = ("operator/isvc/plan.py", "operator/budget/plan.py", "operator/autoscale/plan.py",
            "operator/conditions.py")
FORBIDDEN_IN_PLANNERS = ("kopf", "kubernetes", "httpx", "httpcore", "aiohttp", "requests")


def _imported_roots(path: Path) -> set[str]:
    import ast

    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("planner", PLANNERS)
def test_operator_planners_import_no_kopf_kubernetes_or_http(planner: str) -> None:
    assert (REPO / planner).is_file(), f"{planner} moved: update PLANNERS"
    assert _imported_roots(REPO / planner) & set(FORBIDDEN_IN_PLANNERS) == set()


def test_the_planner_guard_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "plan.py"
    bad.write_text("def f():\n    from kubernetes.client import CoreV1Api\n    import httpx\n")
    assert _imported_roots(bad) & set(FORBIDDEN_IN_PLANNERS) == {"kubernetes", "httpx"}


def test_operator_subpackages_show_the_architecture() -> None:
    # isvc/, budget/, autoscale/ each hold their spec/observe/plan/handlers; no flat `isvc_*.py` module comes back.
    for sub in ("isvc", "budget", "autoscale"):
        assert (REPO / "operator" / sub / "__init__.py").is_file()
        assert (REPO / "operator" / sub / "plan.py").is_file()
    flat = sorted(p.name for p in (REPO / "operator").glob("*.py")
                  if p.name.startswith(("isvc_", "budget_", "autoscale_")))
    assert flat == []


def _reexport_only(source: str) -> bool:
    """True when a module defines nothing: its body is a docstring, imports and ``__all__`` (an old-name shim)."""
    import ast

    for node in ast.parse(source).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else []
        if targets and all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        return False
    return True


def test_no_module_only_re_exports_another_under_an_old_name() -> None:
    # A name has one home and importers use it (issue 23). A package's __init__.py that gathers its API is not a shim.
    files = {py.resolve() for root in [REPO / f for f in CODE_FOLDERS] + [REPO / "src" / "modalscale"]
             for py in root.rglob("*.py") if py.name != "__init__.py"}
    shims = sorted(str(py.relative_to(REPO)) for py in files if _reexport_only(py.read_text()))
    assert shims == []


def test_the_shim_guard_sees_a_shim() -> None:
    assert _reexport_only('"""Old name."""\nfrom a import *  # noqa: F403\nfrom a import __all__  # noqa: F401\n')
    assert _reexport_only('"""Old name."""\nfrom a import b\n\n__all__ = ["b"]\n')
    assert not _reexport_only('"""Real."""\nfrom a import b\n\nC = b + 1\n')
