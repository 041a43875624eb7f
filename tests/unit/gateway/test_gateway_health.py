"""Active health checks (``modalscale.gateway.health``): a replica whose address stops taking connections is
ejected by the next round, stays out while it fails, and is used again after a round it passes."""

from __future__ import annotations

import asyncio
import random
import socket

from modalscale.gateway.balancer import Balancer, Endpoint
from modalscale.gateway.health import PROBE_EJECT_S, ReplicaProbe, tcp_connect

A, B = Endpoint("10.0.0.1", 8000), Endpoint("10.0.0.2", 8000)


def setup(lost: set[str]) -> tuple[Balancer, ReplicaProbe, list[float], list[tuple[str, int, float]]]:
    now = [100.0]
    probed: list[tuple[str, int, float]] = []
    balancer = Balancer(rng=random.Random(0))
    balancer.update([A, B])

    async def connect(host: str, port: int, timeout_s: float) -> bool:
        probed.append((host, port, timeout_s))
        return host not in lost

    return balancer, ReplicaProbe(balancer, lambda: now[0], connect), now, probed


def picks(balancer: Balancer, now_s: float, n: int = 20) -> set[str]:
    return {ep.key for ep in (balancer.pick(None, now_s) for _ in range(n)) if ep is not None}


def test_a_lost_replica_is_ejected_by_the_next_round_and_new_requests_avoid_it() -> None:
    lost = {"10.0.0.2"}
    balancer, probe, now, probed = setup(lost)
    assert picks(balancer, now[0]) == {A.key, B.key}  # idle, tied: both taken in turn at random
    assert asyncio.run(probe.check_once()) == {B.key}
    assert sorted(probed) == [("10.0.0.1", 8000, 1.0), ("10.0.0.2", 8000, 1.0)]  # every endpoint, its HTTP port
    assert balancer.ejected(now[0]) == (B.key,) and picks(balancer, now[0]) == {A.key}
    now[0] += PROBE_EJECT_S - 0.1  # still failing at the next round: still out
    asyncio.run(probe.check_once())
    assert picks(balancer, now[0] + 1.0) == {A.key}
    lost.clear()  # it answers again: that round ejects nothing, the last ejection lapses
    assert asyncio.run(probe.check_once()) == frozenset() and probe.failing == frozenset()
    assert picks(balancer, now[0] + PROBE_EJECT_S) == {A.key, B.key}


def test_with_every_replica_failing_requests_still_go_somewhere() -> None:
    balancer, probe, now, _ = setup({"10.0.0.1", "10.0.0.2"})
    assert asyncio.run(probe.check_once()) == {A.key, B.key}
    assert picks(balancer, now[0]) == {A.key, B.key}  # better a likely failure, retried, than a certain 503


def test_the_tcp_probe_connects_to_a_listener_and_fails_on_a_closed_port() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        assert asyncio.run(tcp_connect("127.0.0.1", port, 1.0)) is True
    finally:
        server.close()
    assert asyncio.run(tcp_connect("127.0.0.1", port, 1.0)) is False  # refused now
