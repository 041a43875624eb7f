"""Operator settings from ``MODALSCALE_*`` environment variables, validated all at once at start-up."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

from modalscale import __version__
from modalscale.api.names import LABEL_SYNTAX, is_dns_label, is_dns_subdomain, is_label_key, is_label_value
from modalscale.costmodel.anomaly import AnomalyConfig
from modalscale.operator.budget.plan import HEARTBEAT_MIN_S
from modalscale.operator.isvc.objects import NODE_LOSS_TOLERATION_S
from modalscale.redaction import redact_url

SETTINGS_ENV = frozenset({
    "MODALSCALE_NAMESPACES", "MODALSCALE_RESYNC_INTERVAL_SECONDS", "MODALSCALE_CONFLICT_HOLD_SECONDS",
    "MODALSCALE_METRICS_PORT", "MODALSCALE_HEALTH_PORT", "MODALSCALE_PEERING_NAME",
    "MODALSCALE_STANDALONE", "MODALSCALE_PROMETHEUS_URL", "MODALSCALE_LOG_LEVEL",
    "MODALSCALE_PRICING_CATALOG", "MODALSCALE_OPENCOST_URL",
    "MODALSCALE_OPENCOST_REFRESH_SECONDS", "MODALSCALE_SPEND_ANOMALY", "MODALSCALE_BUDGET_ADMIN_NAMESPACES",
    "MODALSCALE_GATEWAY_IMAGE", "MODALSCALE_METRICS_SCRAPER_LABELS", "MODALSCALE_NODE_LOSS_TOLERATION_SECONDS",
    "MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS", "MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS",
})
"""Every environment variable :meth:`Settings.from_env` reads (a ``MODALSCALE_*`` name that is neither this nor
:data:`OTHER_COMMANDS_ENV` is an error: most likely a typo)."""


OTHER_COMMANDS_ENV: dict[str, str] = {
    "MODALSCALE_REAL_NODE": "modalscale cluster up / the demo / the tests: run the real kubelet node or not",
    "MODALSCALE_DEMO_REUSE_IMAGE": "modalscale demo: reuse the runtime image already imported",
    "MODALSCALE_SKIP_DISK_CHECK": "scripts/demo.sh: run without checking the free disk first",
    "MODALSCALE_CACHE_DIR": "the developer cache of Go-built binaries and images",
    "MODALSCALE_TEST_KEEP_CLUSTER": "the tests: keep the session cluster running",
    "MODALSCALE_EXTRAS": "scripts/env.sh: the package extras installed into .venv",
    "MODALSCALE_OPENVINO_CACHE": "the runtime's OpenVINO engine: where converted models are cached",
    "MODALSCALE_PORT_RANGE": "every local server the devenv and tests start: the range their ports come from",
    "MODALSCALE_TEST_LANE": "the tests: the one lane this pytest process runs (scripts/test.sh sets it)",
    "MODALSCALE_TEST_LANES": "scripts/test.sh: 0 runs the whole suite in one pytest process instead of lanes",
    **dict.fromkeys((
        "MODALSCALE_GATEWAY_NAMESPACE", "MODALSCALE_GATEWAY_SERVICE", "MODALSCALE_GATEWAY_REPLICAS_SERVICE",
        "MODALSCALE_GATEWAY_ENDPOINTS", "MODALSCALE_GATEWAY_HTTP_PORT", "MODALSCALE_GATEWAY_GRPC_PORT",
        "MODALSCALE_GATEWAY_METRICS_PORT", "MODALSCALE_GATEWAY_MAX_INFLIGHT", "MODALSCALE_GATEWAY_QUEUE_SIZE",
        "MODALSCALE_GATEWAY_QUEUE_TIMEOUT_S", "MODALSCALE_GATEWAY_MAX_BODY_BYTES", "MODALSCALE_GATEWAY_TENANT_HEADER",
        "MODALSCALE_GATEWAY_MAX_TENANTS", "MODALSCALE_GATEWAY_IMAGES_INPUT", "MODALSCALE_GATEWAY_TEXT_INPUT",
        "MODALSCALE_GATEWAY_AFFINITY_LOAD_FACTOR", "MODALSCALE_GATEWAY_DRAIN_TIMEOUT_S",
        "MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S", "MODALSCALE_GATEWAY_UPSTREAM_TIMEOUT_S", "MODALSCALE_GATEWAY_LOG_LEVEL",
        "MODALSCALE_GATEWAY_PROBE_INTERVAL_S", "MODALSCALE_GATEWAY_WARM_PROBE_INTERVAL_S",
    ), "modalscale gateway: its configuration, which the operator sets in the gateway pods"),
    "MODALSCALE_GATEWAY": "modalscale gateway: the prefix of its settings (MODALSCALE_GATEWAY_*)",
}
"""``MODALSCALE_*`` names that other modalscale commands read (docs/operations.md tells users to export some of them, so
they are often set in the shell that starts the operator) -> who reads them. The operator ignores them."""


NAMESPACE_SYNTAX = ("lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 "
                    "characters")
"""A namespace name (a DNS-1123 label) in words, for error messages."""


class ConfigError(ValueError):
    """One or more ``MODALSCALE_*`` variables are invalid; the message lists each with the fix."""


@dataclass(frozen=True)
class Settings:
    """Everything the operator reads from its environment."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (``MODALSCALE_NAMESPACES``, comma-separated); empty means all namespaces."""
    resync_interval_s: float = 300.0
    """Period of the level-triggered reconcile of every InferenceService with nothing changed, in seconds
    (``MODALSCALE_RESYNC_INTERVAL_SECONDS``). A change of a child (watched) reconciles its owner at once and a
    service left refused, failed or with ``ScalingConflict=True`` is looked at again within ``RECHECK_S`` (30 s), so
    this only bounds how late what is not watched is seen (the source of ``Priced``) and is the safety net for a
    lost watch event (``operator/handlers.py``)."""
    conflict_hold_s: float = 60.0
    """How long ``ScalingConflict`` stays True after the last external change, in seconds."""
    metrics_port: int = 9090
    """Port of the operator's own Prometheus metrics (``MODALSCALE_METRICS_PORT``; 0 disables)."""
    health_port: int = 8080
    """Port of the liveness endpoint ``/healthz`` (``MODALSCALE_HEALTH_PORT``; 0 disables)."""
    peering_name: str = "modalscale"
    """kopf peering object shared by the replicas of one operator (``MODALSCALE_PEERING_NAME``; an object name, a
    DNS-1123 subdomain, checked at start-up)."""
    standalone: bool = False
    """Run without peering (``MODALSCALE_STANDALONE``); only for a single replica."""
    prometheus_url: str = ""
    """Prometheus base URL for the autoscaler (``MODALSCALE_PROMETHEUS_URL``)."""
    log_level: str = "INFO"
    """``MODALSCALE_LOG_LEVEL``: DEBUG, INFO, WARNING or ERROR."""
    pricing_catalog: str = ""
    """Path of a YAML pricing-catalog override merged onto the packaged catalog (``MODALSCALE_PRICING_CATALOG``)."""
    opencost_url: str = ""
    """OpenCost base URL for prices (``MODALSCALE_OPENCOST_URL``); empty: the catalog only."""
    opencost_refresh_s: float = 300.0
    """Seconds between reads of OpenCost's ``/assets`` (``MODALSCALE_OPENCOST_REFRESH_SECONDS``)."""
    spend_anomaly: AnomalyConfig = field(default_factory=AnomalyConfig)
    """Spend-anomaly detector settings (``MODALSCALE_SPEND_ANOMALY``: comma-separated ``field=value`` over the
    fields of :class:`modalscale.costmodel.anomaly.AnomalyConfig`, e.g. ``season_s=86400,recent_s=3600``; each
    positive and finite, and together free of :meth:`~modalscale.costmodel.anomaly.AnomalyConfig.problems`)."""
    budget_admin_namespaces: tuple[str, ...] = ()
    """Namespaces whose BudgetPolicies may select InferenceServices in other namespaces
    (``MODALSCALE_BUDGET_ADMIN_NAMESPACES``, comma-separated; ``*``: every namespace). Default none: a policy
    counts and enforces only in its own namespace, as a KEDA ScaledObject scales only there (the trust boundary:
    whoever may create a BudgetPolicy in a namespace must not be able to scale another team's services)."""
    gateway_image: str = f"modalscale/operator:{__version__}"
    """Image of the request gateway's pods (``MODALSCALE_GATEWAY_IMAGE``): the operator's own image, which the chart
    passes in (``image.repository:image.tag``); the default is the chart's default image."""
    gateway_image_pull_secrets: tuple[str, ...] = ()
    """Secrets (by name) the gateway pods pull :attr:`gateway_image` with (``MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS``,
    comma-separated; the chart passes its ``imagePullSecrets``): each must exist in every namespace that runs an
    InferenceService with the gateway on, as the kubelet reads a pod's pull secrets from its own namespace. Default
    none (a public image)."""
    metrics_scraper_labels: dict[str, str] = field(default_factory=lambda: {"app.kubernetes.io/name": "prometheus"})
    """Pod labels of the metrics scraper that an InferenceService's NetworkPolicy admits to the replicas' metrics
    port (``MODALSCALE_METRICS_SCRAPER_LABELS``, comma-separated ``name=value`` in Kubernetes label syntax, checked
    at start-up); default the label the Prometheus Operator puts on its Prometheus pods."""
    node_loss_toleration_s: int = NODE_LOSS_TOLERATION_S
    """Seconds the replicas' and gateway pods stay bound to a node tainted ``node.kubernetes.io/unreachable`` or
    ``not-ready`` (NoExecute) before they are evicted and replaced elsewhere
    (``MODALSCALE_NODE_LOSS_TOLERATION_SECONDS``, 0..3600; Kubernetes' own default is 300). Why 30:
    :data:`modalscale.operator.isvc.objects.NODE_LOSS_TOLERATION_S`. A toleration of the same taint in
    ``spec.placement.tolerations`` wins."""
    budget_status_heartbeat_s: int = HEARTBEAT_MIN_S
    """Floor of a BudgetPolicy's status heartbeat, seconds (``MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS``,
    1..3600): while only the clock moves (spend growing at a constant rate), status is rewritten every ``max(this,
    10 x spec.evaluationIntervalSeconds)`` seconds, so ``kubectl get budgetpolicy`` shows spend at most that old;
    rates, replicas, cents, thresholds and conditions are written as soon as they change whatever this is
    (:func:`modalscale.operator.budget.plan.heartbeat_s`). Lower: fresher status, more API writes."""
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], namespaces: Sequence[str] | None = None) -> Settings:
        """Build settings from ``environ``; unknown ``MODALSCALE_*`` names and bad values are errors.

        Args:
            namespaces: ``modalscale operator --namespace`` (given: it replaces ``MODALSCALE_NAMESPACES``, checked
                the same way, and its errors name the flag).

        Raises:
            ConfigError: Listing every invalid variable, what it got, and what it takes.
        """
        errors: list[str] = []
        for name in sorted(environ):
            if name.startswith("MODALSCALE_") and name not in SETTINGS_ENV and name not in OTHER_COMMANDS_ENV:
                errors.append(_unknown_setting(name))
        if errors:  # the lists once, not once per unknown name
            errors.append(f"(the operator reads {', '.join(sorted(SETTINGS_ENV))} and ignores "
                          f"{', '.join(sorted(OTHER_COMMANDS_ENV))}: other modalscale commands')")

        def number(name: str, default: float, lo: float, hi: float, integer: bool = False) -> float:
            raw = environ.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = int(raw) if integer else float(raw)
            except ValueError:
                errors.append(f"{name}={raw!r}: not a {'whole ' if integer else ''}number; use e.g. {default:g}")
                return default
            if not lo <= value <= hi:
                errors.append(f"{name}={raw!r}: out of range; use a value in [{lo:g}, {hi:g}]")
                return default
            return value

        if namespaces is None:
            source = "MODALSCALE_NAMESPACES"
            watched = tuple(n.strip() for n in environ.get(source, "").split(",") if n.strip())
        else:
            source, watched = "--namespace", tuple(namespaces)
        for ns in watched:
            if not is_dns_label(ns):
                errors.append(f"{source}: {ns!r} is not a namespace name ({NAMESPACE_SYNTAX})")
        standalone_raw = environ.get("MODALSCALE_STANDALONE", "false").lower()
        if standalone_raw not in ("true", "false", "1", "0", ""):
            errors.append(f"MODALSCALE_STANDALONE={standalone_raw!r}: use true or false")
        level = environ.get("MODALSCALE_LOG_LEVEL", "INFO").upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            errors.append(f"MODALSCALE_LOG_LEVEL={level!r}: use DEBUG, INFO, WARNING or ERROR")
        prom = environ.get("MODALSCALE_PROMETHEUS_URL", "")
        if prom and not prom.startswith(("http://", "https://")):
            errors.append(f"MODALSCALE_PROMETHEUS_URL={redact_url(prom)!r}: use an http:// or https:// URL")
        catalog = environ.get("MODALSCALE_PRICING_CATALOG", "")
        if catalog:
            from pathlib import Path

            from modalscale.costmodel.catalog import CatalogError, load_catalog

            if not Path(catalog).is_file():
                errors.append(f"MODALSCALE_PRICING_CATALOG={catalog!r}: no such file; mount the catalog override")
            else:
                try:
                    load_catalog(Path(catalog))
                except CatalogError as exc:
                    errors.append(f"MODALSCALE_PRICING_CATALOG={catalog!r}: {exc}")
        opencost = environ.get("MODALSCALE_OPENCOST_URL", "")
        if opencost and not opencost.startswith(("http://", "https://")):
            errors.append(f"MODALSCALE_OPENCOST_URL={redact_url(opencost)!r}: use an http:// or https:// URL")
        anomaly = _anomaly_config(environ.get("MODALSCALE_SPEND_ANOMALY", ""), errors)
        admin = tuple(n.strip() for n in environ.get("MODALSCALE_BUDGET_ADMIN_NAMESPACES", "").split(",") if n.strip())
        for ns in admin:
            if ns != "*" and not is_dns_label(ns):
                errors.append(f"MODALSCALE_BUDGET_ADMIN_NAMESPACES: {ns!r} is not a namespace name "
                              f"({NAMESPACE_SYNTAX}) or *")
        gateway_image = environ.get("MODALSCALE_GATEWAY_IMAGE", "") or cls.gateway_image
        if any(c.isspace() for c in gateway_image) or len(gateway_image) > 512:
            errors.append(f"MODALSCALE_GATEWAY_IMAGE={gateway_image!r}: not an image reference; use e.g. "
                          f"registry.example.com/modalscale/operator:{__version__}")
        pull_secrets = tuple(n.strip() for n in environ.get("MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS", "").split(",")
                             if n.strip())
        for secret in pull_secrets:
            if not is_dns_subdomain(secret):
                errors.append(f"MODALSCALE_GATEWAY_IMAGE_PULL_SECRETS: {secret!r} is not a Secret name (lowercase "
                              f"letters, digits, '-' and '.', at most 253 characters), e.g. regcred")
        scraper: dict[str, str] = {}
        for part in (p.strip() for p in environ.get("MODALSCALE_METRICS_SCRAPER_LABELS", "").split(",") if p.strip()):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                errors.append(f"MODALSCALE_METRICS_SCRAPER_LABELS: {part!r} is not name=value (e.g. "
                              f"app.kubernetes.io/name=prometheus)")
                continue
            key, value = key.strip(), value.strip()
            bad = [f"{key!r} is not a label key"] if not is_label_key(key) else []
            bad += [f"{value!r} is not a label value"] if not is_label_value(value) else []
            if bad:
                errors.append(f"MODALSCALE_METRICS_SCRAPER_LABELS: {' and '.join(bad)} ({LABEL_SYNTAX}), e.g. "
                              f"app.kubernetes.io/name=prometheus")
                continue
            scraper[key] = value
        peering = environ.get("MODALSCALE_PEERING_NAME", "") or cls.peering_name
        if not is_dns_subdomain(peering):
            errors.append(f"MODALSCALE_PEERING_NAME={peering!r}: not an object name (the KopfPeering's: lowercase "
                          f"letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or "
                          f"digit, at most 253 characters), e.g. modalscale")
        settings = cls(
            namespaces=watched,
            resync_interval_s=number("MODALSCALE_RESYNC_INTERVAL_SECONDS", 300.0, 1.0, 3600.0),
            conflict_hold_s=number("MODALSCALE_CONFLICT_HOLD_SECONDS", 60.0, 0.0, 86400.0),
            metrics_port=int(number("MODALSCALE_METRICS_PORT", 9090, 0, 65535, integer=True)),
            health_port=int(number("MODALSCALE_HEALTH_PORT", 8080, 0, 65535, integer=True)),
            peering_name=peering,
            standalone=standalone_raw in ("true", "1"),
            prometheus_url=prom,
            log_level=level,
            pricing_catalog=catalog,
            opencost_url=opencost,
            opencost_refresh_s=number("MODALSCALE_OPENCOST_REFRESH_SECONDS", 300.0, 1.0, 86400.0),
            spend_anomaly=anomaly,
            budget_admin_namespaces=admin,
            gateway_image=gateway_image,
            gateway_image_pull_secrets=pull_secrets,
            metrics_scraper_labels=scraper or {"app.kubernetes.io/name": "prometheus"},
            node_loss_toleration_s=int(number("MODALSCALE_NODE_LOSS_TOLERATION_SECONDS", NODE_LOSS_TOLERATION_S, 0,
                                              3600, integer=True)),
            budget_status_heartbeat_s=int(number("MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS", HEARTBEAT_MIN_S, 1,
                                                 3600, integer=True)),
        )
        if settings.metrics_port and settings.metrics_port == settings.health_port:
            errors.append(f"MODALSCALE_METRICS_PORT and MODALSCALE_HEALTH_PORT are both {settings.metrics_port}: the "
                          f"metrics and the health endpoint need a port each (defaults 9090 and 8080)")
        if errors:
            raise ConfigError("invalid operator settings:\n  " + "\n  ".join(errors))
        return settings


def _unknown_setting(name: str) -> str:
    """The error line of an unknown ``MODALSCALE_*`` name, with the closest setting if one is near (the lists of
    known names follow the errors once)."""
    import difflib

    close = difflib.get_close_matches(name, sorted(SETTINGS_ENV), n=1, cutoff=0.8)
    return f"{name}: unknown setting" + (f"; did you mean {close[0]}?" if close else "")


def _anomaly_config(raw: str, errors: list[str]) -> AnomalyConfig:
    """Parse ``MODALSCALE_SPEND_ANOMALY`` (``field=value,...``); appends to ``errors`` and returns the defaults
    for anything invalid."""
    defaults = AnomalyConfig()
    types = {f.name: type(getattr(defaults, f.name)) for f in fields(AnomalyConfig)}
    values: dict[str, float | int] = {}
    for part in (p.strip() for p in raw.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in types:
            errors.append(f"MODALSCALE_SPEND_ANOMALY: {part!r} is not field=value with a field among "
                          f"{', '.join(types)}")
            continue
        try:
            number = types[key](value.strip())
        except ValueError:
            errors.append(f"MODALSCALE_SPEND_ANOMALY: {key}={value!r} is not a {types[key].__name__}")
            continue
        if not math.isfinite(number):
            errors.append(f"MODALSCALE_SPEND_ANOMALY: {key}={value!r} is not a finite number; use e.g. "
                          f"{key}={getattr(defaults, key):g}")
            continue
        if not number > 0:
            errors.append(f"MODALSCALE_SPEND_ANOMALY: {key}={value!r} must be greater than 0")
            continue
        values[key] = number
    config = AnomalyConfig(**values)  # type: ignore[arg-type]
    problems = config.problems()
    errors += [f"MODALSCALE_SPEND_ANOMALY: {p}" for p in problems]
    return defaults if problems else config
