"""The only writer to the Kubernetes API: executes a plan's writes, status patch and Events."""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from modalscale import GROUP, VERSION
from modalscale.api.isvc_status import IsvcStatus, write_isvc_status
from modalscale.operator.isvc.plan import Write
from modalscale.operator.metrics import OperatorMetrics

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"

log = logging.getLogger("modalscale.operator.writes")


class Writer:
    """Applies writes through one ``ApiClient`` and counts them in ``metrics``."""

    def __init__(self, api: client.ApiClient, metrics: OperatorMetrics, component: str = "modalscale-operator"):
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.events = client.EventsV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.metrics = metrics
        self.component = component

    def _count(self, kind: str, verb: str, namespace: str, name: str) -> None:
        self.metrics.api_writes.labels(kind=kind, verb=verb).inc()
        log.info("Wrote kind=%s verb=%s namespace=%s name=%s", kind, verb, namespace, name)

    def apply(self, namespace: str, write: Write) -> None:
        """Create, patch or delete one child. A create that finds the object already there, or a delete that finds
        it gone, is not an error."""
        self._count(write.kind, write.action, namespace, write.name)
        try:
            if write.action == "delete" and write.kind in ("Deployment", "Service"):
                (self.apps.delete_namespaced_deployment if write.kind == "Deployment"
                 else self.core.delete_namespaced_service)(write.name, namespace)
            elif write.kind == "Deployment":
                if write.action == "create":
                    self.apps.create_namespaced_deployment(namespace, write.body)  # type: ignore[arg-type]  # the client sends a dict body as is
                else:
                    self.apps.patch_namespaced_deployment(write.name, namespace, write.body, _content_type=SMP)
            elif write.kind == "Service":
                if write.action == "create":
                    self.core.create_namespaced_service(namespace, write.body)  # type: ignore[arg-type]  # the client sends a dict body as is
                else:
                    self.core.patch_namespaced_service(write.name, namespace, write.body, _content_type=SMP)
            elif write.kind == "ConfigMap":
                if write.action == "create":
                    self.core.create_namespaced_config_map(namespace, write.body)  # type: ignore[arg-type]  # the client sends a dict body as is
                else:
                    self.core.patch_namespaced_config_map(write.name, namespace, write.body, _content_type=MERGE)
            elif write.kind in self._gateway_calls():
                create, patch, delete = self._gateway_calls()[write.kind]
                if write.action == "create":
                    create(namespace, write.body)
                elif write.action == "delete":
                    delete(write.name, namespace)
                else:
                    patch(write.name, namespace, write.body, _content_type=SMP)
            else:
                raise ValueError(f"unknown kind {write.kind}")
        except ApiException as exc:
            if write.action == "create" and exc.status == 409:
                # Created meanwhile (the other replica before a handover), or there all along but not in the watch
                # cache: someone removed its managed-by label, or it predates the label. Patch it to the desired
                # object, as a pass that had read it would have (labels and ownerReferences included), so that it
                # is back in the cache and the next pass finds it.
                self._count(write.kind, "patch", namespace, write.name)
                self._patch(namespace, write.kind, write.name, write.body)
                return
            if write.action == "delete" and exc.status == 404:
                return  # Already gone.
            raise

    def _patch(self, namespace: str, kind: str, name: str, body: dict[str, Any]) -> None:
        if kind == "Deployment":
            self.apps.patch_namespaced_deployment(name, namespace, body, _content_type=SMP)
        elif kind == "Service":
            self.core.patch_namespaced_service(name, namespace, body, _content_type=SMP)
        elif kind == "ConfigMap":
            self.core.patch_namespaced_config_map(name, namespace, body, _content_type=MERGE)
        else:
            self._gateway_calls()[kind][1](name, namespace, body, _content_type=SMP)

    def _gateway_calls(self) -> dict[str, tuple[Any, Any, Any]]:
        """(create, patch, delete) of the kinds only the gateway adds, and of Deployments and Services for deletes
        (the gateway's Deployment and the Service ``<name>-replicas`` when the gateway is turned off)."""
        return {
            "ServiceAccount": (self.core.create_namespaced_service_account, self.core.patch_namespaced_service_account,
                               self.core.delete_namespaced_service_account),
            "Role": (self.rbac.create_namespaced_role, self.rbac.patch_namespaced_role,
                     self.rbac.delete_namespaced_role),
            "RoleBinding": (self.rbac.create_namespaced_role_binding, self.rbac.patch_namespaced_role_binding,
                            self.rbac.delete_namespaced_role_binding),
            "NetworkPolicy": (self.networking.create_namespaced_network_policy,
                              self.networking.patch_namespaced_network_policy,
                              self.networking.delete_namespaced_network_policy),
            "PodDisruptionBudget": (self.policy.create_namespaced_pod_disruption_budget,
                                    self.policy.patch_namespaced_pod_disruption_budget,
                                    self.policy.delete_namespaced_pod_disruption_budget),
        }

    def patch_status(self, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge-patch ``status`` (a no-op when ``patch`` is empty)."""
        if not patch:
            return
        self._count(plural, "patch-status", namespace, name)
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, plural, name, {"status": patch}, _content_type=MERGE)

    def patch_isvc_status(self, namespace: str, name: str, status: IsvcStatus,
                          stored: IsvcStatus | None) -> dict[str, Any]:
        """Write an InferenceService's status: the merge patch ``write_isvc_status(status, stored)``; nothing when
        it is empty (an unchanged status is not written). Returns the patch written (``{}``: none)."""
        patch = write_isvc_status(status, stored)
        self.patch_status("inferenceservices", namespace, name, patch)
        return patch

    def patch_annotations(self, plural: str, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        """Merge-patch ``metadata.annotations`` of one of our custom objects (a None value deletes the key).

        Used by BudgetPolicies to set and lift the ``budget.modalscale.io/cap-*`` annotation on
        InferenceServices. Returns False when the object is gone (404); other API errors raise.
        """
        self._count(plural, "patch-annotations", namespace, name)
        try:
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name, {"metadata": {"annotations": annotations}},
                _content_type=MERGE)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create_peering(self, plural: str, namespace: str | None, body: dict[str, Any]) -> None:
        """Create one of kopf's peering objects (``kopf.dev/v1``): ``namespace`` None = cluster-scoped.

        Raises:
            kubernetes.client.rest.ApiException: Any refusal, 409 (it already exists) included.
        """
        self._count(plural, "create", namespace or "", body["metadata"]["name"])
        if namespace is None:
            self.custom.create_cluster_custom_object("kopf.dev", "v1", plural, body)
        else:
            self.custom.create_namespaced_custom_object("kopf.dev", "v1", namespace, plural, body)

    def event(self, body: dict[str, Any], type_: str, reason: str, message: str,
              logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        """Post a Kubernetes Event about ``body`` (failures are logged, never raised)."""
        meta = body["metadata"]
        import datetime as dt

        now = dt.datetime.now(dt.UTC)
        ev = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name'][:200]}-", "namespace": meta["namespace"]},
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": f"{GROUP}/{self.component}", "reportingInstance": self.component,
            "action": "Reconcile", "reason": reason, "type": type_, "note": message[:1024],
            "regarding": {"apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"), "kind": body["kind"],
                          "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
        }
        self._count("Event", "create", meta["namespace"], meta["name"])
        try:
            self.events.create_namespaced_event(meta["namespace"], ev)  # type: ignore[arg-type]  # the client sends a dict body as is
        except ApiException as exc:
            logger.warning("Posting the event failed: reason=%s status=%s body=%s", reason, exc.status, exc.body)
