"""Condition types and CamelCase reasons used in status and Events, in one place."""

from __future__ import annotations

# Condition types of an InferenceService.
READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
SCALING_CONFLICT = "ScalingConflict"
BUDGET_LIMITED = "BudgetLimited"
PRICED = "Priced"
ISVC_CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, SCALING_CONFLICT, BUDGET_LIMITED, PRICED)

# Reasons.
INVALID_SPEC = "InvalidSpec"
MODEL_NOT_FOUND = "ModelNotFound"
UNKNOWN_GPU_PRICE = "UnknownGPUPrice"
AVAILABLE = "MinimumReplicasAvailable"
SCALED_TO_ZERO = "ScaledToZero"
WAITING_FOR_REPLICAS = "WaitingForReplicas"
UNSCHEDULABLE = "Unschedulable"
CRASH_LOOP = "CrashLoopBackOff"
IMAGE_PULL = "ImagePullError"
CONTAINERS_NOT_READY = "ContainersNotReady"
ROLLING_OUT = "RollingOut"
ROLLOUT_COMPLETE = "RolloutComplete"
CREATING = "Creating"
HEALTHY = "Healthy"
PODS_FAILING = "PodsFailing"
NO_CONFLICT = "NoConflict"
EXTERNAL_SCALE = "ReplicasChangedExternally"
FOREIGN_AUTOSCALER = "ForeignAutoscaler"
SCALE_IGNORED_IN_MODE = "ScaleIgnoredInMode"
NO_BUDGET_POLICY = "NoBudgetPolicy"
CAPPED_BY_BUDGET = "CappedByBudget"
WITHIN_BUDGET = "WithinBudget"
MOVED_TO_SPOT = "MovedToSpot"
"""BudgetLimited: a BudgetPolicy's SwitchToSpot runs the pods on Spot capacity."""
DELIVERY_FAILED = "DeliveryFailed"
DELIVERY_ABANDONED = "DeliveryAbandoned"

# Reasons of Priced: which source priced the service (the values of modalscale.costmodel.opencost.PriceSource).
PRICED_BY_OPENCOST = "OpenCost"
PRICED_BY_CATALOG = "Catalog"
CATALOG_FALLBACK = "CatalogFallback"
