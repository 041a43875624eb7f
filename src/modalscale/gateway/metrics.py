"""The gateway's Prometheus metrics: the runtime's per-request feature series, plus ``modalscale_gateway_*``.

The per-tenant accounting counters take their names from :mod:`modalscale.costmodel.showback`, which reads them
(``modalscale cost showback``): one spelling for the writer and the reader.

The feature series carry the names, help texts, labels and buckets of :mod:`modalscale.runtime.model.metrics`, so
the autoscaler reads a model it has never seen (issue 19, item 4) from the gateway exactly as it reads the
built-in runtime. Each :class:`GatewayMetrics` has its own registry (no module-level singletons, STYLE C8), so
tests can run several gateways in one process.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from modalscale.costmodel import showback as acct
from modalscale.runtime.model import metrics as rm

UPSTREAM_SECONDS_BUCKETS = rm.SECONDS_BUCKETS + (30.0, 60.0)
"""Buckets of ``modalscale_gateway_upstream_latency_seconds``: the runtime's, plus two for slow batches."""


PICK_POLICIES = ("affinity_hit", "affinity_spill", "least_outstanding")
"""``policy`` values of ``modalscale_gateway_picks_total``."""
RETRY_PROTOCOLS = ("http", "grpc")
"""``protocol`` values of ``modalscale_gateway_retries_total``."""
REJECT_REASONS = ("QueueFull", "QueueTimeout", "NoReadyReplica", "ShuttingDown", "TenantBudgetExceeded")
"""``reason`` values of ``modalscale_gateway_rejected_total`` (admission's and the tenant budget's)."""
ACTIVATION_RESULTS = ("sent", "error")
"""``result`` values of ``modalscale_gateway_activation_requests_total``."""


class GatewayMetrics:
    """Every series the gateway exports, in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        m = ("modality",)
        # The runtime's names (modalscale.runtime.model.metrics), so Predictive reads a user's own model.
        self.requests = Counter(rm.REQUESTS_TOTAL, rm.HELP[rm.REQUESTS_TOTAL], m, registry=r)
        self.request_errors = Counter(rm.REQUEST_ERRORS_TOTAL, rm.HELP[rm.REQUEST_ERRORS_TOTAL], ("reason",),
                                      registry=r)
        self.image_pixels = Histogram(rm.REQUEST_IMAGE_PIXELS, rm.HELP[rm.REQUEST_IMAGE_PIXELS], m,
                                      buckets=rm.PIXEL_BUCKETS, registry=r)
        self.images = Histogram(rm.REQUEST_IMAGES, rm.HELP[rm.REQUEST_IMAGES], m, buckets=rm.IMAGE_COUNT_BUCKETS,
                                registry=r)
        self.text_tokens = Histogram(rm.REQUEST_TEXT_TOKENS, "Tokens per request text, by modality class.", m,
                                     buckets=rm.TOKEN_BUCKETS, registry=r)
        for modality in rm.MODALITIES:
            self.requests.labels(modality)
        for name, hist in ((rm.REQUEST_IMAGE_PIXELS, self.image_pixels), (rm.REQUEST_IMAGES, self.images),
                           (rm.REQUEST_TEXT_TOKENS, self.text_tokens)):
            for modality in rm.FEATURE_MODALITIES[name]:
                hist.labels(modality)
        # The gateway's own.
        self.gateway_requests = Counter(
            acct.REQUESTS_METRIC,
            "Requests answered by the gateway, by tenant, modality (none: no inference, i.e. not an infer call or a "
            "malformed infer the gateway refused), protocol and code "
            "(HTTP status, or gRPC status name).", ("tenant", "modality", "protocol", "code"), registry=r)
        self.tenant_images = Counter(acct.IMAGES_METRIC,
                                     "Images in requests sent to a replica, by tenant and modality.",
                                     ("tenant", "modality"), registry=r)
        self.tenant_image_pixels = Counter(acct.IMAGE_PIXELS_METRIC,
                                           "Pixels (width x height) of images sent to a replica, by tenant and "
                                           "modality.", ("tenant", "modality"), registry=r)
        self.tenant_text_tokens = Counter(acct.TEXT_TOKENS_METRIC,
                                          "Text tokens of requests sent to a replica, by tenant and modality.",
                                          ("tenant", "modality"), registry=r)
        self.tenant_service_seconds = Counter(acct.SERVICE_SECONDS_METRIC,
                                              "Seconds replicas spent answering (first byte sent to last byte "
                                              "received), by tenant and modality.", ("tenant", "modality"),
                                              registry=r)
        # The default tenant's accounting series exist from 0 before its first request: Prometheus' increase()
        # cannot count the first increment of a series that appears inside its window (showback reads them).
        for modality in rm.MODALITIES:
            for counter in (self.tenant_images, self.tenant_image_pixels, self.tenant_text_tokens,
                            self.tenant_service_seconds):
                counter.labels("default", modality)
        self.inflight = Gauge("modalscale_gateway_inflight_requests",
                              "Requests admitted and not finished (at a replica or being streamed back).",
                              registry=r)
        self.queue_depth = Gauge("modalscale_gateway_queue_depth",
                                 "Requests waiting for a slot or for a first Ready replica.", registry=r)
        self.ready_endpoints = Gauge("modalscale_gateway_ready_endpoints",
                                     "Replicas that may get new requests (Ready, not terminating; "
                                     "while none is, starting ones that answered ready).", registry=r)
        self.upstream_latency = Histogram("modalscale_gateway_upstream_latency_seconds",
                                          "Seconds from sending a request to a replica to its response headers, "
                                          "by protocol.", ("protocol",), buckets=UPSTREAM_SECONDS_BUCKETS,
                                          registry=r)
        self.queue_wait = Histogram("modalscale_gateway_queue_wait_seconds",
                                    "Seconds a request waited in the gateway's queue before it was admitted.",
                                    buckets=UPSTREAM_SECONDS_BUCKETS + (120.0, 300.0), registry=r)
        self.picks = Counter("modalscale_gateway_picks_total",
                             "Replica choices, by policy: affinity_hit (the image's own replica on the ring), "
                             "affinity_spill (moved on by the load bound), least_outstanding (no image).",
                             ("policy",), registry=r)
        self.retries = Counter("modalscale_gateway_retries_total",
                               "Requests sent again after a try no replica ran: a failed connect, or (HTTP) a kept-"
                               "alive connection the replica had closed, by protocol.", ("protocol",), registry=r)
        self.rejected = Counter("modalscale_gateway_rejected_total",
                                "Requests refused by admission, by reason (QueueFull, QueueTimeout, NoReadyReplica, "
                                "ShuttingDown, TenantBudgetExceeded).", ("reason",), registry=r)
        self.activations = Counter("modalscale_gateway_activation_requests_total",
                                   "Activation pokes sent to the operator (no Ready replica), by result.",
                                   ("result",), registry=r)
        # Every labelled counter's series exist from 0, before their first event: a series that appears with its
        # first value already counted is lost to increase() and to max - min over a window (the demo's count of
        # the gateway's choices fell 3 short of the 853 requests answered at 614a467).
        for counter, values in ((self.picks, PICK_POLICIES), (self.retries, RETRY_PROTOCOLS),
                                (self.rejected, REJECT_REASONS), (self.activations, ACTIVATION_RESULTS)):
            for value in values:
                counter.labels(value)
