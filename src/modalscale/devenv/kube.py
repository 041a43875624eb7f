"""Small helpers over the Kubernetes client for the local environment: install CRDs, wait with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.2) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value.

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
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what} (last value: {last!r})")


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
