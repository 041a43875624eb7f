"""Condition types and CamelCase reasons that modalscale writes in ``status.conditions`` and Events, per kind.

Why a module: they were defined in seven places (``operator/reasons.py``, ``budget_plan.py``, ``autoscale_plan.py``,
``autoscale_model.py``, ``autoscale_observe.py``, ...), so one reason could be spelt two ways and nothing listed what
a kind reports. The operator modules import them from here; ``operator/conditions.py`` keeps ``upsert`` (the
``lastTransitionTime`` rule). A unit test fails when an operator module defines one of these strings itself.

Conventions (Kubernetes API conventions, STYLE C4): a type is a CamelCase adjective or past participle
(``Ready``, ``BudgetLimited``); a reason is a CamelCase word the status and message explain.
"""

from __future__ import annotations

from modalscale.api.errors import INVALID_SPEC as INVALID_SPEC

# ============================================================================================= InferenceService
# Condition types.
READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
SCALING_CONFLICT = "ScalingConflict"
BUDGET_LIMITED = "BudgetLimited"
PRICED = "Priced"
METRICS_AVAILABLE = "MetricsAvailable"
"""The autoscaler could read the metrics its mode needs."""
COST_MODEL_LOADED = "CostModelLoaded"
"""The service-time model of ``spec.model.costModelRef`` is loaded."""
ISVC_CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, SCALING_CONFLICT, BUDGET_LIMITED, PRICED)
"""The conditions the reconcile writes (the autoscaler adds ``MetricsAvailable`` and ``CostModelLoaded``)."""
AUTOSCALER_CONDITION_TYPES = (METRICS_AVAILABLE, COST_MODEL_LOADED)

# Reasons of Ready / Progressing / Degraded.
# INVALID_SPEC ("InvalidSpec") comes from modalscale.api.errors, the reason of every InvalidSpec error.
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
# Reasons of ScalingConflict.
NO_CONFLICT = "NoConflict"
EXTERNAL_SCALE = "ReplicasChangedExternally"
FOREIGN_AUTOSCALER = "ForeignAutoscaler"
SCALE_IGNORED_IN_MODE = "ScaleIgnoredInMode"
# Reasons of BudgetLimited.
NO_BUDGET_POLICY = "NoBudgetPolicy"
CAPPED_BY_BUDGET = "CappedByBudget"
WITHIN_BUDGET = "WithinBudget"
MOVED_TO_SPOT = "MovedToSpot"
"""BudgetLimited: a BudgetPolicy's SwitchToSpot runs the pods on Spot capacity."""
# Reasons of Priced: which source priced the service (the values of modalscale.costmodel.opencost.PriceSource).
PRICED_BY_OPENCOST = "OpenCost"
PRICED_BY_CATALOG = "Catalog"
CATALOG_FALLBACK = "CatalogFallback"
# Reasons of MetricsAvailable: a reading that cannot drive a decision, or drives it only partly.
PROMETHEUS_NOT_CONFIGURED = "PrometheusNotConfigured"
PROMETHEUS_UNREACHABLE = "PrometheusUnreachable"
NO_SCRAPE_TARGETS = "NoScrapeTargets"
SCRAPE_TARGETS_DOWN = "ScrapeTargetsDown"
NO_REQUEST_METRICS = "NoRequestMetrics"
INCOMPLETE_FEATURES = "IncompleteFeatureMetrics"
NO_SERVICE_METRICS = "NoServiceTimeMetrics"
PARTIAL_TARGETS = "PartialScrapeTargets"
NON_FINITE_METRICS = "NonFiniteMetrics"
METRICS_READ = "MetricsRead"
STALE_METRICS = "StaleMetrics"
# Reasons of CostModelLoaded.
NO_COST_MODEL_REF = "NoCostModelRef"
COST_MODEL_NOT_FOUND = "CostModelNotFound"
INVALID_COST_MODEL = "InvalidCostModel"
ARTIFACT_LOADED = "ArtifactLoaded"

# ================================================================================================= BudgetPolicy
# Condition types (READY is shared with InferenceService).
BUDGET_EXCEEDED = "BudgetExceeded"
ALERT_DELIVERED = "AlertDelivered"
SPOT_FALLBACK = "SpotFallback"
"""True while a service switched to Spot by this policy fell back to on-demand."""
SPEND_ANOMALY_HISTORY = "SpendAnomalyHistory"
"""True once the spend-anomaly history was read back from Prometheus after the operator started."""
BUDGET_CONDITION_TYPES = (READY, BUDGET_EXCEEDED, ALERT_DELIVERED, SPOT_FALLBACK, SPEND_ANOMALY_HISTORY)

# Reasons written by the operator; the budget planner's own reasons (WithinBudget, ThresholdCrossed,
# ForecastOverLimit, BudgetExceeded, GovernanceBlind, ...) pass through unchanged (modalscale.costmodel.budget.Reason).
EVALUATED = "Evaluated"
INVALID_STATUS = "InvalidStatus"
GOVERNANCE_BLIND = "GovernanceBlind"
NO_ALERT_SENT = "NoAlertSent"
DELIVERED = "Delivered"
DELIVERY_FAILED = "DeliveryFailed"
DELIVERY_ABANDONED = "DeliveryAbandoned"
SECRET_NOT_FOUND = "SecretNotFound"
SECRET_KEY_MISSING = "SecretKeyMissing"
SECRET_UNREADABLE = "SecretUnreadable"
BUDGET_ENFORCED = "BudgetEnforced"
ENFORCEMENT_LIFTED = "EnforcementLifted"
SPOT_PENDING_TIMEOUT = "SpotPendingTimeout"
SPOT_AVAILABLE = "SpotAvailable"
NO_SPOT_SWITCH = "NoSpotSwitch"
SWITCHED_TO_SPOT = "SwitchedToSpot"
SPOT_LIFTED = "SpotLifted"
HISTORY_READ = "HistoryRead"
HISTORY_UNAVAILABLE = "HistoryUnavailable"

__all__ = sorted(name for name in dir() if name.isupper())
