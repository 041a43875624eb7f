"""The only writer to the Kubernetes API: executes a plan's writes, status patch and Events.

A plan's writes go one at a time, in the plan's order (:meth:`Writer.apply`). Events go to queues that a few
threads post from (:class:`EventPoster`), off the reconcile's path: every one queued is posted, those about one object
in order, with the time it was decided; a refused post is logged, never raised to the reconcile.

Issuing a new service's creates at once was measured and left out (benchmarks/operator_scale.py, 1,000 services on
the 2-core development machine; docs/benchmarks.md): with 4 reconciles in flight it made the slow tail worse (they
queue for the API server's CPU), and with 2 its gain was within the noise.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from modalscale import GROUP, VERSION
from modalscale.api.isvc_status import IsvcStatus, write_isvc_status
from modalscale.operator.isvc.observe import read_json
from modalscale.operator.isvc.plan import FOREIGN, ForeignChild, Write, desired_ownership
from modalscale.operator.metrics import OperatorMetrics

Log = logging.Logger | logging.LoggerAdapter[Any]
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"

log = logging.getLogger("modalscale.operator.writes")

EVENT_THREADS = 4
"""Threads posting Events (the Events about one object always on the same one, in order). One was not enough: in the
creation burst of 1,000 services (3 Events each, about 15 a second) its queue grew to some 600 Events, posted up to
half a minute late (benchmarks/operator_scale.py)."""
HANDLER_THREADS = 10
"""Connections kept for the writes the handlers' own threads make (status patches, annotations, peering): the
kubernetes client's default pool size, what they had before the Writer had a pool of its own."""
EVENT_RETRIES = 3
"""Attempts to post one Event when the API server answers 429 or 5xx, or cannot be reached (other refusals, such
as 403 or 422, are not retried)."""
EVENT_RETRY_S = 1.0
"""Wait before the second attempt, doubled before each later one, s."""


def _event_retryable(exc: Exception) -> bool:
    if isinstance(exc, ApiException):
        return exc.status == 429 or (exc.status or 0) >= 500 or not exc.status
    return True  # no answer: connection refused or reset, timeouts


class EventPoster:
    """Posts Events from queues, one thread each (:data:`EVENT_THREADS`); the Events about one object go through the
    same queue, in the order they were queued. A post that fails is logged (and retried when the failure is
    transient, :data:`EVENT_RETRIES`), never raised to whoever queued it.

    Nothing queued is dropped while the process lives: the queues have no bound, and :meth:`close` (the operator's
    clean-up) posts what is left before it returns.
    """

    def __init__(self, post: Callable[[str, dict[str, Any]], Any],
                 on_posted: Callable[[str, str, BaseException | None], None],
                 retry_s: float = EVENT_RETRY_S, threads: int = EVENT_THREADS) -> None:
        """
        Args:
            post: ``(namespace, event body)``: the API call (``EventsV1Api.create_namespaced_event``).
            on_posted: ``(namespace, regarding name, error)``: called after each attempt, ``error`` None when the
                Event was posted (the write counter and log line).
            retry_s: Wait before the second attempt (doubled before each later one), s.
            threads: Queues, each with its thread (started with the first Event it gets).
        """
        self.post, self.on_posted, self.retry_s = post, on_posted, retry_s
        self.queues: list[queue.Queue[tuple[dict[str, Any], Log] | threading.Event | None]] = [
            queue.Queue() for _ in range(threads)]
        self._threads: dict[int, threading.Thread] = {}
        self._lock = threading.Lock()

    def put(self, ev: dict[str, Any], logger: Log) -> None:
        """Queue one Event (its ``eventTime`` already set: when it was decided, not when it is posted)."""
        r = ev["regarding"]
        i = zlib.crc32(f"{r.get('namespace')}/{r.get('kind')}/{r['name']}".encode()) % len(self.queues)
        with self._lock:
            if i not in self._threads:
                self._threads[i] = threading.Thread(target=self._run, args=(self.queues[i],),
                                                    name=f"event-poster-{i}", daemon=True)
                self._threads[i].start()
        self.queues[i].put((ev, logger))

    def flush(self, timeout_s: float) -> bool:
        """Wait until every Event queued so far was posted (or given up); False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            started = list(self._threads)
        marks = []
        for i in started:
            done = threading.Event()
            self.queues[i].put(done)  # the thread sets it when it reaches it: after everything queued before
            marks.append(done)
        return all(done.wait(max(0.0, deadline - time.monotonic())) for done in marks)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Post what is queued (up to ``timeout_s``), then stop the threads. Returns whether everything was posted."""
        flushed = self.flush(timeout_s)
        with self._lock:
            for i in self._threads:
                self.queues[i].put(None)
            self._threads.clear()
        return flushed

    def _run(self, q: queue.Queue[tuple[dict[str, Any], Log] | threading.Event | None]) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            self._post(*item)

    def post_now(self, ev: dict[str, Any], logger: Log) -> None:
        """Post one Event on the caller's thread, once; a transient failure hands it to the queue (:meth:`put`),
        which retries it off that thread (its callers post an Event once per new problem, right after the status
        it goes with, so a post lost to one reset would never come again; a kopf handler must not sleep through
        the retries). Any other failure is logged, never raised."""
        if not self._post(ev, logger, attempts=1, requeue=True):
            self.put(ev, logger)

    def _post(self, ev: dict[str, Any], logger: Log, attempts: int = EVENT_RETRIES, requeue: bool = False) -> bool:
        """Post ``ev``; False only when ``requeue`` and the last attempt failed transiently (the caller queues it)."""
        ns, reason = ev["metadata"]["namespace"], ev["reason"]
        wait_s = self.retry_s
        for attempt in range(1, attempts + 1):
            try:
                self.post(ns, ev)
                self.on_posted(ns, ev["regarding"]["name"], None)
                return True
            except Exception as exc:  # a failed post never reaches the reconcile; ApiException and no answer alike
                self.on_posted(ns, ev["regarding"]["name"], exc)
                status = getattr(exc, "status", None)
                if requeue and attempt == attempts and _event_retryable(exc):
                    logger.info("Posting the event failed, queued to retry: reason=%s status=%s error=%s", reason,
                                status, type(exc).__name__)
                    return False
                if attempt < attempts and _event_retryable(exc):
                    logger.info("Posting the event failed, retrying in %.1f s: reason=%s status=%s error=%s",
                                wait_s, reason, status, type(exc).__name__)
                    time.sleep(wait_s)
                    wait_s *= 2
                    continue
                logger.warning("Posting the event failed: reason=%s status=%s body=%s", reason, status,
                               getattr(exc, "body", None) or f"{type(exc).__name__}: {exc}")
                return True
        return True


WRITE_KINDS = frozenset({"Deployment", "Service", "ConfigMap", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy",
                         "PodDisruptionBudget"})
"""The kinds :meth:`Writer.apply` writes (those of :meth:`Writer._gateway_calls` and Deployment, Service, ConfigMap)."""


class Writer:
    """Applies writes through its own ``ApiClient`` (a copy of ``api``'s configuration with a connection pool
    sized for the Writer's threads) and counts them in ``metrics``."""

    def __init__(self, api: client.ApiClient, metrics: OperatorMetrics, component: str = "modalscale-operator"):
        config = copy.deepcopy(api.configuration)
        # One connection per event thread and per handler thread that writes: a pool smaller than the threads using
        # it opens and throws away a TLS connection per request beyond it (see isvc.cache).
        config.connection_pool_maxsize = EVENT_THREADS + HANDLER_THREADS
        api = client.ApiClient(config)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.events = client.EventsV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.metrics = metrics
        self.component = component
        self.events_out = EventPoster(lambda ns, ev: self.events.create_namespaced_event(ns, ev),  # type: ignore[arg-type]  # the client sends a dict body as is
                                      lambda ns, name, error: self._count("Event", "create", ns, name, error))

    def close(self, timeout_s: float = 10.0) -> bool:
        """Post the Events still queued (up to ``timeout_s``) and stop the Event threads (the operator's
        clean-up). Returns whether every queued Event was posted."""
        return self.events_out.close(timeout_s)

    def _count(self, kind: str, verb: str, namespace: str, name: str, error: BaseException | None) -> None:
        """Count and log one write once its answer is in: ``error`` None (written), an ``ApiException`` (refused by
        the API server, with its status) or another exception (failed: no answer)."""
        if error is None:
            outcome = "written"
            log.info("Wrote kind=%s verb=%s namespace=%s name=%s", kind, verb, namespace, name)
        elif isinstance(error, ApiException):
            outcome = "refused"
            log.info("Write refused kind=%s verb=%s namespace=%s name=%s status=%s reason=%s", kind, verb,
                     namespace, name, error.status, error.reason)
        else:
            outcome = "failed"
            log.info("Write failed kind=%s verb=%s namespace=%s name=%s error=%s", kind, verb, namespace, name,
                     type(error).__name__)
        self.metrics.api_writes.labels(kind=kind, verb=verb, outcome=outcome).inc()

    @contextlib.contextmanager
    def _counted(self, kind: str, verb: str, namespace: str, name: str) -> Iterator[None]:
        """Around one API call: :meth:`_count` it with its outcome (an exception is counted, then raised on)."""
        try:
            yield
        except Exception as exc:
            self._count(kind, verb, namespace, name, exc)
            raise
        self._count(kind, verb, namespace, name, None)

    def apply(self, namespace: str, write: Write) -> None:
        """Create, patch or delete one child. A delete that finds it gone is not an error; a create that finds an
        object of that name reads it and patches it to ``write.body`` only when it is this service's
        (``plan.desired_ownership``: its controller owner reference, or an orphan with the operator's labels).

        Raises:
            ForeignChild: The create found an object that is not this service's; it is left as it is.
            kubernetes.client.exceptions.ApiException: Any other refusal (a 409 whose object is gone by the read).
        """
        if write.kind not in WRITE_KINDS:
            raise ValueError(f"unknown kind {write.kind}")
        try:
            with self._counted(write.kind, write.action, namespace, write.name):
                self._call(namespace, write)
        except ApiException as exc:
            if write.action == "create" and exc.status == 409:
                # Created meanwhile (the other replica before a handover), or there all along but not in the watch
                # cache (no managed-by label): the operator's own child whose label was removed, or a user's object
                # that merely has the child's name. Read it: the plan's rule decides. Ours: patch it to the desired
                # object, as a pass that had read it would have (labels and ownerReferences included), so that it
                # is back in the cache and the next pass finds it. Not ours: left untouched, for the plan to report.
                found = self._read(namespace, write.kind, write.name)
                if found is None:
                    raise  # deleted since: the next pass creates it
                verdict, why = desired_ownership(write.body, found)
                if verdict == FOREIGN:
                    raise ForeignChild(write.kind, write.name, found, why) from exc
                with self._counted(write.kind, "patch", namespace, write.name):
                    self._patch(namespace, write.kind, write.name, write.body)
                return
            if write.action == "delete" and exc.status == 404:
                return  # Already gone.
            raise

    def _call(self, namespace: str, write: Write) -> None:
        """The one API call of ``write`` (its kind checked by :meth:`apply`)."""
        if write.action == "delete" and write.kind in ("Deployment", "Service", "ConfigMap"):
            {"Deployment": self.apps.delete_namespaced_deployment, "Service": self.core.delete_namespaced_service,
             "ConfigMap": self.core.delete_namespaced_config_map}[write.kind](write.name, namespace)
        elif write.kind == "Deployment":
            if write.action == "create":
                self.apps.create_namespaced_deployment(namespace, write.body)  # type: ignore[arg-type]  # the client sends a dict body as is
            else:
                self.apps.patch_namespaced_deployment(write.name, namespace, write.body, _content_type=SMP)
        elif write.kind == "Service":
            if write.action == "create":
                self.core.create_namespaced_service(namespace, write.body)  # type: ignore[arg-type]  # the client sends a dict body as is
            else:
                self.core.patch_namespaced_service(write.name, namespace, write.body, _content_type=SMP)
        elif write.kind == "ConfigMap":
            if write.action == "create":
                self.core.create_namespaced_config_map(namespace, write.body)  # type: ignore[arg-type]  # the client sends a dict body as is
            else:
                self.core.patch_namespaced_config_map(write.name, namespace, write.body, _content_type=MERGE)
        elif write.kind in self._gateway_calls():
            create, patch, delete = self._gateway_calls()[write.kind]
            if write.action == "create":
                create(namespace, write.body)
            elif write.action == "delete":
                delete(write.name, namespace)
            else:
                patch(write.name, namespace, write.body, _content_type=SMP)
        else:
            raise ValueError(f"unknown kind {write.kind}")

    def _read(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """The object as the API server has it, camelCase as the observer reads it (None: not found)."""
        api, method = {"Deployment": (self.apps, "deployment"), "Service": (self.core, "service"),
                       "ConfigMap": (self.core, "config_map"), "ServiceAccount": (self.core, "service_account"),
                       "Role": (self.rbac, "role"), "RoleBinding": (self.rbac, "role_binding"),
                       "NetworkPolicy": (self.networking, "network_policy"),
                       "PodDisruptionBudget": (self.policy, "pod_disruption_budget")}[kind]
        return read_json(getattr(api, f"read_namespaced_{method}"), name, namespace)

    def _patch(self, namespace: str, kind: str, name: str, body: dict[str, Any]) -> None:
        if kind == "Deployment":
            self.apps.patch_namespaced_deployment(name, namespace, body, _content_type=SMP)
        elif kind == "Service":
            self.core.patch_namespaced_service(name, namespace, body, _content_type=SMP)
        elif kind == "ConfigMap":
            self.core.patch_namespaced_config_map(name, namespace, body, _content_type=MERGE)
        else:
            self._gateway_calls()[kind][1](name, namespace, body, _content_type=SMP)

    def _gateway_calls(self) -> dict[str, tuple[Any, Any, Any]]:
        """(create, patch, delete) of the kinds other than ConfigMap (the gateway's, and the PodDisruptionBudget of the
        replicas too), and of Deployments and Services for deletes
        (the gateway's Deployment and the Service ``<name>-replicas`` when the gateway is turned off)."""
        return {
            "ServiceAccount": (self.core.create_namespaced_service_account, self.core.patch_namespaced_service_account,
                               self.core.delete_namespaced_service_account),
            "Role": (self.rbac.create_namespaced_role, self.rbac.patch_namespaced_role,
                     self.rbac.delete_namespaced_role),
            "RoleBinding": (self.rbac.create_namespaced_role_binding, self.rbac.patch_namespaced_role_binding,
                            self.rbac.delete_namespaced_role_binding),
            "NetworkPolicy": (self.networking.create_namespaced_network_policy,
                              self.networking.patch_namespaced_network_policy,
                              self.networking.delete_namespaced_network_policy),
            "PodDisruptionBudget": (self.policy.create_namespaced_pod_disruption_budget,
                                    self.policy.patch_namespaced_pod_disruption_budget,
                                    self.policy.delete_namespaced_pod_disruption_budget),
        }

    def patch_status(self, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge-patch ``status`` (a no-op when ``patch`` is empty)."""
        if not patch:
            return
        with self._counted(plural, "patch-status", namespace, name):
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, {"status": patch}, _content_type=MERGE)

    def patch_isvc_status(self, namespace: str, name: str, status: IsvcStatus,
                          stored: IsvcStatus | None) -> dict[str, Any]:
        """Write an InferenceService's status: the merge patch ``write_isvc_status(status, stored)``; nothing when
        it is empty (an unchanged status is not written). Returns the patch written (``{}``: none)."""
        patch = write_isvc_status(status, stored)
        self.patch_status("inferenceservices", namespace, name, patch)
        return patch

    def patch_annotations(self, plural: str, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        """Merge-patch ``metadata.annotations`` of one of our custom objects (a None value deletes the key).

        Used by BudgetPolicies to set and lift the ``budget.modalscale.io/cap-*`` annotation on
        InferenceServices. Returns False when the object is gone (404); other API errors raise.
        """
        try:
            with self._counted(plural, "patch-annotations", namespace, name):
                self.custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, name, {"metadata": {"annotations": annotations}},
                    _content_type=MERGE)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create_peering(self, plural: str, namespace: str | None, body: dict[str, Any]) -> None:
        """Create one of kopf's peering objects (``kopf.dev/v1``): ``namespace`` None = cluster-scoped.

        Raises:
            kubernetes.client.rest.ApiException: Any refusal, 409 (it already exists) included.
        """
        with self._counted(plural, "create", namespace or "", body["metadata"]["name"]):
            if namespace is None:
                self.custom.create_cluster_custom_object("kopf.dev", "v1", plural, body)
            else:
                self.custom.create_namespaced_custom_object("kopf.dev", "v1", namespace, plural, body)

    def event(self, body: dict[str, Any], type_: str, reason: str, message: str, logger: Log,
              queued: bool = True) -> None:
        """A Kubernetes Event about ``body``, with this moment as its ``eventTime``; failures are logged, never raised.

        Args:
            queued: True: queue it and return at once (:class:`EventPoster` posts it, in order, retrying transient
                failures): what a reconcile's Events do. False: post it now on the caller's thread, a transient
                failure then retried through the queue (:meth:`EventPoster.post_now`): the refusal of an
                InferenceService and the BudgetPolicy handlers' Events, which clients read right after the status
                they go with (off the creation burst's path).
        """
        meta = body["metadata"]
        now = dt.datetime.now(dt.UTC)
        ev = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name'][:200]}-", "namespace": meta["namespace"]},
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": f"{GROUP}/{self.component}", "reportingInstance": self.component,
            "action": "Reconcile", "reason": reason, "type": type_, "note": message[:1024],
            "regarding": {"apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"), "kind": body["kind"],
                          "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
        }
        if queued:
            self.events_out.put(ev, logger)
        else:
            self.events_out.post_now(ev, logger)
