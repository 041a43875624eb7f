"""Active health checks (``modalscale.gateway.health``): a replica whose address stops taking connections is
ejected by the next round, stays out while it fails, and is used again after a round it passes."""

from __future__ import annotations

import asyncio
import random
import socket
from dataclasses import replace

from modalscale.gateway.balancer import Balancer, Endpoint
from modalscale.gateway.health import PROBE_EJECT_S, ReplicaProbe, WarmingProbe, tcp_connect

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


# --- starting replicas checked while requests are held (WarmingProbe) ------------------------------------------
STARTING = Endpoint("10.0.0.3", 8000, ready=False, name="vc-new")
LEAVING = Endpoint("10.0.0.4", 8000, ready=False, terminating=True, name="vc-old")


def warm_setup(answering: set[str], holding: list[bool]
               ) -> tuple[Balancer, WarmingProbe, list[str], list[int]]:
    checked: list[str] = []
    changes = [0]
    balancer = Balancer(rng=random.Random(0))

    async def check(ep: Endpoint) -> bool:
        checked.append(ep.key)
        return ep.key in answering

    def changed() -> None:
        changes[0] += 1

    return balancer, WarmingProbe(balancer, lambda: holding[0], changed, check), checked, changes


def test_a_starting_replica_that_answers_ready_takes_the_held_requests_before_its_slice_says_ready() -> None:
    answering: set[str] = set()
    holding = [True]
    balancer, probe, checked, changes = warm_setup(answering, holding)
    balancer.update([])  # the gateway's first set: the service at zero
    balancer.update([STARTING, LEAVING])
    assert not balancer.has_ready()
    assert asyncio.run(probe.round()) is False and checked == [STARTING.key]  # never a terminating one
    assert not balancer.has_ready() and changes == [0]
    answering.add(STARTING.key)  # its Triton loaded the model: /v2/health/ready answers 200
    assert asyncio.run(probe.round()) is True and changes == [1]
    assert balancer.has_ready() and balancer.pick(None, 0.0) == Endpoint("10.0.0.3", 8000, ready=True, name="vc-new")
    assert balancer.promoted == (STARTING.key,) and not balancer.has_listed_ready()
    # The held requests went; it is checked again while promoted, and dropped when it stops answering.
    holding[0] = False
    answering.clear()
    assert asyncio.run(probe.round()) is True and not balancer.has_ready() and changes == [2]
    # Nothing waits and nothing is promoted: no check at all.
    checked.clear()
    assert asyncio.run(probe.round()) is False and checked == []


def test_once_a_replica_is_listed_ready_only_listed_ones_take_requests_and_nothing_is_checked() -> None:
    answering = {STARTING.key}
    balancer, probe, checked, _ = warm_setup(answering, [True])
    balancer.update([])
    balancer.update([STARTING])
    asyncio.run(probe.round())
    assert balancer.promoted == (STARTING.key,)
    listed = Endpoint("10.0.0.5", 8000, name="vc-a")
    balancer.update([STARTING, listed])  # another replica's slice entry turned ready
    assert [ep.key for ep in balancer.endpoints] == [listed.key]  # the promoted one waits for its own Ready
    checked.clear()
    assert asyncio.run(probe.round()) is False and checked == [] and balancer.promoted == ()
    # Its slice entry turning ready, terminating or gone ends a promotion too.
    balancer.update([STARTING])
    asyncio.run(probe.round())
    balancer.update([Endpoint("10.0.0.3", 8000, ready=False, terminating=True)])
    assert balancer.promoted == () and not balancer.has_ready()


def test_the_ready_check_is_a_get_of_the_v2_readiness_path_with_a_short_timeout() -> None:
    from aiohttp import web

    from modalscale.gateway.health import READY_PATH, http_ready_check

    async def go() -> tuple[bool, bool, bool]:
        import aiohttp

        answers = {"status": 503}

        async def ready(_: web.Request) -> web.Response:
            return web.Response(status=answers["status"])

        app = web.Application()
        app.router.add_get(READY_PATH, ready)
        runner = web.AppRunner(app)
        await runner.setup()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        try:
            async with aiohttp.ClientSession() as session:
                check = http_ready_check(session)
                ep = Endpoint("127.0.0.1", port, ready=False)
                loading = await check(ep)
                answers["status"] = 200
                loaded = await check(ep)
                nobody = await check(Endpoint("127.0.0.1", 1, ready=False))
        finally:
            await runner.cleanup()
        return loading, loaded, nobody

    assert asyncio.run(go()) == (False, True, False)


def test_a_replica_that_was_listed_ready_and_is_not_any_more_is_never_promoted() -> None:
    # Its readiness probe fails while its Triton still answers ready (a Python-backend stub killed by the OOM
    # killer: modalscale.runtime.health fails the pod, Triton keeps saying ready): a request sent to it would fail.
    balancer, probe, checked, _ = warm_setup({STARTING.key}, [True])
    balancer.update([])
    balancer.update([Endpoint("10.0.0.3", 8000, name="vc-new")])  # it was Ready
    balancer.update([STARTING])  # and now is not
    assert balancer.warming == () and asyncio.run(probe.round()) is False and checked == []
    assert not balancer.has_ready()
    # A new pod (another name) at the same address is a starting one again.
    balancer.update([Endpoint("10.0.0.3", 8000, ready=False, name="vc-newer")])
    assert asyncio.run(probe.round()) is True and balancer.has_ready()


def test_a_gateway_started_beside_a_replica_that_is_not_ready_does_not_take_it_for_a_starting_one() -> None:
    # A new gateway pod (a restart, a rollout, a drain) cannot tell a replica failing its readiness probe from one
    # starting: the first set's not-ready replicas are never promoted; the ones listed after it are.
    balancer, probe, checked, _ = warm_setup({STARTING.key, "10.0.0.6:8000"}, [True])
    balancer.update([STARTING])
    assert balancer.warming == () and asyncio.run(probe.round()) is False and checked == []
    balancer.update([STARTING, Endpoint("10.0.0.6", 8000, ready=False, name="vc-later")])
    assert asyncio.run(probe.round()) is True and balancer.promoted == ("10.0.0.6:8000",)


def test_a_replica_promoted_for_the_limit_without_being_listed_ready_is_not_promoted_again() -> None:
    from modalscale.gateway.health import PROMOTION_LIMIT_S

    now = [0.0]
    balancer = Balancer(rng=random.Random(0))

    async def check(ep: Endpoint) -> bool:
        return True  # its Triton answers ready; its readiness probe never passes (a stub dead from the burst)

    probe = WarmingProbe(balancer, lambda: True, lambda: None, check, clock=lambda: now[0])
    balancer.update([])
    balancer.update([STARTING])
    assert asyncio.run(probe.round()) is True and balancer.has_ready()
    now[0] = PROMOTION_LIMIT_S - 1
    assert asyncio.run(probe.round()) is False and balancer.has_ready()
    now[0] = PROMOTION_LIMIT_S + 1
    assert asyncio.run(probe.round()) is True and not balancer.has_ready()
    now[0] += 100  # the kubelet restarted its container: the same pod, still not promoted
    assert asyncio.run(probe.round()) is False and not balancer.has_ready()


def test_the_promotion_records_hold_only_pods_still_warming_however_many_come_and_go() -> None:
    """Found by review (7 Dec 2026): each promoted pod's first promotion stayed in the probe for the gateway's life
    (one entry per pod ever started: an autoscaled service's gateway grew without bound). A pod that left the warming
    set (listed ready, terminating or gone) never warms again, so its record goes; one still warming keeps its
    promotion limit."""
    from modalscale.gateway.health import PROMOTION_LIMIT_S

    now = [0.0]
    balancer = Balancer(rng=random.Random(0))

    async def check(ep: Endpoint) -> bool:
        return True

    probe = WarmingProbe(balancer, lambda: True, lambda: None, check, clock=lambda: now[0])
    balancer.update([])
    for i in range(50):  # 50 pods start, answer ready, are promoted, then listed ready and scaled away
        pod = Endpoint(f"10.0.1.{i}", 8000, ready=False, name=f"vc-{i}")
        balancer.update([pod])
        asyncio.run(probe.round())
        balancer.update([replace(pod, ready=True)])
        balancer.update([])
    stuck = Endpoint("10.0.2.1", 8000, ready=False, name="vc-stuck")
    balancer.update([stuck])
    assert asyncio.run(probe.round()) is True and balancer.has_ready()
    now[0] = PROMOTION_LIMIT_S + 1
    assert asyncio.run(probe.round()) is True and not balancer.has_ready()  # its limit still holds
    assert len(probe._first_promoted) == 1
