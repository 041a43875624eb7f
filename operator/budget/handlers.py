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
evaluation). The services already alerted are ``status.spendAnomalies``, not memory.

Delivery is at least once and never blocks evaluation or deletion: each batch of due entries runs as an
asyncio task of its own, with a deadline (:data:`DELIVERY_RETRY` bounds every round; the batch is cut at
``most entries per receiver x max_total_s + DELIVERY_SLACK_S``); batches of one policy run in order. Entries
in a batch are *in flight* (kept in memory, never sent twice by this process). Results return through memory
and wake the daemon, whose next evaluation removes delivered entries from the outbox, schedules failed ones
again (backoff in ``modalscale.costmodel.outbox``) and writes ``AlertDelivered``. A batch in flight when the
operator stops is not lost: its entries are still in status and the next operator sends them (once more if
they had arrived). The daemon also wakes when the next entry is due, if that is before the next interval.

A pod watch (``kopf.on.event`` on pods carrying ``modalscale.io/inferenceservice``; no finalizer) records every
such pod's deletion (``modalscale.operator.budget.podstops``), so the ledger charges a pod gone between two
evaluations to when it stopped, not up to the evaluation that no longer lists it.

A spec change wakes the daemon at once (watch event whose generation differs from ``observedGeneration``).
Deleting a policy lifts its caps (``on.delete``: the annotation is removed from every InferenceService that
carries it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf
import urllib3
from kubernetes.client.rest import ApiException

from modalscale import GROUP, VERSION
from modalscale.api.conditions import TIMED_OUT
from modalscale.costmodel.anomaly import AnomalyConfig, BurnSample, trim_history
from modalscale.costmodel.outbox import Attempt, OutboxKey, PendingAlert
from modalscale.notify.answers import DeliveryResult
from modalscale.notify.sender import RetryPolicy, Sender
from modalscale.operator.budget.history import (
    BurnGauges,
    HistoryRead,
    HistoryUnavailable,
    PrometheusHistory,
    merge_history,
)
from modalscale.operator.budget.observe import BudgetObserver, Receiver
from modalscale.operator.budget.plan import (
    BUDGET_PLURAL,
    ENFORCEMENT_LIFTED,
    ISVC_PLURAL,
    lift_all,
    observed_namespaces,
    plan_policy,
)
from modalscale.operator.budget.podstops import GonePods
from modalscale.operator.deps import Deps, deps_of
from modalscale.operator.isvc.objects import SELECTOR_LABEL
from modalscale.operator.settings import Settings

DELIVERY_RETRY = RetryPolicy(max_retries=5, base_delay_s=1.0, max_delay_s=15.0, timeout_s=10.0, max_total_s=45.0)
"""Per receiver and alert: 5 retries (429, 5xx, timeouts), 10 s per attempt, 45 s in all (house rule C7)."""
DELIVERY_SLACK_S = 5.0
"""Extra seconds the batch deadline allows beyond the sender's own bound."""
ERROR_RETRY_S = 5.0
"""Seconds before re-evaluating after an API error (or the interval, if shorter)."""
HISTORY_RETRY_S = 30.0
"""Seconds between attempts to read a policy's spend-anomaly history back from Prometheus after a failure."""

Log = logging.Logger | logging.LoggerAdapter[Any]


@dataclass
class BudgetRuntime:
    """Per-process state of the BudgetPolicy handlers, kept in ``memo.budget`` (built at start-up)."""

    observer: BudgetObserver
    sender: Sender | None = None
    """Created inside the event loop on first use (it owns an ``httpx.AsyncClient``)."""
    wake: dict[str, asyncio.Event] = field(default_factory=dict)
    """Policy uid -> event that ends the daemon's sleep early (spec change, delivery finished)."""
    delivered: dict[str, list[Attempt]] = field(default_factory=dict)
    """Policy uid -> finished delivery rounds not yet written to the outbox in status."""
    in_flight: dict[str, set[OutboxKey]] = field(default_factory=dict)
    """Policy uid -> outbox entries being sent now (excluded from what is due)."""
    batches: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Policy uid -> its latest delivery batch (the next one waits for it, so rooms see alerts in order)."""
    burn_history: dict[str, dict[tuple[str, str], list[BurnSample]]] = field(default_factory=dict)
    """Policy uid -> (namespace, name) -> burn-rate samples of earlier evaluations (the anomaly baseline; in
    memory, bounded by ``trim_history``; read back from ``history_source`` after a restart)."""
    history_source: PrometheusHistory | None = None
    """Where the history is read back from at a policy's first evaluation (None: memory only)."""
    history_read: dict[str, HistoryRead] = field(default_factory=dict)
    """Policy uid -> how reading its history back went (retried until ``ok``, at most every
    :data:`HISTORY_RETRY_S`)."""
    history_retry_at: dict[str, float] = field(default_factory=dict)
    """Policy uid -> ``time.monotonic()`` before which a failed read is not tried again."""
    gauges: BurnGauges | None = None
    """The burn-rate gauges every evaluation exports (what ``history_source`` reads back)."""
    gone_pods: GonePods = field(default_factory=GonePods)
    """Pods of InferenceServices the pod watch saw deleted (``budget_pod_deleted``): every evaluation charges
    each to when it stopped (``modalscale.operator.budget.podstops``)."""

    def waker(self, uid: str) -> asyncio.Event:
        return self.wake.setdefault(uid, asyncio.Event())


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
    now = deps.clock()
    admin = deps.settings.budget_admin_namespaces
    observed = runtime.observer.observe(observed_namespaces(policy, admin), runtime.gone_pods, now)
    uid = str(policy["metadata"].get("uid", ""))
    cfg = getattr(deps.settings, "spend_anomaly", None) or AnomalyConfig()
    history = runtime.burn_history.setdefault(uid, {})
    read = runtime.history_read.get(uid)
    if (runtime.history_source is not None and (read is None or not read.ok)
            and time.monotonic() >= runtime.history_retry_at.get(uid, 0.0)):
        interval_s = float((policy.get("spec") or {}).get("evaluationIntervalSeconds") or 60)
        try:
            loaded = runtime.history_source.read(namespace, name, now, cfg, interval_s)
        except HistoryUnavailable as exc:
            read = HistoryRead(False, f"{exc}; no spend anomaly is decided until the history is read (retried "
                                      f"every {HISTORY_RETRY_S:g} s)")
            # A hanging Prometheus costs one query timeout per retry, never one per evaluation: budget
            # enforcement does not wait on it.
            runtime.history_retry_at[uid] = time.monotonic() + HISTORY_RETRY_S
            logger.warning("Reading the spend-anomaly history failed, holding anomaly decisions: error=%s", exc)
        else:
            history = runtime.burn_history[uid] = merge_history(loaded, history)
            read = HistoryRead(True, f"Read {sum(map(len, loaded.values()))} burn-rate samples of {len(loaded)} "
                                     f"InferenceServices from Prometheus at {runtime.history_source.url}")
            logger.info("Read the spend-anomaly history from Prometheus: services=%d samples=%d", len(loaded),
                        sum(map(len, loaded.values())))
        runtime.history_read[uid] = read
    plan = plan_policy(policy, observed, deps.prices.catalog(), attempts, now, in_flight, history,
                       anomaly_config=cfg, history_read=read, admin_namespaces=admin)
    for w in plan.annotation_writes:
        if deps.writer.patch_annotations(ISVC_PLURAL, w.namespace, w.name, {w.key: w.value}):
            logger.info("Wrote budget cap on InferenceService: namespace=%s name=%s cap=%s", w.namespace, w.name,
                        w.value if w.value is not None else "lifted")
    deps.writer.patch_status(BUDGET_PLURAL, namespace, name, plan.status_patch)
    # The samples join the history only once the status (with status.spendAnomalies and any SpendAnomaly alert
    # in its outbox) is written.
    if runtime.gauges is not None:
        runtime.gauges.export(namespace, name, plan.burn_samples)
    for key in {*history, *plan.burn_samples}:
        kept = trim_history([*history.get(key, ()), *([plan.burn_samples[key]] if key in plan.burn_samples else [])],
                            now, cfg)
        if kept:
            history[key] = kept
        else:
            del history[key]
    for type_, reason, message in plan.events:
        deps.writer.event(policy, type_, reason, message, logger)
    if plan.budget is not None and plan.status_patch:
        b = plan.budget
        logger.info("Evaluated BudgetPolicy: state=%s spent_usd=%s limit_usd=%s enforced=%d alerts=%d",
                    b.state.value, plan.status_patch.get("spent", (policy.get("status") or {}).get("spent")),
                    b.limit_usd, len(b.enforced_services), len(plan.alerts))
    deps.metrics.reconciles.labels(kind="BudgetPolicy", result="ok").inc()
    deps.metrics.reconcile_seconds.labels(kind="BudgetPolicy").observe(time.monotonic() - started)
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


def batch_deadline_s(sends: Sequence[PendingAlert]) -> float:
    """Bound of one batch, in seconds: the most entries any one receiver gets x one round's bound, plus slack."""
    per_target: dict[str, int] = {}
    for e in sends:
        per_target[e.notification] = per_target.get(e.notification, 0) + 1
    return max(per_target.values(), default=0) * DELIVERY_RETRY.max_total_s + DELIVERY_SLACK_S


async def deliver_batch(sender: Sender, sends: Sequence[PendingAlert], receivers: Sequence[Receiver],
                        problems: Sequence[DeliveryResult], *, deadline_s: float, clock: Any,
                        previous: asyncio.Task[None] | None = None) -> list[Attempt]:
    """Send each outbox entry to its receiver (receivers in parallel, entries in order); never raises.

    Args:
        sends: Due outbox entries.
        receivers: Resolved targets of ``sends`` (by ``name``).
        problems: Targets that cannot be tried (Secret missing): each of their entries fails with that result.
        deadline_s: Bound on the whole batch, in seconds; an entry not finished by then fails as ``TimedOut``.
        clock: Timezone-aware UTC "now" (when each round started).
        previous: The policy's previous batch, waited for first (bounded by its own deadline).
    Returns:
        One :class:`Attempt` per entry of ``sends``.
    """
    if previous is not None and not previous.done():
        await asyncio.wait([previous])
    by_name = {r.name: r for r in receivers}
    problem = {p.receiver: p for p in problems}
    results: list[Attempt] = []
    groups: dict[str, list[PendingAlert]] = {}
    for e in sends:
        if e.notification in by_name:
            groups.setdefault(e.notification, []).append(e)
        else:
            p = problem.get(e.notification)
            results.append(Attempt(e.key, False, p.reason if p else "ReceiverUnknown",
                                   p.message if p else f"Notification {e.notification} could not be resolved",
                                   clock()))

    async def one(r: Receiver, entries: list[PendingAlert]) -> None:
        for e in entries:
            started = clock()
            res = await sender.deliver(r.type, r.url, r.secret, e.message, receiver=r.name)
            results.append(Attempt(e.key, res.delivered, res.reason, res.message, started))

    tasks = [asyncio.create_task(one(by_name[name], entries)) for name, entries in groups.items()]
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=deadline_s)
        for task in pending:
            task.cancel()
        finished = {a.key for a in results}
        for name, entries in groups.items():
            for e in entries:
                if e.key not in finished:
                    results.append(Attempt(e.key, False, TIMED_OUT,
                                           f"Delivery to {name} did not finish within {deadline_s:g} s", clock()))
    return results


def _launch(runtime: BudgetRuntime, uid: str, ev: Evaluation, clock: Any, logger: Log) -> None:
    if runtime.sender is None:
        runtime.sender = Sender(retry=DELIVERY_RETRY)
    deadline = batch_deadline_s(ev.sends)
    previous = runtime.batches.get(uid)
    keys = {e.key for e in ev.sends}
    runtime.in_flight.setdefault(uid, set()).update(keys)

    async def run() -> None:
        assert runtime.sender is not None
        results: list[Attempt] = []
        try:
            results = await deliver_batch(runtime.sender, ev.sends, ev.receivers, ev.problems, deadline_s=deadline,
                                          clock=clock, previous=previous)
            for a in results:
                if not a.delivered:
                    logger.warning("Failed to deliver budget alert, will retry: receiver=%s reason=%s", a.key[0],
                                   a.reason)
        finally:
            # No await between these two: an evaluation sees an entry either in flight or with its result.
            runtime.delivered.setdefault(uid, []).extend(results)
            runtime.in_flight.get(uid, set()).difference_update(keys)
            runtime.waker(uid).set()

    task = asyncio.create_task(run(), name=f"budget-alerts-{uid}")
    runtime.batches[uid] = task
    task.add_done_callback(lambda t: runtime.batches.pop(uid, None) if runtime.batches.get(uid) is t else None)


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
                _launch(runtime, uid, ev, deps.clock, logger)
            await _sleep(stopped, wake, ev.sleep_s())
    finally:
        runtime.wake.pop(uid, None)
        if runtime.gauges is not None:  # a stopped daemon (deleted policy, another leader) exports nothing stale
            runtime.gauges.forget(namespace, name)


def lift_caps(deps: Deps, runtime: BudgetRuntime, policy: dict[str, Any], logger: Log) -> int:
    """Remove this policy's cap annotation from every InferenceService that carries it; returns how many."""
    isvcs = runtime.observer.list_isvcs(observed_namespaces(policy, deps.settings.budget_admin_namespaces))
    lifted = 0
    for w in lift_all(policy, isvcs):
        if deps.writer.patch_annotations(ISVC_PLURAL, w.namespace, w.name, {w.key: None}):
            lifted += 1
            deps.writer.event(policy, "Normal", ENFORCEMENT_LIFTED,
                              f"Budget cap lifted from InferenceService {w.namespace}/{w.name}: policy deleted",
                              logger)
    return lifted


def register_budget(registry: kopf.OperatorRegistry, config: Settings) -> None:
    """Register the BudgetPolicy handlers on ``registry``.

    Needs ``memo.deps`` (:class:`modalscale.operator.deps.Deps`) for the writer, catalog, clock and metrics.
    """

    @kopf.on.startup(registry=registry)
    def budget_startup(memo: kopf.Memo, **_: Any) -> None:
        if memo.get("budget") is None:
            deps = deps_of(memo)
            url = deps.settings.prometheus_url
            memo.budget = BudgetRuntime(BudgetObserver(deps.observer.custom.api_client),
                                        history_source=PrometheusHistory(url) if url else None,
                                        gauges=BurnGauges(deps.metrics.registry))

    @kopf.on.cleanup(registry=registry)
    async def budget_cleanup(memo: kopf.Memo, logger: Log, **_: Any) -> None:
        runtime: BudgetRuntime | None = memo.get("budget")
        if runtime is None:
            return
        pending = list(runtime.batches.values())
        for task in pending:
            task.cancel()
        if pending:
            logger.warning("Abandoned budget alert deliveries at shutdown: batches=%d", len(pending))
            await asyncio.wait(pending, timeout=5)
        if runtime.sender is not None:
            await runtime.sender.aclose()

    @kopf.daemon(GROUP, VERSION, BUDGET_PLURAL, registry=registry, cancellation_backoff=5.0,
                 cancellation_timeout=10.0)
    async def budget_daemon(name: str, namespace: str, uid: str, stopped: kopf.DaemonStopped, memo: kopf.Memo,
                            logger: Log, **_: Any) -> None:
        await run_policy(deps_of(memo), memo.budget, namespace, name, uid, stopped, logger)

    @kopf.on.event(GROUP, VERSION, BUDGET_PLURAL, registry=registry)
    async def budget_spec_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        runtime: BudgetRuntime | None = memo.get("budget")
        uid = body["metadata"].get("uid")
        if runtime is None or uid not in runtime.wake:
            return
        if body["metadata"].get("generation") != (body.get("status") or {}).get("observedGeneration"):
            runtime.wake[uid].set()

    # No finalizer (on.event, not on.delete): a pod's deletion is never held up by the operator. A pod deleted
    # while no operator watches is charged up to the first evaluation that no longer lists it (podstops).
    @kopf.on.event("v1", "pods", labels={SELECTOR_LABEL: kopf.PRESENT}, registry=registry)
    def budget_pod_deleted(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, logger: Log, **_: Any) -> None:
        runtime: BudgetRuntime | None = memo.get("budget")
        if runtime is None or event.get("type") != "DELETED":
            return
        if runtime.gone_pods.record(dict(event.get("object") or body), deps_of(memo).clock()):
            logger.debug("Recorded a deleted pod for the budget ledger: pods_kept=%d", len(runtime.gone_pods))

    @kopf.on.delete(GROUP, VERSION, BUDGET_PLURAL, registry=registry)
    def budget_deleted(body: kopf.Body, memo: kopf.Memo, logger: Log, **_: Any) -> None:
        policy = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BudgetPolicy", "metadata": dict(body["metadata"]),
                  "spec": dict(body.get("spec") or {}), "status": dict(body.get("status") or {})}
        lifted = lift_caps(deps_of(memo), memo.budget, policy, logger)
        if lifted:
            logger.info("Lifted budget caps of the deleted BudgetPolicy: services=%d", lifted)


__all__ = ["BudgetRuntime", "DELIVERY_RETRY", "Evaluation", "batch_deadline_s", "deliver_batch", "evaluate_policy",
           "lift_caps", "register_budget", "run_policy"]
