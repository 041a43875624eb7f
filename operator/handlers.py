"""kopf registration only: which handler runs on which event, with what settings.

The work lives elsewhere: the InferenceService reconcile in ``isvc.reconcile``, the autoscaler daemon in
``autoscale.handlers``, the BudgetPolicy daemon in ``budget.handlers``, peering in ``peering``; everything they
share is the one ``Deps`` the entry point builds (``deps.build_deps``) and hands to kopf as ``memo.deps``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import kopf

from modalscale import GROUP, VERSION
from modalscale.api.errors import InvalidSpec
from modalscale.operator.autoscale.handlers import register_autoscaler
from modalscale.operator.budget.handlers import register_budget
from modalscale.operator.deps import deps_of
from modalscale.operator.incluster import login_in_pod
from modalscale.operator.isvc.cache import NotSynced
from modalscale.operator.isvc.plan import ModelReferenceError
from modalscale.operator.isvc.reconcile import ISVC_PLURAL, Log, reconcile_isvc, resync_isvc
from modalscale.operator.peering import ensure_peering, peering_priority
from modalscale.operator.settings import Settings

CACHE_SYNC_TIMEOUT_S = 120.0
"""How long start-up waits for every watch cache's first list before it fails (RBAC without list/watch, an API
server that does not answer), s."""
EVENTS_FLUSH_S = 10.0
"""At shutdown, how long the clean-up waits for the Events still queued to be posted, s."""
POKE_COALESCE_S = 1.0
"""After a child changed, wait this long before reconciling its InferenceService, so that the burst of changes one
write sets off (a Deployment's status, its pods being scheduled and turning Ready) makes one reconcile, s."""
RECHECK_S = 30.0
"""The worker looks again after this long (instead of the resync interval) at a service its last reconcile left
refused (a model ConfigMap or PVC it names may appear: not watched), failed (API error, cache not synced) or with
``ScalingConflict=True`` (the condition clears when ``MODALSCALE_CONFLICT_HOLD_SECONDS`` have passed: the clock, not
a change, moves it), s. It is the resync interval this operator had before its watch caches."""
WORKER_CONCURRENCY = 2
"""At most this many worker reconciles run at once (controller-runtime's ``MaxConcurrentReconciles``, default 1):
they queue instead of sharing the GIL and the API server with each other, so each one stays short (kopf's own
change handlers run beside them in its executor)."""
RESYNC_JITTER = 0.1
"""Each resync wait is ``resync_interval_s`` times 1 to 1 + this (and the first one a random part of it), so that the
services resynced together at start-up do not stay in step."""


def register(registry: kopf.OperatorRegistry, config: Settings) -> None:
    """Register every handler on ``registry`` (timer intervals come from ``config``)."""
    workers: list[asyncio.Semaphore] = []  # made in kopf's loop by the first worker: WORKER_CONCURRENCY slots

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
        # Sync handlers in flight at once (the InferenceService change handlers, the activation handler). 2, not 4
        # (nor 8): in the creation burst of 1,000 services the reconciles in flight queue at the API server (the
        # machine's CPU), so each takes longer the more run at once (benchmarks/operator_scale.py: p99 <= 5 s with 8,
        # <= 2.5 s with 4, <= 1 s with 2, and the burst no slower: all Ready after 110-114 s with 2, 117-122 s with 4;
        # docs/benchmarks.md).
        settings.execution.max_workers = 2
        # Namespace-scoped installs have no cluster-wide list rights: do not scan namespaces and CRDs.
        settings.scanning.disabled = bool(config.namespaces)
        if not config.standalone:
            ensure_peering(deps.writer, config)
        if deps.caches is not None:  # every replica keeps its caches warm; only the active one acts on them
            deps.caches.start()
            missing = deps.caches.wait_synced(CACHE_SYNC_TIMEOUT_S)
            if missing:
                raise kopf.PermanentError(
                    f"the watch caches of {', '.join(missing)} did not complete their first list within "
                    f"{CACHE_SYNC_TIMEOUT_S:.0f} s: grant the operator list and watch on them (charts/modalscale "
                    "templates/rbac.yaml) and check that the API server answers")

    @kopf.on.cleanup(registry=registry)
    def stop_caches(memo: kopf.Memo, logger: Log, **_: Any) -> None:
        deps = deps_of(memo)
        if deps.caches is not None:
            deps.caches.stop()
        if not deps.writer.close(EVENTS_FLUSH_S):  # the Events still queued are posted before the process ends
            logger.warning("Events still queued after %.0f s at shutdown were not posted", EVENTS_FLUSH_S)

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
        except NotSynced as exc:
            raise kopf.TemporaryError(str(exc), delay=2) from exc

    # One worker per InferenceService (stopped by kopf when it is deleted and while peering pauses this replica):
    # it reconciles when the watch caches report a change of one of its children, and every resync interval.
    # kopf types every handler's namespace as str | None; an InferenceService is Namespaced, so it is a str.
    @kopf.daemon(GROUP, VERSION, ISVC_PLURAL, registry=registry, cancellation_timeout=30.0)  # type: ignore[arg-type]
    async def isvc_children_and_resync(body: kopf.Body, name: str, namespace: str, memo: kopf.Memo, logger: Log,
                                       stopped: kopf.DaemonStopped, **_: Any) -> None:
        deps = deps_of(memo)
        poked = deps.pokes.subscribe(namespace, name)
        stop = asyncio.ensure_future(stopped.wait())
        wait_s = config.resync_interval_s * random.uniform(RESYNC_JITTER, 1.0)  # spreading, not secrets
        try:
            while not stopped:
                poke = asyncio.ensure_future(poked.wait())
                done, _pending = await asyncio.wait({poke, stop}, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
                poke.cancel()
                if stop in done:
                    return
                if poke in done:  # a child changed: let the rest of its burst arrive, then one reconcile
                    await stopped.wait(POKE_COALESCE_S)
                    if stopped:
                        return
                if not workers:
                    workers.append(asyncio.Semaphore(WORKER_CONCURRENCY))
                async with workers[0]:
                    poked.clear()
                    settled = await asyncio.to_thread(resync_isvc, deps, body, logger)
                wait_s = config.resync_interval_s * random.uniform(1.0, 1.0 + RESYNC_JITTER)
                if not settled:
                    wait_s = min(wait_s, RECHECK_S)
        finally:
            stop.cancel()
            deps.pokes.unsubscribe(namespace, name, poked)

    register_budget(registry, config)
    register_autoscaler(registry, config)

