"""Spot capacity: how a pod is asked onto Spot nodes, and how a node says which capacity type it is.

Why a module: the ``SwitchToSpot`` budget action places pods (the InferenceService's Deployment) and the ledger
prices each pod by the tier its node ran it at; both read the same well-known labels from here. Pure.

* **Placement** uses Karpenter's well-known label and a taint of the same key:
  nodeSelector ``karpenter.sh/capacity-type: spot`` and a toleration of the taint
  ``karpenter.sh/capacity-type=spot:NoSchedule`` (Karpenter sets the label on every node it launches; the taint is
  the usual way to keep other workloads off Spot nodes: a Karpenter ``NodePool`` with ``spec.template.spec.taints``,
  or ``kubectl taint`` elsewhere). ``modalscale cluster`` makes some KWOK GPU nodes such Spot nodes.
* **A node's capacity type** (:func:`node_capacity_tier`) is read from the first of these labels it carries:
  Karpenter ``karpenter.sh/capacity-type`` (``spot``/``on-demand``/``reserved``), EKS
  ``eks.amazonaws.com/capacityType`` (``SPOT``/``ON_DEMAND``), GKE ``cloud.google.com/gke-spot`` or
  ``cloud.google.com/gke-preemptible`` (``"true"``), AKS ``kubernetes.azure.com/scalesetpriority``
  (``spot``/``regular``). A node with none of them says nothing (None): the service's own tier applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SPOT_TIER = "Spot"
ON_DEMAND_TIER = "OnDemand"

CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
"""Karpenter's well-known node label; ``spot`` on Spot nodes. Also the key of the Spot taint."""
SPOT_LABEL_VALUE = "spot"
SPOT_NODE_SELECTOR: dict[str, str] = {CAPACITY_TYPE_LABEL: SPOT_LABEL_VALUE}
"""Added to the pods' ``nodeSelector`` while a ``SwitchToSpot`` holds the service."""
SPOT_TAINT: dict[str, str] = {"key": CAPACITY_TYPE_LABEL, "value": SPOT_LABEL_VALUE, "effect": "NoSchedule"}
"""The taint Spot nodes carry (in ``modalscale cluster``; recommended in a Karpenter NodePool)."""
SPOT_TOLERATION: dict[str, str] = {"key": CAPACITY_TYPE_LABEL, "operator": "Equal", "value": SPOT_LABEL_VALUE,
                                   "effect": "NoSchedule"}
"""Added to the pods' ``tolerations`` while a ``SwitchToSpot`` holds the service."""

_NODE_LABELS: tuple[tuple[str, dict[str, str]], ...] = (
    (CAPACITY_TYPE_LABEL, {"spot": SPOT_TIER, "on-demand": ON_DEMAND_TIER, "reserved": ON_DEMAND_TIER}),
    ("eks.amazonaws.com/capacityType", {"spot": SPOT_TIER, "on_demand": ON_DEMAND_TIER}),
    ("cloud.google.com/gke-spot", {"true": SPOT_TIER}),
    ("cloud.google.com/gke-preemptible", {"true": SPOT_TIER}),
    ("kubernetes.azure.com/scalesetpriority", {"spot": SPOT_TIER, "regular": ON_DEMAND_TIER}),
)


def node_capacity_tier(labels: Mapping[str, str] | None) -> str | None:
    """``"Spot"``, ``"OnDemand"`` or None (the node's labels do not say) from a node's labels.

    Values are compared case-insensitively (EKS writes ``SPOT``). Karpenter's ``reserved`` counts as on-demand
    (the catalog has no reserved tier).
    """
    for key, values in _NODE_LABELS:
        value = (labels or {}).get(key)
        if value is not None:
            tier = values.get(str(value).strip().lower())
            if tier is not None:
                return tier
    return None


def pod_requires_spot(pod: Mapping[str, Any]) -> bool:
    """True when the pod's ``nodeSelector`` asks for a Spot node (:data:`SPOT_NODE_SELECTOR`)."""
    selector = ((pod.get("spec") or {}).get("nodeSelector")) or {}
    return bool(selector.get(CAPACITY_TYPE_LABEL) == SPOT_LABEL_VALUE)


def pod_tier(pod: Mapping[str, Any], node_labels: Mapping[str, str] | None) -> str | None:
    """The tier a bound pod runs at: its node's (:func:`node_capacity_tier`) when the node says; else Spot when
    the pod asked for a Spot node (the scheduler placed it on one: used when nodes cannot be read); else None
    (the service's own ``spec.pricing.tier``)."""
    tier = node_capacity_tier(node_labels)
    if tier is not None:
        return tier
    return SPOT_TIER if pod_requires_spot(pod) else None


__all__ = [
    "CAPACITY_TYPE_LABEL", "ON_DEMAND_TIER", "SPOT_LABEL_VALUE", "SPOT_NODE_SELECTOR", "SPOT_TAINT", "SPOT_TIER",
    "SPOT_TOLERATION", "node_capacity_tier", "pod_requires_spot", "pod_tier",
]
