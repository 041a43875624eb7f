"""The InferenceService reconcile (observe, plan, apply, report), always under ``Deps.lock_for(uid)``.

- :func:`reconcile_isvc`: the full pass of the change handler and the resync timer (renders the model repository,
  prices the replicas, repairs drift of every child);
- :func:`scale_isvc`: the autoscaler daemon's pass for a decision that changes the replicas: the ``Decision`` goes
  to ``plan_isvc`` directly, the Deployment's replicas are the only child write, and the autoscaler's status and
  the InferenceService's status are one patch (the model repository is not re-rendered; the replicas are priced
  again only for a staged service, whose budget cap is split between its pools by their prices).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any

from kubernetes.client.exceptions import ApiException

from modalscale.api import conditions as R
from modalscale.api.annotations import spot_switches  # SwitchToSpot: the Spot annotation places the pods
from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import IsvcSpec, parse_isvc
from modalscale.api.isvc_status import IsvcStatus, merge_isvc_status, read_isvc_status
from modalscale.autoscaler.policy import Decision
from modalscale.costmodel.opencost import PricedReplica
from modalscale.operator import conditions as cond
from modalscale.operator.deps import Deps
from modalscale.operator.isvc.cache import NotSynced
from modalscale.operator.isvc.objects import image_encoder_spec
from modalscale.operator.isvc.plan import (
    ForeignChild,
    IsvcObserved,
    IsvcPlan,
    ModelReferenceError,
    PlanConfig,
    StageLayout,
    Write,
    child_conflicts,
    hold_spot_placement,
    observe_budget_cap,
    observed_with,
    plan_isvc,
    refused_ready,
    stage_layout,
    with_spot_placement,
)
from modalscale.runtime.repo_config import RuntimeConfig, Stage, build_repository


def spot_policies(annotations: dict[str, str] | None) -> str | None:
    """``"ns/name[, ...]"`` of the policies whose Spot annotation is on the service (None: none)."""
    return ", ".join(s.policy for s in spot_switches(annotations)) or None

ISVC_PLURAL = "inferenceservices"
Log = logging.Logger | logging.LoggerAdapter[Any]


def plan_config(deps: Deps) -> PlanConfig:
    """The planner's operator-wide knobs from the settings."""
    s = deps.settings
    return PlanConfig(conflict_hold_s=s.conflict_hold_s, gateway_image=s.gateway_image,
                      gateway_image_pull_secrets=s.gateway_image_pull_secrets,
                      scraper_labels=dict(s.metrics_scraper_labels), node_loss_toleration_s=s.node_loss_toleration_s)


def repository_files(spec: IsvcSpec, layout: StageLayout | None = None) -> dict[str, str]:
    """The generated Triton model repository for a BuiltIn model (empty for user repositories): one piece, or the
    staged layout's front pool (stage FRONT calling the encoder pool at ``layout.front_address``).

    Raises:
        InvalidSpec: ``modalscale.runtime`` refused the runtime fields (``field`` names the one).
    """
    if spec.model.source != "BuiltIn":
        return {}
    cfg = RuntimeConfig.from_typed(spec.model, spec.runtime, spec.resources)
    if layout is not None and layout.front_address is not None:
        cfg = replace(cfg, stage=Stage.FRONT, image_encoder_url=layout.front_address)
    return build_repository(cfg)


def image_encoder_files(spec: IsvcSpec) -> dict[str, str] | None:
    """The image encoder pool's generated repository (stage IMAGE_ENCODER, with the pool's own runtime knobs and
    GPUs); None without ``spec.stages``.

    Raises:
        InvalidSpec: ``modalscale.runtime`` refused the pool's runtime fields.
    """
    if spec.stages is None:
        return None
    enc = image_encoder_spec(spec)
    return build_repository(replace(RuntimeConfig.from_typed(enc.model, enc.runtime, enc.resources),
                                    stage=Stage.IMAGE_ENCODER))


class UnpricedGPU(InvalidSpec):
    """The GPU type has no price in the catalog: never priced at $0 silently (reason ``UnknownGPUPrice``)."""

    def __init__(self, field: str, message: str, reason: str = R.UNKNOWN_GPU_PRICE) -> None:
        super().__init__(field, message, reason)


def replica_price(deps: Deps, spec: IsvcSpec, field: str = "spec.resources.gpu.type") -> PricedReplica:
    """USD per replica-hour with its source: OpenCost where it has the figures (``MODALSCALE_OPENCOST_URL``), else
    the catalog (``modalscale.costmodel.opencost.resolve_replica_price``).

    ``field`` names the GPU type in a refusal (the encoder pool's: ``spec.stages.imageEncoder.resources.gpu.type``).

    Raises:
        UnpricedGPU: Neither OpenCost nor the catalog prices ``spec.resources.gpu.type`` at the pricing tier.
    """
    from modalscale.costmodel.catalog import ReplicaResources, UnknownPrice

    res = ReplicaResources.from_quantities(cpu=spec.resources.cpu, memory=spec.resources.memory,
                                           gpu_count=spec.resources.gpu_count, gpu_type=spec.resources.gpu_type)
    try:
        return deps.prices.price_replica(res, spec.pricing_tier)
    except UnknownPrice as exc:
        raise UnpricedGPU(field, f"{exc}") from exc


def stage_prices(deps: Deps, spec: IsvcSpec) -> tuple[Decimal | None, Decimal | None]:
    """USD per hour of one front replica and of one image encoder pool replica of a staged service: what the
    planner splits a budget cap over both pools by (``plan.split_staged_cap``); ``(None, None)`` without
    ``spec.stages``, None for a pool neither OpenCost nor the catalog prices (the reconcile refuses that service)."""
    if spec.stages is None:
        return None, None
    prices: list[Decimal | None] = []
    for pool, field in ((spec, "spec.resources.gpu.type"),
                        (image_encoder_spec(spec), "spec.stages.imageEncoder.resources.gpu.type")):
        try:
            prices.append(replica_price(deps, pool, field).usd_per_hour)
        except UnpricedGPU:
            prices.append(None)
    return prices[0], prices[1]


def gateway_price(deps: Deps, spec: IsvcSpec) -> Decimal | None:
    """USD per hour of one gateway pod: ``spec.gateway.resources`` (CPU and memory requests) at the catalog's
    on-demand prices (the gateway stays on on-demand nodes; the budget ledger prices its pods the same way,
    ``costmodel.budget.state.service_state``); None when the catalog cannot price them."""
    from modalscale.costmodel.catalog import PricingTier, ReplicaResources, UnknownPrice

    try:
        return deps.prices.catalog().price_replica(
            ReplicaResources.from_quantities(spec.gateway.cpu, spec.gateway.memory), PricingTier.ON_DEMAND)
    except UnknownPrice:
        return None


def priced_condition(priced: PricedReplica) -> cond.Condition:
    """The ``Priced`` condition: True, reason ``OpenCost``/``Catalog``/``CatalogFallback``, the message says since
    when and (for a fallback) why."""
    return cond.Condition(R.PRICED, cond.TRUE, priced.source.value, priced.message)


def add_priced(plan: IsvcPlan, stored: IsvcStatus, priced: PricedReplica, generation: int,
               now: dt.datetime) -> None:
    """Put the ``Priced`` condition into ``plan.status`` and an Event into ``plan.events`` when the source changed."""
    before = cond.get(stored.conditions, R.PRICED)
    wanted = priced_condition(priced)
    plan.status = replace(plan.status, conditions=tuple(cond.upsert(plan.status.conditions, [wanted], generation,
                                                                     now)))
    fallback = wanted.reason == R.CATALOG_FALLBACK
    if (before is None and fallback) or (before is not None and before.get("reason") != wanted.reason):
        plan.events.append(("Warning" if fallback else "Normal", wanted.reason, f"Priced: {wanted.message}"))


def _fail_status(stored: IsvcStatus, generation: int, reason: str, message: str, now: dt.datetime,
                 deployment: dict[str, Any] | None = None) -> IsvcStatus:
    """The status of a refused service: ``Ready=False`` and ``Degraded=True`` with the refusal's reason, but for a
    missing model (``ModelNotFound``) while the Deployment ``deployment`` (as read) still has ready replicas: they
    serve the model they loaded, so ``Ready`` stays True (:func:`plan.refused_ready`) and ``Degraded`` says that new
    replicas cannot start."""
    wanted = [refused_ready(reason, message, deployment), cond.Condition(R.DEGRADED, cond.TRUE, reason, message)]
    if reason == R.UNKNOWN_GPU_PRICE:  # Neither OpenCost nor the catalog prices it: Priced says so too.
        wanted.append(cond.Condition(R.PRICED, cond.FALSE, reason, message))
    return IsvcStatus(observed_generation=generation,
                      conditions=tuple(cond.upsert(stored.conditions, wanted, generation, now)))


def refuse(deps: Deps, raw: dict[str, Any], exc: InvalidSpec | ModelReferenceError, now: dt.datetime,
           logger: Log, stored: IsvcStatus | None = None, deployment: dict[str, Any] | None = None) -> None:
    """Record a refused InferenceService in status and an Event (once per new or changed problem).

    Args:
        stored: The status to compare with (default: ``raw``'s, read with ``read_isvc_status``).
        deployment: The replicas' Deployment as read this pass (None: not read or not found), whose ready replicas
            keep ``Ready`` True through a missing model (:func:`_fail_status`).
    """
    ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
    reason = exc.reason if isinstance(exc, InvalidSpec) else R.MODEL_NOT_FOUND
    before = read_isvc_status(raw) if stored is None else stored
    new = _fail_status(before, int(raw["metadata"].get("generation") or 0), reason, str(exc), now, deployment)
    if deps.writer.patch_isvc_status(ns, name, new, before):
        # The problem is new or changed: reported once, in status and as an Event.
        deps.writer.event(raw, "Warning", reason, str(exc), logger, queued=False)
        logger.warning("Refused InferenceService: reason=%s %s", reason, exc)
    deps.metrics.reconciles.labels(kind="InferenceService", result=reason).inc()


def reconcile_isvc(deps: Deps, body: Mapping[str, Any], logger: Log) -> IsvcStatus | None:
    """One level-triggered reconcile of an InferenceService: observe, plan, apply, report.

    Args:
        body: The object (or the event that woke us); only its namespace and name are used: it is read fresh.
    Returns:
        The status as planned (None: the object is gone).
    Raises:
        NotSynced: A watch cache of the children has not listed yet (nothing written).
        InvalidSpec / ModelReferenceError: after recording them in status and an Event (nothing else written).
    """
    started = time.monotonic()
    now = deps.clock()
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    # Level-triggered: act on the object as it is now, not on the (possibly older) event that woke us.
    raw = deps.observer.read_isvc(ns, name)
    if raw is None:
        return None
    stored = read_isvc_status(raw)
    deployment: dict[str, Any] | None = None
    try:
        spec = with_spot_placement(parse_isvc(raw), spot_switches(raw["metadata"].get("annotations")))
        files = repository_files(spec)  # one piece (the runtime fields refused before any read)
        encoder_files = image_encoder_files(spec)
        observed = deps.observer.observe(spec, stored)
        deployment = observed.deployment
        owned, _ = child_conflicts(spec, observed)  # as the plan sees it: no foreign object taken for a child
        spec = hold_spot_placement(spec, owned, raw["metadata"].get("annotations"))
        layout = stage_layout(spec, owned)
        if layout.front_address is not None:
            files = repository_files(spec, layout)
        observed.spot_policy = spot_policies(raw["metadata"].get("annotations"))
        observe_budget_cap(observed, raw["metadata"].get("annotations"))
        priced = replica_price(deps, spec)
        observed.replica_usd_per_hour = priced.usd_per_hour
        observed.gateway_usd_per_pod_hour = gateway_price(deps, spec)
        if spec.stages is not None:
            observed.image_encoder_usd_per_hour = replica_price(
                deps, image_encoder_spec(spec), "spec.stages.imageEncoder.resources.gpu.type").usd_per_hour
        config = plan_config(deps)

        def make_plan(observed: IsvcObserved) -> IsvcPlan:
            plan = plan_isvc(spec, observed, files, config, now, encoder_files=encoder_files)
            add_priced(plan, stored, priced, spec.generation, now)
            return plan

        plan = make_plan(observed)
    except (InvalidSpec, ModelReferenceError) as exc:
        refuse(deps, raw, exc, now, logger, deployment=deployment)
        raise
    planned = time.monotonic()
    plan = _apply_owned(deps, raw, spec, observed, plan, make_plan, now, logger)
    written = time.monotonic()
    patch = deps.writer.patch_isvc_status(ns, name, plan.status, stored)
    _report(deps, raw, plan.events, started, logger)
    done = time.monotonic()
    # Where a reconcile's time goes (issue 21 §3: the creation burst's p99; docs/benchmarks.md).
    logger.info("Reconciled %s/%s in %.3f s: read and plan %.3f s, %d child writes %.3f s, status %s %.3f s, "
                "%d Events queued", ns, name, done - started, planned - started, len(plan.writes), written - planned,
                "patched" if patch else "unchanged", done - written, len(plan.events))
    return plan.status


def resync_isvc(deps: Deps, body: Mapping[str, Any], logger: Log) -> bool:
    """:func:`reconcile_isvc` under the object's lock for its worker (a child changed, or the resync interval
    passed); errors are logged, never raised.

    Returns:
        Whether the service is settled: False when it was refused, the reconcile failed (an API error, a cache not
        synced: nothing written) or it holds ``ScalingConflict=True`` or ``ChildConflict=True`` (the worker then looks
        again sooner: a user's object without the operator's label is in no watch cache, so its deletion wakes
        nothing).
    """
    try:
        with deps.lock_for(body["metadata"]["uid"]):
            status = reconcile_isvc(deps, body, logger)
    except (InvalidSpec, ModelReferenceError):
        return False  # Recorded in status and an Event; re-evaluated soon (a referenced object may appear).
    except NotSynced as exc:
        logger.info("Held the reconcile: %s", exc)
        return False
    except Exception as exc:  # an API error: hold, as the timer did, and try again soon
        logger.warning("Reconcile failed: %s: %s", type(exc).__name__, exc)
        return False
    conflicts = [] if status is None else [cond.get(status.conditions, t) for t in (R.SCALING_CONFLICT,
                                                                                    R.CHILD_CONFLICT)]
    return all(c is None or c.get("status") != cond.TRUE for c in conflicts)


def scale_isvc(deps: Deps, raw: dict[str, Any], decision: Decision | None, autoscale: IsvcStatus,
               logger: Log, recorded: Callable[[IsvcPlan | None], None] | None = None) -> None:
    """Apply a valid autoscaler decision that changes ``status.desiredReplicas``, or the image encoder pool's count
    (``status.stages[image-encoder].autoscaler``; ``decision`` None: the front follows its record) (caller holds
    the object's lock).

    Writes, in this order: one status patch (the autoscaler's part ``autoscale`` merged with the
    InferenceService's status; ``desiredReplicas`` stays the record a restarted operator continues from), the
    Deployments' replicas (the front's and, with ``spec.stages``, the encoder pool's), Events for condition
    transitions.

    Args:
        raw: The InferenceService as just read (under the lock).
        decision: From ``recommend``; valid. None for a pool decision (in ``autoscale``).
        autoscale: ``plan_autoscale``'s (or ``plan_activation``'s) status part for the same decision.
        recorded: Called once the decision is in status (right after that patch, before any Deployment write),
            with the plan whose counts are written (None when the spec was refused): the autoscaler posts its
            decision's Event there, naming what the plan applies (a BudgetPolicy cap's split may write less), so a
            failed Deployment write (the next reconcile applies the recorded count) does not lose it.
    Raises:
        InvalidSpec / ModelReferenceError: after writing ``autoscale`` and recording the refusal in status
            and an Event (no child written).
    """
    started = time.monotonic()
    now = deps.clock()
    ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
    stored = read_isvc_status(raw)
    decided_status = merge_isvc_status(stored, autoscale)
    deployment: dict[str, Any] | None = None
    try:
        spec = with_spot_placement(parse_isvc(raw), spot_switches(raw["metadata"].get("annotations")))
        observed = deps.observer.observe(spec, decided_status)
        deployment = observed.deployment
        spec = hold_spot_placement(spec, child_conflicts(spec, observed)[0], raw["metadata"].get("annotations"))
        observed.spot_policy = spot_policies(raw["metadata"].get("annotations"))
        observe_budget_cap(observed, raw["metadata"].get("annotations"))
        if spec.stages is not None:  # the cap over both pools splits by price: the same split as a full pass
            observed.replica_usd_per_hour, observed.image_encoder_usd_per_hour = stage_prices(deps, spec)
            observed.gateway_usd_per_pod_hour = gateway_price(deps, spec)  # and the same costUSDPerHour
        plan = plan_isvc(spec, observed, None, plan_config(deps), now,
                         decision=decision)
    except (InvalidSpec, ModelReferenceError) as exc:
        deps.writer.patch_isvc_status(ns, name, autoscale, stored)
        if recorded is not None:
            recorded(None)
        refuse(deps, raw, exc, now, logger, stored=decided_status, deployment=deployment)
        raise
    deps.writer.patch_isvc_status(ns, name, merge_isvc_status(autoscale, plan.status), stored)
    if recorded is not None:
        recorded(plan)
    _apply_writes(deps, raw, spec, plan.writes, now, logger)
    _report(deps, raw, plan.events, started, logger)


class ChildRefused(InvalidSpec):
    """The API server refused a child this spec makes as invalid (400 / 422): a value the CRD's schema admits but
    the child's does not (a toleration with operator Exists and a value, a node-selector key that is no label key).
    Reported as ``InvalidSpec`` on the spec field the refused child field comes from (:data:`CHILD_FIELDS`)."""


CHILD_FIELDS = ((re.compile(r"\.tolerations\b"), "spec.placement.tolerations"),
                (re.compile(r"\.nodeSelector\b"), "spec.placement.nodeSelector"),
                (re.compile(r"\.containers\[\d+\]\.image\b"), "spec.runtime.image"),
                (re.compile(r"\.resources\b"), "spec.resources"),
                (re.compile(r"\.imagePullSecrets\b"), "spec.imagePullSecrets"),
                (re.compile(r"\.serviceAccountName\b"), "spec.serviceAccountName"))
"""A refused child field (the API server's ``details.causes[].field``) -> the InferenceService field it comes
from; ``spec`` when none matches."""


def child_refusal(write: Write, exc: ApiException) -> ChildRefused:
    """What to report of the API server refusing ``write`` (pure): the spec field and the server's own causes."""
    try:
        details = (json.loads(exc.body or "{}") or {}).get("details") or {}
    except (ValueError, AttributeError):
        details = {}
    causes = [c for c in details.get("causes") or [] if isinstance(c, dict)]
    fields = [str(c.get("field") or "") for c in causes]
    spec_field = next((to for f in fields for pattern, to in CHILD_FIELDS if pattern.search(f)), "spec")
    why = "; ".join(f"{c.get('field')}: {c.get('message')}" for c in causes)[:600] or str(exc.reason)
    return ChildRefused(spec_field, f"the API server refused the {write.kind} {write.name} made from it "
                                    f"({exc.status}: {why}); fix {spec_field}")


def _apply_owned(deps: Deps, raw: dict[str, Any], spec: IsvcSpec, observed: IsvcObserved, plan: IsvcPlan,
                 make_plan: Callable[[IsvcObserved], IsvcPlan], now: dt.datetime, logger: Log) -> IsvcPlan:
    """Apply ``plan``'s writes; when a create meets an object that is not this service's (:class:`ForeignChild`:
    the watch caches hold only objects with the operator's label, so a user's is first met there), plan again with
    it observed (``make_plan``: the plan holds its group and reports it) and apply what the new plan writes that was
    not applied yet. Returns the plan whose writes were applied, the one to report. Each foreign name is met once per
    pass (the next plan writes nothing to it), so this ends within the number of child names."""
    done: list[Write] = []
    while True:
        try:
            _apply_writes(deps, raw, spec, plan.writes, now, logger, done)
            return plan
        except ForeignChild as exc:
            logger.warning("Left an object of a child's name alone: %s", exc)
            observed = observed_with(spec, observed, exc.kind, exc.name, exc.observed)
            plan = make_plan(observed)


def _apply_writes(deps: Deps, raw: dict[str, Any], spec: IsvcSpec, writes: list[Write], now: dt.datetime,
                  logger: Log, done: list[Write] | None = None) -> None:
    """Apply ``writes`` in order, but those in ``done`` (applied earlier in this pass), each appended to ``done`` once
    applied. A child the API server refuses as invalid (400, 422: trying again cannot help) is recorded as a refusal
    of ``raw`` (:func:`refuse`) and raised as :class:`ChildRefused`; other errors go up as they are, to be retried."""
    done = [] if done is None else done
    for write in writes:
        if write in done:
            continue
        try:
            deps.writer.apply(spec.namespace, write)
        except ApiException as exc:
            if exc.status not in (400, 422):
                raise
            refused = child_refusal(write, exc)
            refuse(deps, raw, refused, now, logger)
            raise refused from exc
        done.append(write)
        logger.info("Applied %s %s: name=%s", write.action, write.kind, write.name)
        if write.kind == "Deployment" and write.name == spec.name and "replicas" in (write.body.get("spec") or {}):
            deps.metrics.decisions.labels(mode=spec.scaling.mode, reason="write").inc()


def _report(deps: Deps, raw: dict[str, Any], events: list[tuple[str, str, str]], started: float,
            logger: Log) -> None:
    for type_, reason, message in events:
        deps.writer.event(raw, type_, reason, message, logger)
    deps.metrics.reconciles.labels(kind="InferenceService", result="ok").inc()
    deps.metrics.reconcile_seconds.labels(kind="InferenceService").observe(time.monotonic() - started)
