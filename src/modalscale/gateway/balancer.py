"""Which replica gets the next request: the Ready endpoint set, outstanding requests per endpoint, the pick (pure).

The gateway keeps one :class:`Balancer` per process and touches it only from its event loop, so nothing here
locks. An endpoint is eligible for a new request when its EndpointSlice condition says ``ready`` and not
``terminating`` (Kubernetes sets ``ready=false`` as soon as a pod is deleted, before its ``preStop`` hook runs; see
the EndpointSlice API "conditions"). While none is, a starting endpoint (listed not ready, not terminating) whose own
readiness check answered (:meth:`Balancer.promote`, ``modalscale.gateway.health.WarmingProbe``) is eligible too. An
endpoint that leaves the set keeps its outstanding count until its in-flight requests finish: the gateway never
cuts them, it only stops sending new ones.

The pick follows the issue's order: a request carrying an image goes to its image's home replica by consistent
hashing with bounded loads (:func:`modalscale.gateway.affinity.pick`, Mirrokni et al. 2018, the scheme llm-d and
Envoy's ring-hash with ``hash_balance_factor`` use), so the runtime's embedding cache is reused; any other request
goes to the replica with the fewest outstanding requests, ties broken at random ("least request" of Envoy; with
the handful of replicas of one service a full scan costs less than sampling two, and is never worse than
power-of-two choices). An idle replica beats a busy home replica: affinity applies only when the home is idle or
no replica is (:meth:`Balancer.choose`). The random tie-break matters: one client sending one request at a time
leaves every replica at 0 outstanding before each pick, and a fixed tie order (``affinity.choose`` without a key
takes the smallest name) would send all of its requests to one replica, the very imbalance issue 19 measured
behind kube-proxy.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from modalscale.gateway.affinity import choose as affinity_choose

MAX_REMEMBERED = 4096
"""Pods a balancer remembers as not starting (:attr:`Balancer.warming`): far more than one service's replicas."""
EJECT_S = 2.0
"""How long an endpoint whose connection was refused is skipped, in seconds (Envoy's outlier detection does the
same on consecutive connect failures, with a 30 s base; a replica that was killed is removed from its
EndpointSlice within a few seconds, so 2 s bridges that gap without hiding a replica that recovers)."""


@dataclass(frozen=True)
class Endpoint:
    """One replica as an EndpointSlice lists it."""

    host: str
    """Pod IP (or a host name for a static endpoint)."""
    http_port: int
    """Port of KServe v2 HTTP/REST (the slice's port named ``http``)."""
    grpc_port: int | None = None
    """Port of KServe v2 gRPC (the slice's port named ``grpc``); None: HTTP only."""
    ready: bool = True
    """``conditions.ready`` (absent = true, per the EndpointSlice API)."""
    terminating: bool = False
    """``conditions.terminating`` (absent = false)."""
    name: str = ""
    """The pod behind it (``targetRef.name``), for logs; empty for a static endpoint."""

    @property
    def _netloc_host(self) -> str:
        """``host`` as it stands before ``:port`` in a URL or a gRPC target: an IPv6 address in brackets (RFC 3986)."""
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def key(self) -> str:
        """``host:http_port`` (``[host]:http_port`` for an IPv6 address, as an EndpointSlice of addressType IPv6
        lists it bare): the identity the balancer counts and hashes by, and the authority of the replica's URL."""
        return f"{self._netloc_host}:{self.http_port}"

    @property
    def identity(self) -> str:
        """The pod behind it (its name), else its key: what a balancer remembers it by across its states."""
        return self.name or self.key

    @property
    def grpc_target(self) -> str | None:
        """``host:grpc_port`` for a gRPC channel, or None."""
        return None if self.grpc_port is None else f"{self._netloc_host}:{self.grpc_port}"

    @property
    def routable(self) -> bool:
        """May get a new request: Ready and not terminating."""
        return self.ready and not self.terminating


def parse_static(spec: str) -> tuple[Endpoint, ...]:
    """Endpoints from ``host:http_port[:grpc_port],...`` (``--endpoints`` / ``MODALSCALE_GATEWAY_ENDPOINTS``).

    Raises:
        ValueError: An item that is not ``host:port`` or ``host:port:port`` with ports in 1..65535; the message
            names the item.
    """
    out: list[Endpoint] = []
    for item in (p.strip() for p in spec.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not all(p.isdigit() and 0 < int(p) < 65536 for p in parts[1:]):
            raise ValueError(f"{item!r} is not host:http_port or host:http_port:grpc_port (ports 1-65535)")
        out.append(Endpoint(parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else None))
    return tuple(out)


class Balancer:
    """The routable endpoint set, outstanding requests per endpoint, and the pick.

    Args:
        load_factor: ``c`` of consistent hashing with bounded loads: no replica takes more than
            ``ceil(c * mean)`` outstanding requests through affinity (1.25 = the issue's "no replica above 1.25x
            the mean load").
        rng: Source of the random tie-break (seed it in tests).
    """

    def __init__(self, load_factor: float = 1.25, rng: random.Random | None = None) -> None:
        if not load_factor >= 1.0:
            raise ValueError(f"load_factor={load_factor!r}: must be >= 1.0 (1.25 is the usual value)")
        self.load_factor = load_factor
        self._rng = rng or random.Random()
        self._endpoints: dict[str, Endpoint] = {}
        """What new requests may go to: the listed routable endpoints, else the promoted warming ones."""
        self._listed: dict[str, Endpoint] = {}
        """Listed ready and not terminating."""
        self._warming: dict[str, Endpoint] = {}
        """Listed not ready, not terminating, and first listed after this balancer's first set without ever being
        listed ready: pods starting."""
        self._promoted: set[str] = set()
        """Warming endpoints that answered the gateway's own readiness check (:meth:`promote`)."""
        self._not_starting: dict[str, None] = {}
        """Endpoints (by pod name, else key) that are not starting ones: every one listed ready at some time (not
        ready now, it fails its readiness probe) and every one in the first set this balancer was given (a gateway
        started beside a replica cannot tell a failing one from a starting one). An ordered set, its oldest entries
        dropped beyond :data:`MAX_REMEMBERED` (pod names are not reused)."""
        self._updated = False
        self._outstanding: dict[str, int] = {}
        self._ejected_until: dict[str, float] = {}

    # --- the endpoint set -------------------------------------------------------------------------------------
    def update(self, endpoints: Iterable[Endpoint]) -> None:
        """Replace the endpoint set (the full current list, as from all EndpointSlices of the Service).

        Only routable endpoints are kept for new requests; the outstanding count of one that left the set stays
        until its requests finish (:meth:`release`). The same ``key`` listed twice (two slices during a
        re-shard, one not yet rewritten) counts once: terminating if any copy is (a pod never stops terminating,
        so a copy that still says ready is stale), else routable if any copy is.
        """
        merged: dict[str, Endpoint] = {}
        for ep in endpoints:
            held = merged.get(ep.key)
            if held is None or (not held.terminating and (ep.terminating or ep.routable)):
                merged[ep.key] = ep
        self._listed = {k: ep for k, ep in merged.items() if ep.routable}
        for ep in merged.values() if not self._updated else self._listed.values():
            self._not_starting[ep.identity] = None
        self._updated = True
        while len(self._not_starting) > MAX_REMEMBERED:
            del self._not_starting[next(iter(self._not_starting))]
        self._warming = {k: ep for k, ep in merged.items()
                         if not ep.ready and not ep.terminating and ep.identity not in self._not_starting}
        self._promoted &= self._warming.keys()
        self._rebuild()

    def _rebuild(self) -> None:
        promoted = {} if self._listed else {k: replace(self._warming[k], ready=True) for k in self._promoted}
        self._endpoints = {**self._listed, **promoted}
        self._ejected_until = {k: t for k, t in self._ejected_until.items() if k in self._endpoints}

    @property
    def warming(self) -> tuple[Endpoint, ...]:
        """Listed not ready and not terminating, first listed after the first set and never listed ready (pods
        starting: a replica that was Ready and now fails its readiness probe, e.g. a dead Python-backend stub that
        Triton itself does not report, is not one), in key order."""
        return tuple(self._warming[k] for k in sorted(self._warming))

    def has_listed_ready(self) -> bool:
        """At least one endpoint its EndpointSlice lists ready and not terminating."""
        return bool(self._listed)

    def promote(self, keys: Collection[str]) -> bool:
        """Take the warming endpoints of ``keys`` (those that answered the gateway's own readiness check, as
        Knative's activator probes a revision's pods before their readiness reaches it) as routable while no
        endpoint is listed ready; the others are not (any earlier promotion not in ``keys`` ends). A promoted
        endpoint stays one until its EndpointSlice lists it ready, terminating or not at all, or the next
        :meth:`promote` leaves it out.

        Returns:
            Whether the endpoints new requests may go to changed.
        """
        before = set(self._endpoints)
        self._promoted = set(keys) & self._warming.keys()
        self._rebuild()
        return set(self._endpoints) != before

    @property
    def promoted(self) -> tuple[str, ...]:
        """Keys of the promoted warming endpoints (routable only while none is listed ready), sorted."""
        return tuple(sorted(self._promoted))

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """The endpoints new requests may go to (listed routable, else promoted warming ones), in key order."""
        return tuple(self._endpoints[k] for k in sorted(self._endpoints))

    def has_ready(self) -> bool:
        """At least one endpoint a new request may go to (listed ready, else promoted)."""
        return bool(self._endpoints)

    # --- outstanding requests ---------------------------------------------------------------------------------
    def acquire(self, ep: Endpoint) -> None:
        """Count one request sent to ``ep`` (call before sending)."""
        self._outstanding[ep.key] = self._outstanding.get(ep.key, 0) + 1

    def release(self, ep: Endpoint) -> None:
        """Count one request to ``ep`` finished (answered, failed or cancelled).

        Raises:
            ValueError: More releases than acquires for ``ep`` (a bug in the caller).
        """
        left = self._outstanding.get(ep.key, 0) - 1
        if left < 0:
            raise ValueError(f"release of {ep.key} without a matching acquire")
        if left:
            self._outstanding[ep.key] = left
        else:
            self._outstanding.pop(ep.key, None)

    def outstanding(self) -> dict[str, int]:
        """Outstanding requests per endpoint key, including endpoints that left the set and are still draining."""
        return dict(self._outstanding)

    def eject(self, ep: Endpoint, now_s: float, for_s: float = EJECT_S) -> None:
        """Skip ``ep`` for new requests until ``now_s + for_s`` (monotonic seconds): its connection was refused, or
        it failed an active health probe (``modalscale.gateway.health``)."""
        if ep.key in self._endpoints:
            self._ejected_until[ep.key] = now_s + for_s

    def ejected(self, now_s: float) -> tuple[str, ...]:
        """Keys of the routable endpoints skipped at ``now_s`` (monotonic seconds) after a failed connect."""
        return tuple(sorted(k for k, t in self._ejected_until.items() if t > now_s and k in self._endpoints))

    # --- the pick ---------------------------------------------------------------------------------------------
    def pick(self, key: bytes | None, now_s: float, exclude: Collection[str] = ()) -> Endpoint | None:
        """Choose the endpoint for one request: ``choose(...)[0]``, or None (see :meth:`choose`)."""
        chosen = self.choose(key, now_s, exclude)
        return None if chosen is None else chosen[0]

    def choose(self, key: bytes | None, now_s: float, exclude: Collection[str] = ()
               ) -> tuple[Endpoint, bool] | None:
        """Choose the endpoint for one request, and say whether it is the key's own replica.

        Args:
            key: The request's first image digest (affinity), or None (least outstanding).
            now_s: Monotonic seconds, for ejections.
            exclude: Endpoint keys not to use (the one a retry failed on).
        Returns:
            ``(endpoint, affinity_hit)``; ``affinity_hit`` is True when the key's own replica on the ring took it
            (False without a key, or when the load bound moved it on). None when no routable endpoint is left
            after ``exclude``. Ejected endpoints are used only when nothing else is left (better a likely
            failure, retried, than a certain 503).
        """
        candidates = [k for k in self._endpoints if k not in exclude]
        if not candidates:
            return None
        healthy = [k for k in candidates if self._ejected_until.get(k, 0.0) <= now_s]
        pool = healthy or candidates
        loads = {k: self._outstanding.get(k, 0) for k in pool}
        if key is not None:
            choice = affinity_choose(key, loads, self.load_factor)
            if loads[choice.replica] == 0 or min(loads.values()) > 0:
                return self._endpoints[choice.replica], choice.preferred
            # An idle replica beats a busy home: the load bound ceil(c * (m + 1) / n) is 2 at m = 1, n = 2,
            # so with few requests in flight the bound alone lets two share a replica while another idles
            # (measured on the real node: 49 % of picks with 2 in flight over 2 replicas, capping throughput near
            # 1.5x one replica). A cache hit is worth less than a whole idle replica; under load no replica is
            # idle and the bounded-load ring decides alone.
        return self._endpoints[least_outstanding(loads, self._rng)], False


def least_outstanding(loads: Mapping[str, int], rng: random.Random) -> str:
    """The key with the fewest outstanding requests; ties broken uniformly at random.

    Raises:
        ValueError: ``loads`` is empty.
    """
    if not loads:
        raise ValueError("no endpoint to pick from")
    low = min(loads.values())
    return rng.choice(sorted(k for k, v in loads.items() if v == low))
