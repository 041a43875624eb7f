"""Guards on the package layout: one import root, nothing shadows the standard library."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Collection, Mapping
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


@pytest.mark.parametrize("folder", ["autoscaler", "costmodel", "runtime", "src/modalscale/api"])
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
# never reach Kubernetes, kopf or HTTP themselves, directly or through any chain of modules (STYLE C1).
# import-linter cannot see the namespace portion `modalscale.operator`, so this builds the module import graph
# with ast over src/modalscale (the code folders through their symlinks) and follows it transitively: every
# import statement counts, function-local ones included, except those under `if TYPE_CHECKING:`.
PLANNERS = ("operator/isvc/plan.py", "operator/budget/plan.py", "operator/autoscale/plan.py",
            "operator/conditions.py")
FORBIDDEN_IN_PLANNERS = ("kopf", "kubernetes", "httpx", "httpcore", "aiohttp", "requests", "urllib3",
                         "prometheus_api_client")
# The operator's own I/O modules (readers, writers, kopf registration, the client factory, the delivery pump).
OPERATOR_IO_MODULES = ("apply", "deps", "handlers", "incluster", "observe", "peering", "reconcile", "delivery",
                       "opencost_source")


def _module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file for every module under `root` (a package folder), following symlinks."""
    import os

    files: dict[str, Path] = {}
    for folder, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = Path(folder).relative_to(root.parent)
        for name in names:
            if name.endswith(".py"):
                parts = rel.parts if name == "__init__.py" else (*rel.parts, name[:-3])
                files[".".join(parts)] = Path(folder) / name
    return files


def _is_type_checking(test: object) -> bool:
    import ast

    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(module: str, path: Path, known: Collection[str]) -> set[str]:
    """Every module name `module` (at `path`) imports at run time; for the modules in `known`, each dotted parent
    too (importing a.b.c runs a and a.b). A third-party module is named as imported (`kubernetes.client`)."""
    import ast

    is_package = path.name == "__init__.py"
    roots = {k.split(".")[0] for k in known}
    found: set[str] = set()

    def add(name: str) -> None:
        parts = name.split(".")
        first = 1 if parts[0] in roots else len(parts)
        found.update(".".join(parts[:i]) for i in range(first, len(parts) + 1))

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base_parts = package[:len(package) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            add(base)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    add(f"{base}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    found.discard(module)
    return found


def _forbidden(name: str) -> bool:
    if name.split(".")[0] in FORBIDDEN_IN_PLANNERS:
        return True
    parts = name.split(".")
    return parts[:2] == ["modalscale", "operator"] and parts[-1] in OPERATOR_IO_MODULES


def _forbidden_chains(start: str, files: Mapping[str, Path]) -> list[str]:
    """Each forbidden module `start` reaches, as its shortest import chain `a -> b -> kopf`; [] when none."""
    from collections import deque

    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    chains = []
    while queue:
        here = queue.popleft()
        if here != start and _forbidden(here):
            chain = [here]
            while (up := parent[chain[-1]]) is not None:
                chain.append(up)
            chains.append(" -> ".join(reversed(chain)))
            continue  # one chain per forbidden module: do not walk on through it
        if here not in files:
            continue  # a third-party or standard library module: not walked
        for name in sorted(_imports(here, files[here], files)):
            if name not in parent:
                parent[name] = here
                queue.append(name)
    return sorted(chains)


def _planner_module(planner: str) -> str:
    return "modalscale." + planner.removesuffix(".py").replace("/", ".")


# modalscale.api is the bottom layer (the kinds' typed spec and status): the planners import it, never the other way
# round. import-linter holds this for the packages it sees (pyproject.toml); this walk also sees the operator.
ABOVE_THE_API = ("modalscale.costmodel", "modalscale.autoscaler", "modalscale.operator", "modalscale.runtime",
                 "modalscale.notify", "modalscale.gateway", "modalscale.kubectl", "modalscale.devenv", "kopf",
                 "kubernetes", "httpx", "aiohttp")


def _reached(start: str, files: Mapping[str, Path]) -> set[str]:
    """Every module ``start`` imports at run time, directly or through any chain of modules under ``files``."""
    seen, todo = {start}, [start]
    while todo:
        here = todo.pop()
        if here in files:
            for name in _imports(here, files[here], files) - seen:
                seen.add(name)
                todo.append(name)
    return seen - {start}


def test_the_api_reaches_nothing_above_it() -> None:
    files = _module_files(REPO / "src" / "modalscale")
    api = sorted(m for m in files if m == "modalscale.api" or m.startswith("modalscale.api."))
    assert "modalscale.api.budgetpolicy" in api and "modalscale.api.inferenceservice" in api, api
    found = sorted(f"{m} -> {r}" for m in api for r in _reached(m, files)
                   if any(r == a or r.startswith(a + ".") for a in ABOVE_THE_API))
    assert found == [], "modalscale.api must import nothing above it: " + "; ".join(found)


def test_the_api_walk_follows_imports_through_other_modules(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    import pkg.c\n")
    (pkg / "c.py").write_text("import kopf\n")
    assert _reached("pkg.a", _module_files(pkg)) >= {"pkg.b", "pkg.c", "kopf"}


@pytest.mark.parametrize("planner", PLANNERS)
def test_operator_planners_reach_no_kopf_kubernetes_http_or_operator_io(planner: str) -> None:
    assert (REPO / planner).is_file(), f"{planner} moved: update PLANNERS"
    files = _module_files(REPO / "src" / "modalscale")
    chains = _forbidden_chains(_planner_module(planner), files)
    assert chains == [], f"{planner} reaches I/O through:\n" + "\n".join(chains)


def test_the_planner_guard_names_the_chain_through_which_a_planner_reaches_io(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "plan.py").write_text("from pkg import values\nfrom .typing_only import T\n")
    (pkg / "values.py").write_text("import json\n\ndef f():\n    from pkg.deep import x\n")
    (pkg / "deep.py").write_text("import httpx\nfrom kubernetes.client import CoreV1Api\n")
    (pkg / "typing_only.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import kopf\n")
    files = _module_files(pkg)
    assert _forbidden_chains("pkg.plan", files) == [
        "pkg.plan -> pkg.values -> pkg.deep -> httpx",
        "pkg.plan -> pkg.values -> pkg.deep -> kubernetes.client",
    ]


def test_the_planner_guard_treats_the_operators_io_modules_as_forbidden() -> None:
    files = _module_files(REPO / "src" / "modalscale")
    assert "modalscale.operator.budget.observe" in files
    assert _forbidden("modalscale.operator.budget.observe")
    assert _forbidden("modalscale.operator.deps")
    assert not _forbidden("modalscale.operator.budget.plan")
    assert not _forbidden("modalscale.autoscaler.observe_like_but_pure")
    # The walk reaches through the code folders' symlinks: the budget handlers are seen to reach kopf and the
    # budget reader.
    chains = _forbidden_chains("modalscale.operator.budget.handlers", files)
    assert "modalscale.operator.budget.handlers -> kopf" in chains, chains
    assert "modalscale.operator.budget.handlers -> modalscale.operator.budget.observe" in chains, chains


# The planners read as short pipelines of named pure steps (plan_budget, plan_policy, _predictive_need,
# parse_answers, the InferenceService's _status, the ledger's advance): no function over MAX_PLANNER_FUNCTION_LINES
# lines (docstring included) in the pure planner modules: all of costmodel/ and api/, every operator/*/plan.py, the
# autoscaler's policy and metrics readers (issue 23 item 4). Glob patterns relative to the repository root.
SHORT_PLANNERS = ("costmodel/**/*.py", "src/modalscale/api/**/*.py", "operator/*/plan.py",
                  "operator/budget/spend_anomalies.py", "autoscaler/policy.py", "autoscaler/metrics_reading.py",
                  "autoscaler/metrics_parse.py")
MAX_PLANNER_FUNCTION_LINES = 80


def _long_functions(path: Path, limit: int) -> list[str]:
    """``path:line name (n lines)`` of every function or method in ``path`` longer than ``limit`` lines."""
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                out.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    return out


def _planner_files() -> list[Path]:
    found = {pattern: sorted(REPO.glob(pattern)) for pattern in SHORT_PLANNERS}
    assert all(found.values()), f"a planner moved: update SHORT_PLANNERS ({[p for p, f in found.items() if not f]})"
    return sorted({f for files in found.values() for f in files})


def test_the_long_function_check_covers_every_planner_module() -> None:
    names = {str(f.relative_to(REPO)) for f in _planner_files()}
    assert {"costmodel/ledger.py", "costmodel/budget/plan.py", "costmodel/periods.py", "autoscaler/policy.py",
            "operator/isvc/plan.py", "operator/budget/plan.py", "operator/autoscale/plan.py",
            "src/modalscale/api/inferenceservice.py", "src/modalscale/api/budgetpolicy.py"} <= names, names


def test_no_planner_function_is_over_80_lines() -> None:
    offenders = [o for f in _planner_files() for o in _long_functions(f, MAX_PLANNER_FUNCTION_LINES)]
    assert offenders == [], "split into named pure steps: " + "; ".join(offenders)


def test_the_long_function_check_names_the_offender(tmp_path: Path) -> None:
    path = tmp_path / "plan.py"
    path.write_text("def short():\n    return 1\n\n\ndef plan():\n" + "    x = 1\n" * 80)
    assert _long_functions(path, MAX_PLANNER_FUNCTION_LINES) == ["plan.py:5 plan (81 lines)"]


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


def _reexported(source: str) -> list[str]:
    """The names a module's ``__all__`` lists that it only imports (binds by no def, class or assignment)."""
    import ast

    listed: list[str] = []
    defined: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                listed = [e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return sorted(name for name in listed if name not in defined)


def test_no_module_re_exports_a_name_through_all() -> None:
    # A name has one home and importers use it (issue 23): a module's __all__ lists what it defines, not names moved
    # out of it (strict mypy takes __all__ as an explicit re-export, so the old import path would type-check).
    files = {py.resolve() for root in [REPO / f for f in CODE_FOLDERS] + [REPO / "src" / "modalscale"]
             for py in root.rglob("*.py") if py.name != "__init__.py"}
    found = sorted(f"{py.relative_to(REPO)}: {', '.join(names)}" for py in files
                   if (names := _reexported(py.read_text())))
    assert found == []


def test_the_re_export_guard_sees_a_re_export() -> None:
    assert _reexported('from a import b\n\nC = 1\n\n\ndef f():\n    pass\n\n__all__ = ["C", "b", "f"]\n') == ["b"]
    assert _reexported('from a import b\n\nb = b or 1\n__all__ = ["b"]\n') == []


def test_the_shim_guard_sees_a_shim() -> None:
    assert _reexport_only('"""Old name."""\nfrom a import *  # noqa: F403\nfrom a import __all__  # noqa: F401\n')
    assert _reexport_only('"""Old name."""\nfrom a import b\n\n__all__ = ["b"]\n')
    assert not _reexport_only('"""Real."""\nfrom a import b\n\nC = b + 1\n')
