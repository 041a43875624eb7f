"""kopf registration of the autoscaler: one daemon per InferenceService in Predictive or Utilization mode.

Every ``spec.scaling.decisionIntervalSeconds`` the daemon: reads the object fresh, loads the service-time model
of ``spec.model.costModelRef`` (cached by the ConfigMap's resourceVersion), reads Prometheus (outside any lock), and
then, under ``Deps.lock_for(uid)`` (so it never interleaves with ``isvc.reconcile.reconcile_isvc``): reads the
object and its Deployment again, builds the ``Observation``, calls the pure ``recommend``, and writes what
``plan_autoscale`` decides: ``status.desiredReplicas`` (a valid decision only), ``status.autoscaler`` and the
``MetricsAvailable`` / ``CostModelLoaded`` conditions. When the desired replicas change, the ``Decision`` goes
straight to ``isvc.reconcile.scale_isvc`` (``plan_isvc`` with the decision): one status patch holding both the
decision and the InferenceService's status, then the Deployment's replicas (``plan_isvc`` stays the single planner
of Deployment replicas; ``status.desiredReplicas`` stays the record a restarted operator continues from).

Scale from zero: the request gateway annotates its InferenceService (``modalscale.io/activation-requested-at``)
while it holds requests at 0 replicas. A watch-event handler on objects with that annotation (``kopf.on.event``:
every change, no diff base, so it never waits for a decision interval) checks the event's body first (nothing read
unless the status says 0 desired replicas and the request is newer than the last scale to zero), then, under the
object's lock, calls the pure ``activate`` and applies a 0 -> 1 decision through ``scale_isvc`` like any other.

A staged service (``spec.stages``): after the front's decision the daemon makes one more for the image encoder pool
(:func:`decide_pool_once`): a second reading of the pool's own series (``component="image-encoder"``, Triton model
``image_encoder``), the Utilization rule of ``autoscaler.policy.image_encoder_policy`` on it, and
``plan_image_encoder_autoscale``'s block in ``status.stages[image-encoder].autoscaler``; a new count goes through
``scale_isvc`` like the front's, so ``plan_isvc`` stays the single writer of the pool's Deployment replicas too,
and the plan's Event (``image encoder pool: 1 -> 2 (REASON: ...)``) is posted on the InferenceService. Each pool
decision is exported with the front's metrics, labelled ``stage="image-encoder"`` (``AutoscalerMetrics``).
While the front is at 0 the pool takes no decision (it is at 0 as well) and its gauges are dropped; while the
front's Deployment is not found it takes none either (``plan.pool_decision_held``: the front's count and traffic
are not known). Under a
BudgetPolicy cap, which counts both pools, the front decides under its share (``isvc.plan.front_budget_cap``, priced
with ``isvc.reconcile.stage_prices``) and the pool under its own (``isvc.plan.image_encoder_budget_cap``): the
counts the single planner's split leaves each.

The scaler's memory is kept in the daemon between decisions and stored in ``status.autoscaler.state``, from
which a restarted (or newly elected) operator continues. kopf stops the daemon when the object is deleted, when
its mode becomes Fixed (the ``when`` filter) and while this operator is paused by peering.

Local setup note: the InferenceService's pods are KWOK-simulated, while one real local Triton process (scraped by
a real Prometheus with the InferenceService's labels) serves the requests, so utilization and queueing inputs
come from that one process whatever the replica count.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from decimal import Decimal
from typing import Any, NamedTuple

import kopf

from modalscale import GROUP, VERSION
from modalscale.api.annotations import (
    ACTIVATION_ANNOTATION,
    BUDGET_SPOT_PREFIX,
    activation_requested_at,
    budget_cap,
    hold_on_unreadable_cap,
    spot_switches,
    unreadable_budget_annotations,
    unreadable_budget_caps,
)
from modalscale.api.conditions import FRONT_AT_ZERO
from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import IsvcSpec, parse_isvc
from modalscale.api.isvc_status import IsvcStatus, ScalerState, read_isvc_status
from modalscale.autoscaler.metrics_reading import MetricsReading, unavailable
from modalscale.autoscaler.policy import (
    Reason,
    ScalingMode,
    ScalingPolicy,
    activate,
    image_encoder_policy,
    recommend,
)
from modalscale.autoscaler.stages import front_pool_figures, split_features, split_slo
from modalscale.operator.autoscale.observe import IMAGE_ENCODER_COMPONENT, build_observation, demand_from_gateway
from modalscale.operator.autoscale.plan import (
    compress_recommendations,
    plan_activation,
    plan_autoscale,
    plan_image_encoder_autoscale,
    pool_decision_held,
)
from modalscale.operator.deps import Deps, deps_of
from modalscale.operator.isvc.objects import STAGE_FRONT, STAGE_IMAGE_ENCODER, image_encoder_name
from modalscale.operator.isvc.observe import read_json
from modalscale.operator.isvc.plan import (
    FOREIGN,
    IsvcObserved,
    ModelReferenceError,
    child_ownership,
    front_budget_cap,
    hold_spot_placement,
    image_encoder_budget_cap,
    with_spot_placement,
)
from modalscale.operator.isvc.reconcile import ISVC_PLURAL, scale_isvc, stage_prices
from modalscale.operator.settings import Settings
from modalscale.runtime.repo_config import IMAGE_ENCODER_MODEL

RETRY_AFTER_ERROR_S = 5.0
"""Wait before the next decision after a Kubernetes API error, s."""


class FrontRound(NamedTuple):
    """What :func:`decide_once` hands the daemon."""

    state: ScalerState | None
    """The front scaler's memory for the next decision."""
    interval_s: float
    """Seconds until the next decision."""
    reading: MetricsReading | None
    """The front's reading of this interval; None when none was taken."""
    staged: bool
    """The spec has ``stages`` (False when it could not be read): the pool's decision is due."""
    pool_reading: MetricsReading | None = None
    """A staged front's reading of its image encoder pool this interval (its decision's view of the pool,
    ``autoscaler.stages.front_pool_figures``), which the pool's decision reuses; None when none was taken."""


def _post(deps: Deps, raw: dict[str, Any], events: Any, logger: logging.Logger | logging.LoggerAdapter[Any]
          ) -> None:
    """Post a plan's ``(type, reason, message)`` Events on the InferenceService."""
    for type_, reason, message in events:
        deps.writer.event(raw, type_, reason, message, logger)


def read_own_deployment(deps: Deps, raw: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The Deployment ``name`` (the front's ``<name>`` or the pool's ``<name>-image-encoder``) of the InferenceService
    ``raw``, camelCase; None when there is none or it is not the service's (``plan.child_ownership``: a user's, another
    InferenceService's), as the planner takes it: no decision is made from, nor recorded for, someone else's replicas.

    Raises:
        kubernetes.client.rest.ApiException: The read failed (not 404).
    """
    meta = raw["metadata"]
    found = read_json(deps.observer.apps.read_namespaced_deployment, name, meta["namespace"])
    if found is None or child_ownership(str(meta.get("uid")), meta["name"], found)[0] == FOREIGN:
        return None
    return found


def pool_decision_due(staged: bool, pool_state: ScalerState | None) -> bool:
    """Whether the daemon runs :func:`decide_pool_once` after the front's decision (pure): while the spec has
    ``stages``, and once more after they went (the pool's scaler still has a state), which drops the pool's
    gauges; an unstaged service costs no second read of the object per interval."""
    return staged or pool_state is not None


def _autoscaled(spec: Any, **_: Any) -> bool:
    return ((spec.get("scaling") or {}).get("mode") or "Predictive") != "Fixed"


def unreadable_cap(annotations: dict[str, str] | None) -> str | None:
    """``Observation.budget_cap_unreadable``: the cap annotations that do not decode, joined; None = all read."""
    return "; ".join(unreadable_budget_caps(annotations)) or None


def decide_once(deps: Deps, namespace: str, name: str, state: ScalerState | None,
                logger: logging.Logger | logging.LoggerAdapter[Any]) -> FrontRound:
    """One autoscaler decision for one InferenceService (blocking; run in a worker thread).

    Args:
        deps: The operator's ``Deps`` (its ``autoscale`` runtime: Prometheus reader, model cache, metrics).
        state: The scaler's memory from the previous decision; None = load it from ``status.autoscaler.state``.
    Returns:
        A :class:`FrontRound`: the state for the next decision, the seconds until it, the front's reading of this
        interval (None when none was taken: Fixed mode, an invalid spec, the object gone), which the pool's
        decision (:func:`decide_pool_once`) splits the p95 target with, and whether the spec has ``stages``.
    Raises:
        kubernetes.client.rest.ApiException: reads or writes failed (the daemon retries).
    """
    rt = deps.autoscale
    raw = deps.observer.read_isvc(namespace, name)
    if raw is None:
        return FrontRound(state, RETRY_AFTER_ERROR_S, None, False)
    try:
        spec = parse_isvc(raw)
    except InvalidSpec as exc:
        logger.info("Skipped the autoscaler decision for InferenceService: reason=%s %s", exc.reason, exc)
        return FrontRound(state, RETRY_AFTER_ERROR_S, None, False)
    policy = ScalingPolicy.from_typed(spec.scaling, spec.runtime)
    interval = policy.decision_interval_s
    staged = spec.stages is not None
    if policy.mode == ScalingMode.FIXED:
        return FrontRound(state, interval, None, staged)
    if state is None:
        state = read_isvc_status(raw).scaler_state
    ref = spec.model.cost_model_config_map
    if ref or policy.mode == ScalingMode.PREDICTIVE:
        model, model_status = rt.models.load(namespace, ref, spec.model.cost_model_key)
    else:
        model, model_status = None, None
    reading = rt.reader.read(namespace, name, spec.model.name, deps.clock(),
                             gateway=demand_from_gateway(spec.gateway.enabled, read_isvc_status(raw)))
    # A staged front is told how its image encoder pool keeps up: the time its requests wait in the pool's queue is
    # not its own, and its queue rules hold while the pool is the bottleneck (autoscaler.policy, HeldForImageEncoder)
    pool_reading = None
    if staged and read_isvc_status(raw).desired_replicas != 0:
        pool_reading = rt.reader.read(namespace, name, IMAGE_ENCODER_MODEL, deps.clock(),
                                      component=IMAGE_ENCODER_COMPONENT)
    # A staged service's cap is split between its pools by price: at the tier its pods run on (a SwitchToSpot's
    # Spot), as the planner prices them, or the share would not be the count it writes.
    prices = pool_prices(deps, spec, raw)

    with deps.lock_for(raw["metadata"]["uid"]):
        raw = deps.observer.read_isvc(namespace, name)
        if raw is None:
            return FrontRound(state, interval, reading, staged, pool_reading)
        deployment = read_own_deployment(deps, raw, name)
        if deployment is None:
            return FrontRound(state, interval, reading, staged, pool_reading)  # reconcile_isvc creates it first
        pool_figures: dict[str, Any] = {}
        if pool_reading is not None and spec.stages is not None:
            pool = read_own_deployment(deps, raw, image_encoder_name(spec))
            pool_figures = front_pool_figures(
                pool_reading, int(((pool or {}).get("status") or {}).get("readyReplicas") or 0),
                spec.stages.image_encoder.runtime.instance_count)
        now = deps.clock()
        current = int((deployment.get("spec") or {}).get("replicas") or 0)
        annotations = raw["metadata"].get("annotations")
        observation = build_observation(
            reading,
            current_replicas=current,
            ready_replicas=int((deployment.get("status") or {}).get("readyReplicas") or 0),
            slots_per_replica=policy.slots_per_replica,
            # A staged service's front decides under its share of the cap over both pools: the count the planner
            # writes, so no decision is undone at the next one.
            budget_max_replicas=front_budget_cap(spec, read_isvc_status(raw), budget_cap(annotations)[0], *prices),
            now=now)
        observation = replace(observation, budget_cap_unreadable=unreadable_cap(annotations), **pool_figures)
        decision = recommend(observation, policy, state, model, now)
        plan = plan_autoscale(read_isvc_status(raw), decision, reading, model_status,
                              generation=int(raw["metadata"].get("generation") or 0), now=now,
                              utilization_ratio=observation.utilization_ratio,
                              refresh_s=max(60.0, 4 * interval))
        if plan.desired_changed:
            logger.info("Decided replicas for InferenceService: desired=%d current=%d reason=%s mode=%s %s",
                        decision.desired_replicas, observation.current_replicas, decision.reason.value,
                        decision.mode_used.value, decision.message)
            try:  # one status patch (decision + InferenceService status), its Events, the Deployment's replicas
                scale_isvc(deps, raw, decision, plan.status, logger,
                           recorded=lambda planned: _post(deps, raw, plan.events, logger))
            except (InvalidSpec, ModelReferenceError):
                pass  # scale_isvc recorded it in status and an Event; the decision stays in status
        else:
            deps.writer.patch_isvc_status(namespace, name, plan.status, plan.stored)
            if plan.status.autoscaler is not None:
                logger.info("Held replicas for InferenceService: replicas=%d reason=%s valid=%s metrics=%s %s",
                            observation.current_replicas, decision.reason.value, decision.valid,
                            plan.metrics_reason, decision.message)
    rt.metrics.record(namespace, name, decision, plan.metrics_available,
                      None if model_status is None else model_status.loaded, observation.utilization_ratio,
                      stage=STAGE_FRONT)
    return FrontRound(compress_recommendations(decision.state), interval, reading, staged, pool_reading)


def pool_prices(deps: Deps, spec: IsvcSpec, raw: dict[str, Any]) -> tuple[Decimal | None, Decimal | None]:
    """USD per hour of a front and an image encoder replica at the tier the pods run on (a ``SwitchToSpot``'s Spot,
    or the placement held while a Spot annotation does not decode): what the planner splits a cap by
    (``isvc.reconcile.stage_prices`` of ``with_spot_placement`` and ``hold_spot_placement``). The Deployments are
    read only while such an annotation is there."""
    annotations = raw["metadata"].get("annotations")
    placed = with_spot_placement(spec, spot_switches(annotations))
    if unreadable_budget_annotations(annotations, BUDGET_SPOT_PREFIX):
        observed = IsvcObserved(deployment=read_own_deployment(deps, raw, raw["metadata"]["name"]))
        if spec.stages is not None:
            observed.image_encoder["Deployment"] = read_own_deployment(deps, raw, image_encoder_name(spec))
        placed = hold_spot_placement(placed, observed, annotations)
    return stage_prices(deps, placed)


def decide_pool_once(deps: Deps, namespace: str, name: str, state: ScalerState | None,
                     logger: logging.Logger | logging.LoggerAdapter[Any],
                     front: MetricsReading | None = None, pool_reading: MetricsReading | None = None
                     ) -> ScalerState | None:
    """One decision for a staged service's image encoder pool (blocking; run in a worker thread after
    :func:`decide_once`).

    Writes what ``plan_image_encoder_autoscale`` decides, posts its Events (a new count only) and exports the
    decision as ``AutoscalerMetrics`` with ``stage="image-encoder"`` (no decision: the pool's gauges are dropped).

    Args:
        state: The pool scaler's memory from its previous decision; None = load it from
            ``status.stages[image-encoder].autoscaler.state``.
        front: The front's reading of this interval (:func:`decide_once`'s); with the pool's it splits the
            service's p95 target (``autoscaler.stages.split_slo``), and the pool's need is at least what keeps its
            p95 within its share. None = not split (the Utilization rule alone).
        pool_reading: The pool's reading of this interval, when :func:`decide_once` took it for the front's
            decision; None = read it here.
    Returns:
        The pool scaler's state for the next decision (None: no pool, Fixed mode, or not read yet).
    Raises:
        kubernetes.client.rest.ApiException: reads or writes failed (the daemon retries).
    """
    raw = deps.observer.read_isvc(namespace, name)
    if raw is None:
        return state
    try:
        spec = parse_isvc(raw)
    except InvalidSpec:
        return state  # decide_once logged it
    if spec.stages is None or spec.scaling.mode == ScalingMode.FIXED:
        deps.autoscale.metrics.forget(namespace, name, (STAGE_IMAGE_ENCODER,))
        return None
    policy = image_encoder_policy(spec.scaling, spec.stages.image_encoder)
    if read_isvc_status(raw).desired_replicas == 0:  # the front is at 0: nothing to read (the pool is at 0 too)
        reading = unavailable(FRONT_AT_ZERO, "the front pool is at 0 replicas")
    elif pool_reading is not None:
        reading = pool_reading
    else:
        reading = deps.autoscale.reader.read(namespace, name, IMAGE_ENCODER_MODEL, deps.clock(),
                                             component=IMAGE_ENCODER_COMPONENT)
    # Priced as the planner splits the cap (the tier the pods run on), as for the front's share in decide_once;
    # only under a cap (no price is read for a pool no cap bounds).
    prices = (pool_prices(deps, spec, raw) if budget_cap(raw["metadata"].get("annotations"))[0] is not None
              else None)

    with deps.lock_for(raw["metadata"]["uid"]):
        raw = deps.observer.read_isvc(namespace, name)
        if raw is None:
            return state  # deleted meanwhile
        stored = read_isvc_status(raw)
        item = stored.stage(STAGE_IMAGE_ENCODER)
        pool = read_own_deployment(deps, raw, image_encoder_name(spec))
        front_deployment = read_own_deployment(deps, raw, name)
        held = pool_decision_held(stored, front_deployment, pool)
        if held is not None or item is None or pool is None:
            logger.debug("No decision for the image encoder pool of InferenceService: %s", held)
            return state  # the reconcile creates the pool, its status item and the front first
        if state is None:
            state = item.autoscaler.state if item.autoscaler is not None and item.autoscaler.state else ScalerState()
        now = deps.clock()
        current = int((pool.get("spec") or {}).get("replicas") or 0)
        decision, utilization = None, None
        if stored.desired_replicas != 0:
            split = split_slo(spec.scaling.target_p95_latency_ms, front, reading)
            # The pool decides under its share of the cap over both pools (the count the planner's split leaves
            # it), not the whole cap, so its record is the count written and no decision is undone.
            cap = budget_cap(raw["metadata"].get("annotations"))[0]
            if cap is not None and prices is None:  # a cap written since the first read
                prices = pool_prices(deps, spec, raw)
            share = image_encoder_budget_cap(spec, stored, cap, *(prices or (None, None)))
            observation = replace(build_observation(
                reading, current_replicas=current,
                ready_replicas=int((pool.get("status") or {}).get("readyReplicas") or 0),
                slots_per_replica=policy.slots_per_replica, budget_max_replicas=share, now=now),
                stage_target_p95_ms=split.image_encoder_target_ms,
                budget_cap_unreadable=unreadable_cap(raw["metadata"].get("annotations")))
            decision = recommend(observation, policy, state, None, now)
            message = decision.message
            if share != cap and decision.reason == Reason.CAPPED_BY_BUDGET:
                message = message.replace(
                    f"capped by budget at {share}", f"capped by budget at {share} (the image encoder pool's share of "
                    f"the cap of {cap} over both stages; the front at its own count)", 1)
            decision = replace(decision, message=f"{message}; {split.message}",
                               features={**decision.features, **split_features(split)})
            utilization = observation.utilization_ratio
        plan = plan_image_encoder_autoscale(stored, decision, reading, now=now, utilization_ratio=utilization,
                                            refresh_s=max(60.0, 4 * policy.decision_interval_s))
        if plan.desired_changed and decision is not None:
            logger.info("Decided replicas for the image encoder pool of InferenceService: desired=%d current=%d "
                        "reason=%s %s", decision.desired_replicas, current, decision.reason.value,
                        decision.message)
            try:  # one status patch (the pool's block + the InferenceService's status), its Events, the replicas
                # the Event names the count the planner applies after a cap's split, not only the decision's
                scale_isvc(deps, raw, None, plan.status, logger, recorded=lambda planned: _post(
                    deps, raw, plan.applied_events(None if planned is None
                                                   else planned.status.stage(STAGE_IMAGE_ENCODER)), logger))
            except (InvalidSpec, ModelReferenceError):
                pass  # scale_isvc recorded it in status and an Event; the decision stays in status
        else:
            if plan.status != IsvcStatus():
                deps.writer.patch_isvc_status(namespace, name, plan.status, plan.stored)
                if decision is not None and not decision.valid:
                    logger.info("Held replicas for the image encoder pool of InferenceService: replicas=%d "
                                "reason=%s %s", decision.desired_replicas, decision.reason.value, decision.message)
            _post(deps, raw, plan.events, logger)  # the new count, once it is in status
    if decision is None:
        deps.autoscale.metrics.forget(namespace, name, (STAGE_IMAGE_ENCODER,))
        return ScalerState()
    deps.autoscale.metrics.record(namespace, name, decision, bool(plan.metrics_available), None, utilization,
                                  stage=STAGE_IMAGE_ENCODER)
    return compress_recommendations(decision.state)


def activation_pending(body: Any) -> bool:
    """Whether an InferenceService's body (a watch event's) may need an activation (pure, reads nothing): an
    activation request newer than the last scale to zero while the status says 0 desired replicas."""
    requested = activation_requested_at((body.get("metadata") or {}).get("annotations"))
    status = read_isvc_status(body)
    if requested is None or status.desired_replicas not in (0, None):
        return False
    zero_at = status.scaler_state.scaled_to_zero_at
    return zero_at is None or requested > zero_at


def activate_once(deps: Deps, namespace: str, name: str,
                  logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    """Apply :func:`modalscale.autoscaler.policy.activate` to one InferenceService (blocking; under its lock).

    Raises:
        kubernetes.client.rest.ApiException: reads or writes failed (the gateway asks again within a second).
    """
    raw = deps.observer.read_isvc(namespace, name)
    if raw is None:
        return
    with deps.lock_for(raw["metadata"]["uid"]):
        raw = deps.observer.read_isvc(namespace, name)
        if raw is None:
            return
        try:
            spec = parse_isvc(raw)
        except InvalidSpec:
            return  # the reconcile reports it
        deployment = read_own_deployment(deps, raw, name)
        if deployment is None:
            return
        annotations = raw["metadata"].get("annotations")
        now = deps.clock()
        stored = read_isvc_status(raw)
        current = int((deployment.get("spec") or {}).get("replicas") or 0)
        decision = activate(current, activation_requested_at(annotations), stored.scaler_state,
                            ScalingPolicy.from_typed(spec.scaling, spec.runtime),
                            hold_on_unreadable_cap(annotations, budget_cap(annotations)[0], current), now)
        if decision is None:
            return
        part = plan_activation(stored, decision, now)
        if not decision.valid:
            deps.writer.patch_isvc_status(namespace, name, part, stored)
            logger.info("Held an activation of InferenceService: reason=%s %s", decision.reason.value,
                        decision.message)
            return
        logger.info("Activated InferenceService: desired=%d reason=%s %s", decision.desired_replicas,
                    decision.reason.value, decision.message)
        try:
            scale_isvc(deps, raw, decision, part, logger)
        except (InvalidSpec, ModelReferenceError):
            pass  # scale_isvc recorded it in status and an Event


def register_autoscaler(registry: kopf.OperatorRegistry, config: Settings) -> None:
    """Register the autoscaler daemon on ``registry`` (Prometheus at ``Deps.settings.prometheus_url``)."""

    # kopf types every handler's namespace as str | None; an InferenceService is Namespaced, so it is a str.
    @kopf.on.event(GROUP, VERSION, ISVC_PLURAL, registry=registry, annotations={ACTIVATION_ANNOTATION: kopf.PRESENT},  # type: ignore[arg-type]
                   when=lambda body, **_: activation_pending(body))
    def activation_requested(name: str, namespace: str, memo: kopf.Memo,
                             logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any) -> None:
        activate_once(deps_of(memo), namespace, name, logger)

    @kopf.daemon(GROUP, VERSION, ISVC_PLURAL, registry=registry, when=_autoscaled, cancellation_timeout=30.0)  # type: ignore[arg-type]
    async def autoscale_isvc(name: str, namespace: str, memo: kopf.Memo,
                             logger: logging.Logger | logging.LoggerAdapter[Any],
                             stopped: kopf.DaemonStopped, **_: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        deps = deps_of(memo)
        state: ScalerState | None = None
        pool_state: ScalerState | None = None  # the image encoder pool's scaler (spec.stages)
        try:
            while not stopped:
                started = time.monotonic()
                try:
                    state, interval, front, staged, pool_reading = await asyncio.to_thread(decide_once, deps, namespace,
                                                                                   name, state, logger)
                    if pool_decision_due(staged, pool_state):
                        pool_state = await asyncio.to_thread(decide_pool_once, deps, namespace, name, pool_state,
                                                             logger, front, pool_reading)
                except ApiException as exc:
                    logger.warning("Autoscaler decision failed for InferenceService: status=%s reason=%s",
                                   exc.status, exc.reason)
                    interval = RETRY_AFTER_ERROR_S
                await stopped.wait(max(0.5, interval - (time.monotonic() - started)))
        finally:
            deps.autoscale.metrics.forget(namespace, name)
