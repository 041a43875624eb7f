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


def event_reasons(api: Any, ns: str, name: str) -> list[str]:
    """The reasons of the Events about ``name`` (any kind), in the API server's order."""
    events = client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}")
    return [e.reason for e in events.items]


def wait_event(api: Any, ns: str, name: str, reason: str, timeout_s: float = 30) -> list[str]:
    """Wait until an Event with ``reason`` about ``name`` exists; returns every reason about ``name`` then.

    The operator writes the status first and posts its Event after it (a refusal on the same thread, a reconcile's
    through ``apply.EventPoster``'s queue), so a test that saw the status waits here instead of reading the Events
    once.
    """
    return wait_for(lambda: r if reason in (r := event_reasons(api, ns, name)) else None, timeout_s,
                    f"a {reason} Event about {ns}/{name}")


def kubectl(cluster: Any, *args: str) -> str:
    """The pinned kubectl's output against ``cluster``; a non-zero exit fails the test with its stderr."""
    import subprocess

    from modalscale.devenv.binaries import ensure_binaries

    exe = ensure_binaries(lambda _m: None).kubectl
    proc = subprocess.run([str(exe), f"--kubeconfig={cluster.kubeconfig}", *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout
