"""Kubernetes-style conditions: one pure ``upsert`` owns ``lastTransitionTime``.

Conditions follow metav1.Condition: ``{type, status, observedGeneration, lastTransitionTime, reason, message}``,
a list-map keyed by ``type``. Since a merge patch replaces lists, ``conditions`` is always written whole (each
kind's status codec writes only what changed: ``modalscale.api.isvc_status``, ``modalscale.costmodel.budget.status``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from modalscale.api.status import ConditionStatus

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


@dataclass(frozen=True)
class Condition:
    """One condition as the planner wants it (the transition time is derived, never chosen)."""

    type: str
    status: str
    reason: str
    message: str

    def __post_init__(self) -> None:
        if self.status not in (TRUE, FALSE, UNKNOWN):
            raise ValueError(f"condition {self.type}: status must be True, False or Unknown, got {self.status!r}")


def rfc3339(now: dt.datetime) -> str:
    """``now`` (timezone-aware) as RFC 3339 UTC with second precision, as Kubernetes stores times."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def upsert(current: Sequence[Mapping[str, Any]] | None, wanted: list[Condition], generation: int,
           now: dt.datetime) -> list[ConditionStatus]:
    """Merge ``wanted`` into ``current``; ``lastTransitionTime`` moves only when a condition's status flips.

    Conditions of other types in ``current`` are kept, in their order; new types are appended.

    Returns:
        The full new list (shape of ``status.conditions``).
    """
    # The stored conditions, copied: the CRD requires type, status, lastTransitionTime, reason and message.
    by_type = {c.get("type"): cast(ConditionStatus, dict(c)) for c in (current or [])}
    order = [c.get("type") for c in (current or [])]
    for cond in wanted:
        old = by_type.get(cond.type)
        flipped = old is None or old.get("status") != cond.status
        by_type[cond.type] = {
            "type": cond.type,
            "status": cond.status,
            "observedGeneration": generation,
            "lastTransitionTime": rfc3339(now) if old is None or flipped else old["lastTransitionTime"],
            "reason": cond.reason,
            "message": cond.message[:32768],
        }
        if cond.type not in order:
            order.append(cond.type)
    return [by_type[t] for t in order]


def get(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` or None."""
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def transitions(before: Sequence[Mapping[str, Any]] | None,
                after: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Conditions of ``after`` whose status differs from ``before`` (or that are new): what Events report."""
    old = {c.get("type"): c.get("status") for c in before or []}
    return [c for c in after if old.get(c["type"]) != c["status"]]
