"""Factories shared by the cost-model unit tests (pure, no I/O)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from modalscale.api.budgetpolicy import BudgetSpec, parse_budget_spec

BASE_SPEC: dict[str, Any] = {
    "selector": {"matchLabels": {"team": "search"}},
    "period": "Daily",
    "timeZone": "UTC",
    "limit": {"amount": "100", "currency": "USD"},
    "thresholds": [
        {"percent": 50, "actions": ["Alert"]},
        {"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 2},
        {"percent": 100, "actions": ["Alert", "ScaleDown"]},
    ],
    "enforcement": {"floorReplicas": 1, "order": "LowestPriorityFirst"},
    "forecast": {"enabled": False},
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture
def make_spec() -> Callable[..., BudgetSpec]:
    """``make_spec(limit={"amount": "50"}, period="Weekly")``: BASE_SPEC deep-merged with overrides, parsed."""

    def factory(**overrides: Any) -> BudgetSpec:
        return parse_budget_spec(_merge(BASE_SPEC, overrides))

    return factory


@pytest.fixture
def spec_dict() -> Callable[..., dict[str, Any]]:
    """Like ``make_spec`` but returns the camelCase dict (for parse-error tests)."""

    def factory(**overrides: Any) -> dict[str, Any]:
        return _merge(BASE_SPEC, overrides)

    return factory
