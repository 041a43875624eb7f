"""The spend-anomaly state a BudgetPolicy keeps in its status, and the outcome of reading the burn history.

Plain values and their pure ``status.spendAnomalies`` codec, in their own module so that the budget planner
(``modalscale.operator.budget.plan``) uses them without importing the Prometheus I/O of
``modalscale.operator.budget.history`` (where the history read and the burn-rate gauges live; its docstring says
why the alerted set lives in the status).
"""

from __future__ import annotations

from dataclasses import dataclass

SpendKey = tuple[str, str]
"""``(namespace, InferenceService name)`` of one priced service."""


@dataclass(frozen=True)
class HistoryRead:
    """Outcome of reading the history at start: ``ok`` False means hold (no anomaly decided), ``message`` says why."""

    ok: bool
    message: str


__all__ = ["HistoryRead", "SpendKey"]
