"""kopf registration only: observe, plan (pure), apply. Built for an explicit registry and settings."""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf

from modalscale import GROUP, VERSION
from modalscale.operator import conditions as cond
from modalscale.operator import reasons as R
from modalscale.operator.apply import Writer
from modalscale.operator.isvc_observe import Observer
from modalscale.operator.isvc_plan import ModelReferenceError, PlanConfig, plan_isvc
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


def _fail_status(body: kopf.Body, reason: str, message: str, now: dt.datetime) -> dict[str, Any]:
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
    raw = {"metadata": dict(body["metadata"]), "spec": dict(body.get("spec") or {}), "kind": body["kind"],
           "apiVersion": body["apiVersion"]}
    raw["metadata"]["namespace"] = body["metadata"]["namespace"]
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    current_status = dict(body.get("status") or {})
    try:
        spec = parse_isvc(_plain(raw))
        files = repository_files(spec)
        observed = deps.observer.observe(spec, _plain(current_status))
        plan = plan_isvc(spec, observed, files, PlanConfig(conflict_hold_s=deps.settings.conflict_hold_s), now)
    except (InvalidSpec, ModelReferenceError) as exc:
        reason = R.INVALID_SPEC if isinstance(exc, InvalidSpec) else R.MODEL_NOT_FOUND
        new = _fail_status(body, reason, str(exc), now)
        patch = cond.status_patch(_plain(current_status), new)
        if patch:
            deps.writer.patch_status(ISVC_PLURAL, ns, name, patch)
            if any(c["type"] == R.READY for c in cond.transitions(current_status.get("conditions"), new["conditions"])) \
                    or cond.get(current_status.get("conditions"), R.READY) is None \
                    or (cond.get(current_status.get("conditions"), R.READY) or {}).get("message") != str(exc):
                deps.writer.event(_plain(raw), "Warning", reason, str(exc), logger)
        deps.metrics.reconciles.labels(kind="InferenceService", result=reason).inc()
        logger.warning("Refused InferenceService: reason=%s %s", reason, exc)
        raise
    for write in plan.writes:
        deps.writer.apply(ns, write)
        logger.info("Applied %s %s: name=%s", write.action, write.kind, write.name)
        if write.kind == "Deployment" and "replicas" in (write.body.get("spec") or {}):
            deps.metrics.decisions.labels(mode=spec.scaling.mode, reason="write").inc()
    patch = cond.status_patch(_plain(current_status), plan.status)
    deps.writer.patch_status(ISVC_PLURAL, ns, name, patch)
    for type_, reason, message in plan.events:
        deps.writer.event(_plain(raw), type_, reason, message, logger)
    deps.metrics.reconciles.labels(kind="InferenceService", result="ok").inc()
    deps.metrics.reconcile_seconds.labels(kind="InferenceService").observe(time.monotonic() - started)


def _plain(obj: Any) -> Any:
    """kopf's read-only views -> plain dicts/lists."""
    if isinstance(obj, dict) or hasattr(obj, "items") and callable(obj.items):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def register(registry: kopf.OperatorRegistry, settings: Settings) -> None:
    """Register every handler on ``registry`` (timer intervals come from ``settings``)."""

    @kopf.on.startup(registry=registry)
    def configure(settings_: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings_.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="modalscale.io")
        settings_.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="modalscale.io", key="last-handled-configuration")
        settings_.persistence.finalizer = "modalscale.io/finalizer"
        settings_.posting.reporting_component = "modalscale-operator"
        settings_.posting.level = logging.WARNING
        settings_.watching.server_timeout = 300
        settings_.watching.client_timeout = 330
        settings_.watching.connect_timeout = 30
        settings_.peering.name = settings.peering_name
        settings_.peering.standalone = settings.standalone
        settings_.peering.priority = random.randint(1, 32767)  # kopf docs: distinct priorities for replicas
        settings_.peering.lifetime = 30
        settings_.execution.max_workers = 8
        memo.deps = memo.get("deps") or build_deps(settings)

    @kopf.on.resume(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    def isvc_changed(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
        try:
            reconcile_isvc(memo.deps, body, logger)
        except (InvalidSpec, ModelReferenceError) as exc:
            raise kopf.PermanentError(str(exc)) from exc

    @kopf.timer(GROUP, VERSION, ISVC_PLURAL, interval=settings.resync_interval_s, registry=registry)
    def isvc_resync(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
        try:
            reconcile_isvc(memo.deps, body, logger)
        except (InvalidSpec, ModelReferenceError):
            pass  # Recorded in status and an Event; re-evaluated on the next tick or spec change.


def build_deps(settings: Settings) -> Deps:
    """Clients, metrics and clock for the handlers (kubeconfig or in-cluster config)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    api = client.ApiClient()
    metrics = OperatorMetrics()
    return Deps(settings=settings, observer=Observer(api), writer=Writer(api, metrics), metrics=metrics,
                clock=lambda: dt.datetime.now(dt.UTC))
