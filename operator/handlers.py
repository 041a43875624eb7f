"""kopf registration only: observe, plan (pure), apply. Built for an explicit registry and settings."""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from decimal import Decimal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kopf

from modalscale import GROUP, VERSION
from modalscale.operator import conditions as cond
from modalscale.operator import reasons as R
from modalscale.operator.apply import Writer
from modalscale.operator.isvc_observe import Observer
from modalscale.operator.isvc_plan import ModelReferenceError, PlanConfig, budget_cap, plan_isvc
from modalscale.operator.isvc_spec import InvalidSpec, IsvcSpec, parse_isvc
from modalscale.operator.metrics import OperatorMetrics
from modalscale.operator.settings import Settings

ISVC_PLURAL = "inferenceservices"


@dataclass
class Deps:
    """Everything handlers need, built once at start-up and kept in ``memo.deps``."""

    settings: Settings
    observer: Observer
    writer: Writer
    metrics: OperatorMetrics
    clock: Callable[[], dt.datetime]
    catalog: Any
    """``modalscale.costmodel.catalog.Catalog`` (packaged prices merged with MODALSCALE_PRICING_CATALOG)."""
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    """One lock per object uid: the change handler and the timer never reconcile the same object at once."""

    def lock_for(self, uid: str) -> threading.Lock:
        return self.locks.setdefault(uid, threading.Lock())


def repository_files(spec: IsvcSpec) -> dict[str, str]:
    """The generated Triton model repository for a BuiltIn model (empty for user repositories).

    Raises:
        InvalidSpec: ``modalscale.runtime`` refused the runtime fields.
    """
    if spec.model.source != "BuiltIn":
        return {}
    from modalscale.runtime.repo_config import InvalidRuntimeSpec, RuntimeConfig, build_repository

    try:
        return build_repository(RuntimeConfig.from_isvc_spec(spec.raw_spec))
    except InvalidRuntimeSpec as exc:
        field = str(exc).split(":", 1)[0]
        raise InvalidSpec(field, str(exc).split(":", 1)[-1].strip()) from exc


class UnpricedGPU(InvalidSpec):
    """The GPU type has no price in the catalog: never priced at $0 silently."""


def replica_price(deps: Deps, spec: IsvcSpec) -> Decimal:
    """USD per replica-hour from the catalog.

    Raises:
        UnpricedGPU: The catalog has no price for ``spec.resources.gpu.type`` at the pricing tier.
    """
    from modalscale.costmodel.catalog import ReplicaResources, UnknownPrice

    res = ReplicaResources.from_quantities(cpu=spec.resources.cpu, memory=spec.resources.memory,
                                           gpu_count=spec.resources.gpu_count, gpu_type=spec.resources.gpu_type)
    try:
        return deps.catalog.price_replica(res, spec.pricing_tier)
    except UnknownPrice as exc:
        raise UnpricedGPU("spec.resources.gpu.type", f"{exc}") from exc


def _fail_status(body: dict[str, Any], reason: str, message: str, now: dt.datetime) -> dict[str, Any]:
    status = dict(body.get("status") or {})
    generation = int(body["metadata"].get("generation") or 0)
    conditions = cond.upsert(status.get("conditions"), [
        cond.Condition(R.READY, cond.FALSE, reason, message),
        cond.Condition(R.DEGRADED, cond.TRUE, reason, message),
    ], generation, now)
    return {"observedGeneration": generation, "conditions": conditions}


def reconcile_isvc(deps: Deps, body: kopf.Body, logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    """One level-triggered reconcile of an InferenceService: observe, plan, apply, report.

    Raises:
        InvalidSpec / ModelReferenceError: after recording them in status and an Event (nothing else written).
    """
    started = time.monotonic()
    now = deps.clock()
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    # Level-triggered: act on the object as it is now, not on the (possibly older) event that woke us.
    raw = deps.observer.read_isvc(ns, name)
    if raw is None:
        return
    current_status = dict(raw.get("status") or {})
    try:
        spec = parse_isvc(raw)
        files = repository_files(spec)
        observed = deps.observer.observe(spec, current_status)
        observed.budget_cap_replicas, observed.budget_cap_policy = budget_cap(raw["metadata"].get("annotations"))
        observed.replica_usd_per_hour = replica_price(deps, spec)
        plan = plan_isvc(spec, observed, files, PlanConfig(conflict_hold_s=deps.settings.conflict_hold_s), now)
    except (InvalidSpec, ModelReferenceError) as exc:
        reason = {InvalidSpec: R.INVALID_SPEC, ModelReferenceError: R.MODEL_NOT_FOUND,
                  UnpricedGPU: R.UNKNOWN_GPU_PRICE}[type(exc)]
        new = _fail_status(raw, reason, str(exc), now)
        patch = cond.status_patch(current_status, new)
        if patch:  # The problem is new or changed: report it once, in status and as an Event.
            deps.writer.patch_status(ISVC_PLURAL, ns, name, patch)
            deps.writer.event(raw, "Warning", reason, str(exc), logger)
            logger.warning("Refused InferenceService: reason=%s %s", reason, exc)
        deps.metrics.reconciles.labels(kind="InferenceService", result=reason).inc()
        raise
    for write in plan.writes:
        deps.writer.apply(ns, write)
        logger.info("Applied %s %s: name=%s", write.action, write.kind, write.name)
        if write.kind == "Deployment" and "replicas" in (write.body.get("spec") or {}):
            deps.metrics.decisions.labels(mode=spec.scaling.mode, reason="write").inc()
    patch = cond.status_patch(current_status, plan.status)
    deps.writer.patch_status(ISVC_PLURAL, ns, name, patch)
    for type_, reason, message in plan.events:
        deps.writer.event(raw, type_, reason, message, logger)
    deps.metrics.reconciles.labels(kind="InferenceService", result="ok").inc()
    deps.metrics.reconcile_seconds.labels(kind="InferenceService").observe(time.monotonic() - started)


def register(registry: kopf.OperatorRegistry, config: Settings) -> None:
    """Register every handler on ``registry`` (timer intervals come from ``config``)."""

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="modalscale.io")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="modalscale.io", key="last-handled-configuration")
        settings.persistence.finalizer = "modalscale.io/finalizer"
        settings.posting.reporting_component = "modalscale-operator"
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.connect_timeout = 30
        settings.peering.name = config.peering_name
        settings.peering.standalone = config.standalone
        # Newest start wins. kopf lets the live peer with the highest priority act; with random priorities a replica
        # restarted after a crash (SIGKILL, OOM: no record removed) waited up to one lifetime (30 s) for its dead
        # predecessor's record to expire whenever that one had drawn the higher number (2 of 5 restarts: 29-30 s).
        # Ranked by start time it outranks that record and acts at once. A live older replica pauses in favour of a
        # newer one (a rolling update hands over at once); a standby still waits out a dead active's record (HA).
        settings.peering.priority = peering_priority(time.time())
        settings.peering.lifetime = 30
        settings.execution.max_workers = 8
        # Namespace-scoped installs have no cluster-wide list rights: do not scan namespaces and CRDs.
        settings.scanning.disabled = bool(config.namespaces)
        memo.deps = memo.get("deps") or build_deps(config)
        if not config.standalone:
            ensure_peering(memo.deps.writer.custom, config)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # In a pod: the mounted ServiceAccount token; elsewhere: $KUBECONFIG or ~/.kube/config.
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.resume(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    def isvc_changed(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
        try:
            with memo.deps.lock_for(body["metadata"]["uid"]):
                reconcile_isvc(memo.deps, body, logger)
        except (InvalidSpec, ModelReferenceError) as exc:
            raise kopf.PermanentError(str(exc)) from exc

    @kopf.timer(GROUP, VERSION, ISVC_PLURAL, interval=config.resync_interval_s, registry=registry)
    def isvc_resync(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
        try:
            with memo.deps.lock_for(body["metadata"]["uid"]):
                reconcile_isvc(memo.deps, body, logger)
        except (InvalidSpec, ModelReferenceError):
            pass  # Recorded in status and an Event; re-evaluated on the next tick or spec change.

    from modalscale.operator.budget_handlers import register_budget  # BudgetPolicy handlers (own module)
    register_budget(registry, config)
    from modalscale.operator.autoscale_handlers import register_autoscaler  # autoscaler daemon (own module)
    register_autoscaler(registry, config)


def peering_priority(started_at_s: float, tie_break: int | None = None) -> int:
    """kopf peering priority of an operator replica started at ``started_at_s``: a later start ranks higher.

    Args:
        started_at_s: Start time, Unix seconds.
        tie_break: 0..999 (default random), so that replicas started in the same millisecond still differ: kopf
            pauses every replica while two live peers share a priority.
    Returns:
        Milliseconds since the epoch x 1000 + ``tie_break``; exact in a JSON double (below 2**53) until the year
        2255.
    Raises:
        ValueError: ``tie_break`` outside 0..999.
    """
    tie = random.randint(0, 999) if tie_break is None else tie_break
    if not 0 <= tie <= 999:
        raise ValueError(f"tie_break must be in 0..999, got {tie}")
    return round(started_at_s * 1000) * 1000 + tie


PEERING_CRD_FIXES = ("install it with `kubectl apply -f crds/` (kopf's peering CRDs ship there and in the "
                     "modalscale-crds chart, kopfPeering.install=true), or run a single replica without peering "
                     "with MODALSCALE_STANDALONE=true")
"""The two fixes named when kopf's peering CRD is missing."""


def ensure_peering(custom: Any, config: Settings) -> None:
    """Create the kopf peering object(s) the replicas meet in, if missing (kopf freezes until it exists).

    Raises:
        kopf.PermanentError: kopf's peering CRD (``clusterkopfpeerings.kopf.dev``, or ``kopfpeerings.kopf.dev``
            with ``MODALSCALE_NAMESPACES``) is not installed: the apiserver answered 404 for the resource itself.
            The message names the CRD and both fixes; start-up stops, since without the CRD kopf would hold every
            handler paused forever.
        kubernetes.client.rest.ApiException: Any other refusal (409, the object already exists, is success).
    """
    from kubernetes.client.rest import ApiException

    body = {"apiVersion": "kopf.dev/v1", "metadata": {"name": config.peering_name}}
    plural = "kopfpeerings" if config.namespaces else "clusterkopfpeerings"
    try:
        if config.namespaces:
            for ns in config.namespaces:
                custom.create_namespaced_custom_object("kopf.dev", "v1", ns, plural, {**body, "kind": "KopfPeering"})
        else:
            custom.create_cluster_custom_object("kopf.dev", "v1", plural, {**body, "kind": "ClusterKopfPeering"})
    except ApiException as exc:
        if exc.status == 409:
            return
        if exc.status == 404 and not _names_a_missing_namespace(exc):
            raise kopf.PermanentError(
                f"the CRD {plural}.kopf.dev is not installed (creating {plural}/{config.peering_name} answered "
                f"404): {PEERING_CRD_FIXES}") from None
        raise


def _names_a_missing_namespace(exc: Any) -> bool:
    """A 404 whose Status names a namespace (a watched namespace that does not exist), not a missing resource."""
    import json

    try:
        details = json.loads(exc.body or "").get("details") or {}
    except (ValueError, AttributeError):
        return False
    return details.get("kind") == "namespaces"


def build_deps(settings: Settings) -> Deps:
    """Clients, metrics and clock for the handlers (kubeconfig or in-cluster config)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    from pathlib import Path

    from modalscale.costmodel.catalog import load_catalog

    api = client.ApiClient()
    metrics = OperatorMetrics()
    catalog = load_catalog(Path(settings.pricing_catalog) if settings.pricing_catalog else None)
    return Deps(settings=settings, observer=Observer(api), writer=Writer(api, metrics), metrics=metrics,
                clock=lambda: dt.datetime.now(dt.UTC), catalog=catalog)
