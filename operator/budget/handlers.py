"""kopf registration for BudgetPolicies: one daemon per policy that observes, plans (pure), applies and alerts.

Shape (STYLE C2 with a daemon instead of change handlers, because the work is periodic, not change-driven):
every ``spec.evaluationIntervalSeconds`` (re-read each time, 1..3600 s) the daemon reads the policy fresh,
reads the InferenceServices and pods it selects (``budget.observe``), plans with
``budget.plan.plan_policy`` (which calls ``costmodel.budget.plan_budget``), then applies in this order:

1. cap annotations on InferenceServices (``Writer.patch_annotations``; the InferenceService reconcile, woken by
   the annotation change, is the one writer of Deployment replicas);
2. the status patch (only when something other than the clock changed), then Events for transitions; new
   alerts enter the outbox ``status.pendingAlerts`` in this patch;
3. the outbox entries that are due (``PolicyPlan.sends``), only once the status that holds them was written.

Once the status is written, each priced service's burn-rate sample joins the policy's spend-anomaly history
(``BudgetRuntime.burn_history``, in memory and bounded; ``modalscale.costmodel.anomaly``), the input of the next
evaluation's anomaly decision, and is exported as gauges for Prometheus. With ``MODALSCALE_PROMETHEUS_URL`` set,
the first evaluation of a policy after start reads that history back from Prometheus
(``modalscale.operator.budget.history``); until a read succeeds no anomaly is decided (retried every
``AnomalyConfig.history_retry_s``, 30 s by default). The services already alerted are ``status.spendAnomalies``,
not memory.

Delivery (the pump: ``modalscale.operator.budget.delivery``) is at least once and never blocks evaluation or
deletion: each batch of due entries runs as an asyncio task of its own, with a deadline (:data:`DELIVERY_RETRY`
bounds every round; the batch is cut at
``most entries per receiver x max_total_s + DELIVERY_SLACK_S``); batches of one policy run in order. Entries
in a batch are *in flight* (kept in memory, never sent twice by this process). Results return through memory
and wake the daemon, whose next evaluation removes delivered entries from the outbox, schedules failed ones
again (backoff in ``modalscale.costmodel.outbox``) and writes ``AlertDelivered``. A batch in flight when the
operator stops is not lost: its entries are still in status and the next operator sends them (once more if
they had arrived). The daemon also wakes when the next entry is due, if that is before the next interval.

A pod watch (``kopf.on.event`` on pods carrying ``modalscale.io/inferenceservice`` or, the request gateway's,
``modalscale.io/gateway``: :func:`priced_pod`; no finalizer) records every such pod's deletion
(``modalscale.operator.budget.podstops``), so the ledger charges a pod gone between two evaluations to when it
stopped, not up to the evaluation that no longer lists it (a replica) or not at all (a gateway pod, charged by
the listed pods' own runs).

A spec change wakes the daemon at once (watch event whose generation differs from ``observedGeneration``).
Deleting a policy lifts its caps (``on.delete``: the annotation is removed from every InferenceService that
carries it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException

from modalscale import GROUP, VERSION
from modalscale.costmodel.anomaly import AnomalyConfig, BurnSample, for_interval, trim_history
from modalscale.costmodel.budget.status import read_budget_status
from modalscale.costmodel.outbox import Attempt, OutboxKey, PendingAlert
from modalscale.notify.answers import DeliveryResult
from modalscale.operator.budget.delivery import (
    launch_batch,
    stop_deliveries,
)
from modalscale.operator.budget.history import HistoryUnavailable, merge_history
from modalscale.operator.budget.observe import Receiver, read_tenant_usage
from modalscale.operator.budget.plan import (
    BUDGET_PLURAL,
    ISVC_PLURAL,
    PolicyPlan,
    lift_all,
    lift_events,
    observed_namespaces,
    plan_policy,
    tenant_window_s,
    wants_drivers,
)
from modalscale.operator.budget.runtime import BudgetRuntime
from modalscale.operator.budget.spend_anomalies import HistoryRead
from modalscale.operator.deps import Deps, deps_of
from modalscale.operator.isvc.objects import GATEWAY_LABEL, IMAGE_ENCODER_LABEL, SELECTOR_LABEL
from modalscale.operator.settings import Settings

ERROR_RETRY_S = 5.0
"""Seconds before re-evaluating after an API error (or the interval, if shorter)."""

Log = logging.Logger | logging.LoggerAdapter[Any]
BurnHistory = dict[tuple[str, str], list[BurnSample]]
"""One policy's burn-rate samples per (namespace, name) of InferenceService, oldest first."""


@dataclass(frozen=True)
class Evaluation:
    """What the (threaded) evaluation hands back to the daemon."""

    interval_s: int
    sends: tuple[PendingAlert, ...] = ()
    receivers: tuple[Receiver, ...] = ()
    problems: tuple[DeliveryResult, ...] = ()
    next_due_s: float | None = None

    def sleep_s(self) -> float:
        """Seconds until the next evaluation: the interval, or sooner when an outbox entry is due (>= 1 s)."""
        if self.next_due_s is None:
            return float(self.interval_s)
        return min(float(self.interval_s), max(1.0, self.next_due_s))


def evaluate_policy(deps: Deps, runtime: BudgetRuntime, namespace: str, name: str,
                    attempts: Sequence[Attempt], logger: Log,
                    in_flight: frozenset[OutboxKey] = frozenset()) -> Evaluation | None:
    """One evaluation: read, plan, annotate, write status, post Events, resolve receivers (blocking I/O).

    Steps: read the policy and what it selects, read the spend-anomaly history (:func:`_anomaly_history`), plan
    (pure ``plan_policy``), write annotations and status (:func:`_apply_plan`), export and keep the burn-rate
    samples (:func:`_keep_history`), post Events (:func:`_report`), then read the receivers of the entries due
    (:func:`_with_receivers`).

    Args:
        deps: The operator's :class:`~modalscale.operator.deps.Deps` (writer, prices, clock, metrics).
        attempts: Finished delivery rounds to record in the outbox.
        in_flight: Outbox entries being sent now.
    Returns:
        The next interval and the outbox entries to send; None when the policy is gone or being deleted.
    Raises:
        ApiException, urllib3.exceptions.HTTPError: A read or the status write failed; nothing after it was
            done (so ``attempts`` are not recorded yet and must be passed again).
    """
    started = time.monotonic()
    policy = runtime.observer.read_policy(namespace, name)
    if policy is None or policy["metadata"].get("deletionTimestamp"):
        return None
    policy.setdefault("apiVersion", f"{GROUP}/{VERSION}")
    policy.setdefault("kind", "BudgetPolicy")
    # The instant is read before the pods are listed: a pod bound during the listing is one of this evaluation's
    # replicas though bound after its instant; the ledger names it (LedgerEntry.late) so the next evaluation
    # charges it once, by its own run (issue 21, ci58). Reading the instant after the listing instead (318300b)
    # lost the run of a pod bound between the listing and the instant (ci61: 1 pod-second under the meter).
    now = deps.clock()
    admin, heartbeat = deps.settings.budget_admin_namespaces, deps.settings.budget_status_heartbeat_s
    observed = runtime.observer.observe(observed_namespaces(policy, admin), runtime.gone_pods, now)
    observed.listed_at = deps.clock()  # a replica the listing lacks was gone by then, not by `now`
    _read_tenant_usage(runtime, policy, observed, now, logger)
    cfg = _anomaly_config(getattr(deps.settings, "spend_anomaly", None) or AnomalyConfig(), policy)
    history, read = _anomaly_history(runtime, namespace, name, policy, now, cfg, logger)

    def planned() -> PolicyPlan:
        return plan_policy(policy, observed, deps.prices.catalog(), attempts, now, in_flight, history,
                           anomaly_config=cfg, history_read=read, admin_namespaces=admin, holder=runtime.holder,
                           status_heartbeat_min_s=heartbeat)

    plan = planned()
    if _read_drivers(runtime, policy, observed, plan, now, logger):  # alerts name the tenants behind the spend
        plan = planned()  # the same inputs, now with the drivers read
    _apply_plan(deps, namespace, name, plan, logger)
    # The samples join the history only once the status (with status.spendAnomalies and any SpendAnomaly alert
    # in its outbox) is written.
    if runtime.gauges is not None:
        runtime.gauges.export(namespace, name, plan.burn_samples, plan.ledger_spent_usd, plan.ledger_observed_time,
                              plan.ledger_period_start)
    _keep_history(history, plan.burn_samples, now, cfg)
    _report(deps, policy, plan, logger)
    deps.metrics.reconciles.labels(kind="BudgetPolicy", result="ok").inc()
    deps.metrics.reconcile_seconds.labels(kind="BudgetPolicy").observe(time.monotonic() - started)
    return _with_receivers(runtime, namespace, plan, logger)


def _read_tenant_usage(runtime: BudgetRuntime, policy: Mapping[str, Any], observed: Any, now: datetime,
                       logger: Log) -> None:
    """For a policy scoped to tenants (``spec.selector.tenants``): the tenants' showback usage over the period so
    far, set on ``observed.tenant_usage``; a failed read is kept there (with its error) so the planner holds."""
    window_s = tenant_window_s(policy, now)
    if window_s is None:
        return
    observed.tenant_usage = read_tenant_usage(runtime.tenant_usage_source, window_s, now)
    if observed.tenant_usage.error:
        logger.warning("Reading the tenants' usage failed, holding tenant rejections: error=%s",
                       observed.tenant_usage.error)


def _read_drivers(runtime: BudgetRuntime, policy: Mapping[str, Any], observed: Any, plan: Any, now: datetime,
                  logger: Log) -> bool:
    """When the plan alerts on spend (``wants_drivers``) and showback's figures were not read yet, read them over
    the period so far (set on ``observed.tenant_usage``) so the alerts can name the top tenants and modalities.

    Returns:
        True when read: the caller plans again (a pure re-run, same inputs and clock). Read only then: one
        Prometheus read per alerting evaluation, not per evaluation. A failed read: False, and the alerts say
        nothing about tenants.
    """
    if observed.tenant_usage is not None or runtime.tenant_usage_source is None or not wants_drivers(plan.alerts):
        return False
    window_s = tenant_window_s(policy, now, any_policy=True)
    if not window_s:
        return False
    observed.tenant_usage = read_tenant_usage(runtime.tenant_usage_source, window_s, now)
    if observed.tenant_usage.error:
        logger.warning("Reading showback for the alert's top tenants failed, alerting without them: error=%s",
                       observed.tenant_usage.error)
        return False
    return True


def _anomaly_config(cfg: AnomalyConfig, policy: Mapping[str, Any]) -> AnomalyConfig:
    """The detector settings at the policy's evaluation interval (``for_interval``; the planner applies the same,
    idempotent, rule), so the history kept and read back holds the recent window it scores on. An interval that
    does not read leaves ``cfg`` as configured (the planner reports the spec)."""
    try:
        return for_interval(cfg, float((policy.get("spec") or {}).get("evaluationIntervalSeconds") or 60))
    except (TypeError, ValueError):
        return cfg


def _anomaly_history(runtime: BudgetRuntime, namespace: str, name: str, policy: Mapping[str, Any], now: datetime,
                     cfg: AnomalyConfig, logger: Log) -> tuple[BurnHistory, HistoryRead | None]:
    """The policy's burn-rate history in memory, read back from Prometheus first when it has not been yet (or a
    read failed and ``cfg.history_retry_s`` has passed), and how that read went (None: no Prometheus)."""
    uid = str(policy["metadata"].get("uid", ""))
    history = runtime.burn_history.setdefault(uid, {})
    read = runtime.history_read.get(uid)
    if (runtime.history_source is None or (read is not None and read.ok)
            or time.monotonic() < runtime.history_retry_at.get(uid, 0.0)):
        return history, read
    interval_s = float((policy.get("spec") or {}).get("evaluationIntervalSeconds") or 60)
    try:
        loaded = runtime.history_source.read(namespace, name, now, cfg, interval_s)
    except HistoryUnavailable as exc:
        read = HistoryRead(False, f"{exc}; no spend anomaly is decided until the history is read (retried "
                                  f"every {cfg.history_retry_s:g} s)")
        # A hanging Prometheus costs one query timeout per retry, never one per evaluation: budget
        # enforcement does not wait on it.
        runtime.history_retry_at[uid] = time.monotonic() + cfg.history_retry_s
        logger.warning("Reading the spend-anomaly history failed, holding anomaly decisions: error=%s", exc)
    else:
        history = runtime.burn_history[uid] = merge_history(loaded, history)
        read = HistoryRead(True, f"Read {sum(map(len, loaded.values()))} burn-rate samples of {len(loaded)} "
                                 f"InferenceServices from Prometheus at {runtime.history_source.shown_url}")
        logger.info("Read the spend-anomaly history from Prometheus: services=%d samples=%d", len(loaded),
                    sum(map(len, loaded.values())))
    runtime.history_read[uid] = read
    return history, read


def _apply_plan(deps: Deps, namespace: str, name: str, plan: PolicyPlan, logger: Log) -> None:
    """Write the plan, in order: cap annotations on InferenceServices, then the policy's status patch.

    Raises:
        ApiException, urllib3.exceptions.HTTPError: The status write failed (nothing after it was done).
    """
    for w in plan.annotation_writes:
        if deps.writer.patch_annotations(ISVC_PLURAL, w.namespace, w.name, {w.key: w.value}):
            logger.info("Wrote budget annotation on InferenceService: namespace=%s name=%s key=%s value=%s",
                        w.namespace, w.name, w.key, w.value if w.value is not None else "lifted")
    deps.writer.patch_status(BUDGET_PLURAL, namespace, name, plan.status_patch)


def _report(deps: Deps, policy: dict[str, Any], plan: PolicyPlan, logger: Log) -> None:
    """Post the plan's Events on the policy and log the evaluation (when the status changed)."""
    for type_, reason, message in plan.events:
        deps.writer.event(policy, type_, reason, message, logger, queued=False)  # read with the status it goes with
    if plan.budget is not None and plan.status_patch:
        b = plan.budget
        logger.info("Evaluated BudgetPolicy: state=%s spent_usd=%s limit_usd=%s enforced=%d alerts=%d",
                    b.state.value, b.spent_usd,
                    b.limit_usd, len(b.enforced_services), len(plan.alerts))


def _keep_history(history: BurnHistory, samples: Mapping[tuple[str, str], BurnSample], now: datetime,
                  cfg: AnomalyConfig) -> None:
    """Append this evaluation's burn-rate samples to ``history`` (in place) and trim it (``trim_history``)."""
    for key in {*history, *samples}:
        kept = trim_history([*history.get(key, ()), *([samples[key]] if key in samples else [])], now, cfg)
        if kept:
            history[key] = kept
        else:
            del history[key]


def _with_receivers(runtime: BudgetRuntime, namespace: str, plan: PolicyPlan, logger: Log) -> Evaluation:
    """The evaluation's result, with the receivers of the outbox entries due read from their Secrets; a failed
    read sends at the next evaluation (the status holding the entries is written), never raises."""
    if not plan.sends:
        return Evaluation(plan.interval_s, next_due_s=plan.next_due_s)
    targets = {e.notification for e in plan.sends}
    try:
        receivers, problems = runtime.observer.read_receivers(
            namespace, [n for n in plan.notifications if n.name in targets])
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        # The status (with the rounds just recorded) is written: do not raise, send at the next evaluation.
        logger.warning("Reading notification Secrets failed, sending later: error=%s status=%s", type(exc).__name__,
                       getattr(exc, "status", None))
        return Evaluation(plan.interval_s, next_due_s=ERROR_RETRY_S)
    return Evaluation(plan.interval_s, plan.sends, tuple(receivers), tuple(problems), plan.next_due_s)


async def _sleep(stopped: Any, wake: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` unless the daemon is stopped or woken first."""
    waits = [asyncio.ensure_future(stopped.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    wake.clear()


async def run_policy(deps: Deps, runtime: BudgetRuntime, namespace: str, name: str, uid: str, stopped: Any,
                     logger: Log) -> None:
    """The per-policy loop until the daemon is stopped or the policy is gone."""
    wake = runtime.waker(uid)
    try:
        while not stopped:
            # Taken together (no await in between): a round is either in flight or among the results.
            delivered = runtime.delivered.pop(uid, [])
            in_flight = frozenset(runtime.in_flight.get(uid, ()))
            try:
                ev = await asyncio.to_thread(evaluate_policy, deps, runtime, namespace, name, delivered, logger,
                                             in_flight)
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                runtime.delivered[uid] = delivered + runtime.delivered.get(uid, [])
                status = getattr(exc, "status", None)
                logger.warning("Evaluating BudgetPolicy failed, retrying: error=%s status=%s", type(exc).__name__,
                               status)
                deps.metrics.reconciles.labels(kind="BudgetPolicy", result="ApiError").inc()
                await _sleep(stopped, wake, ERROR_RETRY_S)
                continue
            if ev is None:
                runtime.burn_history.pop(uid, None)
                runtime.history_read.pop(uid, None)
                runtime.history_retry_at.pop(uid, None)
                return
            if ev.sends:
                launch_batch(runtime, uid, ev.sends, ev.receivers, ev.problems, deps.clock, logger)
            await _sleep(stopped, wake, ev.sleep_s())
    finally:
        runtime.wake.pop(uid, None)
        if runtime.gauges is not None:  # a stopped daemon (deleted policy, another leader) exports nothing stale
            runtime.gauges.forget(namespace, name)


def lift_caps(deps: Deps, runtime: BudgetRuntime, policy: dict[str, Any], logger: Log) -> int:
    """Remove this policy's annotations (cap, Spot, tenants refused and budgeted) from every InferenceService that
    carries them, with one Event per service and action lifted, posted on that service (``lift_events``; the
    policy is gone by then); returns how many were removed."""
    isvcs = runtime.observer.list_isvcs(observed_namespaces(policy, deps.settings.budget_admin_namespaces))
    lifted = [w for w in lift_all(policy, isvcs)
              if deps.writer.patch_annotations(ISVC_PLURAL, w.namespace, w.name, {w.key: None})]
    for regarding, type_, reason, message in lift_events(policy, lifted, isvcs):
        deps.writer.event(regarding, type_, reason, message, logger, queued=False)
    return len(lifted)


def priced_pod(labels: Mapping[str, str], **_: Any) -> bool:
    """Whether the ledger prices this pod: a replica (``modalscale.io/inferenceservice``), a request-gateway pod
    (``modalscale.io/gateway``) or an image-encoder pool pod (``modalscale.io/image-encoder``) of an
    InferenceService (the pod watch's filter)."""
    return SELECTOR_LABEL in labels or GATEWAY_LABEL in labels or IMAGE_ENCODER_LABEL in labels


def register_budget(registry: kopf.OperatorRegistry, config: Settings) -> None:
    """Register the BudgetPolicy handlers on ``registry``.

    Needs ``memo.deps`` (:class:`modalscale.operator.deps.Deps`) for the writer, catalog, clock, metrics and the
    budget runtime (``Deps.budget``).
    """

    @kopf.on.cleanup(registry=registry)
    async def budget_cleanup(memo: kopf.Memo, logger: Log, **_: Any) -> None:
        await stop_deliveries(deps_of(memo).budget, logger)

    # kopf types every handler's namespace as str | None; a BudgetPolicy is Namespaced, so it is a str.
    @kopf.daemon(GROUP, VERSION, BUDGET_PLURAL, registry=registry, cancellation_backoff=5.0,  # type: ignore[arg-type]
                 cancellation_timeout=10.0)
    async def budget_daemon(name: str, namespace: str, uid: str, stopped: kopf.DaemonStopped, memo: kopf.Memo,
                            logger: Log, **_: Any) -> None:
        deps = deps_of(memo)
        await run_policy(deps, deps.budget, namespace, name, uid, stopped, logger)

    @kopf.on.event(GROUP, VERSION, BUDGET_PLURAL, registry=registry)
    async def budget_spec_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        runtime = deps_of(memo).budget
        uid = body["metadata"].get("uid")
        if uid not in runtime.wake:
            return
        if body["metadata"].get("generation") != read_budget_status(body).observed_generation:
            runtime.wake[uid].set()

    # No finalizer (on.event, not on.delete): a pod's deletion is never held up by the operator. A pod deleted
    # while no operator watches is charged up to the first evaluation that no longer lists it (podstops).
    @kopf.on.event("v1", "pods", when=priced_pod, registry=registry)
    def budget_pod_deleted(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, logger: Log, **_: Any) -> None:
        if event.get("type") != "DELETED":
            return
        deps = deps_of(memo)
        runtime = deps.budget
        if runtime.gone_pods.record(dict(event.get("object") or body), deps.clock()):
            logger.debug("Recorded a deleted pod for the budget ledger: pods_kept=%d", len(runtime.gone_pods))

    @kopf.on.delete(GROUP, VERSION, BUDGET_PLURAL, registry=registry)
    def budget_deleted(body: kopf.Body, memo: kopf.Memo, logger: Log, **_: Any) -> None:
        policy = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BudgetPolicy", "metadata": dict(body["metadata"]),
                  "spec": dict(body.get("spec") or {}), "status": dict(body.get("status") or {})}
        deps = deps_of(memo)
        lifted = lift_caps(deps, deps.budget, policy, logger)
        if lifted:
            logger.info("Lifted budget caps of the deleted BudgetPolicy: services=%d", lifted)


__all__ = ["Evaluation", "evaluate_policy", "lift_caps", "register_budget", "run_policy"]
