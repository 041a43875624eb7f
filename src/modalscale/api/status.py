"""The ``status`` of each kind as the operator writes it: one TypedDict per kind, field for field the CRD's schema.

``InferenceServiceStatus`` and ``BudgetPolicyStatus`` (with the objects inside them) name every key, its JSON type
and whether the CRD requires it; the planners build their status as these types, so mypy checks every key they
write against the schema. A unit test (``tests/unit/api/test_api_status.py``) fails when a TypedDict and
``crds/*.yaml`` differ (keys or required keys), so they cannot drift apart.

Shapes are the JSON ones (camelCase keys; times RFC 3339 UTC strings; money decimal strings, USD). These are types
only: building a status as one changes nothing in what is written. An InferenceService's status is read and written
only by ``modalscale.api.isvc_status`` (one typed value, ``read_isvc_status`` / ``write_isvc_status``), a
BudgetPolicy's only by ``modalscale.costmodel.budget.status`` (``read_budget_status`` / ``write_budget_status``,
over the cost model's value types): a read never raises, what does not parse is reset or named.

No ``from __future__ import annotations`` here: ``Required``/``NotRequired`` are read at run time
(``__required_keys__``, used by the schema test), which string annotations defeat on Python 3.11.
"""

from typing import NotRequired, TypedDict


class ConditionStatus(TypedDict):
    """One item of ``status.conditions`` (metav1.Condition), both kinds."""

    type: str
    status: str  # ``True``, ``False`` or ``Unknown``.
    observedGeneration: NotRequired[int]
    lastTransitionTime: str
    reason: str
    message: str


# =============================================================================================== InferenceService
# "from" is a Python keyword: the functional form.
ScalingHistoryEntry = TypedDict("ScalingHistoryEntry", {
    "time": str,
    "from": int,
    "to": int,
    "reason": str,
    "message": NotRequired[str],
})
"""One item of ``status.scalingHistory``: a change of the Deployment's replicas, ``from`` -> ``to``."""


class RecommendationStatus(TypedDict):
    """One item of ``status.autoscaler.state.recommendations``: a past recommendation, kept for stabilization."""

    time: str
    replicas: int


class AutoscalerStateStatus(TypedDict, total=False):
    """``status.autoscaler.state``: the scaler state carried between decisions (``ScalerState``)."""

    recommendations: list[RecommendationStatus]
    serviceScale: float  # Calibration of the service-time model (observed / predicted), > 0.
    latencyScale: float
    lastChangeTime: str
    inFlightHistory: list[float]
    inFlightTimes: list[str]  # When each of inFlightHistory was sampled (RFC 3339, whole seconds).
    idleSince: str  # Start of the unbroken run of idle decisions that scale to zero (minReplicas 0).
    scaledToZeroTime: str  # When the autoscaler last scaled to 0; a newer activation annotation scales to 1.


class AutoscalerStatus(TypedDict, total=False):
    """``status.autoscaler``: the last decision of the autoscaler."""

    mode: str  # The mode actually used: ``Predictive``, ``Utilization`` or ``Fixed``.
    valid: bool
    reason: str
    message: str
    lastDecisionTime: str
    metricsAvailable: bool
    features: dict[str, float]  # The numbers behind the decision (at most 32, finite).
    state: AutoscalerStateStatus


class GatewayStatus(TypedDict, total=False):
    """``status.gateway``: the request gateway's Deployment, when ``spec.gateway.enabled``."""

    replicas: int
    readyReplicas: int
    replicasUrl: str  # In-cluster HTTP URL of the Service <name>-replicas (bypassing the gateway).


class StageAutoscalerStatus(AutoscalerStatus, total=False):
    """``status.stages[image-encoder].autoscaler``: the image encoder pool's own autoscaler's last decision."""

    desiredReplicas: int  # The pool's count of its last valid decision, within the stage's min/max replicas.


class StageStatus(TypedDict):
    """One item of ``status.stages`` (with ``spec.stages``): one stage's pool, ``front`` or ``image-encoder``."""

    name: str
    replicas: NotRequired[int]
    readyReplicas: NotRequired[int]
    desiredReplicas: NotRequired[int]
    reason: NotRequired[str]
    message: NotRequired[str]
    address: NotRequired[str]  # image-encoder: host:port the front pool calls (the Service's ClusterIP).
    autoscaler: NotRequired[StageAutoscalerStatus]  # image-encoder, autoscaled modes: its autoscaler's decision.


class InferenceServiceStatus(TypedDict, total=False):
    """``status`` of an InferenceService."""

    observedGeneration: int
    replicas: int
    readyReplicas: int
    desiredReplicas: int
    selector: str
    url: str
    costUSDPerHour: str  # Running replicas x the replica price + Ready gateway pods x theirs, USD/h (4 places).
    lastScaleReason: str
    scalingHistory: list[ScalingHistoryEntry]
    autoscaler: AutoscalerStatus
    gateway: GatewayStatus | None  # None: the merge patch's delete (the gateway was turned off).
    stages: list[StageStatus] | None  # None: the merge patch's delete (spec.stages was removed).
    conditions: list[ConditionStatus]


# ================================================================================================== BudgetPolicy
class UnheardPodStatus(TypedDict):
    """One item of ``status.ledger.services[].unheardPods``: a pod charged only to its silent node's last heartbeat."""

    name: str
    chargedUntil: str  # RFC 3339 UTC.


class LedgerServiceStatus(TypedDict):
    """One item of ``status.ledger.services``: one service's spend this period."""

    namespace: str
    name: str
    replicas: NotRequired[int]
    costUSDPerHour: NotRequired[str]
    spent: NotRequired[str]  # USD (decimal string).
    unheardPods: NotRequired[list[UnheardPodStatus]]
    lateBoundPods: NotRequired[list[str]]  # Pods counted in replicas though bound in observedTime's second or after.
    uncountedPods: NotRequired[list[str]]  # Pods listed at observedTime but not counted in replicas.


class LedgerStatus(TypedDict, total=False):
    """``status.ledger``: what the period cost so far, per service, up to ``observedTime``."""

    observedTime: str
    services: list[LedgerServiceStatus]


class ThresholdStatus(TypedDict):
    """One item of ``status.thresholds``: the de-duplication state of a threshold (or of the forecast)."""

    percent: int
    crossed: NotRequired[bool]
    lastAlertTime: NotRequired[str]
    alertedPeriodStart: NotRequired[str]
    forecast: NotRequired[bool]


class EnforcedServiceStatus(TypedDict):
    """One item of ``status.enforcedServices``: a service a cap holds."""

    namespace: str
    name: str
    action: str  # ``CapReplicas``, ``ScaleDown`` or ``ScaleToZero``.
    maxReplicas: NotRequired[int]
    since: NotRequired[str]
    dryRun: NotRequired[bool]
    message: NotRequired[str]  # What runs under the cap (a staged service under a cap of 1: 1 + 1).


class SpotServiceStatus(TypedDict):
    """One item of ``status.spotServices``: a service a ``SwitchToSpot`` action holds this period."""

    namespace: str
    name: str
    thresholdPercent: int
    state: str  # ``Spot`` or ``OnDemandFallback``.
    since: str
    fallbackTime: NotRequired[str]
    dryRun: NotRequired[bool]
    message: NotRequired[str]


class RejectedTenantStatus(TypedDict):
    """One item of ``status.rejectedTenants``: a (service, tenant) pair a ``Reject`` action refuses this period."""

    namespace: str
    name: str
    tenant: str
    thresholdPercent: int
    since: str
    until: str
    dryRun: NotRequired[bool]


class SpendAnomalyStatus(TypedDict):
    """One item of ``status.spendAnomalies``: a service whose burn rate is in an anomaly."""

    namespace: str
    name: str
    since: str
    calmSince: NotRequired[str]


class ResolvedAlertStatus(TypedDict):
    """One item of ``status.pendingAlerts[].resolves``: the alert a ``Recovered`` alert resolves."""

    kind: str
    thresholdPercent: NotRequired[int]
    startsAt: str
    period: NotRequired[str]


class AlertFactStatus(TypedDict):
    """One item of ``status.pendingAlerts[].facts``."""

    label: str
    value: str


class PendingAlertStatus(TypedDict):
    """One item of ``status.pendingAlerts`` (the outbox): an alert not yet accepted by one notification target."""

    notification: str
    target: NotRequired[str]
    kind: str
    thresholdsPercent: NotRequired[list[int]]
    resolves: NotRequired[list[ResolvedAlertStatus]]
    period: str
    periodStart: str
    periodEnd: str
    createdAt: str
    severity: str
    title: str
    facts: NotRequired[list[AlertFactStatus]]
    attempts: int
    firstAttemptTime: NotRequired[str]
    nextAttemptTime: str
    lastReason: NotRequired[str]
    lastError: NotRequired[str]
    sendingSince: NotRequired[str]
    sendingBy: NotRequired[str]


class BudgetPolicyStatus(TypedDict, total=False):
    """``status`` of a BudgetPolicy (money: decimal strings in ``currency``; USD).

    ``forecast`` and ``burnRatePerHour`` are None (JSON null) when unknown: under the merge patch the operator
    writes, null deletes a stale value.
    """

    observedGeneration: int
    periodStart: str
    periodEnd: str
    currency: str
    spent: str
    forecast: str | None
    remaining: str
    burnRatePerHour: str | None
    state: str  # ``Ok``, ``Warning``, ``Exceeded`` or ``Unknown``.
    lastEvaluationTime: str
    ledger: LedgerStatus
    thresholds: list[ThresholdStatus]
    enforcedServices: list[EnforcedServiceStatus]
    spotServices: list[SpotServiceStatus]
    rejectedTenants: list[RejectedTenantStatus]
    tenantSpent: str  # exact (1e-9 USD): the tenants' spend the last evaluation used (spec.selector.tenants)
    blindSince: str  # when the GovernanceBlind alert fired (absent once every service is priced again)
    spendAnomalies: list[SpendAnomalyStatus]
    pendingAlerts: list[PendingAlertStatus]
    conditions: list[ConditionStatus]
