"""The gateway process: a KServe v2 reverse proxy (HTTP/REST and gRPC) in front of one InferenceService's replicas.

Per request, in this order:

1. **Features** (infer calls only): :mod:`modalscale.gateway.features` reads modality, image sizes, text tokens and
   image digests from the body as sent. A bad payload is answered ``400`` / ``INVALID_ARGUMENT`` naming the field,
   before any replica is touched. A well-formed request with neither the image nor the text input (a user's model
   with other inputs) is no bad payload: it goes on, counted in the ``text`` class with 0 images and 0 tokens.
   Before that, an infer call of a tenant over its budget (a BudgetPolicy's ``Reject``, read from the
   InferenceService's annotations by a watch, :mod:`modalscale.gateway.tenant_budget`) is answered ``429`` /
   ``RESOURCE_EXHAUSTED`` with ``Retry-After`` = seconds to the budget period's end, without reading its body.
2. **Admission** (:mod:`modalscale.gateway.admission`): a slot among ``max_inflight``, else a place in the bounded
   queue, which also holds requests while no replica is Ready; overflow and timeout get ``503`` + ``Retry-After`` /
   ``RESOURCE_EXHAUSTED``. A request arriving at zero Ready replicas pokes the operator (the activation annotation),
   and the gateway pokes again every second while requests wait with none Ready (at most one poke per second).
3. **Pick** (:class:`modalscale.gateway.balancer.Balancer`): image affinity, else least outstanding requests.
4. **Forward**: the body goes out byte for byte; the response streams back with its status, headers (hop-by-hop
   ones dropped, RFC 9110 section 7.6.1) and body unaltered. A request whose connect to the replica failed (so no
   byte reached it) is sent to another replica; one sent on a kept-alive connection the replica had closed (closed
   or reset before any byte of an answer: :func:`stale_connection`) is sent once more, to another replica.

gRPC: every unary method of ``inference.GRPCInferenceService`` is forwarded as raw bytes (generic handlers, no
protobuf decode except the features of ``ModelInfer``). ``ModelStreamInfer`` (bidirectional streaming, used by
decoupled models) is refused with ``UNIMPLEMENTED``: the built-in and profiled models are not decoupled, and a
stream pinned to one replica would defeat per-request balancing; clients use ``ModelInfer``.

Shutdown (SIGTERM): ``/readyz`` turns 503 and every HTTP answer from then on closes its connection (a keep-alive
client reconnects, to a gateway pod that is not terminating); after ``shutdown_delay_s`` the listeners close, new
requests are refused (``503`` + ``Retry-After``), and in-flight and queued requests finish within ``drain_timeout_s``;
those still queued just before it ends are refused the same way, not cut with their connection.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import grpc
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from modalscale.api.annotations import budgeted_tenants
from modalscale.costmodel.showback import NO_MODALITY
from modalscale.gateway.admission import Admission, Rejected
from modalscale.gateway.affinity import affinity_key
from modalscale.gateway.balancer import EJECT_S, Balancer, Endpoint
from modalscale.gateway.endpoints import EndpointSource
from modalscale.gateway.features import PayloadError, RequestFeatures, features_from_grpc, features_from_http, preload
from modalscale.gateway.health import ReplicaProbe, WarmingProbe, http_ready_check
from modalscale.gateway.isvc_watch import AnnotationSource
from modalscale.gateway.metrics import GatewayMetrics
from modalscale.gateway.settings import GatewaySettings
from modalscale.gateway.tenant_budget import TENANT_BUDGET_EXCEEDED, TenantGate, TenantRefusal
from modalscale.gateway.tenants import TenantFolder, clean

log = logging.getLogger(__name__)

Activate = Callable[[], Awaitable[None]]
"""Tells the operator a request is waiting at zero Ready replicas
(:func:`modalscale.gateway.activation.kube_activation`)."""

INFER_PATH = re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/infer$")
"""KServe v2 infer endpoint (the only HTTP path whose body is read for features)."""
MODEL_CALL = re.compile(r"^/+v2/+models/+[^/]+(?:/+versions/+[^/]+)?/+(infer|generate|generate_stream)/*$")
"""Paths that may run a model besides :data:`INFER_PATH` exactly: Triton's generate extension (``generate``,
``generate_stream``) and ``infer`` spelled with extra or trailing slashes. The gateway refuses them (generate:
501, another spelling: 404), so that no request runs a model past its tenant budget, its admission and its
features (an adversarial probe, 6 Dec 2026, had a tenant refused on ``/infer`` served on ``/generate``)."""


def _served_s(status: int, t0: float, clock: Callable[[], float]) -> float | None:
    """The service time of an HTTP answer that counts as work done for the tenant (2xx, as gRPC's OK), else None:
    a request the replica refused (its pixels may be absurd) is no usage to bill."""
    return clock() - t0 if 200 <= status < 300 else None
GRPC_SERVICE = "/inference.GRPCInferenceService/"
GRPC_INFER = GRPC_SERVICE + "ModelInfer"
GRPC_STREAM = GRPC_SERVICE + "ModelStreamInfer"
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"})
"""Headers not forwarded in either direction (RFC 9110 7.6.1; ``host`` and ``content-length`` are set anew)."""
GRPC_DROPPED_METADATA = frozenset({"user-agent", "content-type", "te", "grpc-accept-encoding", "grpc-encoding",
                                   "grpc-timeout", "authority"})
ACTIVATION_INTERVAL_S = 1.0
"""Pokes at most once per this many seconds (the interface note's rate), and again this often while requests wait
with no Ready replica (:meth:`Gateway._keep_poking`)."""
BUFFERED_RESPONSE_BYTES = 256 * 1024
"""Responses up to this size with a Content-Length are read whole and sent in one write; larger or chunked ones
stream back chunk by chunk."""
CONNECT_TIMEOUT_S = 5.0
"""Longest a TCP connect to a replica may take, seconds; one that times out is retried on another replica, as a
refused one is (a crashed node's pods stay in the EndpointSlice until the node is marked, and their SYNs go
unanswered)."""
QUEUE_REFUSAL_MARGIN_S = 0.5
"""On stop, requests still in the admission queue this long before ``drain_timeout_s`` ends are refused with
``503`` + ``Retry-After`` / ``RESOURCE_EXHAUSTED`` (writing the answer takes a loop turn); at the end the listeners'
shutdown cancels what is left, and a queued request then lost its connection unanswered."""


def not_connected(exc: grpc.aio.AioRpcError) -> bool:
    """Whether a call failed because the channel never reached the replica, so that no byte of the request did and
    another replica may take it: ``UNAVAILABLE`` with gRPC core's own message for a channel that has no connection
    ("failed to connect to all addresses", also after a connect timed out). A replica's own ``UNAVAILABLE`` answer
    (a staged front whose image-encoder pool is down, a model not ready) and a connection lost mid-call are not:
    they go back to the client as they are, and the replica is not skipped."""
    return exc.code() == grpc.StatusCode.UNAVAILABLE and "failed to connect to all addresses" in (exc.details() or "")


GRPC_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    # gRPC core gives a connect attempt max(its backoff, MIN_CONNECT_TIMEOUT), and reads MIN_CONNECT_TIMEOUT from
    # this argument (default 20 s; grpc/grpc doc/connection-backoff.md): a call to a lost node's pod then fails
    # UNAVAILABLE, and is retried on another replica, after CONNECT_TIMEOUT_S as an HTTP one is, not after 20 s.
    ("grpc.min_reconnect_backoff_ms", int(CONNECT_TIMEOUT_S * 1000)),
    ("grpc.initial_reconnect_backoff_ms", 1000),
]
"""Options of the gateway's channel to each replica."""


def forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` without the hop-by-hop ones (pure); names keep their case, repeated names keep the last value."""
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}


class Attempt:
    """One try of a request to a replica, passed to aiohttp as its ``trace_request_ctx``."""

    def __init__(self) -> None:
        self.reused = False
        """True when aiohttp sent it on a pooled keep-alive connection (set by :func:`upstream_session`'s trace)."""


async def _on_reused(_session: aiohttp.ClientSession, context: Any, _params: Any) -> None:
    if isinstance(context.trace_request_ctx, Attempt):
        context.trace_request_ctx.reused = True


def upstream_session(upstream_timeout_s: float) -> aiohttp.ClientSession:
    """The gateway's HTTP client to the replicas: unbounded pool of keep-alive connections (kept 30 s idle), a
    request's whole time bounded to ``upstream_timeout_s`` s and its connect to :data:`CONNECT_TIMEOUT_S`, bodies and
    headers passed as they are (no decompression, no default headers); a request sent with an :class:`Attempt` as
    ``trace_request_ctx`` learns whether it went out on a pooled connection (:func:`stale_connection`)."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_on_reused)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0),
        timeout=aiohttp.ClientTimeout(total=upstream_timeout_s, sock_connect=CONNECT_TIMEOUT_S),
        auto_decompress=False, skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
        trace_configs=[trace])


def stale_connection(exc: BaseException, attempt: Attempt) -> bool:
    """Whether a try failed as a kept-alive connection the replica had closed fails (pure): sent on a pooled
    connection (``attempt.reused``), and closed or reset before any byte of an answer (aiohttp's
    ``ServerDisconnectedError``, or ``ClientOSError`` such as ``ECONNRESET`` / ``EPIPE`` on the write or the read).

    The replica closes an idle keep-alive connection (its idle timeout, its shutdown) while the gateway takes it from
    the pool and writes the request, which then reached a socket the replica had closed, so it never ran. The client
    cannot tell this from a replica that died running a request sent on a kept-alive connection; Go's net/http resends
    a replayable request on exactly this signal (a reused connection, nothing of an answer read; RFC 9112 section
    9.3.1 allows it for an idempotent request), and an inference is one (the same body gives the same answer, nothing
    else changes), so the gateway does too, once. aiohttp resends only its idempotent methods itself, never an infer
    ``POST``. A *new* connection closed before the answer is not this (the replica read the request and then failed
    or died: a request that kills its replica takes no second one with it), nor is a connect that failed
    (:class:`aiohttp.ClientConnectorError`, retried on its own rule)."""
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return False
    return attempt.reused and isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)


class Gateway:
    """One gateway process: HTTP, gRPC and metrics listeners over one balancer and one admission queue.

    Args:
        settings: Ports, limits, input names (:class:`GatewaySettings`).
        source: Where endpoints come from (:class:`EndpointSliceWatch` or :class:`StaticSource`).
        activate: Called (rate-limited) when a request arrives with no Ready replica; None: no poke.
        host: Address the listeners bind to.
        clock: Monotonic seconds (tests may pass a fake).
        budget: The InferenceService's annotations (tenant rejections); None: no tenant is refused.
        wall_clock: Unix seconds, for ``Retry-After`` against a rejection's ``until``.
    """

    def __init__(self, settings: GatewaySettings, source: EndpointSource, activate: Activate | None = None,
                 host: str = "0.0.0.0", clock: Callable[[], float] = time.monotonic,
                 budget: AnnotationSource | None = None, wall_clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.source = source
        self.activate = activate
        self.host = host
        self.clock = clock
        self.balancer = Balancer(settings.affinity_load_factor)
        self.metrics = GatewayMetrics()
        self.admission = Admission(settings.max_inflight, settings.queue_size, settings.queue_timeout_s,
                                   self.balancer.has_ready, on_change=self._update_queue_gauges)
        self.tenants = TenantFolder(settings.max_tenants)
        self.budget = budget
        self.wall_clock = wall_clock
        self.tenant_gate = TenantGate()
        self._budget_task: asyncio.Task[None] | None = None
        self._last_poke_s = -float("inf")
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._runners: list[web.AppRunner] = []
        self._grpc: grpc.aio.Server | None = None
        self._source_task: asyncio.Task[None] | None = None
        self._poke_task: asyncio.Task[None] | None = None
        self._probe_task: asyncio.Task[None] | None = None
        """Active health checks (:class:`~modalscale.gateway.health.ReplicaProbe`): a replica whose address stops
        taking connections (a lost node) is ejected within about 2 s."""
        self._warm_task: asyncio.Task[None] | None = None
        """Readiness checks of starting replicas while requests are held (:class:`~modalscale.gateway.health.
        WarmingProbe`)."""
        self._stopping = False
        self._endpoints_changed = asyncio.Event()
        """Set (and replaced) at every endpoint update: wakes the requests held after every replica failed."""
        self._held = 0
        """Requests admitted and held in :meth:`_reachable` after every listed replica failed: waiting as the queue's
        requests wait (activation pokes, readiness checks of starting replicas), though they hold their slot."""
        self._said_featureless = False
        """Whether the first request with neither named input has been logged (once per process)."""
        self.draining = False
        """True from :meth:`begin_drain` on: ``/readyz`` answers 503, requests are still served."""

    # --- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load what reading a request needs (:func:`~modalscale.gateway.features.preload`), then open the listeners
        and start following endpoints."""
        s = self.settings
        preload(grpc=s.grpc_port > 0)
        self._session = upstream_session(s.upstream_timeout_s)
        self._source_task = asyncio.create_task(self.source.run(self._on_endpoints), name="endpoints")
        if s.probe_interval_s > 0:
            self._probe_task = asyncio.create_task(ReplicaProbe(self.balancer, self.clock).run(s.probe_interval_s),
                                                   name="probe")
        if s.warm_probe_interval_s > 0:
            warm = WarmingProbe(self.balancer, self._holding, self._routable_changed,
                                http_ready_check(self._session), self.clock)
            self._warm_task = asyncio.create_task(warm.run(s.warm_probe_interval_s), name="warm-probe")
        if self.budget is not None:
            self._budget_task = asyncio.create_task(self.budget.run(self._on_annotations), name="budget")
        if self.activate is not None:
            self._poke_task = asyncio.create_task(self._keep_poking(), name="activation")
        app = web.Application(client_max_size=s.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self._http)
        app.on_response_prepare.append(self._close_when_draining)
        await self._serve(app, s.http_port, auto_decompress=False, shutdown_timeout=s.drain_timeout_s)
        metrics_app = web.Application()
        metrics_app.router.add_get("/metrics", self._metrics)
        metrics_app.router.add_get("/healthz", self._healthz)
        metrics_app.router.add_get("/readyz", self._readyz)
        await self._serve(metrics_app, s.metrics_port, shutdown_timeout=1.0)
        if s.grpc_port:
            self._grpc = grpc.aio.server(options=[("grpc.max_receive_message_length", s.max_body_bytes),
                                                  ("grpc.max_send_message_length", -1)])
            self._grpc.add_generic_rpc_handlers((_GrpcProxy(self),))
            self._grpc.add_insecure_port(f"{self.host}:{s.grpc_port}")
            await self._grpc.start()
        log.info("Gateway started http_port=%d grpc_port=%d metrics_port=%d", s.http_port, s.grpc_port,
                 s.metrics_port)

    async def _serve(self, app: web.Application, port: int, **runner_kwargs: Any) -> None:
        runner = web.AppRunner(app, access_log=None, **runner_kwargs)
        await runner.setup()
        await web.TCPSite(runner, self.host, port, backlog=1024).start()
        self._runners.append(runner)

    def begin_drain(self) -> None:
        """Say not ready (``/readyz`` 503) so the Service stops sending new connections; keep serving."""
        self.draining = True

    async def _close_when_draining(self, _request: web.Request, response: web.StreamResponse) -> None:
        """While draining, end each HTTP connection after its answer (``Connection: close``): a keep-alive client's
        next request then opens a new connection, which the Service sends to a gateway pod that is not terminating,
        instead of staying on this one until its listener closes the idle connection under a request being sent
        (issue 21, scenario 1: a drain evicts the gateway pods under load)."""
        if self.draining:
            response.force_close()  # the connection ends after this answer
            response.headers["Connection"] = "close"  # and the client is told (aiohttp set its headers already)

    async def stop(self) -> None:
        """Graceful stop: refuse new requests, let in-flight and queued ones finish (``drain_timeout_s``), close.
        Requests still queued :data:`QUEUE_REFUSAL_MARGIN_S` before the drain ends are refused (``ShuttingDown``,
        ``503`` + ``Retry-After``) rather than cut with the listener.

        A second call does nothing."""
        if self._stopping:
            return
        self._stopping = self.draining = True
        self.admission.close()
        grace = self.settings.drain_timeout_s
        # At the grace's end the listener's shutdown cancels what is left (aiohttp closes the connection unanswered,
        # gRPC answers CANCELLED): refuse the queue just before, with Retry-After (nothing of it reached a replica).
        refusal = asyncio.get_running_loop().call_later(max(0.0, grace - QUEUE_REFUSAL_MARGIN_S),
                                                        self.admission.refuse_waiting)
        stops = [r.cleanup() for r in self._runners]  # closes the listener, then waits for handlers
        if self._grpc is not None:
            stops.append(self._grpc.stop(grace))
        try:
            await asyncio.gather(*stops)
        finally:
            refusal.cancel()
        for task in (self._source_task, self._budget_task, self._probe_task, self._poke_task, self._warm_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        log.info("Gateway stopped")

    # --- endpoints and activation -----------------------------------------------------------------------------
    def _on_endpoints(self, endpoints: tuple[Endpoint, ...]) -> None:
        self.balancer.update(endpoints)
        self._routable_changed()

    def _routable_changed(self) -> None:
        """The endpoints new requests may go to changed (a new EndpointSlice set, or a starting replica that
        answered ready): wake the held requests."""
        self.metrics.ready_endpoints.set(len(self.balancer.endpoints))
        log.info("Endpoints changed ready=%s", ",".join(ep.key for ep in self.balancer.endpoints) or "none")
        self.admission.wake()
        self._endpoints_changed.set()
        self._endpoints_changed = asyncio.Event()
        self._close_idle_channels()

    def _on_annotations(self, annotations: Mapping[str, str]) -> None:
        before, unreadable = self.tenant_gate.tenants, self.tenant_gate.unreadable
        self.tenant_gate.update(annotations)
        if self.tenant_gate.unreadable and self.tenant_gate.unreadable != unreadable:
            log.warning("Tenant rejection annotations that do not decode hold what was last read from them: %s",
                        "; ".join(self.tenant_gate.unreadable))
        self.tenants.reserve(budgeted_tenants(annotations))
        if self.tenant_gate.tenants != before:
            log.info("Tenant rejections changed tenants=%s", ",".join(self.tenant_gate.tenants) or "none")

    def _refusal(self, raw_tenant: str | None) -> TenantRefusal | None:
        """The budget's refusal of this request's tenant (cleaned, not folded), counted; None: admit."""
        refusal = self.tenant_gate.check(clean(raw_tenant), self.wall_clock())
        if refusal is not None:
            self.metrics.rejected.labels(TENANT_BUDGET_EXCEEDED).inc()
        return refusal

    def _close_idle_channels(self) -> None:
        """Close the gRPC channels of endpoints that left the set once their last request finished."""
        routable = {ep.key for ep in self.balancer.endpoints}
        busy = self.balancer.outstanding()
        for key in [k for k in self._channels if k not in routable and k not in busy]:
            self._spawn(self._channels.pop(key).close())

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _poke(self) -> None:
        """Ask for activation when nothing is Ready, at most once per :data:`ACTIVATION_INTERVAL_S`."""
        if self.activate is None or self.balancer.has_ready():
            return
        now = self.clock()
        if now - self._last_poke_s < ACTIVATION_INTERVAL_S:
            return
        self._last_poke_s = now
        self._spawn(self._send_poke(self.activate))

    async def _keep_poking(self) -> None:
        """Poke again every :data:`ACTIVATION_INTERVAL_S` (looked at four times as often: :meth:`_poke` keeps the
        rate) while requests wait with no Ready replica: in the queue, or held after every listed replica failed
        (:meth:`_reachable`; such a request was admitted while its replica was listed Ready, and no arrival after it
        may come to ask).

        The poke at a request's arrival may not start one: its patch can fail (the apiserver down or slow), and the
        operator acts only on a poke stamped after the last scale to zero (whole seconds: one in the same second
        is not). Without another arrival nothing asked again, and the held requests waited out their timeout (CI
        of 4 Dec 2026: 3 requests held at zero for 420 s, no activation). Knative's activator likewise keeps
        reporting the requests it holds to its autoscaler while they wait."""
        while True:
            await asyncio.sleep(ACTIVATION_INTERVAL_S / 4)
            if self._holding():
                self._poke()

    def _holding(self) -> bool:
        """Requests wait for a replica: in the admission queue, or held after every listed replica failed."""
        return self.admission.waiting > 0 or self._held > 0

    async def _send_poke(self, activate: Activate) -> None:
        try:
            await activate()
        except Exception as exc:  # degrade quietly: the request keeps waiting, the next arrival pokes again
            self.metrics.activations.labels("error").inc()
            log.warning("Activation request failed error=%r", exc)
        else:
            self.metrics.activations.labels("sent").inc()

    def _update_queue_gauges(self) -> None:
        self.metrics.inflight.set(self.admission.inflight)
        self.metrics.queue_depth.set(self.admission.waiting)

    async def _admit(self) -> None:
        """Admission with the poke and the gauges; raises :class:`Rejected`."""
        self._poke()
        t0 = self.clock()
        try:
            await self.admission.enter()
        except Rejected as exc:
            self.metrics.rejected.labels(exc.reason).inc()
            raise
        self.metrics.queue_wait.observe(self.clock() - t0)

    def _release(self) -> None:
        self.admission.exit()

    def _pick(self, key: bytes | None, exclude: tuple[str, ...] = ()) -> Endpoint | None:
        chosen = self.balancer.choose(key, self.clock(), exclude)
        if chosen is None:
            return None
        ep, hit = chosen
        self.metrics.picks.labels("least_outstanding" if key is None else "affinity_hit" if hit
                                  else "affinity_spill").inc()
        return ep

    async def _reachable(self, key: bytes | None, tried: tuple[str, ...], deadline_s: float) -> Endpoint | None:
        """The replica for the next try of one request that no replica has answered yet.

        Every connect that failed (refused, or timed out: a lost node's pod stays listed Ready until its node is
        marked) sent the request nowhere, so it is safe to try again. A replica not yet ``tried`` goes first; when
        every listed one has failed, the request is held, as at zero replicas, until the endpoint set changes or an
        ejection ends (``EJECT_S``), and then gets a new round over all of them, until ``deadline_s`` (monotonic
        seconds: the arrival plus ``queue_timeout_s``, the longest any request is held). Knative's activator
        retries an unreachable revision the same way; answering 503 at once while the EndpointSlice still lists
        only a lost node's pods failed every request sent in those seconds (issue 21, scenario 5).

        Returns:
            The endpoint, or None: the deadline passed, or the gateway is stopping.
        """
        while True:
            ep = self._pick(key, tried)
            if ep is not None:
                return ep
            left_s = deadline_s - self.clock()
            if left_s <= 0 or self._stopping:
                return None
            changed = self._endpoints_changed
            self._held += 1
            self._poke()  # none may be Ready now (the failed replica left the set): held as at zero
            try:
                await asyncio.wait_for(changed.wait(), min(left_s, EJECT_S))
            except TimeoutError:
                pass
            finally:
                self._held -= 1
            ep = self._pick(key, ())
            if ep is not None:
                return ep

    def _record(self, tenant: str, feats: RequestFeatures | None, protocol: str, code: str,
                service_s: float | None) -> None:
        modality = feats.modality if feats is not None else NO_MODALITY
        self.metrics.gateway_requests.labels(tenant, modality, protocol, code).inc()
        if feats is not None and service_s is not None:
            self.metrics.tenant_images.labels(tenant, modality).inc(len(feats.image_pixels))
            self.metrics.tenant_image_pixels.labels(tenant, modality).inc(sum(feats.image_pixels))
            self.metrics.tenant_text_tokens.labels(tenant, modality).inc(feats.text_tokens or 0)
            self.metrics.tenant_service_seconds.labels(tenant, modality).inc(service_s)

    def _record_features(self, feats: RequestFeatures) -> None:
        """The runtime's feature series (the autoscaler's demand) for one infer request that arrived with readable
        features: counted before admission, so requests refused for capacity (queue full, queue timeout, no Ready
        replica: 503 / RESOURCE_EXHAUSTED) are demand too, as Knative's activator and the KEDA HTTP add-on count
        arrivals. Not counted: a tenant refused by its budget (429, before the body is read) and malformed bodies
        (400). A request with neither the image nor the text input (:data:`~modalscale.gateway.features.FEATURELESS`)
        counts in the ``text`` class with 0 images and 0 tokens; the first one is logged, naming the inputs the
        gateway looks for, since a model whose images or text come under other names needs ``spec.model.inputs``."""
        if feats.text_tokens == 0 and not self._said_featureless:
            self._said_featureless = True
            names = self.settings.inputs
            log.info("an infer request carries neither input %r nor %r (spec.model.inputs): forwarded, counted as "
                     "demand in modality text with 0 images and 0 tokens; if this model takes images or text under "
                     "other names, set spec.model.inputs so that their features are read (logged once)",
                     names.images, names.text)
        m = feats.modality
        self.metrics.requests.labels(m).inc()
        self.metrics.images.labels(m).observe(len(feats.image_pixels))
        for pixels in feats.image_pixels:
            self.metrics.image_pixels.labels(m).observe(pixels)
        if feats.text_tokens is not None:
            self.metrics.text_tokens.labels(m).observe(feats.text_tokens)

    # --- HTTP -------------------------------------------------------------------------------------------------
    async def _http(self, request: web.Request) -> web.StreamResponse:
        arrived_s = self.clock()
        raw_tenant = request.headers.get(self.settings.tenant_header)
        tenant = self.tenants.label(raw_tenant)
        is_infer = request.method == "POST" and INFER_PATH.match(request.path) is not None
        # raw: aiohttp reads "//v2/models/m/infer" as a URL whose host is "v2" (path "/models/m/infer")
        if (not is_infer and request.method == "POST"
                and (call := MODEL_CALL.match(request.raw_path.partition("?")[0])) is not None):
            code = 501 if call[1] != "infer" else 404
            self._record(tenant, None, "http", str(code), None)
            return web.json_response({"error": f"{request.path}: the gateway passes KServe v2 inference on "
                                               f"/v2/models/<model>[/versions/<version>]/infer only (Triton's "
                                               f"generate extension is not passed through): send the request there"},
                                     status=code)
        if is_infer and (refusal := self._refusal(raw_tenant)) is not None:
            self._record(tenant, None, "http", "429", None)
            return web.json_response({"error": refusal.message}, status=429,
                                     headers={"Retry-After": str(refusal.retry_after_s)})
        feats: RequestFeatures | None = None
        try:
            declared = request.content_length
            if declared is not None and declared > self.settings.max_body_bytes:
                raise PayloadError("body", "BodyTooLarge", f"{declared} bytes",
                                   f"send at most {self.settings.max_body_bytes} bytes (the gateway's limit)")
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise PayloadError("body", "BodyTooLarge", "more than the limit",
                                   f"send at most {self.settings.max_body_bytes} bytes (the gateway's limit)"
                                   ) from None
            if is_infer:
                feats = features_from_http(body, request.headers, self.settings.inputs, self.settings.max_body_bytes)
        except PayloadError as exc:
            self.metrics.request_errors.labels(exc.reason).inc()
            self._record(tenant, None, "http", "400", None)
            return web.json_response({"error": str(exc)}, status=400,
                                     headers={"Connection": "close"} if exc.reason == "BodyTooLarge" else None)
        if feats is not None:
            self._record_features(feats)  # demand: counted on arrival, whether admission then admits it or not
        try:
            await self._admit()
        except Rejected as exc:
            self._record(tenant, feats, "http", "503", None)
            return web.json_response({"error": str(exc)}, status=503,
                                     headers={"Retry-After": str(exc.retry_after_s)})
        try:
            return await self._forward_http(request, body, feats, tenant, arrived_s)
        finally:
            self._release()

    async def _forward_http(self, request: web.Request, body: bytes, feats: RequestFeatures | None,
                            tenant: str, arrived_s: float) -> web.StreamResponse:
        """Send the request to a replica and stream its answer back; ``arrived_s`` (monotonic seconds, the
        request's arrival) bounds the hold after failed connects to ``queue_timeout_s`` from the arrival, time in the
        admission queue included."""
        assert self._session is not None
        key = affinity_key(feats.image_digests) if feats is not None else None
        headers = forwarded_headers(request.headers)
        tried: tuple[str, ...] = ()
        deadline_s = arrived_s + self.settings.queue_timeout_s
        resend: Endpoint | None = None
        """The replica for the one resend after a stale kept-alive connection (:func:`stale_connection`)."""
        stale_resent = False
        while True:
            ep, resend = resend or await self._reachable(key, tried, deadline_s), None
            if ep is None:
                break
            if ep.key in tried:  # every listed replica failed once: a new round after the wait
                tried = ()
            self.balancer.acquire(ep)
            t0 = self.clock()
            attempt = Attempt()
            try:
                upstream = await self._session.request(request.method, f"http://{ep.key}{request.raw_path}",
                                                       headers=headers, data=body, allow_redirects=False,
                                                       trace_request_ctx=attempt)
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                # No connection (refused, unreachable, or a connect that timed out: a lost node's address answers
                # nothing): not a byte reached the replica, so another one may take the request.
                self._done(ep)
                self.balancer.eject(ep, self.clock())
                tried += (ep.key,)
                log.warning("Connect to replica failed endpoint=%s error=%s", ep.key, exc)
                self.metrics.retries.labels("http").inc()
                continue
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._done(ep)
                if not stale_resent and stale_connection(exc, attempt):
                    # A kept-alive connection the replica had closed: sent once more, to another replica when one is
                    # listed (the same one when it is alone); the replica is not ejected (its connection was stale).
                    stale_resent = True
                    resend = self._pick(key, (ep.key,)) or ep
                    log.warning("Kept-alive connection to replica was closed endpoint=%s error=%r", ep.key, exc)
                    self.metrics.retries.labels("http").inc()
                    continue
                self._record(tenant, feats, "http", "502", None)
                return web.json_response({"error": f"replica {ep.key} failed: {exc!r}"}, status=502)
            try:
                self.metrics.upstream_latency.labels("http").observe(self.clock() - t0)
                length = upstream.content_length
                if length is not None and length <= BUFFERED_RESPONSE_BYTES:
                    # Small and complete: one write of headers and body, one send(2) fewer per request than
                    # streaming (send(2) on loopback was the proxy's largest CPU item under cProfile; gateway CPU
                    # per request 560 vs 640 us in one run each of benchmarks/gateway_overhead.py).
                    data = await upstream.read()
                    served_s = _served_s(upstream.status, t0, self.clock)
                    self._record(tenant, feats, "http", str(upstream.status), served_s)
                    return web.Response(status=upstream.status, reason=upstream.reason, body=data,
                                        headers=forwarded_headers(upstream.headers))
                out = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                         headers=forwarded_headers(upstream.headers))
                if length is not None:
                    out.content_length = length
                await out.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                self._record(tenant, feats, "http", str(upstream.status), _served_s(upstream.status, t0, self.clock))
                return out
            finally:
                upstream.release()
                self._done(ep)
        self._record(tenant, feats, "http", "503", None)
        return web.json_response({"error": "no Ready replica could be reached; retry"}, status=503,
                                 headers={"Retry-After": "1"})

    def _done(self, ep: Endpoint) -> None:
        self.balancer.release(ep)
        if ep.key in self._channels and not self.balancer.outstanding().get(ep.key):
            if all(e.key != ep.key for e in self.balancer.endpoints):
                self._close_idle_channels()

    # --- gRPC -------------------------------------------------------------------------------------------------
    def _channel(self, ep: Endpoint) -> grpc.aio.Channel:
        target = ep.grpc_target
        assert target is not None
        channel = self._channels.get(ep.key)
        if channel is None:
            channel = grpc.aio.insecure_channel(target, options=GRPC_CHANNEL_OPTIONS)
            self._channels[ep.key] = channel
        return channel

    async def grpc_unary(self, method: str, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]
                         ) -> bytes:
        """Forward one unary call of ``inference.GRPCInferenceService`` as raw bytes."""
        arrived_s = self.clock()
        metadata = tuple((k, v) for k, v in context.invocation_metadata() or ()
                         if not k.startswith(":") and k not in GRPC_DROPPED_METADATA)
        tenant_raw = next((v for k, v in metadata if k == self.settings.tenant_header), None)
        tenant = self.tenants.label(tenant_raw if isinstance(tenant_raw, str) else None)
        feats: RequestFeatures | None = None
        if method == GRPC_INFER and (refusal := self._refusal(
                tenant_raw if isinstance(tenant_raw, str) else None)) is not None:
            self._record(tenant, None, "grpc", grpc.StatusCode.RESOURCE_EXHAUSTED.name, None)
            context.set_trailing_metadata((("retry-after", str(refusal.retry_after_s)),))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal.message)
        if method == GRPC_INFER:
            try:
                feats = features_from_grpc(request, self.settings.inputs)
            except PayloadError as exc:
                self.metrics.request_errors.labels(exc.reason).inc()
                self._record(tenant, None, "grpc", grpc.StatusCode.INVALID_ARGUMENT.name, None)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if feats is not None:
            self._record_features(feats)  # demand: counted on arrival, whether admission then admits it or not
        try:
            await self._admit()
        except Rejected as exc:
            self._record(tenant, feats, "grpc", grpc.StatusCode.RESOURCE_EXHAUSTED.name, None)
            context.set_trailing_metadata((("retry-after", str(exc.retry_after_s)),))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        try:
            return await self._forward_grpc(method, request, metadata, context, feats, tenant, arrived_s)
        finally:
            self._release()

    async def _forward_grpc(self, method: str, request: bytes, metadata: tuple[tuple[str, Any], ...],
                            context: grpc.aio.ServicerContext[bytes, bytes], feats: RequestFeatures | None,
                            tenant: str, arrived_s: float) -> bytes:
        """:meth:`_forward_http` for a gRPC call (``arrived_s`` likewise bounds the hold after failed connects)."""
        key = affinity_key(feats.image_digests) if feats is not None else None
        tried: tuple[str, ...] = ()
        last: grpc.aio.AioRpcError | None = None
        deadline_s = arrived_s + self.settings.queue_timeout_s
        while True:
            ep = await self._reachable(key, tried, deadline_s)
            if ep is None or ep.grpc_target is None:
                break
            if ep.key in tried:
                tried = ()
            self.balancer.acquire(ep)
            t0 = self.clock()
            remaining = context.time_remaining()  # the client's deadline, less the tries before this one
            timeout = self.settings.upstream_timeout_s if remaining is None else min(remaining,
                                                                                     self.settings.upstream_timeout_s)
            try:
                call = self._channel(ep).unary_unary(method)
                response: bytes = await call(request, metadata=metadata, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                last = exc
                if not_connected(exc):
                    self.balancer.eject(ep, self.clock())
                    tried += (ep.key,)
                    self.metrics.retries.labels("grpc").inc()
                    log.warning("gRPC call to replica failed endpoint=%s error=%s", ep.key, exc.details())
                    continue
                break
            finally:
                self._done(ep)
            self.metrics.upstream_latency.labels("grpc").observe(self.clock() - t0)
            self._record(tenant, feats, "grpc", grpc.StatusCode.OK.name, self.clock() - t0)
            return response
        if last is not None:
            self._record(tenant, feats, "grpc", last.code().name, None)
            await context.abort(last.code(), last.details() or "")
        self._record(tenant, feats, "grpc", grpc.StatusCode.RESOURCE_EXHAUSTED.name, None)
        context.set_trailing_metadata((("retry-after", "1"),))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "no Ready replica could be reached; retry")
        raise AssertionError("unreachable: abort raises")

    # --- metrics listener -------------------------------------------------------------------------------------
    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        """200 while serving (also at zero replicas: the gateway must take requests to hold them); 503 when
        stopping."""
        return web.Response(text="stopping\n", status=503) if self.draining else web.Response(text="ok\n")


class _GrpcProxy(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Routes every ``inference.GRPCInferenceService`` method to :meth:`Gateway.grpc_unary` (raw bytes)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method
        if not method.startswith(GRPC_SERVICE):
            return None  # gRPC answers UNIMPLEMENTED
        if method == GRPC_STREAM:
            return grpc.stream_stream_rpc_method_handler(_refuse_stream)

        async def unary(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            return await self.gateway.grpc_unary(method, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)


async def _refuse_stream(_: Any, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                        "ModelStreamInfer is not supported through the modalscale gateway (a stream would be pinned "
                        "to one replica); use ModelInfer, or set spec.gateway.enabled: false for decoupled models")
