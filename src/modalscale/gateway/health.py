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
from collections.abc import Awaitable, Callable

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


__all__ = ["PROBE_EJECT_S", "PROBE_INTERVAL_S", "PROBE_TIMEOUT_S", "ReplicaProbe", "tcp_connect"]
