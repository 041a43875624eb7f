"""Active health checks of the replicas: a TCP connect to each routable endpoint every second
(``GatewaySettings.probe_interval_s``; 0 disables them).

Why: a replica on a node that crashed stays Ready in its EndpointSlice until the node controller marks the node
(``--node-monitor-grace-period``, 40 s and more) and its packets go nowhere, so neither a refused connect nor an
answer ever tells the gateway. Least outstanding requests keeps sending it new requests whenever its count is the
lowest (found on the real node, issue 21's node-loss scenario: a request sent 0.46 s after the crash waited its
client's 30 s out on the lost replica). Envoy and NGINX solve it the same way: active health checks beside the
passive ones (a refused connect ejects at once, ``Balancer.eject``).

Each round connects to every routable endpoint's HTTP port at once, with :data:`PROBE_TIMEOUT_S`; an endpoint whose
connect fails or times out is ejected for :data:`PROBE_EJECT_S` (re-ejected every round while it fails, used again
by the round after one succeeds; an ejected endpoint still takes requests when no other is left). Only the TCP
handshake is tested, which the replica's kernel completes whatever its load, so a busy replica is never ejected
for being slow. Detection: within :data:`PROBE_INTERVAL_S` + :data:`PROBE_TIMEOUT_S` of the loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp

from modalscale.gateway.balancer import Balancer, Endpoint

log = logging.getLogger("modalscale.gateway")

PROBE_INTERVAL_S = 1.0
"""Seconds between the starts of two rounds (the default of ``GatewaySettings.probe_interval_s``)."""
PROBE_TIMEOUT_S = 1.0
"""A connect not completed within this many seconds counts as failed."""
PROBE_EJECT_S = PROBE_INTERVAL_S + PROBE_TIMEOUT_S + 0.5
"""How long a failed probe ejects its endpoint: past the next round's verdict, so a replica that stays lost stays
ejected and one that answers again is back within a round."""

Connect = Callable[[str, int, float], Awaitable[bool]]
"""``(host, port, timeout_s) -> connected``; never raises."""


async def tcp_connect(host: str, port: int, timeout_s: float) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout_s`` (closed again at once)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class ReplicaProbe:
    """Probes the balancer's routable endpoints and ejects the ones that do not connect.

    Args:
        balancer: The gateway's balancer (its endpoints are probed, failing ones ejected).
        clock: Monotonic seconds (the ejections' clock: the balancer's).
        connect: The probe (:func:`tcp_connect`; injectable for tests).
    """

    def __init__(self, balancer: Balancer, clock: Callable[[], float], connect: Connect = tcp_connect,
                 timeout_s: float = PROBE_TIMEOUT_S, eject_s: float = PROBE_EJECT_S) -> None:
        self.balancer = balancer
        self.clock = clock
        self.connect = connect
        self.timeout_s = timeout_s
        self.eject_s = eject_s
        self.failing: frozenset[str] = frozenset()
        """Endpoint keys whose last probe failed."""

    async def check_once(self) -> frozenset[str]:
        """One round over the routable endpoints, side by side; ejects and returns the keys that failed."""
        endpoints = self.balancer.endpoints
        results = await asyncio.gather(*(self._probe(ep) for ep in endpoints))
        failed = frozenset(ep.key for ep, ok in zip(endpoints, results, strict=True) if not ok)
        now = self.clock()
        for ep in endpoints:
            if ep.key in failed:
                self.balancer.eject(ep, now, self.eject_s)
        for key in sorted(failed - self.failing):
            log.warning("Replica failed its health probe, ejected endpoint=%s", key)
        for key in sorted(self.failing - failed):
            log.info("Replica passed its health probe again endpoint=%s", key)
        self.failing = failed
        return failed

    async def _probe(self, ep: Endpoint) -> bool:
        return await self.connect(ep.host, ep.http_port, self.timeout_s)

    async def run(self, interval_s: float = PROBE_INTERVAL_S) -> None:
        """Rounds every ``interval_s`` until cancelled."""
        while True:
            started = self.clock()
            await self.check_once()
            await asyncio.sleep(max(0.0, interval_s - (self.clock() - started)))


WARM_PROBE_TIMEOUT_S = 0.5
"""A starting replica's readiness check not answered within this many seconds counts as not ready."""
READY_PATH = "/v2/health/ready"
"""KServe v2's server readiness (Triton: ready once every model is loaded, its warm-up included)."""

ReadyCheck = Callable[[Endpoint], Awaitable[bool]]
"""``endpoint -> answered ready``; never raises."""


def http_ready_check(session: aiohttp.ClientSession, timeout_s: float = WARM_PROBE_TIMEOUT_S) -> ReadyCheck:
    """A :data:`ReadyCheck`: ``GET http://<endpoint>/v2/health/ready`` answered 200 within ``timeout_s``."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def check(ep: Endpoint) -> bool:
        try:
            async with session.get(f"http://{ep.key}{READY_PATH}", timeout=timeout) as response:
                return response.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    return check


PROMOTION_LIMIT_S = 30.0
"""Longest a starting replica is promoted without its EndpointSlice listing it Ready, seconds: the kubelet marks a
healthy one Ready within its startup probe's 1 s period and a readiness probe run (5 s period, the BuiltIn check
taking about a second on a small replica); one still not Ready after this fails its readiness probe (e.g. a Python
stub killed by the burst it was sent) and is not promoted again."""


class WarmingProbe:
    """Readiness checks of the starting replicas while requests are held at zero Ready replicas.

    Knative's activator probes a revision's pods itself rather than wait for their readiness to reach it through
    the API server; here the wait is the kubelet's readiness probe (an exec every few seconds, after the startup
    probe's 1 s period), its status write, the EndpointSlice controller and the gateway's watch: about 0.6 s
    [0.2-0.8] between a replica seen Ready and the held request answered in 34 starts from zero (docs/gateway.md),
    on top of the probes' own delay. A round starts every ``interval_s`` and checks every starting endpoint
    (:attr:`Balancer.warming`) at once, while requests wait with none listed ready or some were promoted
    (:meth:`Balancer.promote`); each that answers ready is promoted as its answer comes, and takes new requests
    until the slice lists one ready (then only listed ones do, as before); one that stops answering is dropped at the
    end of the round, and one promoted for :data:`PROMOTION_LIMIT_S` without being listed ready is not promoted
    again. Nothing is checked while a replica is listed ready or no request waits.

    Args:
        balancer: The gateway's balancer.
        holding: Whether requests wait for a replica (the admission queue is not empty).
        on_change: Called when the endpoints new requests may go to changed (wakes the held requests).
        check: The readiness check (:func:`http_ready_check`; injectable for tests).
        clock: Monotonic seconds (the promotion limit's).
    """

    def __init__(self, balancer: Balancer, holding: Callable[[], bool], on_change: Callable[[], None],
                 check: ReadyCheck, clock: Callable[[], float] = time.monotonic) -> None:
        self.balancer = balancer
        self.holding = holding
        self.on_change = on_change
        self.check = check
        self.clock = clock
        self._first_promoted: dict[str, float] = {}
        """Pod name (else key) -> when it was first promoted; only pods still warming (a pod that left the warming set,
        listed ready, terminating or gone, never warms again: its record is dropped, so the map stays as small as that
        set however many pods come and go)."""

    def _allowed(self, ep: Endpoint) -> bool:
        first = self._first_promoted.get(ep.identity)
        return first is None or self.clock() - first < PROMOTION_LIMIT_S

    async def round(self) -> bool:
        """One round; returns whether the endpoints new requests may go to changed."""
        still = {ep.identity for ep in self.balancer.warming}
        if len(self._first_promoted) > len(still):
            self._first_promoted = {k: t for k, t in self._first_promoted.items() if k in still}
        warming = [ep for ep in self.balancer.warming if self._allowed(ep)]
        if self.balancer.has_listed_ready() or not warming or not (self.holding() or self.balancer.promoted):
            changed = self.balancer.promote(())
        else:
            changed, answered = False, []

            async def one(ep: Endpoint) -> None:
                nonlocal changed
                if await self.check(ep) and self._allowed(ep):
                    answered.append(ep.key)
                    self._first_promoted.setdefault(ep.identity, self.clock())
                    if self.balancer.promote([*self.balancer.promoted, *answered]):
                        changed = True
                        log.info("A starting replica answered ready before its EndpointSlice said so endpoint=%s",
                                 ep.identity)
                        self.on_change()

            await asyncio.gather(*(one(ep) for ep in warming))
            if self.balancer.promote(answered):  # the promoted ones that did not answer this round are dropped
                changed = True
                self.on_change()
            return changed
        if changed:
            self.on_change()
        return changed

    async def run(self, interval_s: float) -> None:
        """A round every ``interval_s`` seconds (from start to start) until cancelled."""
        while True:
            started = self.clock()
            try:
                await self.round()
            except Exception as exc:  # a probe round must never end the loop
                log.warning("Readiness check round failed error=%r", exc)
            await asyncio.sleep(max(0.0, interval_s - (self.clock() - started)))


__all__ = ["PROBE_EJECT_S", "PROBE_INTERVAL_S", "PROBE_TIMEOUT_S", "PROMOTION_LIMIT_S", "READY_PATH", "ReadyCheck",
           "ReplicaProbe", "WARM_PROBE_TIMEOUT_S", "WarmingProbe", "http_ready_check", "tcp_connect"]
