"""Condition types and CamelCase reasons that modalscale writes in ``status.conditions``, Events and status, per kind.

Why a module: they were defined in seven places (``operator/reasons.py``, ``budget_plan.py``, ``autoscale_plan.py``,
``autoscale_model.py``, ``autoscale_observe.py``, the autoscaler's and the budget planner's own vocabularies, the
alert sender's and outbox's ...), so one reason could be spelt two ways and nothing listed what a kind reports.
Every other module imports them from here: the autoscaler's decision reasons are :class:`ScalingReason`
(re-exported as ``modalscale.autoscaler.policy.Reason``), the budget planner's, the alert sender's and the outbox's
are constants below, and enums whose values double as reasons (``AlertKind``, ``PriceSource``) take their values
from here. ``operator/conditions.py`` keeps ``upsert`` (the ``lastTransitionTime`` rule). A unit test
(``tests/unit/api/test_api_conditions.py``) fails when another module defines a reason itself.

Conventions (Kubernetes API conventions, STYLE C4): a type is a CamelCase adjective or past participle
(``Ready``, ``BudgetLimited``); a reason is a CamelCase word the status and message explain.
"""

from __future__ import annotations

import enum

INVALID_SPEC = "InvalidSpec"
"""The default reason of every ``modalscale.api.errors.InvalidSpec``: the spec cannot be acted on
(``Ready=False/InvalidSpec``)."""

# ============================================================================================= Deployment (read)
DEPLOYMENT_PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
"""The reason of a Deployment's own ``Progressing=False`` once its rollout is past ``progressDeadlineSeconds`` (the
deployment controller's; ``kubectl rollout status`` calls it an error). The type is :data:`PROGRESSING`, the same
name as this project's; the InferenceService's ``Progressing`` says it too (False) while its Deployment does."""

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
GATEWAY_READY = "GatewayReady"
"""With ``spec.gateway.enabled``: at least one gateway pod is ready (its EndpointSlice watch has synced)."""
"""The service-time model of ``spec.model.costModelRef`` is loaded."""
CHILD_CONFLICT = "ChildConflict"
"""True while an object of one of this service's child names is not its own (``operator.isvc.plan.child_ownership``:
no controller owner reference of this InferenceService's uid, and not an orphaned child with the operator's labels):
the operator neither writes nor deletes it. Written once a conflict is found; False (:data:`NO_CONFLICT`) after."""
ISVC_CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, SCALING_CONFLICT, BUDGET_LIMITED, PRICED)
"""The conditions the reconcile writes (the autoscaler adds ``MetricsAvailable`` and ``CostModelLoaded``)."""
AUTOSCALER_CONDITION_TYPES = (METRICS_AVAILABLE, COST_MODEL_LOADED)

# Reasons of Ready / Progressing / Degraded (and INVALID_SPEC above).
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
FAILED_CREATE = "FailedCreate"
"""Degraded / Ready=False: the Deployment's ``ReplicaFailure`` condition: its ReplicaSet cannot create pods (a
ResourceQuota, an admission webhook, a pod spec the API server refuses): no pod exists to report anything."""
CPU_OVERSUBSCRIBED = "CPUOversubscribed"
"""Warning Event (not a condition, not a refusal): ``instanceCount x intraOpThreads`` exceeds the replica's CPU."""
CHILD_NOT_DELETED = "ChildNotDeleted"
"""Warning Event (not a condition): a child the plan no longer wants is an orphan with the operator's labels (no
controller owner reference) or has lost the managed-by label, so it is left, not deleted. An object of a child's name
that is not this service's at all is reported by :data:`CHILD_CONFLICT` instead, whether the plan would write or
delete it."""
FOREIGN_OBJECT = "ForeignObject"
"""ChildConflict True (and Ready False where it holds the replicas or their Service): an object of a child's name
belongs to someone else (a user, another InferenceService)."""
# Reasons of ScalingConflict (NO_CONFLICT: also ChildConflict False).
NO_CONFLICT = "NoConflict"
EXTERNAL_SCALE = "ReplicasChangedExternally"
FOREIGN_AUTOSCALER = "ForeignAutoscaler"
SCALE_IGNORED_IN_MODE = "ScaleIgnoredInMode"
# Reasons of GatewayReady (AVAILABLE, WAITING_FOR_REPLICAS and CREATING above are shared with Ready; with no gateway
# pod ready, a failing gateway pod's UNSCHEDULABLE, CRASH_LOOP, IMAGE_PULL, PODS_FAILING or its Deployment's
# FAILED_CREATE, as Ready has the replicas').
GATEWAY_UNAVAILABLE = "GatewayUnavailable"
# The staged layout (spec.stages): ImageEncoderReady and the image encoder pool's reasons in status.stages.
IMAGE_ENCODER_READY = "ImageEncoderReady"
"""With ``spec.stages``: the image encoder pool has a ready replica (or is meant to run none)."""
IMAGE_ENCODER_UNAVAILABLE = "ImageEncoderUnavailable"
"""ImageEncoderReady False (and Ready False while the front pool calls it): no encoder replica is ready."""
NOT_AUTOSCALED = "NotAutoscaled"
"""``status.stages[image-encoder].reason``: Fixed mode, so the pool runs ``minReplicas`` (in Predictive and Utilization
mode its own autoscaler sizes it)."""
MIN_REPLICAS = "MinReplicas"
"""A replica count held at ``minReplicas`` before the autoscaler's first decision (the front's, or
``status.stages[image-encoder].reason`` before the pool's)."""
AUTOSCALER_DECISION = "AutoscalerDecision"
"""A replica count from the autoscaler's record when the record holds no reason of its own."""
FRONT_AT_ZERO = "FrontAtZero"
"""``status.stages[image-encoder].reason``: the front pool is at 0 replicas, so the encoder pool is too."""
# Reasons of BudgetLimited.
NO_BUDGET_POLICY = "NoBudgetPolicy"
CAPPED_BY_BUDGET = "CappedByBudget"
BUDGET_CAP_UNREADABLE = "BudgetCapUnreadable"
"""A cap annotation does not decode: the replicas hold at their current count (``BudgetLimited``)."""
BUDGET_ANNOTATION_UNREADABLE = "BudgetAnnotationUnreadable"
"""A Spot or tenant-rejection annotation does not decode: what was applied last holds (``BudgetLimited``)."""
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
NEGATIVE_RATE = "NegativeRate"
"""A counter's rate read negative (a counter read without reset correction): missing data, never zero."""
PARTIAL_WINDOW = "PartialMetricsWindow"
"""The metrics window starts in a gap of Prometheus' data (Prometheus was down or not scraping, or a target did not
answer): every rate over it reads low, so none is read until the window lies after the gap."""
UNKNOWN_SAMPLE_TIME = "UnknownSampleTime"
"""A scrape target that answered has no readable scrape time (``timestamp(up)`` missing, not finite, or not a time
in seconds): its data are of unknown age, so none is read (a sample an hour old would read fresh)."""
METRICS_CONTRADICT = "MetricsContradict"
"""Two demand signals contradict each other (one request counter reads 0 while another, or Triton's compute time,
says the service is serving): what the idle one feeds is unknown, and the policy holds on it."""
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
SPEND_ANOMALY_DETECTION = "SpendAnomalyDetection"
"""True while every priced service has enough burn-rate history for an anomaly decision (written once a service is
priced); False names the services without, the samples they hold and need, and when detection starts; Unknown once
no selected service has a burn rate (or none is selected) any more."""
BUDGET_CONDITION_TYPES = (READY, BUDGET_EXCEEDED, ALERT_DELIVERED, SPOT_FALLBACK, SPEND_ANOMALY_HISTORY,
                          SPEND_ANOMALY_DETECTION)

# Reasons of BudgetExceeded, decided by the budget planner (modalscale.costmodel.budget.plan_budget; WITHIN_BUDGET
# above, and BUDGET_EXCEEDED, the condition's own name, when spent >= limit).
THRESHOLD_CROSSED = "ThresholdCrossed"
"""Also the Event reason of a threshold alert (``AlertKind.THRESHOLD_CROSSED``)."""
THRESHOLD_AHEAD = "ThresholdAhead"
FORECAST_OVER_LIMIT = "ForecastOverLimit"
GOVERNANCE_BLIND = "GovernanceBlind"
"""Part of the spend cannot be priced (Ready=False, BudgetExceeded=Unknown; also the Event reason of that alert)."""
# Event reasons of the other alerts posted on a BudgetPolicy (modalscale.costmodel.budget.AlertKind).
FORECAST_EXCEEDED = "ForecastExceeded"
RECOVERED = "Recovered"
SPEND_ANOMALY = "SpendAnomaly"
# Reasons written by the operator.
EVALUATED = "Evaluated"
NO_SERVICES_SELECTED = "NoServicesSelected"
"""Ready=True, but the selector matches no InferenceService: nothing is counted or enforced (also an Event)."""
NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
"""Ready=False: ``spec.selector.namespaces`` names another namespace and the policy's namespace is not in
``MODALSCALE_BUDGET_ADMIN_NAMESPACES``; nothing there is counted or enforced (the trust boundary)."""
INVALID_STATUS = "InvalidStatus"
NO_ALERT_SENT = "NoAlertSent"
NO_NOTIFICATIONS = "NoNotifications"
"""AlertDelivered=Unknown: ``spec.notifications`` is empty and nothing is pending: alerts are Events and
``status.thresholds`` only, so there is no delivery to report (an earlier ``DeliveryAbandoned`` no longer holds it
False: no later delivery could ever succeed)."""
DELIVERY_FAILED = "DeliveryFailed"
DELIVERY_ABANDONED = "DeliveryAbandoned"
# Reasons of one delivery (modalscale.notify: DeliveryResult.reason, the outbox's lastReason, and AlertDelivered's
# reason while an entry fails).
DELIVERED = "Delivered"
REJECTED_BY_PLATFORM = "RejectedByPlatform"
RATE_LIMITED = "RateLimited"
"""HTTP 429, or a platform's rate-limit code inside an HTTP 200."""
CLIENT_RATE_LIMITED = "ClientRateLimited"
"""The sender's own per-webhook limit left no slot within the round's budget (nothing was sent)."""
SERVER_ERROR = "ServerError"
TIMED_OUT = "TimedOut"
CONNECTION_FAILED = "ConnectionFailed"
INVALID_URL = "InvalidURL"
INTERNAL_ERROR = "InternalError"
# Why an outbox entry was abandoned (modalscale.costmodel.outbox.Abandoned.why; reported as DELIVERY_ABANDONED).
PERIOD_ENDED = "PeriodEnded"
NOTIFICATION_REMOVED = "NotificationRemoved"
OUTBOX_FULL = "OutboxFull"
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
TENANTS_REJECTED = "TenantsRejected"
TENANTS_ADMITTED = "TenantsAdmitted"
HISTORY_READ = "HistoryRead"
HISTORY_UNAVAILABLE = "HistoryUnavailable"
DETECTING = "Detecting"
"""SpendAnomalyDetection True: every priced service's newest sample was scored against a baseline."""
INSUFFICIENT_HISTORY = "InsufficientHistory"
"""SpendAnomalyDetection False: a priced service has too few burn-rate samples for a baseline (nothing decided)."""
NOTHING_PRICED = "NothingPriced"
"""SpendAnomalyDetection Unknown: services are selected but none has a burn rate now (no price, or its pods could
not be listed), so nothing is scored (``NoServicesSelected`` when none is selected any more)."""


# ============================================================================================= the autoscaler
class ScalingReason(enum.StrEnum):
    """Why an autoscaler decision came out as it did (``modalscale.autoscaler.policy.Reason``): the decision's
    reason in ``status.autoscaler``, the Event reason of a scale, and the InferenceService's ``Scaled`` reason."""

    SCALE_UP_FOR_SLO = "ScaleUpForSLO"
    SCALE_UP_FOR_BACKLOG = "ScaleUpForBacklog"
    SCALE_UP_FOR_OBSERVED_QUEUE = "ScaleUpForObservedQueue"
    SCALE_UP_FOR_BURST = "ScaleUpForBurst"
    SCALE_UP_FOR_PANIC = "ScaleUpForPanic"
    SCALE_UP_FOR_FORECAST = "ScaleUpForForecast"
    SCALE_DOWN_FOR_FORECAST = "ScaleDownForForecast"
    SCALE_DOWN_IDLE = "ScaleDownIdle"
    SCALE_UP_FOR_UTILIZATION = "ScaleUpForUtilization"
    SCALE_DOWN_FOR_UTILIZATION = "ScaleDownForUtilization"
    SLO_UNATTAINABLE = "SLOUnattainable"
    STEADY = "Steady"
    WITHIN_TOLERANCE = "WithinTolerance"
    SCALE_UP_STABILIZED = "ScaleUpStabilized"
    SCALE_DOWN_STABILIZED = "ScaleDownStabilized"
    LIMITED_BY_MAX_STEP = "LimitedByMaxStep"
    BOUNDED_BY_MIN = "BoundedByMin"
    BOUNDED_BY_MAX = "BoundedByMax"
    CAPPED_BY_BUDGET = "CappedByBudget"
    HELD_NO_METRICS = "HeldNoMetrics"
    HELD_STALE_METRICS = "HeldStaleMetrics"
    HELD_PARTIAL_METRICS = "HeldPartialMetrics"
    HELD_FOR_IMAGE_ENCODER = "HeldForImageEncoder"
    """A staged front's queue rules held: its requests wait in the image encoder pool's queue, which more front
    replicas cannot shorten (``modalscale.autoscaler.policy``)."""
    FIXED_REPLICAS = "FixedReplicas"
    SCALE_TO_ZERO = "ScaleDownToZero"
    """No request for ``scaleToZeroAfterSeconds`` (metrics read all along): 0 replicas; the gateway holds requests."""
    IDLE_AT_ZERO = "IdleAtZero"
    """At 0 replicas, waiting for the gateway's activation request (no replica, so no metric to decide on)."""
    ACTIVATED = "Activated"
    """The gateway asked for a replica at 0 (annotation ``modalscale.io/activation-requested-at``): 0 -> 1 at once."""


__all__ = sorted([name for name in dir() if name.isupper()] + ["ScalingReason"])
