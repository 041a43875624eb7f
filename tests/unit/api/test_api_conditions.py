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
                                         "SpendAnomalyHistory")


def test_no_operator_module_defines_a_condition_type_or_reason_itself() -> None:
    """A module-level ``NAME = "SomeReason"`` whose value is one of ours belongs in ``modalscale.api.conditions``."""
    values = set(NAMES.values())
    offenders = []
    for py in sorted((REPO / "operator").glob("*.py")):
        for node in ast.parse(py.read_text(), filename=str(py)).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and node.value.value in values and all(isinstance(t, ast.Name) for t in node.targets)):
                offenders.append(f"{py.name}:{node.lineno} {node.value.value}")
    assert offenders == []
