"""Read-only observation for BudgetPolicies: the policy as stored, the InferenceServices and pods it may select,
and the webhook Secrets of its notifications. Never writes.

Why a module: the planner (``budget.plan``) is pure, so every read happens here, in one place that can be
reviewed for what the operator needs RBAC for: ``get`` on budgetpolicies and secrets (in the policy's
namespace), ``list`` on inferenceservices and pods (in the selected namespaces), ``get`` on the nodes those pods run on
(their capacity-type label prices each pod at Spot or on-demand, their ``Ready`` condition says whether their
kubelet still reports: the pods of a silent node are charged to when it was last heard; optional), ``get`` on the
Leases in ``kube-node-lease`` of the nodes that are not Ready (the kubelet's last renewal; optional). The pods deleted
since are not read here: the pod watch (``budget.handlers``, ``list``/``watch`` on pods) records them
(``budget.podstops``).

Secrets: the webhook URL and signing secret are read only when an alert is about to be sent, held in memory
only as long as the delivery takes, and never logged or written anywhere (:class:`Receiver` hides them from
``repr``).
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from modalscale import GROUP, VERSION
from modalscale.api.budgetpolicy import Notification, NotifierType
from modalscale.api.conditions import INVALID_URL, SECRET_KEY_MISSING, SECRET_NOT_FOUND, SECRET_UNREADABLE
from modalscale.costmodel.showback import ServiceWindow
from modalscale.notify.answers import DeliveryResult
from modalscale.operator.budget.plan import (
    BUDGET_PLURAL,
    ISVC_PLURAL,
    BudgetObserved,
    NodeHealth,
    TenantUsageRead,
    read_node_health,
    receiver_problem,
)
from modalscale.operator.budget.podstops import GONE_POD_RETENTION_S, GonePods
from modalscale.operator.isvc.objects import GATEWAY_LABEL, IMAGE_ENCODER_LABEL, SELECTOR_LABEL
from modalscale.operator.isvc.observe import read_json
from modalscale.operator.showback import PrometheusShowback, ShowbackUnavailable


@dataclass(frozen=True)
class Receiver:
    """One notification target, resolved from its Secret. ``url`` and ``secret`` never appear in ``repr``."""

    name: str
    type: NotifierType
    url: str = field(repr=False)
    secret: str | None = field(default=None, repr=False)


def read_tenant_usage(source: PrometheusShowback | None, window_s: int, now: datetime) -> TenantUsageRead:
    """Showback's inputs over ``[now - window_s, now)`` for a tenant-scoped policy (blocking; never raises).

    Args:
        source: Prometheus (None: not configured, reported as the reason the tenants' spend is unknown).
        window_s: Seconds since the period started (0: nothing spent yet, nothing read).
        now: End of the window (UTC), cut to whole seconds.
    Returns:
        :class:`TenantUsageRead`; ``error`` set when Prometheus did not answer or answered a partial or malformed
        result (the planner then holds: it never rejects on data it could not read).
    """
    if source is None:
        return TenantUsageRead(error="no Prometheus configured to read the gateway's per-tenant counters from "
                                     "(set MODALSCALE_PROMETHEUS_URL, chart value config.prometheusUrl)")
    if window_s <= 0:
        return TenantUsageRead()
    try:
        ledger, usage = source.read(window_s, now.replace(microsecond=0))
    except ShowbackUnavailable as exc:
        return TenantUsageRead(error=str(exc))
    windows = {k: ServiceWindow(k[0], k[1], lw.spend_usd, lw.available_replica_s) for k, lw in ledger.items()}
    return TenantUsageRead(windows, usage)


NODE_LEASE_NAMESPACE = "kube-node-lease"
"""Where each kubelet renews its node's Lease (named after the node)."""


class BudgetObserver:
    """Reads through one ``ApiClient``; never writes."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.leases = client.CoordinationV1Api(api)
        self.nodes_gone_since: dict[str, datetime] = {}
        """Node name -> when a read first found it gone (a deleted Node tells nothing more; kept while pods
        still name it)."""

    def read_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The BudgetPolicy as stored now (None when it is gone)."""
        return read_json(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, BUDGET_PLURAL, name)

    def list_isvcs(self, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        """Every InferenceService in ``namespaces``.

        Raises:
            ApiException: The list failed (the evaluation is retried; nothing is decided on partial data).
        """
        items: list[dict[str, Any]] = []
        for ns in namespaces:
            page = read_json(self.custom.list_namespaced_custom_object, GROUP, VERSION, ns, ISVC_PLURAL) or {}
            for item in page.get("items") or []:
                item.setdefault("apiVersion", f"{GROUP}/{VERSION}")
                item.setdefault("kind", "InferenceService")
                items.append(item)
        return items

    def observe(self, namespaces: Sequence[str], gone: GonePods | None = None,
                now: datetime | None = None) -> BudgetObserved:
        """InferenceServices and their pods (replicas; request-gateway and image-encoder pool pods apart) in
        ``namespaces``, and the
        pods ``gone`` recorded deleted there.

        A namespace whose pods cannot be listed (any API error) maps to None: replicas unknown, so the
        planner goes blind for the services there instead of assuming zero. The deleted pods are read after the
        listing, so a pod deleted before it is either listed or recorded (unless its watch event is late).

        Args:
            gone: The pod watch's records (None: none kept).
            now: Timezone-aware instant of the evaluation (prunes old records; required with ``gone``).
        """
        observed = BudgetObserved(isvcs=self.list_isvcs(namespaces))
        for ns in {i["metadata"]["namespace"] for i in observed.isvcs}:
            try:
                pods = read_json(self.core.list_namespaced_pod, ns, label_selector=SELECTOR_LABEL) or {}
                gateways = read_json(self.core.list_namespaced_pod, ns, label_selector=GATEWAY_LABEL) or {}
                encoders = read_json(self.core.list_namespaced_pod, ns, label_selector=IMAGE_ENCODER_LABEL) or {}
                observed.pods[ns] = list(pods.get("items") or [])
                observed.gateway_pods[ns] = list(gateways.get("items") or [])
                observed.image_encoder_pods[ns] = list(encoders.get("items") or [])
            except ApiException:
                observed.pods[ns] = None
        if gone is not None:
            if now is None:
                raise ValueError("observe: now is required with gone")
            observed.gone = gone.in_namespaces(observed.pods, now)
        bodies = [*(p for pods in observed.pods.values() for p in pods or []),
                  *(p for pods in observed.image_encoder_pods.values() for p in pods),
                  *(g.pod for gs in observed.gone.values() for g in gs)]
        observed.node_labels, observed.node_health = self.nodes({str(n) for b in bodies
                                                                 if (n := (b.get("spec") or {}).get("nodeName"))},
                                                                now)
        return observed

    def nodes(self, names: set[str], now: datetime | None = None
              ) -> tuple[dict[str, dict[str, str]] | None, dict[str, NodeHealth] | None]:
        """Labels and health of the nodes ``names`` (their capacity type prices the pods bound to them; their
        ``Ready`` condition says whether their kubelet still reports, and for a node that is not Ready its Lease
        says when it was last heard: :func:`read_node_health`).

        Args:
            now: This evaluation (UTC): a node first found gone now is remembered as gone since then
                (:attr:`NodeHealth.gone_since`; None: the clock's now).
        Returns:
            (node name -> labels, node name -> health); a node gone since maps to ``{}`` and a ``gone`` health;
            (None, None) when nodes cannot be read (e.g. a namespaced install without ``get nodes``): pods are then
            priced by what they asked for and charged by their own stops. A Lease that cannot be read (no ``get
            leases``, none) leaves the node's status heartbeat as its last-heard time.
        """
        labels: dict[str, dict[str, str]] = {}
        health: dict[str, NodeHealth] = {}
        for name in sorted(names):
            try:
                node = read_json(self.core.read_node, name)
            except ApiException:
                return None, None
            labels[name] = dict(((node or {}).get("metadata") or {}).get("labels") or {})
            health[name] = read_node_health(node)
            if node is not None and health[name].ready != "True":
                health[name] = read_node_health(node, self.node_lease(name))
            if node is None:
                since = self.nodes_gone_since.setdefault(name, now or datetime.now(timezone.utc))
                health[name] = replace(health[name], gone_since=since)
            else:
                self.nodes_gone_since.pop(name, None)
        oldest = (now or datetime.now(timezone.utc)) - timedelta(seconds=2 * GONE_POD_RETENTION_S)
        for name in [n for n, since in self.nodes_gone_since.items() if since < oldest]:  # no record names it now
            del self.nodes_gone_since[name]
        return labels, health

    def node_lease(self, name: str) -> dict[str, Any] | None:
        """The Lease the kubelet of node ``name`` renews (``kube-node-lease/<name>``); None when it cannot be read."""
        try:
            return read_json(self.leases.read_namespaced_lease, name, NODE_LEASE_NAMESPACE)
        except ApiException:
            return None

    def read_receivers(self, namespace: str, notifications: Sequence[Notification]
                       ) -> tuple[list[Receiver], list[DeliveryResult]]:
        """Resolve each notification's URL (and signing secret) from its Secret in ``namespace``.

        Returns:
            (receivers that can be tried, one failed :class:`DeliveryResult` per receiver that cannot:
            reason ``SecretNotFound``, ``SecretKeyMissing`` (also for an empty ``urlKey``/``signingSecretKey``,
            naming the ``spec.notifications[i].secretRef`` field) or ``SecretUnreadable`` (a read error, or a
            value that is not base64 of non-empty UTF-8 text). Never raises for a Secret problem (the daemon
            records it in ``AlertDelivered`` and an Event); messages name the Secret, the key and the field,
            never a value.
        """
        ok: list[Receiver] = []
        problems: list[DeliveryResult] = []
        cache: dict[str, dict[str, Any] | None] = {}
        for i, n in enumerate(notifications):
            ref = n.secret_ref
            where = f"Secret {namespace}/{ref.name}"
            field = f"spec.notifications[{i}].secretRef"
            # An empty key is a key no Secret can hold (the CRD refuses it; an older CRD did not): name the field.
            empty = [f"{field}.{attr}" for attr, k in (("urlKey", ref.url_key),
                                                      ("signingSecretKey", ref.signing_secret_key))
                     if k is not None and not k.strip()]
            if empty:
                problems.append(receiver_problem(n, SECRET_KEY_MISSING, (
                    f"{' and '.join(empty)} of notification {n.name} is empty; set it to the key of {where} that "
                    f"holds the value (urlKey defaults to url)")))
                continue
            if ref.name not in cache:
                try:
                    cache[ref.name] = read_json(self.core.read_namespaced_secret, ref.name, namespace)
                except ApiException as exc:
                    problems.append(receiver_problem(n, SECRET_UNREADABLE,
                                                     _unreadable_secret(where, f"{field}.name", n.name, exc)))
                    continue
            secret = cache[ref.name]
            if secret is None:
                problems.append(receiver_problem(n, SECRET_NOT_FOUND,
                                                 f"{where} (secretRef of notification {n.name}) was not found"))
                continue
            data = secret.get("data") or {}
            missing = [k for k in (ref.url_key, ref.signing_secret_key) if k is not None and k not in data]
            if missing:
                problems.append(receiver_problem(n, SECRET_KEY_MISSING,
                                                 f"{where} has no key {', '.join(missing)} (notification {n.name})"))
                continue
            try:
                url = _secret_value(data, ref.url_key, f"{field}.urlKey")
                signing = (_secret_value(data, ref.signing_secret_key, f"{field}.signingSecretKey")
                           if ref.signing_secret_key is not None else None)
            except ValueError as exc:
                problems.append(receiver_problem(n, SECRET_UNREADABLE,
                                                 f"{where}: {exc} (notification {n.name})"))
                continue
            if not _is_http_url(url):  # named here, with the Secret and key, not later as a bare UnsupportedProtocol
                problems.append(receiver_problem(n, INVALID_URL, (
                    f"{where}: the value of key {ref.url_key} ({field}.urlKey) is not an http(s) URL with a host "
                    f"(notification {n.name}); put the webhook URL there")))
                continue
            ok.append(Receiver(n.name, n.type, url, signing))
        return ok, problems


def _unreadable_secret(where: str, field: str, notification: str, exc: ApiException) -> str:
    """The message of a Secret read that failed with ``exc`` (not a 404): the Secret, the notification and its
    ``secretRef`` field, and for a 403 the fix. The chart grants ``get`` only on the Secrets named in
    ``notifications.secretNames`` (RBAC ``resourceNames``), so a Secret missing there answers 403, not 404."""
    said = f"{where} ({field} of notification {notification}) could not be read (HTTP {exc.status}"
    if exc.status == 403:
        name = where.rsplit("/", 1)[-1]
        return (f"{said} Forbidden: the operator may not get it); add {name} to the chart value "
                f"notifications.secretNames (helm upgrade ... --set 'notifications.secretNames={{...,{name}}}'), "
                f"or, without the chart, grant the operator get on it (a Role rule on secrets with resourceNames "
                f"[{name}], bound to its ServiceAccount)")
    return f"{said})"


def _is_http_url(url: str) -> bool:
    """Whether ``url`` is an ``http`` or ``https`` URL with a host (what every notifier posts to)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # raises ValueError for a port that is no number in 0-65535
    except ValueError:  # an unclosed IPv6 host, a port out of range
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _secret_value(data: dict[str, Any], key: str, field: str) -> str:
    """The text of ``data[key]`` (base64 of UTF-8, as the API returns Secret data), stripped.

    Raises:
        ValueError: Not base64, not UTF-8, or empty; the message names ``key`` and ``field``, never the value.
    """
    try:
        text = base64.b64decode(str(data[key]), validate=True).decode("utf-8").strip()
    except (binascii.Error, ValueError):
        raise ValueError(f"the value of key {key} ({field}) is not base64-encoded UTF-8 text") from None
    if not text:
        raise ValueError(f"the value of key {key} ({field}) is empty")
    return text
