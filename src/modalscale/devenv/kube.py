"""Small helpers over the Kubernetes client for the local environment: install CRDs, wait with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.2,
             explain: Callable[[], str] | None = None) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value.

    Args:
        explain: Called once on timeout; its text (e.g. :func:`describe_workload`) is appended to the error, so
            a failure seen only in CI says what the cluster looked like.
    Raises:
        TimeoutError: Not truthy within ``timeout_s`` seconds; the message names ``what``.
    """
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    message = f"timed out after {timeout_s:.0f} s waiting for {what} (last value: {last!r})"
    if explain is not None:
        try:
            message += "\n" + explain()
        except Exception as exc:  # the explanation must never hide the timeout itself
            message += f"\n(explaining failed: {exc!r})"
    raise TimeoutError(message)


def describe_workload(api_client: Any, namespace: str, label_selector: str, events: int = 15) -> str:
    """A short text of what the cluster shows for one workload: its Deployments' replica counts, its pods (node,
    phase, unmet conditions with reason and message) and the namespace's newest Events, for a timeout message.

    Args:
        api_client: A ``kubernetes.client.ApiClient``.
        label_selector: Selects the Deployments and pods, e.g. ``modalscale.io/inferenceservice=steady``.
        events: How many of the newest Events of ``namespace`` to include.
    """
    from kubernetes import client

    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    lines = [f"-- {namespace}/{label_selector}"]
    for d in apps.list_namespaced_deployment(namespace, label_selector=label_selector).items:
        st = d.status
        lines.append(f"deployment {d.metadata.name}: spec.replicas={d.spec.replicas} replicas={st.replicas} "
                     f"ready={st.ready_replicas} available={st.available_replicas}")
    pods = core.list_namespaced_pod(namespace, label_selector=label_selector).items
    if not pods:
        lines.append("no pods")
    for p in pods:
        unmet = [f"{c.type}={c.status}({c.reason}: {c.message})" for c in p.status.conditions or []
                 if c.status != "True"]
        lines.append(f"pod {p.metadata.name}: node={p.spec.node_name} phase={p.status.phase} "
                     f"deleting={p.metadata.deletion_timestamp is not None} {' '.join(unmet)}")
    for n in core.list_node().items:
        ready = next((c.status for c in n.status.conditions or [] if c.type == "Ready"), None)
        taints = [f"{t.key}:{t.effect}" for t in n.spec.taints or []]
        lines.append(f"node {n.metadata.name}: Ready={ready} taints={taints}")
    evs = sorted(core.list_namespaced_event(namespace).items,
                 key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp))
    lines += [f"event {e.type} {e.reason} {e.involved_object.kind}/{e.involved_object.name}: {e.message}"
              for e in evs[-events:]]
    return "\n".join(lines)


def load_crds(crd_dir: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinition documents in ``crd_dir/*.yaml`` (not its subfolders)."""
    docs = []
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


def install_crds(api_client: Any, crd_dir: Path, timeout_s: float = 60.0) -> list[str]:
    """Create or update every CRD in ``crd_dir`` (server-side apply) and wait until each is Established.

    Returns:
        The CRD names.
    Raises:
        kubernetes.client.rest.ApiException: The apiserver rejected a CRD.
        TimeoutError: A CRD did not become Established in time.
    """
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api_client)
    names = []
    docs = load_crds(crd_dir)  # crds/ holds kopf's peering CRDs too, as `kubectl apply -f crds/` installs them
    for doc in docs:
        name = doc["metadata"]["name"]
        names.append(name)
        ext.patch_custom_resource_definition(name, doc, field_manager="modalscale", force=True,
                                             _content_type="application/apply-patch+yaml")

    def established(n: str) -> bool:
        crd = ext.read_custom_resource_definition(n)
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    for n in names:
        wait_for(lambda n=n: established(n), timeout_s, f"CRD {n} Established")
    return names
