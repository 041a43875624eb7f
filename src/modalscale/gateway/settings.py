"""Gateway settings from ``MODALSCALE_GATEWAY_*`` environment variables, validated all at once at start-up (pure).

The operator writes these variables into the ``<isvc>-gateway`` Deployment from the InferenceService's spec; a bad
value crashes the pod at start with every fault listed (STYLE C8), never a half-configured gateway.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from modalscale.gateway.balancer import Endpoint, parse_static
from modalscale.gateway.features import DEFAULT_MAX_BODY_BYTES, InputNames

PREFIX = "MODALSCALE_GATEWAY_"

SETTINGS_ENV = frozenset({
    "MODALSCALE_GATEWAY_NAMESPACE", "MODALSCALE_GATEWAY_SERVICE", "MODALSCALE_GATEWAY_REPLICAS_SERVICE",
    "MODALSCALE_GATEWAY_ENDPOINTS", "MODALSCALE_GATEWAY_HTTP_PORT", "MODALSCALE_GATEWAY_GRPC_PORT",
    "MODALSCALE_GATEWAY_METRICS_PORT", "MODALSCALE_GATEWAY_MAX_INFLIGHT", "MODALSCALE_GATEWAY_QUEUE_SIZE",
    "MODALSCALE_GATEWAY_QUEUE_TIMEOUT_S", "MODALSCALE_GATEWAY_MAX_BODY_BYTES", "MODALSCALE_GATEWAY_TENANT_HEADER",
    "MODALSCALE_GATEWAY_MAX_TENANTS", "MODALSCALE_GATEWAY_IMAGES_INPUT", "MODALSCALE_GATEWAY_TEXT_INPUT",
    "MODALSCALE_GATEWAY_AFFINITY_LOAD_FACTOR", "MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S",
    "MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S",
    "MODALSCALE_GATEWAY_UPSTREAM_TIMEOUT_S", "MODALSCALE_GATEWAY_LOG_LEVEL", "MODALSCALE_GATEWAY_PROBE_INTERVAL_S",
    "MODALSCALE_GATEWAY_WARM_PROBE_INTERVAL_S",
})
"""Every variable :meth:`GatewaySettings.from_env` reads; another ``MODALSCALE_GATEWAY_*`` name is an error."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class ConfigError(ValueError):
    """One or more ``MODALSCALE_GATEWAY_*`` variables are invalid; the message lists each with the fix."""


@dataclass(frozen=True)
class GatewaySettings:
    """Everything ``modalscale gateway`` reads from its environment."""

    namespace: str = ""
    """Namespace of the InferenceService and its replicas Service (``MODALSCALE_GATEWAY_NAMESPACE``)."""
    service: str = ""
    """The InferenceService's name (``MODALSCALE_GATEWAY_SERVICE``): the object the activation poke annotates."""
    replicas_service: str = ""
    """Service whose EndpointSlices list the replicas (``MODALSCALE_GATEWAY_REPLICAS_SERVICE``; default
    ``<service>-replicas``)."""
    static_endpoints: tuple[Endpoint, ...] = ()
    """Fixed replicas instead of the watch (``MODALSCALE_GATEWAY_ENDPOINTS``: ``host:http_port[:grpc_port],...``);
    no activation poke then."""
    http_port: int = 8000
    """Port of KServe v2 HTTP/REST (``MODALSCALE_GATEWAY_HTTP_PORT``)."""
    grpc_port: int = 8001
    """Port of KServe v2 gRPC (``MODALSCALE_GATEWAY_GRPC_PORT``; 0 disables gRPC)."""
    metrics_port: int = 9090
    """Port of ``/metrics``, ``/healthz`` and ``/readyz`` (``MODALSCALE_GATEWAY_METRICS_PORT``)."""
    max_inflight: int = 256
    """Requests sent to replicas at once by this gateway process (``MODALSCALE_GATEWAY_MAX_INFLIGHT``); more wait
    in the queue."""
    queue_size: int = 512
    """Requests that may wait (for a slot or for a first Ready replica) before new ones get 503
    (``MODALSCALE_GATEWAY_QUEUE_SIZE``)."""
    queue_timeout_s: float = 120.0
    """Longest wait in the queue, seconds (``MODALSCALE_GATEWAY_QUEUE_TIMEOUT_S``); then 503 with ``Retry-After``.
    Covers a start from zero: pod scheduling plus Triton's model load (tens of seconds on CPU)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest request body or gRPC message, bytes (``MODALSCALE_GATEWAY_MAX_BODY_BYTES``); larger gets 400."""
    tenant_header: str = "x-modalscale-tenant"
    """Header (gRPC: metadata key) naming the tenant (``MODALSCALE_GATEWAY_TENANT_HEADER``)."""
    max_tenants: int = 100
    """Distinct tenant label values before the rest fold into ``other`` (``MODALSCALE_GATEWAY_MAX_TENANTS``)."""
    inputs: InputNames = InputNames()
    """Input names carrying images and text (``MODALSCALE_GATEWAY_IMAGES_INPUT``, ``_TEXT_INPUT``)."""
    affinity_load_factor: float = 1.25
    """``c`` of consistent hashing with bounded loads (``MODALSCALE_GATEWAY_AFFINITY_LOAD_FACTOR``, >= 1)."""
    shutdown_delay_s: float = 5.0
    """After SIGTERM, how long the gateway keeps accepting while ``/readyz`` says 503, seconds
    (``MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S``): the Service's endpoints and kube-proxy take a few seconds to stop
    sending new connections to a terminating pod (Knative's queue-proxy waits the same way)."""
    drain_timeout_s: float = 30.0
    """On SIGTERM, how long in-flight requests may take to finish, seconds (``MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S``);
    requests still queued 0.5 s before it ends are refused with ``503`` + ``Retry-After``."""
    upstream_timeout_s: float = 300.0
    """Longest a replica may take to answer one request, seconds (``MODALSCALE_GATEWAY_UPSTREAM_TIMEOUT_S``)."""
    probe_interval_s: float = 1.0
    """Seconds between two rounds of active health probes, a TCP connect to every replica
    (``MODALSCALE_GATEWAY_PROBE_INTERVAL_S``; 0 disables them): a replica whose address stops taking connections
    (a lost node's) is ejected within this plus the probe's 1 s connect timeout (``modalscale.gateway.health``)."""
    warm_probe_interval_s: float = 0.2
    """Seconds between two readiness checks of the starting replicas while requests are held with none Ready
    (``MODALSCALE_GATEWAY_WARM_PROBE_INTERVAL_S``; 0 disables them): a replica whose Triton answers ready takes the
    held requests before its EndpointSlice says Ready (``modalscale.gateway.health.WarmingProbe``)."""
    log_level: str = "INFO"
    """``MODALSCALE_GATEWAY_LOG_LEVEL``: DEBUG, INFO, WARNING or ERROR."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> GatewaySettings:
        """Build settings from ``environ``; unknown ``MODALSCALE_GATEWAY_*`` names and bad values are errors.

        Raises:
            ConfigError: Listing every invalid variable, what it got, and what it takes.
        """
        errors: list[str] = []
        for name in sorted(environ):
            if name.startswith(PREFIX) and name not in SETTINGS_ENV:
                close = difflib.get_close_matches(name, sorted(SETTINGS_ENV), n=1, cutoff=0.8)
                errors.append(f"{name}: unknown setting" + (f"; did you mean {close[0]}?" if close else ""))
        if errors:  # the list once, not once per unknown name
            errors.append(f"(the gateway reads {', '.join(sorted(SETTINGS_ENV))})")

        def number(name: str, default: float, lo: float, hi: float, integer: bool = False) -> float:
            raw = environ.get(PREFIX + name, "").strip()
            if raw == "":
                return default
            try:
                value = int(raw) if integer else float(raw)
            except ValueError:
                kind = "whole number" if integer else "number"
                errors.append(f"{PREFIX}{name}={raw!r}: not a {kind}; use e.g. {default:g}")
                return default
            if not lo <= value <= hi:
                errors.append(f"{PREFIX}{name}={raw!r}: out of range; use a value in [{lo:g}, {hi:g}]")
                return default
            return value

        def name_value(name: str, default: str, pattern: re.Pattern[str], what: str) -> str:
            raw = environ.get(PREFIX + name, "").strip()
            if raw and not pattern.match(raw):
                errors.append(f"{PREFIX}{name}={raw!r}: not {what}")
                return default
            return raw or default

        namespace = name_value("NAMESPACE", "", _DNS_LABEL, "a namespace name (lowercase letters, digits, '-')")
        service = name_value("SERVICE", "", _DNS_LABEL, "an InferenceService name (lowercase letters, digits, '-')")
        replicas = name_value("REPLICAS_SERVICE", f"{service}-replicas" if service else "", _DNS_LABEL,
                              "a Service name (lowercase letters, digits, '-')")
        static: tuple[Endpoint, ...] = ()
        raw_static = environ.get(PREFIX + "ENDPOINTS", "").strip()
        if raw_static:
            try:
                static = parse_static(raw_static)
            except ValueError as exc:
                errors.append(f"{PREFIX}ENDPOINTS: {exc}")
        elif not (namespace and service):
            missing = [PREFIX + n for n, v in (("NAMESPACE", namespace), ("SERVICE", service)) if not v]
            errors.append(f"{', '.join(missing)}: required to watch the replicas' EndpointSlices (or set "
                          f"{PREFIX}ENDPOINTS=host:port,... for fixed replicas)")
        tenant_header = name_value("TENANT_HEADER", "x-modalscale-tenant", _HEADER, "an HTTP header name").lower()
        images = environ.get(PREFIX + "IMAGES_INPUT", "").strip() or InputNames().images
        text = environ.get(PREFIX + "TEXT_INPUT", "").strip() or InputNames().text
        if images == text:
            errors.append(f"{PREFIX}IMAGES_INPUT and {PREFIX}TEXT_INPUT are both {images!r}; name two inputs")
        level = environ.get(PREFIX + "LOG_LEVEL", "INFO").strip().upper() or "INFO"
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            errors.append(f"{PREFIX}LOG_LEVEL={level!r}: use DEBUG, INFO, WARNING or ERROR")
            level = "INFO"
        http_port = int(number("HTTP_PORT", 8000, 1, 65535, integer=True))
        grpc_port = int(number("GRPC_PORT", 8001, 0, 65535, integer=True))
        metrics_port = int(number("METRICS_PORT", 9090, 1, 65535, integer=True))
        ports = [p for p in (http_port, grpc_port, metrics_port) if p]
        if len(set(ports)) != len(ports):
            errors.append(f"{PREFIX}HTTP_PORT, _GRPC_PORT, _METRICS_PORT: {http_port}, {grpc_port}, {metrics_port} "
                          "must differ")
        settings = cls(
            namespace=namespace, service=service, replicas_service=replicas, static_endpoints=static,
            http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
            max_inflight=int(number("MAX_INFLIGHT", 256, 1, 100_000, integer=True)),
            queue_size=int(number("QUEUE_SIZE", 512, 0, 1_000_000, integer=True)),
            queue_timeout_s=number("QUEUE_TIMEOUT_S", 120.0, 0.1, 3600.0),
            max_body_bytes=int(number("MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024, 2**31 - 1, integer=True)),
            tenant_header=tenant_header,
            max_tenants=int(number("MAX_TENANTS", 100, 1, 10_000, integer=True)),
            inputs=InputNames(images=images, text=text),
            affinity_load_factor=number("AFFINITY_LOAD_FACTOR", 1.25, 1.0, 100.0),
            drain_timeout_s=number("DRAIN_TIMEOUT_S", 30.0, 0.0, 3600.0),
            shutdown_delay_s=number("SHUTDOWN_DELAY_S", 5.0, 0.0, 600.0),
            upstream_timeout_s=number("UPSTREAM_TIMEOUT_S", 300.0, 0.1, 86400.0),
            probe_interval_s=number("PROBE_INTERVAL_S", 1.0, 0.0, 3600.0),
            warm_probe_interval_s=number("WARM_PROBE_INTERVAL_S", 0.2, 0.0, 60.0),
            log_level=level,
        )
        if errors:
            raise ConfigError("invalid gateway settings:\n  " + "\n  ".join(errors))
        return settings
