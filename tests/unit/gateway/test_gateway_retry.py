"""The gateway's request path around a replica no connect reaches: how long a request is held for another try, and
what it asks for meanwhile. In-process: a Gateway that is not started, a fake upstream whose every connect fails, a
clock that can jump ahead (no network, no replica); and which tries are sent again, against loopback replicas that
close a connection without answering (asyncio servers, no Triton)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from unittest import mock

import aiohttp
import grpc
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request

from modalscale.gateway.balancer import Endpoint
from modalscale.gateway.endpoints import StaticSource
from modalscale.gateway.server import GRPC_INFER, Gateway
from modalscale.gateway.settings import GatewaySettings

INFER = "/v2/models/m/infer"
BODY = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a cat"]}]}).encode()
QUEUE_TIMEOUT_S = 10.0
"""The held-request tests' queue timeout; they jump 9.8 s of it, so a request answered within half of it was not
given a whole new one (a bare 2 s bound would fail on a machine that stalls the loop)."""
LOST = Endpoint("10.0.0.1", 8000, 8001, name="lost")
"""A replica listed Ready whose connects time out (a lost node's pod)."""


class Clock:
    """Monotonic seconds that :meth:`jump` moves ahead (time spent in the queue without spending it)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def jump(self, seconds: float) -> None:
        self.offset += seconds


class Unreachable:
    """An aiohttp session whose every connect times out: no byte of any request reaches a replica."""

    def __init__(self) -> None:
        self.tries = 0

    async def request(self, *_: Any, **__: Any) -> Any:
        self.tries += 1
        raise aiohttp.ConnectionTimeoutError("Connection timeout to host 10.0.0.1:8000")


class UnreachableChannel:
    """A gRPC channel that never connects: every call fails UNAVAILABLE with gRPC core's own message."""

    def __init__(self) -> None:
        self.tries = 0

    def unary_unary(self, _method: str) -> Any:
        async def call(*_: Any, **__: Any) -> bytes:
            self.tries += 1
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       details="failed to connect to all addresses; last error: UNKNOWN: "
                                               "ipv4:10.0.0.1:8001: Failed to connect to remote host: Timeout "
                                               "occurred: FD Shutdown")
        return call


class Aborted(Exception):
    pass


class Context:
    """The parts of a ``grpc.aio.ServicerContext`` the gateway uses."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.trailing: tuple[tuple[str, str], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def time_remaining(self) -> float | None:
        return None

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.trailing = metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        raise Aborted(details)


def _grpc_text() -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(b"a cat")
    return bytes(request.SerializeToString())


def _gateway(clock: Clock, **settings: Any) -> Gateway:
    gw = Gateway(GatewaySettings(**settings), StaticSource(), clock=clock)
    gw._session = Unreachable()  # type: ignore[assignment]
    return gw


def _request(body: bytes) -> web.Request:
    payload = StreamReader(mock.Mock(_reading_paused=False), 2 ** 16, loop=asyncio.get_running_loop())
    payload.feed_data(body)
    payload.feed_eof()
    return make_mocked_request("POST", INFER, headers={"Content-Length": str(len(body))}, payload=payload)


def test_a_request_held_at_zero_then_sent_to_an_unreachable_replica_is_answered_within_the_queue_timeout_of_its_arrival(
) -> None:
    # docs/gateway.md (Forward): a request whose every listed replica failed is held "up to queueTimeoutSeconds
    # from its arrival, then 503 + Retry-After". One that already waited in the queue at zero for most of that
    # time must not get a whole new queue timeout after its admission.
    async def body() -> tuple[int, float, int]:
        clock = Clock()
        gw = _gateway(clock, queue_timeout_s=QUEUE_TIMEOUT_S)
        task = asyncio.create_task(gw._http(_request(BODY)))
        await asyncio.sleep(0.05)
        assert gw.admission.waiting == 1  # held at zero replicas
        clock.jump(9.8)  # 9.8 s of the 10 s spent waiting for a replica
        t0 = time.monotonic()
        gw._on_endpoints((LOST,))  # a replica is listed Ready: the request is admitted and sent to it
        try:
            answer = await asyncio.wait_for(task, QUEUE_TIMEOUT_S / 2)
        except TimeoutError:
            task.cancel()
            raise AssertionError("still held 5 s after its admission, 9.8 s into a 10 s queue timeout") from None
        return answer.status, time.monotonic() - t0, gw._session.tries  # type: ignore[attr-defined]

    status, held_s, tries = asyncio.run(body())
    assert status == 503
    assert held_s < QUEUE_TIMEOUT_S / 2, held_s  # 0.2 s were left; a new queue timeout would be 10 s
    assert tries >= 1


def test_a_grpc_call_held_at_zero_then_sent_to_an_unreachable_replica_ends_within_the_queue_timeout_of_its_arrival(
) -> None:
    async def body() -> tuple[grpc.StatusCode | None, float, int]:
        clock = Clock()
        gw = _gateway(clock, queue_timeout_s=QUEUE_TIMEOUT_S)
        channel = UnreachableChannel()
        gw._channel = lambda ep: channel  # type: ignore[method-assign, assignment, return-value]
        context = Context()

        async def call() -> None:
            try:
                await gw.grpc_unary(GRPC_INFER, _grpc_text(), context)  # type: ignore[arg-type]
            except Aborted:
                pass

        task = asyncio.create_task(call())
        await asyncio.sleep(0.05)
        assert gw.admission.waiting == 1
        clock.jump(9.8)
        t0 = time.monotonic()
        gw._on_endpoints((LOST,))
        try:
            await asyncio.wait_for(task, QUEUE_TIMEOUT_S / 2)
        except TimeoutError:
            task.cancel()
            raise AssertionError("still held 5 s after its admission, 9.8 s into a 10 s queue timeout") from None
        return context.code, time.monotonic() - t0, channel.tries

    code, held_s, tries = asyncio.run(body())
    assert code is not None and code != grpc.StatusCode.OK
    assert held_s < QUEUE_TIMEOUT_S / 2, held_s  # 0.2 s were left; a new queue timeout would be 10 s
    assert tries >= 1


def test_a_request_held_after_its_replica_failed_and_left_asks_for_activation_as_one_held_at_zero() -> None:
    # docs/gateway.md: a request whose every listed replica failed "is held as at zero replicas", and the gateway
    # asks for activation "again every second while requests wait with none Ready". A request admitted while its
    # replica was listed Ready, whose connect then failed and whose replica then left the set (scaled to zero, or
    # deleted), waits with none Ready: without a poke nothing starts a replica, and it waits out its queue timeout.
    async def body() -> tuple[int, int]:
        pokes: list[float] = []

        async def activate() -> None:
            pokes.append(time.monotonic())

        gw = Gateway(GatewaySettings(queue_timeout_s=30.0), StaticSource(), activate=activate, clock=Clock())
        gw._session = Unreachable()  # type: ignore[assignment]
        gw._on_endpoints((LOST,))
        keep_poking = asyncio.create_task(gw._keep_poking())
        task = asyncio.create_task(gw._http(_request(BODY)))
        await asyncio.sleep(0.1)
        assert gw._session.tries >= 1 and not task.done()  # type: ignore[attr-defined]  # held after the failure
        gw._on_endpoints(())  # its replica leaves the set: none Ready now
        await asyncio.sleep(1.5)
        held = not task.done()
        for t in (task, keep_poking):
            t.cancel()
        await asyncio.gather(task, keep_poking, return_exceptions=True)
        return len(pokes), held

    pokes, held = asyncio.run(body())
    assert held
    assert pokes >= 1, "no activation asked for while a request was held with no replica Ready"


class Replica:
    """A loopback HTTP/1.1 replica: answers ``200`` + keep-alive, and closes without a byte of answer the request
    numbered ``close_on`` on a connection (1: a fresh connection's first; 2: the next request on a kept-alive one,
    the stale-connection race: the replica closed the idle connection as the request was sent). Records every
    request body it read whole."""

    def __init__(self, close_on: int | None = None) -> None:
        self.close_on = close_on
        self.bodies: list[bytes] = []
        self.connections = 0
        self.read = 0
        """Requests read whole, answered or not."""
        self.server: asyncio.Server | None = None

    async def start(self) -> Endpoint:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return Endpoint("127.0.0.1", port, None, name=f"replica-{port}")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = await reader.readexactly(length)
                served += 1
                self.read += 1
                if served == self.close_on:
                    return  # closed: not a byte of answer
                self.bodies.append(body)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


async def _gateway_to(*replicas: Replica) -> tuple[Gateway, list[Endpoint]]:
    from modalscale.gateway.server import upstream_session

    gw = Gateway(GatewaySettings(queue_timeout_s=10.0), StaticSource())
    gw._session = upstream_session(gw.settings.upstream_timeout_s)
    endpoints = [await r.start() for r in replicas]
    return gw, endpoints


def test_a_request_sent_on_a_kept_alive_connection_the_replica_closed_is_sent_once_to_another_replica() -> None:
    """The classic stale-connection race: aiohttp took a pooled keep-alive connection that the replica closed while
    idle (its answer ServerDisconnectedError, no byte received), and it does not resend a POST itself (only its
    idempotent methods); the client got 502 for a request no replica ran. It is sent once to another replica now,
    its body unaltered."""
    async def body() -> tuple[int, list[bytes], list[bytes], int]:
        stale, other = Replica(close_on=2), Replica()
        gw, (a, b) = await _gateway_to(stale, other)
        try:
            gw._on_endpoints((a,))
            first = await gw._http(_request(BODY))  # opens the connection the replica keeps alive, then closes
            assert first.status == 200 and stale.bodies == [BODY]
            gw._on_endpoints((a, b))
            gw.balancer.acquire(b)  # the least outstanding pick goes to the replica holding the pooled connection
            answer = await gw._http(_request(BODY))
            gw.balancer.release(b)
            return answer.status, stale.bodies, other.bodies, stale.connections
        finally:
            await gw._session.close()  # type: ignore[union-attr]
            stale.close()
            other.close()

    status, stale_bodies, other_bodies, connections = asyncio.run(body())
    assert connections == 1  # the second request went out on the kept-alive connection
    assert status == 200, "a request no replica ran was answered 502 when its kept-alive connection was closed"
    assert stale_bodies == [BODY]  # its first request only
    assert other_bodies == [BODY]  # the retry, byte for byte


def test_a_request_whose_fresh_connection_closed_without_an_answer_is_not_sent_again() -> None:
    """A new connection closed after the request went out (a replica that crashed running it) may have run part of
    it: 502, sent nowhere else (a request that kills its replica must not take a second one with it); and the
    kept-alive case is retried once only, not once per replica."""
    async def body() -> tuple[int, int, int, int]:
        crashing, other = Replica(close_on=1), Replica(close_on=1)
        gw, (a, b) = await _gateway_to(crashing, other)
        try:
            gw._on_endpoints((a, b))
            answer = await gw._http(_request(BODY))
            return answer.status, crashing.connections + other.connections, len(crashing.bodies), len(other.bodies)
        finally:
            await gw._session.close()  # type: ignore[union-attr]
            crashing.close()
            other.close()

    status, connections, *served = asyncio.run(body())
    assert status == 502
    assert connections == 1
    assert served == [0, 0]


def test_a_stale_connection_is_retried_once_however_many_replicas_are_stale() -> None:
    """The resend after a stale kept-alive connection is bounded: once per request, not once per replica."""
    async def body() -> tuple[int, int, int]:
        replicas = [Replica(close_on=2) for _ in range(3)]
        gw, endpoints = await _gateway_to(*replicas)
        try:
            for ep in endpoints:  # one kept-alive connection to each
                gw._on_endpoints((ep,))
                assert (await gw._http(_request(BODY))).status == 200
            gw._on_endpoints(tuple(endpoints))
            answer = await gw._http(_request(BODY))
            return answer.status, sum(r.connections for r in replicas), sum(r.read for r in replicas) - 3
        finally:
            await gw._session.close()  # type: ignore[union-attr]
            for r in replicas:
                r.close()

    status, connections, tries = asyncio.run(body())
    assert status == 502
    assert connections == 3  # no new connection: both tries on kept-alive ones
    assert tries == 2
