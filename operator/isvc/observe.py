"""Read-only observation of an InferenceService's world (children, pods, model references, foreign HPAs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from modalscale import GROUP, VERSION
from modalscale.api.inferenceservice import IsvcSpec
from modalscale.api.isvc_status import IsvcStatus
from modalscale.operator.isvc.cache import ChildCaches
from modalscale.operator.isvc.objects import (
    GATEWAY_LABEL,
    IMAGE_ENCODER_LABEL,
    SELECTOR_LABEL,
    configmap_name,
    gateway_name,
    image_encoder_configmap_name,
    image_encoder_name,
    replicas_service_name,
    selector,
)
from modalscale.operator.isvc.plan import IsvcObserved


def read_json(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """Call a typed-client read with ``_preload_content=False`` and return the raw JSON dict, camelCase as
    kopf gives bodies (None on 404)."""
    try:
        resp = call(*args, _preload_content=False, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    body: dict[str, Any] = json.loads(resp.data)
    return body


class Observer:
    """Reads through one ``ApiClient``; never writes.

    With ``cache`` (the operator's, started and synced at start-up) the children (the operator's own objects, their
    pods and the namespace's HorizontalPodAutoscalers) come from the watch caches, no request made; without it,
    each is a GET (or LIST) per observation. Either way a read that cannot be made raises (an ``ApiException``, or
    ``cache.NotSynced`` before a cache's first list) and the reconcile holds, writing nothing. The
    InferenceService itself and the objects a spec names (its model ConfigMap or PVC, not the operator's) are
    always read from the API server.
    """

    def __init__(self, api: client.ApiClient, cache: ChildCaches | None = None) -> None:
        self.cache = cache
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.autoscaling = client.AutoscalingV2Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.networking = client.NetworkingV1Api(api)

    def read_isvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The InferenceService as stored now (None when it is gone)."""
        return read_json(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "inferenceservices", name)

    def child(self, kind: str, read: Callable[..., Any], name: str, namespace: str) -> dict[str, Any] | None:
        """One of the operator's objects: from the cache when there is one, else ``read`` (a typed-client GET)."""
        if self.cache is not None:
            return self.cache.get(kind, namespace, name)
        return read_json(read, name, namespace)

    def observe(self, spec: IsvcSpec, status: IsvcStatus) -> IsvcObserved:
        ns = spec.namespace
        obs = IsvcObserved(status=status)
        obs.deployment = self.child("Deployment", self.apps.read_namespaced_deployment, spec.name, ns)
        obs.service = self.child("Service", self.core.read_namespaced_service, spec.name, ns)
        obs.configmap = self.child("ConfigMap", self.core.read_namespaced_config_map, configmap_name(spec), ns)
        obs.poddisruptionbudget = self.child("PodDisruptionBudget", self.policy.read_namespaced_pod_disruption_budget,
                                             spec.name, ns)
        if self.cache is not None:
            obs.pods = self.cache.list_objects("Pod", ns, {SELECTOR_LABEL: spec.name})
        else:
            pods = read_json(self.core.list_namespaced_pod, ns, label_selector=selector(spec)) or {}
            obs.pods = pods.get("items") or []
        if spec.model.source == "ConfigMap" and spec.model.config_map:
            cm = read_json(self.core.read_namespaced_config_map, spec.model.config_map, ns)
            obs.user_configmap_keys = None if cm is None else sorted(
                list((cm.get("data") or {}).keys()) + list((cm.get("binaryData") or {}).keys()))
        if spec.model.source == "PVC" and spec.model.pvc_claim:
            obs.pvc_exists = (
                read_json(self.core.read_namespaced_persistent_volume_claim, spec.model.pvc_claim, ns) is not None
            )
        if self.cache is not None:
            hpa_items = self.cache.list_objects("HorizontalPodAutoscaler", ns)
        else:
            hpa_items = (read_json(self.autoscaling.list_namespaced_horizontal_pod_autoscaler, ns) or {}).get(
                "items") or []
        obs.foreign_autoscalers = [
            h["metadata"]["name"] for h in hpa_items
            if (h.get("spec") or {}).get("scaleTargetRef", {}).get("kind") == "Deployment"
            and h["spec"]["scaleTargetRef"].get("name") == spec.name]
        obs.gateway_objects = self.observe_gateway(spec)
        if spec.gateway.enabled:
            obs.gateway_pods = self.pods(ns, GATEWAY_LABEL, spec.name)
        obs.image_encoder = self.observe_image_encoder(spec)
        if spec.stages is not None:
            obs.image_encoder_pods = self.pods(ns, IMAGE_ENCODER_LABEL, spec.name)
        return obs

    def pods(self, namespace: str, label: str, value: str) -> list[dict[str, Any]]:
        """The pods labelled ``label=value`` (from the cache when there is one)."""
        if self.cache is not None:
            return self.cache.list_objects("Pod", namespace, {label: value})
        found = read_json(self.core.list_namespaced_pod, namespace, label_selector=f"{label}={value}") or {}
        return list(found.get("items") or [])

    def observe_image_encoder(self, spec: IsvcSpec) -> dict[str, dict[str, Any] | None]:
        """The image encoder pool's objects by kind (``plan.IMAGE_ENCODER_KINDS``). Without ``spec.stages`` the
        ConfigMap (made first, deleted last) and the Deployment are read first, enough to tell that an earlier staged
        spec left objects; when either is there, the others are read too: the plan deletes only an object it read
        and found its own (``plan.delete_refusal``)."""
        ns, name = spec.namespace, image_encoder_name(spec)
        first: dict[str, tuple[Callable[..., Any], str]] = {
            "ConfigMap": (self.core.read_namespaced_config_map, image_encoder_configmap_name(spec)),
            "Deployment": (self.apps.read_namespaced_deployment, name),
        }
        rest: dict[str, tuple[Callable[..., Any], str]] = {
            "Service": (self.core.read_namespaced_service, name),
            "PodDisruptionBudget": (self.policy.read_namespaced_pod_disruption_budget, name),
            "NetworkPolicy": (self.networking.read_namespaced_network_policy, name),
        }
        return self._children(ns, first, rest, read_rest=spec.stages is not None)

    def observe_gateway(self, spec: IsvcSpec) -> dict[str, dict[str, Any] | None]:
        """The gateway's objects by kind (``plan.GATEWAY_KINDS``). With the gateway disabled the Deployment (deleted
        first) and the ServiceAccount (made first, deleted last) are read first: two reads, enough to tell that an
        earlier enabled spec left objects, even a pass stopped between two deletes. When either is there, the others
        are read too: the plan deletes only an object it read and found its own (``plan.delete_refusal``)."""
        ns, gw, rs = spec.namespace, gateway_name(spec), replicas_service_name(spec)
        first: dict[str, tuple[Callable[..., Any], str]] = {
            "Deployment": (self.apps.read_namespaced_deployment, gw),
            "ServiceAccount": (self.core.read_namespaced_service_account, gw),
        }
        rest: dict[str, tuple[Callable[..., Any], str]] = {
            "NetworkPolicy": (self.networking.read_namespaced_network_policy, rs),
            "Role": (self.rbac.read_namespaced_role, gw),
            "RoleBinding": (self.rbac.read_namespaced_role_binding, gw),
            "Service": (self.core.read_namespaced_service, rs),
            "PodDisruptionBudget": (self.policy.read_namespaced_pod_disruption_budget, gw),
        }
        return self._children(ns, first, rest, read_rest=spec.gateway.enabled)

    def _children(self, ns: str, first: dict[str, tuple[Callable[..., Any], str]],
                  rest: dict[str, tuple[Callable[..., Any], str]], read_rest: bool) -> dict[str, dict[str, Any] | None]:
        """``first``'s objects by kind, and ``rest``'s when ``read_rest`` or one of ``first`` is there."""
        found = {kind: self.child(kind, read, n, ns) for kind, (read, n) in first.items()}
        if read_rest or any(o is not None for o in found.values()):
            found.update({kind: self.child(kind, read, n, ns) for kind, (read, n) in rest.items()})
        return found
