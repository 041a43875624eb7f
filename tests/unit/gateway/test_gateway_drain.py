"""The gateway's shutdown (SIGTERM: ``begin_drain``, then ``stop``) on loopback: a started Gateway in front of an
in-process replica that answers when the test says, so which request is where when the drain ends is certain."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from aiohttp import web

from modalscale.gateway.balancer import Endpoint
from modalscale.gateway.endpoints import StaticSource
from modalscale.gateway.server import Gateway
from modalscale.gateway.settings import GatewaySettings
from modalscale.runtime.server import free_port

INFER = "/v2/models/m/infer"
BODY = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a cat"]}]}).encode()


async def _replica(release: asyncio.Event, arrived: list[str]) -> tuple[web.AppRunner, int]:
    """A replica that answers each request 200 once ``release`` is set."""

    async def infer(request: web.Request) -> web.Response:
        arrived.append(request.path)
        await release.wait()
        return web.json_response({"outputs": []})

    app = web.Application()
    app.router.add_post(INFER, infer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


async def _post(session: aiohttp.ClientSession, url: str) -> tuple[int, str | None] | str:
    """``(status, Retry-After)``, or the name of the transport error (a dropped connection)."""
    try:
        async with session.post(url, data=BODY, headers={"Content-Type": "application/json"}) as r:
            await r.read()
            return r.status, r.headers.get("Retry-After")
    except aiohttp.ClientError as exc:
        return type(exc).__name__


async def _gateway(replica_port: int, **settings: Any) -> tuple[Gateway, str]:
    port = free_port()
    base = GatewaySettings(http_port=port, grpc_port=0, metrics_port=free_port(), probe_interval_s=0,
                           warm_probe_interval_s=0)
    gateway = Gateway(GatewaySettings(**{**base.__dict__, **settings}),
                      StaticSource([Endpoint("127.0.0.1", replica_port, name="r")]), None, host="127.0.0.1")
    await gateway.start()
    return gateway, f"http://127.0.0.1:{port}{INFER}"


def test_a_request_queued_when_the_drain_ends_is_refused_with_retry_after_not_dropped() -> None:
    """Found by review (issue 19): a request that arrives during the shutdown delay while every slot is taken
    waits in the queue; when ``DRAIN_TIMEOUT_S`` ran out the listener's shutdown cancelled its handler and the
    client saw its connection close with no answer. It never reached a replica: it is refused with ``503`` and
    ``Retry-After`` (another gateway pod takes the retry) before the drain ends."""

    async def body() -> tuple[Any, Any, list[str]]:
        release, arrived = asyncio.Event(), []
        replica, replica_port = await _replica(release, arrived)
        gateway, url = await _gateway(replica_port, max_inflight=1, queue_size=4, drain_timeout_s=1.5)
        try:
            async with aiohttp.ClientSession() as session:
                in_flight = asyncio.create_task(_post(session, url))
                while not arrived:
                    await asyncio.sleep(0.01)
                gateway.begin_drain()  # SIGTERM: not ready, still serving
                queued = asyncio.create_task(_post(session, url))
                while gateway.admission.waiting < 1:
                    await asyncio.sleep(0.01)
                await gateway.stop()  # the replica holds the in-flight request past the drain timeout
                release.set()
                return await in_flight, await queued, arrived
        finally:
            release.set()
            await gateway.stop()
            await replica.cleanup()

    _, queued, arrived = asyncio.run(body())
    assert queued == (503, "1"), queued
    assert len(arrived) == 1  # the refused request never reached the replica


def test_an_in_flight_request_and_the_one_queued_behind_it_finish_within_the_drain() -> None:
    """The other half: a request queued behind one that finishes within ``DRAIN_TIMEOUT_S`` gets its slot and is
    served; stop returns once both are answered."""

    async def body() -> tuple[Any, Any, list[str]]:
        release, arrived = asyncio.Event(), []
        replica, replica_port = await _replica(release, arrived)
        gateway, url = await _gateway(replica_port, max_inflight=1, queue_size=4, drain_timeout_s=10)
        try:
            async with aiohttp.ClientSession() as session:
                in_flight = asyncio.create_task(_post(session, url))
                while not arrived:
                    await asyncio.sleep(0.01)
                gateway.begin_drain()
                queued = asyncio.create_task(_post(session, url))
                while gateway.admission.waiting < 1:
                    await asyncio.sleep(0.01)
                stopping = asyncio.create_task(gateway.stop())
                await asyncio.sleep(0.2)
                release.set()
                await asyncio.wait_for(stopping, 5)
                return await in_flight, await queued, arrived
        finally:
            release.set()
            await gateway.stop()
            await replica.cleanup()

    in_flight, queued, arrived = asyncio.run(body())
    assert (in_flight, queued) == ((200, None), (200, None))
    assert len(arrived) == 2
