"""Watch caches of the InferenceService's children: what ``observe.Observer`` reads instead of a GET per child.

The informer of client-go and controller-runtime, kept small: one :class:`Informer` per kind (and per watched
namespace when ``MODALSCALE_NAMESPACES`` is set) lists the objects carrying the operator's managed-by label
(``objects.owned_labels`` and ``objects.gateway_labels`` both set ``app.kubernetes.io/managed-by``), then watches
from the list's ``resourceVersion`` with bookmarks, resumes a watch that ended from the last version seen, and lists
again when the API server answers 410 Gone (the version is older than its watch cache; the store is then replaced,
and what vanished meanwhile is reported as deleted). The store keeps serving its last contents while it lists
again, as client-go's does; before its first list completes it is not synced, and :meth:`ChildCaches.get` /
:meth:`ChildCaches.list_objects` raise :class:`NotSynced`, which a reconcile treats like a failed read: it holds,
writing nothing.

Every change seen after the first list (a watch event or a difference found by a later list) calls ``on_change``
with the namespace and name of the InferenceService the object belongs to (its controller ``ownerReference`` of
kind InferenceService; for pods, whose owner is a ReplicaSet, the ``modalscale.io/inferenceservice``,
``modalscale.io/gateway`` or ``modalscale.io/image-encoder`` label; for a HorizontalPodAutoscaler, its
``scaleTargetRef``), so that a child's drift or a pod's readiness reaches its owner's reconcile at once rather than
at the next resync (:class:`Pokes`).

Threads: each informer runs in one daemon thread of its own (the kubernetes client is blocking); reads take a
lock held only to copy a reference. Objects are the API server's JSON as dicts (camelCase, as ``read_json`` gave).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("modalscale.operator.cache")

MANAGED_SELECTOR = "app.kubernetes.io/managed-by=modalscale-operator"
"""The label selector of the operator's children (``objects.owned_labels``, ``objects.gateway_labels``)."""
OWNER_LABELS = ("modalscale.io/inferenceservice", "modalscale.io/gateway", "modalscale.io/image-encoder")
"""Pod labels naming the InferenceService (``objects.SELECTOR_LABEL``, ``objects.GATEWAY_LABEL``,
``objects.IMAGE_ENCODER_LABEL``)."""
WATCH_TIMEOUT_S = 300
"""``timeoutSeconds`` of one watch request; the informer then watches again from its last version, s."""
LIST_TIMEOUT_S = 60.0
"""Client-side timeout of a list (and of connecting for a watch), s."""
RETRY_S = 2.0
"""Wait after a failed list or watch (not 410) before trying again, s."""

Key = tuple[str, str]
"""``(namespace, name)``."""
ListCall = Callable[..., Any]
"""A typed-client list method (``list_namespaced_pod`` with a namespace bound, or ``list_pod_for_all_namespaces``):
called with ``label_selector``, ``resource_version``, ``watch``, ``allow_watch_bookmarks``, ``timeout_seconds``,
``_request_timeout`` and ``_preload_content=False``; it returns the raw HTTP response."""


class NotSynced(Exception):
    """A cache has not completed its first list: what it holds cannot be told from a missing object."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"the {kind} watch cache has not synced yet (first list not complete): holding")
        self.kind = kind


def owner_of(kind: str, obj: dict[str, Any]) -> Key | None:
    """The InferenceService an object belongs to, ``(namespace, name)``, or None (pure)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or ""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "InferenceService" and ref.get("controller"):
            return ns, ref["name"]
    labels = meta.get("labels") or {}
    for label in OWNER_LABELS:
        if labels.get(label):
            return ns, labels[label]
    if kind == "HorizontalPodAutoscaler":
        target = (obj.get("spec") or {}).get("scaleTargetRef") or {}
        if target.get("kind") == "Deployment" and target.get("name"):
            return ns, target["name"]
    return None


class Informer:
    """List, then watch, one kind (in one namespace or all); keep the objects by ``(namespace, name)``.

    Args:
        kind: The kind's name, for logs and :class:`NotSynced` (``"Deployment"``).
        list_call: See :data:`ListCall`.
        label_selector: Only objects matching it are kept (None: every object of the kind).
        on_change: Called as ``on_change(kind, old, new)`` for every change after the first list (``new`` None: it
            was deleted); never for the first list, nor for bookmarks.
    """

    def __init__(self, kind: str, list_call: ListCall, label_selector: str | None,
                 on_change: Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]) -> None:
        self.kind = kind
        self.list_call = list_call
        self.label_selector = label_selector
        self.on_change = on_change
        self.objects: dict[Key, dict[str, Any]] = {}
        self.synced = threading.Event()
        self.resource_version = ""
        self.relists = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- reads
    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none (raises :class:`NotSynced` before the first list)."""
        if not self.synced.is_set():
            raise NotSynced(self.kind)
        with self._lock:
            return self.objects.get((namespace, name))

    def items(self, namespace: str) -> list[dict[str, Any]]:
        """Every object in ``namespace`` (raises :class:`NotSynced` before the first list)."""
        if not self.synced.is_set():
            raise NotSynced(self.kind)
        with self._lock:
            return [o for (ns, _), o in self.objects.items() if ns == namespace]

    # ---------------------------------------------------------------- list and watch
    def list_once(self) -> None:
        """List every object (replacing the store), report the differences when synced before, and mark synced."""
        resp = self.list_call(label_selector=self.label_selector, _preload_content=False,
                              _request_timeout=LIST_TIMEOUT_S)
        body = json.loads(resp.data)
        fresh = {_key(o): o for o in body.get("items") or []}
        with self._lock:
            old, self.objects = self.objects, fresh
            self.resource_version = (body.get("metadata") or {}).get("resourceVersion") or ""
        if self.synced.is_set():  # a list again (410 or a restart): what changed meanwhile is news
            self.relists += 1
            for key in old.keys() | fresh.keys():
                before, after = old.get(key), fresh.get(key)
                if _version(before) != _version(after):
                    self.on_change(self.kind, before, after)
        self.synced.set()

    def apply_event(self, event: dict[str, Any]) -> bool:
        """Apply one watch event to the store; False when the watch must list again (410 Gone).

        Raises:
            ApiException: An ``ERROR`` event other than 410 (its code as the status).
        """
        type_, obj = event.get("type"), event.get("object") or {}
        if type_ == "ERROR":
            if obj.get("code") == 410:
                return False
            raise ApiException(status=obj.get("code") or 500, reason=obj.get("message") or "watch error")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if type_ == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return True
        key = _key(obj)
        with self._lock:
            before = self.objects.get(key)
            if type_ == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            if rv:
                self.resource_version = rv
        self.on_change(self.kind, before, None if type_ == "DELETED" else obj)
        return True

    def watch_once(self) -> bool:
        """One watch request from the last version; False when it must list again (410 Gone)."""
        resp = self.list_call(label_selector=self.label_selector, resource_version=self.resource_version,
                              watch=True, allow_watch_bookmarks=True, timeout_seconds=WATCH_TIMEOUT_S,
                              _preload_content=False, _request_timeout=(LIST_TIMEOUT_S, WATCH_TIMEOUT_S + 30))
        self._response = resp
        try:
            for line in _lines(resp):
                if self._stop.is_set():
                    return True
                if not self.apply_event(json.loads(line)):
                    return False
        finally:
            self._response = None
            resp.release_conn()
        return True

    def run(self) -> None:
        """List and watch until :meth:`stop` (the thread's body); errors are logged and retried."""
        must_list = True
        while not self._stop.is_set():
            try:
                if must_list:
                    self.list_once()
                must_list = not self.watch_once()
            except ApiException as exc:
                must_list = must_list or exc.status == 410
                if exc.status != 410:
                    log.warning("Watch cache failed: kind=%s status=%s reason=%s", self.kind, exc.status, exc.reason)
                    self._stop.wait(RETRY_S)
            except Exception as exc:  # connection errors of every kind: retry, keep the store
                if self._stop.is_set():
                    return
                log.warning("Watch cache failed: kind=%s error=%s", self.kind, exc)
                self._stop.wait(RETRY_S)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"cache-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread: at once, also while its watch waits for an event. The watch's socket is shut down, which
        ends the blocked read; closing the response instead waited for that read to return (its buffer's lock), up
        to the watch's 300 s, and held the operator's shutdown past any pod's grace period (a new-user audit, 6 Dec
        2026: 229-281 s from SIGTERM to exit)."""
        self._stop.set()
        resp = self._response
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed, or not connected
                pass


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta["name"]


def _version(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


def _lines(resp: Any) -> Iterator[bytes]:
    """The newline-separated JSON events of a streamed watch response."""
    pending = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


@dataclass(frozen=True)
class CachedKind:
    """One cached kind: its name, the client group API and list method names, and whether only the operator's
    children are kept (``MANAGED_SELECTOR``) or every object (foreign HPAs)."""

    kind: str
    api: str
    namespaced_list: str
    all_list: str
    managed_only: bool = True


CACHED_KINDS = (
    CachedKind("Deployment", "AppsV1Api", "list_namespaced_deployment", "list_deployment_for_all_namespaces"),
    CachedKind("Service", "CoreV1Api", "list_namespaced_service", "list_service_for_all_namespaces"),
    CachedKind("ConfigMap", "CoreV1Api", "list_namespaced_config_map", "list_config_map_for_all_namespaces"),
    CachedKind("Pod", "CoreV1Api", "list_namespaced_pod", "list_pod_for_all_namespaces"),
    CachedKind("HorizontalPodAutoscaler", "AutoscalingV2Api", "list_namespaced_horizontal_pod_autoscaler",
               "list_horizontal_pod_autoscaler_for_all_namespaces", managed_only=False),
    CachedKind("NetworkPolicy", "NetworkingV1Api", "list_namespaced_network_policy",
               "list_network_policy_for_all_namespaces"),
    CachedKind("ServiceAccount", "CoreV1Api", "list_namespaced_service_account",
               "list_service_account_for_all_namespaces"),
    CachedKind("Role", "RbacAuthorizationV1Api", "list_namespaced_role", "list_role_for_all_namespaces"),
    CachedKind("RoleBinding", "RbacAuthorizationV1Api", "list_namespaced_role_binding",
               "list_role_binding_for_all_namespaces"),
    CachedKind("PodDisruptionBudget", "PolicyV1Api", "list_namespaced_pod_disruption_budget",
               "list_pod_disruption_budget_for_all_namespaces"),
)
"""Every kind ``Observer.observe`` reads (the user's model ConfigMap and PVC excepted: they are not the
operator's, carry no label of it, and are read with a GET when a spec names them)."""


class ChildCaches:
    """The informers of :data:`CACHED_KINDS`, cluster-wide or one per namespace of ``namespaces``.

    Args:
        api: The operator's ``ApiClient``.
        namespaces: The watched namespaces (empty: all, cluster-wide lists).
        on_owner_change: Called with ``(namespace, name)`` of the InferenceService whose child changed.
    """

    def __init__(self, api: client.ApiClient, namespaces: Iterable[str] = (),
                 on_owner_change: Callable[[str, str], None] | None = None) -> None:
        self.on_owner_change = on_owner_change
        self.namespaces = tuple(namespaces)
        self.informers: dict[str, list[Informer]] = {}
        # Each watch holds a connection for minutes: the watches get a connection pool of their own, sized for all
        # of them. Sharing ``api``'s pool (10 connections by default, one per watch here) left the reconciles none
        # to reuse: every request of theirs opened, and threw away, a new TLS connection (benchmarks/operator_scale.py,
        # one run each: the client's 1,000 creates took 139 s with the shared pool, 61 s with this one).
        config = copy.deepcopy(api.configuration)
        config.connection_pool_maxsize = len(CACHED_KINDS) * max(1, len(self.namespaces)) + 2
        own = client.ApiClient(config)
        for ck in CACHED_KINDS:
            group_api = getattr(client, ck.api)(own)
            selector = MANAGED_SELECTOR if ck.managed_only else None
            if self.namespaces:
                calls = [_bound(getattr(group_api, ck.namespaced_list), ns) for ns in self.namespaces]
            else:
                calls = [getattr(group_api, ck.all_list)]
            self.informers[ck.kind] = [Informer(ck.kind, call, selector, self._changed) for call in calls]

    def _changed(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        owner = owner_of(kind, new if new is not None else old or {})
        if owner is not None and self.on_owner_change is not None:
            self.on_owner_change(*owner)

    def _informer(self, kind: str, namespace: str) -> Informer:
        informers = self.informers[kind]
        if self.namespaces:
            for ns, inf in zip(self.namespaces, informers, strict=True):
                if ns == namespace:
                    return inf
            raise NotSynced(f"{kind} (namespace {namespace!r} is not watched)")
        return informers[0]

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached object or None (raises :class:`NotSynced` before that informer's first list)."""
        return self._informer(kind, namespace).get(namespace, name)

    def list_objects(self, kind: str, namespace: str, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The cached objects of ``namespace`` whose labels include ``labels`` (raises :class:`NotSynced`)."""
        items = self._informer(kind, namespace).items(namespace)
        if not labels:
            return items
        return [o for o in items
                if all(((o.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in labels.items())]

    def all_informers(self) -> list[Informer]:
        return [inf for infs in self.informers.values() for inf in infs]

    def start(self) -> None:
        for inf in self.all_informers():
            inf.start()

    def wait_synced(self, timeout_s: float) -> list[str]:
        """Wait until every informer has listed once; returns the kinds still not synced at ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        for inf in self.all_informers():
            inf.synced.wait(max(0.0, deadline - time.monotonic()))
        return sorted({inf.kind for inf in self.all_informers() if not inf.synced.is_set()})

    def stop(self) -> None:
        for inf in self.all_informers():
            inf.stop()


def _bound(call: ListCall, namespace: str) -> ListCall:
    return lambda **kwargs: call(namespace, **kwargs)


MISSED_MAX = 100_000
"""Most pokes kept for objects with no worker; past it they are forgotten (those objects wait for their resync)."""


class Pokes:
    """Wake-ups of the per-InferenceService workers, from any thread (the informers') to the event loop.

    A worker :meth:`subscribe` s with its loop; :meth:`poke` sets its ``asyncio.Event`` thread-safely. A poke for an
    object with no worker (its worker not started yet, or this replica paused by peering, which stops the workers)
    is kept, and the worker that subscribes next for that object starts poked: a child that changed while no
    replica was active is reconciled as soon as this one takes over.
    """

    def __init__(self) -> None:
        self._events: dict[Key, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}
        self._missed: set[Key] = set()
        self._lock = threading.Lock()
        self.sent = 0

    def subscribe(self, namespace: str, name: str) -> asyncio.Event:
        event = asyncio.Event()
        with self._lock:
            self._events[(namespace, name)] = (asyncio.get_running_loop(), event)
            if (namespace, name) in self._missed:
                self._missed.discard((namespace, name))
                event.set()
        return event

    def unsubscribe(self, namespace: str, name: str, event: asyncio.Event) -> None:
        with self._lock:
            if self._events.get((namespace, name), (None, None))[1] is event:
                del self._events[(namespace, name)]

    def poke(self, namespace: str, name: str) -> None:
        with self._lock:
            found = self._events.get((namespace, name))
            if found is None:
                if len(self._missed) >= MISSED_MAX:
                    self._missed.clear()
                self._missed.add((namespace, name))
        if found is not None:
            self.sent += 1
            loop, event = found
            loop.call_soon_threadsafe(event.set)
