"""The chaos tests' independent spend meter (issue 21): each pod's own run x a price, from the pods' own records,
never from the operator's ledger it is compared with."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any


def pod_lifetime_usd(pods: list[Any], at: dt.datetime, usd_per_hour: Decimal) -> Decimal:
    """Each pod's run from ``status.startTime`` to ``at`` (s) x ``usd_per_hour`` / 3600, summed (USD).

    Args:
        pods: ``V1Pod`` objects (a pod not started yet counts 0 s).
        at: The end of every run (the ledger's ``observedTime``), timezone-aware.
        usd_per_hour: One pod's price, USD per hour.
    """
    return sum((usd_per_hour * Decimal(str(max(0.0, (at - p.status.start_time).total_seconds()))) / 3600
                for p in pods if p.status.start_time is not None), Decimal(0))


def pod_usd_per_hour(pod: Any, tier: str = "OnDemand") -> Decimal:
    """A pod's catalog price at ``tier``: its containers' CPU and memory requests summed (a pod without GPUs, as a
    CPU-runtime replica or a gateway pod), USD per hour."""
    from kubernetes.utils.quantity import parse_quantity

    from modalscale.costmodel.catalog import ReplicaResources, load_catalog

    requests = [c.resources.requests or {} for c in pod.spec.containers if c.resources]
    cpu = sum((Decimal(parse_quantity(r.get("cpu", "0"))) for r in requests), Decimal(0))
    memory = int(sum((Decimal(parse_quantity(r.get("memory", "0"))) for r in requests), Decimal(0)))
    return load_catalog().price_replica(ReplicaResources.from_quantities(cpu, memory), tier)


def pods_usd(pods: list[Any], at: dt.datetime) -> Decimal:
    """Each pod's run from ``status.startTime`` to ``at`` x its own :func:`pod_usd_per_hour` / 3600, summed (USD);
    for pods that all still run at ``at``."""
    return sum((pod_usd_per_hour(p) * Decimal(str(max(0.0, (at - p.status.start_time).total_seconds()))) / 3600
                for p in pods if p.status.start_time is not None), Decimal(0))


def bind_to_start_usd(pods: list[Any]) -> Decimal:
    """What the ledger may charge above :func:`pods_usd`, by its documented upper bound
    (``operator/budget/plan.py`` ``pod_start``): an evaluation that lists a pod bound to its node before its kubelet
    wrote ``status.startTime`` charges it from the binding (``PodScheduled``), else from its creation, and that
    charge is not taken back; so each pod's ``startTime`` minus its binding x its price, summed (USD)."""
    total = Decimal(0)
    for p in pods:
        start, earliest = p.status.start_time, bound_at(p)
        if start is None:
            continue
        lag_s = max(0.0, (start - earliest).total_seconds()) if earliest is not None else 0.0
        total += pod_usd_per_hour(p) * Decimal(str(lag_s)) / 3600
    return total


def bound_at(pod: Any) -> dt.datetime | None:
    """When a ``V1Pod`` was bound to its node as the ledger reads it: its ``PodScheduled`` condition's turn to True,
    else its creation (None when neither is known)."""
    bound = next((c.last_transition_time for c in pod.status.conditions or []
                  if c.type == "PodScheduled" and c.status == "True" and c.last_transition_time), None)
    return bound or pod.metadata.creation_timestamp
