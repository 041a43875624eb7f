"""kopf registration only: which handler runs on which event, with what settings.

The work lives elsewhere: the InferenceService reconcile in ``isvc.reconcile``, the autoscaler daemon in
``autoscale.handlers``, the BudgetPolicy daemon in ``budget.handlers``, peering in ``peering``; everything they
share is the one ``Deps`` the entry point builds (``deps.build_deps``) and hands to kopf as ``memo.deps``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kopf

from modalscale import GROUP, VERSION
from modalscale.api.errors import InvalidSpec
from modalscale.operator.autoscale.handlers import register_autoscaler
from modalscale.operator.budget.handlers import register_budget
from modalscale.operator.deps import deps_of
from modalscale.operator.incluster import login_in_pod
from modalscale.operator.isvc.plan import ModelReferenceError
from modalscale.operator.isvc.reconcile import ISVC_PLURAL, Log, reconcile_isvc
from modalscale.operator.peering import ensure_peering, peering_priority
from modalscale.operator.settings import Settings


def register(registry: kopf.OperatorRegistry, config: Settings) -> None:
    """Register every handler on ``registry`` (timer intervals come from ``config``)."""

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        deps = deps_of(memo)  # built by the entry point before kopf started: fails here, clearly, if not
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
        if not config.standalone:
            ensure_peering(deps.writer, config)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # In a pod: the mounted ServiceAccount token against $KUBERNETES_SERVICE_HOST (no cluster DNS needed);
        # elsewhere: $KUBECONFIG or ~/.kube/config.
        return login_in_pod(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.resume(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, ISVC_PLURAL, registry=registry)
    def isvc_changed(body: kopf.Body, memo: kopf.Memo, logger: Log, **_: Any) -> None:
        deps = deps_of(memo)
        try:
            with deps.lock_for(body["metadata"]["uid"]):
                reconcile_isvc(deps, body, logger)
        except (InvalidSpec, ModelReferenceError) as exc:
            raise kopf.PermanentError(str(exc)) from exc

    @kopf.timer(GROUP, VERSION, ISVC_PLURAL, interval=config.resync_interval_s, registry=registry)
    def isvc_resync(body: kopf.Body, memo: kopf.Memo, logger: Log, **_: Any) -> None:
        deps = deps_of(memo)
        try:
            with deps.lock_for(body["metadata"]["uid"]):
                reconcile_isvc(deps, body, logger)
        except (InvalidSpec, ModelReferenceError):
            pass  # Recorded in status and an Event; re-evaluated on the next tick or spec change.

    register_budget(registry, config)
    register_autoscaler(registry, config)
