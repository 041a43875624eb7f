"""Where the gateway learns its replicas: a watch on the EndpointSlices of the replicas Service, or a static list.

The watch is the list-then-watch loop of client-go's reflector: list the slices with the label
``kubernetes.io/service-name=<service>``, remember the list's ``resourceVersion``, watch from it (with bookmarks),
and on ``410 Gone`` (the version was compacted away) list again. Any other error (the apiserver restarting, a
dropped connection) waits with capped exponential backoff and lists again. It never polls per request: each
change reaches the balancer once, as the full endpoint set.

The ``kubernetes`` client is synchronous, so the loop runs in a daemon thread and hands each new set to the
asyncio loop with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from modalscale.gateway.balancer import Endpoint

log = logging.getLogger(__name__)

OnUpdate = Callable[[tuple[Endpoint, ...]], None]
"""Receives the full current endpoint set (routable or not) after each change; called on the event loop."""

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""The label every EndpointSlice of a Service carries (set by the EndpointSlice controller)."""
WATCH_TIMEOUT_S = 50
"""Server-side timeout of one watch call, in seconds; the loop then watches again from the last version (the
client's read timeout is a little longer, so a silently dropped connection is noticed within a minute)."""
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""Waits between failed list/watch attempts, in seconds (the last repeats)."""


def load_api_client() -> Any:
    """A ``kubernetes.client.ApiClient`` from the in-cluster service account, else the kubeconfig.

    Raises:
        kubernetes.config.ConfigException: Neither is available (the gateway then fails at start, loudly).
    """
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class EndpointSource(Protocol):
    """Something that reports the endpoint set: :class:`StaticSource` or :class:`EndpointSliceWatch`."""

    async def run(self, on_update: OnUpdate) -> None:
        """Report the current set, then every change, until cancelled."""


ADDRESS_TYPE_ORDER = ("IPv4", "IPv6")
"""Which address of a pod listed in several families the gateway uses, best first (then any other type). A
dual-stack replicas Service has one EndpointSlice per family (``addressType``), so each pod is listed twice, once at
each address. The gateway takes IPv4: a pod listed in both families has both addresses, and the gateway's own pod,
in the same dual-stack cluster, has both too, so either reaches it; what matters is that the choice is fixed (never
the slices' random name suffixes or the order of watch events), so the pod keeps one key on the affinity ring and
one in-flight count. IPv4 is the family of every single-stack IPv4 and every dual-stack cluster, and the gateway's
health probes and readiness checks go to the same address."""


def _rank(address_type: object) -> int:
    return ADDRESS_TYPE_ORDER.index(address_type) if address_type in ADDRESS_TYPE_ORDER else len(ADDRESS_TYPE_ORDER)


def _pod_endpoints(slice_: Mapping[str, Any]) -> list[tuple[str, Endpoint]]:
    """``(pod identity, endpoint)`` for each endpoint of one EndpointSlice: the pod's ``targetRef.uid``, else its
    name, else the address (an endpoint with no targetRef)."""
    ports = {p.get("name"): p.get("port") for p in slice_.get("ports") or () if isinstance(p, Mapping)}
    http, grpc = ports.get("http"), ports.get("grpc")
    if not isinstance(http, int):
        return []
    out = []
    for ep in slice_.get("endpoints") or ():
        addresses = ep.get("addresses") or ()
        if not addresses:
            continue
        cond = ep.get("conditions") or {}
        ref = ep.get("targetRef") or {}
        name = str(ref.get("name", ""))
        identity = f"uid:{ref['uid']}" if ref.get("uid") else f"pod:{name}" if name else f"address:{addresses[0]}"
        out.append((identity, Endpoint(host=addresses[0], http_port=http,
                                       grpc_port=grpc if isinstance(grpc, int) else None,
                                       ready=cond.get("ready") is not False,
                                       terminating=cond.get("terminating") is True, name=name)))
    return out


def endpoints_from_slice(slice_: Mapping[str, Any]) -> list[Endpoint]:
    """The endpoints of one EndpointSlice (a raw ``discovery.k8s.io/v1`` object as JSON), pure.

    Ports come from the slice's ports named ``http`` and ``grpc`` (the replicas Service names them so); a slice
    without an ``http`` port yields nothing. Per the EndpointSlice API, an absent ``ready`` means ready and an
    absent ``terminating`` means not terminating, and an endpoint's addresses are fungible (clients may use the
    first only): one endpoint per entry, at its first address.
    """
    return [ep for _, ep in _pod_endpoints(slice_)]


def merge_slices(slices: Mapping[str, Mapping[str, Any]]) -> tuple[Endpoint, ...]:
    """One endpoint per pod over all the slices by name, pure, in a stable order (slice name, then entry).

    A pod is listed more than once when the Service is dual-stack (one slice per address family) and, for a moment,
    when the EndpointSlice controller moves it between slices (the API asks clients to deduplicate). Its copies are
    one replica (by ``targetRef.uid``, else its name): at the address of the family first in
    :data:`ADDRESS_TYPE_ORDER` (the first such slice by name, then the first entry), terminating if any copy is (a
    pod never stops terminating, so a copy that still says otherwise is stale), else ready if any copy is. Counted
    twice, a pod took a double share of new requests (its in-flight requests split over two keys), two points of
    the affinity ring, and twice the warming checks.
    """
    copies: dict[str, list[tuple[int, Endpoint]]] = {}
    for name in sorted(slices):
        rank = _rank(slices[name].get("addressType", "IPv4"))
        for identity, ep in _pod_endpoints(slices[name]):
            copies.setdefault(identity, []).append((rank, ep))
    out = []
    for found in copies.values():
        chosen = min(found, key=lambda c: c[0])[1]  # min keeps the first of equal rank
        out.append(replace(chosen, ready=any(ep.ready for _, ep in found),
                           terminating=any(ep.terminating for _, ep in found)))
    return tuple(out)


class StaticSource:
    """A fixed endpoint list (``--endpoints``, tests); :meth:`set` replaces it while running."""

    def __init__(self, endpoints: Iterable[Endpoint] = ()) -> None:
        self._endpoints = tuple(endpoints)
        self._changed = asyncio.Event()

    def set(self, endpoints: Iterable[Endpoint]) -> None:
        """Replace the list (call on the event loop); the gateway sees it at once."""
        self._endpoints = tuple(endpoints)
        self._changed.set()

    async def run(self, on_update: OnUpdate) -> None:
        """Report the list, then each :meth:`set`, until cancelled."""
        while True:
            self._changed.clear()
            on_update(self._endpoints)
            await self._changed.wait()


class EndpointSliceWatch:
    """List and watch the EndpointSlices of one Service (see the module docstring).

    Args:
        namespace: The Service's namespace.
        service: The Service's name (``<isvc>-replicas``).
        api_client: A ``kubernetes.client.ApiClient`` (:func:`load_api_client`).
    """

    def __init__(self, namespace: str, service: str, api_client: Any) -> None:
        self.namespace = namespace
        self.service = service
        self._api_client = api_client
        self._stop = threading.Event()
        self.relists = 0
        """How many times the loop listed (1 at start; each 410 or error adds one)."""

    async def run(self, on_update: OnUpdate) -> None:
        """Start the watch thread; report each new set on this loop until cancelled (then stop the thread)."""
        loop = asyncio.get_running_loop()

        def report(endpoints: tuple[Endpoint, ...]) -> None:
            loop.call_soon_threadsafe(on_update, endpoints)

        thread = threading.Thread(target=self._loop, args=(report,), name=f"watch-{self.service}", daemon=True)
        thread.start()
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            self._stop.set()

    def _loop(self, report: Callable[[tuple[Endpoint, ...]], None]) -> None:
        """The reflector loop (runs in the watch thread)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.DiscoveryV1Api(self._api_client)
        selector = f"{SERVICE_NAME_LABEL}={self.service}"
        failures = 0
        last: tuple[Endpoint, ...] | None = None
        while not self._stop.is_set():
            try:
                resp = api.list_namespaced_endpoint_slice(self.namespace, label_selector=selector,
                                                          _preload_content=False, _request_timeout=(5, 30))
                listed = json.loads(resp.data)  # type: ignore[attr-defined]
                self.relists += 1
                slices = {s["metadata"]["name"]: s for s in listed.get("items") or ()}
                version = listed["metadata"]["resourceVersion"]
                current = merge_slices(slices)
                if current != last:
                    report(current)
                    last = current
                failures = 0
                while not self._stop.is_set():
                    started = time.monotonic()
                    version, last = self._watch_once(api, selector, version, slices, last, report)
                    if time.monotonic() - started < 1.0:
                        self._stop.wait(1.0)  # a watch that ends at once (a proxy closing it) must not spin
            except ApiException as exc:
                if exc.status == 410:
                    log.info("Watch of EndpointSlices expired; listing again service=%s", self.service)
                    continue
                failures += 1
                log.warning("Watch of EndpointSlices failed service=%s status=%s reason=%s", self.service,
                            exc.status, exc.reason)
            except Exception as exc:  # a dropped connection, a timeout: back off and list again
                failures += 1
                log.warning("Watch of EndpointSlices failed service=%s error=%r", self.service, exc)
            self._stop.wait(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1] if failures else 0)

    def _watch_once(self, api: Any, selector: str, version: str, slices: dict[str, Any],
                    last: tuple[Endpoint, ...] | None, report: Callable[[tuple[Endpoint, ...]], None]
                    ) -> tuple[str, tuple[Endpoint, ...] | None]:
        """One watch call from ``version``; applies its events to ``slices``; returns the newest version seen.

        Raises:
            kubernetes.client.rest.ApiException: 410 when ``version`` is too old (the caller lists again).
        """
        from kubernetes import watch

        w = watch.Watch()  # type: ignore[no-untyped-call]
        events = w.stream(  # type: ignore[no-untyped-call]
            api.list_namespaced_endpoint_slice, self.namespace, label_selector=selector, resource_version=version,
            allow_watch_bookmarks=True, timeout_seconds=WATCH_TIMEOUT_S, _request_timeout=(5, WATCH_TIMEOUT_S + 10))
        for event in events:
            if self._stop.is_set():
                w.stop()  # type: ignore[no-untyped-call]
                break
            kind, obj = event.get("type"), event.get("raw_object") or {}
            version = obj.get("metadata", {}).get("resourceVersion", version)
            name = obj.get("metadata", {}).get("name", "")
            if kind in ("ADDED", "MODIFIED"):
                slices[name] = obj
            elif kind == "DELETED":
                slices.pop(name, None)
            else:
                continue  # BOOKMARK: only the version moves
            current = merge_slices(slices)
            if current != last:
                report(current)
                last = current
        return version, last

    def stop(self) -> None:
        """Ask the thread to end (it exits at its next event or watch timeout)."""
        self._stop.set()
