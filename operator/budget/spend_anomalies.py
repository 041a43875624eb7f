"""The spend-anomaly state a BudgetPolicy keeps in its status, and the outcome of reading the burn history.

Plain values and their pure ``status.spendAnomalies`` codec, in their own module so that the budget planner
(``modalscale.operator.budget.plan``) uses them without importing the Prometheus I/O of
``modalscale.operator.budget.history`` (where the history read and the burn-rate gauges live; its docstring says
why the alerted set lives in the status).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modalscale.api.status import SpendAnomalyStatus
from modalscale.costmodel.anomaly import AnomalyState
from modalscale.costmodel.ledger import LedgerFormatError, floor_to_second, format_time, parse_time

SpendKey = tuple[str, str]
"""``(namespace, InferenceService name)`` of one priced service."""


@dataclass(frozen=True)
class HistoryRead:
    """Outcome of reading the history at start: ``ok`` False means hold (no anomaly decided), ``message`` says why."""

    ok: bool
    message: str


def anomaly_state_from_status(status: Mapping[str, Any]) -> AnomalyState:
    """The services in an anomaly now, from ``status.spendAnomalies`` (``[]`` or absent: none).

    Raises:
        modalscale.costmodel.ledger.LedgerFormatError: An item without ``namespace``, ``name`` or an RFC 3339
            ``since`` (the message names the field; the caller reports the status as unreadable).
    """
    items = status.get("spendAnomalies") or []
    if not isinstance(items, list):
        raise LedgerFormatError(f"status.spendAnomalies: expected a list, got {type(items).__name__}")
    active: dict[SpendKey, dt.datetime] = {}
    calm: dict[SpendKey, dt.datetime] = {}
    for i, item in enumerate(items):
        path = f"status.spendAnomalies[{i}]"
        if not isinstance(item, Mapping) or not item.get("namespace") or not item.get("name"):
            raise LedgerFormatError(f"{path}: expected an object with namespace, name and since")
        key = (str(item["namespace"]), str(item["name"]))
        active[key] = parse_time(item.get("since"), f"{path}.since")
        if item.get("calmSince"):
            calm[key] = parse_time(item["calmSince"], f"{path}.calmSince")
    return AnomalyState(active, calm)


def anomaly_state_to_status(state: AnomalyState) -> list[SpendAnomalyStatus]:
    """``status.spendAnomalies``: one item per service in an anomaly, sorted (RFC 3339 UTC, whole seconds)."""
    out: list[SpendAnomalyStatus] = []
    for key in sorted(state.active):
        item: SpendAnomalyStatus = {"namespace": key[0], "name": key[1],
                                    "since": format_time(floor_to_second(state.active[key]))}
        if key in state.calm_since:
            item["calmSince"] = format_time(floor_to_second(state.calm_since[key]))
        out.append(item)
    return out


__all__ = ["HistoryRead", "SpendKey", "anomaly_state_from_status", "anomaly_state_to_status"]
