"""Condition types and reasons live in one module per kind (``modalscale.api.conditions``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import modalscale.api.conditions as C

REPO = Path(__file__).resolve().parents[3]
NAMES = {name: getattr(C, name) for name in C.__all__ if isinstance(getattr(C, name), str)}


def test_every_type_and_reason_is_camel_case_and_named_once() -> None:
    assert NAMES and all(re.fullmatch(r"[A-Z][A-Za-z0-9]*", v) for v in NAMES.values())
    by_value: dict[str, list[str]] = {}
    for name, value in NAMES.items():
        by_value.setdefault(value, []).append(name)
    assert {v: n for v, n in by_value.items() if len(n) > 1} == {}


def test_each_kind_lists_its_condition_types() -> None:
    assert C.ISVC_CONDITION_TYPES == ("Ready", "Progressing", "Degraded", "ScalingConflict", "BudgetLimited", "Priced")
    assert C.AUTOSCALER_CONDITION_TYPES == ("MetricsAvailable", "CostModelLoaded")
    assert C.BUDGET_CONDITION_TYPES == ("Ready", "BudgetExceeded", "AlertDelivered", "SpotFallback",
                                         "SpendAnomalyHistory", "SpendAnomalyDetection")


# Where reasons must not be defined: every product package but modalscale.api.conditions. (The runtime's
# "InternalError" is Triton's error class, and the demo and dev environment only read what the operator wrote.)
PRODUCT_CODE = ("operator", "autoscaler", "costmodel", "src/modalscale/api", "src/modalscale/notify")
KUBERNETES_OWN = {"operator/isvc/plan.py": {"Unschedulable", "CrashLoopBackOff"}}
"""Reasons Kubernetes itself writes (the scheduler's PodScheduled reason, the kubelet's waiting reasons), read from
pods: spelt as Kubernetes spells them, where they are read."""
ENUM_VALUES = {m.value for m in C.ScalingReason}
REASONS = set(NAMES.values()) | ENUM_VALUES
CAMEL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+")


def _product_modules() -> list[Path]:
    own = REPO / "src/modalscale/api/conditions.py"
    return sorted(p for folder in PRODUCT_CODE for p in (REPO / folder).rglob("*.py") if p != own)


def _string_literals(tree: ast.AST) -> list[ast.Constant]:
    """String constants that are values: not docstrings, not parts of f-strings, not ``__all__`` names and not
    annotations."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))  # docstrings and attribute docstrings
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skip.update(id(n) for n in ast.walk(node.value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]:
                if a.annotation is not None:
                    skip.update(id(n) for n in ast.walk(a.annotation))
            if node.returns is not None:
                skip.update(id(n) for n in ast.walk(node.returns))
        elif isinstance(node, ast.AnnAssign):
            skip.update(id(n) for n in ast.walk(node.annotation))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def _reason_assignments(tree: ast.AST) -> list[tuple[int, str]]:
    """CamelCase literals given to anything named ``*reason*`` (``reason = "X"``, ``state, reason = ..., "X"``,
    ``f(reason="X")``): a reason spelt out where it is used, whether or not the vocabulary knows it yet."""
    out = []
    for node in ast.walk(tree):
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += list(zip(target.elts, node.value.elts))
                else:
                    pairs.append((target, node.value))
        elif isinstance(node, ast.keyword) and node.arg:
            pairs.append((ast.Name(id=node.arg), node.value))
        for target, value in pairs:
            name = (target.id if isinstance(target, ast.Name)
                    else target.attr if isinstance(target, ast.Attribute) else "")
            if ("reason" in name.lower() and isinstance(value, ast.Constant) and isinstance(value.value, str)
                    and CAMEL.fullmatch(value.value)):
                out.append((value.lineno, value.value))
    return out


def test_no_other_module_defines_a_condition_type_or_reason() -> None:
    """The vocabulary is :mod:`modalscale.api.conditions`: elsewhere a reason is imported, never spelt out."""
    offenders = []
    for py in _product_modules():
        rel = str(py.relative_to(REPO))
        tree = ast.parse(py.read_text(), filename=rel)
        allowed = KUBERNETES_OWN.get(rel, set())
        offenders += [f"{rel}:{n.lineno} {n.value!r}" for n in _string_literals(tree)
                      if n.value in REASONS and n.value not in allowed]
        offenders += [f"{rel}:{line} reason {value!r}" for line, value in _reason_assignments(tree)
                      if value not in allowed]
        offenders += [f"{rel}:{n.lineno} class {n.name}" for n in ast.walk(tree)
                      if isinstance(n, ast.ClassDef) and n.name.endswith("Reason")]
    assert offenders == []


def test_the_reason_guard_sees_a_reason_spelt_out(tmp_path: Path) -> None:
    src = ('"""Doc naming ThresholdCrossed is fine."""\n'
           'class DeliveryReason:\n    pass\n'
           'def f(x: "Delivered") -> None:\n'
           '    state, reason = 1, "BrandNewReason"\n'
           '    g(reason="AlsoNew", message=f"Delivered {x}")\n'
           '    return ("Delivered", C.DELIVERED)\n')
    tree = ast.parse(src)
    assert [n.value for n in _string_literals(tree) if n.value in REASONS] == ["Delivered"]
    assert [v for _, v in _reason_assignments(tree)] == ["BrandNewReason", "AlsoNew"]
    assert [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name.endswith("Reason")] == [
        "DeliveryReason"]


def test_enums_whose_values_are_reasons_take_them_from_the_vocabulary() -> None:
    from modalscale.autoscaler.policy import Reason
    from modalscale.costmodel.budget import AlertKind
    from modalscale.costmodel.opencost import PriceSource

    assert Reason is C.ScalingReason
    assert {k.value for k in AlertKind} <= set(NAMES.values())
    assert {p.value for p in PriceSource} <= set(NAMES.values())
