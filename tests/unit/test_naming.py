"""One word, one meaning (issue 14 item 5): "cost" is money; the autoscaler's regressor is the service-time model.

``modalscale.costmodel`` is the money package. The regressor is named ``ServiceTimeModel…`` / ``service_time_model``
in code and "service-time model" in the CRDs' descriptions. Only the API-visible names keep "cost model" (renaming
one is a breaking API change that needs a new field and a deprecation path, per the Kubernetes API conventions):
the field ``spec.model.costModelRef``, the condition ``CostModelLoaded`` and its reasons, the metric
``modalscale_autoscaler_cost_model_loaded``, and the Python names that mirror them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CODE = ("operator", "autoscaler", "costmodel", "runtime", "src/modalscale", "benchmarks", "scripts", "tests")
MISNAMED = re.compile(r"cost[ _-]?model", re.IGNORECASE)
API_MIRRORS = {
    "costmodel",  # the money package
    "COST_MODEL_LOADED", "NO_COST_MODEL_REF", "COST_MODEL_NOT_FOUND", "INVALID_COST_MODEL",  # CostModelLoaded
    "cost_model_config_map", "cost_model_key",  # spec.model.costModelRef.{name,key}
}
"""Identifiers allowed to say "cost model": each mirrors an API name, or is the money package."""
API_TOKENS = re.compile(r"costModelRef|CostModelLoaded|NoCostModelRef|CostModelNotFound|InvalidCostModel")
"""API names a CRD description may quote."""


def _python_files() -> list[Path]:
    """Each module once: ``src/modalscale/<folder>`` symlinks to the top-level folders are not followed."""
    files = []
    for folder in CODE:
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO)
            inside_link = any((REPO / Path(*rel.parts[:i])).is_symlink() for i in range(1, len(rel.parts)))
            if ".venv" in rel.parts or inside_link:
                continue
            files.append(path)
    return sorted(files)


def identifiers(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, name)`` of every name the code defines or uses: variables, attributes, functions, classes,
    arguments, keyword arguments and imported modules and names."""
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            yield line, node.id
        elif isinstance(node, ast.Attribute):
            yield line, node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield line, node.name
        elif isinstance(node, ast.arg):
            yield line, node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            yield line, node.arg
        elif isinstance(node, ast.alias):
            yield from ((line, part) for part in [*node.name.split("."), *([node.asname] if node.asname else [])])
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield from ((line, part) for part in node.module.split("."))


def misnamed(tree: ast.AST) -> list[tuple[int, str]]:
    return sorted({(line, name) for line, name in identifiers(tree)
                   if MISNAMED.search(name) and name not in API_MIRRORS})


def test_python_identifiers_call_the_regressor_the_service_time_model() -> None:
    files = _python_files()
    assert len(files) > 100  # the walk found the code
    wrong = [f"{p.relative_to(REPO)}:{line}: {name}" for p in files
             for line, name in misnamed(ast.parse(p.read_text(encoding="utf-8"), str(p)))]
    assert wrong == [], "name it service_time_model / ServiceTimeModel… ('cost' is money; see the module docstring)"


def test_the_identifier_walk_flags_every_kind_of_name_and_spares_the_api_mirrors() -> None:
    # The guard's own check: each place a name can appear is seen, and the allowed names pass.
    code = ("import modalscale.costmodel.catalog as cost_model_mod\nfrom x.cost_model import CostModelCache\n"
            "class CostModelStatus: ...\ndef decode_cost_model(cost_model, *, costModel=1): ...\n"
            "plan(cost_model=x.cost_model_loaded)\nCOST_MODEL_LOADED = spec.cost_model_config_map\n")
    assert [name for _, name in misnamed(ast.parse(code))] == [
        "cost_model_mod", "CostModelCache", "cost_model", "CostModelStatus", "costModel", "cost_model",
        "decode_cost_model", "cost_model", "cost_model_loaded"]


def descriptions(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """``(path, text)`` of every ``description`` string in a CRD."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield path, value
            else:
                yield from descriptions(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from descriptions(value, f"{path}[{i}]")


@pytest.mark.parametrize("crd", sorted([*(REPO / "crds").glob("*.yaml"),
                                        *(REPO / "charts/modalscale-crds/files/crds").glob("*.yaml")]),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_crd_descriptions_call_the_regressor_the_service_time_model(crd: Path) -> None:
    texts = list(descriptions(yaml.safe_load(crd.read_text())))
    assert texts  # the walk found the descriptions
    wrong = [path for path, text in texts if MISNAMED.search(API_TOKENS.sub("", text))]
    assert wrong == [], "say 'service-time model' ('cost' is money); only API names keep 'CostModel'"
