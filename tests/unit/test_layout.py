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
