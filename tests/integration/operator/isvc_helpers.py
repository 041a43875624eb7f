"""InferenceService helpers shared by the operator integration tests."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from modalscale.devenv.kube import wait_for
from tests.factories import inference_service

GROUP, VERSION, PLURAL = "modalscale.io", "v1alpha1", "inferenceservices"


def make_isvc(name: str, **spec: Any) -> dict[str, Any]:
    """:func:`tests.factories.inference_service` with the direct Service said explicitly: the gateway is on by default,
    and these tests are about the replicas (a test of the gateway passes ``gateway={"enabled": True, ...}``)."""
    return inference_service(name, **{"gateway": {"enabled": False}, **spec})


def create(api: Any, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)


def get(api: Any, ns: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


def patch_spec(api: Any, ns: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"spec": spec})


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def wait_condition(api: Any, ns: str, name: str, type_: str, status: str, reason: str | None = None,
                   timeout_s: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        c = condition(get(api, ns, name), type_)
        if c and c["status"] == status and (reason is None or c["reason"] == reason):
            return c
        return None

    return wait_for(check, timeout_s, f"{type_}={status} ({reason}) on {ns}/{name}")
