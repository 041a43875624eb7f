"""The pure BudgetPolicy planner of the operator: one evaluation's observations in, writes and status out.

Why a module: ``modalscale.costmodel.budget.plan_budget`` decides spend, state, alerts and enforcement from
typed inputs; this module turns what the operator *read* (the policy as stored, the InferenceServices, their
pods, the catalog, finished alert deliveries) into those inputs, and the resulting plan into the exact API
writes: annotation patches on InferenceServices, the status patch, Events, and the alerts to send. It never
reads the cluster or the clock (``now`` is passed in).

Rules decided here (the rest is ``plan_budget``'s):

* **Running replicas** of a service are its pods (label ``modalscale.io/inferenceservice=<name>``) bound to a
  node, not terminating and not Succeeded/Failed: the same rule as the InferenceService's
  ``status.costUSDPerHour`` (:func:`modalscale.operator.isvc.plan.running_replicas`), so both agree. Pods are
  used rather than ``Deployment.status.replicas`` because a pending pod holds no GPU and a pod of an old
  ReplicaSet still does. Pods that could not be listed make the count unknown (governance blind).
* **Ledger: pods cost from their own start to their own stop.** Each service's pods are passed to the ledger
  with ``status.startTime`` (else their binding or creation: :func:`pod_start`) and, when terminating,
  ``metadata.deletionTimestamp`` (:func:`pod_runs`), so an
  interval is charged for what ran in it, not for the count seen at the evaluation that opened it. Pods gone
  before the evaluation lists them are passed too, from the operator's pod watch (:attr:`BudgetObserved.gone`,
  :func:`gone_pod_runs`): each is charged to when it stopped, not up to the evaluation that no longer lists it. While an
  enforced cap is in force the replicas in force are at most the cap (a staged service's front: its share of the
  cap over both pools; ``rates_after_enforcement``): the cap
  annotations are written before the status and the InferenceService reconcile applies them within seconds;
  a pod still listed at the next evaluation (the cap did not take effect) is charged by its own timestamps.
* **Enforcement** is written only as the annotation ``budget.modalscale.io/cap-<sha256(ns/name)[:10]>`` on each
  InferenceService (the InferenceService reconcile is the one writer of replicas). Lifting deletes it. Dry run
  writes none. An InferenceService that carries this policy's annotation but is no longer enforced (new
  period, left the selector, dry run switched on) has it removed. ``SwitchToSpot`` is written the same way as
  ``budget.modalscale.io/spot-<same hash>`` (codec: ``modalscale.api.annotations``); a fallback deletes it.
  ``Reject`` (per-tenant budgets, ``spec.selector.tenants``) is written as ``budget.modalscale.io/reject-<same
  hash>`` naming the refused tenants and ``until`` (the period's end), which the service's gateway watches; the
  tenants' spend is showback's allocation of what :attr:`BudgetObserved.tenant_usage` read from Prometheus
  (:func:`_tenant_spend`), and when it could not be read the rejections are held, never added. The
  pods' Spot wait (:func:`spot_pending_since`) and the tier their node ran them at (:func:`pod_runs`, node labels
  in :attr:`BudgetObserved.node_labels`) are read from the pods and nodes here.
* **Status** is written only when something other than the clock moved: a change of ``lastEvaluationTime``,
  ``ledger.observedTime`` or ``ledger.services[].spent`` alone is not a reason to write, because spend is
  linear in time at a constant rate (integrating ``[t0, t2)`` from the stored ledger equals integrating it in
  two steps, to 1e-9 USD). A heartbeat (:func:`heartbeat_s`) still refreshes it. Rates, replicas, displayed
  money (cents), thresholds, enforcement and conditions are always written when they change.
* **Alerts** are at least once, through the outbox ``status.pendingAlerts`` (``modalscale.costmodel.outbox``):
  an alert decided now enters the outbox, one entry per notification target, in the same status patch that
  records its threshold as alerted in ``status.thresholds``, *before* anything is sent. Every evaluation
  sends the entries that are due (:attr:`PolicyPlan.sends`, after the status patch); the next evaluation
  removes an entry its target accepted, or records the failure (``attempts``, ``lastError``) and when to try
  again (30 s x 2^(attempts-1), at most 15 min). A crash after a send and before that status write sends it
  once more. Entries expire when their period ends or their notification is removed: that is reported
  (``AlertDelivered=False``, reason ``DeliveryAbandoned``, and a Warning Event naming the target and the last
  error), never silent. A notification renamed with the same target (type, Secret, URL key) is not removed: its
  entries go on to the new name (``outbox.outbox_after``).
* **Spend anomalies** (``modalscale.costmodel.anomaly``): every evaluation adds one burn-rate sample per priced
  service to a history the caller keeps (exported to Prometheus and read back after a restart:
  ``modalscale.operator.budget.history``); a service whose burn rate leaves its own seasonal (or, at first,
  recent) baseline gets one ``SpendAnomaly`` alert, through the same outbox, naming the driver (replicas or
  price). Anomalies that start at the same evaluation share one message. The services in an anomaly now are
  ``status.spendAnomalies``, written in the same patch as the alert's outbox entry, so a restarted operator
  never alerts the same anomaly twice. A history that could not be read decides nothing (the stored set is
  held) and says so in ``SpendAnomalyHistory=False``. The detector's sample minimums are scaled to the
  policy's ``evaluationIntervalSeconds`` (``anomaly.for_interval``: fixed ones were never met from about
  2400 s), and a service that has too little history for a decision is named in
  ``SpendAnomalyDetection=False`` / ``InsufficientHistory`` with when its first decision comes; once no selected
  service has a burn rate any more the condition is ``Unknown`` (``NothingPriced`` / ``NoServicesSelected``),
  not its last value.
* **AlertDelivered**: ``False`` (reason of the last failure) while an entry has failed at least once; ``False``
  / ``DeliveryAbandoned`` when an entry was given up, until a later delivery succeeds or the notifications are
  emptied; ``True`` / ``Delivered`` once deliveries succeeded and no entry has a failed attempt; ``Unknown`` /
  ``NoAlertSent`` before any (with notifications); ``Unknown`` / ``NoNotifications`` while ``spec.notifications``
  is empty and nothing is pending.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from modalscale.api.annotations import (
    BudgetCap,
    SpotSwitch,
    TenantReject,
    cap_annotation_key,
    encode_tenants,
    reject_annotation_key,
    same_value,
    spot_annotation_key,
    tenants_annotation_key,
)
from modalscale.api.budgetpolicy import BudgetSpec, InvalidBudgetSpec, Notification, ThresholdAction, parse_budget_spec
from modalscale.api.capacity import pod_requires_spot, pod_tier
from modalscale.api.conditions import (  # condition types and reasons: one module per kind
    ALERT_DELIVERED,
    BUDGET_ENFORCED,
    BUDGET_EXCEEDED,
    DELIVERED,
    DELIVERY_ABANDONED,
    DELIVERY_FAILED,
    DETECTING,
    ENFORCEMENT_LIFTED,
    EVALUATED,
    GOVERNANCE_BLIND,
    HISTORY_READ,
    HISTORY_UNAVAILABLE,
    INSUFFICIENT_HISTORY,
    INVALID_SPEC,
    INVALID_STATUS,
    NAMESPACE_NOT_ALLOWED,
    NO_ALERT_SENT,
    NO_NOTIFICATIONS,
    NO_SERVICES_SELECTED,
    NO_SPOT_SWITCH,
    NOTHING_PRICED,
    PROMETHEUS_NOT_CONFIGURED,
    READY,
    SPEND_ANOMALY_DETECTION,
    SPEND_ANOMALY_HISTORY,
    SPOT_AVAILABLE,
    SPOT_FALLBACK,
    SPOT_LIFTED,
    SPOT_PENDING_TIMEOUT,
    SWITCHED_TO_SPOT,
    TENANTS_ADMITTED,
    TENANTS_REJECTED,
)
from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import GPU_PRODUCT_LABEL, GPU_RESOURCE, parse_isvc
from modalscale.api.quantities import InvalidQuantity
from modalscale.api.status import ConditionStatus
from modalscale.costmodel.anomaly import (
    Anomaly,
    AnomalyConfig,
    AnomalyState,
    BurnSample,
    detect,
    for_interval,
    score,
)
from modalscale.costmodel.budget import (
    AlertKind,
    AlertState,
    BudgetAlert,
    BudgetPlan,
    EnforcedService,
    PolicyRef,
    ServiceState,
    SpotRecord,
    SpotState,
    TenantRejection,
    TenantSpend,
    service_state,
    spend_anomaly_alert,
    spend_anomaly_over,
    tenant_spend,
)
from modalscale.costmodel.budget.status import BudgetStatus, read_budget_status, status_of_plan, write_budget_status
from modalscale.costmodel.catalog import Catalog, ReplicaResources
from modalscale.costmodel.evaluation import evaluate_budget
from modalscale.costmodel.ledger import ClosedPeriod, Ledger, LedgerFormatError, PodRun, parse_time
from modalscale.costmodel.outbox import (
    Abandoned,
    Attempt,
    OutboxKey,
    OutboxUpdate,
    PendingAlert,
    due_alerts,
    enqueue,
    mark_sending,
    next_due_s,
    outbox_after,
)
from modalscale.costmodel.periods import period_bounds
from modalscale.costmodel.showback import ServiceWindow, TenantUsage, drivers_of
from modalscale.notify.answers import DeliveryResult
from modalscale.operator import conditions as cond
from modalscale.operator.budget.spend_anomalies import HistoryRead
from modalscale.operator.isvc.objects import GATEWAY_LABEL, IMAGE_ENCODER_LABEL, SELECTOR_LABEL, TERMINATION_GRACE_S
from modalscale.operator.isvc.plan import running_replicas

BUDGET_PLURAL = "budgetpolicies"
ISVC_PLURAL = "inferenceservices"

HEARTBEAT_MIN_S = 60
"""Default floor of the status heartbeat, seconds: status is refreshed at least every ``max(HEARTBEAT_MIN_S, 10 x
evaluationIntervalSeconds)`` seconds (the operator's ``MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS`` sets the
floor)."""


# --------------------------------------------------------------------------------------------- annotations
# The annotation codec lives in modalscale.api.annotations (one encoder, one decoder); these names stay here.
def cap_annotation_value(policy: PolicyRef, action: str, max_replicas: int) -> str:
    """The cap annotation value (:meth:`modalscale.api.annotations.BudgetCap.encode`)."""
    return BudgetCap(int(max_replicas), str(policy), action).encode()


@dataclass(frozen=True)
class AnnotationWrite:
    """Set (``value``) or delete (``value=None``) one of this policy's annotations (cap or Spot) on one
    InferenceService."""

    namespace: str
    name: str
    key: str
    value: str | None


# --------------------------------------------------------------------------------------------- observation
@dataclass
class BudgetObserved:
    """What one evaluation read (dicts as the API returns them, camelCase).

    Attributes:
        isvcs: Every InferenceService in :func:`observed_namespaces` (selected or not).
        pods: Namespace -> pods carrying the ``modalscale.io/inferenceservice`` label; None = not readable.
    """

    isvcs: list[dict[str, Any]] = field(default_factory=list)
    pods: dict[str, list[dict[str, Any]] | None] = field(default_factory=dict)
    node_labels: dict[str, dict[str, str]] | None = None
    """Node name -> labels of the nodes the pods are bound to (their capacity type prices the pods); None =
    nodes not readable (a pod is then Spot when it asked for a Spot node, else at its service's tier)."""
    node_health: dict[str, NodeHealth] | None = None
    """Node name -> whether the nodes the pods are bound to still report (:func:`read_node_health`, read with
    ``node_labels``; a gone node is ``gone``); None = not read: every pod is charged by its own stop."""
    gone: dict[str, list[GonePod]] = field(default_factory=dict)
    """Namespace -> pods whose deletion the operator's pod watch saw (``modalscale.operator.budget.podstops``):
    the ledger charges each to when it stopped (:func:`gone_pod_runs`), also when no listing showed it."""
    tenant_usage: TenantUsageRead | None = None
    """A policy with ``spec.selector.tenants``: showback's inputs over the period so far (None: not read)."""
    listed_at: dt.datetime | None = None
    """When the pods had been listed (the clock read after the listing; the evaluation's ``now`` is read before
    it): a replica not listed was gone by then, and the ledger charges it to then (None: to ``now``)."""
    gateway_pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Namespace -> the request-gateway pods (label ``modalscale.io/gateway``), read with ``pods`` (a namespace
    whose pods cannot be read has ``pods`` None and none here); priced at their own price, not as replicas."""
    image_encoder_pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Namespace -> a staged service's image-encoder pool pods (label ``modalscale.io/image-encoder``), read with
    ``pods``; priced at the pool's own price (``spec.stages.imageEncoder.resources``), not as replicas."""


@dataclass(frozen=True)
class TenantUsageRead:
    """Showback's inputs over ``[period start, now)`` as read from Prometheus (``modalscale.operator.showback``).

    Attributes:
        windows: Per (namespace, name), the ledger's spend and replica-seconds over the window.
        usage: Per (namespace, name), the gateway's (tenant, modality) rows over the window.
        error: Why nothing could be read (then ``windows`` and ``usage`` are empty and the tenants' spend is
            unknown: held, never rejected on).
    """

    windows: Mapping[tuple[str, str], ServiceWindow] = field(default_factory=dict)
    usage: Mapping[tuple[str, str], Sequence[TenantUsage]] = field(default_factory=dict)
    error: str | None = None


def tenant_window_s(policy: Mapping[str, Any], now: dt.datetime, *, any_policy: bool = False) -> int | None:
    """Seconds from the start of ``policy``'s current period to ``now``: the window whose tenant usage the
    evaluation needs; None when the policy has no ``spec.selector.tenants`` (unless ``any_policy``: the window of
    the tenants named in its alerts) or its spec does not parse."""
    try:
        spec = parse_budget_spec(policy.get("spec") or {})
    except InvalidBudgetSpec:
        return None
    if not spec.selector.tenants and not any_policy:
        return None
    start, _ = period_bounds(spec.period, spec.time_zone, now)
    return max(0, int((now - start).total_seconds()))


@dataclass(frozen=True)
class GonePod:
    """A pod of an InferenceService that the operator's pod watch saw deleted.

    Attributes:
        pod: The pod as last seen (the ``DELETED`` watch event's object; camelCase).
        seen_at: When the watch saw it go (UTC): the latest it can have stopped running.
    """

    pod: Mapping[str, Any]
    seen_at: dt.datetime


@dataclass(frozen=True)
class NodeHealth:
    """Whether a node's kubelet still reports, from the node's own record (``status.conditions``) and its Lease.

    Attributes:
        ready: Status of its ``Ready`` condition: ``"True"``, ``"False"`` (the kubelet reports it unhealthy),
            ``"Unknown"`` (the node lifecycle controller's mark: the kubelet stopped renewing its Lease for the
            controller-manager's ``--node-monitor-grace-period``); None without one.
        last_heartbeat: The ``Ready`` condition's ``lastHeartbeatTime`` (UTC): the last status the kubelet posted,
            which the node lifecycle controller keeps when it marks the node Unknown.
        gone: The node object does not exist (any more).
        lease_renewed: ``spec.renewTime`` of the node's Lease (``kube-node-lease/<node>``, UTC): the kubelet's
            last renewal, every 10 s by default; None when not read (read only for a node that is not Ready) or
            not readable.
        gone_since: When this operator first saw it gone (the observer's memory: a deleted Node says nothing
            more); None when it exists or that is not known.
    """

    ready: str | None
    last_heartbeat: dt.datetime | None
    gone: bool = False
    lease_renewed: dt.datetime | None = None
    gone_since: dt.datetime | None = None

    @property
    def lost_since(self) -> dt.datetime | None:
        """Since when the node runs nothing for sure: its last heartbeat once unheard, else when it was first seen
        gone; None while it reports (or nothing is known)."""
        return self.unheard_since or self.gone_since

    @property
    def unheard_since(self) -> dt.datetime | None:
        """When the kubelet of a node that stopped reporting (``Ready`` Unknown) was last heard: the later of its
        last status and its last Lease renewal; None otherwise."""
        if self.ready != "Unknown":
            return None
        heard = [t for t in (self.last_heartbeat, self.lease_renewed) if t is not None]
        return max(heard) if heard else None


def read_node_health(node: Mapping[str, Any] | None, lease: Mapping[str, Any] | None = None) -> NodeHealth:
    """:class:`NodeHealth` of a Node as the API returns it (None: not found, ``gone``) and of its Lease (None: not
    read or not found).

    Why the Lease too: since node leases, a kubelet posts status only on a change or every
    ``nodeStatusReportFrequency`` (5 min by default) but renews its Lease every 10 s, so ``lastHeartbeatTime`` alone
    can be 5 min older than the kubelet's death, and the ledger charged a lost pod up to 5 min less than it ran. The
    Lease's ``renewTime`` is within 10 s of it. Without the Lease (no RBAC on leases, or none) the heartbeat is
    used, as before. An unreadable time is None (the pods are then charged by their own stops when both are).
    """
    if node is None:
        return NodeHealth(None, None, gone=True)
    renewed = _time_or_none(((lease or {}).get("spec") or {}).get("renewTime"))
    renewed = renewed.replace(microsecond=0) if renewed is not None else None  # status times are whole seconds
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == READY:  # the node's own Ready condition (same type name)
            return NodeHealth(str(c.get("status")) if c.get("status") is not None else None,
                              _time_or_none(c.get("lastHeartbeatTime")), lease_renewed=renewed)
    return NodeHealth(None, None, lease_renewed=renewed)


def _node_state(node: str | None, health: Mapping[str, NodeHealth] | None) -> tuple[dt.datetime | None, bool]:
    """``PodRun``'s ``(unheard_since, node_gone)`` for a pod bound to ``node`` (nothing known: ``(None, False)``)."""
    h = health.get(node) if health is not None and node else None
    return (None, False) if h is None else (h.lost_since, h.gone)


ANY_NAMESPACE = "*"
"""In ``admin_namespaces``: policies of every namespace may select any namespace."""


def refused_namespaces(policy_namespace: str, selected: Collection[str], admin_namespaces: Collection[str]
                       ) -> tuple[str, ...]:
    """The namespaces of ``spec.selector.namespaces`` a policy in ``policy_namespace`` may not select.

    The trust boundary: a BudgetPolicy scales (caps, scales to zero, moves to Spot) what it selects, so only a
    policy in one of ``admin_namespaces`` (``MODALSCALE_BUDGET_ADMIN_NAMESPACES``; ``*``: all) may select other
    namespaces; any other policy counts and enforces in its own namespace only (as a KEDA ScaledObject scales
    only in its own).

    Returns:
        Sorted names, empty when every selected namespace is allowed.
    """
    if ANY_NAMESPACE in admin_namespaces or policy_namespace in admin_namespaces:
        return ()
    return tuple(sorted({n for n in selected if n != policy_namespace}))


def observed_namespaces(policy: Mapping[str, Any], admin_namespaces: Collection[str] = ()) -> tuple[str, ...]:
    """Namespaces to read for ``policy``: its selector's (default: its own) that it may select
    (:func:`refused_namespaces`), plus those it enforces on (caps and SwitchToSpot) now, so that it can lift
    them.

    Works on the raw body so that an invalid spec still lets the operator find (and hold) its annotations.
    """
    ns = policy["metadata"]["namespace"]
    selector = (policy.get("spec") or {}).get("selector") or {}
    listed = [n for n in selector.get("namespaces") or [] if isinstance(n, str)]
    refused = set(refused_namespaces(ns, listed, admin_namespaces))
    wanted = [n for n in listed if n not in refused] or [ns]
    wanted += read_budget_status(policy).held_namespaces
    return tuple(sorted(set(wanted)))


def _time_or_none(value: object) -> dt.datetime | None:
    try:
        return parse_time(value, "pod") if value else None
    except LedgerFormatError:
        return None


def pod_start(pod: Mapping[str, Any]) -> dt.datetime | None:
    """The earliest instant a pod can have run, for the ledger (an upper bound on its charge, never below it).

    ``status.startTime`` (the kubelet's own: when it first took the pod); while the kubelet has not written it
    yet, the time its ``PodScheduled`` condition turned True (bound to its node, which no container precedes),
    else ``metadata.creationTimestamp`` (before both); None when none is readable (the ledger then charges it
    from its interval's start). A pod bound a moment before its kubelet reports it was charged for its
    evaluation's whole interval (31 replica-seconds over 5 pods in scenario 4 of issue 21 at stop 32).
    """
    if (start := _time_or_none((pod.get("status") or {}).get("startTime"))) is not None:
        return start
    return _binding_time(pod)


def _binding_time(pod: Mapping[str, Any]) -> dt.datetime | None:
    """When its ``PodScheduled`` condition turned True, else its ``metadata.creationTimestamp`` (UTC); None when
    neither is readable."""
    bound = next((c for c in (pod.get("status") or {}).get("conditions") or []
                  if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
    if bound is not None and (when := _time_or_none(bound.get("lastTransitionTime"))) is not None:
        return when
    return _time_or_none((pod.get("metadata") or {}).get("creationTimestamp"))


def pod_bound(pod: Mapping[str, Any]) -> dt.datetime | None:
    """When an evaluation first counted a pod among the replicas (:func:`modalscale.operator.isvc.plan.running_replicas`
    counts it once bound to a node): its ``PodScheduled`` condition's turn to True, else its
    ``metadata.creationTimestamp``; None when neither is readable or it is not bound (UTC)."""
    return _binding_time(pod) if (pod.get("spec") or {}).get("nodeName") else None


def pod_runs(pods: Sequence[Mapping[str, Any]],
             node_labels: Mapping[str, Mapping[str, str]] | None = None,
             node_health: Mapping[str, NodeHealth] | None = None) -> tuple[PodRun, ...]:
    """The pods of one service as the ledger charges them: each from its own start to its own stop.

    A pod counts once bound to a node. ``start`` is :func:`pod_start` (``status.startTime``, else its binding,
    else its creation; None when none is readable: the ledger then counts it as running since before the
    interval, an upper bound). ``stop`` is
    ``metadata.deletionTimestamp`` when terminating (the kubelet's deadline for it to be gone), or the latest
    ``finishedAt`` of its containers when every one has finished before that (an evicted replica stops after its
    ``preStop`` drain, seconds before the kubelet removes it: an evaluation between the two charged it to that
    evaluation); for a Succeeded or Failed pod, the latest ``finishedAt`` of its containers (a finished pod without
    one is left out: it runs no more, and had it been counted running before, the ledger charges it to now as a pod
    it cannot account for). A running pod's container between two restarts (no deletion) does not stop it.

    ``tier`` is the tier the pod ran at (:func:`modalscale.api.capacity.pod_tier`): its node's capacity-type
    label, else Spot when it asked for a Spot node, else None (its service's ``spec.pricing.tier``).
    ``unheard_since`` is since when its node was lost (:attr:`NodeHealth.lost_since`: its last heartbeat when it
    stopped reporting, else when the operator first found it deleted), ``node_gone`` whether the node is gone: the
    ledger charges such a pod to that instant (``costmodel.ledger``), not to its own stop (a pod of a deleted Node
    stays listed until the pod GC removes it, 40-60 s later).

    Args:
        pods: Pod objects (camelCase dicts) of one InferenceService.
        node_labels: Node name -> labels (None: not read).
        node_health: Node name -> :class:`NodeHealth` (None: not read).
    Returns:
        One :class:`PodRun` per pod that ran, sorted by name.
    """
    out = []
    for p in pods:
        meta, status = p.get("metadata") or {}, p.get("status") or {}
        if not (p.get("spec") or {}).get("nodeName"):
            continue
        start = pod_start(p)
        stop = _time_or_none(meta.get("deletionTimestamp"))
        containers = status.get("containerStatuses") or []
        finished = [t for c in containers
                    if (t := _time_or_none(((c.get("state") or {}).get("terminated") or {}).get("finishedAt")))]
        if status.get("phase") in ("Succeeded", "Failed"):
            if not finished:
                continue
            stop = min([max(finished)] + ([stop] if stop else []))
        elif stop is not None and finished and len(finished) == len(containers):
            stop = min(stop, max(finished))
        node = (p.get("spec") or {}).get("nodeName")
        labels = node_labels.get(node) if node_labels is not None and node is not None else None
        unheard, gone = _node_state(node, node_health)
        out.append(PodRun(str(meta.get("name", "")), start, stop, pod_tier(p, labels), unheard, gone,
                          bound=pod_bound(p)))
    return tuple(sorted(out, key=lambda r: r.name))


def gone_pod_runs(gone: Sequence[GonePod],
                  node_labels: Mapping[str, Mapping[str, str]] | None = None,
                  node_health: Mapping[str, NodeHealth] | None = None) -> tuple[PodRun, ...]:
    """The deleted pods of one service as the ledger charges them: each from its start to when it stopped.

    A pod never bound to a node ran nothing and is left out. ``start`` is :func:`pod_start` (None when
    unreadable: it then counts as running since before the interval, an upper bound). ``stop`` is the earliest
    of: the latest ``state.terminated.finishedAt`` of its containers when every container reports one (the
    kubelet's own time), ``metadata.deletionTimestamp`` (the kubelet's deadline to have stopped it), and
    :attr:`GonePod.seen_at` (it was gone then). ``tier``, ``unheard_since`` and ``node_gone`` as in
    :func:`pod_runs`.

    Args:
        gone: Deleted pods of one InferenceService.
        node_labels: Node name -> labels (None: not read; a node gone since maps to ``{}``).
        node_health: Node name -> :class:`NodeHealth` (None: not read).
    Returns:
        One :class:`PodRun` per pod that ran, with ``stop`` set, sorted by name; a pod recorded twice keeps
        its earliest stop.
    """
    out: dict[str, PodRun] = {}
    for g in gone:
        meta, status = g.pod.get("metadata") or {}, g.pod.get("status") or {}
        node = str((g.pod.get("spec") or {}).get("nodeName") or "")
        if not node:
            continue
        stops = [g.seen_at.astimezone(dt.timezone.utc)]
        if (deadline := _time_or_none(meta.get("deletionTimestamp"))) is not None:
            stops.append(deadline)
        containers = status.get("containerStatuses") or []
        finished = [_time_or_none(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                    for c in containers]
        if containers and all(t is not None for t in finished):
            stops.append(max(t for t in finished if t is not None))
        unheard, node_gone = _node_state(node, node_health)
        run = PodRun(str(meta.get("name", "")), pod_start(g.pod), min(stops),
                     pod_tier(g.pod, (node_labels or {}).get(node) if node_labels is not None else None),
                     unheard, node_gone, bound=pod_bound(g.pod))
        if run.name not in out or (run.stop or g.seen_at) < (out[run.name].stop or g.seen_at):
            out[run.name] = run
    return tuple(sorted(out.values(), key=lambda r: r.name))


def spot_pending_since(pods: Sequence[Mapping[str, Any]], node_health: Mapping[str, NodeHealth] | None = None,
                       gone: Sequence[GonePod] = (), window_s: float = 0) -> dt.datetime | None:
    """Since when the service has waited for Spot capacity (None: it does not wait).

    It waits while one of its pods that asks for a Spot node is not scheduled yet (not terminating, not finished;
    since its ``creationTimestamp``, an unreadable one skipped: no fallback is decided on a time that could not be
    read) or is bound to a node that was lost (:attr:`NodeHealth.lost_since`: reclaimed and deleted, or no longer
    reporting), since the loss: that pod runs nowhere, and the node controller's pod GC deletes it (and so lets a
    replacement be created, which then waits unscheduled) only 40-60 s after its Node went (issue 21's scenario 5).
    A Spot pod seen deleted (``gone``) from a node that is still lost, at most ``window_s`` before the oldest
    unscheduled Spot pod was created (the replacement it made way for), keeps the wait at the loss.
    """
    health = node_health or {}

    def lost(pod: Mapping[str, Any]) -> dt.datetime | None:
        h = health.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        return h.lost_since if h is not None else None

    waiting, lost_runs = [], []
    for p in pods:
        meta, status = p.get("metadata") or {}, p.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed") or not pod_requires_spot(p):
            continue
        if (p.get("spec") or {}).get("nodeName"):
            if (since := lost(p)) is not None:
                lost_runs.append(since)
        elif not meta.get("deletionTimestamp") and (created := _time_or_none(meta.get("creationTimestamp"))):
            waiting.append(created)
    if waiting:
        lost_runs += [since for g in gone if pod_requires_spot(g.pod) and (since := lost(g.pod)) is not None
                      and g.seen_at.timestamp() >= min(waiting).timestamp() - window_s]
    return min(waiting + lost_runs) if waiting or lost_runs else None


DEFAULT_TERMINATION_GRACE_S = 30
"""``terminationGracePeriodSeconds`` of a pod that does not say (the API server's default)."""


def longest_stop_s(pods: Sequence[Mapping[str, Any]]) -> int:
    """The longest ``terminationGracePeriodSeconds`` of the pods bound to a node and not finished: how long one of
    them may keep running once deleted (the kubelet kills it at that deadline); 0 when none runs."""
    out = 0
    for p in pods:
        spec = p.get("spec") or {}
        if not spec.get("nodeName") or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        grace = spec.get("terminationGracePeriodSeconds")
        out = max(out, grace if isinstance(grace, int) and grace >= 0 else DEFAULT_TERMINATION_GRACE_S)
    return out


def _with_recorded_stops(listed: Sequence[PodRun], recorded: Sequence[PodRun]) -> tuple[PodRun, ...]:
    """``listed`` runs with the ``recorded`` ones (the pod watch's, each with a stop) merged by name: a pod in both
    takes the earlier stop, a recorded pod no listing showed is added."""
    stops = {r.name: r.stop for r in recorded if r.stop is not None}
    merged = [replace(r, stop=min(r.stop, stops[r.name]) if r.stop is not None else stops[r.name])
              if r.name in stops else r for r in listed]
    names = {r.name for r in listed}
    return (*merged, *(r for r in recorded if r.name not in names))


def _side_runs(observed: BudgetObserved, ns: str, label: str, name: str,
               listed: Mapping[str, Sequence[dict[str, Any]]]) -> tuple[PodRun, ...]:
    """The runs of the pods of ``ns`` labelled ``label=name`` in ``listed``, merged with those the pod watch saw
    deleted (each to its recorded stop: a pod gone between two listings ran until then), each at its node's
    tier."""
    def own(pod: Mapping[str, Any]) -> bool:
        return ((pod.get("metadata") or {}).get("labels") or {}).get(label) == name

    gone = gone_pod_runs([g for g in observed.gone.get(ns, ()) if own(g.pod)], observed.node_labels,
                         observed.node_health)
    return _with_recorded_stops(pod_runs([p for p in listed.get(ns) or () if own(p)], observed.node_labels,
                                         observed.node_health), gone)


def pod_resources(pod: Mapping[str, Any]) -> ReplicaResources | None:
    """A pod's requests as the catalog prices them (pure): its containers' CPU, memory and ``nvidia.com/gpu``
    requests summed, the GPU type from its ``nvidia.com/gpu.product`` node selector; None when a request is
    missing or not a quantity (then its pods stay unpriced, never guessed)."""
    spec = pod.get("spec") or {}
    requests = [((c.get("resources") or {}).get("requests") or {}) for c in spec.get("containers") or ()]
    if not requests or any("cpu" not in r or "memory" not in r for r in requests):
        return None
    gpus = sum(int(r[GPU_RESOURCE]) for r in requests if str(r.get(GPU_RESOURCE, "")).isdigit())
    gpu_type = (spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL) if gpus else None
    try:
        parts = [ReplicaResources.from_quantities(str(r["cpu"]), str(r["memory"])) for r in requests]
        return ReplicaResources(sum((p.cpu_cores for p in parts), Decimal(0)), sum(p.memory_bytes for p in parts),
                                gpus, gpu_type)
    except (InvalidQuantity, ValueError, TypeError):
        return None


def leftover_pool_resources(observed: BudgetObserved, ns: str, name: str) -> ReplicaResources | None:
    """The requests of the image encoder pool pods a service left running after ``spec.stages`` was removed (they
    run until the front's rollout ends and the pool is deleted), read from the first such pod listed or seen
    deleted (:func:`pod_resources`); None when there is none or it cannot be read."""
    def own(pod: Mapping[str, Any]) -> bool:
        return ((pod.get("metadata") or {}).get("labels") or {}).get(IMAGE_ENCODER_LABEL) == name

    pods: list[Mapping[str, Any]] = [p for p in observed.image_encoder_pods.get(ns) or () if own(p)]
    pods += [g.pod for g in observed.gone.get(ns, ()) if own(g.pod)]
    return pod_resources(pods[0]) if pods else None


def selected_services(spec: BudgetSpec, policy_namespace: str, observed: BudgetObserved,
                      catalog: Catalog) -> list[ServiceState]:
    """The InferenceServices ``spec.selector`` picks, priced by ``catalog``, as the budget planner's input.

    A service whose price cannot be determined (unknown GPU type, invalid spec or quantity, unknown tier) has
    ``usd_per_replica_hour=None``; one whose pods could not be listed has ``replicas=None``. Either makes its
    cost unknown when it runs (a service with no running pod costs 0, priced or not), and the budget then
    enforces on the known spend, a lower bound (see ``plan_budget``).

    Returns:
        One :class:`ServiceState` per selected service, sorted by (namespace, name).
    """
    out = []
    for isvc in observed.isvcs:
        meta = isvc.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if not spec.selector.matches(policy_namespace, ns, meta.get("labels") or {}):
            continue
        pods = observed.pods.get(ns)
        own = None if pods is None else [
            p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(SELECTOR_LABEL) == name]
        stopped = gone_pod_runs([g for g in observed.gone.get(ns, ()) if
                                 ((g.pod.get("metadata") or {}).get("labels") or {}).get(SELECTOR_LABEL) == name],
                                observed.node_labels, observed.node_health)
        # A listed pod the watch saw deleted since the listing runs no more.
        gone_names = {r.name for r in stopped}
        replicas = None if own is None else running_replicas(
            [p for p in own if (p.get("metadata") or {}).get("name") not in gone_names])
        runs = None if own is None else pod_runs(own, observed.node_labels, observed.node_health)
        own_gone = [g for g in observed.gone.get(ns, ())
                    if ((g.pod.get("metadata") or {}).get("labels") or {}).get(SELECTOR_LABEL) == name]
        waiting = None if own is None else spot_pending_since(own, observed.node_health, own_gone,
                                                              spec.enforcement.spot_pending_timeout_s)
        # The gateway's pods by their own runs, those the watch saw deleted to their recorded stop (a gateway pod
        # gone between two listings ran until then; the listing alone charged it nothing).
        gateway = tuple(replace(r, tier=None)  # priced on demand (state.service_state), whatever its node
                        for r in _side_runs(observed, ns, GATEWAY_LABEL, name, observed.gateway_pods))
        encoders = _side_runs(observed, ns, IMAGE_ENCODER_LABEL, name, observed.image_encoder_pods)
        raw_scaling = (isvc.get("spec") or {}).get("scaling") or {}
        try:
            parsed = parse_isvc(isvc)
            res = ReplicaResources.from_quantities(parsed.resources.cpu, parsed.resources.memory,
                                                   parsed.resources.gpu_count, parsed.resources.gpu_type)
            pool = parsed.stages.image_encoder.resources if parsed.stages is not None else None
            pool_res = leftover_pool_resources(observed, ns, name) if pool is None else (
                ReplicaResources.from_quantities(pool.cpu, pool.memory, pool.gpu_count, pool.gpu_type))
            state = service_state(ns, name, replicas=replicas, max_replicas=parsed.scaling.max_replicas,
                                  resources=res, tier=parsed.pricing_tier, catalog=catalog,
                                  priority=parsed.priority, pods=runs, spot_pending_since=waiting,
                                  stopped=stopped, gateway_pods=gateway,
                                  gateway_resources=ReplicaResources.from_quantities(parsed.gateway.cpu,
                                                                                     parsed.gateway.memory),
                                  # The grace its replicas get, running or not: a horizon that shrank once they
                                  # were gone would lift the hold and bring them back (scenario 6 at 1d22b6d).
                                  stop_grace_s=max(TERMINATION_GRACE_S, longest_stop_s(own or ())),
                                  image_encoder_pods=encoders, image_encoder_resources=pool_res,
                                  image_encoder_max_replicas=(parsed.stages.image_encoder.max_replicas
                                                              if parsed.stages is not None else 0))
        except (InvalidSpec, InvalidQuantity, ValueError) as exc:
            max_replicas = raw_scaling.get("maxReplicas")
            state = ServiceState(ns, name, replicas, max_replicas if isinstance(max_replicas, int) else 1, None,
                                 unknown_reason=f"price unknown: {exc}", pods=runs, stopped=stopped)
        out.append(state)
    return sorted(out, key=lambda s: (s.namespace, s.name))


# --------------------------------------------------------------------------------------------- the plan
@dataclass
class PolicyPlan:
    """Everything one evaluation of a BudgetPolicy does, in order: annotations, status, Events, alerts.

    Attributes:
        annotation_writes: Cap annotations to set or delete on InferenceServices.
        status_patch: Merge patch of ``status`` (``{}``: write nothing).
        events: (type Normal|Warning, CamelCase reason, message) to post on the policy.
        alerts: Alerts decided at this evaluation (already in the outbox of ``status_patch``, one entry per target).
        notifications: ``spec.notifications`` (receivers to read from their Secrets).
        interval_s: Seconds until the next evaluation (``spec.evaluationIntervalSeconds``).
        budget: The cost model's plan (None when the spec or status could not be read).
        sends: Outbox entries due now, in order: send each to its target, only after ``status_patch`` was
            written (the entry must be in status before it is sent).
        next_due_s: Seconds until the next outbox entry not in flight is due (None: none pending); the daemon
            evaluates again by then even when the interval is longer.
        burn_samples: This evaluation's burn-rate sample per priced service (add to the anomaly history once
            the status is written).
        anomaly_state: The services in an anomaly after this evaluation (as written to ``status.spendAnomalies``).
        ledger_spent_usd: The ledger's spend per service in the current period up to ``ledger_observed_time``
            (this evaluation's ``now`` floored to the second; :func:`exported_spend`: the closed period's final
            spend at its end from the evaluation that closed it), USD; exported as
            ``modalscale_budget_service_spend_usd_total`` once the status is written. The same figures whether
            or not this evaluation writes the ledger (one that does not computes them from the stored ledger, as
            the next one that writes will). None when the ledger was not read (a hold): the exported figures
            stay as they were.
        ledger_period_start: The start of the period ``ledger_spent_usd`` is of (the closed one's from the
            evaluation that closed it): the series' ``period_start`` label.
    """

    annotation_writes: list[AnnotationWrite]
    status_patch: dict[str, Any]
    events: list[tuple[str, str, str]]
    alerts: tuple[BudgetAlert, ...] = ()
    notifications: tuple[Notification, ...] = ()
    interval_s: int = 60
    budget: BudgetPlan | None = None
    sends: tuple[PendingAlert, ...] = ()
    next_due_s: float | None = None
    burn_samples: dict[tuple[str, str], BurnSample] = field(default_factory=dict)
    anomaly_state: AnomalyState = field(default_factory=AnomalyState)
    ledger_spent_usd: dict[tuple[str, str], Decimal] | None = None
    ledger_observed_time: dt.datetime | None = None
    ledger_period_start: dt.datetime | None = None


def heartbeat_s(interval_s: int, min_s: int = HEARTBEAT_MIN_S) -> int:
    """Longest time status goes unwritten while nothing but the clock changes, in seconds: ``max(min_s, 10 x
    interval_s)`` (``interval_s``: ``spec.evaluationIntervalSeconds``; ``min_s``: the operator's
    ``MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS``, default :data:`HEARTBEAT_MIN_S`)."""
    return max(min_s, 10 * interval_s)


def _interval(policy: Mapping[str, Any]) -> int:
    value = (policy.get("spec") or {}).get("evaluationIntervalSeconds", 60)
    return value if isinstance(value, int) and 1 <= value <= 3600 else 60


def _events_for(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    events = []
    for c in cond.transitions(old, new):
        if c["type"] == SPEND_ANOMALY_DETECTION and (c["reason"] == HISTORY_UNAVAILABLE or c["status"] == cond.UNKNOWN):
            # The cause's one Event is another condition's: SpendAnomalyHistory's Warning (it went False when the
            # read failed), Ready's GovernanceBlind or NoServicesSelected (nothing has a burn rate).
            continue
        bad = ((c["type"] == READY and c["status"] == cond.FALSE)
               or (c["type"] == BUDGET_EXCEEDED and c["status"] == cond.TRUE)
               or (c["type"] == ALERT_DELIVERED and c["status"] == cond.FALSE)
               or (c["type"] == SPEND_ANOMALY_HISTORY and c["status"] == cond.FALSE))
        if not old and not bad:
            continue  # First visit: no Event for the initial healthy/unknown state of each condition.
        events.append(("Warning" if bad else "Normal", c["reason"], f"{c['type']}={c['status']}: {c['message']}"))
    return events


def _alert_condition(current: list[ConditionStatus], update: OutboxUpdate,
                     abandoned: Sequence[Abandoned] = (), notifications: int | None = None) -> cond.Condition:
    """``AlertDelivered`` from the outbox after this evaluation's rounds (see the module docstring);
    ``notifications``: how many ``spec.notifications`` there are (None: the spec could not be read)."""
    if abandoned:
        return cond.Condition(ALERT_DELIVERED, cond.FALSE, DELIVERY_ABANDONED,
                              "; ".join(a.describe() for a in abandoned))
    failing = [e for e in update.pending if e.attempts > 0]
    if failing:
        # Each receiver once, however many of its alerts are pending: its latest failure and its next retry.
        by_target: dict[str, list[PendingAlert]] = {}
        for e in failing:
            by_target.setdefault(e.notification, []).append(e)
        parts = []
        for target, entries in by_target.items():
            last = max(entries, key=lambda e: (e.attempts, e.next_attempt_time))
            pending = f"{len(entries)} alerts pending, " if len(entries) > 1 else ""
            parts.append(f"{target}: {last.last_error or last.last_reason} ({pending}attempt {last.attempts} "
                         f"failed; retrying at {cond.rfc3339(min(e.next_attempt_time for e in entries))})")
        return cond.Condition(ALERT_DELIVERED, cond.FALSE, failing[0].last_reason or DELIVERY_FAILED,
                              "; ".join(parts))
    old = cond.get(current, ALERT_DELIVERED)
    if notifications == 0 and not update.pending and not update.delivered:
        return cond.Condition(ALERT_DELIVERED, cond.UNKNOWN, NO_NOTIFICATIONS,
                              "spec.notifications is empty: alerts are recorded in status.thresholds and Events "
                              "only, and none is delivered anywhere")
    if update.delivered:
        names = list(dict.fromkeys(e.notification for e in update.delivered))
        return cond.Condition(ALERT_DELIVERED, cond.TRUE, DELIVERED, f"Delivered to {', '.join(names)}")
    if old is not None:
        return cond.Condition(ALERT_DELIVERED, old["status"], old["reason"], old.get("message", ""))
    return cond.Condition(ALERT_DELIVERED, cond.UNKNOWN, NO_ALERT_SENT, "No alert has been sent")


def _abandoned_events(events: list[tuple[str, str, str]], abandoned: Sequence[Abandoned]
                      ) -> list[tuple[str, str, str]]:
    """``events`` with one Warning per abandoned entry instead of the condition's own transition Event."""
    return ([e for e in events if e[1] != DELIVERY_ABANDONED]
            + [("Warning", DELIVERY_ABANDONED, a.describe()) for a in abandoned])


def _hold(policy: Mapping[str, Any], reason: str, message: str, attempts: Sequence[Attempt],
          now: dt.datetime, in_flight: Collection[OutboxKey], stored: BudgetStatus | None = None) -> PolicyPlan:
    """Spec or status unreadable: report it, change nothing else (enforcement in force is held, nothing is sent).

    Finished rounds are still applied to a readable outbox (expiry by period only: the targets are unknown).
    """
    status = read_budget_status(policy) if stored is None else stored
    generation = int(policy["metadata"].get("generation") or 0)
    old = list(status.conditions)
    wanted = [cond.Condition(READY, cond.FALSE, reason, message)]
    abandoned: tuple[Abandoned, ...] = ()
    pending: tuple[PendingAlert, ...] = ()
    if status.outbox is not None:
        update = outbox_after(status.outbox, attempts, now, None, in_flight)
        abandoned, pending = update.abandoned, tuple(update.pending)
        wanted.append(_alert_condition(old, update, abandoned))
    conditions = cond.upsert(old, wanted, generation, now)
    patch = write_budget_status(
        BudgetStatus(observed_generation=generation, outbox=pending, conditions=tuple(conditions)), policy,
        only=("observedGeneration", "conditions", *(("pendingAlerts",) if status.outbox is not None else ())))
    events = _abandoned_events(_events_for(old, conditions), abandoned) if patch else []
    return PolicyPlan([], patch, events, interval_s=_interval(policy))


def _enforcement_events(before: Sequence[EnforcedService], after: Sequence[EnforcedService]
                        ) -> list[tuple[str, str, str]]:
    old = {(e.namespace, e.name): e for e in before}
    new = {(e.namespace, e.name): e for e in after}
    events = []
    for k, e in new.items():
        prev = old.get(k)
        if prev is None or (prev.action, prev.max_replicas, prev.dry_run, prev.describe()) != (
                e.action, e.max_replicas, e.dry_run, e.describe()):
            dry = " (dry run, not applied)" if e.dry_run else ""
            events.append(("Warning", BUDGET_ENFORCED,
                           f"{e.action.value} InferenceService {k[0]}/{k[1]}: {e.describe()}{dry}"))
    for k in old.keys() - new.keys():
        events.append(("Normal", ENFORCEMENT_LIFTED, f"Budget cap lifted from InferenceService {k[0]}/{k[1]}"))
    return events


def _reject_events(before: Sequence[TenantRejection], after: Sequence[TenantRejection]
                   ) -> list[tuple[str, str, str]]:
    """One Event per service whose set of refused tenants changed: ``TenantsRejected`` naming the tenants added,
    ``TenantsAdmitted`` naming those lifted."""
    old: dict[tuple[str, str], set[str]] = {}
    for e in before:
        if not e.dry_run:
            old.setdefault((e.namespace, e.name), set()).add(e.tenant)
    new: dict[tuple[str, str], set[str]] = {}
    until: dict[tuple[str, str], dt.datetime] = {}
    for r in after:
        if not r.dry_run:
            new.setdefault((r.namespace, r.name), set()).add(r.tenant)
            until[(r.namespace, r.name)] = r.until
    events = []
    for k in sorted(old.keys() | new.keys()):
        added, lifted = new.get(k, set()) - old.get(k, set()), old.get(k, set()) - new.get(k, set())
        if added:
            events.append(("Warning", TENANTS_REJECTED,
                           f"InferenceService {k[0]}/{k[1]}: new requests of tenant(s) {', '.join(sorted(added))} "
                           f"refused (429) until {cond.rfc3339(until[k])}"))
        if lifted:
            events.append(("Normal", TENANTS_ADMITTED,
                           f"InferenceService {k[0]}/{k[1]}: tenant(s) {', '.join(sorted(lifted))} admitted again"))
    return events


def _spot_condition(spot: Sequence[SpotRecord], skipped: Sequence[str]) -> cond.Condition:
    """``SpotFallback``: True (``SpotPendingTimeout``) while a switched service fell back to on-demand."""
    fallen = [r for r in spot if r.state is SpotState.ON_DEMAND_FALLBACK]
    if fallen:
        return cond.Condition(SPOT_FALLBACK, cond.TRUE, SPOT_PENDING_TIMEOUT, "; ".join(r.message for r in fallen))
    on_spot = [f"{r.namespace}/{r.name}" for r in spot if r.state is SpotState.SPOT]
    message = (f"On Spot capacity: {', '.join(on_spot)}" if on_spot else "No service is held on Spot capacity")
    if skipped:
        message += f"; not moved: {'; '.join(skipped)}"
    return cond.Condition(SPOT_FALLBACK, cond.FALSE, SPOT_AVAILABLE if on_spot else NO_SPOT_SWITCH, message)


def _spot_events(before: Sequence[SpotRecord], after: Sequence[SpotRecord]) -> list[tuple[str, str, str]]:
    """One Event per service switched to Spot, fallen back to on-demand, or released, at the transition."""
    old = {(e.namespace, e.name): e.state.value for e in before}
    events = []
    for r in after:
        prev = old.pop((r.namespace, r.name), None)
        if prev == r.state.value:
            continue
        dry = " (dry run, not applied)" if r.dry_run else ""
        if r.state is SpotState.SPOT:
            events.append(("Warning", SWITCHED_TO_SPOT,
                           f"SwitchToSpot InferenceService {r.namespace}/{r.name} at {r.threshold_percent} %{dry}"))
        else:
            events.append(("Warning", SPOT_PENDING_TIMEOUT,
                           f"InferenceService {r.namespace}/{r.name}: {r.message}{dry}"))
    for (ns, n), state in sorted(old.items()):
        if state == SpotState.SPOT.value:
            events.append(("Normal", SPOT_LIFTED, f"InferenceService {ns}/{n} back on on-demand capacity"))
    return events


@dataclass(frozen=True)
class _Stored:
    """What the status holds, read back (each part raises on a malformed status)."""

    ledger: Ledger
    alert_state: AlertState
    outbox: tuple[PendingAlert, ...]
    anomaly_state: AnomalyState
    rejected: tuple[TenantRejection, ...] = ()
    tenant_held: tuple[Decimal, dt.datetime | None] = (Decimal(0), None)
    """``status.tenantSpent`` and the ``status.periodStart`` it belongs to."""


def _read_stored(policy: Mapping[str, Any], ref: PolicyRef, attempts: Sequence[Attempt], now: dt.datetime,
                 in_flight: Collection[OutboxKey]) -> tuple[BudgetSpec, BudgetStatus, _Stored] | PolicyPlan:
    """The parsed spec and what the status holds (ledger, alert state, outbox, spend-anomaly state); when either
    cannot be read, the :func:`_hold` plan that reports it instead (``InvalidSpec`` / ``InvalidStatus``)."""
    status = read_budget_status(policy, ref)
    try:
        spec = parse_budget_spec(policy.get("spec") or {})
    except InvalidBudgetSpec as exc:
        return _hold(policy, INVALID_SPEC, str(exc), attempts, now, in_flight, status)
    if status.problem is not None or status.outbox is None or status.ledger is None:
        return _hold(policy, INVALID_STATUS, f"{status.problem}; fix or clear the status by hand (spend is not "
                                             f"reset automatically)", attempts, now, in_flight, status)
    # The stored tenants' figure bounds the next one from below only for the spec it was measured for.
    same_spec = status.observed_generation == int(policy["metadata"].get("generation") or 0)
    tenant = status.tenant_spent_usd if same_spec else None
    return spec, status, _Stored(status.ledger, status.alert_state, status.outbox, status.anomaly_state,
                                 status.rejections, (Decimal(0), None) if tenant is None
                                 else (tenant, status.ledger.period_start))


def reject_annotation_values(ref: PolicyRef, rejections: Sequence[TenantRejection]) -> dict[tuple[str, str], str]:
    """(namespace, name) -> the value of this policy's tenant-rejection annotation on that service (applied pairs
    only: dry run writes none)."""
    by_service: dict[tuple[str, str], list[TenantRejection]] = {}
    for r in rejections:
        if not r.dry_run:
            by_service.setdefault((r.namespace, r.name), []).append(r)
    return {k: TenantReject(str(ref), tuple(sorted(r.tenant for r in rs)), max(r.until for r in rs),
                            min(r.threshold_percent for r in rs)).encode() for k, rs in by_service.items()}


def annotation_writes(ref: PolicyRef, plan: BudgetPlan, isvcs: Sequence[Mapping[str, Any]]
                      ) -> list[AnnotationWrite]:
    """Enforcement as annotations, level-based: the writes that bring every InferenceService's cap, Spot and
    tenant annotations of this policy to the whole desired set (a cap per enforced service not in dry run, a Spot
    switch per applied Spot record, the tenants ``Reject`` refuses per service, and the budgeted tenants on every
    selected service of a tenant-scoped policy, for the gateway not to fold them; nothing elsewhere)."""
    key, spot_key = cap_annotation_key(ref.namespace, ref.name), spot_annotation_key(ref.namespace, ref.name)
    reject_key = reject_annotation_key(ref.namespace, ref.name)
    tenants_key = tenants_annotation_key(ref.namespace, ref.name)
    wanted = {(e.namespace, e.name): cap_annotation_value(ref, e.action.value, e.max_replicas)
              for e in plan.enforced_services if not e.dry_run}
    wanted_spot = {(r.namespace, r.name): SpotSwitch(str(ref), r.threshold_percent).encode()
                   for r in plan.spot if r.applied}
    wanted_reject = reject_annotation_values(ref, plan.rejections)
    wanted_tenants = {(ns, name): encode_tenants(tenants) for ns, name, tenants in plan.budgeted}
    writes = []
    for isvc in isvcs:
        m = isvc.get("metadata") or {}
        target = (m.get("namespace", ""), m.get("name", ""))
        for k, values in ((key, wanted), (spot_key, wanted_spot), (reject_key, wanted_reject),
                          (tenants_key, wanted_tenants)):
            current = (m.get("annotations") or {}).get(k)
            value = values.get(target)
            if not same_value(current, value):
                writes.append(AnnotationWrite(target[0], target[1], k, value))
    return writes


def burn_samples(services: Sequence[ServiceState], now: dt.datetime) -> dict[tuple[str, str], BurnSample]:
    """This evaluation's burn-rate sample per priced service (USD/h, replicas, USD per replica-hour).

    The price per replica is the effective one (cost / replicas): a move to Spot, or a fallback from it, shows as
    a price change of the driver, not as replicas that did not change.
    """
    return {(s.namespace, s.name): BurnSample(now, float(s.cost_usd_per_hour), s.replicas or 0,
                                              float(s.cost_usd_per_hour) / s.replicas if s.replicas
                                              else float(s.usd_per_replica_hour))
            for s in services if s.cost_usd_per_hour is not None and s.usd_per_replica_hour is not None}


def _spend_anomalies(plan: BudgetPlan, spec: BudgetSpec, ref: PolicyRef,
                     samples: Mapping[tuple[str, str], BurnSample],
                     history: Mapping[tuple[str, str], Sequence[BurnSample]] | None, state: AnomalyState,
                     config: AnomalyConfig, history_read: HistoryRead | None,
                     drivers: tuple[Sequence[ServiceState], TenantUsageRead | None] = ((), None)
                     ) -> tuple[tuple[BudgetAlert, ...], AnomalyState, cond.Condition | None]:
    """The budget plan's alerts plus one ``SpendAnomaly`` alert naming the services whose sample leaves their own
    history (or the resolve of that alert once no service is in an anomaly:
    :func:`~modalscale.costmodel.budget.alerts.spend_anomaly_over`), and the anomaly state after it; no anomaly
    is decided on a history that could not be read, and a
    selected service (of ``drivers``) without a sample now keeps its anomaly state. The alerts name the top
    tenants and modalities of ``drivers`` (the selected services, what showback read): :func:`with_drivers`.
    ``config`` is scaled to the policy's interval first (:func:`~modalscale.costmodel.anomaly.for_interval`), and
    the third value is the ``SpendAnomalyDetection`` condition (:func:`_detection_condition`)."""
    config = for_interval(config, spec.evaluation_interval_s)  # sample minimums this interval can meet
    series = {k: [*(history or {}).get(k, ()), v] for k, v in samples.items()}
    started: list[Anomaly] = []
    before = state
    if history_read is None or history_read.ok:  # never decide on a history that could not be read
        # A selected service without a sample now (replicas or price unknown) keeps its anomaly as stored.
        selected = {*samples, *((s.namespace, s.name) for s in drivers[0])}
        started, state = detect(series, state, config, in_scope=selected)
    alerts = plan.alerts
    if started:
        alerts += (spend_anomaly_alert(plan, spec, ref, [a.describe() for a in started],
                                       [f"{a.namespace}/{a.name}" for a in started]),)
    if before.active and not state.active:  # the last anomaly ended (or left the selection): resolve the alert
        alerts = spend_anomaly_over(alerts, plan, spec, ref, min(before.active.values()),
                                    [f"{ns}/{name}" for ns, name in sorted(before.active)])
    detection = _detection_condition(samples, history, config, spec.evaluation_interval_s, history_read,
                                     drivers[0])
    return with_drivers(alerts, *drivers), state, detection


def _detection_condition(samples: Mapping[tuple[str, str], BurnSample],
                         history: Mapping[tuple[str, str], Sequence[BurnSample]] | None, config: AnomalyConfig,
                         interval_s: float, history_read: HistoryRead | None,
                         services: Sequence[ServiceState] = ()) -> cond.Condition:
    """``SpendAnomalyDetection``: True when every sampled service's sample was scored against a baseline, False
    naming those with too little history (the samples their baseline needs, since when they have samples and when
    the first decision comes at this interval), or while the history could not be read. Without a sample (no
    selected service has a burn rate: none priced, or their pods not listed) Unknown: ``NothingPriced`` naming
    the selected ``services`` and why, or ``NoServicesSelected`` (:func:`_wanted_conditions` writes it only over
    one written before: a stale True would say they are still scored). The message
    moves only when the history does not accrue as expected: conditions are material to the status heartbeat, so a
    count that grew every evaluation would write the status every time."""
    if not samples:
        if not services:
            return cond.Condition(SPEND_ANOMALY_DETECTION, cond.UNKNOWN, NO_SERVICES_SELECTED,
                                  "No spend anomaly is decided: spec.selector selects no InferenceService")
        why = [f"{s.namespace}/{s.name}: {s.unknown_reason or 'no price'}" for s in services[:5]]
        more = f"; and {len(services) - 5} more" if len(services) > 5 else ""
        return cond.Condition(SPEND_ANOMALY_DETECTION, cond.UNKNOWN, NOTHING_PRICED,
                              f"No spend anomaly is decided: no selected InferenceService has a burn rate now "
                              f"({'; '.join(why)}{more})")
    if history_read is not None and not history_read.ok:
        return cond.Condition(SPEND_ANOMALY_DETECTION, cond.FALSE, HISTORY_UNAVAILABLE,
                              "No spend anomaly is decided while the burn-rate history cannot be read (see "
                              "SpendAnomalyHistory)")
    # The first decision comes once the recent window (recent_s back to smooth_s) holds min_recent_samples: the
    # earliest sample in it is then (ceil(smooth_s / interval) + min_recent_samples - 1) intervals old.
    wait_s = (math.ceil(config.smooth_s / interval_s) + config.min_recent_samples - 1) * interval_s
    short = []
    for (ns, name), sample in sorted(samples.items()):
        past = (history or {}).get((ns, name), ())
        if score(past, sample, config) is not None:
            continue
        held = [s for s in past if (sample.time - s.time).total_seconds() < config.recent_s]
        when = (f"has burn-rate samples from {cond.rfc3339(held[0].time)}, so the first decision comes at "
                f"{cond.rfc3339(held[0].time + dt.timedelta(seconds=wait_s))}" if held else
                f"has no burn-rate sample before this evaluation, so the first decision comes {wait_s:g} s after "
                f"its first")
        short.append(f"{ns}/{name}: no spend anomaly is decided until its baseline holds "
                     f"{config.min_recent_samples} burn-rate samples of the last {config.recent_s:g} s (at "
                     f"evaluationIntervalSeconds {interval_s:g}); it {when}")
    if short:
        more = f"; and {len(short) - 5} more" if len(short) > 5 else ""
        return cond.Condition(SPEND_ANOMALY_DETECTION, cond.FALSE, INSUFFICIENT_HISTORY, "; ".join(short[:5]) + more)
    return cond.Condition(SPEND_ANOMALY_DETECTION, cond.TRUE, DETECTING,
                          f"Every priced InferenceService ({len(samples)}) is scored against its own baseline")


DRIVER_KINDS = frozenset({AlertKind.THRESHOLD_CROSSED, AlertKind.FORECAST_EXCEEDED, AlertKind.SPEND_ANOMALY})
"""Alerts that name the top tenants and modalities behind the spend (not a recovery or a blind notice)."""


def wants_drivers(alerts: Sequence[BudgetAlert]) -> bool:
    """True when one of ``alerts`` would name the tenants behind the spend (so the handler reads showback)."""
    return any(a.kind in DRIVER_KINDS for a in alerts)


def with_drivers(alerts: Sequence[BudgetAlert], services: Sequence[ServiceState], read: TenantUsageRead | None
                 ) -> tuple[BudgetAlert, ...]:
    """``alerts`` with the top tenants and modalities of the selected ``services`` (showback's allocation of
    ``read``, :func:`~modalscale.costmodel.showback.drivers_of`) on each of :data:`DRIVER_KINDS`; unchanged when
    nothing was read, the read failed or it holds no request of these services (never a guess)."""
    if read is None or read.error or not wants_drivers(alerts):
        return tuple(alerts)
    drivers = drivers_of([(s.namespace, s.name) for s in services], read.windows, read.usage)
    if drivers is None:
        return tuple(alerts)
    return tuple(replace(a, drivers=drivers) if a.kind in DRIVER_KINDS else a for a in alerts)


def _outbox_update(outbox: Sequence[PendingAlert], attempts: Sequence[Attempt], alerts: Sequence[BudgetAlert],
                   spec: BudgetSpec, now: dt.datetime, in_flight: Collection[OutboxKey]) -> OutboxUpdate:
    """The outbox after the finished rounds, expiry (entries of a renamed notification go on to the one with their
    target), then this evaluation's alerts (one entry per target)."""
    names = [n.name for n in spec.notifications]
    targets = {n.name: n.target for n in spec.notifications}
    update = outbox_after(outbox, attempts, now, names, in_flight, targets)
    pending, dropped = enqueue(update.pending, alerts, names, now, targets=targets)
    return OutboxUpdate(pending, update.delivered, update.abandoned + dropped)


def _ready_and_exceeded(plan: BudgetPlan, spec: BudgetSpec, ns: str, services: Sequence[ServiceState],
                        refused: Sequence[str]) -> tuple[cond.Condition, cond.Condition]:
    """``Ready`` and ``BudgetExceeded`` for the selected ``services`` and the ``refused`` namespaces; namespaces
    listed in ``spec.selector.namespaces``, allowed and selecting no service are named in ``Evaluated``'s message
    (a typo reads like a quiet namespace)."""
    n = len(services)
    empty = [e for e in spec.selector.namespaces if e not in refused and all(s.namespace != e for s in services)]
    if plan.blind:  # some running service is not priced: spend is a lower bound, still enforced on
        ready = cond.Condition(READY, cond.FALSE, GOVERNANCE_BLIND, plan.message)
        exceeded = (cond.Condition(BUDGET_EXCEEDED, cond.TRUE, plan.reason, plan.message)
                    if plan.state.value == "Exceeded" else
                    cond.Condition(BUDGET_EXCEEDED, cond.UNKNOWN, GOVERNANCE_BLIND, plan.message))
    elif n == 0:
        ready = cond.Condition(READY, cond.TRUE, NO_SERVICES_SELECTED, (
            f"spec.selector matches no InferenceService ({spec.selector.describe(ns)}): nothing is counted or "
            f"enforced; check spec.selector.namespaces and the labels"))
        exceeded = cond.Condition(BUDGET_EXCEEDED, cond.TRUE if plan.state.value == "Exceeded" else cond.FALSE,
                                  plan.reason, plan.message)
    else:
        none_there = (f"; spec.selector.namespaces lists {', '.join(empty)}, where it selects no InferenceService "
                      f"(a typo, or a namespace with none yet?)" if empty else "")
        ready = cond.Condition(READY, cond.TRUE, EVALUATED,
                               f"Evaluated {n} InferenceService{'s' if n != 1 else ''} every "
                               f"{spec.evaluation_interval_s} s{none_there}")
        exceeded = cond.Condition(BUDGET_EXCEEDED, cond.TRUE if plan.state.value == "Exceeded" else cond.FALSE,
                                  plan.reason, plan.message)
    if refused:
        ready = cond.Condition(READY, cond.FALSE, NAMESPACE_NOT_ALLOWED, "; ".join([
            f"spec.selector.namespaces lists {', '.join(refused)}, but a BudgetPolicy in namespace {ns} may select "
            f"only its own namespace: nothing there is counted or enforced (the rest of the policy is). Fix: "
            f"create the policy in the namespace it governs, or have the operator's admin add {ns} to "
            f"MODALSCALE_BUDGET_ADMIN_NAMESPACES (chart value config.budgetAdminNamespaces)",
            *([ready.message] if ready.status == cond.FALSE or n == 0 else [])]))
    return ready, exceeded


def _wanted_conditions(ready: cond.Condition, exceeded: cond.Condition, plan: BudgetPlan, spec: BudgetSpec,
                       old_conditions: list[ConditionStatus], update: OutboxUpdate,
                       history_read: HistoryRead | None, detection: cond.Condition | None = None
                       ) -> list[cond.Condition]:
    """Every condition this evaluation writes: Ready, BudgetExceeded, AlertDelivered, then SpotFallback (only for
    policies that use SwitchToSpot, or did: the condition then says it is over), SpendAnomalyHistory (only
    when the history is read back from Prometheus, or was: then Unknown/PrometheusNotConfigured) and
    SpendAnomalyDetection (:func:`_detection_condition`, once a selected service was priced)."""
    wanted = [ready, exceeded, _alert_condition(old_conditions, update, update.abandoned, len(spec.notifications))]
    if (any(ThresholdAction.SWITCH_TO_SPOT in t.actions for t in spec.thresholds)
            or cond.get(old_conditions, SPOT_FALLBACK) is not None):
        wanted.append(_spot_condition(plan.spot, plan.spot_skipped))
    if history_read is not None:
        wanted.append(cond.Condition(
            SPEND_ANOMALY_HISTORY, cond.TRUE if history_read.ok else cond.FALSE,
            HISTORY_READ if history_read.ok else HISTORY_UNAVAILABLE, history_read.message))
    elif cond.get(old_conditions, SPEND_ANOMALY_HISTORY) is not None:  # an operator since started without one
        wanted.append(cond.Condition(SPEND_ANOMALY_HISTORY, cond.UNKNOWN, PROMETHEUS_NOT_CONFIGURED,
                                     "The burn-rate history is kept in memory only, not read back after a restart: "
                                     "MODALSCALE_PROMETHEUS_URL (chart value config.prometheusUrl) is not set"))
    if detection is not None and (detection.status != cond.UNKNOWN
                                  or cond.get(old_conditions, SPEND_ANOMALY_DETECTION) is not None):
        wanted.append(detection)  # Unknown (nothing has a burn rate) only over one written before
    return wanted


def _policy_events(stored: BudgetStatus, conditions: list[ConditionStatus], old_conditions: list[ConditionStatus],
                   ready: cond.Condition, plan: BudgetPlan, alerts: Sequence[BudgetAlert],
                   abandoned: Sequence[Abandoned]) -> list[tuple[str, str, str]]:
    """The Events of an evaluation that writes its status: condition transitions, ``NoServicesSelected`` once on
    the way in, enforcement and Spot transitions, one per alert, and the abandoned deliveries; one per cause
    (:func:`_one_per_cause`)."""
    events = _events_for(old_conditions, conditions)
    old_ready = cond.get(old_conditions, READY) or {}
    if ready.reason == NO_SERVICES_SELECTED and old_ready.get("reason") != NO_SERVICES_SELECTED:
        events = [e for e in events if e[1] != NO_SERVICES_SELECTED]
        events.append(("Warning", NO_SERVICES_SELECTED, ready.message))  # once, on the way in
    per_object = (_enforcement_events(stored.alert_state.enforced, plan.enforced_services)
                  + _spot_events(stored.alert_state.spot, plan.spot)
                  + _reject_events(stored.rejections, plan.rejections))
    alerted = [("Normal" if alert.kind is AlertKind.RECOVERED else "Warning", alert.kind.value, alert.title)
               for alert in alerts]
    return _abandoned_events(_one_per_cause(events, per_object, alerted), abandoned)


def _one_per_cause(transitions: Sequence[tuple[str, str, str]], per_object: Sequence[tuple[str, str, str]],
                   alerted: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """One Event per cause, of the right type: the condition ``transitions`` and the ``alerted`` Events (one per
    alert) keep one Event per reason, the first Warning (else the first), conditions first; the ``per_object``
    Events (enforcement, Spot, tenants: one per service) are all kept and replace a condition's Event of their
    reason. So a service that can no longer be priced is Ready's Warning ``GovernanceBlind``, naming it and why,
    not also BudgetExceeded's Normal one and the alert's Warning of that reason; a Spot fallback is the service's
    Warning, not also SpotFallback's Normal; SpendAnomalyDetection posts none for a cause another condition
    reports (``Unknown``: Ready's ``GovernanceBlind`` or ``NoServicesSelected``; ``HistoryUnavailable``:
    :func:`_events_for`)."""
    objects = {e[1] for e in per_object}
    pool = [("transition", i, e) for i, e in enumerate(transitions) if e[1] not in objects]
    pool += [("alert", i, e) for i, e in enumerate(alerted)]
    chosen: dict[str, tuple[str, int, tuple[str, str, str]]] = {}
    for item in pool:
        reason, type_ = item[2][1], item[2][0]
        if reason not in chosen or (type_ == "Warning" and chosen[reason][2][0] != "Warning"):
            chosen[reason] = item
    kept = {(kind, i) for kind, i, _ in chosen.values()}
    return ([e for i, e in enumerate(transitions) if ("transition", i) in kept] + list(per_object)
            + [e for i, e in enumerate(alerted) if ("alert", i) in kept])


def _tenant_spend(spec: BudgetSpec, services: Sequence[ServiceState], observed: BudgetObserved, stored: _Stored
                  ) -> TenantSpend | None:
    """The tenants' spend of a policy with ``spec.selector.tenants`` (None without): showback's allocation of what
    was read (``costmodel.budget.reject.tenant_spend``), with the last stored figure to hold on when unknown."""
    if not spec.selector.tenants:
        return None
    read, held = observed.tenant_usage, stored.tenant_held
    if read is None:
        read = TenantUsageRead(error="tenant usage not read (no Prometheus configured: set "
                                     "MODALSCALE_PROMETHEUS_URL, chart value config.prometheusUrl)")
    measured = tenant_spend(spec.selector.tenants, [(s.namespace, s.name) for s in services], read.windows,
                            read.usage, read.error)
    return TenantSpend(measured.spent_usd, measured.by_tenant, measured.unknown_reason, held[0], held[1])


def plan_policy(policy: Mapping[str, Any], observed: BudgetObserved, catalog: Catalog,
                attempts: Sequence[Attempt], now: dt.datetime, in_flight: Collection[OutboxKey] = frozenset(),
                history: Mapping[tuple[str, str], Sequence[BurnSample]] | None = None,
                anomaly_config: AnomalyConfig = AnomalyConfig(), history_read: HistoryRead | None = None,
                admin_namespaces: Collection[str] = (), holder: str = "",
                status_heartbeat_min_s: int = HEARTBEAT_MIN_S) -> PolicyPlan:
    """Plan one evaluation of a BudgetPolicy.

    Steps (each pure):

    1. :func:`_read_stored`: the spec and what the status holds (either unreadable: :func:`_hold`);
    2. :func:`selected_services` less the :func:`refused_namespaces`, then (with :func:`_tenant_spend`)
       :func:`~modalscale.costmodel.evaluation.evaluate_budget`: the ledger and the budget plan;
    3. :func:`annotation_writes`: enforcement as annotations;
    4. :func:`burn_samples` and :func:`_spend_anomalies`: the spend anomalies and their alert;
    5. :func:`_outbox_update`: the outbox after finished rounds, expiry and this evaluation's alerts;
    6. :func:`_ready_and_exceeded` and :func:`_wanted_conditions`: the conditions;
    7. ``write_budget_status`` and :func:`_policy_events`: the status patch and, when it writes, the Events.

    Args:
        policy: The BudgetPolicy as stored now (``metadata``, ``spec``, ``status``; camelCase).
        observed: InferenceServices and pods in :func:`observed_namespaces` of ``policy``.
        catalog: Prices (the operator's catalog, the same one InferenceServices are priced with).
        attempts: Delivery rounds of outbox entries that finished since the status was read (may be empty).
        now: Timezone-aware UTC instant of this evaluation; never read from the clock here.
        in_flight: Keys of outbox entries being sent right now by this process (not due, not expired).
        history: Earlier burn-rate samples per service, oldest first (``PolicyPlan.burn_samples`` of earlier
            evaluations); None or empty: no anomaly can be decided yet.
        anomaly_config: Detector settings as configured (scaled to the interval here: ``for_interval``).
        history_read: How reading ``history`` back after start went (None: history kept in memory only, no
            ``SpendAnomalyHistory`` condition); ``ok`` False: no anomaly is decided and the services in an
            anomaly (``status.spendAnomalies``) are held.
        admin_namespaces: Namespaces whose policies may select other namespaces (``*``: all;
            :func:`refused_namespaces`). A policy that selects a namespace it may not gets ``Ready=False`` /
            ``NamespaceNotAllowed`` naming ``spec.selector.namespaces`` and the fix; nothing there is counted or
            enforced (caps it holds there are lifted), the rest of the policy is evaluated as usual.
        holder: This operator process (``BudgetRuntime.holder``), marked on the entries sent (``mark_sending``).
        status_heartbeat_min_s: Floor of the status heartbeat, seconds (:func:`heartbeat_s`).
    Returns:
        :class:`PolicyPlan`. An invalid spec or unreadable status yields ``Ready=False`` (``InvalidSpec`` /
        ``InvalidStatus``) and no other change: enforcement in force is held, nothing new is alerted and
        nothing is sent (finished rounds are still recorded in a readable outbox).
    """
    meta = policy["metadata"]
    ns, name = meta["namespace"], meta["name"]
    ref = PolicyRef(ns, name)
    generation = int(meta.get("generation") or 0)
    read = _read_stored(policy, ref, attempts, now, in_flight)                               # 1
    if isinstance(read, PolicyPlan):
        return read
    spec, status, stored = read

    refused = refused_namespaces(ns, spec.selector.namespaces, admin_namespaces)                    # 2
    services = [s for s in selected_services(spec, ns, observed, catalog) if s.namespace not in refused]
    evaluation = evaluate_budget(spec, stored.ledger, services, stored.alert_state, now, policy=ref,
                                 tenants=_tenant_spend(spec, services, observed, stored), rejected=stored.rejected,
                                 listed_at=observed.listed_at)
    plan, ledger = evaluation.plan, evaluation.ledger  # ledger, planner, rates in force: the month benchmark's too
    writes = annotation_writes(ref, plan, observed.isvcs)                                            # 3
    samples = burn_samples(services, now)                                                            # 4
    alerts, anomaly_state, detection = _spend_anomalies(plan, spec, ref, samples, history, stored.anomaly_state,
                                                        anomaly_config, history_read, (services, observed.tenant_usage))
    update = _outbox_update(stored.outbox, attempts, alerts, spec, now, in_flight)                   # 5

    old_conditions = list(status.conditions)                                            # 6
    ready, exceeded = _ready_and_exceeded(plan, spec, ns, services, refused)
    conditions = cond.upsert(old_conditions, _wanted_conditions(ready, exceeded, plan, spec, old_conditions,
                                                                update, history_read, detection), generation, now)

    # Every pending entry is in status, those sent marked as sent by this process, by the time the handler sends.
    pending, sends = mark_sending(update.pending, due_alerts(update.pending, now, in_flight), now, holder)
    desired = status_of_plan(plan, ledger, generation=generation, outbox=pending,                    # 7
                             anomaly_state=anomaly_state, conditions=conditions)
    beat_s = heartbeat_s(spec.evaluation_interval_s, status_heartbeat_min_s)
    patch = write_budget_status(desired, policy, heartbeat_s=beat_s, now=now)
    events = _policy_events(status, conditions, old_conditions, ready, plan, alerts, update.abandoned) if patch else []
    return PolicyPlan(writes, patch, events, alerts if patch else (), spec.notifications,
                      spec.evaluation_interval_s, plan, sends,
                      next_due_s(pending, now, {*in_flight, *(e.key for e in sends)}), samples, anomaly_state,
                      *exported_spend(evaluation.advance.closed_period, ledger))


def exported_spend(closed: ClosedPeriod | None, ledger: Ledger
                   ) -> tuple[dict[tuple[str, str], Decimal], dt.datetime | None, dt.datetime | None]:
    """What ``modalscale_budget_service_spend_usd_total`` carries after an evaluation, and its time: the ledger's
    spend per service in the current period up to its ``observedTime``; from the evaluation that closed a period,
    that period's final spend per service at its end instead (the next evaluation exports the new period's). A
    reader of the running total then sees the closed period's tail (its last evaluation to its end, charged to it)
    and the new period from its start; with the new period's first figure only, a drop read as a reset, the tail
    was in no sample (showback over midnight lost up to an evaluation interval of spend). The third figure is the
    start of the period the figures are of (the series' ``period_start`` label: each period is its own series)."""
    if closed is not None:
        return dict(closed.spent_by_service), closed.period_end, closed.period_start
    return {e.key: e.spent_usd for e in ledger.entries}, ledger.observed_time, ledger.period_start


def lift_all(policy: Mapping[str, Any], isvcs: Sequence[Mapping[str, Any]]) -> list[AnnotationWrite]:
    """Deletions of this policy's cap and Spot annotations from every InferenceService that carries them (policy
    deleted)."""
    ns, name = policy["metadata"]["namespace"], policy["metadata"]["name"]
    writes = []
    for isvc in isvcs:
        m = isvc.get("metadata") or {}
        for key in (cap_annotation_key(ns, name), spot_annotation_key(ns, name), reject_annotation_key(ns, name),
                    tenants_annotation_key(ns, name)):
            if key in (m.get("annotations") or {}):
                writes.append(AnnotationWrite(m.get("namespace", ""), m.get("name", ""), key, None))
    return writes


def lift_events(policy: Mapping[str, Any], lifted: Sequence[AnnotationWrite], isvcs: Sequence[Mapping[str, Any]]
                ) -> list[tuple[dict[str, Any], str, str, str]]:
    """The Events of a deleted policy's annotations that were deleted (``lifted``, from :func:`lift_all` over
    ``isvcs``), as ``(regarding, type, reason, message)``: one per service and action lifted, in service order,
    each on that InferenceService (``regarding``: its object as in ``isvcs``, with apiVersion and kind), never on
    the policy, which is gone by then: ``EnforcementLifted`` for its cap, ``SpotLifted`` for its Spot switch,
    ``TenantsAdmitted`` for the tenants it refused; none for the list of budgeted tenants, which held nothing.
    (Each deleted annotation was a 'Budget cap lifted' Event: 2 alike for a service capped and on Spot, 1 for a
    cap it never had on each service of a tenant-scoped policy; and all of them were posted on the deleted
    policy, so no service's ``kubectl describe`` showed them.)"""
    ns, name = policy["metadata"]["namespace"], policy["metadata"]["name"]
    why = f"BudgetPolicy {ns}/{name} deleted"
    kinds = {cap_annotation_key(ns, name): ("Normal", ENFORCEMENT_LIFTED, "Budget cap lifted from InferenceService "
                                                                          "{0}/{1}: " + why),
             spot_annotation_key(ns, name): ("Normal", SPOT_LIFTED, "InferenceService {0}/{1} back on on-demand "
                                                                    "capacity: " + why),
             reject_annotation_key(ns, name): ("Normal", TENANTS_ADMITTED, "InferenceService {0}/{1}: tenants "
                                                                           "admitted again: " + why)}
    services = {((i.get("metadata") or {}).get("namespace", ""), (i.get("metadata") or {}).get("name", "")): i
                for i in isvcs}
    events = {}
    for w in sorted(lifted, key=lambda w: (w.namespace, w.name)):
        if w.key in kinds:
            type_, reason, text = kinds[w.key]
            events[(w.namespace, w.name, reason)] = (dict(services[(w.namespace, w.name)]), type_, reason,
                                                     text.format(w.namespace, w.name))
    return list(events.values())


def receiver_problem(notification: Notification, reason: str, message: str) -> DeliveryResult:
    """A :class:`DeliveryResult` for a receiver that could not even be tried (e.g. its Secret is missing)."""
    return DeliveryResult(notification.type, notification.name, False, reason, message, attempts=0)


__all__ = [
    "AnnotationWrite", "BudgetObserved", "GonePod", "PolicyPlan", "TenantUsageRead", "annotation_writes",
    "burn_samples", "gone_pod_runs", "cap_annotation_value", "heartbeat_s", "lift_all", "lift_events",
    "observed_namespaces",
    "plan_policy", "pod_runs", "receiver_problem", "refused_namespaces", "reject_annotation_values",
    "longest_stop_s", "selected_services", "spot_pending_since", "tenant_window_s", "wants_drivers", "with_drivers",
]
